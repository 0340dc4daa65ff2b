package reshard_test

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/pgshard/pgshard/reshard"
	"github.com/pgshard/pgshard/shardmap"
)

// BenchmarkCaptureCost measures what the change capture costs a commit
// (one execution: processed event, outbox row, timer, trace entry) in one
// run: no capture triggers; triggers on, key outside every captured range
// (the trigger only checks); key inside the captured range (recorded).
// Reported as ns per commit and ratios to "none". Outside and captured
// commits alternate one by one; the no-trigger phase comes before and
// after them in turn, so load drifts hit each alike.
func BenchmarkCaptureCost(b *testing.B) {
	e := newEnv(b, 64)
	var in, out []string
	for _, id := range e.ids {
		if shardmap.BucketText(id, buckets) < buckets/2 {
			in = append(in, id)
		} else {
			out = append(out, id)
		}
	}
	src := e.pools[e.shards[0].Name]
	const per = 100
	var none, outside, inside time.Duration
	commit := func(id string) time.Duration {
		t0 := time.Now()
		if err := e.commit(id); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	runNone := func() {
		for i := range per {
			none += commit(out[i%len(out)])
		}
	}
	b.ResetTimer()
	for it := range b.N {
		if it%2 == 0 {
			runNone()
		}
		if _, err := src.Exec(e.ctx, `SELECT pgshard_move_capture_begin(999, 0, $1::int)`, buckets/2-1); err != nil {
			b.Fatal(err)
		}
		// Outside and captured commits alternate, one by one.
		for i := range per {
			outside += commit(out[i%len(out)])
			inside += commit(in[i%len(in)])
		}
		if _, err := src.Exec(e.ctx, `SELECT pgshard_move_capture_end(999)`); err != nil {
			b.Fatal(err)
		}
		if it%2 == 1 {
			runNone()
		}
	}
	n := float64(b.N * per)
	b.ReportMetric(float64(none.Nanoseconds())/n, "ns/commit-none")
	b.ReportMetric(float64(outside.Nanoseconds())/n, "ns/commit-outside")
	b.ReportMetric(float64(inside.Nanoseconds())/n, "ns/commit-captured")
	b.ReportMetric(float64(outside)/float64(none), "x-outside")
	b.ReportMetric(float64(inside)/float64(none), "x-captured")
}

// BenchmarkMove moves half the buckets back and forth b.N times while four
// writers commit through a router following the catalog, and reports the
// copy rate (rows/s), the changes replayed per move, and each freeze as
// the mover measured it (lock request to release; p50, p99 and max) with
// the catalog's flip within it (p50 and max).
func BenchmarkMove(b *testing.B) {
	e := newEnv(b, 1000)
	stop := make(chan struct{})
	wait := e.workload(4, 1<<30, stop)
	defer func() { close(stop); wait() }()
	var freezes, flips []time.Duration
	var rows, replayed int64
	var copyTime time.Duration
	abandoned := 0
	b.ResetTimer()
	for i := range b.N {
		to := e.shards[1].Name
		if i%2 == 1 {
			to = e.shards[0].Name
		}
		if _, err := reshard.Plan(e.ctx, e.cat, reshard.Request{Lo: 0, Hi: buckets/2 - 1, To: to}); err != nil {
			b.Fatal(err)
		}
		res, err := reshard.Apply(e.ctx, e.cat, benchOptions(b))
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			rows += r.RowsCopied
			copyTime += r.CopyTime
			replayed += r.Replayed
			for _, f := range r.Freezes {
				if f.Abandoned {
					abandoned++
				} else {
					freezes, flips = append(freezes, f.Duration), append(flips, f.Flip)
				}
			}
		}
	}
	b.StopTimer()
	slices.Sort(freezes)
	if len(freezes) > 0 {
		b.ReportMetric(float64(freezes[len(freezes)/2].Microseconds())/1000, "ms-freeze-p50")
		b.ReportMetric(float64(freezes[(len(freezes)*99+99)/100-1].Microseconds())/1000, "ms-freeze-p99")
		b.ReportMetric(float64(freezes[len(freezes)-1].Microseconds())/1000, "ms-freeze-max")
		slices.Sort(flips)
		b.ReportMetric(float64(flips[len(flips)/2].Microseconds())/1000, "ms-flip-p50")
		b.ReportMetric(float64(flips[len(flips)-1].Microseconds())/1000, "ms-flip-max")
	}
	b.ReportMetric(float64(rows)/copyTime.Seconds(), "rows-copied/s")
	b.ReportMetric(float64(replayed)/float64(b.N), "changes-replayed/move")
	b.ReportMetric(float64(abandoned)/float64(b.N), "freezes-abandoned/move")
}

// benchOptions are the mover's options of the benchmarks: the defaults,
// but for the duty cycle when RESHARD_DUTY_CYCLE names one (1: unpaced),
// to compare pacings back to back.
func benchOptions(b *testing.B) reshard.Options {
	var o reshard.Options
	if v := os.Getenv("RESHARD_DUTY_CYCLE"); v != "" {
		d, err := strconv.ParseFloat(v, 64)
		if err != nil || d <= 0 || d > 1 {
			b.Fatalf("RESHARD_DUTY_CYCLE=%q: want a number in (0, 1]", v)
		}
		o.DutyCycle = d
	}
	return o
}
