package router

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/store"
)

// fanOut runs read on every shard concurrently and returns the shards'
// results by shard index. The first failure cancels the other shards'
// reads; the error names every shard that failed on its own, and never
// none: the shard whose failure cancelled the others is always named, and
// a read that ended in context.Canceled counts as "cancelled because
// another shard failed" only when it does not also carry a verdict of its
// own (a stall check that found its server unreachable cancels the read's
// context too, and its error then matches both context.Canceled and
// store.ErrUnreachable).
func fanOut[T any](ctx context.Context, r *Router, what string, read func(context.Context, *store.Store) (T, error)) ([]T, error) {
	rt := r.rt.Load()
	out := make([]T, len(rt.stores))
	errs := make([]error, len(rt.stores))
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range rt.stores {
		g.Go(func() error {
			v, err := read(gctx, s)
			if err != nil {
				errs[i] = &ShardError{Shard: rt.m.Shards[i].Name, Err: err}
				return errs[i]
			}
			out[i] = v
			return nil
		})
	}
	first := g.Wait() // the error that cancelled gctx
	if first == nil {
		return out, nil
	}
	var failed, all []error
	for _, err := range errs {
		if err == nil {
			continue
		}
		all = append(all, err)
		if err == first || ctx.Err() != nil || !cancelledByOthers(err) {
			failed = append(failed, err)
		}
	}
	if len(failed) == 0 { // cannot happen (first is in errs), but never report no shard
		failed = all
	}
	joined := errors.Join(failed...)
	names := FailedShards(joined)
	return nil, fmt.Errorf("%s: could not read shard(s) %s: %w", what, strings.Join(quote(names), ", "), joined)
}

// cancelledByOthers reports whether a shard's read error is only the
// cancellation the fan-out caused after another shard failed.
func cancelledByOthers(err error) bool {
	return errors.Is(err, context.Canceled) && !errors.Is(err, store.ErrUnreachable)
}

func quote(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fmt.Sprintf("%q", n)
	}
	return out
}

// mergeSorted merges lists, each already sorted by less, into one sorted
// list of at most limit items (limit <= 0: all). It is a k-way merge over a
// heap of the lists' heads: it takes one item at a time and stops at the
// limit, so it looks at no more than limit + k items. Equal items keep the
// order of their lists.
func mergeSorted[T any](lists [][]T, less func(a, b T) bool, limit int) []T {
	h := &mergeHeap[T]{less: less}
	total := 0
	for i, l := range lists {
		total += len(l)
		if len(l) > 0 {
			h.heads = append(h.heads, cursor{list: i})
		}
	}
	h.lists = lists
	if limit <= 0 || limit > total {
		limit = total
	}
	heap.Init(h)
	out := make([]T, 0, limit)
	for len(out) < limit {
		c := &h.heads[0]
		out = append(out, lists[c.list][c.pos])
		c.pos++
		if c.pos == len(lists[c.list]) {
			heap.Pop(h)
		} else {
			heap.Fix(h, 0)
		}
	}
	return out
}

type cursor struct{ list, pos int }

type mergeHeap[T any] struct {
	lists [][]T
	heads []cursor
	less  func(a, b T) bool
}

func (h *mergeHeap[T]) Len() int { return len(h.heads) }
func (h *mergeHeap[T]) Less(i, j int) bool {
	a, b := h.heads[i], h.heads[j]
	x, y := h.lists[a.list][a.pos], h.lists[b.list][b.pos]
	if h.less(x, y) {
		return true
	}
	if h.less(y, x) {
		return false
	}
	return a.list < b.list
}
func (h *mergeHeap[T]) Swap(i, j int) { h.heads[i], h.heads[j] = h.heads[j], h.heads[i] }
func (h *mergeHeap[T]) Push(x any)    { h.heads = append(h.heads, x.(cursor)) }
func (h *mergeHeap[T]) Pop() any {
	last := h.heads[len(h.heads)-1]
	h.heads = h.heads[:len(h.heads)-1]
	return last
}

// timerLess orders timers as every shard's DueTimers does: fire_at, then
// execution id and path bytewise.
func timerLess(a, b store.Timer) bool {
	if a.FireAt != b.FireAt {
		return a.FireAt < b.FireAt
	}
	if a.ExecutionID != b.ExecutionID {
		return a.ExecutionID < b.ExecutionID
	}
	return a.Path < b.Path
}

func summaryLess(a, b store.Summary) bool { return a.ID < b.ID }

