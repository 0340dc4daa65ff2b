package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
)

// Report file names in an output directory.
const (
	SummaryFile = "summary.txt"
	ResultFile  = "result.json"
	HTMLFile    = "report.html"
)

// WriteReports writes res into dir (created if needed): the text summary,
// the JSON result, one .hgrm percentile file per operation kind and the
// self-contained HTML report. It returns the files written.
func WriteReports(dir string, res *Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	write := func(name string, f func(io.Writer) error) error {
		p := filepath.Join(dir, name)
		w, err := os.Create(p)
		if err != nil {
			return err
		}
		if err := f(w); err != nil {
			w.Close()
			return fmt.Errorf("%s: %w", p, err)
		}
		if err := w.Close(); err != nil {
			return err
		}
		files = append(files, p)
		return nil
	}
	if err := write(SummaryFile, func(w io.Writer) error { return WriteText(w, res) }); err != nil {
		return files, err
	}
	if err := write(ResultFile, func(w io.Writer) error { return WriteJSON(w, res) }); err != nil {
		return files, err
	}
	names := make([]string, 0, len(res.hists))
	for n := range res.hists {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		h := res.hists[n]
		if err := write(n+".hgrm", func(w io.Writer) error {
			_, err := h.PercentilesPrint(w, 5, 1000) // values in ms
			return err
		}); err != nil {
			return files, err
		}
	}
	if err := write(HTMLFile, func(w io.Writer) error { return WriteHTML(w, res) }); err != nil {
		return files, err
	}
	return files, nil
}

