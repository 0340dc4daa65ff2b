package proxy

import (
	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/engine"

	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/shardmap"
)

// generation is one configuration of a Server: its Config, logins, shard
// pools and routing state. New makes the first; each reload (reload.go,
// RELOAD, SIGHUP, a catalog's newer map) makes the next and publishes it
// as the Server's current one. A session moves to the current generation
// between transactions, so its generation never changes under a
// transaction; what outlives a reload lives in its Server (srv).
type generation struct {
	srv   *Server
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
	number uint64

	// Pinning (internal/engine/pin.go): direct pools by shard, made on first use when the
	// shards' own pools go through a pooler. A reload hands a kept shard's
	// direct pool to the new generation and retires the others'.
	directMu sync.Mutex
	direct   []*backend.Pool

	// genv is what the generation gives its sessions (internal/engine/sessionenv.go).
	genv *engine.GenerationEnv
}

// backendEnv is the environment the generation hands its pools (a pool
// follows the newest generation that has it).
func (g *generation) backendEnv() *backend.Env {
	c := &g.cfg
	return &backend.Env{
		PoolSize: c.PoolSize, PoolTimeout: c.PoolTimeout, ConnectTimeout: c.ConnectTimeout,
		IdleTimeout: c.IdleTimeout, HealthInterval: c.HealthInterval, PauseTimeout: c.PauseTimeout,
		StatementCacheSize: c.StatementCacheSize, VerifyIdentity: c.VerifyIdentity, Map: c.Map,
		PgBouncer:          backend.BouncerConfig(c.PgBouncer),
		BackendErrors:      g.srv.metrics.BackendErrors,
		Log:                g.srv.log,
		StmtEpoch:          &g.srv.stmtEpoch,
		RegisterDatabaseID: g.registerDatabaseID,
	}
}

// verifyPools reads the identity records of pools' shards and checks them
// against m: a mismatch, or two shards (also among others, database id →
// shard of shards already known) on one database, is an error; a shard
// that cannot be reached is reported in down.
func (g *generation) verifyPools(ctx context.Context, m *shardmap.Map, pools []*backend.Pool, others map[string]string) (map[string]migrations.Identity, []string, error) {
	type res struct {
		id  migrations.Identity
		err error
		up  bool
	}
	out := make([]res, len(pools))
	eg, gctx := errgroup.WithContext(ctx)
	for i, p := range pools {
		eg.Go(func() error {
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
	_ = eg.Wait()
	var errs []error
	var down []string
	ids := map[string]migrations.Identity{}
	for i, r := range out {
		p := pools[i]
		sh := p.Shard
		switch {
		case !r.up:
			down = append(down, sh.Name)
			g.srv.log.Warn("shard unreachable; its transactions fail until it is back (its identity is checked on its first connection)", "shard", sh.Name, "addr", p.Addr, "err", backend.ShortErr(r.err))
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
func (g *generation) registerDatabaseID(shard, id string) error {
	g.srv.mu.Lock()
	defer g.srv.mu.Unlock()
	if other, ok := g.srv.dbIDs[id]; ok && other != shard {
		return fmt.Errorf("map entries %q and %q point at the same database (database id %s)", other, shard, id)
	}
	g.srv.dbIDs[id] = shard
	return nil
}

// handle runs one client connection to its end.
func (g *generation) handle(ctx context.Context, conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	sess := engine.NewSession(g.env(), g.srv.henv, conn)
	defer conn.Close()
	sess.Run(ctx)
}

// shardName returns the name of shard i.
func (g *generation) shardName(i int) string { return g.cfg.Map.Shards[i].Name }
