package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/loadgen"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code = Run(ctx, args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// The config's loadgen defaults are the engine's defaults.
func TestLoadgenDefaultsAgree(t *testing.T) {
	d := config.Defaults().Loadgen
	o := loadgen.DefaultOptions()
	w := o.Workload
	if d.Duration != o.Duration || d.Warmup != o.Warmup || d.Concurrency != o.Concurrency || d.MaxOutstanding != o.MaxOutstanding ||
		d.LateThreshold != o.LateThreshold || d.Executions != w.Executions || d.Seed != w.Seed || d.Keys != string(w.Keys.Dist) ||
		d.Mix.Fast != w.Mix.Fast || d.Mix.MaxEmits != w.Mix.MaxEmits || d.Mix.Timer != w.Mix.Timer || d.Mix.Spawn != w.Mix.Spawn ||
		d.Redelivery != w.Redelivery || d.RetryCap != w.RetryCap || d.PayloadBytes != w.PayloadBytes || d.Relays != o.Relays ||
		d.RelayWorkers != o.RelayWorkers || d.OpTimeout != o.OpTimeout {
		t.Errorf("config defaults %+v disagree with loadgen.DefaultOptions %+v", d, o)
	}
}

func TestLoadgenUsageErrors(t *testing.T) {
	dir := t.TempDir()
	noMap := filepath.Join(dir, "nomap.yaml")
	if err := os.WriteFile(noMap, []byte("loadgen:\n  concurrency: 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"loadgen", "run", "--config", noMap}, "no shard map"},
		{[]string{"loadgen", "run", "--target", "proxy"}, "needs --dsn"},
		{[]string{"loadgen", "run", "--target", "proxy", "--dsn", "postgres://x", "--keys", "zipfian:abc"}, "loadgen.keys"},
		{[]string{"loadgen", "run", "--target", "proxy", "--dsn", "postgres://x", "--fail-if", "p99>"}, "--fail-if"},
		{[]string{"loadgen", "run", "--target", "carrier-pigeon"}, "loadgen.target"},
		{[]string{"loadgen", "run", "--target", "proxy", "--dsn", "postgres://x", "--duration", "0s"}, "loadgen.duration"},
		{[]string{"loadgen", "sweep", "--target", "proxy", "--dsn", "postgres://x", "--steps", "1,x"}, "loadgen.steps"},
		{[]string{"loadgen", "sweep", "--target", "proxy", "--dsn", "postgres://x", "--slo", "p99"}, "loadgen.slo"},
		{[]string{"loadgen", "compare", dir}, "arg"},
		{[]string{"loadgen", "run", "--target", "proxy", "--dsn", "postgres://x", "--part", "2/2"}, "K must be in [0, 1]"},
		{[]string{"loadgen", "run", "--target", "proxy", "--dsn", "postgres://x", "--part", "0/0"}, "N must be at least 1"},
		{[]string{"loadgen", "run", "--target", "proxy", "--dsn", "postgres://x", "--part", "half"}, "want K/N"},
		{[]string{"loadgen", "run", "--target", "proxy", "--dsn", "postgres://x", "--part", "0/3", "--concurrency", "2"}, "concurrency 2 cannot be shared by 3 parts"},
		{[]string{"loadgen", "merge"}, "arg"},
		{[]string{"loadgen", "merge", dir}, "result.json"},
	} {
		code, _, stderr := runCLI(t, c.args...)
		if code == 0 || code == ExitThresholdBreached || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want a usage error mentioning %q", c.args, code, stderr, c.want)
		}
	}
}

func TestLoadgenRunFailsWithDistinctCode(t *testing.T) {
	t.Setenv("PGSHARD_STORE_CONNECT_ATTEMPTS", "1")
	code, _, stderr := runCLI(t, "loadgen", "run", "--target", "proxy", "--dsn", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "--quiet")
	if code != ExitRunFailed {
		t.Fatalf("exit %d (stderr %q), want %d for a run that cannot connect", code, stderr, ExitRunFailed)
	}
}

func TestLoadgenCompare(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, tput float64) string {
		r := &loadgen.Result{Version: loadgen.ResultVersion, Label: name, Target: name, Throughput: tput,
			Kinds:    map[string]*loadgen.KindStats{"op": {Count: 10, P50: 1, P99: 2, Spectrum: []loadgen.SpectrumPoint{{Percentile: 50, Ms: 1}, {Percentile: 99, Ms: 2}}}},
			Outcomes: map[string]int64{}, Errors: map[string]int64{}}
		d := filepath.Join(dir, name)
		if _, err := loadgen.WriteReports(d, r); err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b := mk("direct", 1000), mk("proxy", 250)
	html := filepath.Join(dir, "cmp.html")
	code, out, stderr := runCLI(t, "loadgen", "compare", a, b, "--html", html)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "250.0 (0.25×)") || !strings.Contains(out, html) {
		t.Errorf("compare output:\n%s", out)
	}
	if st, err := os.Stat(html); err != nil || st.Size() == 0 {
		t.Errorf("no HTML overlay: %v", err)
	}
}

// merge refuses parts that are not the parts of one run, and merges
// those that are into one report directory.
func TestLoadgenMerge(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, part loadgen.Part, seed uint64) string {
		o := loadgen.DefaultOptions()
		o.Part, o.Workload.Seed = part, seed
		r := &loadgen.Result{Version: loadgen.ResultVersion, Label: "direct", Target: "direct", Shards: []string{"s0"}, Options: o,
			Ops: 10, Kinds: map[string]*loadgen.KindStats{}, Outcomes: map[string]int64{"ok": 10}, Errors: map[string]int64{},
			PerShard: []loadgen.ShardStats{{Name: "s0", Ops: 10}}, Windows: []loadgen.Window{},
			Histograms: &loadgen.Histograms{Kinds: map[string]string{}, Shards: []string{""}, Windows: []string{}}}
		d := filepath.Join(dir, name)
		if _, err := loadgen.WriteReports(d, r); err != nil {
			t.Fatal(err)
		}
		return d
	}
	p0, p1 := mk("p0", loadgen.Part{Index: 0, Count: 2}, 1), mk("p1", loadgen.Part{Index: 1, Count: 2}, 1)
	other := mk("other", loadgen.Part{Index: 1, Count: 2}, 2)
	whole := mk("whole", loadgen.Part{}, 1)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{p0, other}, "workload.seed (1, 2)"},
		{[]string{p0}, "parts 1/2 are missing"},
		{[]string{p0, p0}, "given twice"},
		{[]string{p0, whole}, "whole run"},
	} {
		code, _, stderr := runCLI(t, append([]string{"loadgen", "merge", "--out", filepath.Join(dir, "bad")}, c.args...)...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("merge %v: exit %d, stderr %q; want an error mentioning %q", c.args, code, stderr, c.want)
		}
	}
	out := filepath.Join(dir, "merged")
	code, stdout, stderr := runCLI(t, "loadgen", "merge", p1, p0, "--out", out)
	if code != 0 {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	res, err := loadgen.ReadResult(filepath.Join(out, loadgen.ResultFile))
	if err != nil || res.Ops != 20 || len(res.Parts) != 2 || res.PerShard[0].Ops != 20 || !res.Options.Part.Whole() {
		t.Fatalf("merged result: %v %+v", err, res)
	}
	if !strings.Contains(stdout, "merged from 2 parts") {
		t.Errorf("merge output:\n%s", stdout)
	}
}
