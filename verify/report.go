package verify

import (
	"bytes"
	"fmt"
	"html"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Report file names inside the report directory.
const (
	VerdictFile = "verdict.json"
	ReportFile  = "report.html"
)

// WriteReport writes the verdict's files into dir (created if missing):
// verdict.json, report.html (self-contained: inline CSS and SVG, no
// scripts, no network) and, for every execution porcupine found not
// linearizable, its visualization linearizability-<execution>.html
// (porcupine's own page), which the report links to. It records the
// visualizations' names in v.Visualizations before writing verdict.json.
func WriteReport(dir string, v *Verdict) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	v.Visualizations = v.Visualizations[:0]
	model := registerModel.ToModel()
	for _, f := range v.lin {
		name := "linearizability-" + safeName(f.exe) + ".html"
		if err := porcupine.VisualizePath(model, f.info, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("write report: visualization of %s: %w", f.exe, err)
		}
		v.Visualizations = append(v.Visualizations, name)
	}
	var js bytes.Buffer
	if err := v.WriteJSON(&js); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, VerdictFile), js.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	var hb bytes.Buffer
	if err := v.WriteHTML(&hb); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ReportFile), hb.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

func safeName(s string) string {
	s = unsafeChars.ReplaceAllString(s, "_")
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

// reportMaxViolations caps the violations listed per invariant in the HTML
// report (the JSON has them all).
const reportMaxViolations = 100

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"secs":  fmtNS,
	"lower": func(r Result) string { return strings.ToLower(string(r)) },
	"corr": func(n int) string {
		if n < 0 {
			return "–"
		}
		return fmt.Sprint(n)
	},
	"opText":  func(o OpRef) string { return o.text() },
	"pct":     func(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) },
	"ms":      fmtMS,
	"rowText": func(r RowRef) string { return r.text() },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>pgshard verify: {{.V.Result}} — run {{.V.Run}}</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#222;max-width:1250px}
