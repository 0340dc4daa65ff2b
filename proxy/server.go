package proxy

import (
	"github.com/pgshard/pgshard/proxy/internal/auth"
	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/engine"
	"github.com/pgshard/pgshard/proxy/internal/obs"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/shardmap"
)

// Server is a running proxy: it accepts clients, authenticates them and
// runs one session per client over per-shard backend pools.
//
// A Server value is one generation of the proxy's configuration (its
// Config, users, shard pools); what outlives a reload (sessions, metrics,
// the listener, the lifecycle) is the shared core. RELOAD makes a new
// generation (reload.go); each session moves to it between transactions,
// so a session's s.srv never changes under a transaction.
type Server struct {
	*core
	cfg   Config
	users map[string]engine.Login
	pools []*backend.Pool
	// collation is whether the shards order text by bytes (collationC),
	// checked on the first merge that compares text (collationUnknown
	// again after DDL).
	collation atomic.Int32
	// defaultShard is the index of Config.DefaultShard.
	defaultShard int
	// rr spreads key-less read-only statements over the shards.
	rr atomic.Uint32
	// generation counts configurations: 1 is New's, each reload adds one.
	generation uint64

	// Pinning (internal/engine/pin.go): direct pools by shard, made on first use when the
	// shards' own pools go through a pooler. A reload hands a kept shard's
	// direct pool to the new generation and retires the others'.
	directMu sync.Mutex
	direct   []*backend.Pool

	// dbs are the servers of Config.ExtraDatabases, by name (databases.go):
	// the same for every generation (a reload keeps them).
	dbs map[string]*Server

	// genv is what the generation gives its sessions (internal/engine/sessionenv.go).
	genv *engine.GenerationEnv
}

// core is the state every generation of a Server shares.
type core struct {
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *obs.Metrics
	// stmtEpoch moves on at every schema change the proxy sees (a DDL
	// statement planned, or Postgres refusing a cached statement whose
	// result columns changed): every connection's statement cache then
	// starts afresh at its next use.
	stmtEpoch atomic.Uint64
	// cur is the current generation.
	cur atomic.Pointer[Server]
	// routes records recent routing decisions (SHOW ROUTES).
	routes routeLog
	// life is the server's lifecycle: logins disabled, shutdown, handover.
	life lifecycle
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

	// fences holds each pool's fence state (*backend.Pool →
	// *atomic.Int32, internal/engine/fence.go).
	fences sync.Map
	// standIns: one text per bucket that hashes to it (internal/engine/fence.go).
	standIns engine.StandInTexts

	addrMu      sync.Mutex
	addr        net.Addr
	metricsAddr net.Addr
	ready       chan struct{}

	// henv is what the server gives its sessions (internal/engine/sessionenv.go).
	henv *engine.HostEnv
}

// current returns the current generation.
func (c *core) current() *Server { return c.cur.Load() }

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
	c := &core{
		reg:     prometheus.NewRegistry(),
		dbIDs:   map[string]string{},
		ready:   make(chan struct{}),
		started: time.Now(),
	}
	c.life.init()
	c.secrets.set(&cfg)
	c.log = slog.New(&redactHandler{next: cfg.Logger.Handler(), secrets: &c.secrets})
	ts, err := auth.LoadTLS(cfg.TLS.Mode, cfg.TLS.CertFile, cfg.TLS.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("proxy config: %w", err)
	}
	c.tls.Store(ts)
	s := &Server{
		core:       c,
		cfg:        cfg,
		users:      users,
		generation: 1,
	}
	// The metrics first: the pools count their backend errors there.
	c.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	c.metrics = newMetrics(c.reg, c)
	c.clients = engine.NewRegistry(c.metrics)
	for i, sh := range cfg.Map.Shards {
		p, err := backend.NewPool(s.backendEnv(), sh, cfg.UsePooler)
		if err != nil {
			return nil, err
		}
		s.pools = append(s.pools, p)
		if sh.Name == cfg.DefaultShard {
			s.defaultShard = i
		}
	}
	c.cur.Store(s)
	c.pinMetrics()
	s.makeEnv()
	warnPlainPasswords(cfg.Users, c.log)
	if err := s.newExtraDatabases(); err != nil {
		return nil, err
	}
	return s, nil
}

// Registry is the server's Prometheus registry.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Addr returns the address the server listens on, after Serve started
// (it blocks until then or until ctx is done).
func (s *Server) Addr(ctx context.Context) (net.Addr, error) {
	return s.readyAddr(ctx, &s.addr)
}

// MetricsAddr waits until Serve listens and returns the metrics
// endpoint's address (nil without Config.MetricsListen); with port 0 in
// MetricsListen it names the port the system picked.
func (s *Server) MetricsAddr(ctx context.Context) (net.Addr, error) {
	return s.readyAddr(ctx, &s.metricsAddr)
}

// readyAddr waits until Serve listens, then reads *a.
func (s *Server) readyAddr(ctx context.Context, a *net.Addr) (net.Addr, error) {
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.addrMu.Lock()
	defer s.addrMu.Unlock()
	return *a, nil
}

