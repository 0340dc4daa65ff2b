package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
)

// devStatus is the part of `dev status --json` the tests read.
type devStatus struct {
	Dir    string `json:"dir"`
	Config string `json:"config"`
	Shards []struct {
		Name      string   `json:"name"`
		Ordinal   int      `json:"ordinal"`
		DSN       string   `json:"dsn"`
		PoolerDSN string   `json:"pooler_dsn"`
		Buckets   []int    `json:"buckets"`
		Ranges    [][2]int `json:"ranges"`
		PID       int      `json:"pid"`
		Ready     bool     `json:"ready"`
		PoolerPID int      `json:"pooler_pid"`
		PoolerOK  bool     `json:"pooler_ready"`
		// Unregistered: run by the cluster, not in the map.
		Unregistered bool `json:"unregistered"`
	} `json:"shards"`
}

func status(t *testing.T, dir string) devStatus {
	t.Helper()
	r := mustRun(t, "", "dev", "status", "--dir", dir, "--json")
	var st devStatus
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("dev status --json: %v\n%s", err, r.stdout)
	}
	return st
}

// The user's path: dev up, status, map bucket vs the live shards, migrate
// again, dev up again (reuse), dev down — and nothing left running.
func TestDevLifecycle(t *testing.T) {
	if err := cluster.Local().(cluster.SpecChecker).AvailableFor(context.Background(), cluster.Spec{PgBouncer: true}); err != nil {
		clustertest.SkipOrFail(t, err)
	}
	dir := clustertest.Dir(t)

	r := mustRun(t, "", "dev", "up", "--dir", dir, "--shards", "3", "--fsync=false")
	if !strings.Contains(r.stdout, "started 3-shard cluster") || !strings.Contains(r.stdout, "POOLER DSN") {
		t.Errorf("dev up output:\n%s", r.stdout)
	}
	st := status(t, dir)
	if len(st.Shards) != 3 || st.Config != filepath.Join(dir, "pgshard.yaml") {
		t.Fatalf("status: %+v", st)
	}
	next := 0
	for i, s := range st.Shards {
		if s.Name != fmt.Sprintf("shard%d", i) || s.Ordinal != i || !s.Ready || !s.PoolerOK || s.PoolerDSN == "" || s.PID == 0 {
			t.Errorf("shard %d: %+v", i, s)
		}
		if len(s.Buckets) != 2 || s.Buckets[0] != next || len(s.Ranges) != 1 {
			t.Errorf("shard %d buckets %v ranges %v, want one range starting at %d", i, s.Buckets, s.Ranges, next)
		}
		if len(s.Buckets) == 2 {
			next = s.Buckets[1] + 1
		}
	}
	if next != 4096 {
		t.Errorf("ranges end at %d, want 4096", next)
	}

	// `pgshard map bucket` agrees with SELECT pgshard_bucket(...) on every
	// shard, for every key.
	keys := make([]string, 0, 2000)
	for i := 0; i < 2000; i++ {
		keys = append(keys, fmt.Sprintf("%032x", uint64(i)*0x9e3779b97f4a7c15))
	}
	keys = append(keys, "", "ünïcødé", "日本語のキー")
	cfg := st.Config
	out := mustRun(t, strings.Join(keys, "\n")+"\n", "map", "bucket", "--config", cfg).stdout
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(keys) {
		t.Fatalf("%d lines for %d keys", len(lines), len(keys))
	}
	cliBucket := make([]int, len(keys))
	for i, l := range lines {
		f := strings.Split(l, "\t")
		b, err := strconv.Atoi(f[1])
		if err != nil || f[0] != keys[i] {
			t.Fatalf("line %q", l)
		}
		cliBucket[i] = b
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range st.Shards {
		for _, dsn := range []string{s.DSN, s.PoolerDSN} {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := conn.Query(ctx, `SELECT pgshard_bucket(k) FROM unnest($1::text[]) WITH ORDINALITY u(k, i) ORDER BY i`, keys)
			if err != nil {
				t.Fatal(err)
			}
			sqlBucket, err := pgx.CollectRows(rows, pgx.RowTo[int])
			conn.Close(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := range keys {
				if sqlBucket[i] != cliBucket[i] {
					t.Fatalf("%s (%s): key %q: pgshard map bucket says %d, pgshard_bucket() says %d", s.Name, dsn, keys[i], cliBucket[i], sqlBucket[i])
				}
			}
		}
	}

	r = mustRun(t, "", "migrate", "--config", cfg, "--via-pooler")
	if strings.Count(r.stdout, "verified") != 3 {
		t.Errorf("second migrate:\n%s", r.stdout)
	}

	r = mustRun(t, "", "dev", "up", "--dir", dir, "--shards", "3", "--fsync=false")
	if !strings.Contains(r.stdout, "reused 3-shard cluster") {
		t.Errorf("second dev up:\n%s", r.stdout)
	}
	again := status(t, dir)
	for i := range again.Shards {
		if again.Shards[i].PID != st.Shards[i].PID || again.Shards[i].PoolerPID != st.Shards[i].PoolerPID {
			t.Errorf("shard %d restarted on reuse: %d/%d -> %d/%d", i, st.Shards[i].PID, st.Shards[i].PoolerPID, again.Shards[i].PID, again.Shards[i].PoolerPID)
		}
	}
	if r := run(t, "", "dev", "up", "--dir", dir, "--shards", "5"); r.code == 0 || !strings.Contains(r.stderr, "shard") {
		t.Errorf("dev up with another shape: exit %d %q", r.code, r.stderr)
	}

	mustRun(t, "", "dev", "down", "--dir", dir)
	var pids []int
	for _, s := range st.Shards {
		pids = append(pids, s.PID, s.PoolerPID)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d still running after dev down", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if procs := processesMentioning(dir); len(procs) > 0 {
		t.Errorf("processes still mention %s: %v", dir, procs)
	}
	down := status(t, dir)
	for _, s := range down.Shards {
		if s.Ready || s.PoolerOK {
			t.Errorf("after dev down, %s still ready", s.Name)
		}
	}
}

func TestDevDownWithoutCluster(t *testing.T) {
	r := mustRun(t, "", "dev", "down", "--dir", filepath.Join(t.TempDir(), "none"))
	if !strings.Contains(r.stdout, "nothing to stop") {
		t.Errorf("%q", r.stdout)
	}
	r = run(t, "", "dev", "status", "--dir", t.TempDir())
	if r.code != 1 || !strings.Contains(r.stderr, "dev up") {
		t.Errorf("status without cluster: exit %d %q", r.code, r.stderr)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func processesMentioning(s string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), s) {
			out = append(out, fmt.Sprintf("%d: %s", pid, strings.ReplaceAll(string(cmd), "\x00", " ")))
		}
	}
	return out
}

// TestDevDirFound: without --dir, the dev commands find the cluster as git
// finds .git — from inside its directory (or a subdirectory of it), or
// from a directory at or below one holding .pgshard — and when there is
// none, the error names the path tried and the flag to pass.
func TestDevDirFound(t *testing.T) {
	// No cluster anywhere up from an empty directory.
	t.Chdir(t.TempDir())
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tried := filepath.Join(wd, ".pgshard")
	r := run(t, "", "dev", "status")
	if r.code == 0 || !strings.Contains(r.stderr, "no cluster in "+tried+":") || !strings.Contains(r.stderr, "pass --dir DIR") {
		t.Errorf("dev status without a cluster: exit %d, stderr %q; want the path %s and --dir", r.code, r.stderr, tried)
	}
	r = run(t, "", "dev", "status", "--dir", "nope")
	if r.code == 0 || !strings.Contains(r.stderr, "no cluster in "+filepath.Join(wd, "nope")+" (--dir nope)") {
		t.Errorf("dev status --dir nope: exit %d, stderr %q", r.code, r.stderr)
	}
	r = mustRun(t, "", "dev", "down")
	if !strings.Contains(r.stdout, "nothing to stop: "+tried+" does not exist") || !strings.Contains(r.stdout, "--dir") {
		t.Errorf("dev down without a cluster: %q", r.stdout)
	}

	if err := cluster.Local().(cluster.SpecChecker).AvailableFor(context.Background(), cluster.Spec{}); err != nil {
		clustertest.SkipOrFail(t, err)
	}
	dir := clustertest.Dir(t)
	mustRun(t, "", "dev", "up", "--dir", dir, "--shards", "1", "--pgbouncer=false", "--fsync=false")
	// P/.pgshard is the cluster (a link to it: its directory must be one
	// the postgres user reaches, which a test's TempDir is not).
	p := t.TempDir()
	if err := os.Symlink(dir, filepath.Join(p, ".pgshard")); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(p, "a", "b")
	inside := filepath.Join(dir, "inside")
	for _, d := range []string{sub, inside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ cwd, want string }{
		{dir, dir},                          // the cluster's directory itself
		{inside, dir},                       // below it
		{p, ".pgshard"},                     // beside .pgshard: unchanged
		{sub, filepath.Join(p, ".pgshard")}, // below a directory with .pgshard
	} {
		t.Chdir(c.cwd)
		r := mustRun(t, "", "dev", "status", "--json")
		var st devStatus
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("in %s: %v\n%s", c.cwd, err, r.stdout)
		}
		if st.Dir != c.want || len(st.Shards) != 1 {
			t.Errorf("dev status in %s: dir %q, %d shards; want %q, 1", c.cwd, st.Dir, len(st.Shards), c.want)
		}
	}
	// dev up reuses it, dev down stops it, from below.
	t.Chdir(inside)
	r = mustRun(t, "", "dev", "up", "--pgbouncer=false", "--fsync=false")
	if !strings.Contains(r.stdout, "reused 1-shard cluster in "+dir) {
		t.Errorf("dev up inside the cluster's directory:\n%s", r.stdout)
	}
	r = mustRun(t, "", "dev", "down")
	if !strings.Contains(r.stdout, "stopped the cluster in "+dir) {
		t.Errorf("dev down inside the cluster's directory: %q", r.stdout)
	}
}
