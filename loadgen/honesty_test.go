package loadgen_test

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/loadgen/loadgentest"
)

// The saturable fake: 2 slots × 2 ms per call, 2 calls per operation →
// about 500 operations per second at most. A timer waits at least its
// duration, so however busy the machine is a fake like it can never serve
// more than its slots allow: the bounds below hold on any machine, and a
// slow one only moves the figures further from them.
const (
	satSlots   = 2
	satService = 2 * time.Millisecond
)

func saturable() *loadgentest.Target {
	return loadgentest.New(loadgentest.Options{Shards: 2, Capacity: satSlots, Service: satService})
}

// maxOps is the most operations of at least 2 calls (a load and a commit)
// a fake with slots × service can complete within d after the run's clock
// started: each slot serves one call at a time, each for at least service.
func maxOps(slots int, service, d time.Duration) float64 {
	return float64(slots) * (d.Seconds()/service.Seconds() + 1) / 2
}

func honestOptions() loadgen.Options {
	o := quick()
	o.Workload.Redelivery = 0
	o.Workload.Mix.Fast = 1
	o.Relays = false
	o.Warmup = 300 * time.Millisecond
	o.Duration = 2500 * time.Millisecond
	o.DrainTimeout = 200 * time.Millisecond
	return o
}

// An open loop measures each operation's latency from its intended start,
// not from when it actually started: a generator that stalls (here its
// OnStart hook blocks, as if the process were descheduled just after the
// run's clock started) does not hide the stall. Against an instant
// target, the operations meant for the stall start late and their
// latency includes the wait. The bounds are lower bounds on waits the
// test itself imposes, so a slower machine cannot break them; a generator
// that counted from the actual start (coordinated omission) reports
// microseconds and fails.
func TestOpenLoopLatencyCountsFromIntendedStart(t *testing.T) {
	const stall = 400 * time.Millisecond
	o := honestOptions()
	o.Model = loadgen.Open
	o.Rate = 200
	o.Warmup = 0
	o.Duration = 1500 * time.Millisecond
	o.MaxOutstanding = 1000
	o.OnStart = func(time.Time) { time.Sleep(stall) }
	res := run(t, loadgentest.New(loadgentest.Options{}), o)
	op := res.Kinds["op"]
	if op == nil {
		t.Fatalf("no op latencies: %v", res.Outcomes)
	}
	ol := res.OpenLoop
	t.Logf("intended %d, started %d, late %d; op p50 %.2fms p90 %.2fms max %.2fms", ol.Intended, ol.Started, ol.Late, op.P50, op.P90, op.Max)
	// Operation i is meant for i/Rate after the clock started and cannot
	// start before the stall ends; operations are issued in order, so a
	// dispatcher starved by a busy machine issues fewer, but the first
	// ones are those meant for the stall.
	if want := min(ol.Intended, int64(o.Rate*(stall-o.LateThreshold).Seconds())-1); ol.Late < want {
		t.Errorf("%d operations counted late, want at least %d of the %d meant for the stall", ol.Late, want, int64(o.Rate*stall.Seconds()))
	}
	if op.Max < 0.99*ms(stall) {
		t.Errorf("op max %.2fms: the first operation waited the whole %s stall", op.Max, stall)
	}
	// The operations meant for the stall's first half waited at least half
	// of it; at most Rate*Duration operations were measured, so they are
	// more than a tenth of them (all of them, if fewer were issued) and
	// the p90 is at least that wait.
	if half := o.Rate * (stall / 2).Seconds(); half <= 0.1*(o.Rate*o.Duration.Seconds()+1) {
		t.Fatalf("the stall's first half (%g operations) is not above a tenth of the run", half)
	}
	if op.P90 < 0.99*ms(stall/2) {
		t.Errorf("op p90 %.2fms: the operations meant for the stall's first half waited at least %s", op.P90, stall/2)
	}
}

