package proxy

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/migrations"
)

// Server is a running proxy: it accepts clients, authenticates them and
// runs one session per client over per-shard backend pools.
type Server struct {
	cfg     Config
	log     *slog.Logger
	users   map[string]login
	pools   []*shardPool
	reg     *prometheus.Registry
	metrics *metrics
	// defaultShard is the index of Config.DefaultShard.
	defaultShard int
	// rr spreads key-less read-only statements over the shards.
	rr atomic.Uint32
	// stmtEpoch moves on at every schema change the proxy sees (a DDL
	// statement planned, or Postgres refusing a cached statement whose
	// result columns changed): every connection's statement cache then
	// starts afresh at its next use.
	stmtEpoch atomic.Uint64
	// collation is whether the shards order text by bytes (collationC),
	// checked on the first merge that compares text (collationUnknown
	// again after DDL).
	collation atomic.Int32

	mu       sync.Mutex
	sessions map[uint32]*session // by the BackendKeyData process ID
	nclients int
	dbIDs    map[string]string // database id → shard name (identity checks)

	addrMu sync.Mutex
	addr   net.Addr
	ready  chan struct{}

	// Pinning (pin.go): direct pools by shard, made on first use when
	// the shards' own pools go through a pooler; pinned sessions.
	directMu  sync.Mutex
	direct    []*shardPool
	npinned   atomic.Int64
	pinsTotal *prometheus.CounterVec

	// dbs are the servers of Config.ExtraDatabases, by name (databases.go).
	dbs map[string]*Server
}

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
		cfg:      cfg,
		log:      cfg.Logger,
		users:    users,
		reg:      prometheus.NewRegistry(),
		sessions: map[uint32]*session{},
		dbIDs:    map[string]string{},
		ready:    make(chan struct{}),
	}
	var names []string
	for i, sh := range cfg.Map.Shards {
		p, err := newShardPool(s, i, sh, cfg.UsePooler)
		if err != nil {
			return nil, err
		}
		s.pools = append(s.pools, p)
		names = append(names, sh.Name)
		if sh.Name == cfg.DefaultShard {
			s.defaultShard = i
		}
	}
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.metrics = newMetrics(s.reg, names, func(i int) (int, int) { return s.pools[i].stats() })
	s.pinMetrics()
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
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.addrMu.Lock()
	defer s.addrMu.Unlock()
	return s.addr, nil
}

