package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// result is one suite's run against one target.
type result struct {
	Suite      string            `json:"suite"`
	Target     string            `json:"target"`
	Passed     int               `json:"passed"`
	Failed     int               `json:"failed"`
	Skipped    int               `json:"skipped"`
	NotReached int               `json:"not_reached"`
	Seconds    float64           `json:"seconds"`
	Note       string            `json:"note,omitempty"`
	Error      string            `json:"error,omitempty"`
	Outcomes   map[string]string `json:"outcomes"`
	Reasons    map[string]string `json:"reasons,omitempty"`

	duration time.Duration
	note     string
	err      string
}

func newResult(suite, target string) *result {
	return &result{Suite: suite, Target: target, Outcomes: map[string]string{}, Reasons: map[string]string{}}
}

func (r *result) add(test, outcome, reason string) {
	r.Outcomes[test] = outcome
	if reason != "" {
		r.Reasons[test] = reason
	}
	switch outcome {
	case "pass":
		r.Passed++
	case "fail":
		r.Failed++
	case "skip":
		r.Skipped++
	default:
		r.NotReached++
	}
}

func (r *result) total() int { return r.Passed + r.Failed + r.Skipped + r.NotReached }

func (r *result) summary() string {
	s := fmt.Sprintf("%d passed, %d failed, %d skipped, %d not reached (%.0fs)", r.Passed, r.Failed, r.Skipped, r.NotReached, r.duration.Seconds())
	if r.err != "" {
		s += ": " + r.err
	}
	return s
}

// difference is one test whose outcome differs from direct Postgres's.
type difference struct {
	Suite  string `json:"suite"`
	Target string `json:"target"`
	Test   string `json:"test"`
	Direct string `json:"direct"`
	Got    string `json:"got"`
	Reason string `json:"reason"`
}

type scoreboard struct {
	Results     []*result    `json:"results"`
	Differences []difference `json:"differences"`
	// Classes counts the differences of each target by reason.
	Classes map[string]map[string]int `json:"classes"`
}

func newScoreboard(rs []*result) *scoreboard {
	sb := &scoreboard{Results: rs, Classes: map[string]map[string]int{}}
	for _, r := range rs {
		r.Seconds = r.duration.Seconds()
		r.Note, r.Error = r.note, r.err
	}
	for _, r := range rs {
		if r.Target == "direct" {
			continue
		}
		var base *result
		for _, b := range rs {
			if b.Suite == r.Suite && b.Target == "direct" {
				base = b
			}
		}
		if base == nil {
			continue
		}
		var tests []string
		for t := range r.Outcomes {
			tests = append(tests, t)
		}
		sort.Strings(tests)
		key := r.Suite + " " + r.Target
		for _, t := range tests {
			got, want := r.Outcomes[t], base.Outcomes[t]
			if got == want {
				continue
			}
			reason := r.Reasons[t]
			sb.Differences = append(sb.Differences, difference{Suite: r.Suite, Target: r.Target, Test: t, Direct: want, Got: got, Reason: reason})
			if sb.Classes[key] == nil {
				sb.Classes[key] = map[string]int{}
			}
			sb.Classes[key][classOf(reason)]++
		}
	}
	return sb
}

var (
	digitsRe = regexp.MustCompile(`\b\d+\b`)
	quotedRe = regexp.MustCompile(`"[^"]*"`)
)

// classOf reduces a reason to its class (numbers and quoted names
// dropped), for counting.
func classOf(reason string) string {
	c := quotedRe.ReplaceAllString(reason, `"…"`)
	// Numbers become N, SQLSTATE codes stay.
	var b strings.Builder
	for {
		loc := sqlstateRe.FindStringIndex(c)
		if loc == nil {
			b.WriteString(digitsRe.ReplaceAllString(c, "N"))
			break
		}
		b.WriteString(digitsRe.ReplaceAllString(c[:loc[0]], "N"))
		b.WriteString(c[loc[0]:loc[1]])
		c = c[loc[1]:]
	}
	c = b.String()
	if len(c) > 160 {
		c = c[:160] + "…"
	}
	if c == "" {
		c = "(no reason found in the output)"
	}
	return c
}

func (sb *scoreboard) text() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SUITE\tTARGET\tPASSED\tFAILED\tSKIPPED\tNOT REACHED\tTIME\tNOTE")
	for _, r := range sb.Results {
		note := r.Note
		if r.Error != "" {
			note = strings.TrimSpace(note + " error: " + firstLine(r.Error))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%.0fs\t%s\n", r.Suite, r.Target, r.Passed, r.Failed, r.Skipped, r.NotReached, r.Seconds, note)
	}
	tw.Flush()
	var keys []string
	for k := range sb.Classes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "\n%s — differences from direct Postgres by reason:\n", k)
		type kv struct {
			k string
			n int
		}
		var cs []kv
		for c, n := range sb.Classes[k] {
			cs = append(cs, kv{c, n})
		}
		sort.Slice(cs, func(i, j int) bool { return cs[i].n > cs[j].n || cs[i].n == cs[j].n && cs[i].k < cs[j].k })
		for _, c := range cs {
			fmt.Fprintf(&b, "  %4d  %s\n", c.n, c.k)
		}
	}
	if len(sb.Differences) > 0 {
		b.WriteString("\nEvery difference from direct Postgres:\n")
		for _, d := range sb.Differences {
			fmt.Fprintf(&b, "  %s %s: %s: direct %s, here %s: %s\n", d.Suite, d.Target, d.Test, d.Direct, d.Got, d.Reason)
		}
	}
	return b.String()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func (sb *scoreboard) write(dir string) error {
	j, err := json.MarshalIndent(sb, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "scoreboard.json"), j, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "scoreboard.txt"), []byte(sb.text()), 0o644)
}

var thresholdRe = regexp.MustCompile(`^(\S+)\s+(\S+)\s+(passed|failed|not_reached)\s*(>=|<=)\s*(\d+)$`)

// check reads floors and ceilings ("pgx pgshard-session passed>=960",
// "regress pgshard-session failed<=0") and returns those not met. A
// target that did not run fails its lines.
func (sb *scoreboard) check(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var failed []string
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := thresholdRe.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s:%d: want `SUITE TARGET passed>=N` (or failed<=N, not_reached<=N), got %q", path, n+1, line)
		}
		want, _ := strconv.Atoi(m[5])
		var r *result
		for _, x := range sb.Results {
			if x.Suite == m[1] && x.Target == m[2] {
				r = x
			}
		}
		if r == nil {
			failed = append(failed, line+" (the target did not run)")
			continue
		}
		got := map[string]int{"passed": r.Passed, "failed": r.Failed, "not_reached": r.NotReached}[m[3]]
		if m[4] == ">=" && got < want || m[4] == "<=" && got > want {
			failed = append(failed, fmt.Sprintf("%s (got %d)", line, got))
		}
	}
	return failed, nil
}
