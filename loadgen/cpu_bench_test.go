package loadgen_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
// loadgen/storetarget's BenchmarkGeneratorCPU for a real shard). It also
// prints the process's context switches per operation (voluntary and
// involuntary, every thread: each is a thread parked or woken, the
// dominant cost at low rates). Nothing is asserted:
//
//	go test -run '^$' -bench EngineCPU -benchtime 1x ./loadgen
//
// PGSHARD_BENCH_CPUPROFILE names a file for a CPU profile of the same
// interval (one file per sub-benchmark: the name gets a suffix).
//
// The floor sub-benchmarks are the anchor: the least an open loop can do
// against the same fake (one pacing goroutine, a pool fed by a channel,
// two calls per operation as a worker step's load and commit, nothing
// recorded). Their CPU per operation is the Go runtime parking and waking
// goroutines and threads around the fake's sleeps; what the engine spends
// beyond it is its own.
func BenchmarkEngineCPU(b *testing.B) {
	for _, rate := range []float64{600, 3000} {
		b.Run(fmt.Sprintf("floor/rate=%.0f", rate), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				floorCPU(b, rate, 5*time.Second)
			}
		})
	}
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
				var cs0 int64
				stopProfile := func() {}
				o.OnStart = func(time.Time) {
					stopProfile = loadgentest.StartCPUProfile(b, fmt.Sprintf("%.0f-%v", rate, c.relays))
					cs0 = ctxSwitches()
					cpu0 = engineCPU()
				}
				res, err := loadgen.Run(b.Context(), f, f, o)
				cpu := engineCPU() - cpu0
				cs := ctxSwitches() - cs0
				stopProfile()
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
				b.ReportMetric(float64(cs)/float64(res.Ops), "ctxsw/op")
				b.Logf("open loop %.0f ops/s for %s against the fake: %d ops (+%d relay deliveries, %d timer fires), %.2f CPU-s: %.1f µs/op (goal 50 µs: %.2f×), %.1f context switches/op; self-check %.1f µs/op; load %s",
					rate, o.Duration, res.Ops, res.Relays.OutboxDelivered, res.Relays.TimersFired, cpu.Seconds(), us, us/50, float64(cs)/float64(res.Ops), res.SelfCheck.GenCPUPerOpUS, loadAvg())
			}
		})
	}
}

// floorCPU runs the floor open loop at rate for d against a fresh fake
// and reports its CPU per operation.
func floorCPU(b *testing.B, rate float64, d time.Duration) {
	f := loadgentest.New(loadgentest.Options{Service: 300 * time.Microsecond})
	ctx := b.Context()
	if err := loadgen.Setup(ctx, f, loadgen.Workload{Executions: 1, Seed: 1}, 1); err != nil {
		b.Fatal(err)
	}
	id := loadgen.ExecutionIDs(1, 1)[0]
	const pool = 64
	jobs := make(chan struct{}, pool)
	var wg sync.WaitGroup
	var ops atomic.Int64
	for range pool {
		wg.Go(func() {
			for range jobs {
				for range 2 {
					if _, _, err := f.LoadForEvent(ctx, id, ""); err != nil {
						b.Error(err)
					}
				}
				ops.Add(1)
			}
		})
	}
	cs0, cpu0 := ctxSwitches(), engineCPU()
	t0 := time.Now()
	tm := time.NewTimer(time.Hour)
	n := int64(rate * d.Seconds())
	for i := int64(0); i < n; i++ {
		if w := time.Until(t0.Add(time.Duration(float64(i) * 1e9 / rate))); w > 0 {
			tm.Reset(w)
			<-tm.C
		}
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	cpu, cs := engineCPU()-cpu0, ctxSwitches()-cs0
	us := float64(cpu.Microseconds()) / float64(ops.Load())
	b.ReportMetric(us, "cpu-µs/op")
	b.ReportMetric(us/50, "×goal")
	b.ReportMetric(float64(ops.Load()), "ops")
	b.ReportMetric(float64(cs)/float64(ops.Load()), "ctxsw/op")
	b.Logf("floor: a bare open loop at %.0f ops/s for %s, 2 fake calls per op, nothing recorded: %d ops, %.1f µs/op, %.1f context switches/op; load %s",
		rate, d, ops.Load(), us, float64(cs)/float64(ops.Load()), loadAvg())
}

// engineCPU is the process's user and system CPU time so far.
func engineCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ctxSwitches is the context switches of the process's live threads so
// far (voluntary + involuntary, from /proc; 0 where there is no /proc).
func ctxSwitches() int64 {
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	var n int64
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
	}
	return n
}

// loadAvg is the machine's load average line (1, 5, 15 min).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
