package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/reshard"
	"github.com/pgshard/pgshard/shardmap"
)

// The faults: one small type per kind, a file each (fault_<kind>.go).
//
//	Plan (schedule.go) ──▶ []Planned ──▶ Execute ──▶ NewFault(kind)
//	                                        │          ├─ Inject(env, shard, params, rng) ──▶ Evidence
//	                                        │          └─ Heal(env, shard)                ──▶ Evidence
//	                                        └─ record(Event) for each inject and heal
//
//	fault_terminate.go            pg_terminate_backend of the workload's busy sessions
//	fault_lost_ack.go             the relay drops commit replies (relay.go, pgframe.go)
//	fault_pgbouncer_kill.go       SIGKILL PgBouncer, start it again
//	fault_pgbouncer_pause.go      PAUSE / RESUME through the admin console
//	fault_pgbouncer_reconnect.go  RECONNECT through the admin console
//	fault_shard_crash.go          immediate stop of a shard, start (crash recovery); during=catch-up: catchup.go
//	fault_backend_kill.go         SIGKILL one backend (the postmaster reinitializes)
//	fault_latency.go, fault_stall.go, fault_reset.go, fault_partition.go   relay modes
//	fault_proxy_restart.go        SIGKILL the chaos-owned proxy, start it again
//	fault_move.go                 move, mover-kill: bucket-range moves in the run's catalog (reshard.Apply)
//	fault_catalog_cut.go          catalog-cut: the followers' (proxy, router) catalog relay cut past their lease TTL
//	fault_catalog_crash.go        catalog-crash: immediate stop of the catalog server, start (crash recovery)
//	movecatalog.go                the run's catalog, the shards' fences reset, the router that follows it
//	admin.go                      admin connections, PgBouncer's console, server logs

// Kind names a fault.
type Kind string

