package shardmap_test

import (
	"fmt"

	"github.com/pgshard/pgshard/shardmap"
)

// shards returns n shards named s0..s{n-1} with ordinals 0..n-1.
func shards(n int) []shardmap.Shard {
	out := make([]shardmap.Shard, n)
	for i := range out {
		out[i] = shardmap.Shard{Name: fmt.Sprintf("s%d", i), Ordinal: i, DSN: fmt.Sprintf("postgres://127.0.0.1:%d/harel", 5432+i)}
	}
	return out
}
