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