// The fault kinds. Each phase's Evidence.Landed is the fault's own reading
// of its evidence; for faults that act over a window (latency, stall,
// partition, lost-ack) only the heal's evidence can say whether anything
// was affected, and for restarts (shard-crash, backend-kill) the heal's
// evidence holds the crash recovery.
const (
	// KindTerminate: pg_terminate_backend of the workload's sessions that
	// are active or idle in transaction in the workload database on the
	// shard (direct admin connection; the chaos tool's own and the
	// verifier's sessions are spared). It polls up to param wait (default
	// 2s) until at least one such session exists; param count limits how
	// many it terminates (seeded choice; default all). Landed: at least
	// one was terminated. Clients see 57P01.
	KindTerminate Kind = "terminate"
	// KindLostAck: the shard's relay (via=shard, the default) or the
	// proxy's relay (via=proxy) is armed to drop the replies to the next
	// count (default 1) commits that committed (no error, committed true,
	// the transaction ended) after the server sent all of them, and to
	// reset both sides, for the hold; other commit replies (errors, lost
	// compare-and-swaps) are passed on and the arm kept. Landed (heal): a
	// committed commit's reply was dropped. Clients see their connection
	// fail after the commit was sent (an unknown outcome) while the commit
	// is in the database.
	KindLostAck Kind = "lost-ack"
	// KindPgBouncerKill: SIGKILL the shard's PgBouncer at inject, start it
	// again at heal. Landed: inject killed it (old_pid), heal started a
	// new one (new_pid).
	KindPgBouncerKill Kind = "pgbouncer-kill"
	// KindPgBouncerPause: PAUSE the workload database in the shard's
	// PgBouncer (admin console, bounded by param timeout, default 5s),
	// RESUME it at heal. Landed: PAUSE was answered and clients were seen
	// waiting (cl_waiting in SHOW POOLS while paused).
	KindPgBouncerPause Kind = "pgbouncer-pause"
	// KindPgBouncerReconnect: RECONNECT the workload database in the
	// shard's PgBouncer: every server connection is closed once released.
	// Instantaneous. Landed (heal): server connections that existed before
	// were closed and new ones made (SHOW SERVERS, watched up to 3 s).
	KindPgBouncerReconnect Kind = "pgbouncer-reconnect"
	// KindShardCrash: stop the shard's Postgres the way `pg_ctl stop -m
	// immediate` does (param mode=kill SIGKILLs the postmaster instead),
	// start it again at heal. Landed (heal): a new postmaster ran crash
	// recovery (the server log's recovery lines). With param
	// during=catch-up (needs the run's catalog) the crash waits, at most
	// param wait (default 30s), for a move of which the shard is the
	// source or the destination (param role: source, destination, any —
	// the default: the planner's seeded shard decides) to enter its
	// catch-up, and lands there, the mover held at that point until the
	// shard is down (catchup.go); evidence during, move, role, lo, hi,
	// from, to, waited_ms. None within the wait: no crash (landed false,
	// evidence no_catch_up).
	KindShardCrash Kind = "shard-crash"
	// KindBackendKill: SIGKILL one client backend of the workload on the
	// shard (busy ones preferred), so the postmaster terminates every
	// backend and reinitializes; heal waits until the shard accepts
	// connections again. Landed (heal): the server log shows the backend
	// killed by signal 9 and the reinitialization.
	KindBackendKill Kind = "backend-kill"
	// KindLatency: the shard's relay delays every chunk in either
	// direction by param delay (default 20ms) plus a seeded jitter in
	// [0, param jitter) (default 0) for the hold. Landed (heal): chunks
	// were delayed.
	KindLatency Kind = "latency"
	// KindStall: the shard's relay stops forwarding in both directions for
	// the hold; heal delivers what was held. Landed (heal): connections had
	// data held.
	KindStall Kind = "stall"
	// KindReset: the shard's relay resets every connection, as soon as
	// one has a request in flight (polled up to param wait, default 2s).
	// Instantaneous. Landed: a connection with a request in flight was cut
	// (idle pooled connections prove nothing).
	KindReset Kind = "reset"
	// KindPartition: the shard's relay blackholes its connections and
	// holds new ones unconnected for the hold; heal resets all of them.
	// Landed (heal): it held requests (in flight when it began, or sent
	// into it).
	KindPartition Kind = "partition"
	// KindProxyRestart: SIGKILL the chaos-owned proxy with its clients
	// connected, start it again on the same address at heal (the hold is
	// the downtime). Landed: inject killed it, heal started a new one.
	KindProxyRestart Kind = "proxy-restart"
	// KindMove: move a bucket range of the run's catalog (NeedsCatalog)
	// from its owner to another shard, online, with reshard.Apply run to
	// completion: param buckets is the range's width (default: seeded,
	// 8..32, cut at the owner's range end), to a seeded other shard (so
	// ranges go back and forth over a run); param freeze_budget bounds
	// each write freeze (default 100ms), param duty_cycle the share of
	// time the mover's background work may take (reshard.Options.DutyCycle,
	// default the mover's own, 1 = unpaced), param timeout the whole move
	// (default 60s); param hot=true starts the range at the bucket of a
	// seeded hot key of the workload (keys: hotset), so the moves take
	// the busiest ranges. A move an earlier fault left unfinished is finished
	// first. Instantaneous: the inject is the whole move; heal finishes a
	// move the inject left unfinished. Landed: the move reached done.
	KindMove Kind = "move"
	// KindMoverKill: a move as KindMove whose mover dies (Options.Hook
	// returns an error) at one of reshard.Steps — successive kills of a
	// run take the steps in turn from a seeded start, so a run of
	// len(reshard.Steps) kills stops at every one; the mover dies at the
	// first step it reaches at or after the drawn one (evidence step, and
	// drawn_step when they differ), a try another fault cut short being
	// resumed until it does — then heal resumes
	// it (reshard.Apply again) or rolls it back (reshard.Abort): param
	// resolve=resume|abort|seeded (default seeded). Landed (heal): the
	// mover was killed at its step, and the resume or abort finished
	// (done, or aborted — an abort after the flip completes the move).
	KindMoverKill Kind = "mover-kill"
	// KindCatalogCut: the relay between the store under test's followers
	// (the chaos-owned proxy, the router) and the run's catalog
	// (Env.CatalogRelay; NeedsCatalog) blackholes their connections and
	// holds new ones unconnected for the hold, which must exceed their
	// lease TTL (CatalogCutTTL) by a second at least; heal resets them.
	// The mover's catalog connection is not cut: the moves go on while
	// the followers cannot see them, their leases lapse and they must
	// refuse keyed operations until they reach the catalog again (verify:
	// the lease invariant). Landed (heal): the cut outlasted the TTL and
	// a follower tried the catalog during it.
	KindCatalogCut Kind = "catalog-cut"
	// KindCatalogCrash: stop the run's catalog's server — the cluster's
	// catalog server (NeedsCatalogServer: `pgshard dev up
	// --catalog-server`, catalog.dsn naming it) — the way `pg_ctl stop
	// -m immediate` does (param mode=kill SIGKILLs the postmaster), for
	// the hold, which must exceed the followers' lease TTL
	// (CatalogCutTTL) by a second at least; start it again at heal. The
	// mover's move in flight stops and its retries resume it from the
	// move journal once the server is back; the followers (the
	// chaos-owned proxy, the router) must refuse keyed operations once
	// their lease lapsed, until they acquire again (verify: the lease
	// invariant, as for a cut). Landed (heal): the server was down
	// longer than the TTL and a new postmaster ran crash recovery.
	KindCatalogCrash Kind = "catalog-crash"
)