// Verify reads every shard's identity record and checks it against the map
// (like migrations.VerifyCluster): a shard that answers with a mismatching
// record, or two shards on one database, is an error. A shard that cannot
// be reached is not: it is reported in down, its transactions fail until
// it is back, and it is verified on its first connection (with
// Config.VerifyIdentity).
func (s *Server) Verify(ctx context.Context) (down []string, err error) {
	m := s.cfg.Map
	type res struct {
		id  migrations.Identity
		err error
		up  bool
	}
	out := make([]res, len(m.Shards))
	g, gctx := errgroup.WithContext(ctx)
	for i, p := range s.pools {
		g.Go(func() error {
			cctx, cancel := context.WithTimeout(gctx, s.cfg.ConnectTimeout)
			defer cancel()
			cfg, err := pgx.ParseConfig(p.dsn)
			if err != nil {
				out[i] = res{err: err}
				return nil
			}
			cfg.ConnectTimeout = s.cfg.ConnectTimeout
			cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
			cfg.RuntimeParams["application_name"] = "pgshard proxy (identity check)"
			conn, err := pgx.ConnectConfig(cctx, cfg)
			if err != nil {
				out[i] = res{err: err}
				return nil
			}
			defer conn.Close(context.WithoutCancel(ctx))
			id, err := migrations.ReadIdentity(cctx, conn)
			out[i] = res{id: id, err: err, up: true}
			return nil
		})
	}
	_ = g.Wait()
	var errs []error
	ids := map[string]migrations.Identity{}
	for i, r := range out {
		sh := m.Shards[i]
		switch {
		case !r.up:
			down = append(down, sh.Name)
			s.log.Warn("shard unreachable at start; its transactions fail until it is back", "shard", sh.Name, "addr", s.pools[i].addr, "err", shortErr(r.err))
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
	if d, err := s.verifyExtra(ctx); err != nil || len(d) > 0 {
		down = append(down, d...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return down, errors.Join(errs...)
	}
	s.mu.Lock()
	for name, id := range ids {
		s.dbIDs[id.DatabaseID] = name
	}
	s.mu.Unlock()
	for i, sh := range m.Shards {
		if _, ok := ids[sh.Name]; ok {
			s.pools[i].verified.Store(true)
		}
	}
	return down, nil
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

// ListenAndServe listens on Config.Listen and serves until ctx is done.
func (s *Server) ListenAndServe(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("proxy: listen on %s: %w", s.cfg.Listen, err)
	}
	return s.Serve(ctx, ln)
}

// Serve accepts clients on ln until ctx is done, then closes every client
// and backend connection and returns once all its goroutines ended.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	g, ctx := errgroup.WithContext(ctx)
	s.addrMu.Lock()
	s.addr = ln.Addr()
	s.addrMu.Unlock()
	close(s.ready)
	s.log.Info("proxy listening", "addr", ln.Addr().String(), "shards", len(s.pools), "via_pooler", s.cfg.UsePooler)

	var metricsSrv *http.Server
	if s.cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", s.cfg.MetricsListen)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("proxy: metrics listen on %s: %w", s.cfg.MetricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		g.Go(func() error {
			if err := metricsSrv.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}

	g.Go(func() error { // shutdown
		<-ctx.Done()
		_ = ln.Close()
		if metricsSrv != nil {
			_ = metricsSrv.Close()
		}
		s.mu.Lock()
		for _, sess := range s.sessions {
			sess.closeClient()
		}
		s.mu.Unlock()
		// Sessions waiting for a backend (a long query, a fan-out's
		// shards) end too.
		for _, p := range s.pools {
			p.mu.Lock()
			for c := range p.conns {
				_ = c.nc.SetDeadline(time.Now())
			}
			p.mu.Unlock()
		}
		s.interruptDirect()
		return nil
	})
	if s.cfg.HealthInterval > 0 {
		for _, p := range s.pools {
			g.Go(func() error { // health probe
				t := time.NewTicker(s.cfg.HealthInterval)
				defer t.Stop()
				for {
					p.probe(ctx)
					select {
					case <-ctx.Done():
						return nil
					case <-t.C:
					}
				}
			})
		}
	}
	g.Go(func() error { // idle reaper
		period := min(max(s.cfg.IdleTimeout/4, time.Second), 30*time.Second)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case now := <-t.C:
				for _, p := range s.pools {
					p.reapIdle(now)
				}
			}
		}
	})
	s.serveExtra(ctx, g)
	g.Go(func() error { // accept loop
		backoff := 5 * time.Millisecond
		for {
			conn, err := ln.Accept()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscallEMFILE) {
					s.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
					t := time.NewTimer(backoff)
					select {
					case <-ctx.Done():
						t.Stop()
						return nil
					case <-t.C:
					}
					backoff = min(2*backoff, time.Second)
					continue
				}
				return fmt.Errorf("proxy: accept: %w", err)
			}
			backoff = 5 * time.Millisecond
			g.Go(func() error {
				s.handle(ctx, conn)
				return nil
			})
		}
	})
	err := g.Wait()
	for _, p := range s.pools {
		p.shutdown()
	}
	s.shutdownDirect()
	s.log.Info("proxy stopped")
	return err
}

// handle runs one client connection to its end.
func (s *Server) handle(ctx context.Context, conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	sess := newSession(s, conn)
	defer conn.Close()
	sess.run(ctx)
}

