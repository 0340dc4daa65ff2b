package loadgen_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/loadgen/loadgentest"
)

// The speed side of the honesty tests: how much worse an open loop's
// latency is than a closed loop's on the same saturated fake, and whether
// it grows over the run. These are ratios of real latencies, so they
// depend on the machine and are reported, not asserted:
//
//	go test -run '^$' -bench OpenVsClosedLoop -benchtime 1x ./loadgen
func BenchmarkOpenVsClosedLoop(b *testing.B) {
	for i := 0; i < b.N; i++ {
		closed := honestOptions()
		closed.Concurrency = satSlots
		cres := benchRun(b, saturable(), closed)
		open := honestOptions()
		open.Model = loadgen.Open
		open.Rate = 3 * cres.Throughput
		open.MaxOutstanding = 4000
		ores := benchRun(b, saturable(), open)
		cw, ow := measuredWindows(cres), measuredWindows(ores)
		if len(cw) < 2 || len(ow) < 2 || cres.Kinds["op"] == nil || ores.Kinds["op"] == nil {
			b.Fatalf("too little measured: closed %v, open %v", cres.Outcomes, ores.Outcomes)
		}
		b.ReportMetric(cres.Throughput, "closed-ops/s")
		b.ReportMetric(ores.Kinds["op"].P99/cres.Kinds["op"].P99, "open/closed-p99")
		b.ReportMetric(laterMaxP50(ow)/ow[0].P50, "open-later/first-p50")
		b.ReportMetric(cw[len(cw)-1].P50/cw[0].P50, "closed-last/first-p50")
	}
}

// BenchmarkInjectedDelay reports the commit medians the honesty test does
// not assert: without a delay, and with a 60ms delay on one commit in 20
// (the delay belongs in the tail, not the median).
func BenchmarkInjectedDelay(b *testing.B) {
	for i := 0; i < b.N; i++ {
		o := quick()
		o.Relays = false
		o.Workload.Redelivery = 0
		var armed atomic.Bool
		o.Hook = func() { armed.Store(true) }
		base := benchRun(b, loadgentest.New(loadgentest.Options{}), o)
		var n atomic.Int64
		tail := benchRun(b, loadgentest.New(loadgentest.Options{Extra: func(op string) time.Duration {
			if op == "commit" && armed.Load() && n.Add(1)%20 == 0 {
				return 60 * time.Millisecond
			}
			return 0
		}}), o)
		b.ReportMetric(base.Kinds["commit"].P50, "base-commit-p50-ms")
		b.ReportMetric(tail.Kinds["commit"].P50, "tail-commit-p50-ms")
		b.ReportMetric(tail.Kinds["commit"].P99, "tail-commit-p99-ms")
	}
}

func benchRun(b *testing.B, f *loadgentest.Target, o loadgen.Options) *loadgen.Result {
	b.Helper()
	res, err := loadgen.Run(b.Context(), f, f, o)
	if err != nil {
		b.Fatalf("Run: %v", err)
	}
	return res
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
