package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
)

// helperDirEnv makes the test binary a helper process that starts a cluster
// in the directory it names and exits, leaving the cluster running (like
// `pgshard dev up`).
const helperDirEnv = "PGSHARD_CLUSTER_TEST_HELPER_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperDirEnv); dir != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := cluster.Up(ctx, dir, cluster.Spec{Shards: 2, PgBouncer: true}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(clustertest.Main(m))
}

// requireLocal skips (or fails, in CI) unless the local provider can run spec.
func requireLocal(t *testing.T, spec cluster.Spec) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL; skipped in -short mode")
	}
	if err := cluster.Local().(cluster.SpecChecker).AvailableFor(context.Background(), spec); err != nil {
		clustertest.SkipOrFail(t, err)
	}
}

// testLog sends a cluster's progress lines to t.Log.
type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Helper()
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func queryInt(ctx context.Context, t *testing.T, dsn, sql string) int64 {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	defer conn.Close(ctx)
	var v int64
	if err := conn.QueryRow(ctx, sql).Scan(&v); err != nil {
		t.Fatalf("%s on %s: %v", sql, dsn, err)
	}
	return v
}

// eventually polls f every 50ms until it returns nil or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, d, err)
		}
		<-tick.C
	}
}

func ping(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "SELECT 1").ReadAll()
	return err
}

// procsMentioning lists live processes whose command line contains s.
func procsMentioning(s string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(s)) {
			continue
		}
		out = append(out, fmt.Sprintf("%d %s", pid, bytes.ReplaceAll(bytes.TrimRight(b, "\x00"), []byte{0}, []byte{' '})))
	}
	return out
}

// pidInfo is a process identified by PID and start time.
type pidInfo struct {
	pid   int
	start string
}

func stat(pid int) (state string, ppid int, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, "", false
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	ppid, _ = strconv.Atoi(f[1])
	return f[0], ppid, f[19], true
}

// alive: the process runs (a zombie does not count) and is the same one.
func (p pidInfo) alive() bool {
	st, _, start, ok := stat(p.pid)
	return ok && start == p.start && st != "Z" && st != "X"
}

// family returns pid and its children (a postmaster's backends and
// auxiliary processes).
func family(pid int) []pidInfo {
	var out []pidInfo
	if _, _, start, ok := stat(pid); ok {
		out = append(out, pidInfo{pid, start})
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ppid, start, ok := stat(n); ok && ppid == pid && st != "Z" {
			out = append(out, pidInfo{n, start})
		}
	}
	return out
}

func assertGone(t *testing.T, procs []pidInfo, what string) {
	t.Helper()
	for _, p := range procs {
		if p.alive() {
			// Say what it is: a process that outlives Down is a leak
			// worth naming (its command line, state and parent).
			st, ppid, _, _ := stat(p.pid)
			cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cmdline")
			t.Errorf("%s: pid %d is still running (state %s, parent %d): %s", what, p.pid, st, ppid, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}))
		}
	}
}

func assertNothingRuns(t *testing.T, dir string) {
	t.Helper()
	if left := procsMentioning(dir); len(left) > 0 {
		t.Errorf("processes still mention %s:\n%s", dir, strings.Join(left, "\n"))
	}
}