// backendEnv is the environment the generation hands its pools (a pool
// follows the newest generation that has it).
func (s *Server) backendEnv() *backend.Env {
	c := &s.cfg
	return &backend.Env{
		PoolSize: c.PoolSize, PoolTimeout: c.PoolTimeout, ConnectTimeout: c.ConnectTimeout,
		IdleTimeout: c.IdleTimeout, HealthInterval: c.HealthInterval, PauseTimeout: c.PauseTimeout,
		StatementCacheSize: c.StatementCacheSize, VerifyIdentity: c.VerifyIdentity, Map: c.Map,
		PgBouncer:          backend.BouncerConfig(c.PgBouncer),
		BackendErrors:      s.metrics.BackendErrors,
		Log:                s.log,
		StmtEpoch:          &s.stmtEpoch,
		RegisterDatabaseID: s.registerDatabaseID,
	}
}

// Verify reads every shard's identity record and checks it against the map
// (like migrations.VerifyCluster): a shard that answers with a mismatching
// record, or two shards on one database, is an error. A shard that cannot
// be reached is not: it is reported in down, its transactions fail until
// it is back, and it is verified on its first connection (with
// Config.VerifyIdentity).
func (s *Server) Verify(ctx context.Context) (down []string, err error) {
	ids, down, err := s.verifyPools(ctx, s.cfg.Map, s.pools, nil)
	if err != nil {
		return down, err
	}
	if d, err := s.verifyExtra(ctx); err != nil || len(d) > 0 {
		down = append(down, d...)
		if err != nil {
			return down, err
		}
	}
	s.recordVerified(ids, s.pools, nil)
	return down, nil
}

// recordVerified records the identities ids (shard name → identity) as
// the databases of their shards, in place of those of the shards of
// retired, and marks the pools among pools whose shard they verified.
func (c *core) recordVerified(ids map[string]migrations.Identity, pools, retired []*backend.Pool) {
	c.mu.Lock()
	for id, name := range c.dbIDs {
		for _, p := range retired {
			if p.Shard.Name == name {
				delete(c.dbIDs, id)
			}
		}
	}
	for name, id := range ids {
		c.dbIDs[id.DatabaseID] = name
	}
	c.mu.Unlock()
	for _, p := range pools {
		if _, ok := ids[p.Shard.Name]; ok {
			p.Verified.Store(true)
		}
	}
}

// verifyPools reads the identity records of pools' shards and checks them
// against m: a mismatch, or two shards (also among others, database id →
// shard of shards already known) on one database, is an error; a shard
// that cannot be reached is reported in down.
func (s *Server) verifyPools(ctx context.Context, m *shardmap.Map, pools []*backend.Pool, others map[string]string) (map[string]migrations.Identity, []string, error) {
	type res struct {
		id  migrations.Identity
		err error
		up  bool
	}
	out := make([]res, len(pools))
	g, gctx := errgroup.WithContext(ctx)
	for i, p := range pools {
		g.Go(func() error {
			timeout := p.Env().ConnectTimeout
			cctx, cancel := context.WithTimeout(gctx, timeout)
			defer cancel()
			cfg, err := pgx.ParseConfig(p.DSN)
			if err != nil {
				out[i] = res{err: err}
				return nil
			}
			cfg.ConnectTimeout = timeout
			cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
			cfg.RuntimeParams["application_name"] = "pgshard proxy (identity check)"
			conn, err := pgx.ConnectConfig(cctx, cfg)
			if err != nil {
				out[i] = res{err: err}
				return nil
			}
			defer conn.Close(context.WithoutCancel(ctx))
			id, err := migrations.ReadIdentity(cctx, conn)
			// Through PgBouncer the login succeeds with the shard down and
			// the first query fails (08P01 "server login has been
			// failing"): the shard is unreachable, not in disagreement.
			out[i] = res{id: id, err: err, up: err == nil || !backend.Unreachable(err)}
			return nil
		})
	}
	_ = g.Wait()
	var errs []error
	var down []string
	ids := map[string]migrations.Identity{}
	for i, r := range out {
		p := pools[i]
		sh := p.Shard
		switch {
		case !r.up:
			down = append(down, sh.Name)
			s.log.Warn("shard unreachable; its transactions fail until it is back (its identity is checked on its first connection)", "shard", sh.Name, "addr", p.Addr, "err", backend.ShortErr(r.err))
		case r.err != nil:
			errs = append(errs, fmt.Errorf("shard %q: %w", sh.Name, r.err))
		default:
			if err := r.id.Check(sh, m); err != nil {
				errs = append(errs, fmt.Errorf("shard %q: %w", sh.Name, err))
				continue
			}
			ids[sh.Name] = r.id
		}
	}
	if err := migrations.CheckDistinct(ids); err != nil {
		errs = append(errs, err)
	}
	for name, id := range ids {
		if other, ok := others[id.DatabaseID]; ok && other != name {
			errs = append(errs, fmt.Errorf("map entries %q and %q point at the same database (database id %s)", other, name, id.DatabaseID))
		}
	}
	if len(errs) > 0 {
		return nil, down, errors.Join(errs...)
	}
	return ids, down, nil
}

// registerDatabaseID records a shard's database id and fails if another
// shard has the same database.
func (s *Server) registerDatabaseID(shard, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if other, ok := s.dbIDs[id]; ok && other != shard {
		return fmt.Errorf("map entries %q and %q point at the same database (database id %s)", other, shard, id)
	}
	s.dbIDs[id] = shard
	return nil
}

// handle runs one client connection to its end.
func (s *Server) handle(ctx context.Context, conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	sess := engine.NewSession(s.env(), s.core.henv, conn)
	defer conn.Close()
	sess.Run(ctx)
}

// shardName returns the name of shard i.
func (s *Server) shardName(i int) string { return s.cfg.Map.Shards[i].Name }
