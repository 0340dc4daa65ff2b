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

	"github.com/jackc/pgx/v5/pgconn"

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
	cfg, m := devConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The proxy serves the shards' own database name (proxy.databases
	// empty): the migrated map's.
	sc, err := pgconn.ParseConfig(m.Shards[0].DSN)
	if err != nil {
		t.Fatal(err)
	}
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
	dsn := "postgres://postgres@" + addr + "/" + sc.Database + "?sslmode=disable"
	// 400 operations (every shard gets some: 300 executions spread over 4
	// shards), however long a loaded machine takes, up to a minute.
	code, text := pgshard(ctx, nil, "loadgen", "run", "--config", cfg, "--target", "proxy", "--dsn", dsn, "--duration", "60s", "--ops", "400",
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
	// A knee gives a capacity answer: a shard count, or — on a machine so
	// loaded that the knee is tiny — the verdict that none meets the rate.
	if sw.Knee >= 0 && (sw.Capacity == nil || sw.Capacity.ShardsNeeded < 1 && !strings.HasPrefix(sw.Capacity.Verdict, "no shard count")) {
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

// A run split in 2 parts (`run --part 0/2` and `--part 1/2`, run together
// as on two machines) and merged with `loadgen merge`, beside a whole run
// at the same total rate on another fresh database: the merged report has
// the whole run's form, its counts are the parts' sums, and its latency
// histograms are the parts' merged. The two runs' percentiles are real
// latencies on a shared machine: printed side by side, not compared.
func TestPartsMergeLikeOneRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	open := []string{"--rate", "100", "--executions", "300", "--duration", "2s", "--warmup", "300ms", "--quiet"}
	wholeCfg, _ := devConfig(t)
	code, out := pgshard(ctx, nil, append([]string{"loadgen", "run", "--config", wholeCfg, "--out", filepath.Join(dir, "whole")}, open...)...)
	if code != 0 {
		t.Fatalf("whole run: exit %d\n%s", code, out)
	}
	cfg, _ := devConfig(t)
	parts := []string{filepath.Join(dir, "part0"), filepath.Join(dir, "part1")}
	var wg sync.WaitGroup
	outs := make([]string, len(parts))
	codes := make([]int, len(parts))
	for k, d := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[k], outs[k] = pgshard(ctx, nil, append([]string{"loadgen", "run", "--config", cfg, "--out", d, "--part", fmt.Sprintf("%d/2", k)}, open...)...)
		}()
	}
	wg.Wait()
	for k := range parts {
		if codes[k] != 0 {
			t.Fatalf("part %d/2: exit %d\n%s", k, codes[k], outs[k])
		}
		if !strings.Contains(outs[k], fmt.Sprintf("part %d/2 (executions i with i mod 2 = %d)", k, k)) || !strings.Contains(outs[k], "open loop at 50 ops/s") {
			t.Errorf("part %d/2 does not say it is a part at half the rate:\n%s", k, outs[k])
		}
	}
	merged := filepath.Join(dir, "merged")
	code, out = pgshard(ctx, nil, "loadgen", "merge", parts[0], parts[1], "--out", merged)
	if code != 0 || !strings.Contains(out, "merged from 2 parts") || !strings.Contains(out, "open loop at 100 ops/s") {
		t.Fatalf("merge: exit %d\n%s", code, out)
	}
	for _, f := range []string{loadgen.SummaryFile, loadgen.ResultFile, loadgen.HTMLFile, "op.hgrm", "commit.hgrm"} {
		if _, err := os.Stat(filepath.Join(merged, f)); err != nil {
			t.Errorf("merged report %s: %v", f, err)
		}
	}
	read := func(d string) *loadgen.Result {
		r, err := loadgen.ReadResult(filepath.Join(d, loadgen.ResultFile))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	whole, m, p0, p1 := read(filepath.Join(dir, "whole")), read(merged), read(parts[0]), read(parts[1])
	if m.Ops == 0 || m.Ops != p0.Ops+p1.Ops || m.Kinds["op"].Count != p0.Kinds["op"].Count+p1.Kinds["op"].Count ||
		m.OpenLoop.Intended != p0.OpenLoop.Intended+p1.OpenLoop.Intended {
		t.Errorf("merged ops %d, op count %d, intended %d; parts %d+%d, %d+%d, %d+%d", m.Ops, m.Kinds["op"].Count, m.OpenLoop.Intended,
			p0.Ops, p1.Ops, p0.Kinds["op"].Count, p1.Kinds["op"].Count, p0.OpenLoop.Intended, p1.OpenLoop.Intended)
	}
	var shardOps int64
	for i, s := range m.PerShard {
		shardOps += s.Ops
		if s.Ops != p0.PerShard[i].Ops+p1.PerShard[i].Ops {
			t.Errorf("shard %s: merged %d ops, parts %d+%d", s.Name, s.Ops, p0.PerShard[i].Ops, p1.PerShard[i].Ops)
		}
	}
	if shardOps != m.Kinds["op"].Count || len(m.PerShard) != len(whole.PerShard) || len(m.Windows) == 0 {
		t.Errorf("merged shard table %+v (%d ops), %d windows", m.PerShard, shardOps, len(m.Windows))
	}
	// Errors are summed too (a loaded machine may time some out: not
	// asserted away).
	if m.ErrorCount() != p0.ErrorCount()+p1.ErrorCount() {
		t.Errorf("errors: merged %v, parts %v + %v", m.Errors, p0.Errors, p1.Errors)
	}
	for k, ks := range m.Kinds {
		var n int64
		for _, p := range []*loadgen.Result{p0, p1} {
			if pk := p.Kinds[k]; pk != nil {
				n += pk.Count
			}
		}
		if ks.Count != n {
			t.Errorf("kind %s: merged count %d, parts %d", k, ks.Count, n)
		}
	}
	wo, mo := whole.Kinds["op"], m.Kinds["op"]
	t.Logf("op p50/p90/p99: whole run %.2f/%.2f/%.2f ms (%d ops, errors %v), 2 parts merged %.2f/%.2f/%.2f ms (%d ops, errors %v)",
		wo.P50, wo.P90, wo.P99, whole.Ops, whole.Errors, mo.P50, mo.P90, mo.P99, m.Ops, m.Errors)
}
