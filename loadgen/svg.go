package loadgen

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// A tiny SVG plotter for the self-contained HTML reports: line charts
// (linear or log axes) and bar charts, no scripts, no external resources.

// series is one line of a chart.
type series struct {
	Name   string
	Color  string
	Points [][2]float64
	Dashed bool
	Dots   bool
	// Ring draws each point as a large hollow ring and no line (markers
	// such as a knee).
	Ring bool
}

// hline is a horizontal reference line (an SLO, say).
type hline struct {
	Y     float64
	Label string
	Color string
}

// lineChart describes a chart.
type lineChart struct {
	Title, XLabel, YLabel string
	LogX, LogY            bool
	// XTicks overrides the x tick labels (value → label).
	XTicks []tick
	Series []series
	HLines []hline
	// Shade marks [Shade[0], Shade[1]] of the x axis (warm-up).
	Shade      *[2]float64
	ShadeLabel string
	// Bands mark spans of the x axis over the plot (a range move's
	// freeze), each at least 2 px wide, labelled at the top.
	Bands []band
}

// band is a marked span [X0, X1] of a chart's x axis: Label is drawn
// over the plot, Title is the band's tooltip (Label when empty).
type band struct {
	X0, X1       float64
	Label, Title string
	Color        string
}

type tick struct {
	V     float64
	Label string
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

func color(i int) string { return palette[i%len(palette)] }

const (
	chartW, chartH         = 720, 300
	padL, padR, padT, padB = 70, 170, 30, 45
	plotW, plotH           = chartW - padL - padR, chartH - padT - padB
)

type axis struct {
	lo, hi float64
	log    bool
}

func (a axis) pos(v float64, length float64) float64 {
	if a.log {
		v = math.Log10(math.Max(v, 1e-12))
	}
	if a.hi == a.lo {
		return 0
	}
	return (v - a.lo) / (a.hi - a.lo) * length
}

func newAxis(vals []float64, log bool, zeroBased bool) axis {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if log && v <= 0 {
			continue
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0, 1
		if log {
			lo, hi = 1, 10
		}
	}
	if log {
		l, h := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if h <= l {
			h = l + 1
		}
		return axis{lo: l, hi: h, log: true}
	}
	if zeroBased && lo > 0 {
		lo = 0
	}
	if hi <= lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 5)
	return axis{lo: math.Floor(lo/step) * step, hi: math.Ceil(hi/step) * step}
}

func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if raw <= m*e {
			return m * e
		}
	}
	return 10 * e
}

func (a axis) ticks() []tick {
	var ts []tick
	if a.log {
		for e := a.lo; e <= a.hi+1e-9; e++ {
			v := math.Pow(10, e)
			ts = append(ts, tick{v, fmtNum(v)})
		}
		return ts
	}
	step := niceStep((a.hi - a.lo) / 5)
	for v := a.lo; v <= a.hi+step/1e6; v += step {
		ts = append(ts, tick{v, fmtNum(v)})
	}
	return ts
}

func fmtNum(v float64) string {
	av := math.Abs(v)
	switch {
	case av == 0:
		return "0"
	case av >= 1e6:
		return fmt.Sprintf("%gM", math.Round(v/1e5)/10)
	case av >= 1e4:
		return fmt.Sprintf("%gk", math.Round(v/100)/10)
	case av >= 1:
		return fmt.Sprintf("%g", math.Round(v*100)/100)
	}
	return fmt.Sprintf("%.3g", v)
}

