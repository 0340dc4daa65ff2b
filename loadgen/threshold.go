package loadgen

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// Threshold is one CI condition such as `p99(commit)>50ms`: the run
// breaches it when the condition holds.
//
// Grammar (spaces allowed between tokens):
//
//	threshold := metric op value
//	metric    := pNN[.N](kind) | mean(kind) | max(kind) | min(kind) | count(kind)
//	           | errors(class) | throughput | commit_rate | ops | errors
//	           | error_rate | conflicts | conflict_rate | retries | gave_up
//	           | dedupe_miss | dropped | late | hottest_share | warnings
//	op        := > | >= | < | <= | == | !=
//	value     := number [ns|us|µs|ms|s|m] for latencies (default ms),
//	             number[%] for rates and shares, number[k|M] for counts and rates
//
// Latency metrics default to kind "op" when the parentheses are omitted
// (`p99>20ms`). Kinds are those of the result (op, load, commit,
// fast_commit, complex_commit, redelivery, relay_delivery, outbox_lag,
// timer_fire, timer_lag).
type Threshold struct {
	// Text is the threshold as written.
	Text string
	// Metric is the metric's name (p99, mean, throughput, ...).
	Metric string
	// Arg is the kind (or error class) in parentheses, "" if none.
	Arg string
	// Op is the comparison.
	Op string
	// Value is the right-hand side in the metric's unit (ms for latency,
	// a fraction for rates and shares, a count otherwise).
	Value float64
}

// metricKind says what unit a metric has.
type metricKind int

const (
	mLatency metricKind = iota
	mCount
	mRate // ops/s
	mFraction
)

var scalarMetrics = map[string]metricKind{
	"throughput": mRate, "commit_rate": mRate, "ops": mCount, "errors": mCount, "error_rate": mFraction,
	"conflicts": mCount, "conflict_rate": mFraction, "retries": mCount, "gave_up": mCount,
	"dedupe_miss": mCount, "dropped": mCount, "late": mCount, "hottest_share": mFraction, "warnings": mCount,
}

var latencyFuncs = map[string]bool{"mean": true, "max": true, "min": true}

const maxThresholdLen = 200

// ParseThreshold parses one threshold.
func ParseThreshold(s string) (Threshold, error) {
	t := Threshold{Text: s}
	if len(s) > maxThresholdLen {
		return t, fmt.Errorf("threshold too long (%d bytes, max %d)", len(s), maxThresholdLen)
	}
	in := strings.TrimSpace(s)
	i := strings.IndexAny(in, "<>=!")
	if i <= 0 {
		return t, fmt.Errorf("threshold %q: want METRIC OP VALUE, e.g. 'p99(commit)>50ms'", s)
	}
	lhs := strings.TrimSpace(in[:i])
	rest := in[i:]
	for _, op := range []string{">=", "<=", "==", "!=", ">", "<"} {
		if strings.HasPrefix(rest, op) {
			t.Op = op
			rest = rest[len(op):]
			break
		}
	}
	if t.Op == "" {
		return t, fmt.Errorf("threshold %q: unknown comparison %q (want >, >=, <, <=, == or !=)", s, firstRune(rest))
	}
	name, arg, err := splitCall(lhs)
	if err != nil {
		return t, fmt.Errorf("threshold %q: %w", s, err)
	}
	t.Metric, t.Arg = strings.ToLower(name), arg
	unit, err := t.metricUnit()
	if err != nil {
		return t, fmt.Errorf("threshold %q: %w", s, err)
	}
	if t.Value, err = parseValue(strings.TrimSpace(rest), unit); err != nil {
		return t, fmt.Errorf("threshold %q: %w", s, err)
	}
	return t, nil
}

func firstRune(s string) string {
	for _, r := range s {
		return string(r)
	}
	return ""
}

// splitCall splits "p99(commit)" into "p99", "commit".
func splitCall(s string) (name, arg string, err error) {
	open := strings.IndexByte(s, '(')
	if open < 0 {
		if strings.ContainsAny(s, ")") {
			return "", "", fmt.Errorf("unbalanced parentheses in %q", s)
		}
		return s, "", validIdent(s)
	}
	if !strings.HasSuffix(s, ")") || strings.Count(s, "(") != 1 || strings.Count(s, ")") != 1 {
		return "", "", fmt.Errorf("want NAME(ARG) in %q", s)
	}
	name = strings.TrimSpace(s[:open])
	arg = strings.TrimSpace(s[open+1 : len(s)-1])
	if arg == "" {
		return "", "", fmt.Errorf("empty argument in %q", s)
	}
	if err := validIdent(name); err != nil {
		return "", "", err
	}
	return name, arg, validIdent(arg)
}

