package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// CatalogDatabase is the database that holds a run's own catalog (runs
// with move faults), on the cluster's catalog server when it has one of
// its own, else on shard0's server (see runCatalogServer): dropped and
// created again at each such run's start, like the store's tables are
// emptied.
const CatalogDatabase = "pgshard_chaos_catalog"

// catalogLeaseWait bounds the wait for the router's first catalog lease.
const catalogLeaseWait = 30 * time.Second

// hasMoves reports whether a plan has faults that move ranges.
func hasMoves(plan []Planned) bool {
	for _, p := range plan {
		if kindInfos[p.Kind].needs&NeedsCatalog != 0 {
			return true
		}
	}
	return false
}

// runCatalogServer picks the server of the run's catalog: the one
// catalogDSN (the config's catalog.dsn) names when its host:port is none
// of m's shards' direct DSNs' (a catalog server of its own, which the
// process faults leave alone: every shard may crash), else shard 0's.
// It returns the DSN to connect to for creating the database there and
// a name for that server in errors.
func runCatalogServer(m *shardmap.Map, catalogDSN string) (adminDSN, where string, err error) {
	if len(m.Shards) == 0 {
		return "", "", errors.New("run catalog: the map has no shards")
	}
	shard0 := m.Shards[0]
	if catalogDSN == "" {
		return shard0.DSN, shard0.Name + "'s server", nil
	}
	addr, err := hostPort(catalogDSN)
	if err != nil {
		return "", "", fmt.Errorf("run catalog: catalog.dsn: %w", err)
	}
	for _, s := range m.Shards {
		if a, err := hostPort(s.DSN); err == nil && a == addr {
			return shard0.DSN, shard0.Name + "'s server", nil
		}
	}
	host, _, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", "", fmt.Errorf("run catalog: the catalog server %s is not on this machine: chaos makes its run's catalog there and runs only against a local cluster", addr)
	}
	return catalogDSN, "the catalog server " + addr, nil
}

