package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// relayBatch bounds the rows a relay handles per poll (small enough that
// the outbox and the spawns take turns under a backlog).
const relayBatch = 100

// partGrace is how long past its time (an emit's emitted_ns, a timer's
// fire_at) a row of another part's executions is left to that part's
// relays; after it any part's relays take it (its part may have stopped).
const partGrace = 2 * time.Second

// mine reports whether execution id is one this run drives (every one in
// a whole run).
func (r *runner) mine(id string) bool {
	if r.own == nil {
		return true
	}
	_, ok := r.own[id]
	return ok
}

// ownRow reports whether this run's outbox relay delivers row now: a row
// for its own executions, or one that another part left too long (or
// that no loadgen part wrote).
func (r *runner) ownRow(row OutboxEntry, now time.Time) bool {
	if r.mine(row.TargetID) {
		return true
	}
	ev, err := parseRelayEvent(row.Event)
	if err != nil || ev.EmittedNs == 0 {
		return true
	}
	return now.Sub(time.Unix(0, ev.EmittedNs)) > partGrace
}

// ownTimer is ownRow for a due timer.
func (r *runner) ownTimer(tm TimerEntry, now time.Time) bool {
	return r.mine(tm.ExecutionID) || now.Sub(time.Unix(0, int64(tm.FireAt*1e9))) > partGrace
}

// relayEvent is the JSON of an emitted event.
type relayEvent struct {
	ID        string `json:"id"`
	Op        string `json:"op"`
	EmittedNs int64  `json:"emitted_ns"`
}

// parseRelayEvent decodes an emitted event as json.Unmarshal would. The
// events this engine writes (a flat object of the keys below, ASCII
// strings without escapes, an integer) are read by hand: encoding/json
// was a twentieth of the engine's CPU at 3,000 ops/s. Anything else goes
// to encoding/json.
func parseRelayEvent(doc string) (relayEvent, error) {
	if ev, ok := scanRelayEvent(doc); ok {
		return ev, nil
	}
	var ev relayEvent
	err := json.Unmarshal([]byte(doc), &ev)
	return ev, err
}

// scanRelayEvent is parseRelayEvent's fast path: ok is false when doc is
// not of the simple form it reads.
func scanRelayEvent(doc string) (ev relayEvent, ok bool) {
	if len(doc) < 2 || doc[0] != '{' || doc[len(doc)-1] != '}' {
		return ev, false
	}
	s := doc[1 : len(doc)-1]
	str := func() (string, bool) { // a string without escapes at s
		if len(s) == 0 || s[0] != '"' {
			return "", false
		}
		for i := 1; i < len(s); i++ {
			switch c := s[i]; {
			case c == '"':
				v := s[1:i]
				s = s[i+1:]
				return v, true
			case c < 0x20 || c == '\\' || c >= 0x80:
				return "", false
			}
		}
		return "", false
	}
	for first := true; len(s) > 0 || first; first = false {
		if !first {
			if s[0] != ',' {
				return ev, false
			}
			s = s[1:]
		}
		key, ok := str()
		if !ok || len(s) == 0 || s[0] != ':' {
			return ev, false
		}
		s = s[1:]
		switch key {
		case "id", "op", "name", "from":
			v, ok := str()
			if !ok {
				return ev, false
			}
			if key == "id" {
				ev.ID = v
			} else if key == "op" {
				ev.Op = v
			}
		case "emitted_ns":
			n := 0
			for n < len(s) && (s[n] >= '0' && s[n] <= '9' || n == 0 && s[n] == '-') {
				n++
			}
			digits := strings.TrimPrefix(s[:n], "-")
			if digits == "" || len(digits) > 1 && digits[0] == '0' {
				return ev, false
			}
			v, err := strconv.ParseInt(s[:n], 10, 64)
			if err != nil {
				return ev, false
			}
			ev.EmittedNs = v
			s = s[n:]
		default: // another key (json matches keys case-insensitively)
			return ev, false
		}
	}
	return ev, true
}

// pause waits d or until the relays stop; it reports whether to go on.
func (r *runner) pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.relayStop:
		return false
	case <-ctx.Done():
		return false
	}
}

