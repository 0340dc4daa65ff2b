package loadgen_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/loadgen/loadgentest"
)

// quick returns small closed-loop options for the fake.
func quick() loadgen.Options {
	o := loadgen.DefaultOptions()
	o.Target = "fake"
	o.Workload.Executions = 200
	o.Workload.TimerDelay = 30 * time.Millisecond
	o.Concurrency = 4
	o.Warmup = 200 * time.Millisecond
	o.Duration = 1200 * time.Millisecond
	o.RelayInterval = 5 * time.Millisecond
	o.DrainTimeout = time.Second
	return o
}

func run(t *testing.T, f *loadgentest.Target, o loadgen.Options) *loadgen.Result {
	t.Helper()
	res, err := loadgen.Run(context.Background(), f, f, o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func TestClosedLoopMeasuresEveryPart(t *testing.T) {
	f := loadgentest.New(loadgentest.Options{Shards: 4, Service: 100 * time.Microsecond})
	o := quick()
	loadgentest.AttachEveryKind(&o, 30*time.Second) // every kind below, however slow the machine
	res := run(t, f, o)
	if f.Executions() < 200 {
		t.Fatalf("setup created %d executions, want 200", f.Executions())
	}
	if res.ErrorCount() != 0 || res.Outcomes[loadgen.OutcomeDedupeMiss] != 0 {
		t.Fatalf("errors %v, samples %v", res.Errors, res.ErrorSamples)
	}
	if res.Ops == 0 || res.Throughput <= 0 || res.CommitRate <= 0 {
		t.Fatalf("ops %d throughput %g commit rate %g", res.Ops, res.Throughput, res.CommitRate)
	}
	for _, k := range []string{"op", "load", "fast_commit", "complex_commit", "commit", "redelivery", "relay_delivery", "outbox_lag", "timer_fire", "timer_lag"} {
		if res.Kinds[k] == nil || res.Kinds[k].Count == 0 {
			t.Errorf("kind %s has no measurements", k)
		}
	}
	if res.Outcomes[loadgen.OutcomeDedupeHit] == 0 {
		t.Errorf("no redelivery was deduplicated: %v", res.Outcomes)
	}
	if res.Relays.OutboxDelivered == 0 || res.Relays.TimersFired == 0 || res.Relays.SpawnsAcked == 0 {
		t.Errorf("relays idle: %+v", res.Relays)
	}
	var sum float64
	var ops int64
	for _, s := range res.PerShard {
		sum += s.Share
		ops += s.Ops
		if s.Ops == 0 {
			t.Errorf("shard %s got no operations", s.Name)
		}
	}
	if len(res.PerShard) != 4 || sum < 0.999 || sum > 1.001 {
		t.Errorf("per-shard shares %v sum to %g", res.PerShard, sum)
	}
	if res.HottestShare < 0.25 || res.HottestShare > 0.5 {
		t.Errorf("hottest share %g with uniform keys on 4 shards", res.HottestShare)
	}
	measuredWindows := 0
	for _, w := range res.Windows {
		if !w.Warmup {
			measuredWindows++
		}
	}
	if measuredWindows == 0 || !res.Windows[0].Warmup {
		t.Errorf("windows %+v: want a warm-up window then measured ones", res.Windows)
	}
	// At least the duration; past it only while a kind was missing, and
	// never past the ceiling (plus the stop's own latency).
	if res.MeasuredSeconds < 1.1 || res.MeasuredSeconds > o.MaxDuration.Seconds()+5 {
		t.Errorf("measured %gs, want the 1.2s duration at least, %s at most", res.MeasuredSeconds, o.MaxDuration)
	}
	// Warm-up is excluded: the measured op count is below every op done.
	st := f.Stats()
	if res.Kinds["commit"].Count >= st.Commits {
		t.Errorf("measured %d commits, the store saw %d including warm-up and setup", res.Kinds["commit"].Count, st.Commits)
	}
}

// With one execution every worker fights for the same row: conflicts are
// counted and retried, and every successful commit is one version.
func TestConflictsAreRetriedAndCounted(t *testing.T) {
	f := loadgentest.New(loadgentest.Options{Service: 200 * time.Microsecond})
	o := quick()
	o.Workload.Executions = 1
	o.Workload.Redelivery = 0
	o.Workload.Mix.Fast = 1
	o.Relays = false
	o.Warmup = 0
	o.Concurrency = 8
	o.Duration = 700 * time.Millisecond
	res := run(t, f, o)
	if res.Outcomes[loadgen.OutcomeConflict] == 0 || res.Outcomes[loadgen.OutcomeRetry] == 0 {
		t.Fatalf("no conflicts on one hot execution: %v", res.Outcomes)
	}
	id := loadgen.ExecutionIDs(o.Workload.Seed, 1)[0]
	ok := res.Outcomes[loadgen.OutcomeOK]
	if got := f.Version(id); int64(got) != ok+1 {
		t.Fatalf("version %d, want 1 + %d ok operations", got, ok)
	}
	if res.Outcomes[loadgen.OutcomeConflict] != res.Outcomes[loadgen.OutcomeRetry]+res.Outcomes[loadgen.OutcomeGaveUp] {
		t.Fatalf("each conflict is retried or gives up: %v", res.Outcomes)
	}
}

func TestOpsBoundEndsTheRun(t *testing.T) {
	f := loadgentest.New(loadgentest.Options{})
	o := quick()
	o.Ops = 300
	o.Duration = time.Minute
	o.Warmup = 0
	start := time.Now()
	res := run(t, f, o)
	if res.Ops != 300 {
		t.Fatalf("ops %d, want 300 (%v)", res.Ops, res.Outcomes)
	}
	if time.Since(start) > 30*time.Second {
		t.Fatalf("the op bound did not end the run")
	}
}

type sqlErr string

func (e sqlErr) Error() string    { return "ERROR: serialization failure (SQLSTATE " + string(e) + ")" }
func (e sqlErr) SQLState() string { return string(e) }

func TestErrorsCountedBySQLStateClass(t *testing.T) {
	var n atomic.Int64
	var armed atomic.Bool // after setup
	f := loadgentest.New(loadgentest.Options{Err: func(op string) error {
		if op == "commit" && armed.Load() && n.Add(1)%5 == 0 {
			return sqlErr("40001")
		}
		return nil
	}})
	o := quick()
	o.Relays = false
	o.Hook = func() { armed.Store(true) }
	res := run(t, f, o)
	if res.Errors["sqlstate_40"] == 0 || res.Outcomes[loadgen.OutcomeError] != res.Errors["sqlstate_40"] {
		t.Fatalf("errors %v outcomes %v", res.Errors, res.Outcomes)
	}
	if len(res.ErrorSamples) == 0 {
		t.Fatal("no error sample kept")
	}
}

func TestInterruptReturnsPartialResult(t *testing.T) {
	f := loadgentest.New(loadgentest.Options{Service: 100 * time.Microsecond})
	o := quick()
	o.Duration = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seen atomic.Int64
	o.Hook = func() {
		if seen.Add(1) == 500 {
			cancel()
		}
	}
	start := time.Now()
	res, err := loadgen.Run(ctx, f, f, o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if res == nil || !res.Interrupted {
		t.Fatalf("want a partial result marked interrupted, got %+v", res)
	}
	if time.Since(start) > 20*time.Second || res.MeasuredSeconds > 20 {
		t.Fatalf("interrupt did not end the run promptly (measured %gs)", res.MeasuredSeconds)
	}
}

func TestValidateRejectsUnboundedAndBadRuns(t *testing.T) {
	for name, mut := range map[string]func(*loadgen.Options){
		"no duration":  func(o *loadgen.Options) { o.Duration = 0 },
		"open no rate": func(o *loadgen.Options) { o.Model = loadgen.Open; o.Rate = 0 },
		"bad model":    func(o *loadgen.Options) { o.Model = "half-open" },
		"bad mix":      func(o *loadgen.Options) { o.Workload.Mix.Fast = 2 },
		"no workers":   func(o *loadgen.Options) { o.Concurrency = 0 },
		"bad keys":     func(o *loadgen.Options) { o.Workload.Keys = loadgen.Keys{Dist: loadgen.Zipfian} },
	} {
		o := quick()
		mut(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, o)
		}
	}
}

// A target that hangs fails calls as timeouts: the run stays bounded.
func TestHungTargetTimesOut(t *testing.T) {
	var hang atomic.Bool
	f := loadgentest.New(loadgentest.Options{Extra: func(op string) time.Duration {
		if hang.Load() && op == "commit" {
			return time.Hour
		}
		return 0
	}})
	o := quick()
	o.Relays = false
	o.OpTimeout = 100 * time.Millisecond
	o.Hook = func() { hang.Store(true) }
	start := time.Now()
	res := run(t, f, o)
	if time.Since(start) > 30*time.Second {
		t.Fatalf("a hung target held the run for %s", time.Since(start))
	}
	if res.Errors["timeout"] == 0 {
		t.Fatalf("no timeouts counted: %v %v", res.Errors, res.Outcomes)
	}
}
