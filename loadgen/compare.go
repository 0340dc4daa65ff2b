package loadgen

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// Comparison is several runs (or sweeps) side by side; the first is the
// baseline of the ratios.
type Comparison struct {
	Dirs    []string
	Results []*Result // runs, when every dir holds a result.json
	Sweeps  []*Sweep  // sweeps, when every dir holds a sweep.json
}

// LoadComparison reads the result.json (or sweep.json) of each directory.
// All directories must hold the same kind of report.
func LoadComparison(dirs []string) (*Comparison, error) {
	if len(dirs) < 2 {
		return nil, fmt.Errorf("compare: need at least two report directories")
	}
	c := &Comparison{Dirs: dirs}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, SweepResultFile)); err == nil {
			sw, err := ReadSweep(filepath.Join(d, SweepResultFile))
			if err != nil {
				return nil, err
			}
			c.Sweeps = append(c.Sweeps, sw)
			continue
		}
		r, err := ReadResult(filepath.Join(d, ResultFile))
		if err != nil {
			return nil, fmt.Errorf("compare: %s holds neither %s nor %s: %w", d, ResultFile, SweepResultFile, err)
		}
		c.Results = append(c.Results, r)
	}
	if len(c.Results) > 0 && len(c.Sweeps) > 0 {
		return nil, fmt.Errorf("compare: mix of runs and sweeps; compare runs with runs, sweeps with sweeps")
	}
	c.disambiguate()
	return c, nil
}

// disambiguate gives runs with equal labels their directory's name.
func (c *Comparison) disambiguate() {
	seen := map[string]int{}
	labels := func(i int) *string {
		if c.Results != nil {
			return &c.Results[i].Label
		}
		return &c.Sweeps[i].Label
	}
	n := max(len(c.Results), len(c.Sweeps))
	for i := 0; i < n; i++ {
		seen[*labels(i)]++
	}
	for i := 0; i < n; i++ {
		if l := labels(i); seen[*l] > 1 || *l == "" {
			*l = filepath.Base(filepath.Clean(c.Dirs[i]))
		}
	}
}

func ratio(v, base float64) string {
	if base == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.2f×)", v/base)
}

// WriteText prints the comparison with ratios to the first column.
func (c *Comparison) WriteText(w io.Writer) error {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	if c.Sweeps != nil {
		c.sweepText(tw)
	} else {
		c.runText(tw)
	}
	tw.Flush()
	_, err := io.WriteString(w, b.String())
	return err
}

