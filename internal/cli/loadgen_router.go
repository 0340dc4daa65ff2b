package cli

import (
	"context"

	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// openRouter opens the router over m's shards: their PgBouncers when
// pooler, else their Postgres directly.
func openRouter(ctx context.Context, m *shardmap.Map, o store.Options, pooler bool) (store.ExecutionStore, error) {
	return router.Open(ctx, m, router.Options{Store: o, UsePooler: pooler})
}
