package cli

import (
	"context"

	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// openRouter opens the router over m's shards: their PgBouncers when
// pooler, else their Postgres directly.
func openRouter(ctx context.Context, m *shardmap.Map, o store.Options, pooler bool) (store.ExecutionStore, error) {
	return router.Open(ctx, m, router.Options{Store: o, UsePooler: pooler})
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