func (c *Comparison) runText(tw io.Writer) {
	rs := c.Results
	row := func(name string, f func(*Result) (float64, bool), format string) {
		fmt.Fprint(tw, name)
		base, _ := f(rs[0])
		for i, r := range rs {
			v, ok := f(r)
			if !ok {
				fmt.Fprint(tw, "\t-")
				continue
			}
			cell := fmt.Sprintf(format, v)
			if i > 0 {
				cell += ratio(v, base)
			}
			fmt.Fprint(tw, "\t"+cell)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprint(tw, "metric")
	for _, r := range rs {
		fmt.Fprint(tw, "\t"+r.Label)
	}
	fmt.Fprintln(tw)
	fmt.Fprint(tw, "target")
	for _, r := range rs {
		fmt.Fprint(tw, "\t"+orDash(r.Target))
	}
	fmt.Fprintln(tw)
	row("throughput ops/s", func(r *Result) (float64, bool) { return r.Throughput, true }, "%.1f")
	row("commits/s", func(r *Result) (float64, bool) { return r.CommitRate, true }, "%.1f")
	for _, k := range []string{"op", "commit", "fast_commit", "complex_commit", "load", "relay_delivery", "timer_fire"} {
		for _, p := range []struct {
			name string
			f    func(*KindStats) float64
		}{{"p50", func(s *KindStats) float64 { return s.P50 }}, {"p99", func(s *KindStats) float64 { return s.P99 }},
			{"p99.9", func(s *KindStats) float64 { return s.P999 }}} {
			row(fmt.Sprintf("%s(%s) ms", p.name, k), func(r *Result) (float64, bool) {
				s := r.Kinds[k]
				if s == nil || s.Count == 0 {
					return 0, false
				}
				return p.f(s), true
			}, "%.2f")
		}
	}
	row("errors", func(r *Result) (float64, bool) { return float64(r.ErrorCount()), true }, "%.0f")
	row("conflicts", func(r *Result) (float64, bool) { return float64(r.Outcomes[OutcomeConflict]), true }, "%.0f")
	row("hottest shard share", func(r *Result) (float64, bool) { return 100 * r.HottestShare, true }, "%.1f%%")
	row("generator CPU", func(r *Result) (float64, bool) { return 100 * r.SelfCheck.GenCPU, true }, "%.0f%%")
	row("machine CPU", func(r *Result) (float64, bool) { return 100 * r.SelfCheck.HostCPU, true }, "%.0f%%")
	row("warnings", func(r *Result) (float64, bool) { return float64(len(r.SelfCheck.Warnings)), true }, "%.0f")
}

func (c *Comparison) sweepText(tw io.Writer) {
	sws := c.Sweeps
	fmt.Fprint(tw, "step")
	for _, s := range sws {
		fmt.Fprintf(tw, "\t%s ops/s\tp99 ms", s.Label)
	}
	fmt.Fprintln(tw)
	xs := map[float64]bool{}
	var order []float64
	for _, s := range sws {
		for _, st := range s.Steps {
			if !xs[st.X] {
				xs[st.X] = true
				order = append(order, st.X)
			}
		}
	}
	sortFloats(order)
	find := func(s *Sweep, x float64) *SweepStep {
		for i := range s.Steps {
			if s.Steps[i].X == x {
				return &s.Steps[i]
			}
		}
		return nil
	}
	for _, x := range order {
		fmt.Fprint(tw, stepName(sws[0].Model, x))
		base := find(sws[0], x)
		for i, s := range sws {
			st := find(s, x)
			if st == nil {
				fmt.Fprint(tw, "\t-\t-")
				continue
			}
			cell := fmt.Sprintf("%.1f", st.Throughput)
			if i > 0 && base != nil {
				cell += ratio(st.Throughput, base.Throughput)
			}
			fmt.Fprintf(tw, "\t%s\t%.2f", cell, st.P99)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprint(tw, "knee")
	for _, s := range sws {
		if s.Knee >= 0 {
			k := s.Steps[s.Knee]
			fmt.Fprintf(tw, "\t%.1f @ %s\t%.2f", k.Throughput, stepName(s.Model, k.X), k.P99)
		} else {
			fmt.Fprint(tw, "\tnone\t-")
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprint(tw, "USL peak")
	for _, s := range sws {
		if s.USL != nil {
			fmt.Fprintf(tw, "\t%.0f @ N≈%.0f\tR²=%.2f", s.USL.PeakX(), s.USL.PeakN(), s.USL.R2)
		} else {
			fmt.Fprint(tw, "\t-\t-")
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprint(tw, "shards needed")
	for _, s := range sws {
		if s.Capacity != nil {
			fmt.Fprintf(tw, "\t%d for %s/s\t", s.Capacity.ShardsNeeded, fmtNum(s.Capacity.TargetRate))
		} else {
			fmt.Fprint(tw, "\t-\t")
		}
	}
	fmt.Fprintln(tw)
}

func sortFloats(a []float64) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// WriteHTML writes one self-contained page overlaying the runs (or sweeps).
func (c *Comparison) WriteHTML(w io.Writer) error {
	var text strings.Builder
	if err := c.WriteText(&text); err != nil {
		return err
	}
	var b strings.Builder
	var labels []string
	if c.Sweeps != nil {
		for _, s := range c.Sweeps {
			labels = append(labels, s.Label)
		}
		b.WriteString(`<h2>Sweep curves</h2><div class="charts">`)
		b.WriteString(sweepThroughputChart(c.Sweeps).svg())
		b.WriteString(sweepLatencyChart(c.Sweeps).svg())
		b.WriteString(`</div>`)
	} else {
		for _, r := range c.Results {
			labels = append(labels, r.Label)
		}
		b.WriteString(`<h2>Overlay</h2><div class="charts">`)
		b.WriteString(throughputChart(c.Results).svg())
		for _, k := range []string{"op", "commit", "load"} {
			ch := lineChart{Title: "Latency by percentile: " + k, XLabel: "percentile", YLabel: "ms (log)", LogX: true, LogY: true, XTicks: spectrumTicks}
			for i, r := range c.Results {
				if s := r.Kinds[k]; s != nil && s.Count > 0 {
					ch.Series = append(ch.Series, spectrumSeries(r.Label, s, color(i), false))
				}
			}
			if len(ch.Series) > 0 {
				b.WriteString(ch.svg())
			}
		}
		var bars []bar
		for _, r := range c.Results {
			bars = append(bars, bar{Label: r.Label, Value: r.Throughput, Note: fmt.Sprintf("%.0f ops/s%s", r.Throughput, ratio(r.Throughput, c.Results[0].Throughput))})
		}
		b.WriteString(barChart("Throughput", "operations / s", bars))
		b.WriteString(`</div>`)
	}
	b.WriteString(`<h2>Side by side</h2>` + pre(text.String()))
	_, err := io.WriteString(w, page("pgshard loadgen compare — "+strings.Join(labels, " vs "), b.String()))
	return err
}
