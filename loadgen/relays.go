package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// relayBatch bounds the rows a relay handles per poll (small enough that
// the outbox and the spawns take turns under a backlog).
const relayBatch = 100

// relayEvent is the JSON of an emitted event.
type relayEvent struct {
	ID        string `json:"id"`
	EmittedNs int64  `json:"emitted_ns"`
}

// pause waits d or until the run stops; it reports whether to go on.
func (r *runner) pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stopCh:
		return false
	case <-ctx.Done():
		return false
	}
}

// outboxRelay is the production outbox relay: pending rows are delivered as
// events to their target execution (deduplicated by event id) and acked;
// pending spawn intents are acked. A batch's rows are delivered by up to
// RelayWorkers goroutines at once. It runs until the run stops.
func (r *runner) outboxRelay(ctx context.Context) {
	rec := r.relayRec
	for !r.stopped() && ctx.Err() == nil {
		busy := false
		rows, err := r.t.PendingOutbox(ctx, relayBatch)
		if err != nil {
			r.relayError(ctx, err)
		}
		busy = len(rows) > 0
		r.parallel(len(rows), func(i int) { r.deliver(ctx, rec, rows[i]) })
		spawns, err := r.t.PendingSpawns(ctx, relayBatch)
		if err != nil {
			r.relayError(ctx, err)
		}
		busy = busy || len(spawns) > 0
		r.parallel(len(spawns), func(i int) {
			if err := r.t.AckSpawn(ctx, spawns[i].Seq); err != nil {
				r.relayError(ctx, err)
			} else if r.measured(time.Now()) {
				r.relays.spawns.Add(1)
			}
		})
		if !busy && !r.pause(ctx, r.o.RelayInterval) {
			return
		}
	}
}

// parallel runs f(0..n-1) on up to RelayWorkers goroutines and waits for
// them; it stops starting new items once the run stops.
func (r *runner) parallel(n int, f func(i int)) {
	var g errgroup.Group
	g.SetLimit(max(r.o.RelayWorkers, 1))
	for i := 0; i < n && !r.stopped(); i++ {
		g.Go(func() error { f(i); return nil })
	}
	_ = g.Wait()
}

func (r *runner) relayError(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	m := r.measured(time.Now())
	if m {
		r.relays.errors.Add(1)
	}
	r.relayRec.recordError(m, fmt.Errorf("relay: %w", err))
}

func (r *runner) deliver(ctx context.Context, rec *recorder, row OutboxEntry) {
	t0 := time.Now()
	m := r.measured(t0)
	var ev relayEvent
	if err := json.Unmarshal([]byte(row.Event), &ev); err != nil || ev.ID == "" {
		ev.ID = fmt.Sprintf("outbox-%d", row.Seq)
	}
	outcome, err := r.apply(ctx, row.TargetID, ev.ID)
	if errors.Is(err, errMissing) {
		// Undeliverable (no such target, e.g. a row another program left):
		// counted as an error, then acked like a dead letter, so that one
		// bad row cannot stall the relay behind it forever.
		r.relayError(ctx, fmt.Errorf("outbox seq %d undeliverable: %w", row.Seq, err))
		if err := r.t.AckOutbox(ctx, row.Seq); err != nil {
			r.relayError(ctx, err)
		}
		return
	}
	if err != nil {
		r.relayError(ctx, err)
		return
	}
	if err := r.t.AckOutbox(ctx, row.Seq); err != nil {
		r.relayError(ctx, err)
		return
	}
	now := time.Now()
	rec.recordKind(m, KindRelay, now.Sub(t0))
	if ev.EmittedNs > 0 && strings.HasPrefix(ev.ID, r.eventPrefix()) {
		// Only this run's emits: rows left by an earlier run would
		// measure that run's backlog.
		rec.recordKind(m, KindOutboxLag, now.Sub(time.Unix(0, ev.EmittedNs)))
	}
	if m {
		if outcome == OutcomeDedupeHit {
			r.relays.deduped.Add(1)
		} else {
			r.relays.delivered.Add(1)
		}
	}
}

// apply delivers event to execution id as a state-only commit, retrying
// conflicts with a reload; an already processed event is a dedupe hit.
func (r *runner) apply(ctx context.Context, id, event string) (string, error) {
	for attempt := 0; ; attempt++ {
		exe, done, err := r.t.LoadForEvent(ctx, id, event)
		switch {
		case err != nil:
			return "", err
		case exe == nil:
			return "", fmt.Errorf("%w: %s", errMissing, id)
		case done:
			return OutcomeDedupeHit, nil
		}
		n := r.next(exe, event)
		err = r.t.Commit(ctx, &Commit{Exe: n, ProcessedEventID: event})
		if err == nil {
			if now := time.Now(); r.inMeasuredPeriod(now) {
				r.commitsIn.Add(1)
			}
			return OutcomeOK, nil
		}
		if !errors.Is(err, ErrConflict) || attempt >= r.o.Workload.RetryCap {
			return "", err
		}
	}
}

// timerSweeper is the production timer sweeper: due timers are fired (an
// event deduplicated by execution, path and fire_at) and deleted only if
// their fire_at still matches, so a re-armed timer survives.
func (r *runner) timerSweeper(ctx context.Context) {
	rec := r.relayRec
	for !r.stopped() && ctx.Err() == nil {
		due, err := r.t.DueTimers(ctx, unixSeconds(time.Now()), relayBatch)
		if err != nil {
			r.relayError(ctx, err)
		}
		r.parallel(len(due), func(i int) { r.fire(ctx, rec, due[i]) })
		if len(due) == 0 && !r.pause(ctx, r.o.RelayInterval) {
			return
		}
	}
}

func (r *runner) fire(ctx context.Context, rec *recorder, tm TimerEntry) {
	t0 := time.Now()
	m := r.measured(t0)
	event := fmt.Sprintf("timer:%s:%.6f", tm.Path, tm.FireAt)
	outcome, err := r.apply(ctx, tm.ExecutionID, event)
	if err == nil {
		_, err = r.t.DeleteTimer(ctx, tm.ExecutionID, tm.Path, tm.FireAt)
	}
	if err != nil {
		r.relayError(ctx, err)
		return
	}
	now := time.Now()
	rec.recordKind(m, KindTimerFire, now.Sub(t0))
	if fireAt := time.Unix(0, int64(tm.FireAt*1e9)); !fireAt.Before(r.start) {
		rec.recordKind(m, KindTimerLag, now.Sub(fireAt)) // armed by this run
	}
	if m {
		if outcome == OutcomeDedupeHit {
			r.relays.timerDeduped.Add(1)
		} else {
			r.relays.fired.Add(1)
		}
	}
}
