package loadgen

import (
	"context"
	"fmt"
	"time"
)

// collect takes a window from every recorder each second, samples the
// self-checks and prints the progress line, until ctx ends; a last
// (partial) window is taken then.
func (r *runner) collect(ctx context.Context) {
	last := r.start
	tm := time.NewTimer(time.Until(r.nextBoundary(last)))
	defer tm.Stop()
	for {
		select {
		case <-ctx.Done():
			if d := time.Since(last); d > 100*time.Millisecond {
				r.window(time.Now(), d)
			}
			return
		case <-tm.C:
			now := time.Now()
			r.window(now, now.Sub(last))
			last = now
			tm.Reset(time.Until(r.nextBoundary(now)))
		}
	}
}

// nextBoundary returns the end of the window after t: windows are 1 s,
// and one ends exactly where warm-up ends, so no window mixes both.
func (r *runner) nextBoundary(t time.Time) time.Time {
	if t.Before(r.measureStart) {
		n := r.start.Add(t.Sub(r.start).Truncate(time.Second) + time.Second)
		if n.After(r.measureStart) {
			return r.measureStart
		}
		return n
	}
	return r.measureStart.Add(t.Sub(r.measureStart).Truncate(time.Second) + time.Second)
}

// window records one window ending at now and lasting d.
func (r *runner) window(now time.Time, d time.Duration) {
	// One histogram merges every window, reset after each (only the
	// collector uses it): a new one would allocate and zero about 180 KB
	// a second.
	if r.windowHist == nil {
		r.windowHist = newHist()
	}
	h := r.windowHist
	if h.TotalCount() > 0 {
		h.Reset()
	}
	var s windowSnap
	for _, rec := range r.recs {
		rec.takeWindow(h, &s)
	}
	mid := now.Add(-d / 2)
	warm := mid.Before(r.measureStart)
	c := r.checks.sample(!warm && !mid.After(r.measureEnd))
	r.lagMu.Lock()
	r.flushLagLocked()
	lagP99 := msOf(r.lagWindow.ValueAtQuantile(99))
	r.lagWindow.Reset()
	r.lagMu.Unlock()
	w := Window{
		T:         now.Sub(r.start).Seconds(),
		Warmup:    warm,
		Rate:      float64(s.ops) / d.Seconds(),
		P50:       msOf(h.ValueAtQuantile(50)),
		P99:       msOf(h.ValueAtQuantile(99)),
		Max:       msOf(h.Max()),
		Conflicts: s.conflicts,
		Errors:    s.errors,
		Dropped:   s.dropped,
		Late:      s.late,
		InFlight:  r.inFlight.Load(),
		GenCPU:    c.genCPU,
		HostCPU:   c.hostCPU,
		Load1:     c.load1,
		SchedP99:  c.schedP99,
	}
	if r.o.Model == Open {
		w.LagP99 = lagP99
	}
	r.windows = append(r.windows, w)
	enc, err := encodeHist(h)
	if err != nil {
		enc = "!" // not decodable: MergeResults refuses the result
	}
	r.windowHists = append(r.windowHists, enc)
	if r.o.Progress != nil {
		fmt.Fprintln(r.o.Progress, progressLine(w, r.o))
	}
}

// progressLine formats one window for the terminal.
func progressLine(w Window, o Options) string {
	phase := "run   "
	if w.Warmup {
		phase = "warmup"
	}
	s := fmt.Sprintf("%6.1fs %s %8.0f ops/s  p50 %7.2fms  p99 %8.2fms  conflicts %5d  errors %4d  in-flight %4d",
		w.T, phase, w.Rate, w.P50, w.P99, w.Conflicts, w.Errors, w.InFlight)
	if o.Model == Open {
		s += fmt.Sprintf("  late %5d  dropped %5d", w.Late, w.Dropped)
	}
	s += fmt.Sprintf("  cpu gen %3.0f%% host %3.0f%%", 100*w.GenCPU, 100*w.HostCPU)
	return s
}
