package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pgshard/pgshard/cluster"
)

// The catalog crash: the run's catalog's own server — the cluster's
// catalog server (`pgshard dev up --catalog-server`), no shard's — is
// stopped without a shutdown checkpoint for the hold, then started again
// (crash recovery). Everyone who reads or writes the catalog loses it at
// once: the mover (Env.Catalog), whose move in flight stops and is
// resumed from the move journal by its retries once the server is back
// (the heal finishes what is left), and the store under test's followers
// (the chaos-owned proxy, the router), whose leases — TTL CatalogCutTTL
// in a run with catalog crashes, as with cuts — lapse within the hold:
// they must refuse keyed operations until they acquire again (verify's
// lease invariant judges the crash as it judges a cut).
//
//	mover (Env.Catalog) ─────────┐
//	proxy's follower ────────────┼──▶ catalog server ✕ (hold) ──▶ started again
//	router's follower, reloads ──┘

// catalogCrashInfo: the proxy's resource, like a cut (a proxy restarted
// while the catalog is down could not read its map to start; and a cut
// and a crash never overlap, so each window judges one cause).
var catalogCrashInfo = kindInfo{
	needs:    NeedsProcessControl | NeedsCatalog | NeedsCatalogServer,
	global:   true,
	resource: "proxy",
	// Crash recovery, then the followers acquire again within a renewal
	// period (TTL/3).
	settle: 3 * time.Second,
	params: map[string]paramCheck{
		"mode": enumParam("immediate", "kill"),
	},
	new: func() Fault { return &catalogCrash{} },
}

// catalogCrash is KindCatalogCrash.
type catalogCrash struct {
	mu      sync.Mutex
	oldPID  int
	logPath string
	offset  int64
	crashT  time.Duration // when the server was down, on the history's clock
	crashed bool
}

func (*catalogCrash) Kind() Kind   { return KindCatalogCrash }
func (*catalogCrash) Needs() Needs { return catalogCrashInfo.needs }

// catalogFollowers names the store under test's followers of the run's
// catalog as the op lines' via says them, comma-separated.
func (e *Env) catalogFollowers() string {
	if len(e.CatalogFollowers) == 0 {
		return "proxy"
	}
	return strings.Join(e.CatalogFollowers, ",")
}

// catalogServerCheck says why env's run catalog is not on the cluster's
// own catalog server, "" when it is.
func (e *Env) catalogServerCheck() string {
	if e.Cluster == nil {
		return "" // the process-control need says it
	}
	srv, ok := e.Cluster.CatalogServer()
	if !ok {
		return "a catalog server of the cluster's own (`pgshard dev up --catalog-server`); this cluster has none, so the run's catalog is on shard0's server (crash shard0 with shard-crash instead)"
	}
	addr := net.JoinHostPort(srv.Host, strconv.Itoa(srv.Port))
	if e.CatalogServer != addr {
		where := e.CatalogServer
		if where == "" {
			where = "no server"
		}
		return fmt.Sprintf("the run's catalog on the cluster's catalog server %s (catalog.dsn names it); it is on %s", addr, where)
	}
	return ""
}

// Inject stops the catalog server's Postgres (param mode: immediate, the
// default, like pg_ctl stop -m immediate; or kill, SIGKILL of the
// postmaster) and waits until it and its backends are gone. Evidence:
// old_pid, mode, follower (the followers of the catalog, as catalog-cut
// names them), ttl_ms (their lease TTL), cut_t (ns on the ops' clock,
// taken once the server and its backends are gone: every answer a
// follower had from the catalog was sent earlier).
func (f *catalogCrash) Inject(ctx context.Context, env *Env, _ int, p Params, _ *rand.Rand) (Evidence, error) {
	if env.Cluster == nil {
		return Evidence{}, errors.New("catalog-crash: no process control: the env has no local cluster")
	}
	if why := env.catalogServerCheck(); why != "" {
		return Evidence{}, errors.New("catalog-crash: needs " + why)
	}
	modeName := p.str("mode", "immediate")
	mode, err := cluster.ParseStopMode(modeName)
	if err != nil || mode == cluster.Fast {
		return Evidence{}, fmt.Errorf("catalog-crash: param mode %q: want immediate or kill", modeName)
	}
	srv, _ := env.Cluster.CatalogServer()
	fields := map[string]any{"mode": modeName, "old_pid": srv.PID, "follower": env.catalogFollowers(), "ttl_ms": env.CatalogTTL.Milliseconds()}
	f.mu.Lock()
	f.oldPID, f.logPath, f.offset = srv.PID, srv.LogPath(), fileSize(srv.LogPath())
	f.mu.Unlock()
	if err := env.Cluster.StopCatalog(ctx, mode); err != nil {
		return Evidence{Fields: fields}, fmt.Errorf("catalog-crash: %w", err)
	}
	crash := env.since(time.Now())
	f.mu.Lock()
	f.crashT, f.crashed = crash, true
	f.mu.Unlock()
	fields["cut_t"] = int64(crash)
	env.logf("catalog-crash: the catalog server %s is down (%s; followers %s, lease ttl %v)", srv.Name, modeName, env.catalogFollowers(), env.CatalogTTL)
	return Evidence{Landed: false, Fields: fields}, nil
}

// Heal starts the catalog server again and waits until it accepts
// connections, after crash recovery. Evidence: heal_t (ns on the ops'
// clock, taken before the server is started: nothing was answered before
// it), ttl_ms, old_pid, new_pid, recovery (the server log's lines about
// the crash and the recovery). Landed: the server was down longer than
// the followers' lease TTL and a new postmaster ran crash recovery.
func (f *catalogCrash) Heal(ctx context.Context, env *Env, _ int) (Evidence, error) {
	f.mu.Lock()
	crashed, crash, old, path, off := f.crashed, f.crashT, f.oldPID, f.logPath, f.offset
	f.mu.Unlock()
	if env.Cluster == nil || path == "" {
		return Evidence{}, nil // Inject failed before the stop
	}
	healT := env.since(time.Now())
	err := env.Cluster.StartCatalog(ctx)
	srv, _ := env.Cluster.CatalogServer()
	lines := logLines(path, off, recoveryPatterns)
	if lines == nil {
		lines = []string{}
	}
	ttl := env.CatalogTTL
	recovered := old != 0 && srv.PID != 0 && srv.PID != old && anyContains(lines, "automatic recovery in progress")
	ev := Evidence{
		Landed: crashed && recovered && ttl > 0 && healT-crash > ttl,
		Fields: map[string]any{"heal_t": int64(healT), "ttl_ms": ttl.Milliseconds(), "old_pid": old, "new_pid": srv.PID, "recovery": lines},
	}
	if err != nil {
		return ev, fmt.Errorf("catalog-crash: restart: %w", err)
	}
	env.logf("catalog-crash: the catalog server is back after %v (pid %d)", (env.since(time.Now()) - crash).Round(time.Millisecond), srv.PID)
	return ev, nil
}