// relayOp starts recording a relay or sweeper operation (nil when the run
// records nothing).
func (r *runner) relayOp(kind OpKind, src string, ids *opIDs, id string) *Op {
	op := r.observing(kind, src, id)
	if op != nil {
		op.ID = ids.next()
	}
	return op
}

// outboxRelay is the production outbox relay: pending rows are delivered as
// events to their target execution (deduplicated by event id) and acked;
// pending spawn intents are acked. A batch's rows are delivered by up to
// RelayWorkers goroutines at once. It runs until the run stops.
func (r *runner) outboxRelay(ctx context.Context) {
	rec := r.relayRec
	for !r.relaysStopped() && ctx.Err() == nil {
		op := r.relayOp(OpReadOutbox, "relay", r.relayIDs, "")
		rows, err := r.t.PendingOutbox(ctx, relayBatch)
		if op != nil && (err != nil || len(rows) > 0) {
			op.N = len(rows)
			r.done(op, err)
		}
		if err != nil {
			r.relayError(ctx, err)
		}
		// Busy: it delivered something, so more may be waiting (rows
		// whose delivery failed stay pending, and new ones arrive while
		// a batch is delivered): poll again at once, as production relays
		// do under a backlog. Pausing after a partial batch let a chaos
		// run's backlog outgrow its quiesce on a loaded machine. (A part's
		// relay takes its own rows only, so a batch of other parts' rows
		// does not keep it busy.)
		rows = keep(rows, func(row OutboxEntry) bool { return r.ownRow(row, time.Now()) })
		busy := len(rows) > 0
		r.parallel(len(rows), func(i int) { r.deliver(ctx, rec, rows[i]) })
		op = r.relayOp(OpReadSpawns, "relay", r.relayIDs, "")
		spawns, err := r.t.PendingSpawns(ctx, relayBatch)
		if op != nil && (err != nil || len(spawns) > 0) {
			op.N = len(spawns)
			r.done(op, err)
		}
		if err != nil {
			r.relayError(ctx, err)
		}
		spawns = keep(spawns, func(sp SpawnEntry) bool { return r.mine(sp.ParentID) })
		busy = busy || len(spawns) > 0
		r.parallel(len(spawns), func(i int) {
			sp := spawns[i]
			op := r.relayOp(OpAckSpawn, "relay", r.relayIDs, sp.ParentID)
			if op != nil {
				op.Seq, op.Child = sp.Seq, sp.ChildID
			}
			err := r.t.AckSpawn(ctx, sp.Seq)
			r.done(op, err)
			if err != nil {
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

// parallel runs f(0..n-1) on up to RelayWorkers goroutines, the caller's
// one of them, and waits for them; it stops starting new items once the
// relays stop. Each goroutine takes the next item until none is left: a
// batch of n rows starts min(n, RelayWorkers)-1 goroutines, not n (each
// start cost a wake-up and a stack grown again).
func (r *runner) parallel(n int, f func(i int)) {
	var next atomic.Int64
	work := func() {
		for !r.relaysStopped() {
			i := int(next.Add(1)) - 1
			if i >= n {
				return
			}
			f(i)
		}
	}
	var wg sync.WaitGroup
	for range min(n, max(r.o.RelayWorkers, 1)) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
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
	ev, err := parseRelayEvent(row.Event)
	if err != nil || ev.ID == "" {
		ev.ID = fmt.Sprintf("outbox-%d", row.Seq)
	}
	outcome, err := r.apply(ctx, delivery{id: row.TargetID, event: ev.ID, cause: CauseOutbox, seq: row.Seq, origin: ev.Op, body: row.Event})
	if errors.Is(err, errMissing) {
		// Undeliverable (no such target, e.g. a row another program left):
		// counted as an error, then acked like a dead letter, so that one
		// bad row cannot stall the relay behind it forever.
		r.relayError(ctx, fmt.Errorf("outbox seq %d undeliverable: %w", row.Seq, err))
		if err := r.ack(ctx, row, ev.ID); err != nil {
			r.relayError(ctx, err)
		}
		return
	}
	if err != nil {
		r.relayError(ctx, err)
		return
	}
	if err := r.ack(ctx, row, ev.ID); err != nil {
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

// ack acks an outbox row after its delivery.
func (r *runner) ack(ctx context.Context, row OutboxEntry, event string) error {
	op := r.relayOp(OpAckOutbox, "relay", r.relayIDs, "")
	if op != nil {
		op.Seq, op.EventID, op.Target = row.Seq, event, row.TargetID
	}
	err := r.t.AckOutbox(ctx, row.Seq)
	r.done(op, err)
	return err
}

// delivery is an event the relays apply: an outbox row (seq, origin) or a
// timer fire (fire).
type delivery struct {
	id, event, cause string
	seq              int64
	origin           string
	body             string // an outbox row's event document, as read
	fire             *TimerEntry
}

// apply delivers d's event to execution d.id as a state-only commit,
// retrying conflicts with a reload; an already processed event is a dedupe
// hit. A timer fire disarms the timer in the state if it still fires at
// that time (a stale fire changes nothing else).
func (r *runner) apply(ctx context.Context, d delivery) (string, error) {
	src, ids := "relay", r.relayIDs
	if d.cause == CauseTimer {
		src, ids = "sweeper", r.sweepIDs
	}
	for attempt := 0; ; attempt++ {
		lop := r.startLoad(src, d.id, d.event, d.cause, ids)
		exe, done, err := r.t.LoadForEvent(ctx, d.id, d.event)
		r.endLoad(lop, exe, done, err)
		switch {
		case err != nil:
			return "", err
		case exe == nil:
			return "", fmt.Errorf("%w: %s", errMissing, d.id)
		case done:
			return OutcomeDedupeHit, nil
		}
		opID := ids.next()
		n := r.next(exe, d.event, opID)
		if f := d.fire; f != nil {
			if at, ok := n.State.Timers[f.Path]; ok && at == f.FireAt {
				delete(n.State.Timers, f.Path)
			}
		}
		c := &Commit{Exe: n, ProcessedEventID: d.event}
		cop := r.startCommit(src, opID, c, d.cause, d.event)
		if cop != nil {
			cop.Seq, cop.Origin = d.seq, d.origin
			if d.body != "" {
				cop.BodyDigest, _ = ContentDigest([]byte(d.body))
			}
			if d.fire != nil {
				cop.Path, cop.FireAt = d.fire.Path, d.fire.FireAt
			}
		}
		err = r.t.Commit(ctx, c)
		r.done(cop, err)
		if err == nil {
			if now := time.Now(); r.inMeasuredPeriod(now) {
				r.commitsIn.Add(1)
			}
			return OutcomeOK, nil
		}
		if errors.Is(err, ErrOutcomeUnknown) {
			r.readBack(ctx, src, ids, d.id, d.event)
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
	for !r.relaysStopped() && ctx.Err() == nil {
		now := unixSeconds(time.Now())
		op := r.relayOp(OpDueTimers, "sweeper", r.sweepIDs, "")
		due, err := r.t.DueTimers(ctx, now, relayBatch)
		if op != nil {
			// Every poll, empty ones too: an answer without a timer that
			// was armed and due shows its row had vanished.
			op.Now, op.Timers, op.N, op.Limit = now, due, len(due), relayBatch
			r.done(op, err)
		}
		if err != nil {
			r.relayError(ctx, err)
		}
		due = keep(due, func(tm TimerEntry) bool { return r.ownTimer(tm, time.Now()) })
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
	outcome, err := r.apply(ctx, delivery{id: tm.ExecutionID, event: event, cause: CauseTimer, fire: &tm})
	if err == nil {
		op := r.relayOp(OpDeleteTimer, "sweeper", r.sweepIDs, tm.ExecutionID)
		if op != nil {
			op.Path, op.FireAt = tm.Path, tm.FireAt
		}
		var deleted bool
		deleted, err = r.t.DeleteTimer(ctx, tm.ExecutionID, tm.Path, tm.FireAt)
		if op != nil {
			op.Deleted = deleted
		}
		r.done(op, err)
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

// keep returns the items of s that f keeps (s itself when it keeps all).
func keep[T any](s []T, f func(T) bool) []T {
	for i, x := range s {
		if !f(x) {
			out := append([]T(nil), s[:i]...)
			for _, y := range s[i+1:] {
				if f(y) {
					out = append(out, y)
				}
			}
			return out
		}
	}
	return s
}