// svg renders the chart.
func (c lineChart) svg() string {
	var xs, ys []float64
	for _, s := range c.Series {
		for _, p := range s.Points {
			xs = append(xs, p[0])
			ys = append(ys, p[1])
		}
	}
	for _, h := range c.HLines {
		ys = append(ys, h.Y)
	}
	ax := newAxis(xs, c.LogX, false)
	ay := newAxis(ys, c.LogY, true)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif" font-size="11">`, chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13" font-weight="bold">%s</text>`, padL, html.EscapeString(c.Title))
	X := func(v float64) float64 { return padL + ax.pos(v, plotW) }
	Y := func(v float64) float64 { return padT + plotH - ay.pos(v, plotH) }
	if c.Shade != nil {
		x0, x1 := X(c.Shade[0]), X(c.Shade[1])
		if x1 > x0 {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#eee"/><text x="%.1f" y="%d" fill="#888">%s</text>`,
				x0, padT, x1-x0, plotH, x0+3, padT+12, html.EscapeString(c.ShadeLabel))
		}
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`, padL, padT, plotW, plotH)
	for i, bd := range c.Bands {
		x0, x1 := X(bd.X0), X(bd.X1)
		if x1 < padL || x0 > padL+plotW {
			continue
		}
		x0, x1 = math.Max(x0, padL), math.Min(x1, padL+plotW)
		title := bd.Title
		if title == "" {
			title = bd.Label
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="0.35"><title>%s</title></rect>`,
			x0, padT, math.Max(x1-x0, 2), plotH, bd.Color, html.EscapeString(title))
		// Labels step down in three rows, so close freezes stay readable,
		// on a pale ground over the lines; one that would leave the plot
		// on the right ends at its band instead.
		w := 5.6 * float64(len([]rune(bd.Label)))
		lx, anchor := x0+3, "start"
		if lx+w > padL+plotW {
			lx, anchor = x0-3, "end"
		}
		rx := lx
		if anchor == "end" {
			rx = lx - w
		}
		y := padT + 12 + 12*(i%3)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="11" fill="#fff" fill-opacity="0.8"/><text x="%.1f" y="%d" font-size="10" fill="%s" text-anchor="%s">%s</text>`,
			rx-1, y-9, w+2, lx, y, bd.Color, anchor, html.EscapeString(bd.Label))
	}
	for _, t := range ay.ticks() {
		y := Y(t.V)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e5e5e5"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`,
			padL, padL+plotW, y, y, padL-5, y+4, t.Label)
	}
	xt := c.XTicks
	if xt == nil {
		xt = ax.ticks()
	}
	for _, t := range xt {
		x := X(t.V)
		if x < padL-1 || x > padL+plotW+1 {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#e5e5e5"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`,
			x, x, padT, padT+plotH, x, padT+plotH+15, html.EscapeString(t.Label))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`, padL+plotW/2, chartH-8, html.EscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(14,%d) rotate(-90)" text-anchor="middle">%s</text>`, padT+plotH/2, html.EscapeString(c.YLabel))
	for _, h := range c.HLines {
		y := Y(h.Y)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="6,3"/><text x="%d" y="%.1f" fill="%s">%s</text>`,
			padL, padL+plotW, y, y, h.Color, padL+plotW+4, y+4, h.Color, html.EscapeString(h.Label))
	}
	for i, s := range c.Series {
		var pts []string
		for _, p := range s.Points {
			if (c.LogX && p[0] <= 0) || (c.LogY && p[1] <= 0) || math.IsNaN(p[1]) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", X(p[0]), Y(p[1])))
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="5,4"`
		}
		if s.Ring {
			for _, p := range pts {
				xy := strings.Split(p, ",")
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="7" fill="none" stroke="%s" stroke-width="2"/>`, xy[0], xy[1], s.Color)
			}
			ly := padT + 14*i + 10
			fmt.Fprintf(&b, `<circle cx="%d" cy="%d" r="5" fill="none" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>`,
				padL+plotW+19, ly, s.Color, padL+plotW+32, ly+4, html.EscapeString(s.Name))
			continue
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8"%s points="%s"/>`, s.Color, dash, strings.Join(pts, " "))
		}
		if s.Dots {
			for _, p := range pts {
				xy := strings.Split(p, ",")
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`, xy[0], xy[1], s.Color)
			}
		}
		ly := padT + 14*i + 10
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/><text x="%d" y="%d">%s</text>`,
			padL+plotW+10, padL+plotW+28, ly, ly, s.Color, dash, padL+plotW+32, ly+4, html.EscapeString(s.Name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// bar is one bar of a bar chart.
type bar struct {
	Label string
	Value float64
	Note  string
}

// barChart renders horizontal-axis bars with their notes.
func barChart(title, ylabel string, bars []bar) string {
	var vals []float64
	for _, b := range bars {
		vals = append(vals, b.Value)
	}
	ay := newAxis(vals, false, true)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif" font-size="11">`, chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13" font-weight="bold">%s</text>`, padL, html.EscapeString(title))
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`, padL, padT, plotW, plotH)
	Y := func(v float64) float64 { return padT + plotH - ay.pos(v, plotH) }
	for _, t := range ay.ticks() {
		y := Y(t.V)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e5e5e5"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`,
			padL, padL+plotW, y, y, padL-5, y+4, t.Label)
	}
	fmt.Fprintf(&b, `<text transform="translate(14,%d) rotate(-90)" text-anchor="middle">%s</text>`, padT+plotH/2, html.EscapeString(ylabel))
	n := max(len(bars), 1)
	slot := float64(plotW) / float64(n)
	for i, br := range bars {
		x := padL + slot*float64(i) + slot*0.15
		y := Y(br.Value)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`, x, y, slot*0.7, padT+plotH-y, color(i))
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, x+slot*0.35, padT+plotH+15, html.EscapeString(br.Label))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333">%s</text>`, x+slot*0.35, y-4, html.EscapeString(br.Note))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// spectrumTicks label a percentile axis plotted as 1/(1-p).
var spectrumTicks = []tick{{2, "50%"}, {10, "90%"}, {100, "99%"}, {1000, "99.9%"}, {10000, "99.99%"}, {100000, "99.999%"}}

// spectrumX maps a percentile to the x of a spectrum plot.
func spectrumX(p float64) float64 {
	if p >= 99.999 {
		return 1e5 // the maximum is drawn at the last tick
	}
	return 1 / (1 - p/100)
}