// An open loop offered 8× the most a saturable fake can ever serve must
// report the queue: each operation's latency counts from its intended
// start. The check is a count, not a speed: an operation faster than L
// either completed by measureEnd+L — and the fake cannot have completed
// more than maxOps(Duration+L) operations by then — or was canceled,
// which happens DrainTimeout (> L) after the end at the earliest. So when
// those are fewer than half the measured operations, the p50 is at least
// L, however fast or slow the machine. (The size of the effect against a
// closed loop is in BenchmarkOpenVsClosedLoop.)
func TestOpenLoopOverloadShowsQueueing(t *testing.T) {
	// A slower fake than saturable's (at most 50 operations per second),
	// so that the argument needs few of the arrivals: a dispatcher starved
	// by a busy machine may issue only a third of them.
	const slots, service = 2, 20 * time.Millisecond
	o := honestOptions()
	o.Model = loadgen.Open
	o.Warmup = 0
	o.Rate = 400
	// Above every arrival of the run: nothing can be dropped.
	o.MaxOutstanding = int(o.Rate*o.Duration.Seconds()) + 100
	o.DrainTimeout = 1100 * time.Millisecond
	res := run(t, loadgentest.New(loadgentest.Options{Shards: 2, Capacity: slots, Service: service}), o)
	op := res.Kinds["op"]
	if op == nil {
		t.Fatalf("no op latencies: %v", res.Outcomes)
	}
	ol := res.OpenLoop
	n := float64(op.Count)
	// Operations that may have made fewer than 2 calls (errors, dedupe):
	// none are expected, and each one is counted as fast.
	fast := n - float64(res.Outcomes[loadgen.OutcomeOK]+res.Outcomes[loadgen.OutcomeGaveUp]+res.Outcomes[loadgen.OutcomeCanceled])
	t.Logf("intended %d, started %d, dropped %d; op p50 %.1fms p99 %.1fms; %.1f ops/s (the fake's ceiling %.1f); outcomes %v",
		ol.Intended, ol.Started, ol.Dropped, op.P50, op.P99, res.Throughput, maxOps(slots, service, time.Second), res.Outcomes)

	// The schedule is kept: every arrival was started, none dropped, none
	// invented.
	if ol.Intended == 0 || ol.Started != ol.Intended || ol.Dropped != 0 || float64(ol.Intended) > o.Rate*o.Duration.Seconds()+1 {
		t.Errorf("open loop did not keep its schedule: %+v", ol)
	}
	// The largest L for which the count argument holds (maxOps(Duration+L)
	// + fast < n/2), capped at 1s (canceled operations waited at least
	// DrainTimeout - 1/Rate > 1s).
	perSecond := float64(slots) / service.Seconds() / 2
	lmax := math.Min((n/2-fast-maxOps(slots, service, o.Duration))/perSecond, 1)
	if lmax < 0.1 {
		t.Fatalf("only %.0f operations measured (%.0f fast) of %.0f offered: too few for the count argument", n, fast, o.Rate*o.Duration.Seconds())
	}
	if l := time.Duration(lmax * float64(time.Second)); op.P50 < 0.99*ms(l) {
		t.Errorf("open-loop p50 %.1fms under an 8× overload: at most half the operations can have been faster than %s", op.P50, l)
	}
	// Throughput counts what was served in the measured period, never what
	// was offered.
	if ceiling := maxOps(slots, service, o.Duration) / o.Duration.Seconds(); res.Throughput > ceiling {
		t.Errorf("open loop claims %.1f ops/s, above the fake's ceiling of %.1f", res.Throughput, ceiling)
	}
}

// ms is d in milliseconds, as the result's latencies are.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// An open loop below capacity drops nothing and keeps its schedule; with
// a tiny in-flight bound, an overload is dropped and counted instead.
func TestOpenLoopBelowCapacityAndDrops(t *testing.T) {
	o := honestOptions()
	o.Model = loadgen.Open
	o.Rate = 100
	o.Duration = 1500 * time.Millisecond
	res := run(t, saturable(), o)
	if res.OpenLoop.Dropped != 0 {
		t.Errorf("dropped %d at a fifth of capacity", res.OpenLoop.Dropped)
	}
	// Every operation made a load and a commit, each holding a slot for
	// at least the service time.
	if p50 := res.Kinds["op"].P50; p50 < 0.99*ms(2*satService) {
		t.Errorf("p50 %.2fms, below the %s two calls take at least", p50, 2*satService)
	}
	// Never more than the schedule; at least half of it (a dispatcher that
	// loses half its arrivals in 1.5 s is broken, not slow).
	if got, want := float64(res.OpenLoop.Intended), o.Rate*o.Duration.Seconds(); got < 0.5*want || got > want+1 {
		t.Errorf("intended %g operations, want about %g", got, want)
	}

	// 4 in flight, each at least 2 × 2 ms: at most 1,000 starts per second
	// against 4,000 arrivals per second, whatever the machine.
	o.Rate = 4000
	o.MaxOutstanding = 4
	res = run(t, saturable(), o)
	if res.OpenLoop.Dropped == 0 {
		t.Errorf("no drops at 8× capacity with 4 in flight: %+v", res.OpenLoop)
	}
	if res.OpenLoop.Started+res.OpenLoop.Dropped != res.OpenLoop.Intended {
		t.Errorf("started %d + dropped %d != intended %d", res.OpenLoop.Started, res.OpenLoop.Dropped, res.OpenLoop.Intended)
	}
}

// A delay injected into the server's commit shows up in the percentiles:
// on every commit in the median, on one commit in 20 in the tail. Both
// are lower bounds on waits the fake imposes.
func TestInjectedDelayShowsInPercentiles(t *testing.T) {
	o := quick()
	o.Relays = false
	o.Workload.Redelivery = 0
	var armed atomic.Bool
	o.Hook = func() { armed.Store(true) }

	base := run(t, loadgentest.New(loadgentest.Options{}), o)

	all := loadgentest.New(loadgentest.Options{Extra: func(op string) time.Duration {
		if op == "commit" && armed.Load() {
			return 20 * time.Millisecond
		}
		return 0
	}})
	slow := run(t, all, o)

	armed.Store(false)
	var n atomic.Int64
	tail := loadgentest.New(loadgentest.Options{Extra: func(op string) time.Duration {
		if op == "commit" && armed.Load() && n.Add(1)%20 == 0 {
			return 60 * time.Millisecond
		}
		return 0
	}})
	tailed := run(t, tail, o)

	b, s, tl := base.Kinds["commit"], slow.Kinds["commit"], tailed.Kinds["commit"]
	t.Logf("commit p50/p99: base %.2f/%.2f, slow %.2f/%.2f, tail %.2f/%.2f", b.P50, b.P99, s.P50, s.P99, tl.P50, tl.P99)
	if s.P50 < 20 || slow.Kinds["op"].P50 < 20 {
		t.Errorf("a 20ms commit delay gives commit p50 %.2fms, op p50 %.2fms", s.P50, slow.Kinds["op"].P50)
	}
	// One commit in 20 delayed 60ms: the tail (p99) shows it. How small
	// the base and tail medians stay is speed, reported by
	// BenchmarkInjectedDelay.
	if tl.P99 < 60 {
		t.Errorf("1-in-20 60ms delays: commit p99 %.2fms (want ≥ 60)", tl.P99)
	}
}
