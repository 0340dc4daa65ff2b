package loadgen

import (
	"context"
	"time"
)

// timeoutTarget bounds every call to a Target, so a target that hangs
// (a stuck pool, a lost connection) fails calls with a timeout instead of
// hanging a run: every loop of the run then stays bounded.
type timeoutTarget struct {
	t Target
	d time.Duration
}

// withTimeout wraps t when d > 0.
func withTimeout(t Target, d time.Duration) Target {
	if d <= 0 {
		return t
	}
	return &timeoutTarget{t: t, d: d}
}

func (w *timeoutTarget) LoadForEvent(ctx context.Context, id, eventID string) (*Execution, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, w.d)
	defer cancel()
	return w.t.LoadForEvent(ctx, id, eventID)
}

func (w *timeoutTarget) Commit(ctx context.Context, c *Commit) error {
	ctx, cancel := context.WithTimeout(ctx, w.d)
	defer cancel()
	return w.t.Commit(ctx, c)
}

func (w *timeoutTarget) PendingOutbox(ctx context.Context, limit int) ([]OutboxEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, w.d)
	defer cancel()
	return w.t.PendingOutbox(ctx, limit)
}

func (w *timeoutTarget) AckOutbox(ctx context.Context, seq int64) error {
	ctx, cancel := context.WithTimeout(ctx, w.d)
	defer cancel()
	return w.t.AckOutbox(ctx, seq)
}

func (w *timeoutTarget) PendingSpawns(ctx context.Context, limit int) ([]SpawnEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, w.d)
	defer cancel()
	return w.t.PendingSpawns(ctx, limit)
}

func (w *timeoutTarget) AckSpawn(ctx context.Context, seq int64) error {
	ctx, cancel := context.WithTimeout(ctx, w.d)
	defer cancel()
	return w.t.AckSpawn(ctx, seq)
}

func (w *timeoutTarget) DueTimers(ctx context.Context, now float64, limit int) ([]TimerEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, w.d)
	defer cancel()
	return w.t.DueTimers(ctx, now, limit)
}

func (w *timeoutTarget) DeleteTimer(ctx context.Context, id, path string, fireAt float64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, w.d)
	defer cancel()
	return w.t.DeleteTimer(ctx, id, path, fireAt)
}

func (w *timeoutTarget) Close() { w.t.Close() }
