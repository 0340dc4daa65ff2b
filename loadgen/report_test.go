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
