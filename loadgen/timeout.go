package loadgen

import (
	"context"
	"reflect"
	"sync/atomic"
	"time"
)

// timeoutTarget bounds every call to a Target, so a target that hangs
// (a stuck pool, a lost connection) fails calls with a timeout instead of
// hanging a run: every loop of the run then stays bounded.
//
// Calls share their deadline contexts: a context.WithTimeout per call
// (a timer armed and stopped, a child registered with the parent and
// removed, a Done channel) was a tenth of the engine's CPU at 3,000
// ops/s. A call started at t on parent p takes the context derived from p
// with deadline t0 + d + d/8 made by an earlier call at t0 ≥ t - d/8, so
// every call gets between d and 9/8 d, canceled with p as before. Each
// shared context expires on its own (at most 9 live per parent and d); a
// few recent parents are kept, those of comparable (pointer) type only,
// and a parent shares from its second call on.
type timeoutTarget struct {
	t     Target
	d     time.Duration
	slack time.Duration
	slots [sharedCtxSlots]atomic.Pointer[sharedCtx]
	turn  atomic.Uint32
}

// sharedCtxSlots is how many parents share deadline contexts at once
// (a run's workers, relays and setup use one each).
const sharedCtxSlots = 4

// sharedCtx is a deadline context shared by the calls on parent that
// start before until (ctx nil: parent was seen once, nothing shared yet).
type sharedCtx struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc // kept, never called: see ctx
	until  time.Time
}

// withTimeout wraps t when d > 0.
func withTimeout(t Target, d time.Duration) Target {
	if d <= 0 {
		return t
	}
	return &timeoutTarget{t: t, d: d, slack: d / 8}
}

// ctx returns a context bounding a call on parent that starts now to
// between d and d + slack; release ends a context that was not shared.
func (w *timeoutTarget) ctx(parent context.Context) (ctx context.Context, release context.CancelFunc) {
	now := time.Now()
	slot, seen := -1, false
	for i := range w.slots {
		s := w.slots[i].Load()
		if s == nil || s.parent != parent {
			continue
		}
		if s.ctx != nil && now.Before(s.until) {
			return s.ctx, noRelease
		}
		slot, seen = i, true
		break
	}
	if w.slack <= 0 || reflect.TypeOf(parent).Kind() != reflect.Pointer {
		// Too short a bound to share, or a parent that cannot be
		// compared: a context of the call's own.
		return context.WithTimeout(parent, w.d)
	}
	if !seen {
		// A parent's first call gets a context of its own, and the
		// parent is noted: a caller with a new parent per call (whose
		// shared contexts would each live d) keeps paying as before.
		for i := range w.slots {
			if w.slots[i].Load() == nil {
				slot = i
				break
			}
		}
		if slot < 0 {
			slot = int(w.turn.Add(1) % sharedCtxSlots)
		}
		w.slots[slot].Store(&sharedCtx{parent: parent})
		return context.WithTimeout(parent, w.d)
	}
	// The context ends at its deadline or with its parent, never
	// earlier: calls sharing it may still run when it is replaced.
	ctx, cancel := context.WithDeadline(parent, now.Add(w.d+w.slack))
	w.slots[slot].Store(&sharedCtx{parent: parent, ctx: ctx, cancel: cancel, until: now.Add(w.slack)})
	return ctx, noRelease
}

func noRelease() {}

func (w *timeoutTarget) LoadForEvent(ctx context.Context, id, eventID string) (*Execution, bool, error) {
	ctx, cancel := w.ctx(ctx)
	defer cancel()
	return w.t.LoadForEvent(ctx, id, eventID)
}

func (w *timeoutTarget) Commit(ctx context.Context, c *Commit) error {
	ctx, cancel := w.ctx(ctx)
	defer cancel()
	return w.t.Commit(ctx, c)
}

func (w *timeoutTarget) PendingOutbox(ctx context.Context, limit int) ([]OutboxEntry, error) {
	ctx, cancel := w.ctx(ctx)
	defer cancel()
	return w.t.PendingOutbox(ctx, limit)
}

func (w *timeoutTarget) AckOutbox(ctx context.Context, seq int64) error {
	ctx, cancel := w.ctx(ctx)
	defer cancel()
	return w.t.AckOutbox(ctx, seq)
}

func (w *timeoutTarget) PendingSpawns(ctx context.Context, limit int) ([]SpawnEntry, error) {
	ctx, cancel := w.ctx(ctx)
	defer cancel()
	return w.t.PendingSpawns(ctx, limit)
}

func (w *timeoutTarget) AckSpawn(ctx context.Context, seq int64) error {
	ctx, cancel := w.ctx(ctx)
	defer cancel()
	return w.t.AckSpawn(ctx, seq)
}

func (w *timeoutTarget) DueTimers(ctx context.Context, now float64, limit int) ([]TimerEntry, error) {
	ctx, cancel := w.ctx(ctx)
	defer cancel()
	return w.t.DueTimers(ctx, now, limit)
}

func (w *timeoutTarget) DeleteTimer(ctx context.Context, id, path string, fireAt float64) (bool, error) {
	ctx, cancel := w.ctx(ctx)
	defer cancel()
	return w.t.DeleteTimer(ctx, id, path, fireAt)
}

func (w *timeoutTarget) Close() { w.t.Close() }