// TestLocalLifecycle walks a 3-shard cluster with PgBouncer through start,
// reuse, every fault hook, a restart after a crash, and Down.
func TestLocalLifecycle(t *testing.T) {
	spec := cluster.Spec{Shards: 3, PgBouncer: true, Roles: []string{"app"}}
	requireLocal(t, spec)
	ctx := ctxFor(t, 5*time.Minute)
	dir := clustertest.Dir(t)
	spec.Log = testLog{t}

	begin := time.Now()
	c, err := cluster.Up(ctx, dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("up in %v", time.Since(begin))
	if c.Provider != "local" || c.Dir != dir || len(c.Shards) != 3 {
		t.Fatalf("cluster = %+v", c)
	}
	for i, s := range c.Shards {
		if s.Name != "shard"+strconv.Itoa(i) || s.Ordinal != i || s.Host != "127.0.0.1" || s.PID == 0 || s.PoolerPID == 0 || s.Port == 0 || s.PoolerPort == 0 {
			t.Errorf("shard %d = %+v", i, s)
		}
		if got := queryInt(ctx, t, s.DSN("pgshard", "postgres"), "SELECT 1"); got != 1 {
			t.Errorf("%s: SELECT 1 = %d", s.Name, got)
		}
		if got := queryInt(ctx, t, s.PoolerDSN("pgshard", "app"), "SELECT 1"); got != 1 {
			t.Errorf("%s pooler as app: SELECT 1 = %d", s.Name, got)
		}
		if got := queryInt(ctx, t, s.DSN("pgshard", "postgres"), "SELECT count(*) FROM pg_settings WHERE name = 'fsync' AND setting = 'off'"); got != 1 {
			t.Errorf("%s: fsync is not off", s.Name)
		}
	}
	t.Run("transaction pooling", func(t *testing.T) { checkTransactionPooling(ctx, t, c.Shards[0]) })

	m, err := c.Map(64)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Shards) != 3 || m.Shards[1].DSN != c.Shards[1].DSN("pgshard", "postgres") || m.Shards[1].PoolerDSN != c.Shards[1].PoolerDSN("pgshard", "postgres") {
		t.Errorf("map shards = %+v", m.Shards)
	}
	for _, st := range c.Status(ctx) {
		if !st.Postgres.Alive || !st.Postgres.Ready || !st.Pooler.Alive || !st.Pooler.Ready {
			t.Errorf("status %+v", st)
		}
	}

	// A second Up reuses the running servers.
	c2, err := cluster.Up(ctx, dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Shards {
		if c2.Shards[i] != c.Shards[i] {
			t.Errorf("reuse: shard %d = %+v, want %+v", i, c2.Shards[i], c.Shards[i])
		}
	}
	loaded, err := cluster.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Shards[2] != c.Shards[2] || loaded.Spec.Shards != 3 || !loaded.Spec.PgBouncer {
		t.Errorf("Load: %+v", loaded)
	}

	// Another shape in the same directory is refused.
	for _, other := range []cluster.Spec{{Shards: 2, PgBouncer: true}, {Shards: 3}} {
		_, err := cluster.Up(ctx, dir, other)
		if err == nil || !strings.Contains(err.Error(), "--purge") || !strings.Contains(err.Error(), "3 shards with PgBouncer") {
			t.Errorf("Up with %d shards, PgBouncer %v on an existing cluster: err = %v, want one saying to purge", other.Shards, other.PgBouncer, err)
		} else {
			t.Log(err)
		}
	}

	t.Run("stop and start shard", func(t *testing.T) { checkStopStartShard(ctx, t, c) })
	t.Run("stop and start pooler", func(t *testing.T) { checkStopStartPooler(ctx, t, c) })

	// Everything killed (a crash, a reboot): Up restarts it on the same
	// ports, except where a port was taken meanwhile. Shard 0's PgBouncer
	// survives, pointing at the old port: Up restarts it with a new config.
	for i := range c.Shards {
		if i > 0 {
			if err := c.StopPooler(ctx, i, cluster.Kill); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.StopShard(ctx, i, cluster.Kill); err != nil {
			t.Fatal(err)
		}
	}
	for i, st := range c.Status(ctx) {
		if st.Postgres.Alive || st.Postgres.Ready || st.Pooler.Alive != (i == 0) || st.Pooler.Ready {
			t.Errorf("after kill: status %+v", st)
		}
	}
	pooler0 := c.Shards[0].PoolerPID
	squatter, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Shards[0].Port)))
	if err != nil {
		t.Fatal(err)
	}
	c3, err := cluster.Up(ctx, dir, spec)
	squatter.Close()
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range c3.Shards {
		if s.PoolerPort != c2.Shards[i].PoolerPort || s.PID == 0 || s.PID == c2.Shards[i].PID || s.PoolerPID == 0 || s.PoolerPID == pooler0 {
			t.Errorf("restart: shard %d = %+v, was %+v", i, s, c2.Shards[i])
		}
		if samePort := s.Port == c2.Shards[i].Port; samePort != (i > 0) {
			t.Errorf("restart: shard %d on port %d, was %d", i, s.Port, c2.Shards[i].Port)
		}
		if err := ping(ctx, s.PoolerDSN("pgshard", "postgres")); err != nil {
			t.Errorf("restart: %s pooler: %v", s.Name, err)
		}
	}

	// Down stops every process, backends included.
	var procs []pidInfo
	for _, s := range c3.Shards {
		procs = append(procs, family(s.PID)...)
		procs = append(procs, family(s.PoolerPID)...)
	}
	if len(procs) < 3*5 {
		t.Fatalf("found only %d server processes: %+v", len(procs), procs)
	}
	if err := c3.Down(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(t, procs, "after Down")
	assertNothingRuns(t, dir)
	for i, s := range c3.Shards {
		if s.PID != 0 || s.PoolerPID != 0 {
			t.Errorf("after Down: shard %d = %+v", i, s)
		}
	}
	// The package-level Down finds nothing to do, then purges.
	if err := cluster.Down(ctx, dir, false); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Down(ctx, dir, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Down --purge: stat %s: %v", dir, err)
	}
	if _, err := cluster.Load(dir); !errors.Is(err, cluster.ErrNoCluster) || !strings.Contains(err.Error(), "pgshard dev up") {
		t.Errorf("Load after purge: %v", err)
	}
	if err := cluster.Down(ctx, dir, true); err != nil {
		t.Errorf("Down of a missing directory: %v", err)
	}
}

