package loadgentest

import (
	"sync/atomic"
	"time"

	"github.com/pgshard/pgshard/loadgen"
)

// EveryKind observes a run and reports (Done) once the measured period
// held every kind of work a test of the whole hot path asserts on:
// enough worker commits for both fast and complex ones, a redelivered
// event found processed, an outbox delivery's commit, a timer fire's
// commit and, when the workload spawns, an acknowledged spawn intent.
//
// A fixed duration is a bet on the machine's speed: a loaded machine can
// spend a 1-2 s run without a single redelivery or timer fire. Attach
// extends the run until Done, within a ceiling, so a test asserts on
// what happened rather than on how fast.
type EveryKind struct {
	from                                 atomic.Int64 // unix ns the measured period starts; 0 before the run started
	spawns                               bool
	worker, redeliver, outbox, timer, ak atomic.Int64
}

// AttachEveryKind makes o run at least its Duration and then until every
// kind was seen, for at most max of measured time. It sets o.Observer,
// o.Until, o.MaxDuration and o.OnStart (calling the OnStart o had).
func AttachEveryKind(o *loadgen.Options, max time.Duration) *EveryKind {
	k := &EveryKind{spawns: o.Workload.Mix.Spawn > 0 && o.Relays}
	prev, warmup := o.OnStart, o.Warmup
	o.OnStart = func(start time.Time) {
		k.from.Store(start.Add(warmup).UnixNano())
		if prev != nil {
			prev(start)
		}
	}
	o.Observer, o.Until, o.MaxDuration = k, k.Done, max
	return k
}

// Observe implements loadgen.Observer.
func (k *EveryKind) Observe(op *loadgen.Op) {
	from := k.from.Load()
	if from == 0 || op.Err != nil || op.Invoke.UnixNano() < from {
		return
	}
	switch {
	case op.Kind == loadgen.OpLoad && op.Cause == loadgen.CauseRedeliver && op.Processed:
		k.redeliver.Add(1)
	case op.Kind == loadgen.OpAckSpawn:
		k.ak.Add(1)
	case op.Kind != loadgen.OpCommit:
	case op.Cause == loadgen.CauseWorker:
		k.worker.Add(1)
	case op.Cause == loadgen.CauseOutbox:
		k.outbox.Add(1)
	case op.Cause == loadgen.CauseTimer:
		k.timer.Add(1)
	}
}

// Done reports whether every kind was seen (safe for concurrent use).
func (k *EveryKind) Done() bool {
	return k.worker.Load() >= 50 && k.redeliver.Load() > 0 && k.outbox.Load() > 0 && k.timer.Load() > 0 &&
		(!k.spawns || k.ak.Load() > 0)
}

// atLeast counts the measured period's successful operations.
type atLeast struct {
	from atomic.Int64 // unix ns the measured period starts; 0 before the run started
	n    atomic.Int64
	next loadgen.Observer
}

func (a *atLeast) Observe(op *loadgen.Op) {
	if from := a.from.Load(); from != 0 && op.Err == nil && op.Invoke.UnixNano() >= from {
		a.n.Add(1)
	}
	if a.next != nil {
		a.next.Observe(op)
	}
}

// AtLeast makes o also run until n operations without error were
// measured (after what o already waits for: call it after
// AttachEveryKind, whose ceiling it keeps; without one, max is the
// ceiling). A share or a spread asserted on a loaded machine's handful of
// operations is noise.
func AtLeast(o *loadgen.Options, n int64, max time.Duration) {
	a := &atLeast{next: o.Observer}
	prev, warmup, until := o.OnStart, o.Warmup, o.Until
	o.OnStart = func(start time.Time) {
		a.from.Store(start.Add(warmup).UnixNano())
		if prev != nil {
			prev(start)
		}
	}
	o.Observer = a
	o.Until = func() bool { return a.n.Load() >= n && (until == nil || until()) }
	if o.MaxDuration == 0 {
		o.MaxDuration = max
	}
}
