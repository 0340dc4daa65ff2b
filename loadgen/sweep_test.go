package loadgen_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/loadgen/loadgentest"
)

// A sweep over a server with 2 slots finds its knee at the SLO and fits
// the USL; more workers than slots only add queueing.
func TestSweepFindsKneeAndFitsUSL(t *testing.T) {
	f := loadgentest.New(loadgentest.Options{Shards: 2, Capacity: 2, Service: time.Millisecond})
	o := honestOptions()
	o.Warmup = 150 * time.Millisecond
	o.Duration = 700 * time.Millisecond
	// 2 slots × 1 ms serve at most 1,000 two-call operations per second,
	// so 32 workers wait 32 ms per operation on average (Little's law),
	// and as the slots serve in turn, about that at the median: they cannot
	// meet a 20ms p50 on any machine (a slower one only adds to it). 1-4
	// workers need 2-4 ms: the median meets 20ms even on a busy machine,
	// where a p99 would not.
	slo, err := loadgen.ParseSLO("p50=20ms")
	if err != nil {
		t.Fatal(err)
	}
	// On a machine loaded far beyond its cores (load 37 on 2 seen in CI)
	// the fake's own goroutine scheduling puts even one worker's median
	// over 20ms. Then no step meets the SLO: the sweep is run again (at
	// most three times), and if it never does, what is checked is the
	// verdict for that case — no knee, no capacity, and a reason saying so.
	var sw *loadgen.Sweep
	var text bytes.Buffer
	want := -1
	for attempt := 1; attempt <= 3 && want < 0; attempt++ {
		var done int
		var err error
		sw, err = loadgen.RunSweep(context.Background(), f, f, loadgen.SweepOptions{
			Base: o, Steps: []float64{1, 2, 4, 32}, SLO: slo, TargetRate: 5000, Headroom: 0.25, Buckets: 4096,
			StepDone: func(int, *loadgen.Result) { done++ },
		})
		if err != nil {
			t.Fatal(err)
		}
		text.Reset()
		if err := loadgen.WriteSweepText(&text, sw); err != nil {
			t.Fatal(err)
		}
		t.Logf("attempt %d:\n%s", attempt, text.String())
		if done != 4 || len(sw.Steps) != 4 {
			t.Fatalf("%d steps reported, %d recorded", done, len(sw.Steps))
		}
		if sw.Steps[3].SLOMet {
			t.Errorf("32 workers on 2 slots met a 20ms p50: %+v", sw.Steps[3])
		}
		// The knee is the highest throughput among the steps within the
		// SLO (how close it comes to the best step is speed, not asserted).
		for i, s := range sw.Steps {
			if s.SLOMet != (s.P50 <= 20 && s.Errors == 0 && !s.Interrupted) {
				t.Errorf("step %d: SLO met %v with p50 %.2fms", i, s.SLOMet, s.P50)
			}
			if s.SLOMet && (want < 0 || s.Throughput > sw.Steps[want].Throughput) {
				want = i
			}
		}
		if sw.Knee != want {
			t.Fatalf("knee %d, want %d (steps %+v)", sw.Knee, want, sw.Steps)
		}
	}
	// The fit's quality depends on the machine's noise; its recovery of
	// known parameters is tested on synthetic data (usl_test.go).
	if sw.USL == nil || !(sw.USL.Lambda > 0) || sw.USL.Points != 4 {
		t.Errorf("USL fit %+v (%s)", sw.USL, sw.USLError)
	}
	if want < 0 {
		t.Logf("no step met the SLO in three sweeps (the machine is loaded beyond its cores): checking the no-knee verdict")
		if sw.Capacity != nil || !strings.Contains(sw.CapacityError, "no step met the SLO") ||
			!strings.Contains(text.String(), "none: no step met") || strings.Contains(text.String(), "ANSWER") {
			t.Fatalf("no step met the SLO, yet: capacity %+v (%q)\n%s", sw.Capacity, sw.CapacityError, text.String())
		}
	} else {
		if sw.Capacity == nil || len(sw.Capacity.Assumptions) < 4 {
			t.Fatalf("capacity %+v (%s)", sw.Capacity, sw.CapacityError)
		}
		// The answer is consistent with its own inputs: a shard count whose
		// hottest shard fits, or — when a loaded machine measured a knee so
		// low that even the hottest bucket alone (200 executions: 1% of the
		// traffic) exceeds one shard — no count, saying why.
		c := sw.Capacity
		usable := c.PerShardCapacity * (1 - c.Headroom)
		switch {
		case c.ShardsNeeded >= 1:
			if c.TargetRate*c.HottestShareNeeded > usable+1e-9 {
				t.Errorf("the planned hottest shard is over capacity: %+v", c)
			}
		case c.TargetRate*c.HottestBucketShare > usable && strings.Contains(c.Verdict, "no shard count"):
			t.Logf("the measured knee is below the hottest bucket's load: verdict %q", c.Verdict)
		default:
			t.Fatalf("no shard count, yet the hottest bucket (%g/s) fits one shard (%g/s usable): %+v",
				c.TargetRate*c.HottestBucketShare, usable, c)
		}
		if !strings.Contains(text.String(), "ANSWER") || !strings.Contains(text.String(), "← knee") {
			t.Errorf("sweep text lacks the answer or the knee")
		}
	}
	dir := t.TempDir()
	if _, err := loadgen.WriteSweepReports(dir, sw); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(filepath.Join(dir, loadgen.SweepHTMLFile))
	checkSelfContained(t, string(page))
	back, err := loadgen.ReadSweep(filepath.Join(dir, loadgen.SweepResultFile))
	if err != nil || back.Knee != sw.Knee || len(back.Steps) != 4 {
		t.Fatalf("sweep.json round trip: %v", err)
	}
}

