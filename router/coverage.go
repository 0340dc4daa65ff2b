package router

// Coverage of a fan-out scan over the shards' fences (ARCHITECTURE.md §6):
// each shard's part of a scan (due timers, pending spawns) is filtered to
// the buckets its fence serves, in that part's own snapshot, and returns
// that served set. A range move flips the range on its source and then on
// its destination in two transactions; a fan-out whose parts fall on
// either side of the flips sees the range served by nobody (its rows
// missed) or by both (read twice). scanCovered reads again until the
// parts' served sets cover every bucket exactly once — a few tries over a
// few hundred milliseconds, with the map reloaded in between (the
// destination may be a shard this router does not know yet) — and fails
// rather than return a partial or doubled answer.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pgshard/pgshard/store"
)

// ErrNotCovered is matched (errors.Is) by a fan-out scan whose shards'
// fences did not serve every bucket exactly once in any of its tries: a
// range move is between the flips of its source and its destination (a
// mover that died there leaves it so until it is resumed). Nothing was
// returned; the scan can be retried.
var ErrNotCovered = errors.New("the shards' fences do not serve every bucket exactly once")

// coverageTries and coveragePause bound scanCovered: the first retry after
// coveragePause, each next one after twice the pause before it (10 ms up
// to 160 ms: about 310 ms in all). A flip's window is one fence write on
// the destination (a few milliseconds).
const (
	coverageTries = 6
	coveragePause = 10 * time.Millisecond
)

// scanCovered runs a fan-out scan (read returns a shard's part and the
// served set it was filtered by) until the parts' served sets cover every
// bucket exactly once, and returns the parts by shard index.
func scanCovered[T any](ctx context.Context, r *Router, what string, read func(context.Context, *store.Store) (T, store.Served, error)) ([]T, error) {
	type part struct {
		v  T
		sv store.Served
	}
	pause := coveragePause
	var gap error
	for try := 0; try < coverageTries; try++ {
		if try > 0 {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("%s: %w (while waiting to read again after: %v)", what, ctx.Err(), gap)
			case <-t.C:
			}
			pause *= 2
			// The destination may be a shard this router's map does not
			// have yet: take the catalog's map (a no-op without one).
			if _, err := r.Reload(ctx); err != nil {
				gap = fmt.Errorf("%w (and %v)", gap, err)
			}
		}
		parts, err := fanOut(ctx, r, what, func(ctx context.Context, s *store.Store) (part, error) {
			v, sv, err := read(ctx, s)
			return part{v, sv}, err
		})
		if err != nil {
			return nil, err
		}
		served := make([]store.Served, len(parts))
		for i, p := range parts {
			served[i] = p.sv
		}
		if gap = coverage(served); gap == nil {
			out := make([]T, len(parts))
			for i, p := range parts {
				out[i] = p.v
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("%s: %w after %d reads: %v", what, ErrNotCovered, coverageTries, gap)
}

// coverage checks that the served sets cover buckets 0..n-1 exactly once.
// A shard whose fence is off serves what its map says; when no shard's
// fence is on there is nothing to check (a cluster without fences), and
// when only some are on the check cannot be made either — the map is
// trusted, as before fences existed.
func coverage(served []store.Served) error {
	buckets := 0
	var rs []store.BucketRange
	for _, sv := range served {
		if !sv.Fenced {
			return nil
		}
		if buckets != 0 && sv.Buckets != buckets {
			return fmt.Errorf("the shards' fences disagree on the bucket count (%d and %d)", buckets, sv.Buckets)
		}
		buckets = sv.Buckets
		rs = append(rs, sv.Ranges...)
	}
	slices.SortFunc(rs, func(a, b store.BucketRange) int { return a.Lo - b.Lo })
	next := 0 // the first bucket not yet covered
	for _, r := range rs {
		switch {
		case r.Lo > next:
			return fmt.Errorf("buckets %d-%d are served by no shard", next, r.Lo-1)
		case r.Lo < next:
			return fmt.Errorf("buckets %d-%d are served by two shards", r.Lo, min(r.Hi, next-1))
		}
		next = r.Hi + 1
	}
	if next < buckets {
		return fmt.Errorf("buckets %d-%d are served by no shard", next, buckets-1)
	}
	if next > buckets {
		return fmt.Errorf("a served range ends at bucket %d, past the last bucket %d", next-1, buckets-1)
	}
	return nil
}
