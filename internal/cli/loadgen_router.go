package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// leaseWait bounds how long a command waits for its first catalog lease
// before it gives up (the catalog is down or unreachable).
const leaseWait = 30 * time.Second

// storeRouter is the router a command runs the store on, and what stops
// it: with a catalog, the follower that keeps its map current.
type storeRouter struct {
	*router.Router
	// Start is the map the router started from.
	Start *shardmap.Map
	// Catalog is the catalog's address when the router follows one.
	Catalog string
	stop    func()
}

// Close stops the follower (releasing its lease), waits for it and
// closes the router and the catalog.
func (r *storeRouter) Close() { r.stop() }

// openStoreRouter opens the router over the shards of cfg. With a catalog
// (catalog.dsn, --catalog, $PGSHARD_CATALOG_DSN) the map is the catalog's
// and the router follows it (catalog.Follower: a new epoch is applied as
// it is published, and a lease row names this process as a router — while
// the lease is not live the router refuses keyed operations, it never
// guesses with a map it cannot prove); it returns once the first lease is
// held. Without one it routes by the config's map. who names the process
// in the lease ("loadgen", "store-demo"); the follower's errors go to
// errw, at most one every 10 s.
func openStoreRouter(ctx context.Context, cfg *config.Config, opts router.Options, who string, errw io.Writer) (*storeRouter, error) {
	if cfg.Catalog.DSN == "" {
		if cfg.Map == nil {
			return nil, usageError{errors.New("no shard map: set map (or map_file) in the config, or name a catalog (--catalog, catalog.dsn); `pgshard dev up` writes a config with both")}
		}
		r, err := router.Open(ctx, cfg.Map, opts)
		if err != nil {
			return nil, err
		}
		return &storeRouter{Router: r, Start: cfg.Map, stop: r.Close}, nil
	}
	fc, err := openFollower(ctx, cfg.Catalog.DSN, who, "router", 0, func(addr string) func(error) {
		return throttled(errw, "pgshard "+who+": catalog "+addr, 10*time.Second)
	})
	if err != nil {
		return nil, err
	}
	cat, m, f := fc.cat, fc.m, fc.f
	opts.Maps, opts.Lease = cat, f
	r, err := router.Open(ctx, m, opts)
	if err != nil {
		cat.Close()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- f.Run(runCtx, r.Epoch, r.SetMap) }()
	stop := func() {
		cancel()
		<-done // Run releases the lease on its way out
		r.Close()
		cat.Close()
	}
	if err := f.WaitLive(ctx, leaseWait); err != nil {
		stop()
		return nil, fmt.Errorf("catalog %s: %w", cat.Addr(), err)
	}
	return &storeRouter{Router: r, Start: m, Catalog: cat.Addr(), stop: stop}, nil
}

// followedCatalog is a catalog opened to follow: its map in force and a
// Follower for this process.
type followedCatalog struct {
	cat *catalog.Catalog
	m   *shardmap.Map
	f   *catalog.Follower
}

// openFollower opens the catalog at dsn (application_name "pgshard
// <who>"), loads its map and builds this process's Follower: lease owner
// "pgshard-<who>@host:pid", kind kind, ttl (0: the default), errors to
// onError(catalog address). On error nothing is left open.
func openFollower(ctx context.Context, dsn, who, kind string, ttl time.Duration, onError func(addr string) func(error)) (*followedCatalog, error) {
	cat, err := catalog.Open(ctx, dsn, catalog.Options{ApplicationName: "pgshard " + who})
	if err != nil {
		return nil, err
	}
	m, err := cat.Load(ctx)
	if err != nil {
		cat.Close()
		return nil, fmt.Errorf("catalog %s: load the map: %w", cat.Addr(), err)
	}
	host, _ := os.Hostname()
	f, err := cat.NewFollower(catalog.FollowOptions{
		Owner:   fmt.Sprintf("pgshard-%s@%s:%d", who, host, os.Getpid()),
		Kind:    kind,
		TTL:     ttl,
		OnError: onError(cat.Addr()),
	})
	if err != nil {
		cat.Close()
		return nil, err
	}
	return &followedCatalog{cat: cat, m: m, f: f}, nil
}

// throttled returns an error reporter that writes to w, prefixed, at most
// once per every (later ones in between are counted and the count shown).
func throttled(w io.Writer, prefix string, every time.Duration) func(error) {
	var mu sync.Mutex
	var last time.Time
	var skipped int
	return func(err error) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if !last.IsZero() && now.Sub(last) < every {
			skipped++
			return
		}
		more := ""
		if skipped > 0 {
			more = fmt.Sprintf(" (and %d more since the last report)", skipped)
		}
		fmt.Fprintf(w, "%s: %v%s\n", prefix, err, more)
		last, skipped = now, 0
	}
}

// storeOptions returns the store options the store section of a
// configuration asks for. The conversion lives here, not in store or
// router, so that neither depends on the configuration package.
func storeOptions(c config.Store) store.Options {
	return store.Options{
		ConnectAttempts:  c.ConnectAttempts,
		ConnectInterval:  c.ConnectInterval,
		StatementTimeout: c.StatementTimeout,
		TraceMax:         c.TraceMax,
		MaxConns:         c.MaxConns,
	}
}

// routerOptions returns the router options a configuration's store
// section asks for.
func routerOptions(c config.Store) router.Options {
	return router.Options{UsePooler: c.UsePooler, Store: storeOptions(c)}
}