func validIdent(s string) error {
	if s == "" {
		return fmt.Errorf("missing metric")
	}
	for _, r := range s {
		if !(r == '_' || r == '.' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return fmt.Errorf("unexpected %q in %q", r, s)
		}
	}
	return nil
}

// percentileOf parses "p99" / "p99.9" / "p50" into a percent.
func percentileOf(name string) (float64, bool) {
	if len(name) < 2 || name[0] != 'p' {
		return 0, false
	}
	v, err := strconv.ParseFloat(name[1:], 64)
	if err != nil || v < 0 || v > 100 || math.IsNaN(v) {
		return 0, false
	}
	return v, true
}

func (t *Threshold) metricUnit() (metricKind, error) {
	if _, ok := percentileOf(t.Metric); ok || latencyFuncs[t.Metric] {
		if t.Arg == "" {
			t.Arg = "op"
		}
		return mLatency, nil
	}
	if t.Metric == "count" {
		if t.Arg == "" {
			return 0, fmt.Errorf("count needs a kind: count(commit)")
		}
		return mCount, nil
	}
	k, ok := scalarMetrics[t.Metric]
	if !ok {
		return 0, fmt.Errorf("unknown metric %q", t.Metric)
	}
	if t.Arg != "" && t.Metric != "errors" {
		return 0, fmt.Errorf("%s takes no argument", t.Metric)
	}
	return k, nil
}