// WriteJSON writes res as indented JSON.
func WriteJSON(w io.Writer, res *Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// Describe is a one-line description of a run's setup.
func (r *Result) Describe() string {
	o := r.Options
	var load string
	if o.Model == Open {
		load = fmt.Sprintf("open loop at %s ops/s (max %d in flight)", fmtNum(o.Rate), o.MaxOutstanding)
	} else {
		load = fmt.Sprintf("closed loop, %d workers", o.Concurrency)
	}
	d := fmt.Sprintf("target %s, %s, %s, %d executions, keys %s, seed %d",
		orDash(r.Target), load, plural(len(r.Shards), "shard"), o.Workload.Executions, o.Workload.Keys, o.Workload.Seed)
	switch {
	case !o.Part.Whole():
		d += fmt.Sprintf("; part %s (executions i with i mod %d = %d)", o.Part, o.Part.Count, o.Part.Index)
	case len(r.Parts) > 0:
		d += fmt.Sprintf("; merged from %s", plural(len(r.Parts), "part"))
	}
	return d
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteText writes the human summary of res.
func WriteText(w io.Writer, r *Result) error {
	var b strings.Builder
	title := "pgshard loadgen"
	if r.Label != "" && r.Label != r.Target {
		title += " — " + r.Label
	}
	fmt.Fprintf(&b, "%s\n%s\n", title, r.Describe())
	m := r.Options.Workload.Mix
	fmt.Fprintf(&b, "mix: %.0f%% fast commits, complex commits with 0-%d emits, timers %.0f%%, spawns %.0f%%; redelivery %.0f%%; retry cap %d\n",
		100*m.Fast, m.MaxEmits, 100*m.Timer, 100*m.Spawn, 100*r.Options.Workload.Redelivery, r.Options.Workload.RetryCap)
	fmt.Fprintf(&b, "measured %.1fs after %.1fs warm-up (setup %.1fs)", r.MeasuredSeconds, r.WarmupSeconds, r.SetupSeconds)
	if r.Interrupted {
		b.WriteString(" — INTERRUPTED: partial result")
	}
	b.WriteString("\n\n")
	fmt.Fprintf(&b, "throughput  %.1f ops/s   commits %.1f/s   operations %d\n", r.Throughput, r.CommitRate, r.Ops)
	fmt.Fprintf(&b, "outcomes    %s\n", fmtCounts(r.Outcomes))
	if n := r.Outcomes[OutcomeCanceled]; n > 0 {
		fmt.Fprintf(&b, "canceled    %d operations were still running when the run ended: their latency is recorded as the time until cancellation (a lower bound)\n", n)
	}
	fmt.Fprintf(&b, "errors      %d", r.ErrorCount())
	if len(r.Errors) > 0 {
		fmt.Fprintf(&b, " (%s)", fmtCounts(r.Errors))
	}
	b.WriteString("\n")
	writeFreezes(&b, r.Freezes)
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency ms\tcount\tmean\tp50\tp90\tp99\tp99.9\tmax\t")
	for _, n := range r.KindNames() {
		k := r.Kinds[n]
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", n, k.Count, k.Mean, k.P50, k.P90, k.P99, k.P999, k.Max)
	}
	tw.Flush()
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shard\tops\tshare\tp50 ms\tp99 ms\t")
	for _, s := range r.PerShard {
		fmt.Fprintf(tw, "%s\t%d\t%.1f%%\t%.2f\t%.2f\t\n", s.Name, s.Ops, 100*s.Share, s.P50, s.P99)
	}
	tw.Flush()
	fmt.Fprintf(&b, "hottest shard share %.1f%%\n\n", 100*r.HottestShare)
	rl := r.Relays
	fmt.Fprintf(&b, "relays      %d workers each: outbox delivered %d (deduped %d), timers fired %d (deduped %d), spawns acked %d, errors %d; outbox backlog %d at start, %d at end; timers due at end %d\n",
		r.Options.RelayWorkers, rl.OutboxDelivered, rl.OutboxDeduped, rl.TimersFired, rl.TimersDeduped, rl.SpawnsAcked, rl.Errors, rl.OutboxBacklogStart, rl.OutboxBacklog, rl.TimerBacklog)
	if ol := r.OpenLoop; ol != nil {
		fmt.Fprintf(&b, "open loop   offered %.1f ops/s: intended %d, started %d, late (>%.0fms) %d, dropped %d; dispatcher lag p50 %.2fms p99 %.2fms max %.2fms\n",
			ol.Rate, ol.Intended, ol.Started, ol.LateThresholdMs, ol.Late, ol.Dropped, ol.LagP50, ol.LagP99, ol.LagMax)
	}
	sc := r.SelfCheck
	fmt.Fprintf(&b, "self-check  generator CPU %.0f%% of %d CPUs (%.1f µs per operation), machine CPU %.0f%%, load1 max %.2f, Go scheduler latency p99 %.2fms max %.2fms\n",
		100*sc.GenCPU, sc.CPUs, sc.GenCPUPerOpUS, 100*sc.HostCPU, sc.Load1Max, sc.SchedP99, sc.SchedMax)
	for _, wn := range sc.Warnings {
		fmt.Fprintf(&b, "WARNING     %s\n", wn)
	}
	if len(r.ErrorSamples) > 0 {
		b.WriteString("\nfirst errors:\n")
		for _, s := range r.ErrorSamples {
			fmt.Fprintf(&b, "  %s\n", s)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtCounts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// writeFreezes lists the range moves' freezes within the run (at most
// ten; the rest counted), with how many were abandoned and the longest
// hold when the journal records their lengths; nothing when there were
// none.
func writeFreezes(b *strings.Builder, fs []Freeze) {
	if len(fs) == 0 {
		return
	}
	abandoned, timed, longest := 0, 0, 0.0
	for _, f := range fs {
		if f.Abandoned {
			abandoned++
		}
		if !f.AtFlip {
			timed++
			longest = max(longest, f.DurationMS)
		}
	}
	fmt.Fprintf(b, "freezes     %d range-move freezes in the run (from the catalog's journal", len(fs))
	if timed > 0 {
		fmt.Fprintf(b, "; %d abandoned, longest %.0f ms", abandoned, longest)
	}
	b.WriteString("):")
	for i, f := range fs {
		if i == 10 {
			fmt.Fprintf(b, " and %d more", len(fs)-i)
			break
		}
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(b, "%s %s at %.1fs", sep, f.Label(), f.StartS)
	}
	b.WriteString("\n")
}