// TestOutlivesStarter: a cluster started by a process that exits keeps
// running; another process finds it by its state file, injects faults and
// stops it by PID.
func TestOutlivesStarter(t *testing.T) {
	spec := cluster.Spec{Shards: 2, PgBouncer: true}
	requireLocal(t, spec)
	ctx := ctxFor(t, 3*time.Minute)
	dir := clustertest.Dir(t)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperDirEnv+"="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	c, err := cluster.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var procs []pidInfo
	for _, st := range c.Status(ctx) {
		if !st.Postgres.Ready || !st.Pooler.Ready {
			t.Fatalf("after the starter exited: %+v", st)
		}
		if _, ppid, _, _ := stat(st.Postgres.PID); ppid == os.Getpid() {
			t.Fatalf("postgres %d is our child", st.Postgres.PID)
		}
		procs = append(procs, family(st.Postgres.PID)...)
		procs = append(procs, family(st.Pooler.PID)...)
	}
	for _, mode := range []cluster.StopMode{cluster.Fast, cluster.Kill} {
		if err := c.StopShard(ctx, 1, mode); err != nil {
			t.Fatal(err)
		}
		if err := c.StartShard(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := c.RestartPooler(ctx, 0, mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range c.Shards {
		procs = append(procs, family(s.PID)...)
		procs = append(procs, family(s.PoolerPID)...)
		if err := ping(ctx, s.PoolerDSN("pgshard", "postgres")); err != nil {
			t.Error(err)
		}
	}
	if err := cluster.Down(ctx, dir, false); err != nil {
		t.Fatal(err)
	}
	assertGone(t, procs, "after Down")
	assertNothingRuns(t, dir)
}

// checkTransactionPooling proves the pooler runs in transaction mode: its
// config says so, and a client's consecutive transactions do not keep one
// server connection (PgBouncer hands out the most recently released one).
func checkTransactionPooling(ctx context.Context, t *testing.T, s cluster.Shard) {
	admin, err := pgconn.Connect(ctx, s.PoolerDSN("pgbouncer", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	res, err := admin.Exec(ctx, "SHOW CONFIG").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	conf := map[string]string{}
	for _, row := range res[0].Rows {
		conf[string(row[0])] = string(row[1])
	}
	for k, want := range map[string]string{"pool_mode": "transaction", "listen_addr": "127.0.0.1", "max_client_conn": "2000", "default_pool_size": "20", "ignore_startup_parameters": ""} {
		if conf[k] != want {
			t.Errorf("pgbouncer %s = %q, want %q", k, conf[k], want)
		}
	}

	dsn := s.PoolerDSN("pgshard", "postgres")
	a, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	b, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	pid := func(c *pgx.Conn) (p int) {
		if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tx, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var x int
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&x); err != nil {
		t.Fatal(err)
	}
	y := pid(b) // a holds x, so b gets another server connection
	if x == y {
		t.Fatalf("two clients shared server %d while one was in a transaction", x)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := pid(b); got != x { // x was released last
		t.Errorf("b's next transaction ran on server %d, want %d (released by a): not transaction pooling?", got, x)
	}
}

func checkStopStartShard(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	const i = 1
	direct := c.Shards[i].DSN("pgshard", "postgres")
	conn, err := pgx.Connect(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE acked (n int)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	port := c.Shards[i].Port
	for n, mode := range []cluster.StopMode{cluster.Fast, cluster.Immediate, cluster.Kill} {
		t.Run(mode.String(), func(t *testing.T) {
			if _, err := pgxExec(ctx, direct, fmt.Sprintf("INSERT INTO acked VALUES (%d)", n)); err != nil {
				t.Fatal(err)
			}
			before := family(c.Shards[i].PID)
			if err := c.StopShard(ctx, i, mode); err != nil {
				t.Fatal(err)
			}
			assertGone(t, before, "after StopShard("+mode.String()+")")
			if c.Shards[i].PID != 0 {
				t.Errorf("PID after stop = %d", c.Shards[i].PID)
			}
			if err := ping(ctx, direct); err == nil {
				t.Fatal("shard still answers after StopShard")
			}
			if err := ping(ctx, c.Shards[0].DSN("pgshard", "postgres")); err != nil {
				t.Errorf("another shard is affected: %v", err)
			}
			if err := c.StartShard(ctx, i); err != nil {
				t.Fatal(err)
			}
			if c.Shards[i].Port != port || c.Shards[i].PID == 0 {
				t.Errorf("after start: %+v, want port %d", c.Shards[i], port)
			}
			// Every acknowledged commit survived, even a SIGKILL.
			if got := queryInt(ctx, t, direct, "SELECT count(*) FROM acked"); got != int64(n+1) {
				t.Errorf("after %s stop: %d rows, want %d", mode, got, n+1)
			}
			// The pooler reconnects to the restarted server.
			eventually(t, 30*time.Second, "query through the pooler after restart", func() error {
				return ping(ctx, c.Shards[i].PoolerDSN("pgshard", "postgres"))
			})
		})
	}
	// Starting a running shard is a no-op.
	pid := c.Shards[i].PID
	if err := c.StartShard(ctx, i); err != nil || c.Shards[i].PID != pid {
		t.Errorf("StartShard of a running shard: err %v, pid %d → %d", err, pid, c.Shards[i].PID)
	}
	if err := c.StopShard(ctx, 7, cluster.Fast); err == nil {
		t.Error("StopShard(7) on 3 shards succeeded")
	}
}

func pgxExec(ctx context.Context, dsn, sql string) (pgconn.CommandTag, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer conn.Close(ctx)
	return conn.Exec(ctx, sql)
}

func checkStopStartPooler(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	const i = 0
	pooled := c.Shards[i].PoolerDSN("pgshard", "postgres")
	port := c.Shards[i].PoolerPort
	for _, mode := range []cluster.StopMode{cluster.Fast, cluster.Immediate, cluster.Kill} {
		t.Run(mode.String(), func(t *testing.T) {
			pid := c.Shards[i].PoolerPID
			if err := c.StopPooler(ctx, i, mode); err != nil {
				t.Fatal(err)
			}
			assertGone(t, family(pid), "after StopPooler")
			if err := ping(ctx, pooled); err == nil {
				t.Fatal("pooler still answers after StopPooler")
			}
			if err := ping(ctx, c.Shards[i].DSN("pgshard", "postgres")); err != nil {
				t.Errorf("postgres is affected: %v", err)
			}
			if err := c.StartPooler(ctx, i); err != nil {
				t.Fatal(err)
			}
			if c.Shards[i].PoolerPort != port || c.Shards[i].PoolerPID == 0 || c.Shards[i].PoolerPID == pid {
				t.Errorf("after start: %+v", c.Shards[i])
			}
			if err := ping(ctx, pooled); err != nil {
				t.Error(err)
			}
		})
	}
	t.Run("restart", func(t *testing.T) {
		pid := c.Shards[i].PoolerPID
		if err := c.RestartPooler(ctx, i, cluster.Fast); err != nil {
			t.Fatal(err)
		}
		if c.Shards[i].PoolerPID == pid {
			t.Error("RestartPooler kept the PID")
		}
		if err := ping(ctx, pooled); err != nil {
			t.Error(err)
		}
	})
	t.Run("pooler starts while its shard is down", func(t *testing.T) {
		const j = 2
		if err := c.StopShard(ctx, j, cluster.Fast); err != nil {
			t.Fatal(err)
		}
		if err := c.StopPooler(ctx, j, cluster.Fast); err != nil {
			t.Fatal(err)
		}
		if err := c.StartPooler(ctx, j); err != nil {
			t.Fatal(err)
		}
		// PgBouncer queues the client while it retries the server: give up
		// early, the point is only that no query succeeds.
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if err := ping(short, c.Shards[j].PoolerDSN("pgshard", "postgres")); err == nil {
			t.Error("query through the pooler of a stopped shard succeeded")
		}
		if err := c.StartShard(ctx, j); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "query through the pooler", func() error {
			return ping(ctx, c.Shards[j].PoolerDSN("pgshard", "postgres"))
		})
	})
}

// cancelOn is a Log writer that cancels an Up when a line contains a marker.
type cancelOn struct {
	t      *testing.T
	marker string
	cancel context.CancelFunc
	once   sync.Once
}

func (w *cancelOn) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	if strings.Contains(string(p), w.marker) {
		w.once.Do(w.cancel)
	}
	return len(p), nil
}

// TestUpCancelled simulates Ctrl-C during Up at several points: Up returns
// the context's error and leaves nothing running.
func TestUpCancelled(t *testing.T) {
	spec := cluster.Spec{Shards: 2, PgBouncer: true}
	requireLocal(t, spec)
	for _, marker := range []string{"starting shard1 on", "postgres ready", "starting shard0 pgbouncer", "pgbouncer ready"} {
		t.Run(marker, func(t *testing.T) {
			dir := clustertest.Dir(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			s := spec
			s.Log = &cancelOn{t: t, marker: marker, cancel: cancel}
			c, err := cluster.Up(ctx, dir, s)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Up = %v, %v; want context.Canceled", c, err)
			}
			assertNothingRuns(t, dir)
			// The state says so, and a new Up brings the cluster up.
			loaded, err := cluster.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, sh := range loaded.Shards {
				if sh.PID != 0 || sh.PoolerPID != 0 {
					t.Errorf("state after cancel: %+v", sh)
				}
			}
			ctx2 := ctxFor(t, 2*time.Minute)
			c, err = cluster.Up(ctx2, dir, spec)
			if err != nil {
				t.Fatal(err)
			}
			if err := ping(ctx2, c.Shards[1].PoolerDSN("pgshard", "postgres")); err != nil {
				t.Error(err)
			}
			if err := c.Down(ctx2); err != nil {
				t.Fatal(err)
			}
			assertNothingRuns(t, dir)
		})
	}
}

// TestStartFailureShowsLog: a server that cannot start fails Up with its
// log's last lines, and Up leaves nothing running.
func TestStartFailureShowsLog(t *testing.T) {
	spec := cluster.Spec{Shards: 2, Settings: map[string]string{"shared_buffers": "lots"}}
	requireLocal(t, spec)
	dir := clustertest.Dir(t)
	ctx := ctxFor(t, 2*time.Minute)
	_, err := cluster.Up(ctx, dir, spec)
	if err == nil || !strings.Contains(err.Error(), "last lines of the log") || !strings.Contains(err.Error(), "shared_buffers") {
		t.Fatalf("Up with a bad setting: %v", err)
	}
	t.Log(err)
	assertNothingRuns(t, dir)
}

func TestSpecValidate(t *testing.T) {
	if err := (cluster.Spec{}).Validate(); err != nil {
		t.Errorf("zero spec: %v", err)
	}
	err := cluster.Spec{Shards: -1, Database: "a b", Roles: []string{"ok", "no;"}, Settings: map[string]string{"port": "1", "x\n": "y", "work_mem": "1\n"}}.Validate()
	for _, want := range []string{"Shards", "Database", "Roles[1]", "Settings[port]", `"x\n"`, "Settings[work_mem]"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want it to mention %s", err, want)
		}
	}
	if _, err := cluster.Up(context.Background(), t.TempDir(), cluster.Spec{Shards: 1025}); err == nil {
		t.Error("Up with 1025 shards succeeded")
	}
}

func TestStopModes(t *testing.T) {
	for _, m := range []cluster.StopMode{cluster.Fast, cluster.Immediate, cluster.Kill} {
		got, err := cluster.ParseStopMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseStopMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := cluster.ParseStopMode("gentle"); err == nil {
		t.Error("ParseStopMode(gentle) succeeded")
	}
}

func TestDSN(t *testing.T) {
	s := cluster.Shard{Host: "127.0.0.1", Port: 5433, PoolerPort: 6433}
	if got, want := s.DSN("db", "u"), "postgres://u@127.0.0.1:5433/db?sslmode=disable"; got != want {
		t.Errorf("DSN = %s, want %s", got, want)
	}
	if got, want := s.PoolerDSN("db", "u"), "postgres://u@127.0.0.1:6433/db?sslmode=disable"; got != want {
		t.Errorf("PoolerDSN = %s, want %s", got, want)
	}
	s.PoolerPort = 0
	if got := s.PoolerDSN("db", "u"); got != "" {
		t.Errorf("PoolerDSN without pooler = %q", got)
	}
}

func TestFindBinaries(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	t.Run("installed", func(t *testing.T) {
		b, err := cluster.FindBinaries(ctx, cluster.Spec{PgBouncer: true})
		if errors.Is(err, cluster.ErrNoBinaries) {
			clustertest.SkipOrFail(t, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", b)
		if b.Major < cluster.MinPostgresMajor || filepath.Dir(b.Postgres) != b.BinDir || filepath.Dir(b.Initdb) != b.BinDir || b.PgBouncer == "" {
			t.Errorf("FindBinaries = %+v", b)
		}
	})
	t.Run("explicit bin dir without binaries", func(t *testing.T) {
		dir := t.TempDir()
		_, err := cluster.FindBinaries(ctx, cluster.Spec{BinDir: dir})
		if !errors.Is(err, cluster.ErrNoBinaries) || !strings.Contains(err.Error(), dir) {
			t.Errorf("err = %v; want ErrNoBinaries naming %s", err, dir)
		}
	})
	t.Run("pg_config on PATH wins", func(t *testing.T) {
		bin := fakePostgres(t, "99.1")
		path := t.TempDir()
		writeScript(t, filepath.Join(path, "pg_config"), "echo "+bin)
		t.Setenv("PATH", path+":"+fakePostgres(t, "98.0")) // pg_config wins over postgres on PATH
		b, err := cluster.FindBinaries(ctx, cluster.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		if b.BinDir != bin || b.Major != 99 || b.Version != "postgres (PostgreSQL) 99.1" {
			t.Errorf("FindBinaries = %+v, want the fake PostgreSQL 99 in %s", b, bin)
		}
	})
	t.Run("postgres on PATH", func(t *testing.T) {
		bin := fakePostgres(t, "42.0")
		t.Setenv("PATH", bin)
		b, err := cluster.FindBinaries(ctx, cluster.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		if b.BinDir != bin || b.Major != 42 {
			t.Errorf("FindBinaries = %+v, want the fake PostgreSQL 42 in %s", b, bin)
		}
	})
	t.Run("too old", func(t *testing.T) {
		bin := fakePostgres(t, "9.6")
		if _, err := cluster.FindBinaries(ctx, cluster.Spec{BinDir: bin}); err == nil || !strings.Contains(err.Error(), "PostgreSQL 9") {
			t.Errorf("err = %v; want PostgreSQL 9 to be refused", err)
		}
	})
	t.Run("explicit pgbouncer missing", func(t *testing.T) {
		bin := fakePostgres(t, "15.2")
		_, err := cluster.FindBinaries(ctx, cluster.Spec{BinDir: bin, PgBouncer: true, PgBouncerBin: "/nonexistent/pgbouncer"})
		if !errors.Is(err, cluster.ErrNoBinaries) || !strings.Contains(err.Error(), "/nonexistent/pgbouncer") {
			t.Errorf("err = %v", err)
		}
	})
}

// fakePostgres makes a bin dir whose postgres prints version.
func fakePostgres(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	writeScript(t, filepath.Join(dir, "postgres"), "echo 'postgres (PostgreSQL) "+version+"'")
	writeScript(t, filepath.Join(dir, "initdb"), "exit 1")
	return dir
}

func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestContainers runs the testcontainers provider where a Docker engine is
// healthy; elsewhere it checks that the provider says why it cannot run, and
// skips.
func TestContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker; skipped in -short mode")
	}
	p := cluster.Containers()
	if p.Name() != "testcontainers" {
		t.Errorf("Name = %q", p.Name())
	}
	ctx := ctxFor(t, 5*time.Minute)
	spec := cluster.Spec{Shards: 2, PgBouncer: true, Log: testLog{t}}
	if err := p.Available(ctx); err != nil {
		if !errors.Is(err, cluster.ErrUnavailable) {
			t.Errorf("Available: %v does not wrap ErrUnavailable", err)
		}
		if _, uerr := p.Up(ctx, t.TempDir(), spec); !errors.Is(uerr, cluster.ErrUnavailable) {
			t.Errorf("Up without Docker: %v; want ErrUnavailable", uerr)
		}
		t.Skipf("testcontainers provider unavailable here: %v", err)
	}
	c, err := p.Up(ctx, t.TempDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Down(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	for _, s := range c.Shards {
		if err := ping(ctx, s.DSN("pgshard", "postgres")); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		if err := ping(ctx, s.PoolerDSN("pgshard", "postgres")); err != nil {
			t.Errorf("%s pooler: %v", s.Name, err)
		}
	}
	t.Run("transaction pooling", func(t *testing.T) { checkTransactionPooling(ctx, t, c.Shards[0]) })
	if err := c.StopShard(ctx, 0, cluster.Fast); !errors.Is(err, cluster.ErrNotSupported) {
		t.Errorf("StopShard: %v; want ErrNotSupported", err)
	}
}

// TestClustertest uses the shared-cluster helpers the other packages use.
func TestClustertest(t *testing.T) {
	spec := cluster.Spec{Shards: 3, PgBouncer: true}
	c := clustertest.GetSpec(t, spec)
	if again := clustertest.GetSpec(t, spec); again != c {
		t.Error("GetSpec started a second cluster for the same spec")
	}
	ctx := ctxFor(t, 2*time.Minute)
	var db string
	t.Run("a rather long test name that does not fit into a database name of sixty-three bytes", func(t *testing.T) {
		db = clustertest.FreshDatabase(t, c)
		if len(db) > 63 || !strings.HasPrefix(db, "t_testclustertest_a_rather_long") {
			t.Errorf("database name %q", db)
		}
		m, err := c.MapFor(db, 16)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range m.Shards {
			if _, err := pgxExec(ctx, s.PoolerDSN, "CREATE TABLE t (id text PRIMARY KEY)"); err != nil {
				t.Fatalf("%s: %v", s.Name, err)
			}
		}
	})
	for _, s := range c.Shards {
		if n := queryInt(ctx, t, s.DSN("postgres", "postgres"), "SELECT count(*) FROM pg_database WHERE datname = '"+db+"'"); n != 0 {
			t.Errorf("%s: database %s survived its test", s.Name, db)
		}
	}
}
