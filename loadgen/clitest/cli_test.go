package clitest_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/internal/cli"
	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/shardmap"
)

func TestMain(m *testing.M) {
	code := clustertest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// devConfig makes a migrated fresh database on every shard and writes a
// config like the one `pgshard dev up` writes.
func devConfig(t *testing.T) (string, *shardmap.Map) {
	t.Helper()
	c := clustertest.Get(t)
	db := clustertest.FreshDatabase(t, c)
	m, err := c.MapFor(db, 4096)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := migrations.Apply(ctx, m, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	data, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("store:\n  use_pooler: true\n  max_conns: 4\nshardmap:\n")
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if line != "" {
			b.WriteString("  " + line)
		}
	}
	p := filepath.Join(t.TempDir(), "pgshard.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, m
}

type output struct {
	mu      sync.Mutex
	b       bytes.Buffer
	onWrite func(string)
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.onWrite != nil {
		o.onWrite(string(p))
	}
	return o.b.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

func pgshard(ctx context.Context, stderr *output, args ...string) (int, string) {
	var out output
	if stderr == nil {
		stderr = &output{}
	}
	code := cli.Run(ctx, args, strings.NewReader(""), &out, stderr)
	return code, out.String() + stderr.String()
}

func short(cfg, out string, extra ...string) []string {
	return append([]string{"loadgen", "run", "--config", cfg, "--duration", "1500ms", "--warmup", "300ms",
		"--executions", "300", "--concurrency", "4", "--quiet", "--out", out}, extra...)
}

func TestRunReportsThresholdsAndCompare(t *testing.T) {
	cfg, _ := devConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	direct, pooled := filepath.Join(dir, "direct"), filepath.Join(dir, "pgbouncer")

	code, out := pgshard(ctx, nil, short(cfg, direct, "--fail-if", "errors>0", "--fail-if", "dedupe_miss>0")...)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	for _, f := range []string{loadgen.SummaryFile, loadgen.ResultFile, loadgen.HTMLFile, "op.hgrm", "commit.hgrm", "load.hgrm"} {
		if _, err := os.Stat(filepath.Join(direct, f)); err != nil {
			t.Errorf("report %s: %v", f, err)
		}
	}
	if !strings.Contains(out, "HTML report: "+filepath.Join(direct, loadgen.HTMLFile)) || !strings.Contains(out, "ok       errors>0") {
		t.Errorf("output does not say where the report is or how thresholds went:\n%s", out)
	}

	code, out = pgshard(ctx, nil, short(cfg, pooled, "--target", "pgbouncer", "--fail-if", "throughput<100M")...)
	if code != cli.ExitThresholdBreached || !strings.Contains(out, "BREACHED throughput<100M") {
		t.Fatalf("breached threshold: exit %d, want %d\n%s", code, cli.ExitThresholdBreached, out)
	}
	res, err := loadgen.ReadResult(filepath.Join(pooled, loadgen.ResultFile))
	if err != nil || res.Target != "pgbouncer" || res.ErrorCount() != 0 || len(res.PerShard) != 4 {
		t.Fatalf("pgbouncer result: %v %+v", err, res)
	}

	html := filepath.Join(dir, "cmp.html")
	code, out = pgshard(ctx, nil, "loadgen", "compare", direct, pooled, "--html", html)
	if code != 0 || !strings.Contains(out, "pgbouncer") || !strings.Contains(out, "×)") {
		t.Fatalf("compare: exit %d\n%s", code, out)
	}
}

// The proxy target is one store over one DSN. Without the proxy this test
// points it at one shard's PgBouncer directly (a one-shard "cluster"), so
// the adapter and the command's proxy path run end to end.
func TestProxyTargetOverOneDSN(t *testing.T) {
	c := clustertest.Get(t)
	db := clustertest.FreshDatabase(t, c)
	full, err := c.MapFor(db, 64)
	if err != nil {
		t.Fatal(err)
	}
	m, err := shardmap.Even(64, full.Shards[:1])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := migrations.Apply(ctx, m, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir()) // no pgshard.yaml around: the proxy target needs no map
	out := filepath.Join(t.TempDir(), "proxy")
	code, text := pgshard(ctx, nil, "loadgen", "run", "--target", "proxy", "--dsn", m.Shards[0].PoolerDSN, "--duration", "1s",
		"--warmup", "200ms", "--executions", "200", "--concurrency", "4", "--quiet", "--out", out, "--fail-if", "errors>0")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, text)
	}
	res, err := loadgen.ReadResult(filepath.Join(out, loadgen.ResultFile))
	if err != nil || res.Target != "proxy" || len(res.Shards) != 1 || res.Ops == 0 {
		t.Fatalf("result: %v %+v", err, res)
	}
}

func TestSweepAndInterrupt(t *testing.T) {
	cfg, _ := devConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "sweep")
	code, text := pgshard(ctx, nil, "loadgen", "sweep", "--config", cfg, "--steps", "1,2,4", "--duration", "700ms", "--warmup", "200ms",
		"--executions", "300", "--quiet", "--out", out, "--slo", "p99=500ms", "--target-rate", "2000")
	if code != 0 {
		t.Fatalf("sweep: exit %d\n%s", code, text)
	}
	sw, err := loadgen.ReadSweep(filepath.Join(out, loadgen.SweepResultFile))
	if err != nil || len(sw.Steps) != 3 || sw.USL == nil {
		t.Fatalf("sweep.json: %v %+v", err, sw)
	}
	if sw.Knee >= 0 && (sw.Capacity == nil || sw.Capacity.ShardsNeeded < 1) {
		t.Errorf("a knee but no capacity answer: %+v %s", sw.Capacity, sw.CapacityError)
	}
	for _, s := range sw.Steps {
		if _, err := os.Stat(filepath.Join(s.Dir, loadgen.ResultFile)); err != nil {
			t.Errorf("step report: %v", err)
		}
	}

	// Ctrl-C during the measured period: exit 130 and a partial report.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	stderr := &output{onWrite: func(s string) {
		if strings.Contains(s, " run ") { // the first measured progress line
			stop()
		}
	}}
	partial := filepath.Join(t.TempDir(), "partial")
	args := short(cfg, partial)
	args = append(args[:len(args)-3], "--out", partial, "--duration", "5m") // progress on: drop --quiet
	start := time.Now()
	code, text = pgshard(runCtx, stderr, args...)
	if code != 130 {
		t.Fatalf("interrupted run: exit %d, want 130\n%s", code, text)
	}
	if time.Since(start) > time.Minute {
		t.Errorf("interrupt took %s", time.Since(start))
	}
	res, err := loadgen.ReadResult(filepath.Join(partial, loadgen.ResultFile))
	if err != nil || !res.Interrupted {
		t.Fatalf("partial report: %v %+v", err, res)
	}
}
