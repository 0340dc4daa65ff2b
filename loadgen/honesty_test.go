package loadgen_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/loadgen/loadgentest"
)

// saturable is a fake server with a fixed service time and a fixed
// capacity: 2 slots × 2 ms per call, 2 calls per operation → about 500
// operations per second.
func saturable() *loadgentest.Target {
	return loadgentest.New(loadgentest.Options{Shards: 2, Capacity: 2, Service: 2 * time.Millisecond})
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

// laterMaxP50 is the highest p50 of the windows after the first.
func laterMaxP50(ws []loadgen.Window) float64 {
	var m float64
	for _, w := range ws[1:] {
		m = max(m, w.P50)
	}
	return m
}

func measuredWindows(res *loadgen.Result) []loadgen.Window {
	var ws []loadgen.Window
	for _, w := range res.Windows {
		if !w.Warmup && w.Rate > 0 {
			ws = append(ws, w)
		}
	}
	return ws
}

// An open loop offered 3× the capacity must report latency that grows
// over the run (each operation's latency counts from its intended start,
// so the queue shows), where a closed loop at the capacity's concurrency
// reports a flat, small latency: coordinated omission is corrected.
func TestOpenLoopOverloadShowsQueueingClosedLoopDoesNot(t *testing.T) {
	closed := honestOptions()
	closed.Concurrency = 2
	cres := run(t, saturable(), closed)

	capacity := cres.Throughput
	if capacity < 50 {
		t.Fatalf("closed loop measured %g ops/s: the fake is not serving", capacity)
	}
	open := honestOptions()
	open.Model = loadgen.Open
	open.Rate = 3 * capacity
	open.MaxOutstanding = 4000
	ores := run(t, saturable(), open)

	if cres.Kinds["op"] == nil || ores.Kinds["op"] == nil {
		t.Fatalf("no op latencies: closed %v, open %v", cres.Outcomes, ores.Outcomes)
	}
	cp99, op99 := cres.Kinds["op"].P99, ores.Kinds["op"].P99
	t.Logf("capacity %.0f ops/s; closed p99 %.1fms; open at %.0f ops/s p99 %.1fms, late %d, dropped %d",
		capacity, cp99, open.Rate, op99, ores.OpenLoop.Late, ores.OpenLoop.Dropped)
	if op99 < 10*cp99 {
		t.Errorf("open-loop p99 %.1fms is not many times the closed-loop p99 %.1fms", op99, cp99)
	}
	ow := measuredWindows(ores)
	if len(ow) < 2 {
		t.Fatalf("open loop: %d measured windows", len(ow))
	}
	// The queue grows as long as the overload lasts; on a busy machine the
	// server's speed varies from window to window, so the check is that a
	// later window is clearly worse than the first, not a growth rate.
	if first, later := ow[0].P50, laterMaxP50(ow); later < 1.3*first {
		t.Errorf("open-loop p50 did not grow over the run: first window %.1fms, worst later window %.1fms", first, later)
	}
	cw := measuredWindows(cres)
	if first, last := cw[0].P50, cw[len(cw)-1].P50; last > 3*first+5 {
		t.Errorf("closed-loop p50 grew over the run: first window %.1fms, last %.1fms", first, last)
	}
	// The schedule is kept: every intended arrival started (the bound was
	// not reached), so the queueing is the server's, not dropped work.
	if ores.OpenLoop.Intended == 0 || ores.OpenLoop.Started != ores.OpenLoop.Intended || ores.OpenLoop.Dropped != 0 {
		t.Errorf("open loop did not keep its schedule: %+v", ores.OpenLoop)
	}
	if ores.Throughput > 1.5*capacity {
		t.Errorf("open loop claims %.0f ops/s, above the %.0f capacity", ores.Throughput, capacity)
	}
}

// An open loop below capacity keeps latency near the service time and
// drops nothing; with a tiny in-flight bound, an overload is dropped and
// counted instead.
func TestOpenLoopBelowCapacityAndDrops(t *testing.T) {
	o := honestOptions()
	o.Model = loadgen.Open
	o.Rate = 100
	o.Duration = 1500 * time.Millisecond
	res := run(t, saturable(), o)
	if res.OpenLoop.Dropped != 0 {
		t.Errorf("dropped %d at a third of capacity", res.OpenLoop.Dropped)
	}
	if p50 := res.Kinds["op"].P50; p50 > 50 {
		t.Errorf("p50 %.1fms at a fifth of capacity", p50)
	}
	if got, want := float64(res.OpenLoop.Intended), o.Rate*o.Duration.Seconds(); got < 0.9*want || got > 1.1*want {
		t.Errorf("intended %g operations, want about %g", got, want)
	}

	o.Rate = 2000
	o.MaxOutstanding = 4
	res = run(t, saturable(), o)
	if res.OpenLoop.Dropped == 0 {
		t.Errorf("no drops at 4× capacity with 4 in flight: %+v", res.OpenLoop)
	}
	if res.OpenLoop.Started+res.OpenLoop.Dropped != res.OpenLoop.Intended {
		t.Errorf("started %d + dropped %d != intended %d", res.OpenLoop.Started, res.OpenLoop.Dropped, res.OpenLoop.Intended)
	}
}

// A delay injected into the server's commit shows up in the percentiles:
// on every commit in the median, on one commit in 20 in the tail only.
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
	if b.P50 >= 10 {
		t.Errorf("baseline commit p50 %.2fms", b.P50)
	}
	if tl.P99 < 60 || tl.P50 >= 20 {
		t.Errorf("1-in-20 60ms delays: commit p50 %.2fms (want small), p99 %.2fms (want ≥ 60)", tl.P50, tl.P99)
	}
}