// Kinds returns every fault kind, in a fixed order.
func Kinds() []Kind {
	return []Kind{KindTerminate, KindLostAck, KindPgBouncerKill, KindPgBouncerPause, KindPgBouncerReconnect,
		KindShardCrash, KindBackendKill, KindLatency, KindStall, KindReset, KindPartition, KindProxyRestart,
		KindMove, KindMoverKill, KindCatalogCut, KindCatalogCrash}
}

// ParseKind returns the kind named s.
func ParseKind(s string) (Kind, error) {
	if _, ok := kindInfos[Kind(s)]; ok {
		return Kind(s), nil
	}
	names := make([]string, 0, len(kindInfos))
	for _, k := range Kinds() {
		names = append(names, string(k))
	}
	return "", fmt.Errorf("unknown fault kind %q (known: %s)", s, strings.Join(names, ", "))
}

// Instantaneous reports whether the kind takes no hold (terminate, reset,
// pgbouncer-reconnect, backend-kill): its heal only collects evidence or
// waits for recovery.
func (k Kind) Instantaneous() bool { return kindInfos[k].instant }

// Needs says what a fault requires of its Env.
type Needs uint8

const (
	// NeedsProcessControl: Env.Cluster, a local cluster whose processes
	// this machine can signal and restart (a cluster from `pgshard dev
	// up` or cluster.Up).
	NeedsProcessControl Needs = 1 << iota
	// NeedsPooler: the target shard has a PgBouncer (a pooler DSN in
	// Env.Map).
	NeedsPooler
	// NeedsShardRelay: Env.Relays holds a relay for the target shard.
	NeedsShardRelay
	// NeedsProxy: Env.Proxy, the chaos-owned proxy process.
	NeedsProxy
	// NeedsProxyRelay: Env.ProxyRelay, the relay in front of the proxy.
	NeedsProxyRelay
	// NeedsCatalog: Env.Catalog, the run's own catalog that the store
	// under test follows (move faults; the router and the proxy follow it).
	NeedsCatalog
	// NeedsCatalogRelay: Env.CatalogRelay, the relay between the store
	// under test's followers and the run's catalog.
	NeedsCatalogRelay
	// NeedsCatalogServer: the run's catalog is on the cluster's own
	// catalog server (Env.Cluster.Catalog, at Env.CatalogServer), no
	// shard's.
	NeedsCatalogServer
)

