package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/admin"
	"github.com/pgshard/pgshard/proxy/internal/auth"
	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/engine"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/store"
)

// The admin console: a client that connects to the virtual database
// Config.AdminDatabase ("pgshard") as one of Config.AdminUsers talks to the
// proxy itself, PgBouncer-style, over the simple query protocol: one
// result set (or command tag) per command, PgBouncer's column names where
// the concept is the same, so that dashboards and scripts written for
// PgBouncer's console keep working (a "database" of PgBouncer is a shard
// here). Any other user connecting to that database is refused with 42501
// before anything is said.
//
//	startup (admin db) ─▶ authenticate ─▶ admin user? ─no─▶ FATAL 42501
//	                                          │ yes
//	                                          ▼
//	consoleSession.serve (internal/engine/adminsession.go): Query ─▶ admin.Query(adminHost) ─▶ result set | tag | error
//	                      Parse/Bind/... ─▶ one error per pipeline ("simple protocol only")
//
// The commands live in proxy/internal/admin (its doc.go lists them), which
// sees the proxy only through admin.Host: adminHost (below) answers it
// with snapshots of the current generation and runs its actions (PAUSE,
// KILL, RELOAD, ...) on the pools and sessions.

// versionString is the build's version (BuildVersion, or the module's).
func versionString() string {
	if BuildVersion != "" {
		return BuildVersion
	}
	return "dev"
}

// adminHost is the console's view of the proxy (admin.Host) for an admin
// session s: snapshots of the current generation (read at each call, so
// the SHOW after a RELOAD in one query string sees the new one) and the
// actions, logged as s's user's.
type adminHost struct {
	by engine.ConsoleCaller
	c  *Server
	// shutdown: a SHUTDOWN asked for the graceful shutdown, which begins
	// once the console has its answer (Server.ConsoleQuery).
	shutdown bool
}

// srv is the current generation.
func (h *adminHost) srv() *generation { return h.c.current() }

var _ admin.Host = (*adminHost)(nil)

func (h *adminHost) Version() string { return versionString() }

func (h *adminHost) ShardNames() []string {
	srv := h.srv()
	names := make([]string, len(srv.pools))
	for i, p := range srv.pools {
		names[i] = p.Shard.Name
	}
	return names
}

// poolMode is the pool mode SHOW POOLS and SHOW DATABASES name.
func (g *generation) poolMode() string {
	mode := g.cfg.PoolMode
	if mode == PoolModeDefault {
		mode = PoolTransaction
	}
	return mode.String()
}

func (h *adminHost) Pools() admin.Pools {
	srv := h.srv()
	pinned := map[string]int{} // shard → sessions of the main database pinned there
	for _, ps := range srv.srv.PinnedSessions() {
		if srv.srv.dbs[ps.DB] == nil {
			pinned[ps.Shard]++
		}
	}
	out := admin.Pools{Mode: srv.poolMode(), Size: srv.cfg.PoolSize, LoginsDisabled: srv.srv.life.disabled.Load()}
	for _, p := range srv.pools {
		f := p.Figures()
		st := p.Stats
		a := p.Stats.Averages()
		sh := admin.Shard{
			Name: p.Shard.Name, Ordinal: p.Shard.Ordinal, State: p.Ops.State(),
			ViaPooler: p.ViaPooler, Addr: p.Addr,
			DSN: store.RedactDSN(p.Shard.DSN), PoolerDSN: store.RedactDSN(p.Shard.PoolerDSN),
			Verified: p.Verified.Load(), User: p.BackendUser(), Database: p.Database(), Paused: p.Ops.Paused.Load(),
			Active: f.Active, Idle: f.Idle, Login: f.Login, Waiting: f.Waiting, Open: f.Open, MaxWait: f.MaxWait,
			Pinned: pinned[p.Shard.Name],
			Xacts:  st.Xacts.Load(), XactNanos: st.XactNanos.Load(), Queries: st.Queries.Load(),
			BytesIn: st.BytesIn.Load(), BytesOut: st.BytesOut.Load(), WaitNanos: st.WaitNanos.Load(),
			P99XactMicros: uint64(backend.Quantile(st.XactHist, 0.99) / time.Microsecond),
			XactsPerSec:   a.XactsPerSec, QueriesPerSec: a.QueriesPerSec, RecvPerSec: a.RecvPerSec, SentPerSec: a.SentPerSec,
			XactMicros: a.XactMicros, WaitMicros: a.WaitMicros,
			Keyed: st.Routes[backend.RouteKeyed].Load(), Hinted: st.Routes[backend.RouteHinted].Load(),
			Any: st.Routes[backend.RouteAny].Load(), Fanout: st.Routes[backend.RouteFanout].Load(),
			Refused: st.Routes[backend.RouteRefused].Load(), Errors: st.ErrorSummary(),
		}
		sh.AvgXactMicros = backend.AvgMicros(sh.XactNanos, sh.Xacts)
		for _, rg := range srv.cfg.Map.RangesOf(p.Shard.Name) {
			sh.Ranges = append(sh.Ranges, admin.Range{Lo: rg.Lo, Hi: rg.Hi})
		}
		switch {
		case p.Down.Load() != nil:
			sh.Reason = p.Down.Load().Message
		case p.Ops.Refuse.Load() != nil:
			sh.Reason = p.Ops.Refuse.Load().Message
		}
		if b := p.Ops.Bouncer.Load(); b != nil {
			sh.Bouncer = &admin.Bouncer{At: b.At, Err: b.Err, ClActive: b.ClActive, ClWaiting: b.ClWaiting,
				SvActive: b.SvActive, SvIdle: b.SvIdle, MaxWait: b.MaxWait}
		}
		out.Shards = append(out.Shards, sh)
	}
	return out
}