h1{font-size:22px;margin:0 0 6px} h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #ddd;padding-bottom:3px}
.badge{display:inline-block;padding:2px 12px;border-radius:4px;color:#fff;font-weight:700;margin-right:8px}
.pass{background:#2e7d32}.fail{background:#c62828}.vacuous{background:#ef6c00}.error{background:#6a1b9a}
table{border-collapse:collapse;margin:6px 0} th,td{border:1px solid #ccc;padding:3px 10px;text-align:right} th{background:#f3f3f3}
td.l,th.l{text-align:left} tr.bad td{background:#fdecea} tr.warn td{background:#fff3e0}
.meta{color:#555} ul.reasons{margin:6px 0 0 0}
.v{margin:8px 0;padding:6px 10px;border-left:4px solid #c62828;background:#fafafa}
.v.live{border-color:#ef6c00} .v b{font-weight:600} .v code{display:block;font:12px ui-monospace,monospace;color:#333;white-space:pre-wrap;margin-left:14px}
.more{color:#777;font-style:italic} svg{background:#fff;border:1px solid #ddd}
</style></head><body>
<h1><span class="badge {{lower .V.Result}}">{{.V.Result}}</span>pgshard verify — run {{.V.Run}}</h1>
<div class="meta">seed {{.V.Seed}}{{if .V.Scenario}} · scenario {{.V.Scenario}}{{end}}{{if .V.Target}} · target {{.V.Target}}{{end}} ·
{{.V.Ops}} ops · {{.V.Commits}} commits ({{.V.Acked}} acknowledged{{if .V.MinCommits}}, at least {{.V.MinCommits}} asked{{end}}) · {{.V.Executions}} executions ·
unknown outcomes {{.V.Unknown.Total}} ({{.V.Unknown.Present}} present, {{.V.Unknown.Absent}} absent, {{.V.Unknown.Unresolved}} unresolved) ·
checked in {{.V.CheckMS}} ms</div>
{{if .V.Reasons}}<ul class="reasons">{{range .V.Reasons}}<li>{{.}}</li>{{end}}</ul>{{end}}

<h2>Invariants</h2>
<table><tr><th class="l">invariant</th><th>checked</th><th>violations</th><th class="l">what it checks</th></tr>
{{range .V.Invariants}}<tr{{if gt .Violations 0}} class="bad"{{end}}><td class="l">{{.Name}}</td><td>{{.Checked}}</td><td>{{.Violations}}</td><td class="l">{{.Checks}}</td></tr>
{{end}}</table>

<h2>Faults (landed ≥ {{.V.MinLanded}}{{if gt .V.MinLandedShare 0.0}} and ≥ {{pct .V.MinLandedShare}} of the injections{{end}} per scheduled kind)</h2>
{{if .V.Faults}}<table><tr><th class="l">kind</th><th>scheduled</th><th>injected</th><th>evidence</th><th>corroborated</th><th>landed</th><th>writer said</th><th class="l">vacuous</th></tr>
{{range .V.Faults}}<tr{{if .Vacuous}} class="warn"{{end}}><td class="l">{{.Kind}}</td><td>{{.Scheduled}}</td><td>{{.Injected}}</td><td>{{.Evidence}}</td><td>{{corr .Corroborated}}</td><td>{{.Landed}}</td><td>{{.WriterLanded}}</td><td class="l">{{.Why}}</td></tr>
{{end}}</table>{{else}}<p>No faults were scheduled or injected.</p>{{end}}

{{with .V.Recovery}}<h2>Availability under faults</h2>
<p>Time from each fault's heal until the ok-op rate (of the fault's shard; of the whole workload for a fault without one) is back at ≥ {{pct .Share}} of the fault-free rate and stays there for 2 s, in 100 ms steps over 1 s windows.
{{if .Note}}Not measured: {{.Note}}.{{else}}Fault-free rate: <b>{{printf "%.0f" .BaselineOKPerS}} ok ops/s</b>{{range $s, $r := .BaselineShards}} · {{$s}} {{printf "%.0f" $r}}{{end}} — {{.BaselineFrom}}.
A fault overlapped by another on the same shard (active at its heal, or injected before it recovered), or healed less than 2 s before the load ended (too late), is shown but left out of p50 and max.{{end}}</p>
{{if .Kinds}}<table><tr><th class="l">kind</th><th>faults</th><th>measured</th><th>p50</th><th>max</th><th>not recovered within the run</th><th>overlapped</th><th>too late</th></tr>
{{range .Kinds}}<tr{{if gt .NotRecovered 0}} class="warn"{{end}}><td class="l">{{.Kind}}</td><td>{{.Faults}}</td><td>{{.Measured}}</td><td>{{if .Measured}}{{ms .P50MS}}{{else}}–{{end}}</td><td>{{if gt .NotRecovered 0}}not recovered{{else if .Measured}}{{ms .MaxMS}}{{else}}–{{end}}</td><td>{{.NotRecovered}}</td><td>{{.Overlapped}}</td><td>{{.Unmeasurable}}</td></tr>
{{end}}</table>
<details><summary>per fault ({{len .Faults}})</summary><table><tr><th class="l">fault</th><th class="l">kind</th><th class="l">shard</th><th>healed at</th><th>recovery</th><th>baseline ok/s</th><th class="l">overlapped by</th></tr>
{{range .Faults}}<tr{{if not .Recovered}} class="warn"{{end}}><td class="l">{{.ID}}</td><td class="l">{{.Kind}}</td><td class="l">{{.Shard}}</td><td>{{secs .HealNS}}</td><td>{{if .Unmeasurable}}too late to measure{{else if .Recovered}}{{ms .RecoveryMS}}{{else}}not recovered within the run{{end}}</td><td>{{printf "%.0f" .Baseline}}</td><td class="l">{{.Overlapped}}</td></tr>
{{end}}</table></details>{{end}}{{end}}

<h2>Timeline</h2>
{{.Timeline}}

{{if .V.Visualizations}}<h2>Linearizability visualizations</h2><ul>{{range .V.Visualizations}}<li><a href="{{.}}">{{.}}</a></li>{{end}}</ul>{{end}}

<h2>Violations ({{len .V.Violations}})</h2>
{{if not .V.Violations}}<p>None.</p>{{end}}
{{range .Groups}}<h3>{{.Name}} ({{.Total}})</h3>
{{range .Items}}<div class="v"><b>{{.Summary}}</b>{{range .Ops}}<code>op  {{opText .}}</code>{{end}}{{range .Rows}}<code>row {{rowText .}}</code>{{end}}</div>
{{end}}{{if gt .More 0}}<p class="more">and {{.More}} more (all are in verdict.json)</p>{{end}}
{{end}}

<h2>Liveness ({{len .V.Liveness}})</h2>
{{if not .V.Liveness}}<p>Nothing was left pending.</p>{{end}}
{{range .Live}}<div class="v live"><b>{{.Summary}}</b>{{range .Ops}}<code>op  {{opText .}}</code>{{end}}{{range .Rows}}<code>row {{rowText .}}</code>{{end}}</div>
{{end}}{{if gt .LiveMore 0}}<p class="more">and {{.LiveMore}} more</p>{{end}}

{{with .V.UndecidedExecutions}}{{if .Count}}<h2>Undecided executions ({{.Count}}, bound {{.Bound}})</h2>
<p>Checks that could not run because unresolved unknown outcomes left the execution ambiguous; they are not counted as passed.
{{range $k, $n := .ByCheck}}<code>{{$k}}</code> {{$n}} · {{end}}</p>
{{range .List}}<div class="v live"><code>{{.Execution}}</code>: {{range $i, $w := .Why}}{{if $i}}; {{end}}{{$w}}{{end}}</div>{{end}}{{end}}{{end}}
{{if .V.Undecided}}<h2>Undecided linearizability ({{len .V.Undecided}})</h2><p>{{range $i, $e := .V.Undecided}}{{if $i}}, {{end}}{{$e}}{{end}}</p>{{end}}
{{if .V.Unknown.UnresolvedOps}}<h2>Unresolved unknown outcomes ({{.V.Unknown.Unresolved}})</h2>
{{range .V.Unknown.UnresolvedOps}}<div class="v live"><code>{{opText .}}</code></div>{{end}}{{end}}
</body></html>
`))

type violationGroup struct {
	Name        string
	Total, More int
	Items       []Violation
}

// WriteHTML writes the self-contained HTML report.
func (v *Verdict) WriteHTML(w interface{ Write([]byte) (int, error) }) error {
	var groups []violationGroup
	idx := map[string]int{}
	for _, x := range v.Violations {
		i, ok := idx[x.Invariant]
		if !ok {
			i = len(groups)
			idx[x.Invariant] = i
			groups = append(groups, violationGroup{Name: x.Invariant})
		}
		g := &groups[i]
		g.Total++
		if len(g.Items) < reportMaxViolations {
			g.Items = append(g.Items, x)
		} else {
			g.More++
		}
	}
	live := v.Liveness
	more := 0
	if len(live) > reportMaxViolations {
		more = len(live) - reportMaxViolations
		live = live[:reportMaxViolations]
	}
	return reportTmpl.Execute(w, map[string]any{
		"V": v, "Groups": groups, "Live": live, "LiveMore": more,
		"Timeline": template.HTML(timelineSVG(v.Timeline)), //nolint:gosec // built with escaped text only
	})
}

var kindColors = map[string]string{
	FaultTerminate: "#d62728", FaultLostAck: "#9467bd", FaultPgBouncerKill: "#8c564b", FaultPgBouncerPause: "#e377c2",
	FaultPgBouncerReconnect: "#bcbd22", FaultShardCrash: "#000000", FaultBackendKill: "#7f7f7f", FaultLatency: "#17becf",
	FaultStall: "#1f77b4", FaultReset: "#ff7f0e", FaultPartition: "#2ca02c", FaultProxyRestart: "#393b79",
	FaultMove: "#6a1b9a", FaultMoverKill: "#ad1457",
}

func kindColor(k string) string {
	if c, ok := kindColors[k]; ok {
		return c
	}
	return "#999999"
}

// timelineSVG draws the fault windows as bands in one lane per kind and
// shard, above two charts sharing the time axis: ok ops/s, and errors,
// unknown outcomes and conflicts per second. The windows are also shaded
// across both charts.
func timelineSVG(tl *Timeline) string {
	if tl == nil || len(tl.OK) == 0 {
		return "<p>No ops.</p>"
	}
	type lane struct{ kind, shard string }
	var lanes []lane
	seen := map[lane]bool{}
	for _, f := range tl.Faults {
		l := lane{f.Kind, f.Shard}
		if !seen[l] {
			seen[l] = true
			lanes = append(lanes, l)
		}
	}
	sort.Slice(lanes, func(i, j int) bool {
		if lanes[i].kind != lanes[j].kind {
			return lanes[i].kind < lanes[j].kind
		}
		return lanes[i].shard < lanes[j].shard
	})
	const (
		W, padL, padR = 1200, 190, 20
		laneH         = 16
		chartH        = 200
		gap           = 34
	)
	plotW := float64(W - padL - padR)
	lanesH := len(lanes) * laneH
	top1 := 20 + lanesH + 28
	top2 := top1 + chartH + gap
	H := top2 + chartH + 40
	// The axis covers whole buckets.
	endS := float64(int64(len(tl.OK))*tl.BucketNS) / 1e9
	x := func(ns int64) float64 { return padL + float64(ns)/1e9/endS*plotW }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`, W, H, W, H)
	// Lanes.
	laneIdx := map[lane]int{}
	for i, l := range lanes {
		laneIdx[l] = i
		y := 20 + i*laneH
		name := l.kind
		if l.shard != "" {
			name += " · " + l.shard
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`, padL-6, y+12, html.EscapeString(name))
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#eee"/>`, padL, W-padR, y+laneH, y+laneH)
	}
	for _, f := range tl.Faults {
		i := laneIdx[lane{f.Kind, f.Shard}]
		x0, x1 := x(f.FromNS), x(f.ToNS)
		w := math.Max(x1-x0, 2)
		op := "0.85"
		if !f.Landed {
			op = "0.25"
		}
		title := fmt.Sprintf("%s %s %s %s–%s landed=%v", f.ID, f.Kind, f.Shard, fmtNS(f.FromNS), fmtNS(f.ToNS), f.Landed)
		if f.Move != nil {
			title += " " + f.Move.describe()
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="%s"><title>%s</title></rect>`,
			x0, 20+i*laneH+2, w, laneH-4, kindColor(f.Kind), op, html.EscapeString(title))
		// The same window, faintly, across both charts.
		for _, top := range []int{top1, top2} {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="0.07"/>`, x0, top, w, chartH, kindColor(f.Kind))
		}
		if f.Move != nil {
			moveMarks(&b, f, x, x0, x1, []int{top1, top2}, chartH)
		}
	}
	if len(lanes) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="14" fill="#777">no faults</text>`, padL)
	} else {
		note := "fault windows, inject to heal: solid = landed, faint = did not land"
		for _, f := range tl.Faults {
			if f.Move != nil {
				note += "; moves: dashed edges on the charts, each freeze a solid band (when the history has its time)"
				break
			}
		}
		fmt.Fprintf(&b, `<text x="%d" y="12" fill="#555">%s</text>`, padL, html.EscapeString(note))
	}
	bw := float64(tl.BucketNS) / 1e9
	chart := func(top int, title string, ss []struct {
		name, color string
		v           []int
	}) {
		maxV := 1
		for _, s := range ss {
			for _, n := range s.v {
				maxV = max(maxV, n)
			}
		}
		yMax := niceCeil(float64(maxV) / bw)
		y := func(v float64) float64 { return float64(top+chartH) - v/yMax*float64(chartH) }
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%d" fill="none" stroke="#bbb"/>`, padL, top, plotW, chartH)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`, padL, top-6, html.EscapeString(title))
		for k := 0; k <= 4; k++ {
			v := yMax * float64(k) / 4
			fmt.Fprintf(&b, `<line x1="%d" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`,
				padL, float64(padL)+plotW, y(v), y(v), padL-6, y(v)+4, fmtCount(v))
		}
		lx := padL + 420 // the legend sits on the title's line, above the plot
		for _, s := range ss {
			var pts []string
			for i, n := range s.v {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(int64((float64(i)+0.5)*float64(tl.BucketNS))), y(float64(n)/bw)))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>`, s.color, strings.Join(pts, " "))
			if len(s.v) <= 30 { // few buckets: mark each one
				for _, p := range pts {
					px, py, _ := strings.Cut(p, ",")
					fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="2.5" fill="%s"/>`, px, py, s.color)
				}
			}
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`, lx, top-15, s.color, lx+14, top-6, html.EscapeString(s.name))
			lx += 24 + 7*len(s.name)
		}
	}
	type ser = struct {
		name, color string
		v           []int
	}
	chart(top1, "throughput: ok ops/s", []ser{{"ok ops/s", "#2e7d32", tl.OK}})
	chart(top2, "errors, unknown outcomes and conflicts per second", []ser{
		{"errors/s", "#c62828", tl.Errors}, {"unknown/s", "#ef6c00", tl.Unknown}, {"conflicts/s", "#78909c", tl.Conflicts}})
	// Time axis.
	step := niceCeil(endS / 10)
	for t := 0.0; t <= endS+1e-9; t += step {
		px := padL + t/endS*plotW
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#999"/><text x="%.1f" y="%d" text-anchor="middle">%gs</text>`,
			px, px, top2+chartH, top2+chartH+4, px, top2+chartH+16, math.Round(t*100)/100)
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle" fill="#555">time since the run's start (1 s buckets by completion)</text>`, float64(padL)+plotW/2, top2+chartH+32)
	b.WriteString(`</svg>`)
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func fmtCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// describe is a move's range, shards and freezes, for titles and labels.
func (m *MoveMark) describe() string {
	s := fmt.Sprintf("buckets %d-%d %s→%s", m.Lo, m.Hi, m.From, m.To)
	if m.Epoch > 0 {
		s += fmt.Sprintf(" (epoch %d)", m.Epoch)
	}
	if len(m.FreezeMS) > 0 {
		ms := make([]string, len(m.FreezeMS))
		for i, d := range m.FreezeMS {
			ms[i] = strconv.FormatFloat(d, 'f', -1, 64)
		}
		s += fmt.Sprintf(", %d freeze(s): %s ms", len(m.FreezeMS), strings.Join(ms, ", "))
	}
	return s
}

// moveMarks marks a move's window on the charts whose tops are tops:
// dashed edges, a label with its range, shards and freezes when the band
// is wide enough to hold it, and each freeze whose start time is known as
// a solid band (at least 2 px wide) with its duration in its title.
func moveMarks(b *strings.Builder, f FaultWindow, x func(int64) float64, x0, x1 float64, tops []int, chartH int) {
	c := kindColor(f.Kind)
	for _, top := range tops {
		for _, px := range []float64{x0, x1} {
			fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-opacity="0.6" stroke-dasharray="4 3"/>`, px, px, top, top+chartH, c)
		}
		for i, t := range f.Move.FreezeNS {
			ms := f.Move.FreezeMS[i]
			fx0, fx1 := x(t), x(t+int64(ms*1e6))
			title := fmt.Sprintf("freeze %d of %s: %s ms from %s", i+1, f.ID, strconv.FormatFloat(ms, 'f', -1, 64), fmtNS(t))
			fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="0.55"><title>%s</title></rect>`,
				fx0, top, math.Max(fx1-fx0, 2), chartH, c, html.EscapeString(title))
		}
	}
	label := fmt.Sprintf("%s %d-%d %s→%s", f.Kind, f.Move.Lo, f.Move.Hi, f.Move.From, f.Move.To)
	if n := len(f.Move.FreezeMS); n > 0 && len(f.Move.FreezeNS) == 0 {
		label += fmt.Sprintf(" · freeze %s ms", strconv.FormatFloat(f.Move.FreezeMS[n-1], 'f', 0, 64))
	}
	if x1-x0 >= float64(6*len(label)) {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="10" fill="%s">%s</text>`, x0+3, tops[0]+12, c, html.EscapeString(label))
	}
}
