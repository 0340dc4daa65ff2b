package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
)

// buildPgshard builds the pgshard binary (dev up --proxy runs it).
func buildPgshard(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pgshard")
	// A cold build compiles pg_query's C sources: minutes on a loaded
	// 2-core machine. The bound is for a build that hangs, not a slow one.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/pgshard/pgshard/cmd/pgshard").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestDevProxy: dev up --proxy starts a proxy for the dev cluster, dev
// status reports its DSN, it serves queries, dev up reuses it and dev down
// stops it (nothing left running).
func TestDevProxy(t *testing.T) {
	if err := cluster.Local().(cluster.SpecChecker).AvailableFor(context.Background(), cluster.Spec{PgBouncer: true}); err != nil {
		clustertest.SkipOrFail(t, err)
	}
	bin := buildPgshard(t)
	dir := clustertest.Dir(t)
	r := mustRun(t, "", "dev", "up", "--dir", dir, "--shards", "2", "--fsync=false", "--proxy", "--proxy-bin", bin)
	if !strings.Contains(r.stdout, "proxy started: postgres://postgres@127.0.0.1:") {
		t.Fatalf("dev up --proxy output:\n%s", r.stdout)
	}
	var st struct {
		ProxyDSN string `json:"proxy_dsn"`
		ProxyPID int    `json:"proxy_pid"`
	}
	raw := mustRun(t, "", "dev", "status", "--dir", dir, "--json").stdout
	if err := json.Unmarshal([]byte(raw), &st); err != nil || st.ProxyDSN == "" || st.ProxyPID == 0 {
		t.Fatalf("dev status --json: %v\n%s", err, raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, st.ProxyDSN)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM executions").Scan(&n); err != nil {
		t.Fatalf("query through the dev proxy: %v", err)
	}
	conn.Close(ctx)
	r = mustRun(t, "", "dev", "up", "--dir", dir, "--shards", "2", "--fsync=false", "--proxy", "--proxy-bin", bin)
	if !strings.Contains(r.stdout, "proxy reused") {
		t.Fatalf("second dev up --proxy:\n%s", r.stdout)
	}
	r = mustRun(t, "", "dev", "down", "--dir", dir)
	if !strings.Contains(r.stdout, "stopped the proxy") {
		t.Fatalf("dev down output:\n%s", r.stdout)
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(st.ProxyPID, 0) == nil {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(st.ProxyPID, &ws, syscall.WNOHANG, nil)
		if time.Now().After(deadline) {
			t.Fatalf("proxy pid %d still runs after dev down", st.ProxyPID)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(dir, "proxy.json")); !os.IsNotExist(err) {
		t.Fatalf("proxy.json left behind: %v", err)
	}

	// Up again: the proxy keeps its DSN (its port is still free).
	r = mustRun(t, "", "dev", "up", "--dir", dir, "--shards", "2", "--fsync=false", "--proxy", "--proxy-bin", bin)
	t.Cleanup(func() { run(t, "", "dev", "down", "--dir", dir) })
	raw = mustRun(t, "", "dev", "status", "--dir", dir, "--json").stdout
	var again struct {
		ProxyDSN string `json:"proxy_dsn"`
	}
	if err := json.Unmarshal([]byte(raw), &again); err != nil || again.ProxyDSN != st.ProxyDSN {
		t.Fatalf("after dev down and up the proxy moved: %q, was %q (%v)\n%s", again.ProxyDSN, st.ProxyDSN, err, r.stdout)
	}
	if r := run(t, "", "dev", "up", "--dir", dir, "--proxy", "--proxy-port", "1", "--proxy-bin", bin); r.code == 0 || !strings.Contains(r.stderr, "already runs on") {
		t.Fatalf("--proxy-port of a running proxy's other port: exit %d\n%s", r.code, r.stderr)
	}
	if r := run(t, "", "dev", "up", "--dir", dir, "--proxy-port", "7000"); r.code == 0 || !strings.Contains(r.stderr, "--proxy-port needs --proxy") {
		t.Fatalf("--proxy-port without --proxy: exit %d\n%s", r.code, r.stderr)
	}
}

// TestProxyConfigErrors: bad proxy settings fail with one line naming the
// key, before anything starts.
func TestProxyConfigErrors(t *testing.T) {
	dir := t.TempDir()
	base := `shardmap:
  epoch: 1
  buckets: 16
  shards:
    - {name: s0, ordinal: 0, dsn: "postgres://u@127.0.0.1:1/d"}
  ranges:
    - {lo: 0, hi: 15, shard: s0}
`
	cases := []struct{ proxy, want string }{
		{"proxy:\n  pool_size: 0\n", "proxy.pool_size: must be in [1, 10000]"},
		{"proxy:\n  users:\n    - {name: app}\n", `proxy.users[0]: user "app" needs a password or trust: true`},
		{"proxy:\n  pool_sise: 3\n", `unknown key "proxy.pool_sise" (did you mean "proxy.pool_size"?)`},
		{"proxy:\n  schema:\n    tables:\n      - {table: t, column: c, type: uuid}\n", "proxy.schema"},
		{"proxy:\n  max_message_size: 10\n", "proxy.max_message_size"},
		{"", "proxy.users is empty"},
		{"proxy:\n  catalog: postgres://u@127.0.0.1:1/cat\n", "proxy.catalog and shardmap_file/shardmap"},
		{"proxy:\n  fence: sometimes\n", `proxy.fence: want auto, on or off (got "sometimes")`},
		{"proxy:\n  catalog_dsn: x\n", `unknown key "proxy.catalog_dsn"`},
		{"proxy:\n  procs: -1\n", "proxy.procs: must be in [0, 1024]"},
		{"proxy:\n  procs: 4096\n", "proxy.procs: must be in [0, 1024]"},
	}
	for _, tc := range cases {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte(base+tc.proxy), 0o644); err != nil {
			t.Fatal(err)
		}
		r := run(t, "", "proxy", "--config", path)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 1 {
			t.Errorf("config %q: exit %d, stderr %q; want one line containing %q", tc.proxy, r.code, r.stderr, tc.want)
		}
	}
}