// register assigns the session its cancel key and counts it against
// MaxClients; false means the server is full.
func (s *Server) register(sess *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nclients >= s.cfg.MaxClients {
		return false
	}
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		pid := binary.BigEndian.Uint32(b[:4]) & 0x7fffffff
		if pid == 0 {
			continue
		}
		if _, dup := s.sessions[pid]; dup {
			continue
		}
		sess.pid = pid
		sess.secret = binary.BigEndian.Uint32(b[4:])
		s.sessions[pid] = sess
		s.nclients++
		s.metrics.clients.Inc()
		s.metrics.clientsTotal.Inc()
		return true
	}
}

func (s *Server) unregister(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[sess.pid] == sess {
		delete(s.sessions, sess.pid)
		s.nclients--
		s.metrics.clients.Dec()
	}
}

// cancel forwards a client's cancel request to the backend serving its
// session right now, if any. A request whose key matches no session is
// ignored, as Postgres does.
func (s *Server) cancel(ctx context.Context, pid uint32, key []byte) {
	s.mu.Lock()
	sess := s.sessions[pid]
	s.mu.Unlock()
	if sess == nil && s.dbs != nil {
		s.cancelExtra(ctx, pid, key)
		return
	}
	if sess == nil || len(key) != 4 || binary.BigEndian.Uint32(key) != sess.secret {
		return
	}
	sess.cancelBackend(ctx)
}

// pickAny returns a shard for a statement that may run anywhere.
// Shards found down are skipped while others are up.
func (s *Server) pickAny() int {
	n := len(s.pools)
	start := int(s.rr.Add(1) % uint32(n))
	for k := 0; k < n; k++ {
		if i := (start + k) % n; s.pools[i].down.Load() == nil {
			return i
		}
	}
	return start
}

// shardName returns the name of shard i.
func (s *Server) shardName(i int) string { return s.cfg.Map.Shards[i].Name }

const (
	collationUnknown int32 = iota
	collationC
	collationOther
)

// collationSQL reads what decides whether a shard orders text by bytes:
// the database's default collation and provider, and whether any column
// of a user table has a collation other than the default, C and POSIX.
const collationSQL = `SELECT d.datcollate, coalesce(pg_catalog.to_jsonb(d)->>'datlocprovider', 'c'),
 (SELECT count(*) FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
   WHERE a.attnum > 0 AND NOT a.attisdropped AND a.attcollation NOT IN (0, 100, 950, 951)
     AND c.relnamespace NOT IN ('pg_catalog'::pg_catalog.regnamespace, 'information_schema'::pg_catalog.regnamespace))
FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()`

// textBytewise reports whether every shard orders text by bytes (the C
// or POSIX collation, libc provider, no column with another collation):
// only then does the merge compare text as the shards sort it. Checked
// once (and after DDL); a shard that cannot be asked counts as "no".
func (s *Server) textBytewise(ctx context.Context) bool {
	switch s.collation.Load() {
	case collationC:
		return true
	case collationOther:
		return false
	}
	ok := true
	for _, p := range s.pools {
		bc, err := p.acquire(ctx, noSettings)
		if err != nil {
			return false
		}
		res, err := bc.runSimple(ctx, s.cfg.PoolTimeout, collationSQL)
		if err != nil {
			p.discard(bc)
			return false
		}
		p.release(bc)
		if len(res) != 1 || res[0].errRaw != nil || len(res[0].rows) != 1 || len(res[0].rows[0]) != 3 {
			return false
		}
		row := res[0].rows[0]
		coll, prov, n := string(row[0]), string(row[1]), string(row[2])
		if !(coll == "C" || coll == "POSIX") || prov != "c" || n != "0" {
			ok = false
		}
	}
	if ok {
		s.collation.Store(collationC)
	} else {
		s.collation.Store(collationOther)
		s.log.Info("the shards do not order text by bytes: merges that compare text need COLLATE \"C\"")
	}
	return ok
}
