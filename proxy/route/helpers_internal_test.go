package route

import (
	"fmt"
	"testing"

	"github.com/pgshard/pgshard/shardmap"
)

func testMapInternal(t testing.TB) *shardmap.Map {
	t.Helper()
	var shards []shardmap.Shard
	for i := 0; i < 4; i++ {
		shards = append(shards, shardmap.Shard{Name: fmt.Sprintf("s%d", i), Ordinal: i, DSN: "postgres://x"})
	}
	m, err := shardmap.Even(4096, shards)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
