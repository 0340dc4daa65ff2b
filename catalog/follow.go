package catalog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/shardmap"
)

// DefaultLeaseTTL is a Follower's lease TTL when none is given.
const DefaultLeaseTTL = 10 * time.Second

// FollowOptions configure a Follower.
type FollowOptions struct {
	// Owner names the lease (unique per process, e.g. "router@host:pid").
	Owner string
	// Kind says what the owner is ("router", "proxy"), informational.
	Kind string
	// TTL is the lease's time to live (default DefaultLeaseTTL). The lease
	// is renewed every TTL/3, so two renewals in a row may fail before it
	// lapses.
	TTL time.Duration
	// Interval is the pause between polls of the catalog's epoch (Watch;
	// default: the smaller of DefaultWatchInterval and TTL/3).
	Interval time.Duration
	// OnError, when set, is told of each failed poll, map switch, acquire
	// or renewal; the Follower keeps trying after one.
	OnError func(error)
}

// ErrNoLease is matched (errors.Is) by a *NoLeaseError.
var ErrNoLease = errors.New("no live lease in the catalog")

// NoLeaseError is a Follower's answer while it cannot prove that it serves
// the catalog's map: it holds no lease (not acquired yet, or lost), or the
// lease's local bound (Lease.ValidUntil) passed without a renewal — the
// catalog may be unreachable, and the map may have changed meanwhile.
type NoLeaseError struct {
	Owner string
	// Since is when the lease's local bound passed; zero when no lease
	// was ever held.
	Since time.Time
	// Last is the last acquire or renewal error, if any.
	Last error
}

func (e *NoLeaseError) Error() string {
	s := fmt.Sprintf("catalog lease %q is not live", e.Owner)
	if e.Since.IsZero() {
		s += " (not acquired yet)"
	} else {
		s += fmt.Sprintf(" (lapsed %v ago)", time.Since(e.Since).Round(time.Millisecond))
	}
	s += ": the map in use cannot be proven current, so keyed operations are refused until the lease is renewed"
	if e.Last != nil {
		s += "; last catalog error: " + e.Last.Error()
	}
	return s
}

// Is makes errors.Is(err, ErrNoLease) true.
func (e *NoLeaseError) Is(target error) bool { return target == ErrNoLease }

// Unwrap returns the last catalog error.
func (e *NoLeaseError) Unwrap() error { return e.Last }

// Follower keeps a process's shard map current from the catalog (Watch)
// and holds the process's lease (Acquire, Renew): a row naming the owner
// and the epoch it serves, renewed every TTL/3. Check says whether the
// process may serve: only while the lease is live by its local bound. A
// lease lost (it lapsed by the catalog's clock) is acquired again — with
// a new token — only after the map has been reloaded from the catalog, so
// a process cut off from the catalog never resumes on a map it missed
// changes of. Safe for concurrent use; Run runs the loops.
type Follower struct {
	c    *Catalog
	opts FollowOptions

	mu    sync.Mutex
	lease Lease
	held  bool
	last  error

	// live is, while the lease is held, its local bound as the monotonic
	// time since base (0: not held): Check's lock-free fast path (a
	// proxy checks per keyed statement). Set with every change of lease
	// or held, under mu (publish).
	base time.Time
	live atomic.Int64

	// wake asks Run's watch for a poll now (Nudge; one pending at most).
	wake chan struct{}
}

// Nudge asks the follower to poll the catalog now rather than at its next
// Interval: the caller learnt that the map moved on (a shard's fence named
// a newer epoch). It never blocks; nudges while one is pending are one,
// and polls are at most one per WakeGap.
func (f *Follower) Nudge() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// publish records the lease's local bound for Check's fast path; under
// f.mu.
func (f *Follower) publish() {
	if f.held {
		f.live.Store(max(int64(f.lease.ValidUntil.Sub(f.base)), 1))
	} else {
		f.live.Store(0)
	}
}

// NewFollower returns a Follower of c for opts.Owner.
func (c *Catalog) NewFollower(opts FollowOptions) (*Follower, error) {
	if opts.TTL <= 0 {
		opts.TTL = DefaultLeaseTTL
	}
	if opts.Interval <= 0 {
		opts.Interval = min(DefaultWatchInterval, opts.TTL/3)
	}
	if err := checkLeaseArgs(opts.Owner, 0, opts.TTL); err != nil {
		return nil, err
	}
	if opts.TTL < 30*time.Millisecond {
		return nil, fmt.Errorf("lease %q: ttl %v is below 30ms (renewed every ttl/3)", opts.Owner, opts.TTL)
	}
	return &Follower{c: c, opts: opts, base: time.Now(), wake: make(chan struct{}, 1)}, nil
}