// parseValue parses a number with an optional unit suffix.
func parseValue(s string, k metricKind) (float64, error) {
	if s == "" {
		return 0, fmt.Errorf("missing value")
	}
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' || (end == 0 && (s[end] == '-' || s[end] == '+'))) {
		end++
	}
	num, unit := s[:end], strings.TrimSpace(s[end:])
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("bad number %q", s)
	}
	switch k {
	case mLatency:
		mult, ok := map[string]float64{"": 1, "ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1, "s": 1e3, "m": 60e3}[unit]
		if !ok {
			return 0, fmt.Errorf("unknown latency unit %q (want ns, us, ms, s or m)", unit)
		}
		return v * mult, nil
	case mFraction:
		switch unit {
		case "%":
			return v / 100, nil
		case "":
			return v, nil
		}
		return 0, fmt.Errorf("unknown unit %q for a rate (want %% or none)", unit)
	default:
		mult, ok := map[string]float64{"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "/s": 1, "k/s": 1e3, "ops/s": 1}[unit]
		if !ok {
			return 0, fmt.Errorf("unknown unit %q (want k or M)", unit)
		}
		return v * mult, nil
	}
}

// ParseThresholds parses every threshold.
func ParseThresholds(ss []string) ([]Threshold, error) {
	var ts []Threshold
	for _, s := range ss {
		t, err := ParseThreshold(s)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// Measure returns the threshold's metric in res.
func (t Threshold) Measure(res *Result) (float64, error) {
	if p, ok := percentileOf(t.Metric); ok {
		k := res.Kinds[t.Arg]
		if k == nil || k.Count == 0 {
			return 0, fmt.Errorf("no measurements of kind %q", t.Arg)
		}
		return k.Percentile(p), nil
	}
	if latencyFuncs[t.Metric] {
		k := res.Kinds[t.Arg]
		if k == nil || k.Count == 0 {
			return 0, fmt.Errorf("no measurements of kind %q", t.Arg)
		}
		return map[string]float64{"mean": k.Mean, "max": k.Max, "min": k.Min}[t.Metric], nil
	}
	o := res.Outcomes
	ops := float64(max(res.Ops, 1))
	switch t.Metric {
	case "count":
		if k := res.Kinds[t.Arg]; k != nil {
			return float64(k.Count), nil
		}
		return 0, nil
	case "throughput":
		return res.Throughput, nil
	case "commit_rate":
		return res.CommitRate, nil
	case "ops":
		return float64(res.Ops), nil
	case "errors":
		if t.Arg != "" {
			return float64(res.Errors[t.Arg] + res.Errors["sqlstate_"+t.Arg]), nil
		}
		return float64(res.ErrorCount()), nil
	case "error_rate":
		return float64(o[OutcomeError]+o[OutcomeDedupeMiss]) / ops, nil
	case "conflicts":
		return float64(o[OutcomeConflict]), nil
	case "conflict_rate":
		return float64(o[OutcomeConflict]) / ops, nil
	case "retries":
		return float64(o[OutcomeRetry]), nil
	case "gave_up":
		return float64(o[OutcomeGaveUp]), nil
	case "dedupe_miss":
		return float64(o[OutcomeDedupeMiss]), nil
	case "dropped":
		if res.OpenLoop != nil {
			return float64(res.OpenLoop.Dropped), nil
		}
		return 0, nil
	case "late":
		if res.OpenLoop != nil {
			return float64(res.OpenLoop.Late), nil
		}
		return 0, nil
	case "hottest_share":
		return res.HottestShare, nil
	case "warnings":
		return float64(len(res.SelfCheck.Warnings)), nil
	}
	return 0, fmt.Errorf("unknown metric %q", t.Metric)
}

func compare(v float64, op string, w float64) bool {
	switch op {
	case ">":
		return v > w
	case ">=":
		return v >= w
	case "<":
		return v < w
	case "<=":
		return v <= w
	case "==":
		return v == w
	case "!=":
		return v != w
	}
	return false
}

// Breach is one evaluated threshold.
type Breach struct {
	Threshold Threshold
	// Value is the measured value ("" metric unit as in Threshold.Value).
	Value float64
	// Breached is true when the condition held (or could not be measured).
	Breached bool
	// Err says why the metric could not be measured.
	Err error
}

// String is one line for the terminal: state, threshold, measured value.
func (b Breach) String() string {
	state := "ok"
	if b.Breached {
		state = "BREACHED"
	}
	if b.Err != nil {
		return fmt.Sprintf("%-8s %s: %v", state, b.Threshold.Text, b.Err)
	}
	return fmt.Sprintf("%-8s %s (measured %s)", state, b.Threshold.Text, fmtNum(b.Value))
}

// Check evaluates every threshold against res; a metric that cannot be
// measured counts as breached (a CI gate must not pass on missing data).
func Check(res *Result, ts []Threshold) []Breach {
	var out []Breach
	for _, t := range ts {
		v, err := t.Measure(res)
		out = append(out, Breach{Threshold: t, Value: v, Breached: err != nil || compare(v, t.Op, t.Value), Err: err})
	}
	return out
}

// SLOTarget is one latency objective: percentile P of Kind at most MaxMs.
type SLOTarget struct {
	Kind       string  `json:"kind"`
	Percentile float64 `json:"percentile"`
	MaxMs      float64 `json:"max_ms"`
}

// SLO is a set of latency objectives that must all hold.
type SLO []SLOTarget

// String writes the SLO in a form ParseSLO reads back.
func (s SLO) String() string {
	var parts []string
	for _, t := range s {
		parts = append(parts, fmt.Sprintf("p%s(%s)<=%sms", strconv.FormatFloat(t.Percentile, 'f', -1, 64), t.Kind, strconv.FormatFloat(t.MaxMs, 'f', -1, 64)))
	}
	return strings.Join(parts, ",")
}

// ParseSLO parses "p99=50ms", "p99(commit)=20ms,p50=5ms" ("<=" works as
// "="). The kind defaults to "op".
func ParseSLO(s string) (SLO, error) {
	if len(s) > maxThresholdLen {
		return nil, fmt.Errorf("slo too long (%d bytes, max %d)", len(s), maxThresholdLen)
	}
	var slo SLO
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lhs, rhs, ok := strings.Cut(part, "<=")
		if !ok {
			lhs, rhs, ok = strings.Cut(part, "=")
		}
		if !ok {
			return nil, fmt.Errorf("slo %q: want pNN=DURATION, e.g. p99=50ms", part)
		}
		name, arg, err := splitCall(strings.TrimSpace(lhs))
		if err != nil {
			return nil, fmt.Errorf("slo %q: %w", part, err)
		}
		p, ok := percentileOf(strings.ToLower(name))
		if !ok {
			return nil, fmt.Errorf("slo %q: %q is not a percentile (p50, p99, p99.9, ...)", part, name)
		}
		if arg == "" {
			arg = "op"
		}
		v, err := parseValue(strings.TrimSpace(rhs), mLatency)
		if err != nil {
			return nil, fmt.Errorf("slo %q: %w", part, err)
		}
		if !(v > 0) {
			return nil, fmt.Errorf("slo %q: the bound must be positive", part)
		}
		slo = append(slo, SLOTarget{Kind: arg, Percentile: p, MaxMs: v})
	}
	return slo, nil
}

// Met reports whether res meets every objective, and the worst ratio of
// measured to allowed latency.
func (s SLO) Met(res *Result) (bool, float64) {
	ok, worst := true, 0.0
	for _, t := range s {
		k := res.Kinds[t.Kind]
		if k == nil || k.Count == 0 {
			return false, math.Inf(1)
		}
		r := k.Percentile(t.Percentile) / t.MaxMs
		worst = math.Max(worst, r)
		if r > 1 {
			ok = false
		}
	}
	return ok, worst
}
