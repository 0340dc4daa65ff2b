package reshard_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgshard/pgshard/internal/ctxtime"
	"github.com/pgshard/pgshard/reshard"
)

// TestPacedMoveConverges moves a range back and forth under writers with
// a small duty cycle, counting the pacer's pauses through its pause
// function (which does sleep them, so the capture's backlog grows as in
// production): each move pauses, reports those pauses and no others,
// and still finishes, every row in its place. The pacer's clock advances
// 0.2 ms per reading (it reads it once per row copied, per clean-up
// batch, per catch-up round), whatever the machine's speed: on a fast
// one a move of some hundred rows took under one pace slice (20 ms) of
// real time and was never paused, which said nothing about the pacer.
func TestPacedMoveConverges(t *testing.T) {
	e := newEnv(t, 300)
	stop := make(chan struct{})
	wait := e.workload(4, 100000, stop)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			wait()
		}
	}()
	for i := range 2 {
		to := e.shards[1].Name
		if i == 1 {
			to = e.shards[0].Name
		}
		if _, err := reshard.Plan(e.ctx, e.cat, reshard.Request{Lo: 0, Hi: buckets/2 - 1, To: to}); err != nil {
			t.Fatal(err)
		}
		var (
			mu     sync.Mutex
			pauses int
			total  time.Duration
		)
		pause := func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			pauses++
			total += d
			mu.Unlock()
			return ctxtime.Sleep(ctx, d)
		}
		var reads atomic.Int64
		t0 := time.Now()
		clock := func() time.Time { return t0.Add(time.Duration(reads.Add(1)) * 200 * time.Microsecond) }
		opts := reshard.WithClock(reshard.WithPause(reshard.Options{DutyCycle: 0.2, FreezeBudget: 2 * time.Second, Log: logf(t)}, pause), clock)
		res, err := reshard.Apply(e.ctx, e.cat, opts)
		if err != nil {
			t.Fatalf("move %d: %v", i, err)
		}
		if len(res) != 1 {
			t.Fatalf("move %d: %d results, want 1", i, len(res))
		}
		r := res[0]
		t.Logf("move %d: %d rows copied, %d changes replayed, %d pauses (%v), %d catch-up rounds with the pause cut",
			i, r.RowsCopied, r.Replayed, r.Pauses, r.Paused, r.PaceWaived)
		mu.Lock()
		if pauses == 0 {
			t.Errorf("move %d: the pacer never paused (duty cycle 0.2)", i)
		}
		if r.Pauses != pauses || r.Paused != total {
			t.Errorf("move %d: result says %d pauses (%v), the pause function saw %d (%v)", i, r.Pauses, r.Paused, pauses, total)
		}
		mu.Unlock()
	}
	close(stop)
	if ok, _ := wait(); ok == 0 {
		t.Error("the workload committed nothing")
	}
	e.ownedOnce(0, buckets-1)
	e.check()
}
