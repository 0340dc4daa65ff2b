package catalog_test

import (
	"reflect"
	"testing"

	"github.com/pgshard/pgshard/shardmap"
)

// TestEmptyShard: a shard added owning no buckets (shardmap.AddEmpty) is
// pushed by CAS as the next epoch and loads back marked Empty, the other
// shards and every bucket unchanged; a later map giving it buckets loads
// it unmarked.
func TestEmptyShard(t *testing.T) {
	c, _ := installed(t, "direct")
	ctx := testCtx(t)
	shards := []shardmap.Shard{
		{Name: "a", Ordinal: 0, DSN: "postgres://a/db"},
		{Name: "b", Ordinal: 1, DSN: "postgres://b/db", PoolerDSN: "postgres://b:6432/db"},
	}
	m, err := shardmap.Even(64, shards)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push(ctx, m, 0); err != nil {
		t.Fatal(err)
	}
	next, err := shardmap.AddEmpty(m, shardmap.Shard{Name: "c", Ordinal: -1, DSN: "postgres://c/db"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push(ctx, next, m.Epoch); err != nil {
		t.Fatal(err)
	}
	got, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Epoch != 2 || !reflect.DeepEqual(got.Shards, next.Shards) || !reflect.DeepEqual(got.Ranges, m.Ranges) {
		t.Fatalf("loaded epoch %d shards %+v ranges %v; want epoch 2, %+v, %v", got.Epoch, got.Shards, got.Ranges, next.Shards, m.Ranges)
	}
	if !got.Shards[2].Empty || got.Shards[0].Empty {
		t.Errorf("Empty marks: %+v", got.Shards)
	}

	planned, err := shardmap.PlanAdd(got, shardmap.Shard{Name: "d", Ordinal: 3, DSN: "postgres://d/db"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Push(ctx, planned, got.Epoch); err != nil {
		t.Fatal(err)
	}
	again, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range again.Shards {
		if s.Empty || again.BucketCounts()[s.Name] != 16 {
			t.Errorf("after the rebalance: %+v owns %d buckets", s, again.BucketCounts()[s.Name])
		}
	}
}
