package loadgen

import (
	"fmt"
	"html"
	"io"
	"strings"
)

// page wraps sections into a self-contained HTML document (inline CSS and
// SVG; nothing is fetched, so it opens offline).
func page(title string, body string) string {
	return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>` + html.EscapeString(title) + `</title>
<style>
body{font-family:sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
pre{background:#f7f7f7;padding:10px;font-size:12px;overflow-x:auto}
.warn{background:#fff4e5;border-left:4px solid #f0a000;padding:6px 10px;margin:4px 0}
.ok{background:#eef8ee;border-left:4px solid #2ca02c;padding:6px 10px}
.charts{display:flex;flex-wrap:wrap;gap:10px}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
</style></head><body>
<h1>` + html.EscapeString(title) + `</h1>
` + body + `
</body></html>
`
}

func pre(s string) string { return "<pre>" + html.EscapeString(s) + "</pre>" }

func warningsHTML(ws []string) string {
	if len(ws) == 0 {
		return `<div class="ok">Self-checks passed: the generator kept its schedule and the machine was not overloaded.</div>`
	}
	var b strings.Builder
	for _, w := range ws {
		b.WriteString(`<div class="warn">` + html.EscapeString(w) + `</div>`)
	}
	return b.String()
}

// WriteHTML writes the self-contained HTML report of one run.
func WriteHTML(w io.Writer, r *Result) error {
	var text strings.Builder
	if err := WriteText(&text, r); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("<h2>Self-checks</h2>" + warningsHTML(r.SelfCheck.Warnings))
	b.WriteString(`<h2>Over time</h2><div class="charts">`)
	b.WriteString(throughputChart([]*Result{r}).svg())
	b.WriteString(latencyOverTimeChart(r).svg())
	b.WriteString(selfCheckChart(r).svg())
	b.WriteString(`</div><h2>Latency percentile spectrum (measured period)</h2><div class="charts">`)
	b.WriteString(spectrumChart(r, "Latency by percentile: worker operations", workerKinds).svg())
	if c := spectrumChart(r, "Latency by percentile: relays and lags", relayKinds); len(c.Series) > 0 {
		b.WriteString(c.svg())
	}
	b.WriteString(`</div><h2>Per shard</h2><div class="charts">`)
	var bars []bar
	for _, s := range r.PerShard {
		bars = append(bars, bar{Label: s.Name, Value: 100 * s.Share, Note: fmt.Sprintf("%.1f%% p99 %.1fms", 100*s.Share, s.P99)})
	}
	b.WriteString(barChart("Share of operations per shard", "% of operations", bars))
	b.WriteString(`</div><h2>Summary</h2>` + pre(text.String()))
	_, err := io.WriteString(w, page("pgshard loadgen — "+r.Label, b.String()))
	return err
}

func shade(r *Result) *[2]float64 {
	if r.WarmupSeconds <= 0 {
		return nil
	}
	return &[2]float64{0, r.WarmupSeconds}
}

func throughputChart(rs []*Result) lineChart {
	c := lineChart{Title: "Throughput (1 s windows)", XLabel: "seconds since start", YLabel: "operations / s", ShadeLabel: "warm-up"}
	for i, r := range rs {
		s := series{Name: r.Label, Color: color(i)}
		for _, w := range r.Windows {
			s.Points = append(s.Points, [2]float64{w.T, w.Rate})
		}
		c.Series = append(c.Series, s)
		if i == 0 {
			c.Shade = shade(r)
		}
		if len(rs) == 1 {
			c.Bands = freezeBands(r)
		}
	}
	return c
}

func latencyOverTimeChart(r *Result) lineChart {
	c := lineChart{Title: "Operation latency p50 / p99 (1 s windows)", XLabel: "seconds since start", YLabel: "ms (log)", LogY: true,
		Shade: shade(r), ShadeLabel: "warm-up"}
	p50 := series{Name: "p50", Color: color(0)}
	p99 := series{Name: "p99", Color: color(1)}
	mx := series{Name: "max", Color: color(8), Dashed: true}
	for _, w := range r.Windows {
		p50.Points = append(p50.Points, [2]float64{w.T, w.P50})
		p99.Points = append(p99.Points, [2]float64{w.T, w.P99})
		mx.Points = append(mx.Points, [2]float64{w.T, w.Max})
	}
	c.Series = []series{p50, p99, mx}
	c.Bands = freezeBands(r)
	return c
}

// freezeColor marks range moves' freezes on the timelines, abandonedColor
// those abandoned (the writes were held, then the range stayed put).
const (
	freezeColor    = "#6a1b9a"
	abandonedColor = "#e65100"
)

// freezeBands are the run's freezes as chart bands (seconds since the
// run's start), abandoned ones in a color of their own; a freeze known
// only by its flip is a 2 px mark there.
func freezeBands(r *Result) []band {
	var out []band
	for _, f := range r.Freezes {
		col := freezeColor
		if f.Abandoned {
			col = abandonedColor
		}
		out = append(out, band{X0: f.StartS, X1: f.StartS + f.DurationMS/1000, Label: f.Short(), Title: "freeze " + f.Label(), Color: col})
	}
	return out
}

func selfCheckChart(r *Result) lineChart {
	c := lineChart{Title: "Self-checks: CPU and scheduling", XLabel: "seconds since start", YLabel: "% / ms", Shade: shade(r), ShadeLabel: "warm-up"}
	gen := series{Name: "generator CPU %", Color: color(0)}
	host := series{Name: "machine CPU %", Color: color(1)}
	sched := series{Name: "Go sched p99 ms", Color: color(2)}
	lag := series{Name: "dispatch lag p99 ms", Color: color(3)}
	for _, w := range r.Windows {
		gen.Points = append(gen.Points, [2]float64{w.T, 100 * w.GenCPU})
		host.Points = append(host.Points, [2]float64{w.T, 100 * w.HostCPU})
		sched.Points = append(sched.Points, [2]float64{w.T, w.SchedP99})
		lag.Points = append(lag.Points, [2]float64{w.T, w.LagP99})
	}
	c.Series = []series{gen, host, sched}
	if r.OpenLoop != nil {
		c.Series = append(c.Series, lag)
	}
	return c
}

func spectrumSeries(name string, k *KindStats, col string, dashed bool) series {
	s := series{Name: name, Color: col, Dashed: dashed}
	for _, p := range k.Spectrum {
		s.Points = append(s.Points, [2]float64{spectrumX(p.Percentile), p.Ms})
	}
	return s
}

// workerKinds and relayKinds split the spectrum plots: the relays' lags
// are seconds where the worker operations are milliseconds.
var (
	workerKinds = map[string]bool{"op": true, "load": true, "fast_commit": true, "complex_commit": true, KindCommit: true, "redelivery": true}
	relayKinds  = map[string]bool{"relay_delivery": true, "outbox_lag": true, "timer_fire": true, "timer_lag": true}
)

func spectrumChart(r *Result, title string, kinds map[string]bool) lineChart {
	c := lineChart{Title: title, XLabel: "percentile", YLabel: "ms (log)", LogX: true, LogY: true, XTicks: spectrumTicks}
	i := 0
	for _, n := range r.KindNames() {
		if kinds[n] {
			c.Series = append(c.Series, spectrumSeries(n, r.Kinds[n], color(i), false))
			i++
		}
	}
	return c
}
