package loadgen_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/loadgen/loadgentest"
)

// BenchmarkEngineCPU is the generator's own CPU per operation with the
// database taken away: the engine (open-loop dispatch, the worker step,
// HDR recording, windows, self-checks, relays) against the in-memory fake
// with a 300 µs service time per call, so that goroutines park and wake as
// they do on a network round trip. The fake's own bookkeeping is included.
// The CPU time (getrusage, user + system) runs from the start of the
// run's clock to its end; the figure is compared with the 50 µs goal,
// which the engine must meet with room left for a database client (see
// loadgen/storetarget's BenchmarkGeneratorCPU for a real shard). Nothing
// is asserted:
//
//	go test -run '^$' -bench EngineCPU -benchtime 1x ./loadgen
func BenchmarkEngineCPU(b *testing.B) {
	for _, c := range []struct {
		rate   float64
		relays bool
	}{{600, true}, {600, false}, {3000, true}} {
		rate := c.rate
		b.Run(fmt.Sprintf("rate=%.0f/relays=%v", rate, c.relays), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				f := loadgentest.New(loadgentest.Options{Service: 300 * time.Microsecond})
				o := loadgen.DefaultOptions()
				o.Target = "fake"
				o.Model = loadgen.Open
				o.Rate = rate
				o.Workload.Executions = 2000
				o.Warmup = 0
				o.Relays = c.relays
				o.Duration = 5 * time.Second
				var cpu0 time.Duration
				o.OnStart = func(time.Time) { cpu0 = engineCPU() }
				res, err := loadgen.Run(b.Context(), f, f, o)
				cpu := engineCPU() - cpu0
				if err != nil {
					b.Fatal(err)
				}
				if res.Ops == 0 {
					b.Fatalf("no operation ran: %v", res.Outcomes)
				}
				us := float64(cpu.Microseconds()) / float64(res.Ops)
				b.ReportMetric(us, "cpu-µs/op")
				b.ReportMetric(us/50, "×goal")
				b.ReportMetric(float64(res.Ops), "ops")
				b.Logf("open loop %.0f ops/s for %s against the fake: %d ops (+%d relay deliveries, %d timer fires), %.2f CPU-s: %.1f µs/op (goal 50 µs: %.2f×); self-check %.1f µs/op",
					rate, o.Duration, res.Ops, res.Relays.OutboxDelivered, res.Relays.TimersFired, cpu.Seconds(), us, us/50, res.SelfCheck.GenCPUPerOpUS)
			}
		})
	}
}

// engineCPU is the process's user and system CPU time so far.
func engineCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
