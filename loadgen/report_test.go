package loadgen_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/loadgen/loadgentest"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run with -update if intended):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestTextSummaryGolden(t *testing.T) {
	var b bytes.Buffer
	if err := loadgen.WriteText(&b, syntheticResult()); err != nil {
		t.Fatal(err)
	}
	golden(t, "summary.golden", b.Bytes())
}

// checkSelfContained fails if an HTML page loads anything from elsewhere.
func checkSelfContained(t *testing.T, page string) {
	t.Helper()
	stripped := strings.ReplaceAll(page, `xmlns="http://www.w3.org/2000/svg"`, "")
	if m := regexp.MustCompile(`(?i)(https?:|<script[^>]*src|<link[^>]*href|@import|url\()`).FindString(stripped); m != "" {
		t.Errorf("HTML references an external resource: %q", m)
	}
	if !strings.Contains(page, "<svg") || !strings.HasSuffix(strings.TrimSpace(page), "</html>") {
		t.Errorf("HTML has no inline SVG or is truncated")
	}
}

func TestWriteReportsFromARealRun(t *testing.T) {
	f := loadgentest.New(loadgentest.Options{Shards: 3, Service: 100e3})
	res := run(t, f, quick())
	dir := t.TempDir()
	files, err := loadgen.WriteReports(dir, res)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{loadgen.SummaryFile, loadgen.ResultFile, loadgen.HTMLFile, "op.hgrm", "commit.hgrm", "fast_commit.hgrm",
		"complex_commit.hgrm", "load.hgrm", "relay_delivery.hgrm", "timer_fire.hgrm"}
	for _, w := range want {
		found := false
		for _, f := range files {
			if filepath.Base(f) == w {
				found = true
			}
		}
		if !found {
			t.Errorf("report %s not written (files %v)", w, files)
		}
	}
	hgrm, _ := os.ReadFile(filepath.Join(dir, "op.hgrm"))
	if !strings.Contains(string(hgrm), "Percentile") || !strings.Contains(string(hgrm), "#[Mean") {
		t.Errorf("op.hgrm is not in HdrHistogram percentile format:\n%s", hgrm)
	}
	back, err := loadgen.ReadResult(filepath.Join(dir, loadgen.ResultFile))
	if err != nil {
		t.Fatal(err)
	}
	if back.Ops != res.Ops || back.Kinds["op"].P99 != res.Kinds["op"].P99 || len(back.Windows) != len(res.Windows) {
		t.Errorf("result.json does not round-trip")
	}
	var generic map[string]any
	raw, _ := os.ReadFile(filepath.Join(dir, loadgen.ResultFile))
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"throughput", "kinds", "outcomes", "errors", "per_shard", "windows", "self_check", "relays", "options"} {
		if _, ok := generic[k]; !ok {
			t.Errorf("result.json lacks %q", k)
		}
	}
	page, _ := os.ReadFile(filepath.Join(dir, loadgen.HTMLFile))
	checkSelfContained(t, string(page))
	for _, s := range []string{"Throughput", "p50 / p99", "Latency by percentile: worker operations", "relays and lags", "per shard", "Self-check"} {
		if !strings.Contains(string(page), s) {
			t.Errorf("HTML report lacks %q", s)
		}
	}
}

// TestFreezeMarks: a result's range-move freezes are bands on the
// throughput and latency timelines (each titled with its range, shards
// and duration; one known only by its flip still drawn) and a line of the
// text summary; a result without freezes has neither.
func TestFreezeMarks(t *testing.T) {
	r := syntheticResult()
	start := r.Start
	r.Windows = nil
	for i := 1; i <= 35; i++ {
		w := loadgen.Window{T: float64(i), Warmup: i <= 5, Rate: 1200, P50: 12, P99: 40, Max: 100}
		if i == 13 || i == 22 || i == 25 {
			w.Rate, w.P99, w.Max = 700, 300, 520 // what a freeze does to the load
		}
		r.Windows = append(r.Windows, w)
	}
	r.Freezes = []loadgen.Freeze{
		{Move: 1, Lo: 0, Hi: 63, From: "shard0", To: "shard3", Started: start.Add(12 * time.Second), StartS: 12, DurationMS: 480},
		{Move: 2, Lo: 64, Hi: 127, From: "shard1", To: "shard3", Started: start.Add(21 * time.Second), StartS: 21, DurationMS: 140, Abandoned: true},
		{Move: 3, Lo: 128, Hi: 191, From: "shard2", To: "shard3", Started: start.Add(22 * time.Second), StartS: 22, DurationMS: 101, Abandoned: true, Why: "deadline"},
		{Move: 2, Lo: 64, Hi: 127, From: "shard1", To: "shard3", Started: start.Add(24 * time.Second), StartS: 24, AtFlip: true},
	}
	var page bytes.Buffer
	if err := loadgen.WriteHTML(&page, r); err != nil {
		t.Fatal(err)
	}
	p := page.String()
	checkSelfContained(t, p)
	for _, want := range []string{
		"<title>freeze 0-63 shard0→shard3 480 ms</title>", ">0-63→shard3 480ms</text>",
		"<title>freeze 64-127 shard1→shard3 140 ms, abandoned</title>", ">64-127→shard3 140ms ✗</text>",
		"<title>freeze 64-127 shard1→shard3 flip</title>", ">64-127→shard3 flip</text>",
		"<title>freeze 128-191 shard2→shard3 101 ms, abandoned (deadline)</title>",
	} {
		// Each freeze: a band (its title) and a label, on both timelines.
		if n := strings.Count(p, want); n != 2 {
			t.Errorf("report.html has %q %d times, want 2 (throughput and latency)", want, n)
		}
	}
	// Abandoned freezes are shaded in a color of their own.
	if n, m := strings.Count(p, `fill="#e65100" fill-opacity="0.35"`), strings.Count(p, `fill="#6a1b9a" fill-opacity="0.35"`); n != 4 || m != 4 {
		t.Errorf("report.html shades %d abandoned and %d other freezes, want 4 and 4 (two timelines)", n, m)
	}
	var text bytes.Buffer
	if err := loadgen.WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "freezes     4 range-move freezes in the run (from the catalog's journal; 2 abandoned, longest 480 ms): 0-63 shard0→shard3 480 ms at 12.0s,") {
		t.Errorf("summary lacks the freezes:\n%s", text.String())
	}
	golden(t, "summary_freezes.golden", text.Bytes())
	// A journal that records only the flips (written before freezes were
	// recorded) has no lengths to sum up.
	text.Reset()
	flips := *r
	flips.Freezes = r.Freezes[3:]
	if err := loadgen.WriteText(&text, &flips); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "freezes     1 range-move freezes in the run (from the catalog's journal): 64-127 shard1→shard3 flip at 24.0s\n") {
		t.Errorf("summary of flips only:\n%s", text.String())
	}
	if keep := os.Getenv("PGSHARD_LOADGEN_REPORT_DIR"); keep != "" {
		if err := os.WriteFile(filepath.Join(keep, "freezes.html"), page.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	page.Reset()
	r.Freezes = nil
	if err := loadgen.WriteHTML(&page, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(page.String(), "freeze ") {
		t.Error("report.html without freezes marks some")
	}
}