func TestPlanCapacity(t *testing.T) {
	// 4 shards, 1000 commits/s at the knee, hottest 25% → 250/s per shard;
	// 20% headroom → 200/s usable; 10k/s at 1/n per shard → 50 shards.
	c, err := loadgen.PlanCapacity(loadgen.CapacityInput{MeasuredShards: 4, KneeCommitRate: 1000, HottestShare: 0.25, TargetRate: 10000, Headroom: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	if c.PerShardCapacity != 250 || c.ShardsNeeded != 50 {
		t.Errorf("per-shard %g, shards %d; want 250, 50", c.PerShardCapacity, c.ShardsNeeded)
	}
	// Measured skew: the hottest shard had 40% on 4 shards (1.6× the mean).
	c, _ = loadgen.PlanCapacity(loadgen.CapacityInput{MeasuredShards: 4, KneeCommitRate: 1000, HottestShare: 0.4, TargetRate: 10000, Headroom: 0.2})
	if c.PerShardCapacity != 400 || c.ShardsNeeded != 50 {
		t.Errorf("skewed: per-shard %g, shards %d; want 400 (1.6× share, same shard count)", c.PerShardCapacity, c.ShardsNeeded)
	}
	// Uniform keys over buckets: close to the even answer.
	w := loadgen.DefaultOptions().Workload
	w.Executions = 20000
	mass := loadgen.BucketMass(w, 4096)
	c, _ = loadgen.PlanCapacity(loadgen.CapacityInput{MeasuredShards: 4, KneeCommitRate: 1000, HottestShare: 0.25, BucketMass: mass, TargetRate: 10000, Headroom: 0.2})
	if c.ShardsNeeded < 50 || c.ShardsNeeded > 60 {
		t.Errorf("uniform keys: %d shards, want a little over 50", c.ShardsNeeded)
	}
	if c.HottestShareModel < 0.25 || c.HottestShareModel > 0.27 {
		t.Errorf("uniform keys: model hottest share on 4 shards %g", c.HottestShareModel)
	}
	// Zipfian keys: the hottest key's bucket alone is over a shard's capacity.
	w.Keys = loadgen.Keys{Dist: loadgen.Zipfian, Theta: 0.99}
	mass = loadgen.BucketMass(w, 4096)
	c, _ = loadgen.PlanCapacity(loadgen.CapacityInput{MeasuredShards: 4, KneeCommitRate: 1000, HottestShare: 0.3, BucketMass: mass, TargetRate: 10000, Headroom: 0.2})
	if c.ShardsNeeded != 0 || c.HottestBucketShare < 0.05 || !strings.Contains(c.Verdict, "skew") {
		t.Errorf("zipfian: %d shards, hottest bucket %g, verdict %q", c.ShardsNeeded, c.HottestBucketShare, c.Verdict)
	}
	if _, err := loadgen.PlanCapacity(loadgen.CapacityInput{MeasuredShards: 4, TargetRate: 1}); err == nil {
		t.Error("planned without a knee")
	}
}

func TestCompareRunsAndSweeps(t *testing.T) {
	a := syntheticResult()
	b := syntheticResult()
	b.Label, b.Target, b.Throughput = "pgbouncer", "pgbouncer", 600
	da, db := filepath.Join(t.TempDir(), "direct"), filepath.Join(t.TempDir(), "pgbouncer")
	for d, r := range map[string]*loadgen.Result{da: a, db: b} {
		if _, err := loadgen.WriteReports(d, r); err != nil {
			t.Fatal(err)
		}
	}
	c, err := loadgen.LoadComparison([]string{da, db})
	if err != nil {
		t.Fatal(err)
	}
	var text, page bytes.Buffer
	if err := c.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "600.0 (0.50×)") || !strings.Contains(text.String(), "pgbouncer") {
		t.Errorf("comparison lacks the ratio:\n%s", text.String())
	}
	if err := c.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	checkSelfContained(t, page.String())

	if _, err := loadgen.LoadComparison([]string{da}); err == nil {
		t.Error("compared one directory")
	}
	if _, err := loadgen.LoadComparison([]string{da, t.TempDir()}); err == nil {
		t.Error("compared an empty directory")
	}
	s1 := &loadgen.Sweep{Version: loadgen.ResultVersion, Label: "direct", Model: loadgen.Closed, SLO: "p99(op)<=50ms", Knee: 1,
		Steps: []loadgen.SweepStep{{X: 1, Throughput: 100, P99: 5}, {X: 2, Throughput: 190, P99: 9}}}
	s2 := &loadgen.Sweep{Version: loadgen.ResultVersion, Label: "proxy", Model: loadgen.Closed, SLO: "p99(op)<=50ms", Knee: -1,
		Steps: []loadgen.SweepStep{{X: 1, Throughput: 50, P99: 60}, {X: 2, Throughput: 95, P99: 70}}}
	d1, d2 := filepath.Join(t.TempDir(), "s1"), filepath.Join(t.TempDir(), "s2")
	for d, s := range map[string]*loadgen.Sweep{d1: s1, d2: s2} {
		if _, err := loadgen.WriteSweepReports(d, s); err != nil {
			t.Fatal(err)
		}
	}
	c, err = loadgen.LoadComparison([]string{d1, d2})
	if err != nil {
		t.Fatal(err)
	}
	text.Reset()
	page.Reset()
	_ = c.WriteText(&text)
	_ = c.WriteHTML(&page)
	if !strings.Contains(text.String(), "95.0 (0.50×)") || !strings.Contains(text.String(), "none") {
		t.Errorf("sweep comparison:\n%s", text.String())
	}
	checkSelfContained(t, page.String())
	if _, err := loadgen.LoadComparison([]string{d1, da}); err == nil {
		t.Error("compared a sweep with a run")
	}
}
