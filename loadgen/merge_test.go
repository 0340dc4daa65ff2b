package loadgen_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/loadgen/loadgentest"
)

func TestParsePart(t *testing.T) {
	for _, c := range []struct {
		in   string
		want loadgen.Part
		err  string
	}{
		{in: "0/1", want: loadgen.Part{Index: 0, Count: 1}},
		{in: "3/4", want: loadgen.Part{Index: 3, Count: 4}},
		{in: " 1 / 2 ", want: loadgen.Part{Index: 1, Count: 2}},
		{in: "4/4", err: "K must be in [0, 3]"},
		{in: "-1/4", err: "K must be in [0, 3]"},
		{in: "0/0", err: "N must be at least 1"},
		{in: "1/-2", err: "N must be at least 1"},
		{in: "2", err: "want K/N"},
		{in: "a/b", err: "must be integers"},
	} {
		got, err := loadgen.ParsePart(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParsePart(%q): error %v, want one containing %q", c.in, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("ParsePart(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestForPartSharesTheRun(t *testing.T) {
	o := loadgen.DefaultOptions()
	o.Concurrency = 5
	o.Ops = 7
	var conc, ops int
	for k := 0; k < 2; k++ {
		p, err := o.ForPart(loadgen.Part{Index: k, Count: 2})
		if err != nil {
			t.Fatal(err)
		}
		conc += p.Concurrency
		ops += int(p.Ops)
		if _, err := p.ForPart(loadgen.Part{Index: 0, Count: 2}); err == nil {
			t.Errorf("a part split again: no error")
		}
	}
	if conc != 5 || ops != 7 {
		t.Errorf("2 parts have %d workers and %d ops, want 5 and 7", conc, ops)
	}
	o.Model, o.Rate = loadgen.Open, 900
	p, err := o.ForPart(loadgen.Part{Index: 2, Count: 3})
	if err != nil || p.Rate != 300 {
		t.Errorf("part 2/3 of 900 ops/s: rate %g, %v", p.Rate, err)
	}
	o.Workload.Executions = 2
	if _, err := o.ForPart(loadgen.Part{Index: 0, Count: 3}); err == nil || !strings.Contains(err.Error(), "2 executions cannot be shared by 3 parts") {
		t.Errorf("2 executions, 3 parts: %v", err)
	}
	o.Workload.Executions, o.Model, o.Concurrency = 100, loadgen.Closed, 2
	if _, err := o.ForPart(loadgen.Part{Index: 0, Count: 3}); err == nil || !strings.Contains(err.Error(), "concurrency 2") {
		t.Errorf("2 workers, 3 parts: %v", err)
	}
	o.Part = loadgen.Part{Index: 3, Count: 3}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "K must be") {
		t.Errorf("Validate with part 3/3: %v", err)
	}
}

// A part touches only its slice of the executions: i mod N == K.
func TestPartDrivesItsSliceOnly(t *testing.T) {
	f := loadgentest.New(loadgentest.Options{})
	o, err := quick().ForPart(loadgen.Part{Index: 1, Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	res := run(t, f, o)
	if res.Ops == 0 || res.Relays.OutboxDelivered == 0 {
		t.Fatalf("part ran nothing: %v, relays %+v", res.Outcomes, res.Relays)
	}
	ids := loadgen.ExecutionIDs(o.Workload.Seed, o.Workload.Executions)
	var mine int
	for i, id := range ids {
		v := f.Version(id)
		if i%3 == 1 {
			mine++
			if v == 0 {
				t.Errorf("execution %d (part 1/3's) was not created", i)
			}
		} else if v != 0 {
			t.Errorf("execution %d belongs to part %d/3, yet part 1/3 wrote it (version %d)", i, i%3, v)
		}
	}
	if f.Executions() != mine {
		t.Errorf("the fake holds %d executions, part 1/3 owns %d", f.Executions(), mine)
	}
}

// encoded records values into a histogram of the engine's geometry and
// returns its encoding and the histogram.
func encoded(t *testing.T, values []int64) (string, *hdr.Histogram) {
	t.Helper()
	h := hdr.New(1, 60_000_000, 3)
	for _, v := range values {
		if err := h.RecordValue(v); err != nil {
			t.Fatal(err)
		}
	}
	b, err := h.Encode(hdr.V2CompressedEncodingCookieBase)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), h
}

// partResult is a minimal well-formed part result whose op and
// fast_commit latencies are the given values (µs).
func partResult(t *testing.T, k, n int, start time.Time, values []int64) *loadgen.Result {
	t.Helper()
	enc, h := encoded(t, values)
	o := loadgen.DefaultOptions()
	o.Model, o.Rate = loadgen.Open, 100
	o.Part = loadgen.Part{Index: k, Count: n}
	ops := int64(len(values))
	return &loadgen.Result{
		Version: loadgen.ResultVersion, Label: "direct", Target: "direct", Shards: []string{"s0", "s1"},
		Options: o, Start: start, WarmupSeconds: 0, MeasuredSeconds: 2,
		Ops: ops, Throughput: float64(ops) / 2,
		Outcomes: map[string]int64{loadgen.OutcomeOK: ops}, Errors: map[string]int64{},
		PerShard: []loadgen.ShardStats{{Name: "s0", Ops: ops}, {Name: "s1"}},
		Windows: []loadgen.Window{{T: 1, Rate: float64(ops) / 2, P50: float64(h.ValueAtQuantile(50)) / 1000},
			{T: 2, Rate: float64(ops) / 2}},
		OpenLoop:  &loadgen.OpenLoopStats{Rate: 100, Intended: ops, Started: ops, MaxOutstanding: 10},
		SelfCheck: loadgen.SelfCheck{CPUs: 2, GenCPU: 0.1, GenCPUSeconds: 0.5, Warnings: []string{"w"}},
		Histograms: &loadgen.Histograms{
			Kinds:   map[string]string{"op": enc, "fast_commit": enc},
			Shards:  []string{enc, ""},
			Windows: []string{enc, ""},
			Lag:     enc,
		},
	}
}

// Merging the parts' histograms is exactly recording every value into
// one: every percentile, the count, min, max and mean agree.
func TestMergeEqualsRecordingAllValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var a, b []int64
	for i := 0; i < 5000; i++ {
		v := int64(200 + rng.ExpFloat64()*3000) // µs, a long tail
		if i%3 == 0 {
			a = append(a, v)
		} else {
			b = append(b, v)
		}
	}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m, err := loadgen.MergeResults([]*loadgen.Result{partResult(t, 1, 2, start.Add(300*time.Millisecond), b), partResult(t, 0, 2, start, a)})
	if err != nil {
		t.Fatal(err)
	}
	_, all := encoded(t, append(append([]int64(nil), a...), b...))
	op := m.Kinds["op"]
	if op.Count != all.TotalCount() || op.Count != int64(len(a)+len(b)) {
		t.Fatalf("merged count %d, want %d", op.Count, len(a)+len(b))
	}
	for _, q := range []float64{0, 50, 90, 99, 99.9, 100} {
		if got, want := op.Percentile(q), float64(all.ValueAtQuantile(q))/1000; got != want {
			t.Errorf("p%g: merged %.3f ms, all values in one histogram %.3f ms", q, got, want)
		}
	}
	if op.Mean != all.Mean()/1000 || op.Max != float64(all.Max())/1000 || op.Min != float64(all.Min())/1000 {
		t.Errorf("merged mean/min/max %.4f/%.3f/%.3f, want %.4f/%.3f/%.3f", op.Mean, op.Min, op.Max, all.Mean()/1000, float64(all.Min())/1000, float64(all.Max())/1000)
	}
	if c := m.Kinds[loadgen.KindCommit]; c == nil || c.Count != op.Count {
		t.Errorf("derived commit kind: %+v", c)
	}
	// Counts and rates are summed; the shard table too.
	if m.Ops != int64(len(a)+len(b)) || m.Options.Rate != 200 || m.OpenLoop.Rate != 200 || m.OpenLoop.Intended != m.Ops || m.OpenLoop.MaxOutstanding != 20 {
		t.Errorf("sums: ops %d, rate %g/%g, open loop %+v", m.Ops, m.Options.Rate, m.OpenLoop.Rate, m.OpenLoop)
	}
	if m.PerShard[0].Ops != m.Ops || m.PerShard[0].Share != 1 || m.PerShard[0].P99 != float64(all.ValueAtQuantile(99))/1000 || m.PerShard[1].Ops != 0 {
		t.Errorf("per shard: %+v", m.PerShard)
	}
	if m.SelfCheck.CPUs != 4 || m.SelfCheck.GenCPUSeconds != 1 || len(m.SelfCheck.Warnings) != 2 || !strings.HasPrefix(m.SelfCheck.Warnings[0], "part 0/2: ") {
		t.Errorf("self-check: %+v", m.SelfCheck)
	}
	// Windows by wall clock: part 1 started 0.3 s later, so its windows
	// (middles at 0.8 s and 1.8 s) share the slots of part 0's (0.5 s,
	// 1.5 s); the first slot holds both parts' first windows.
	if len(m.Windows) != 2 || m.Windows[0].T != 1 || m.Windows[1].T != 2 {
		t.Fatalf("windows: %+v", m.Windows)
	}
	if got, want := m.Windows[0].Rate, float64(len(a)+len(b))/2; got != want {
		t.Errorf("first slot rate %g, want the parts' sum %g", got, want)
	}
	if got, want := m.Windows[0].P99, float64(all.ValueAtQuantile(99))/1000; got != want {
		t.Errorf("first slot p99 %g, want %g", got, want)
	}
	if len(m.Parts) != 2 || m.Parts[0].Part.Index != 0 || !m.Options.Part.Whole() {
		t.Errorf("parts %+v, options part %+v", m.Parts, m.Options.Part)
	}
	if m.Histograms == nil || m.Histograms.Kinds["op"] == "" {
		t.Errorf("the merged result carries no histograms")
	}
}

func TestMergeRefusesMismatchedParts(t *testing.T) {
	start := time.Now()
	p := func(k, n int) *loadgen.Result { return partResult(t, k, n, start, []int64{100, 200}) }
	whole := p(0, 2)
	whole.Options.Part = loadgen.Part{}
	seed := p(1, 2)
	seed.Options.Workload.Seed = 9
	shards := p(1, 2)
	shards.Shards = []string{"s0", "other"}
	target := p(1, 2)
	target.Target = "proxy"
	nohist := p(1, 2)
	nohist.Histograms = nil
	for _, c := range []struct {
		name  string
		parts []*loadgen.Result
		err   string
	}{
		{"none", nil, "no results"},
		{"whole run", []*loadgen.Result{whole, p(1, 2)}, "is a whole run"},
		{"missing", []*loadgen.Result{p(0, 3), p(2, 3)}, "parts 1/3 are missing"},
		{"twice", []*loadgen.Result{p(0, 2), p(0, 2)}, "part 0/2 is given twice"},
		{"other N", []*loadgen.Result{p(0, 2), p(1, 3)}, "share N"},
		{"other seed", []*loadgen.Result{p(0, 2), seed}, "options workload.seed (1, 9)"},
		{"other map", []*loadgen.Result{p(0, 2), shards}, "shard maps"},
		{"other target", []*loadgen.Result{p(0, 2), target}, "targets (direct, proxy)"},
		{"no histograms", []*loadgen.Result{p(0, 2), nohist}, "no histograms"},
	} {
		_, err := loadgen.MergeResults(c.parts)
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		}
	}
}

// Two parts at half the rate each, run together against one fake, and a
// whole run at the full rate: the merged result has the form of a single
// run's, its counts are the sums of the parts', and every histogram is
// the parts' merged. The percentiles of the two runs are real latencies
// on a shared machine, so they are logged side by side, not compared;
// what is asserted is what the fake's service time bounds.
func TestTwoPartsAgainstOneRun(t *testing.T) {
	const service = 2 * time.Millisecond
	base := quick()
	base.Model, base.Rate = loadgen.Open, 200
	base.Warmup, base.Duration = 200*time.Millisecond, 1500*time.Millisecond
	whole := run(t, loadgentest.New(loadgentest.Options{Service: service}), base)

	shared := loadgentest.New(loadgentest.Options{Service: service})
	parts := make([]*loadgen.Result, 2)
	var wg sync.WaitGroup
	for k := range parts {
		o, err := base.ForPart(loadgen.Part{Index: k, Count: 2})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := loadgen.Run(context.Background(), shared, shared, o)
			if err != nil {
				t.Errorf("part %d: %v", k, err)
				return
			}
			parts[k] = res
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	m, err := loadgen.MergeResults(parts)
	if err != nil {
		t.Fatal(err)
	}
	var ops, intended, opCount, shardOps int64
	for _, p := range parts {
		ops += p.Ops
		intended += p.OpenLoop.Intended
		opCount += p.Kinds["op"].Count
	}
	for _, s := range m.PerShard {
		shardOps += s.Ops
	}
	if m.Ops == 0 || m.Ops != ops || m.OpenLoop.Intended != intended || m.Kinds["op"].Count != opCount || shardOps != opCount {
		t.Errorf("merged ops %d (parts %d), intended %d (%d), op count %d (%d), shard ops %d", m.Ops, ops, m.OpenLoop.Intended, intended, m.Kinds["op"].Count, opCount, shardOps)
	}
	if m.Options.Rate != base.Rate || m.OpenLoop.Rate != base.Rate || len(m.Windows) == 0 || len(m.Parts) != 2 {
		t.Errorf("merged rate %g/%g, %d windows, %d parts", m.Options.Rate, m.OpenLoop.Rate, len(m.Windows), len(m.Parts))
	}
	// Each kind's merged histogram holds every operation of both parts.
	kinds := map[string]int64{}
	for _, p := range parts {
		for k, ks := range p.Kinds {
			kinds[k] += ks.Count
		}
	}
	for k, n := range kinds {
		if m.Kinds[k] == nil || m.Kinds[k].Count != n {
			t.Errorf("kind %s: merged %+v, the parts recorded %d", k, m.Kinds[k], n)
		}
	}
	// Every operation is a load and a commit, each held at least the
	// service time, whatever the machine: a floor for both runs.
	floor := float64(2*service) / 1e6
	for name, r := range map[string]*loadgen.Result{"whole": whole, "merged": m} {
		if p := r.Kinds["op"].P50; p < floor*0.999 {
			t.Errorf("%s op p50 %.3f ms, below the %.1f ms two service times", name, p, floor)
		}
	}
	var text strings.Builder
	if err := loadgen.WriteText(&text, m); err != nil {
		t.Fatal(err)
	}
	t.Logf("op p50/p99/p99.9: whole %.2f/%.2f/%.2f ms, 2 parts merged %.2f/%.2f/%.2f ms (ops %d vs %d)",
		whole.Kinds["op"].P50, whole.Kinds["op"].P99, whole.Kinds["op"].P999, m.Kinds["op"].P50, m.Kinds["op"].P99, m.Kinds["op"].P999, whole.Ops, m.Ops)
}

// A part's relays leave the outbox rows and timers of another part's
// executions to that part, unless they are long overdue (that part may
// have stopped): part 1/2 does not deliver part 0/2's fresh row, and takes
// over an hour-old row and an hour-old timer of executions not its own.
func TestPartRelaysTakeTheirOwnRows(t *testing.T) {
	ctx := context.Background()
	f := loadgentest.New(loadgentest.Options{})
	o := quick()
	other := loadgen.ExecutionIDs(o.Workload.Seed, o.Workload.Executions)[0] // index 0: part 0/2's
	now := time.Now()
	event := func(id string, emitted time.Time) string {
		return fmt.Sprintf(`{"id":%q,"op":"x","emitted_ns":%d}`, id, emitted.UnixNano())
	}
	for _, c := range []*loadgen.Commit{
		{Exe: loadgen.Execution{ID: other, DefinitionID: "loadgen", State: loadgen.State{Active: "idle"}}},
		{Exe: loadgen.Execution{ID: "src", DefinitionID: "loadgen", State: loadgen.State{Active: "idle"}},
			Emits: []loadgen.Emit{
				{ID: "fresh", TargetID: other, Event: event("fresh", now.Add(time.Hour))},
				{ID: "stale", TargetID: other, Event: event("stale", now.Add(-time.Hour))},
			},
			Timers: []loadgen.TimerOp{{Path: "stale", FireAt: float64(now.Add(-time.Hour).UnixNano()) / 1e9}}},
	} {
		if err := f.Commit(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	// The stale timer is armed on "src", an execution of no part.
	o, err := o.ForPart(loadgen.Part{Index: 1, Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	delivered := func() bool {
		rows, _ := f.PendingOutbox(ctx, 0)
		due, _ := f.DueTimers(ctx, float64(time.Now().Unix()), 0)
		for _, r := range rows {
			if strings.Contains(r.Event, `"stale"`) {
				return false
			}
		}
		for _, tm := range due {
			if tm.ExecutionID == "src" {
				return false
			}
		}
		return true
	}
	o.Until, o.MaxDuration = delivered, 10*time.Second
	run(t, f, o)
	if !delivered() {
		t.Errorf("part 1/2 left the hour-old row or timer of executions not its own")
	}
	rows, err := f.PendingOutbox(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var fresh bool
	for _, r := range rows {
		fresh = fresh || strings.Contains(r.Event, `"fresh"`)
	}
	if !fresh {
		t.Errorf("part 1/2 delivered a fresh row of part 0/2's execution")
	}
	if v := f.Version(other); v != 2 {
		t.Errorf("part 0/2's execution is at version %d: want 2 (created, then the stale row's delivery only)", v)
	}
}
