package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgshard/pgshard/internal/ctxtime"
	"github.com/pgshard/pgshard/shardmap"
)

// DefaultWatchInterval is Watch's polling interval when none is given.
const DefaultWatchInterval = time.Second

// WatchOptions tune Watch.
type WatchOptions struct {
	// Interval is the pause between polls (default DefaultWatchInterval).
	Interval time.Duration
	// PollTimeout bounds each poll (default: Interval, at least 1 s).
	PollTimeout time.Duration
	// OnError, when set, is told of each failed poll; Watch keeps
	// polling after one (the catalog may come back).
	OnError func(error)
	// Wake, when set, makes Watch poll at once on each receive instead of
	// waiting out Interval (a process that learnt from a shard that the
	// map moved on asks for it now: Follower.Nudge), but not sooner than
	// WakeGap after the previous poll began, and not while the last poll
	// failed (an unreachable catalog is polled, and its errors reported,
	// at Interval however many clients the fence refuses meanwhile).
	Wake <-chan struct{}
}

// WakeGap is the least time between the starts of two polls that
// WatchOptions.Wake asked for: a burst of refusals (every client of a
// range that just flipped) costs the catalog one poll per WakeGap, not
// one per client.
const WakeGap = 5 * time.Millisecond

// Watch follows the catalog by polling its epoch: it calls fn with each
// map whose epoch is greater than since, in increasing epoch order (an
// epoch that came and went between two polls is skipped: fn sees the
// newest), and returns when ctx ends (ctx.Err()) or fn fails (fn's
// error). The first poll is immediate. Polls never overlap and each is
// bounded by PollTimeout; a failed poll goes to OnError and Watch polls
// again after Interval. A receive from Wake polls sooner (at most one
// poll per WakeGap). A poll costs one statement reading the head row;
// the map is loaded only when the epoch grew. Watch runs in the caller's
// goroutine and starts none.
func (c *Catalog) Watch(ctx context.Context, since uint64, opts WatchOptions, fn func(*shardmap.Map) error) error {
	if opts.Interval <= 0 {
		opts.Interval = DefaultWatchInterval
	}
	if opts.PollTimeout <= 0 {
		opts.PollTimeout = max(opts.Interval, time.Second)
	}
	t := time.NewTimer(0)
	defer t.Stop()
	var began time.Time
	failed := false // the last poll failed
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-opts.Wake:
			if failed {
				continue // a catalog that just failed is polled at Interval
			}
			t.Stop() // (Go 1.23 timers: no stale tick after Stop)
			if gap := WakeGap - time.Since(began); gap > 0 && ctxtime.Sleep(ctx, gap) != nil {
				return ctx.Err()
			}
		}
		began = time.Now()
		m, err := c.poll(ctx, since, opts.PollTimeout)
		failed = err != nil
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if opts.OnError != nil {
				opts.OnError(err)
			}
		case m != nil:
			if err := fn(m); err != nil {
				return err
			}
			since = m.Epoch
		}
		t.Reset(opts.Interval)
	}
}

// errEpochWentBack is reported when the catalog's epoch is below one
// already seen: the catalog was replaced or restored from an old backup.
var errEpochWentBack = errors.New("the catalog's epoch went back")

// poll returns the current map if its epoch is greater than since, nil if
// not.
func (c *Catalog) poll(ctx context.Context, since uint64, timeout time.Duration) (*shardmap.Map, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	e, err := c.Epoch(ctx)
	switch {
	case err != nil:
		return nil, err
	case e < since:
		return nil, fmt.Errorf("watch catalog %s: %w: epoch %d after %d (the map is not followed back)", c.addr, errEpochWentBack, e, since)
	case e == since:
		return nil, nil
	}
	m, err := c.Load(ctx)
	if err != nil {
		return nil, err
	}
	if m.Epoch <= since {
		return nil, nil
	}
	return m, nil
}
