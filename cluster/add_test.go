package cluster_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
)

// TestAddShard grows a running 2-shard cluster: an add interrupted
// (Ctrl-C) leaves nothing running and is removed by an add of another
// name; an interrupted add is finished by running it again; the new shards
// run with the cluster's settings, Up reuses the grown cluster, a second
// add of a name fails clearly, and Down stops every shard.
func TestAddShard(t *testing.T) {
	spec := cluster.Spec{Shards: 2, PgBouncer: true, Roles: []string{"app"}, Settings: map[string]string{"work_mem": "7MB"}}
	requireLocal(t, spec)
	spec.Log = testLog{t}
	c := clustertest.Private(t, spec)
	ctx := ctxFor(t, 6*time.Minute)
	dir := c.Dir

	if _, _, err := cluster.AddShard(ctx, clustertest.Dir(t), "", testLog{t}); !errors.Is(err, cluster.ErrNoCluster) || !strings.Contains(err.Error(), "dev up") {
		t.Errorf("add to a directory without a cluster: %v", err)
	}
	if _, _, err := cluster.AddShard(ctx, dir, "bad/name", testLog{t}); err == nil || !strings.Contains(err.Error(), `name "bad/name"`) {
		t.Errorf("add with a bad name: %v", err)
	}

	// Interrupted once its postgres runs: nothing of it is left running,
	// and the state knows the shard (stopped).
	interrupted := func(name, marker string) {
		t.Helper()
		ictx, cancel := context.WithCancel(ctx)
		defer cancel()
		_, _, err := cluster.AddShard(ictx, dir, name, &cancelOn{t: t, marker: marker, cancel: cancel})
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "run the add again") {
			t.Fatalf("interrupted add of %s: %v, want context.Canceled and a hint", name, err)
		}
		assertNothingRuns(t, filepath.Join(dir, name)+"/")
		l, err := cluster.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		last := l.Shards[len(l.Shards)-1]
		if last.Name != name || last.PID != 0 || last.PoolerPID != 0 {
			t.Errorf("state after the interrupted add: %+v", last)
		}
	}
	interrupted("gone", "gone: postgres ready")

	// An add of another name removes the unfinished one first.
	c3, s2, err := cluster.AddShard(ctx, dir, "shard2", testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unfinished add's directory is still there: %v", err)
	}
	if len(c3.Shards) != 3 || s2.Name != "shard2" || s2.Ordinal != 2 || c3.Shards[2] != s2 || c3.Spec.Shards != 3 {
		t.Fatalf("after adding shard2: shard %+v, cluster shards %+v", s2, c3.Shards)
	}
	// Same settings as the others: the user's role, the extra setting,
	// the cluster's defaults; reachable through its PgBouncer.
	if err := ping(ctx, s2.PoolerDSN("pgshard", "app")); err != nil {
		t.Errorf("shard2 through its PgBouncer as app: %v", err)
	}
	for sql, want := range map[string]int64{
		"SELECT pg_size_bytes(current_setting('work_mem'))": 7 << 20,
		"SELECT current_setting('max_connections')::int":    300,
	} {
		if got := queryInt(ctx, t, s2.DSN("pgshard", "postgres"), sql); got != want {
			t.Errorf("shard2: %s = %d, want %d", sql, got, want)
		}
	}

	// Interrupted again, then finished by running it again (no name:
	// the unfinished add is the one to finish).
	interrupted("shard3", "starting shard3 pgbouncer")
	c4, s3, err := cluster.AddShard(ctx, dir, "", testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	if s3.Name != "shard3" || s3.Ordinal != 3 || len(c4.Shards) != 4 {
		t.Fatalf("finishing the interrupted add: %+v, %d shards", s3, len(c4.Shards))
	}
	for _, st := range c4.Status(ctx) {
		if !st.Postgres.Ready || !st.Pooler.Ready {
			t.Errorf("status of %s: %+v", st.Shard.Name, st)
		}
	}

	// A second add of a name fails clearly and changes nothing.
	if _, _, err := cluster.AddShard(ctx, dir, "shard2", testLog{t}); !errors.Is(err, cluster.ErrShardExists) || !strings.Contains(err.Error(), `already has a shard "shard2"`) {
		t.Errorf("second add of shard2: %v", err)
	}

	// Up reuses the grown cluster without restarting anything.
	grown := spec
	grown.Shards = 4
	up, err := cluster.Up(ctx, dir, grown)
	if err != nil {
		t.Fatal(err)
	}
	var procs []pidInfo
	for i, s := range up.Shards {
		if s.PID != c4.Shards[i].PID || s.PoolerPID != c4.Shards[i].PoolerPID {
			t.Errorf("Up restarted %s: %d/%d -> %d/%d", s.Name, c4.Shards[i].PID, c4.Shards[i].PoolerPID, s.PID, s.PoolerPID)
		}
		procs = append(procs, family(s.PID)...)
		procs = append(procs, family(s.PoolerPID)...)
	}

	// Down stops every shard, the added ones included.
	if err := up.Down(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(t, procs, "after Down")
	assertNothingRuns(t, dir)
}
