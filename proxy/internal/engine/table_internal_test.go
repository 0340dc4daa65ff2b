package engine

import (
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// oneShardTable is the routing table of a one-shard map (64 buckets) and
// the default schema: what the unit tests analyze their statements with.
func oneShardTable(t testing.TB) *route.Table {
	t.Helper()
	m, err := shardmap.Even(64, []shardmap.Shard{{Name: "a", Ordinal: 0, DSN: "postgres://x@127.0.0.1:1/d"}})
	if err != nil {
		t.Fatal(err)
	}
	an, err := route.New(m, route.DefaultSchema(), route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return an
}
