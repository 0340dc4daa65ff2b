package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// fakeRouter is a router over n shards with empty stores (never used:
// fanOut's readers in these tests only tell the shards apart by them).
func fakeRouter(t *testing.T, n int) *Router {
	t.Helper()
	var shards []shardmap.Shard
	for i := range n {
		shards = append(shards, shardmap.Shard{Name: fmt.Sprintf("shard%d", i), Ordinal: i, DSN: "postgres://x/y"})
	}
	m, err := shardmap.Even(64, shards)
	if err != nil {
		t.Fatal(err)
	}
	rt := &routing{m: m, stores: make([]*store.Store, n)}
	for i := range rt.stores {
		rt.stores[i] = new(store.Store)
	}
	r := &Router{}
	r.rt.Store(rt)
	return r
}

// unreachable is an error shaped like the store's after a failed stall
// check: it matches store.ErrUnreachable and, because the stall check
// cancelled the operation's context, also context.Canceled.
func unreachable(what string) error {
	return fmt.Errorf("%w; the operation: %w", store.ErrUnreachable, fmt.Errorf("%s: %w", what, context.Canceled))
}

// TestFanOutNamesUnreachableShard is the regression test of issue 11,
// defect 1: a shard whose stall check found it unreachable fails with an
// error that also matches context.Canceled; the fan-out must still report
// it (named, matching ErrUnreachable) while it leaves out the shards that
// were merely cancelled because of it.
func TestFanOutNamesUnreachableShard(t *testing.T) {
	tests := []struct {
		name    string
		failing []int // shards that fail on their own (unreachable)
		want    []string
	}{
		{"one unreachable shard, the others cancelled by it", []int{1}, []string{"shard1"}},
		{"two unreachable shards", []int{0, 2}, []string{"shard0", "shard2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := fakeRouter(t, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := fanOut(ctx, r, "pending outbox", func(context.Context, *store.Store) (int, error) { return 0, nil }); err != nil {
				t.Fatalf("healthy fan-out: %v", err)
			}
			_, err := fanOut(ctx, r, "pending outbox", func(ctx context.Context, s *store.Store) (int, error) {
				i := slices.Index(r.rt.Load().stores, s)
				if slices.Contains(tt.failing, i) {
					return 0, unreachable("pending outbox")
				}
				<-ctx.Done() // cancelled because another shard failed
				return 0, fmt.Errorf("pending outbox: %w", ctx.Err())
			})
			if err == nil {
				t.Fatal("the fan-out succeeded with an unreachable shard")
			}
			if got := FailedShards(err); !slices.Equal(got, tt.want) {
				t.Errorf("FailedShards = %v, want %v (error: %v)", got, tt.want, err)
			}
			if !errors.Is(err, store.ErrUnreachable) {
				t.Errorf("errors.Is(err, ErrUnreachable) = false: %v", err)
			}
			if strings.Contains(err.Error(), "%!") {
				t.Errorf("malformed message: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), fmt.Sprintf("%q", w)) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

func TestRoundRobin(t *testing.T) {
	lists := [][]int{{1, 2, 3, 4}, {}, {10, 11}, {20}}
	tests := []struct {
		start, limit int
		want         []int
	}{
		{0, 0, []int{1, 10, 20, 2, 11, 3, 4}},
		{0, 3, []int{1, 10, 20}},
		{1, 3, []int{10, 20, 1}}, // list 1 is empty: its turn goes to the next
		{2, 4, []int{10, 20, 1, 11}},
		{3, 1, []int{20}},
		{7, 2, []int{20, 1}}, // start wraps around
		{0, 100, []int{1, 10, 20, 2, 11, 3, 4}},
	}
	for _, tt := range tests {
		if got := roundRobin(lists, tt.start, tt.limit); !slices.Equal(got, tt.want) {
			t.Errorf("roundRobin(start %d, limit %d) = %v, want %v", tt.start, tt.limit, got, tt.want)
		}
	}
	if got := roundRobin[int](nil, 5, 3); len(got) != 0 {
		t.Errorf("no lists: %v", got)
	}
}
