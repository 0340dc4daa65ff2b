package proxy_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/proxy"
)

// TestShardDownHealth: one private cluster (2 shards behind PgBouncer) for
// the health contract (ARCHITECTURE.md §4): a proxy starts with a shard down
// (regression: PgBouncer's 08P01 "server login has been failing" on the
// identity read used to stop the start as a map/shard disagreement), and
// under pgbench load a stopped shard fails only its own clients, fast,
// while the other shard's clients keep their throughput, and everything
// recovers by itself.
func TestShardDownHealth(t *testing.T) {
	c := clustertest.Private(t, cluster.Spec{Shards: 2, PgBouncer: true})
	d, err := newTestDB(c, "healthtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("start with a shard down behind PgBouncer", func(t *testing.T) { startWithShardDown(t, c, d) })
	t.Run("pgbench", func(t *testing.T) { pgbenchShardDown(t, c, d) })
}

func startWithShardDown(t *testing.T, c *cluster.Cluster, d *testDB) {
	ctx := ctxT(t, 2*time.Minute)
	// PgBouncer has served the database before (as in production): it
	// knows the server's parameters, so logins succeed without a server.
	if err := execDirect(ctx, d.m.Shards[1].PoolerDSN, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if err := c.StopShard(ctx, 1, cluster.Fast); err != nil {
		t.Fatal(err)
	}
	started := false
	defer func() {
		if !started {
			_ = c.StartShard(context.Background(), 1)
		}
	}()
	// A shard in crash recovery answers every login with FATAL 57P03 "the
	// database system is starting up"; PgBouncer then fails its clients'
	// queries with 08P01 "server login has been failing".
	stopFake := startingUpServer(t, net.JoinHostPort(c.Shard(1).Host, strconv.Itoa(c.Shard(1).Port)))
	// A first client meets the failing logins (PgBouncer keeps it waiting
	// for a server; it gives up after a second).
	wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	_ = execDirect(wctx, d.m.Shards[1].PoolerDSN, "SELECT 1")
	cancel()
	// Now the identity read through shard1's PgBouncer logs in and fails
	// with 08P01, which the proxy took for a disagreement.
	conn, err := pgx.Connect(ctx, d.m.Shards[1].PoolerDSN)
	if err == nil {
		var name string
		err = conn.QueryRow(ctx, "SELECT shard_name FROM pgshard_identity").Scan(&name)
		conn.Close(ctx)
	}
	if pgCode(err) != "08P01" || !strings.Contains(err.Error(), "server login has been failing") {
		t.Fatalf("the identity read through shard1's PgBouncer with the shard starting up: %v; the regression needs 08P01 \"server login has been failing\"", err)
	}
	an, err := newRouter(d.m)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := proxy.New(proxy.Config{Map: d.m, Analyzer: an, UsePooler: true, VerifyIdentity: true,
		Users: []proxy.User{{Name: "postgres", Trust: true}}, ConnectTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	down, err := srv.Verify(ctx)
	if err != nil || len(down) != 1 || down[0] != "shard1" {
		t.Fatalf("Verify with shard1 down behind PgBouncer: down %v, err %v; want [shard1] and no error", down, err)
	}
	e := startProxyFor(t, d)
	cn := e.connect(t)
	k0, k1 := d.keysOn(0, 1, 36_000_000)[0], d.keysOn(1, 1, 36_000_000)[0]
	if _, err := cn.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k0); err != nil {
		t.Fatalf("shard0 with shard1 down: %v", err)
	}
	if _, err := cn.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k1); pgCode(err) != "08006" || !strings.Contains(err.Error(), "shard1") {
		t.Fatalf("shard1 while down: %v, want 08006 naming shard1", err)
	}
	if _, err := cn.Exec(ctx, "SELECT count(*) FROM accounts"); err == nil || !strings.Contains(err.Error(), "shard1") {
		t.Fatalf("a fan-out with shard1 down: %v, want an error naming shard1", err)
	}
	stopFake()
	if err := c.StartShard(ctx, 1); err != nil {
		t.Fatal(err)
	}
	started = true
	pollOK(t, 30*time.Second, func() error {
		_, err := cn.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k1)
		return err
	})
}

// startingUpServer listens on addr and answers every startup packet as a
// PostgreSQL in crash recovery does (FATAL 57P03), until the returned
// function is called.
func startingUpServer(t *testing.T, addr string) func() {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on the stopped shard's address %s: %v", addr, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				var hdr [4]byte
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					return
				}
				body := make([]byte, int(binary.BigEndian.Uint32(hdr[:]))-4)
				if _, err := io.ReadFull(c, body); err != nil {
					return
				}
				msg, _ := (&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P03",
					Message: "the database system is starting up"}).Encode(nil)
				_, _ = c.Write(msg)
			}()
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { ln.Close(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// pollOK calls f until it returns nil, failing the test after d.
func pollOK(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not recovered after %s: %v", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// benchScript writes a pgbench script whose transactions touch only the
// given keys (a CASE over a random index: real keyed routing, one shard).
func benchScript(t *testing.T, dir, name string, keys []int64) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "\\set r random(0, %d)\n\\set aid case", len(keys)-1)
	for i, k := range keys {
		fmt.Fprintf(&b, " when :r = %d then %d", i, k)
	}
	b.WriteString(" else 0 end\n")
	b.WriteString("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n")
	b.WriteString("SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n")
	path := filepath.Join(dir, name+".sql")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// benchRun is one pgbench run's outcome.
type benchRun struct {
	out      string
	err      error
	tps      float64   // pgbench's "tps = " (excluding connections)
	progress []float64 // tps of each second (-P 1)
	ended    time.Time
}

var (
	tpsRe      = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)
	progressRe = regexp.MustCompile(`(?m)^progress: ([0-9.]+) s, ([0-9.]+) tps`)
)

// pgbench runs pgbench with a script for secs seconds.
func pgbench(ctx context.Context, bin, dsn, script string, clients, secs int) benchRun {
	cmd := exec.CommandContext(ctx, bin, "-n", "-M", "extended", "-c", strconv.Itoa(clients), "-j", "1",
		"-T", strconv.Itoa(secs), "-P", "1", "-f", script, dsn)
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=10")
	out, err := cmd.CombinedOutput()
	r := benchRun{out: string(out), err: err, ended: time.Now()}
	if m := tpsRe.FindStringSubmatch(r.out); m != nil {
		r.tps, _ = strconv.ParseFloat(m[1], 64)
	}
	for _, m := range progressRe.FindAllStringSubmatch(r.out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		r.progress = append(r.progress, v)
	}
	return r
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func pgbenchShardDown(t *testing.T, c *cluster.Cluster, d *testDB) {
	bin := needBinary(t, "pgbench", "/usr/lib/postgresql/15/bin/pgbench")
	ctx := ctxT(t, 5*time.Minute)
	e := startProxyFor(t, d, func(cfg *proxy.Config) { cfg.ConnectTimeout = 3 * time.Second })
	keys := [2][]int64{d.keysOn(0, 40, 37_000_000), d.keysOn(1, 40, 37_000_000)}
	conn := e.connect(t)
	for _, ks := range keys {
		for _, k := range ks {
			if _, err := conn.Exec(ctx, "INSERT INTO pgbench_accounts (aid, bid, abalance) VALUES ($1, 1, 0) ON CONFLICT DO NOTHING", k); err != nil {
				t.Fatal(err)
			}
		}
	}
	dir := t.TempDir()
	scripts := [2]string{benchScript(t, dir, "shard0", keys[0]), benchScript(t, dir, "shard1", keys[1])}
	const clients = 4
	both := func(secs int) [2]benchRun {
		var out [2]benchRun
		var wg sync.WaitGroup
		for i := range out {
			wg.Add(1)
			go func() { defer wg.Done(); out[i] = pgbench(ctx, bin, e.dsn, scripts[i], clients, secs) }()
		}
		wg.Wait()
		return out
	}

	before := both(6)
	for i, r := range before {
		if r.err != nil || r.tps == 0 {
			t.Fatalf("before: shard%d's pgbench: %v\n%s", i, r.err, r.out)
		}
	}

	// During: stop shard0 two seconds into the runs.
	var during [2]benchRun
	var wg sync.WaitGroup
	for i := range during {
		wg.Add(1)
		go func() { defer wg.Done(); during[i] = pgbench(ctx, bin, e.dsn, scripts[i], clients, 10) }()
	}
	time.Sleep(2 * time.Second)
	stopped := time.Now()
	if err := c.StopShard(ctx, 0, cluster.Immediate); err != nil {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			_ = c.StartShard(context.Background(), 0)
		}
	}()
	wg.Wait()
	failFast := during[0].ended.Sub(stopped)
	if during[0].err == nil {
		t.Errorf("shard0's pgbench did not fail with shard0 stopped:\n%s", during[0].out)
	}
	if !strings.Contains(during[0].out, "shard0") {
		t.Errorf("shard0's clients' errors do not name shard0:\n%s", during[0].out)
	}
	// They failed rather than waited: before their run's remaining 8 s
	// would have ended it (a held client runs until the shard is back).
	if failFast > 8*time.Second {
		t.Errorf("shard0's clients took %s to fail after the stop (want before their run ended)", failFast.Round(time.Millisecond))
	}
	if during[1].err != nil {
		t.Fatalf("shard1's pgbench failed while shard0 was down: %v\n%s", during[1].err, during[1].out)
	}
	// shard1's throughput after the stop (from second 4 on: the stop was
	// at 2 s, leave a second for it to settle).
	var after1 []float64
	if len(during[1].progress) > 4 {
		after1 = during[1].progress[4:]
	}
	// shard1 keeps serving: its clients made progress after the stop. How
	// its rate compares with before is speed (logged below, not asserted).
	duringTPS := mean(after1)
	beforeTPS := before[1].tps
	if !(duringTPS > 0) {
		t.Errorf("shard1 served nothing with shard0 down (progress %v; before %.0f tps)", during[1].progress, beforeTPS)
	}
	// The proxy's own answer for shard0: 08006 naming it, at once.
	k0 := keys[0][0]
	start := time.Now()
	_, err := conn.Exec(ctx, "SELECT abalance FROM pgbench_accounts WHERE aid = $1", k0)
	// Fast: without waiting out the 3 s connect timeout.
	if pgCode(err) != "08006" || !strings.Contains(err.Error(), "shard0") || time.Since(start) >= 3*time.Second {
		t.Errorf("a shard0 transaction while it is down: %v after %s; want 08006 naming shard0, before the connect timeout", err, time.Since(start))
	}

	// After: the shard is back; the proxy recovers by itself.
	if err := c.StartShard(ctx, 0); err != nil {
		t.Fatal(err)
	}
	restarted = true
	recoveredIn := time.Now()
	pollOK(t, 30*time.Second, func() error {
		_, err := conn.Exec(ctx, "SELECT abalance FROM pgbench_accounts WHERE aid = $1", k0)
		return err
	})
	recovery := time.Since(recoveredIn)
	after := both(6)
	for i, r := range after {
		if r.err != nil || r.tps == 0 {
			t.Fatalf("after: shard%d's pgbench: %v\n%s", i, r.err, r.out)
		}
	}
	t.Logf("pgbench through the proxy, %d clients per shard, keyed UPDATE+SELECT:\n"+
		"  before:  shard0 %.0f tps, shard1 %.0f tps\n"+
		"  during (shard0 stopped): shard0's clients all failed %s after the stop; shard1 %.0f tps (%.0f%% of before)\n"+
		"  after (shard0 restarted, usable %s after its start): shard0 %.0f tps, shard1 %.0f tps",
		clients, before[0].tps, before[1].tps, failFast.Round(time.Millisecond), duringTPS, 100*duringTPS/beforeTPS,
		recovery.Round(time.Millisecond), after[0].tps, after[1].tps)
}
