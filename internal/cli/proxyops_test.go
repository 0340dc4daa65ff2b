package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// TestPasswd: `pgshard passwd USER` prints a SCRAM-SHA-256 verifier in
// pg_authid's format (new salt each time) that the proxy accepts as a
// password, and refuses an empty password.
func TestPasswd(t *testing.T) {
	re := regexp.MustCompile(`^SCRAM-SHA-256\$4096:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$`)
	a := strings.TrimSpace(mustRun(t, "s3cret\n", "passwd", "alice").stdout)
	b := strings.TrimSpace(mustRun(t, "s3cret", "passwd", "alice").stdout)
	if !re.MatchString(a) || !re.MatchString(b) || a == b {
		t.Fatalf("verifiers %q and %q: want the pg_authid format, different salts", a, b)
	}
	var entries []struct{ Name, Password string }
	y := mustRun(t, "s3cret\n", "passwd", "alice", "--yaml").stdout
	if err := yaml.Unmarshal([]byte(y), &entries); err != nil || len(entries) != 1 || entries[0].Name != "alice" || !re.MatchString(entries[0].Password) {
		t.Fatalf("--yaml output %q: %v", y, err)
	}
	m, err := shardmap.Even(16, []shardmap.Shard{{Name: "s0", DSN: "postgres://u@127.0.0.1:1/d"}})
	if err != nil {
		t.Fatal(err)
	}
	an, err := route.New(m, route.DefaultSchema(), route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.New(proxy.Config{Map: m, Analyzer: an, Users: []proxy.User{{Name: "alice", Password: a}}}); err != nil {
		t.Fatalf("the proxy refuses the verifier: %v", err)
	}
	if r := run(t, "\n", "passwd", "alice"); r.code == 0 || !strings.Contains(r.stderr, "empty") {
		t.Fatalf("empty password: exit %d %q", r.code, r.stderr)
	}
	if strings.Contains(a+b+y, "s3cret") {
		t.Fatal("the password is in the output")
	}
}

// proxyProc is a `pgshard proxy` child process.
type proxyProc struct {
	cmd   *exec.Cmd
	log   *bytes.Buffer
	mu    *sync.Mutex
	done  chan struct{}
	ready string
}

type lockedBuf struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// startProxyProc runs `bin proxy --config cfg --trust-user postgres
// --ready-file ready` and waits until the ready file names it.
func startProxyProc(t *testing.T, bin, cfg, ready string, extra ...string) *proxyProc {
	t.Helper()
	p := &proxyProc{log: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{}), ready: ready}
	args := append([]string{"proxy", "--config", cfg, "--trust-user", "postgres", "--ready-file", ready}, extra...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout = lockedBuf{p.mu, p.log}
	p.cmd.Stderr = lockedBuf{p.mu, p.log}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if r, err := readReady(ready); err == nil && r.PID == p.cmd.Process.Pid {
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("the proxy exited during startup:\n%s", p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy did not get ready:\n%s", p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *proxyProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// logged reports whether the proxy's output comes to contain s within d.
// What it wrote before its ready file reaches the buffer through a pipe
// copied by a goroutine of exec's, which may be behind the file under
// load.
func (p *proxyProc) logged(s string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !strings.Contains(p.output(), s) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// waitExit waits for the process to end and returns its exit code.
func (p *proxyProc) waitExit(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("proxy pid %d still runs after %s:\n%s", p.cmd.Process.Pid, d, p.output())
		return -1
	}
}

type readyFile struct {
	PID           int    `json:"pid"`
	Addr          string `json:"addr"`
	MetricsAddr   string `json:"metrics_addr"`
	AdminDatabase string `json:"admin_database"`
}

func readReady(path string) (readyFile, error) {
	var r readyFile
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	return r, err
}

// proxyTestDB is a migrated database on the shared cluster with a
// pgbench_accounts table holding keys on every shard.
func proxyTestDB(t *testing.T) (*shardmap.Map, []int64) {
	t.Helper()
	c := clustertest.Get(t)
	m := clustertest.MigratedMap(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var keys []int64
	for k := int64(1); k <= 64; k++ {
		keys = append(keys, k)
	}
	for i, s := range m.Shards {
		conn, err := pgx.Connect(ctx, s.DSN)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE pgbench_accounts (aid int8 PRIMARY KEY, bid int, abalance int NOT NULL DEFAULT 0, filler char(84))"); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if m.ShardIndexForBucket(m.BucketInt8(k)) == i {
				if _, err := conn.Exec(ctx, "INSERT INTO pgbench_accounts (aid, bid) VALUES ($1, 1)", k); err != nil {
					t.Fatal(err)
				}
			}
		}
		conn.Close(ctx)
	}
	return m, keys
}

// writeProxyConfig writes a config for m with a proxy section.
func writeProxyConfig(t *testing.T, dir string, m *shardmap.Map, proxySection string) string {
	t.Helper()
	data, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "map.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := "shardmap_file: map.yaml\nproxy:\n  schema:\n    tables:\n" +
		"      - {table: executions, column: id, type: text, position: 1}\n" +
		"      - {table: pgbench_accounts, column: aid, type: int8, position: 1}\n" + proxySection
	path := filepath.Join(dir, "pgshard.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// sumBalances adds up abalance over every shard.
func sumBalances(t *testing.T, m *shardmap.Map) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var total int64
	for _, s := range m.Shards {
		conn, err := pgx.Connect(ctx, s.DSN)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := conn.QueryRow(ctx, "SELECT coalesce(sum(abalance), 0) FROM pgbench_accounts").Scan(&n); err != nil {
			t.Fatal(err)
		}
		total += n
		conn.Close(ctx)
	}
	return total
}

var (
	processedRe = regexp.MustCompile(`number of transactions actually processed: (\d+)`)
	failedRe    = regexp.MustCompile(`number of failed transactions: (\d+)`)
	progRe      = regexp.MustCompile(`(?m)^progress: ([0-9.]+) s, ([0-9.]+) tps`)
)

// TestProxyRestartUnderPgbench: a zero-downtime restart of `pgshard proxy`
// with proxy.handover_socket, twice, under pgbench load — one run that
// reconnects for every transaction (-C) and one on persistent
// connections: no failed transaction, and every transaction pgbench
// counted is committed (the balances add up to it); then SIGTERM stops the
// last proxy gracefully and removes its ready file.
func TestProxyRestartUnderPgbench(t *testing.T) {
	pgbench := lookPath(t, "pgbench", "/usr/lib/postgresql/15/bin/pgbench")
	bin := buildPgshard(t)
	m, keys := proxyTestDB(t)
	dir := t.TempDir()
	listen := freePort(t)
	cfg := writeProxyConfig(t, dir, m, fmt.Sprintf("  listen: %s\n  handover_socket: handover.sock\n  shutdown_timeout: 60s\n  pool_size: 8\n", listen))
	ready := filepath.Join(dir, "proxy.json")
	first := startProxyProc(t, bin, cfg, ready)
	script := filepath.Join(dir, "inc.sql")
	if err := os.WriteFile(script, []byte(fmt.Sprintf("\\set aid random(1, %d)\nUPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n", len(keys))), 0o644); err != nil {
		t.Fatal(err)
	}
	dbname := strings.TrimPrefix(mustParse(t, m.Shards[0].DSN).Path, "/")
	dsn := fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", listen, dbname)
	const secs = 12
	type benchOut struct {
		out string
		err error
	}
	results := make([]benchOut, 2)
	var wg sync.WaitGroup
	for i, extra := range [][]string{{"-C", "-c", "6"}, {"-c", "4"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := append([]string{"-n", "-M", "extended", "-j", "2", "-T", strconv.Itoa(secs), "-P", "1", "-f", script}, extra...)
			args = append(args, dsn)
			out, err := exec.Command(pgbench, args...).CombinedOutput()
			results[i] = benchOut{string(out), err}
		}()
	}
	time.Sleep(3 * time.Second)
	second := startProxyProc(t, bin, cfg, ready) // takes the socket over
	if !second.logged("took the listening socket over", 30*time.Second) {
		t.Errorf("the second proxy did not report a hand-over:\n%s", second.output())
	}
	time.Sleep(4 * time.Second)
	third := startProxyProc(t, bin, cfg, ready)
	// The second proxy had only -C clients and the persistent ones went on
	// with the first: it drains at once.
	if code := second.waitExit(t, 20*time.Second); code != 0 {
		t.Errorf("the second proxy exited %d:\n%s", code, second.output())
	}
	wg.Wait()
	// The first proxy served the persistent clients to their end.
	if code := first.waitExit(t, 20*time.Second); code != 0 {
		t.Errorf("the first proxy exited %d:\n%s", code, first.output())
	}
	var processed int64
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("pgbench %d: %v\n%s", i, r.err, r.out)
		}
		mp := processedRe.FindStringSubmatch(r.out)
		mf := failedRe.FindStringSubmatch(r.out)
		if mp == nil || mf == nil || mf[1] != "0" {
			t.Fatalf("pgbench %d: processed %v, failed %v\n%s", i, mp, mf, r.out)
		}
		n, _ := strconv.ParseInt(mp[1], 10, 64)
		processed += n
		var tps []string
		for _, p := range progRe.FindAllStringSubmatch(r.out, -1) {
			tps = append(tps, p[2])
		}
		t.Logf("pgbench %d (%s): %d transactions, 0 failed; tps per second (restarts at ~3 s and ~7 s): %s", i,
			map[int]string{0: "-C, a connection per transaction", 1: "persistent connections"}[i], n, strings.Join(tps, " "))
	}
	if sum := sumBalances(t, m); sum != processed {
		t.Fatalf("committed increments %d, transactions pgbench counted %d", sum, processed)
	}
	// SIGTERM: a graceful stop of the last proxy, its ready file removed.
	if err := third.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := third.waitExit(t, 20*time.Second); code != 0 {
		t.Errorf("the last proxy exited %d after SIGTERM:\n%s", code, third.output())
	}
	if _, err := os.Stat(ready); !os.IsNotExist(err) {
		t.Errorf("the ready file outlived the last proxy: %v", err)
	}
	if !strings.Contains(third.output(), "graceful shutdown") {
		t.Errorf("no graceful shutdown in the log:\n%s", third.output())
	}
}

// TestProxySighupReload: SIGHUP re-reads the config file: a valid change
// is applied (the admin console's generation and setting move on), an
// invalid file is rejected with the reason and the running config keeps
// serving.
func TestProxySighupReload(t *testing.T) {
	bin := buildPgshard(t)
	m, _ := proxyTestDB(t)
	dir := t.TempDir()
	section := "  listen: 127.0.0.1:0\n  admin_users: [postgres]\n  pool_size: %d\n"
	cfg := writeProxyConfig(t, dir, m, fmt.Sprintf(section, 5))
	ready := filepath.Join(dir, "proxy.json")
	p := startProxyProc(t, bin, cfg, ready)
	r, err := readReady(ready)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dbname := strings.TrimPrefix(mustParse(t, m.Shards[0].DSN).Path, "/")
	data, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", r.Addr, dbname))
	if err != nil {
		t.Fatal(err)
	}
	defer data.Close(ctx)
	acfg, _ := pgx.ParseConfig(fmt.Sprintf("postgres://postgres@%s/pgshard?sslmode=disable", r.Addr))
	acfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	admin, err := pgx.ConnectConfig(ctx, acfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	setting := func(key string) string {
		rows, err := admin.Query(ctx, "SHOW CONFIG")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var k, v, d, c string
			if err := rows.Scan(&k, &v, &d, &c); err != nil {
				t.Fatal(err)
			}
			if k == key {
				return v
			}
		}
		t.Fatalf("SHOW CONFIG has no %s", key)
		return ""
	}
	writeProxyConfig(t, dir, m, fmt.Sprintf(section, 7))
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return setting("generation") == "2" })
	if v := setting("pool_size"); v != "7" {
		t.Fatalf("pool_size %s after SIGHUP, want 7", v)
	}
	if err := os.WriteFile(cfg, []byte("proxy:\n  pool_size: -3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(p.output(), "reload rejected") })
	if !strings.Contains(p.output(), "pool_size") {
		t.Errorf("the rejection does not give the reason:\n%s", p.output())
	}
	if g := setting("generation"); g != "2" {
		t.Fatalf("generation %s after a rejected reload", g)
	}
	var n int
	if err := data.QueryRow(ctx, "SELECT count(*) FROM pgbench_accounts WHERE aid = 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("a session across two reloads: %d %v", n, err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.waitExit(t, 30*time.Second)
}

// TestDevProxyOps: dev up --proxy --tls runs the proxy with the admin
// console, metrics and TLS; dev status --json reports admin_dsn,
// metrics_url and the CA; the console answers SHOW SHARDS, the metrics
// endpoint serves pgshard's series, a client verifies the proxy's
// certificate, and the shards' PostgreSQL has TLS on.
func TestDevProxyOps(t *testing.T) {
	if err := cluster.Local().(cluster.SpecChecker).AvailableFor(context.Background(), cluster.Spec{PgBouncer: true}); err != nil {
		clustertest.SkipOrFail(t, err)
	}
	bin := buildPgshard(t)
	dir := clustertest.Dir(t)
	r := mustRun(t, "", "dev", "up", "--dir", dir, "--shards", "2", "--fsync=false", "--proxy", "--tls", "--proxy-bin", bin)
	defer mustRun(t, "", "dev", "down", "--dir", dir)
	for _, want := range []string{"admin console: postgres://", "metrics: http://", "TLS (allow)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dev up output lacks %q:\n%s", want, r.stdout)
		}
	}
	var st struct {
		ProxyDSN   string `json:"proxy_dsn"`
		AdminDSN   string `json:"admin_dsn"`
		MetricsURL string `json:"metrics_url"`
		ProxyTLS   string `json:"proxy_tls"`
		TLSCA      string `json:"tls_ca"`
		Shards     []struct {
			DSN string `json:"dsn"`
		} `json:"shards"`
	}
	raw := mustRun(t, "", "dev", "status", "--dir", dir, "--json").stdout
	if err := json.Unmarshal([]byte(raw), &st); err != nil || st.AdminDSN == "" || st.MetricsURL == "" || st.TLSCA == "" || st.ProxyTLS != "allow" {
		t.Fatalf("dev status --json: %v\n%s", err, raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acfg, err := pgx.ParseConfig(st.AdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	acfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	admin, err := pgx.ConnectConfig(ctx, acfg)
	if err != nil {
		t.Fatalf("admin console: %v", err)
	}
	rows, err := admin.Query(ctx, "SHOW SHARDS")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	admin.Close(ctx)
	if n != 2 {
		t.Fatalf("SHOW SHARDS: %d rows", n)
	}
	resp, err := http.Get(st.MetricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(body, []byte("pgshard_build_info")) || !bytes.Contains(body, []byte(`pgshard_proxy_shard_up{shard="shard1"} 1`)) {
		t.Fatalf("metrics:\n%s", body)
	}
	verify := strings.Replace(st.ProxyDSN, "sslmode=disable", "sslmode=verify-full&sslrootcert="+st.TLSCA, 1)
	conn, err := pgx.Connect(ctx, verify)
	if err != nil {
		t.Fatalf("the proxy with sslmode=verify-full: %v", err)
	}
	var k int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM executions").Scan(&k); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	shard := strings.Replace(st.Shards[0].DSN, "sslmode=disable", "sslmode=verify-full&sslrootcert="+st.TLSCA, 1)
	sc, err := pgx.Connect(ctx, shard)
	if err != nil {
		t.Fatalf("shard0's PostgreSQL with sslmode=verify-full: %v", err)
	}
	sc.Close(ctx)
}

func mustParse(t *testing.T, dsn string) *urlParts {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return &urlParts{Path: "/" + cfg.Database}
}

type urlParts struct{ Path string }

func lookPath(t *testing.T, name string, paths ...string) string {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		clustertest.SkipOrFail(t, fmt.Errorf("%s is not installed: %v", name, err))
	}
	return p
}

func waitFor(t *testing.T, d time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