// Check returns nil while the lease is live by its local bound at now,
// else a *NoLeaseError.
func (f *Follower) Check(now time.Time) error {
	if u := f.live.Load(); u > 0 && int64(now.Sub(f.base)) < u {
		return nil // held, and live by its local bound
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held && f.lease.Valid(now) {
		return nil
	}
	e := &NoLeaseError{Owner: f.opts.Owner, Last: f.last}
	if !f.lease.ValidUntil.IsZero() {
		e.Since = f.lease.ValidUntil
	}
	return e
}

// WaitLive waits until the lease is live (Check passes), polling every
// 20 ms, at most within or until ctx ends: for a process that must not
// serve before its first lease (Run acquires it).
func (f *Follower) WaitLive(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		err := f.Check(time.Now())
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no lease within %v: %w", within, errors.Join(err, ctx.Err()))
		case <-t.C:
		}
	}
}

// Lease returns the lease last acquired or renewed and whether it is held
// (it may have lapsed since: see Check).
func (f *Follower) Lease() (Lease, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lease, f.held
}

func (f *Follower) report(err error) {
	f.mu.Lock()
	f.last = err
	f.mu.Unlock()
	if f.opts.OnError != nil {
		f.opts.OnError(err)
	}
}

// Run follows the catalog until ctx ends: it watches the epoch (Watch,
// every Interval, and at once after a Nudge) and hands each newer map to
// apply (e.g. the router's SetMap; an error is reported and the map
// retried at the next renewal),
// and acquires and renews the lease every TTL/3 with the epoch served()
// reports. Before each acquire it loads the catalog's map and applies it
// if newer. It returns ctx.Err() when ctx ends, after releasing the lease
// (best effort, bounded by one TTL). Call it once, in a goroutine the
// caller waits for.
func (f *Follower) Run(ctx context.Context, served func() uint64, apply func(context.Context, *shardmap.Map) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return f.c.Watch(gctx, served(), WatchOptions{Interval: f.opts.Interval, OnError: f.report, Wake: f.wake},
			func(m *shardmap.Map) error {
				if err := apply(gctx, m); err != nil {
					f.report(fmt.Errorf("switch to the catalog's map (epoch %d): %w", m.Epoch, err))
				}
				return nil
			})
	})
	g.Go(func() error {
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-gctx.Done():
				f.release()
				return gctx.Err()
			case <-t.C:
			}
			f.renew(gctx, served, apply)
			t.Reset(f.opts.TTL / 3)
		}
	})
	err := g.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// catchUp loads the catalog's map and applies it when newer than served.
func (f *Follower) catchUp(ctx context.Context, served func() uint64, apply func(context.Context, *shardmap.Map) error) error {
	e, err := f.c.Epoch(ctx)
	if err != nil || e <= served() {
		return err
	}
	m, err := f.c.Load(ctx)
	if err != nil {
		return err
	}
	if m.Epoch <= served() {
		return nil
	}
	if err := apply(ctx, m); err != nil {
		return fmt.Errorf("switch to the catalog's map (epoch %d): %w", m.Epoch, err)
	}
	return nil
}

// renew acquires the lease (after catching up with the catalog's map) or
// renews it; each step bounded by the TTL.
func (f *Follower) renew(ctx context.Context, served func() uint64, apply func(context.Context, *shardmap.Map) error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.TTL)
	defer cancel()
	f.mu.Lock()
	l, held := f.lease, f.held
	f.mu.Unlock()
	if held && !l.Valid(time.Now()) {
		// The lease lapsed locally (renewals failed): whatever the map
		// did meanwhile, catch up before serving again.
		if err := f.catchUp(ctx, served, apply); err != nil {
			f.report(err)
			return
		}
	}
	if held {
		n, err := f.c.Renew(ctx, l, served())
		if err == nil {
			f.mu.Lock()
			f.lease, f.last = n, nil
			f.publish()
			f.mu.Unlock()
			return
		}
		f.report(err)
		if !errors.Is(err, ErrLeaseLost) {
			return // the catalog did not answer: the lease lapses by its bound
		}
		f.mu.Lock()
		f.held = false
		f.publish()
		f.mu.Unlock()
	}
	if err := f.catchUp(ctx, served, apply); err != nil {
		f.report(err)
		return
	}
	n, err := f.c.Acquire(ctx, f.opts.Owner, f.opts.Kind, served(), f.opts.TTL)
	if err != nil {
		f.report(err)
		return
	}
	f.mu.Lock()
	f.lease, f.held, f.last = n, true, nil
	f.publish()
	f.mu.Unlock()
}

// release ends the lease at shutdown (best effort).
func (f *Follower) release() {
	f.mu.Lock()
	l, held := f.lease, f.held
	f.held = false
	f.publish()
	f.mu.Unlock()
	if !held {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.opts.TTL)
	defer cancel()
	_ = f.c.Release(ctx, l)
}