// String lists the needs, e.g. "process-control+pooler".
func (n Needs) String() string {
	var parts []string
	for i, name := range []string{"process-control", "pooler", "shard-relay", "proxy", "proxy-relay", "catalog", "catalog-relay", "catalog-server"} {
		if n&(1<<i) != 0 {
			parts = append(parts, name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// Params are a fault's kind-specific parameters, e.g. delay=20ms,
// mode=immediate, count=3, via=proxy. Plan validates them.
type Params map[string]string

// Evidence is what an inject or a heal observed.
type Evidence struct {
	// Landed is the fault's own reading of Fields: the fault took effect
	// (see each Kind for what that means).
	Landed bool
	// Fields go into the history verbatim (JSON-encodable values), named
	// as verify/HISTORY.md says for each kind.
	Fields map[string]any
}

// Fault is one kind of fault. A Fault value carries the state of one
// injection from Inject to Heal (old PIDs, log offsets, counters): use a
// fresh value (NewFault) for each injection. Inject and Heal may block
// (bounded by ctx and by the kind's own limits).
type Fault interface {
	// Kind names the fault.
	Kind() Kind
	// Needs says what the fault requires of an Env (Check refuses a plan
	// whose env lacks it).
	Needs() Needs
	// Inject starts the fault on shard (an index into Env.Map.Shards; -1
	// for the proxy's kinds). rng is the fault's own seeded source.
	Inject(ctx context.Context, env *Env, shard int, p Params, rng *rand.Rand) (Evidence, error)
	// Heal ends it and collects the evidence only the end can give; a
	// no-op for instantaneous kinds other than backend-kill. Heal is
	// called even when Inject failed, and tolerates that.
	Heal(ctx context.Context, env *Env, shard int) (Evidence, error)
}

// Env is what faults act on.
type Env struct {
	// Cluster gives process control; nil when the cluster has none
	// (Check refuses kinds that need it).
	Cluster *cluster.Cluster
	// Map is the ORIGINAL shard map (not rewritten to the relays): its
	// direct DSNs serve admin connections, its pooler DSNs PgBouncer's
	// admin console.
	Map *shardmap.Map
	// Database is the workload's database, User the cluster user (the
	// PgBouncer admin).
	Database, User string
	// Relays, by shard index, are the relays in front of the endpoint the
	// workload uses for each shard (Postgres or PgBouncer); nil entries
	// when none.
	Relays []*Relay
	// ProxyRelay is the relay in front of the chaos-owned proxy (clients
	// → relay → proxy), or nil.
	ProxyRelay *Relay
	// Proxy is the chaos-owned proxy, or nil.
	Proxy *ProxyProcess
	// Catalog is the run's own catalog (runs with move faults): the
	// store under test follows it, the move faults plan and apply their
	// moves in it. nil otherwise.
	Catalog *catalog.Catalog
	// CatalogRelay is the relay between the store under test's followers
	// (the chaos-owned proxy, the router) and the run's catalog (runs
	// with catalog-cut faults), or nil; CatalogTTL is the lease TTL of
	// the followers of the run's catalog in runs with catalog-cut or
	// catalog-crash faults (CatalogCutTTL; 0 otherwise: the default),
	// CatalogFollowers their names as the op lines' via says them
	// ("proxy", "router"; nil: "proxy").
	CatalogRelay     *Relay
	CatalogTTL       time.Duration
	CatalogFollowers []string
	// CatalogServer is the host:port of the server the run's catalog is
	// on (runs with move faults), "" otherwise; catalog-crash needs it to
	// be the cluster's catalog server.
	CatalogServer string
	// HotBuckets are the buckets of the workload's hot keys (keys:
	// hotset), for moves with param hot; nil when it has none.
	HotBuckets []int
	// Logf receives progress and debug lines; nil is silent.
	Logf func(format string, args ...any)
	// MoverAround is the move faults' reshard.Options.Around: nil (the
	// production mover) except in a run of a mover-level mutant
	// (chaos/mutant.Mover).
	MoverAround func(context.Context, reshard.CutStep) error
	// Clock is the history's time origin (its lines' times count from
	// it): the move faults give each freeze's start on it (evidence
	// freeze_t). Zero: no freeze_t.
	Clock time.Time

	// moves is the move faults' shared state (mover-kill's next step);
	// nil until the first needs it (move faults run one at a time).
	moves *moveState
	// catchUps matches shard crashes aimed at a catch-up with the moves
	// (catchup.go); set by Run with the run's catalog, nil otherwise.
	catchUps *catchUpBoard
	// poolers guards stopping and starting the PgBouncers between the
	// pgbouncer-kill fault and the watch (pooler_watch.go); set by Run
	// before the faults start, nil outside a run (no watch).
	poolers *poolerGuard
}

func (e *Env) logf(format string, args ...any) {
	if e != nil && e.Logf != nil {
		e.Logf(format, args...)
	}
}

// shardName names shard i of the map, "" for -1.
func (e *Env) shardName(i int) string {
	if i < 0 || e.Map == nil || i >= len(e.Map.Shards) {
		return ""
	}
	return e.Map.Shards[i].Name
}

// mapShard returns shard i of the map.
func (e *Env) mapShard(i int) (shardmap.Shard, error) {
	if e.Map == nil {
		return shardmap.Shard{}, errors.New("the env has no shard map")
	}
	if i < 0 || i >= len(e.Map.Shards) {
		return shardmap.Shard{}, fmt.Errorf("shard %d: the map has shards 0..%d", i, len(e.Map.Shards)-1)
	}
	return e.Map.Shards[i], nil
}

// clusterShard returns the index in Env.Cluster of the map's shard i
// (matched by name).
func (e *Env) clusterShard(i int) (int, error) {
	if e.Cluster == nil {
		return 0, errors.New("no process control: the env has no local cluster")
	}
	sh, err := e.mapShard(i)
	if err != nil {
		return 0, err
	}
	for j := range e.Cluster.Shards {
		// Only the name: the PID fields change under the cluster's lock.
		if e.Cluster.Shards[j].Name == sh.Name {
			return j, nil
		}
	}
	return 0, fmt.Errorf("shard %s is not one of the cluster's", sh.Name)
}

// relay returns the relay of shard i.
func (e *Env) relay(i int) (*Relay, error) {
	if i < 0 || i >= len(e.Relays) || e.Relays[i] == nil {
		return nil, fmt.Errorf("shard %s has no relay", e.shardName(i))
	}
	return e.Relays[i], nil
}

// NewFault returns a fresh fault of kind k.
func NewFault(k Kind) (Fault, error) {
	info, ok := kindInfos[k]
	if !ok {
		_, err := ParseKind(string(k))
		return nil, err
	}
	return info.new(), nil
}

// kindInfo is what the planner and Check know of a kind.
type kindInfo struct {
	needs   Needs
	instant bool // takes no hold
	global  bool // aims at the proxy, not at a shard
	// resource is what two faults must not share at once: "proc" (a
	// shard's processes), "relay" (a shard's relay), "proxy",
	// "proxy-relay".
	resource string
	// settle estimates how long after its hold a fault still occupies its
	// resource (restarts, recovery); the planner spaces faults by it.
	settle time.Duration
	params map[string]paramCheck
	// byParams overrides needs, global and resource from the params
	// (lost-ack's via).
	byParams func(p Params) (needs Needs, global bool, resource string)
	new      func() Fault
}

func (ki kindInfo) target(p Params) (needs Needs, global bool, resource string) {
	if ki.byParams != nil {
		return ki.byParams(p)
	}
	return ki.needs, ki.global, ki.resource
}

var kindInfos = map[Kind]kindInfo{
	KindTerminate:          terminateInfo,
	KindLostAck:            lostAckInfo,
	KindPgBouncerKill:      pgbouncerKillInfo,
	KindPgBouncerPause:     pgbouncerPauseInfo,
	KindPgBouncerReconnect: pgbouncerReconnectInfo,
	KindShardCrash:         shardCrashInfo,
	KindBackendKill:        backendKillInfo,
	KindLatency:            latencyInfo,
	KindStall:              stallInfo,
	KindReset:              resetInfo,
	KindPartition:          partitionInfo,
	KindProxyRestart:       proxyRestartInfo,
	KindMove:               moveInfo,
	KindMoverKill:          moverKillInfo,
	KindCatalogCut:         catalogCutInfo,
	KindCatalogCrash:       catalogCrashInfo,
}

// paramCheck validates one parameter's value.
type paramCheck func(v string) error

func durationParam(lo, hi time.Duration) paramCheck {
	return func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration (e.g. 20ms)", v)
		}
		if d < lo || d > hi {
			return fmt.Errorf("%v is outside %v..%v", d, lo, hi)
		}
		return nil
	}
}

func intParam(lo, hi int) paramCheck {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		if n < lo || n > hi {
			return fmt.Errorf("%d is outside %d..%d", n, lo, hi)
		}
		return nil
	}
}

func floatParam(lo, hi float64) paramCheck {
	return func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		if f < lo || f > hi {
			return fmt.Errorf("%g is outside %g..%g", f, lo, hi)
		}
		return nil
	}
}

