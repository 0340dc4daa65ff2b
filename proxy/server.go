package proxy

import (
	"github.com/pgshard/pgshard/proxy/internal/auth"
	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/engine"
	"github.com/pgshard/pgshard/proxy/internal/obs"

	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pgshard/pgshard/migrations"
)

// Server is a running proxy: it accepts clients, authenticates them and
// runs one session per client over per-shard backend pools. It holds what
// outlives a reload (the sessions, metrics, the lifecycle, TLS, pins and
// fences); the configuration in force is its current generation
// (generation.go), which RELOAD and the catalog replace.
type Server struct {
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *obs.Metrics
	// stmtEpoch moves on at every schema change the proxy sees (a DDL
	// statement planned, or Postgres refusing a cached statement whose
	// result columns changed): every connection's statement cache then
	// starts afresh at its next use.
	stmtEpoch atomic.Uint64
	// cur is the current generation.
	cur atomic.Pointer[generation]
	// routes records recent routing decisions (SHOW ROUTES).
	routes routeLog
	// life is the server's lifecycle: logins disabled, shutdown, readiness
	// and the addresses Serve listens on, handover (lifecycle.go).
	life lifecycle
	// keeper runs the pools' monitors and closes retired pools (poolkeeper.go).
	keeper poolKeeper
	// started is when New ran (SHOW STATS averages, uptime).
	started time.Time

	// clients are the client sessions, by the BackendKeyData process ID
	// (internal/engine/sessionreg.go).
	clients *engine.Registry

	mu    sync.Mutex
	dbIDs map[string]string // database id → shard name (identity checks)

	// secrets are redacted from every log line (secrets.go).
	secrets secretSet
	// tls is the current TLS configuration towards clients (nil: off).
	tls atomic.Pointer[auth.TLSSetup]

	// npinned counts the sessions pinned to a backend of their own
	// (internal/engine/pin.go), across generations and databases (Config.MaxPinned bounds
	// it); pinsTotal counts pins by reason.
	npinned   atomic.Int64
	pinsTotal *prometheus.CounterVec

	// fences holds each pool's fence state (internal/engine/fence.go).
	fences engine.PoolFences
	// standIns: one text per bucket that hashes to it (internal/engine/fence.go).
	standIns engine.StandInTexts

	// dbs are the servers of Config.ExtraDatabases, by name (databases.go):
	// a reload keeps them.
	dbs extraDatabases

	// henv is what the server gives its sessions (internal/engine/sessionenv.go).
	henv *engine.HostEnv
}

// current returns the current generation.
func (s *Server) current() *generation { return s.cur.Load() }

// New checks cfg and builds a server; it does no I/O. Call Verify to check
// the shards' identities, then Serve or ListenAndServe.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	users, err := prepareUsers(cfg.Users)
	if err != nil {
		return nil, fmt.Errorf("proxy config: %w", err)
	}
	s := &Server{
		reg:     prometheus.NewRegistry(),
		dbIDs:   map[string]string{},
		started: time.Now(),
	}
	s.secrets.set(&cfg)
	s.log = slog.New(&redactHandler{next: cfg.Logger.Handler(), secrets: &s.secrets})
	s.life.init(s.log)
	s.keeper.log = s.log
	ts, err := auth.LoadTLS(cfg.TLS.Mode, cfg.TLS.CertFile, cfg.TLS.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("proxy config: %w", err)
	}
	s.tls.Store(ts)
	g := &generation{
		srv:    s,
		cfg:    cfg,
		users:  users,
		number: 1,
	}
	// The metrics first: the pools count their backend errors there.
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.metrics = newMetrics(s.reg, s)
	s.clients = engine.NewRegistry(s.metrics)
	for i, sh := range cfg.Map.Shards {
		p, err := backend.NewPool(g.backendEnv(), sh, cfg.UsePooler)
		if err != nil {
			return nil, err
		}
		g.pools = append(g.pools, p)
		if sh.Name == cfg.DefaultShard {
			g.defaultShard = i
		}
	}
	s.cur.Store(g)
	s.pinMetrics()
	g.makeEnv()
	warnPlainPasswords(cfg.Users, s.log)
	if s.dbs, err = newExtraDatabases(&cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// Registry is the server's Prometheus registry.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Addr returns the address the server listens on, after Serve started
// (it blocks until then or until ctx is done).
func (s *Server) Addr(ctx context.Context) (net.Addr, error) {
	return s.life.readyAddr(ctx, false)
}

// MetricsAddr waits until Serve listens and returns the metrics
// endpoint's address (nil without Config.MetricsListen); with port 0 in
// MetricsListen it names the port the system picked.
func (s *Server) MetricsAddr(ctx context.Context) (net.Addr, error) {
	return s.life.readyAddr(ctx, true)
}

// Verify reads every shard's identity record and checks it against the map
// (like migrations.VerifyCluster): a shard that answers with a mismatching
// record, or two shards on one database, is an error. A shard that cannot
// be reached is not: it is reported in down, its transactions fail until
// it is back, and it is verified on its first connection (with
// Config.VerifyIdentity).
func (s *Server) Verify(ctx context.Context) (down []string, err error) {
	g := s.current()
	ids, down, err := g.verifyPools(ctx, g.cfg.Map, g.pools, nil)
	if err != nil {
		return down, err
	}
	if d, err := s.dbs.verify(ctx); err != nil || len(d) > 0 {
		down = append(down, d...)
		if err != nil {
			return down, err
		}
	}
	s.recordVerified(ids, g.pools, nil)
	return down, nil
}

// recordVerified records the identities ids (shard name → identity) as
// the databases of their shards, in place of those of the shards of
// retired, and marks the pools among pools whose shard they verified.
func (s *Server) recordVerified(ids map[string]migrations.Identity, pools, retired []*backend.Pool) {
	s.mu.Lock()
	for id, name := range s.dbIDs {
		for _, p := range retired {
			if p.Shard.Name == name {
				delete(s.dbIDs, id)
			}
		}
	}
	for name, id := range ids {
		s.dbIDs[id.DatabaseID] = name
	}
	s.mu.Unlock()
	for _, p := range pools {
		if _, ok := ids[p.Shard.Name]; ok {
			p.Verified.Store(true)
		}
	}
}
