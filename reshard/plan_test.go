package reshard_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/reshard"
	"github.com/pgshard/pgshard/shardmap"
)

func twoShards(t *testing.T, secondEmpty bool) *shardmap.Map {
	t.Helper()
	a := shardmap.Shard{Name: "a", Ordinal: 0, DSN: "postgres://a"}
	b := shardmap.Shard{Name: "b", Ordinal: 1, DSN: "postgres://b"}
	if secondEmpty {
		m, err := shardmap.Even(64, []shardmap.Shard{a})
		if err != nil {
			t.Fatal(err)
		}
		if m, err = shardmap.AddEmpty(m, b); err != nil {
			t.Fatal(err)
		}
		return m
	}
	m, err := shardmap.Even(64, []shardmap.Shard{a, b})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPlanMoves(t *testing.T) {
	for _, tc := range []struct {
		name  string
		empty bool
		req   reshard.Request
		want  []shardmap.Move
		err   string
	}{
		{"add an empty shard", true, reshard.Request{AddShard: "b"}, []shardmap.Move{{Lo: 32, Hi: 63, From: "a", To: "b"}}, ""},
		{"add a shard that owns buckets", false, reshard.Request{AddShard: "b"}, nil, "already owns buckets"},
		{"add an unknown shard", true, reshard.Request{AddShard: "c"}, nil, "register the shard first"},
		{"remove", false, reshard.Request{RemoveShard: "b"}, []shardmap.Move{{Lo: 32, Hi: 63, From: "b", To: "a"}}, ""},
		{"move across owners", false, reshard.Request{Lo: 20, Hi: 40, To: "b"}, []shardmap.Move{{Lo: 20, Hi: 31, From: "a", To: "b"}}, ""},
		{"move across owners to a", false, reshard.Request{Lo: 20, Hi: 40, To: "a"}, []shardmap.Move{{Lo: 32, Hi: 40, From: "b", To: "a"}}, ""},
		{"move out of range", false, reshard.Request{Lo: 20, Hi: 64, To: "a"}, nil, "buckets are 0-63"},
		{"two requests", false, reshard.Request{AddShard: "b", RemoveShard: "a"}, nil, "exactly one"},
		{"none", false, reshard.Request{}, nil, "exactly one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := reshard.PlanMoves(twoShards(t, tc.empty), tc.req)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want an error containing %q, got %v (moves %v)", tc.err, err, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("moves %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReassign(t *testing.T) {
	m := twoShards(t, true)
	next, err := catalog.Reassign(m, 10, 20, "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	want := []shardmap.Range{{Lo: 0, Hi: 9, Shard: "a"}, {Lo: 10, Hi: 20, Shard: "b"}, {Lo: 21, Hi: 63, Shard: "a"}}
	if next.Epoch != m.Epoch+1 || !slices.Equal(next.Ranges, want) || next.Shards[1].Empty {
		t.Errorf("reassign 10-20 a→b: epoch %d ranges %v shards %+v", next.Epoch, next.Ranges, next.Shards)
	}
	if next.ShardForBucket(15).Name != "b" || m.ShardForBucket(15).Name != "a" {
		t.Error("the lookup tables do not follow the new ranges, or the old map changed")
	}
	// Back again: ranges merge, b is empty again.
	back, err := catalog.Reassign(next, 10, 20, "b", "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Ranges) != 1 || !back.Shards[1].Empty {
		t.Errorf("moved back: ranges %v shards %+v", back.Ranges, back.Shards)
	}
	if _, err := catalog.Reassign(next, 5, 15, "a", "b"); err == nil || !strings.Contains(err.Error(), `bucket 10 belongs to "b"`) {
		t.Errorf("a range not all owned by from: got %v", err)
	}
}