func (h *adminHost) Map() admin.Map {
	srv := h.srv()
	m := srv.cfg.Map
	ords := map[string]int{}
	for _, sh := range m.Shards {
		ords[sh.Name] = sh.Ordinal
	}
	out := admin.Map{Epoch: m.Epoch, Buckets: m.Buckets}
	for _, rg := range m.Ranges {
		out.Ranges = append(out.Ranges, admin.MapRange{Lo: rg.Lo, Hi: rg.Hi, Shard: rg.Shard, Ordinal: ords[rg.Shard]})
	}
	return out
}

func (h *adminHost) Clients() []admin.Client {
	clients := h.c.clients.Clients()
	out := make([]admin.Client, 0, len(clients))
	for _, x := range clients {
		c := admin.Client{User: x.User, Database: x.DB, App: x.App, Connected: x.Connected, Request: x.Request,
			PID: x.PID, TLS: x.TLS, Admin: x.Admin, Remote: x.Remote, Local: x.Local}
		if x.Pool != nil {
			c.Shard, c.BackendPID = x.Pool.Shard.Name, x.BackendPID
		}
		if x.Pinned != "" {
			c.Pinned, c.RemotePID = x.Pinned, c.BackendPID
		}
		out = append(out, c)
	}
	return out // by PID: a stable snapshot
}

func (h *adminHost) Servers() []admin.Server {
	srv := h.srv()
	var out []admin.Server
	for _, p := range append(slices.Clip(srv.pools), srv.directPools()...) {
		gen := p.Ops.ReconnectGen.Load()
		for _, ci := range p.SnapshotConns() {
			sv := admin.Server{User: p.BackendUser(), Database: p.Database(), Shard: p.Shard.Name,
				Opened: ci.Opened, Request: ci.Opened, Idle: ci.Idle, TLS: ci.TLS,
				CloseNeeded: ci.Gen < gen || p.Ops.Retired.Load(), PID: ci.PID}
			if ci.Remote != nil {
				sv.Remote = ci.Remote.String()
			}
			if ci.Local != nil {
				sv.Local = ci.Local.String()
			}
			if !ci.Idle && ci.Since != 0 {
				sv.Request = time.Unix(0, ci.Since)
			}
			out = append(out, sv)
		}
	}
	return out
}

func (h *adminHost) Lists() admin.Lists {
	srv := h.srv()
	used, _ := srv.srv.clients.Counts()
	open := 0
	for _, p := range srv.pools {
		open += p.Figures().Open
	}
	return admin.Lists{Shards: len(srv.pools), Users: len(srv.users), MaxClients: srv.cfg.MaxClients, UsedClients: used,
		Pinned: int(srv.srv.npinned.Load()), PoolSize: srv.cfg.PoolSize, OpenConnections: open}
}