// PendingOutbox returns up to limit pending outbox rows (all for limit <=
// 0) of every shard, shared fairly among the shards: each shard is asked
// for up to limit rows, oldest first on that shard (by seq), and the batch
// takes one row of each shard that has rows left, in turn, until it is
// full — starting at a shard that moves on by one with every call. So
// each shard with pending rows gets at least limit/k rows of a batch (k
// shards with rows; all its rows if it has fewer, the unused share going
// to the others), and when limit < k successive calls take turns: a shard
// with a deep backlog cannot starve the others, nor a quiet or new shard
// (whose seqs are small) the busy ones.
//
// Order: each shard's rows in its seq order. No order across shards is
// promised — a seq counts its shard's inserts, so seqs of different
// shards say nothing about which row is older.
func (r *Router) PendingOutbox(ctx context.Context, limit int) ([]store.OutboxRow, error) {
	lists, err := fanOut(ctx, r, "pending outbox", func(ctx context.Context, s *store.Store) ([]store.OutboxRow, error) {
		return s.PendingOutbox(ctx, limit)
	})
	if err != nil {
		return nil, err
	}
	return roundRobin(lists, int(r.outboxTurn.Add(1)-1), limit), nil
}

// PendingSpawns returns up to limit pending spawn intents (all for limit
// <= 0) of every shard, shared fairly among the shards as PendingOutbox
// shares outbox rows; each shard's intents in its seq order.
func (r *Router) PendingSpawns(ctx context.Context, limit int) ([]store.SpawnRow, error) {
	lists, err := scanCovered(ctx, r, "pending spawns", func(ctx context.Context, s *store.Store) ([]store.SpawnRow, store.Served, error) {
		return s.PendingSpawnsServed(ctx, limit)
	})
	if err != nil {
		return nil, err
	}
	return roundRobin(lists, int(r.spawnTurn.Add(1)-1), limit), nil
}

// roundRobin takes one item of each list in turn, starting with list
// start mod len(lists) and skipping exhausted lists, until limit items
// (limit <= 0: all). Each list's items keep their order.
func roundRobin[T any](lists [][]T, start, limit int) []T {
	total := 0
	for _, l := range lists {
		total += len(l)
	}
	if limit <= 0 || limit > total {
		limit = total
	}
	out := make([]T, 0, limit)
	if len(lists) == 0 {
		return out
	}
	pos := make([]int, len(lists))
	for i := start % len(lists); len(out) < limit; i = (i + 1) % len(lists) {
		if pos[i] < len(lists[i]) {
			out = append(out, lists[i][pos[i]])
			pos[i]++
		}
	}
	return out
}

// DueTimers returns the limit (all for limit <= 0) earliest timers due at
// now over all shards, by fire_at, execution id and path.
func (r *Router) DueTimers(ctx context.Context, now float64, limit int) ([]store.Timer, error) {
	lists, err := scanCovered(ctx, r, "due timers", func(ctx context.Context, s *store.Store) ([]store.Timer, store.Served, error) {
		return s.DueTimersServed(ctx, now, limit)
	})
	if err != nil {
		return nil, err
	}
	return mergeSorted(lists, timerLess, limit), nil
}

// ListExecutions returns one page of the executions of all shards matching
// o, by id (bytewise). Every shard is asked for one page after the same
// cursor; the merge keeps the page's first o.PageLimit() ids, and the next
// cursor (the last id kept) continues on every shard where this page ended.
func (r *Router) ListExecutions(ctx context.Context, o store.ListOptions) (store.Page, error) {
	if _, err := store.DecodeCursor(o.Cursor); err != nil {
		return store.Page{}, fmt.Errorf("list executions: %w", err)
	}
	limit := o.PageLimit()
	pages, err := scanCovered(ctx, r, "list executions", func(ctx context.Context, s *store.Store) (store.Page, store.Served, error) {
		return s.ListExecutionsServed(ctx, o)
	})
	if err != nil {
		return store.Page{}, err
	}
	lists := make([][]store.Summary, len(pages))
	total, more := 0, false
	for i, p := range pages {
		lists[i] = p.Items
		total += len(p.Items)
		more = more || p.NextCursor != ""
	}
	page := store.Page{Items: mergeSorted(lists, summaryLess, limit)}
	if len(page.Items) > 0 && (more || total > limit) {
		page.NextCursor = store.EncodeCursor(page.Items[len(page.Items)-1].ID)
		if _, err := store.DecodeCursor(page.NextCursor); err != nil { // an id too long for a cursor
			return store.Page{}, fmt.Errorf("list executions: the page ends at an id no cursor can carry: %w", err)
		}
	}
	return page, nil
}