func enumParam(values ...string) paramCheck {
	return func(v string) error {
		if !slices.Contains(values, v) {
			return fmt.Errorf("%q: want %s", v, strings.Join(values, " or "))
		}
		return nil
	}
}

// validateParams checks p against kind k's parameters; each problem names
// the key.
func validateParams(k Kind, p Params) []string {
	info := kindInfos[k]
	var probs []string
	for _, key := range slices.Sorted(maps.Keys(p)) {
		check, ok := info.params[key]
		if !ok {
			known := slices.Sorted(maps.Keys(info.params))
			if len(known) == 0 {
				probs = append(probs, fmt.Sprintf("params.%s: %s takes no parameters", key, k))
			} else {
				probs = append(probs, fmt.Sprintf("params.%s: unknown parameter of %s (known: %s)", key, k, strings.Join(known, ", ")))
			}
			continue
		}
		if err := check(p[key]); err != nil {
			probs = append(probs, fmt.Sprintf("params.%s: %v", key, err))
		}
	}
	return probs
}

// Accessors of validated params (Inject re-checks: it may be called with
// params Plan never saw).

func (p Params) duration(key string, def time.Duration) (time.Duration, error) {
	v, ok := p[key]
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("param %s: %q is not a duration", key, v)
	}
	return d, nil
}

func (p Params) int(key string, def int) (int, error) {
	v, ok := p[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("param %s: %q is not an integer", key, v)
	}
	return n, nil
}

func (p Params) float(key string, def float64) (float64, error) {
	v, ok := p[key]
	if !ok {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("param %s: %q is not a number", key, v)
	}
	return f, nil
}

func (p Params) str(key, def string) string {
	if v, ok := p[key]; ok {
		return v
	}
	return def
}
