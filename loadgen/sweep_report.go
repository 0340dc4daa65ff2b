package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// Sweep report file names.
const (
	SweepSummaryFile = "sweep.txt"
	SweepResultFile  = "sweep.json"
	SweepHTMLFile    = "sweep.html"
)

// WriteSweepReports writes the sweep's text, JSON and HTML reports into dir.
func WriteSweepReports(dir string, sw *Sweep) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, f := range []struct {
		name string
		fn   func(io.Writer, *Sweep) error
	}{{SweepSummaryFile, WriteSweepText}, {SweepResultFile, writeSweepJSON}, {SweepHTMLFile, WriteSweepHTML}} {
		p := filepath.Join(dir, f.name)
		w, err := os.Create(p)
		if err != nil {
			return files, err
		}
		if err := f.fn(w, sw); err != nil {
			w.Close()
			return files, fmt.Errorf("%s: %w", p, err)
		}
		if err := w.Close(); err != nil {
			return files, err
		}
		files = append(files, p)
	}
	return files, nil
}

func writeSweepJSON(w io.Writer, sw *Sweep) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(sw)
}

// ReadSweep reads a sweep.json file.
func ReadSweep(path string) (*Sweep, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var sw Sweep
	if err := json.Unmarshal(b, &sw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if sw.Version != ResultVersion {
		return nil, fmt.Errorf("%s: sweep version %d, this build reads %d", path, sw.Version, ResultVersion)
	}
	return &sw, nil
}

// WriteSweepText writes the sweep's human summary.
func WriteSweepText(w io.Writer, sw *Sweep) error {
	var b strings.Builder
	fmt.Fprintf(&b, "pgshard loadgen sweep — %s\n", sw.Label)
	r := Result{Target: sw.Target, Shards: sw.Shards, Options: sw.Options}
	desc := r.Describe()
	if i := strings.Index(desc, ", "); i >= 0 {
		desc = desc[:i] // target only; the load is per step
	}
	fmt.Fprintf(&b, "%s, %s loop, %d shards, %d executions, keys %s, seed %d; each step %s warm-up + %s measured\n",
		desc, sw.Model, len(sw.Shards), sw.Options.Workload.Executions, sw.Options.Workload.Keys, sw.Options.Workload.Seed,
		sw.Options.Warmup, sw.Options.Duration)
	fmt.Fprintf(&b, "SLO %s\n", sw.SLO)
	if sw.Interrupted {
		b.WriteString("INTERRUPTED: partial sweep\n")
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tops/s\tcommits/s\tp50 ms\tp99 ms\tp99.9 ms\terrors\tconflicts\thottest\tSLO\twarnings\t")
	for i, s := range sw.Steps {
		met := "met"
		if !s.SLOMet {
			met = "MISSED"
		}
		if i == sw.Knee {
			met += " ← knee"
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\t%d\t%d\t%.1f%%\t%s\t%d\t\n", stepName(sw.Model, s.X), s.Throughput, s.CommitRate,
			s.P50, s.P99, s.P999, s.Errors, s.Conflicts, 100*s.HottestShare, met, len(s.Warnings))
	}
	tw.Flush()
	b.WriteString("\n")
	if sw.Knee >= 0 {
		k := sw.Steps[sw.Knee]
		fmt.Fprintf(&b, "knee        %s: %.1f ops/s, %.1f commits/s within %s (p99 %.2fms)\n", stepName(sw.Model, k.X), k.Throughput, k.CommitRate, sw.SLO, k.P99)
	} else {
		fmt.Fprintf(&b, "knee        none: no step met %s without errors\n", sw.SLO)
	}
	switch {
	case sw.USL != nil:
		fmt.Fprintf(&b, "USL fit     %s\n", sw.USL)
	case sw.USLError != "":
		fmt.Fprintf(&b, "USL fit     not done: %s\n", sw.USLError)
	}
	if c := sw.Capacity; c != nil {
		fmt.Fprintf(&b, "\ncapacity for %s commits/s within %s, headroom %.0f%%:\n", fmtNum(c.TargetRate), sw.SLO, 100*c.Headroom)
		fmt.Fprintf(&b, "  per-shard capacity %.1f commits/s (knee %.1f commits/s × hottest share %.1f%% measured; key model predicts %.1f%% on %d shards)\n",
			c.PerShardCapacity, c.KneeCommitRate, 100*c.HottestShareMeasured, 100*c.HottestShareModel, c.MeasuredShards)
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  shards\thottest share\thottest load/s\tutilization\t")
		for _, p := range c.Plan {
			fmt.Fprintf(tw, "  %d\t%.2f%%\t%.1f\t%.0f%%\t\n", p.Shards, 100*p.HottestShare, p.HottestLoad, 100*p.Utilization)
		}
		tw.Flush()
		fmt.Fprintf(&b, "ANSWER      %s\n", c.Verdict)
		b.WriteString("assumptions:\n")
		for _, a := range c.Assumptions {
			fmt.Fprintf(&b, "  - %s\n", a)
		}
	} else if sw.CapacityError != "" {
		fmt.Fprintf(&b, "capacity    not computed: %s\n", sw.CapacityError)
	}
	for _, s := range sw.Steps {
		if s.Dir != "" {
			fmt.Fprintf(&b, "step reports: %s\n", filepath.Dir(s.Dir))
			break
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func sweepXLabel(m Model) string {
	if m == Open {
		return "offered rate (ops/s)"
	}
	return "concurrency (workers)"
}

// WriteSweepHTML writes the sweep's self-contained HTML report.
func WriteSweepHTML(w io.Writer, sw *Sweep) error {
	var text strings.Builder
	if err := WriteSweepText(&text, sw); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(`<h2>Sweep curves</h2><div class="charts">`)
	b.WriteString(sweepThroughputChart([]*Sweep{sw}).svg())
	b.WriteString(sweepLatencyChart([]*Sweep{sw}).svg())
	b.WriteString(`</div><h2>Summary and capacity model</h2>` + pre(text.String()))
	var warn []string
	for _, s := range sw.Steps {
		for _, x := range s.Warnings {
			warn = append(warn, stepName(sw.Model, s.X)+": "+x)
		}
	}
	b.WriteString("<h2>Self-checks per step</h2>" + warningsHTML(warn))
	_, err := io.WriteString(w, page("pgshard loadgen sweep — "+sw.Label, b.String()))
	return err
}

func sweepThroughputChart(sws []*Sweep) lineChart {
	c := lineChart{Title: "Throughput by step", XLabel: sweepXLabel(sws[0].Model), YLabel: "operations / s"}
	for i, sw := range sws {
		s := series{Name: sw.Label, Color: color(i), Dots: true}
		var maxX float64
		for _, st := range sw.Steps {
			s.Points = append(s.Points, [2]float64{st.X, st.Throughput})
			maxX = max(maxX, st.X)
		}
		c.Series = append(c.Series, s)
		if sw.USL != nil {
			f := series{Name: sw.Label + " USL fit", Color: color(i), Dashed: true}
			for k := 0; k <= 60; k++ {
				n := 1 + (maxX-1)*float64(k)/60
				f.Points = append(f.Points, [2]float64{n, sw.USL.X(n)})
			}
			c.Series = append(c.Series, f)
		}
		if sw.Knee >= 0 {
			k := sw.Steps[sw.Knee]
			c.Series = append(c.Series, series{Name: sw.Label + " knee", Color: color(i), Ring: true, Points: [][2]float64{{k.X, k.Throughput}}})
		}
	}
	return c
}

func sweepLatencyChart(sws []*Sweep) lineChart {
	c := lineChart{Title: "Operation latency by step", XLabel: sweepXLabel(sws[0].Model), YLabel: "ms (log)", LogY: true}
	for i, sw := range sws {
		p50 := series{Name: sw.Label + " p50", Color: color(i), Dashed: true, Dots: true}
		p99 := series{Name: sw.Label + " p99", Color: color(i), Dots: true}
		for _, st := range sw.Steps {
			p50.Points = append(p50.Points, [2]float64{st.X, st.P50})
			p99.Points = append(p99.Points, [2]float64{st.X, st.P99})
		}
		c.Series = append(c.Series, p50, p99)
	}
	if slo, err := ParseSLO(sws[0].SLO); err == nil {
		for _, t := range slo {
			c.HLines = append(c.HLines, hline{Y: t.MaxMs, Label: fmt.Sprintf("SLO p%g(%s)", t.Percentile, t.Kind), Color: "#d62728"})
		}
	}
	return c
}