func (h *adminHost) Users() []admin.User {
	srv := h.srv()
	var out []admin.User
	for _, u := range srv.cfg.Users {
		out = append(out, admin.User{Name: u.Name, Trust: u.Trust, Verifier: strings.HasPrefix(u.Password, auth.Mechanism+"$"),
			Admin: slices.Contains(srv.cfg.AdminUsers, u.Name)})
	}
	return out
}

func (h *adminHost) Routes() []admin.Route {
	srv := h.srv()
	var out []admin.Route
	for _, e := range srv.srv.routes.recent() {
		out = append(out, admin.Route{At: e.at, Kind: e.kind.String(), Shard: e.shard, SQL: e.sql, Reason: e.reason})
	}
	return out
}

func (h *adminHost) Reload(ctx context.Context) (string, error) {
	res, err := h.c.ReloadFromSource(ctx, "RELOAD on the admin console")
	if err != nil {
		return "", err
	}
	return res.String(), nil
}

// pools returns the pools of shards (every pool for nil).
func (h *adminHost) pools(shards []string) []*backend.Pool {
	srv := h.srv()
	if shards == nil {
		return srv.pools
	}
	var out []*backend.Pool
	for _, p := range srv.pools {
		if slices.Contains(shards, p.Shard.Name) {
			out = append(out, p)
		}
	}
	return out
}

// who names the pools for the log.
func who(pools []*backend.Pool) string {
	names := make([]string, len(pools))
	for i, p := range pools {
		names[i] = p.Shard.Name
	}
	return strings.Join(names, ",")
}

func (h *adminHost) Pause(ctx context.Context, shards []string) error {
	srv, pools := h.srv(), h.pools(shards)
	h.by.Log.Info("PAUSE on the admin console: holding new transactions, waiting for running ones", "shards", who(pools), "by", h.by.User)
	pctx, cancel := context.WithTimeout(ctx, srv.cfg.PauseTimeout)
	defer cancel()
	errs := make(chan error, len(pools))
	for _, p := range pools {
		go func() { errs <- p.Ops.Pause(pctx) }()
	}
	var first error
	for range pools {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first == nil {
		return nil
	}
	busy := 0
	for _, p := range pools {
		busy += p.InUse()
	}
	if errors.Is(first, context.Canceled) {
		return first
	}
	return &pgwire.Error{Code: pgwire.CodeQueryCanceled,
		Message: fmt.Sprintf("PAUSE: %d transactions still running after %s; new transactions stay held (RESUME to undo)", busy, srv.cfg.PauseTimeout)}
}

func (h *adminHost) Resume(shards []string) {
	pools := h.pools(shards)
	for _, p := range pools {
		p.Ops.Resume()
	}
	h.by.Log.Info("RESUME on the admin console", "shards", who(pools), "by", h.by.User)
}

func (h *adminHost) Reconnect(shards []string) {
	for _, p := range h.pools(shards) {
		p.Ops.Reconnect()
	}
}

func (h *adminHost) Kill(shards []string) {
	pools := h.pools(shards)
	h.by.Log.Warn("KILL on the admin console", "shards", who(pools), "by", h.by.User)
	h.c.clients.Kill(func(x *engine.ClientInfo) bool {
		if x.Admin {
			return false
		}
		return shards == nil || x.Pool != nil && slices.Contains(pools, x.Pool)
	})
	for _, p := range pools {
		p.Ops.ReconnectGen.Add(1)
		p.CloseIdle()
		p.Ops.InterruptInUse()
	}
}

func (h *adminHost) WaitClose(ctx context.Context, shards []string) error {
	srv := h.srv()
	pools := h.pools(shards)
	wctx, cancel := context.WithTimeout(ctx, srv.cfg.PauseTimeout)
	defer cancel()
	keeper := &h.c.keeper
	return backend.PollUntil(wctx, func() bool {
		for _, p := range pools {
			if p.Ops.OldConns() > 0 {
				return false
			}
		}
		if shards == nil {
			return len(keeper.retiredPools()) == 0
		}
		return true
	})
}

func (h *adminHost) DisableLogins(disabled bool) {
	h.c.life.disabled.Store(disabled)
	verb := "enabled"
	if disabled {
		verb = "disabled"
	}
	h.by.Log.Info("client logins "+verb+" on the admin console", "by", h.by.User)
}

func (h *adminHost) Shutdown() {
	h.by.Log.Info("SHUTDOWN on the admin console", "by", h.by.User)
	h.shutdown = true
}
