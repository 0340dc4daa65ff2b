package router_test

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"

	"pgregory.net/rapid"

	"github.com/pgshard/pgshard/router"
)

type item struct {
	key  int
	list int // which list it came from
	pos  int
}

func lessItem(a, b item) bool { return a.key < b.key }

// TestMergeSortedProperties: for any sorted lists and limit, the merge is
// the stable sort of their concatenation, cut at the limit.
func TestMergeSortedProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.IntRange(0, 6).Draw(t, "lists")
		lists := make([][]item, k)
		var all []item
		for i := range lists {
			keys := rapid.SliceOfN(rapid.IntRange(-20, 20), 0, 15).Draw(t, fmt.Sprintf("keys%d", i))
			sort.Ints(keys)
			for p, key := range keys {
				lists[i] = append(lists[i], item{key, i, p})
			}
			all = append(all, lists[i]...)
		}
		limit := rapid.IntRange(-1, len(all)+3).Draw(t, "limit")
		got := router.MergeSorted(lists, lessItem, limit)
		want := slices.Clone(all)
		sort.SliceStable(want, func(i, j int) bool { return want[i].key < want[j].key })
		if limit > 0 && limit < len(want) {
			want = want[:limit]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("limit %d\ngot  %v\nwant %v", limit, got, want)
		}
	})
}

func TestMergeSortedExamples(t *testing.T) {
	tests := []struct {
		name  string
		lists [][]int
		limit int
		want  []int
	}{
		{"no lists", nil, 5, []int{}},
		{"empty lists", [][]int{{}, {}}, 0, []int{}},
		{"interleave", [][]int{{1, 4, 7}, {2, 5, 8}, {3, 6, 9}}, 0, []int{1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{"limit stops early", [][]int{{1, 4, 7}, {2, 5, 8}, {3, 6, 9}}, 4, []int{1, 2, 3, 4}},
		{"one list holds the smallest", [][]int{{10, 11}, {1, 2, 3}}, 3, []int{1, 2, 3}},
		{"limit above total", [][]int{{1}, {0}}, 10, []int{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := router.MergeSorted(tt.lists, func(a, b int) bool { return a < b }, tt.limit)
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestShardError(t *testing.T) {
	base := errors.New("connection refused")
	err := fmt.Errorf("pending outbox: %w", errors.Join(
		&router.ShardError{Shard: "shard2", Err: base},
		&router.ShardError{Shard: "shard0", Err: errors.New("x")},
		&router.ShardError{Shard: "shard2", Err: errors.New("y")},
	))
	if got := (&router.ShardError{Shard: "shard2", Err: base}).Error(); got != `shard "shard2": connection refused` {
		t.Errorf("Error() = %q", got)
	}
	if !errors.Is(err, base) {
		t.Error("the shard's error does not unwrap")
	}
	var se *router.ShardError
	if !errors.As(err, &se) || se.Shard != "shard2" {
		t.Errorf("errors.As: %+v", se)
	}
	if got := router.FailedShards(err); !slices.Equal(got, []string{"shard2", "shard0"}) {
		t.Errorf("FailedShards = %v", got)
	}
	if got := router.FailedShards(errors.New("plain")); got != nil {
		t.Errorf("FailedShards(plain) = %v", got)
	}
}