// hostPort returns a URL DSN's host:port, PostgreSQL's port 5432 when it
// names none.
func hostPort(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("DSN %q: %w", redact(dsn), err)
	}
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// openRunCatalog creates the run's catalog: the database CatalogDatabase
// on the server runCatalogServer picks for catalogDSN (the config's
// catalog.dsn, "" for none) — dropped first, with whatever a former run
// left in it —, the catalog schema installed, and relayed — the map the
// store under test routes by, through the relays — pushed as its first
// generation. The shards' fences are reset from the original map first
// (resetFences). dsn connects to it (the chaos-owned proxy follows it).
func openRunCatalog(ctx context.Context, env *Env, relayed *shardmap.Map, catalogDSN string) (cat *catalog.Catalog, dsn string, err error) {
	adminDSN, where, err := runCatalogServer(env.Map, catalogDSN)
	if err != nil {
		return nil, "", err
	}
	cfg, err := pgx.ParseConfig(adminDSN)
	if err != nil {
		return nil, "", fmt.Errorf("run catalog on %s: %w", where, err)
	}
	cfg.ConnectTimeout = 5 * time.Second
	cfg.RuntimeParams["application_name"] = ControlAppName
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, "", fmt.Errorf("run catalog on %s: %w", where, err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	db := pgx.Identifier{CatalogDatabase}.Sanitize()
	for _, q := range []string{`DROP DATABASE IF EXISTS ` + db + ` WITH (FORCE)`, `CREATE DATABASE ` + db} {
		if _, err := c.Exec(ctx, q); err != nil {
			return nil, "", fmt.Errorf("run catalog on %s: %s: %w", where, q, err)
		}
	}
	u, err := url.Parse(adminDSN)
	if err != nil {
		return nil, "", fmt.Errorf("run catalog on %s: DSN %q: %w", where, redact(adminDSN), err)
	}
	u.Path = "/" + CatalogDatabase
	dsn = u.String()
	cat, err = catalog.Open(ctx, dsn, catalog.Options{ApplicationName: ControlAppName})
	if err != nil {
		return nil, "", fmt.Errorf("run catalog: %w", err)
	}
	env.logf("chaos: the run's catalog is %s on %s", CatalogDatabase, where)
	if _, err := cat.Install(ctx); err != nil {
		cat.Close()
		return nil, "", fmt.Errorf("run catalog: install: %w", err)
	}
	if err := cat.Push(ctx, relayed, 0); err != nil {
		cat.Close()
		return nil, "", fmt.Errorf("run catalog: push the map: %w", err)
	}
	return cat, dsn, nil
}

// resetFences puts every shard's fence back to what `pgshard migrate`
// sets from m, whatever a former run's moves left: change captures
// stopped, the destination's seq records dropped, the fence emptied and
// set from m (its epoch may be older than the one moves reached). Shards
// without the fence (before migration 0008) are left alone. With force
// false, only shards whose fence is on or was moved past m's epoch are
// reset (a run without moves keeps a fence someone turned off).
func resetFences(ctx context.Context, env *Env, m *shardmap.Map, force bool) error {
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range env.Map.Shards {
		g.Go(func() error {
			c, err := adminConnect(gctx, env, i)
			if err != nil {
				return fmt.Errorf("reset the fence: %w", err)
			}
			defer c.Close(context.WithoutCancel(gctx))
			var fence, mover, enabled bool
			var epoch int64
			err = c.QueryRow(gctx, `SELECT to_regclass('pgshard_fence_config') IS NOT NULL, to_regclass('pgshard_move_capture') IS NOT NULL`).Scan(&fence, &mover)
			if err != nil || !fence {
				return err
			}
			if err := c.QueryRow(gctx, `SELECT enabled, epoch FROM pgshard_fence_config`).Scan(&enabled, &epoch); err != nil {
				return fmt.Errorf("reset the fence on %s: %w", s.Name, err)
			}
			if !force && !enabled && uint64(epoch) <= m.Epoch {
				return nil
			}
			return pgx.BeginFunc(gctx, c, func(tx pgx.Tx) error {
				if mover {
					for _, q := range []string{
						`SELECT pgshard_move_capture_end(move_id) FROM pgshard_move_capture`,
						`DELETE FROM pgshard_move_seqs`,
					} {
						if _, err := tx.Exec(gctx, q); err != nil {
							return fmt.Errorf("reset the mover's state on %s: %w", s.Name, err)
						}
					}
				}
				for _, q := range []string{`DELETE FROM pgshard_fence`, `UPDATE pgshard_fence_config SET enabled = false, epoch = 0`} {
					if _, err := tx.Exec(gctx, q); err != nil {
						return fmt.Errorf("reset the fence on %s: %w", s.Name, err)
					}
				}
				if _, err := migrations.SetFence(gctx, tx, m); err != nil {
					return fmt.Errorf("reset the fence on %s: %w", s.Name, err)
				}
				return nil
			})
		})
	}
	return g.Wait()
}

// openRelayedRouter is openFollowingRouter on a catalog of its own at dsn
// (the run's, through the catalog-cut relay: the follower and the
// router's reloads both go through it), with lease TTL ttl; stop closes
// that catalog too.
func openRelayedRouter(ctx context.Context, dsn string, ttl time.Duration, opts router.Options, logf func(string, ...any)) (store.ExecutionStore, func(), error) {
	cat, err := catalog.Open(ctx, dsn, catalog.Options{ApplicationName: ControlAppName})
	if err != nil {
		return nil, nil, fmt.Errorf("run catalog (router, through the catalog relay): %w", err)
	}
	st, stop, err := openFollowingRouter(ctx, cat, ttl, opts, logf)
	if err != nil {
		cat.Close()
		return nil, nil, err
	}
	return st, func() { stop(); cat.Close() }, nil
}

// openFollowingRouter opens the router over the catalog's map, following
// it (catalog.Follower: each new epoch applied as it is published, a lease
// of kind router held with TTL ttl, 0 for the default; keyed operations
// are refused while the lease is not live; a fence's refusal reloads the
// map from cat). It returns once the first lease is held; stop stops the
// follower (releasing the lease) and closes the router.
func openFollowingRouter(ctx context.Context, cat *catalog.Catalog, ttl time.Duration, opts router.Options, logf func(string, ...any)) (st store.ExecutionStore, stop func(), err error) {
	m, err := cat.Load(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("catalog %s: load the map: %w", cat.Addr(), err)
	}
	host, _ := os.Hostname()
	f, err := cat.NewFollower(catalog.FollowOptions{
		Owner: fmt.Sprintf("pgshard-chaos@%s:%d", host, os.Getpid()), Kind: "router", TTL: ttl,
		OnError: func(err error) {
			if logf != nil {
				logf("chaos: catalog follower: %v", err)
			}
		},
	})
	if err != nil {
		return nil, nil, err
	}
	opts.Maps, opts.Lease = cat, f
	r, err := router.Open(ctx, m, opts)
	if err != nil {
		return nil, nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- f.Run(runCtx, r.Epoch, r.SetMap) }()
	stop = func() {
		cancel()
		<-done // Run releases the lease on its way out
		r.Close()
	}
	if err := f.WaitLive(ctx, catalogLeaseWait); err != nil {
		stop()
		return nil, nil, fmt.Errorf("catalog %s: router: %w", cat.Addr(), err)
	}
	return r, stop, nil
}

// stoppingStore is a store whose Close is stop (the following router's:
// the follower first, then the router).
type stoppingStore struct {
	store.ExecutionStore
	stop func()
}

func (s stoppingStore) Close() { s.stop() }
