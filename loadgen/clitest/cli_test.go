package clitest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/internal/cli"
	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/shardmap"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// devConfig makes a migrated fresh database on every shard and writes a
// config like the one `pgshard dev up` writes.
func devConfig(t *testing.T) (string, *shardmap.Map) {
	t.Helper()
	m := clustertest.MigratedMap(t, clustertest.Get(t))
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

// The proxy target through the real proxy: `pgshard proxy` runs in-process
// in front of the 4-shard cluster (through each shard's PgBouncer), and the
// full workload — fast and complex commits, emits, timers, spawns, the
// outbox relay and the timer sweeper, whose fan-out reads the proxy merges —
// runs through its one DSN without an error, and loads every shard.
func TestProxyTarget(t *testing.T) {
	cfg, _ := devConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ready := filepath.Join(t.TempDir(), "proxy.json")
	proxyCtx, stopProxy := context.WithCancel(ctx)
	proxyDone := make(chan string, 1)
	go func() {
		code, text := pgshard(proxyCtx, nil, "proxy", "--config", cfg, "--listen", "127.0.0.1:0",
			"--trust-user", "postgres", "--ready-file", ready)
		proxyDone <- fmt.Sprintf("exit %d: %s", code, text)
	}()
	defer func() {
		stopProxy()
		select {
		case <-proxyDone:
		case <-time.After(time.Minute):
			t.Error("the proxy did not stop within a minute")
		}
	}()
	var addr string
	for deadline := time.Now().Add(time.Minute); addr == ""; {
		if b, err := os.ReadFile(ready); err == nil {
			var r struct{ Addr string }
			if json.Unmarshal(b, &r) == nil {
				addr = r.Addr
			}
		}
		select {
		case text := <-proxyDone:
			t.Fatalf("the proxy stopped before it was ready: %s", text)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the proxy was not ready within a minute")
		}
	}
	out := filepath.Join(t.TempDir(), "proxy")
	dsn := "postgres://postgres@" + addr + "/pgshard?sslmode=disable"
	code, text := pgshard(ctx, nil, "loadgen", "run", "--config", cfg, "--target", "proxy", "--dsn", dsn, "--duration", "2s",
		"--warmup", "300ms", "--executions", "300", "--concurrency", "4", "--quiet", "--out", out,
		"--fail-if", "errors>0", "--fail-if", "dedupe_miss>0")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, text)
	}
	res, err := loadgen.ReadResult(filepath.Join(out, loadgen.ResultFile))
	if err != nil || res.Target != "proxy" || res.Ops == 0 {
		t.Fatalf("result: %v %+v", err, res)
	}
	if len(res.PerShard) != 4 {
		t.Errorf("per-shard figures for %d shards, want 4: %+v", len(res.PerShard), res.PerShard)
	}
	for _, sh := range res.PerShard {
		if sh.Ops == 0 {
			t.Errorf("shard %s got no operations through the proxy", sh.Name)
		}
	}
	if res.Relays.OutboxDelivered == 0 || res.Relays.Errors != 0 {
		t.Errorf("relays through the proxy: %+v", res.Relays)
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
	// A knee gives a capacity answer: a shard count, or (on a machine so
	// loaded that one shard sustains little) the verdict that none up to
	// 1024 meets the target, and why. Which one depends on this machine's
	// speed; that there is an answer does not.
	if sw.Knee >= 0 {
		switch c := sw.Capacity; {
		case c == nil:
			t.Errorf("a knee but no capacity answer: %s", sw.CapacityError)
		case c.ShardsNeeded < 1 && !strings.Contains(c.Verdict, "no shard count up to"):
			t.Errorf("no shard count and no verdict saying why: %+v", c)
		case c.PerShardCapacity <= 0 || len(c.Plan) == 0:
			t.Errorf("capacity answer without a per-shard capacity or a plan: %+v", c)
		}
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
