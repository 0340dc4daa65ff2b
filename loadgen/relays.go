package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// relayBatch bounds the rows a relay handles per poll.
const relayBatch = 1000

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
// pending spawn intents are acked. It runs until the run stops.
func (r *runner) outboxRelay(ctx context.Context) {
	rec := r.relayRec
	for !r.stopped() && ctx.Err() == nil {
		busy := false
		rows, err := r.t.PendingOutbox(ctx, relayBatch)
		if err != nil {
			r.relayError(ctx, err)
		}
		for i, row := range rows {
			if i >= relayBatch || r.stopped() {
				break
			}
			busy = true
			r.deliver(ctx, rec, row)
		}
		spawns, err := r.t.PendingSpawns(ctx, relayBatch)
		if err != nil {
			r.relayError(ctx, err)
		}
		for i, s := range spawns {
			if i >= relayBatch || r.stopped() {
				break
			}
			busy = true
			if err := r.t.AckSpawn(ctx, s.Seq); err != nil {
				r.relayError(ctx, err)
			} else if r.measured(time.Now()) {
				r.relays.spawns.Add(1)
			}
		}
		if !busy && !r.pause(ctx, r.o.RelayInterval) {
			return
		}
	}
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
	if ev.EmittedNs > 0 {
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
		for i, tm := range due {
			if i >= relayBatch || r.stopped() {
				break
			}
			t0 := time.Now()
			m := r.measured(t0)
			event := fmt.Sprintf("timer:%s:%.6f", tm.Path, tm.FireAt)
			outcome, err := r.apply(ctx, tm.ExecutionID, event)
			if err == nil {
				_, err = r.t.DeleteTimer(ctx, tm.ExecutionID, tm.Path, tm.FireAt)
			}
			if err != nil {
				r.relayError(ctx, err)
				continue
			}
			now := time.Now()
			rec.recordKind(m, KindTimerFire, now.Sub(t0))
			rec.recordKind(m, KindTimerLag, now.Sub(time.Unix(0, int64(tm.FireAt*1e9))))
			if m {
				if outcome == OutcomeDedupeHit {
					r.relays.timerDeduped.Add(1)
				} else {
					r.relays.fired.Add(1)
				}
			}
		}
		if len(due) == 0 && !r.pause(ctx, r.o.RelayInterval) {
			return
		}
	}
}
