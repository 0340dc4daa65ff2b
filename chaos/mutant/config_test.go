package mutant_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/chaos/mutant"
	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// syncCommit returns synchronous_commit as a new session of each shard
// sees it.
func syncCommit(t *testing.T, m *shardmap.Map) []string {
	t.Helper()
	var out []string
	for i := range m.Shards {
		var v string
		if err := shardConn(t, m, i).QueryRow(ctxT(t), `SHOW synchronous_commit`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func allAre(vs []string, want string) bool {
	for _, v := range vs {
		if v != want {
			return false
		}
	}
	return len(vs) > 0
}

// TestSynchronousCommitOff, on a private cluster (it changes the servers'
// configuration and crashes a shard): Configure turns synchronous_commit
// off on every shard and restore turns it back on; then a shard crashed
// under load loses acknowledged commits with the mutant and none without.
func TestSynchronousCommitOff(t *testing.T) {
	c := clustertest.Private(t, cluster.Spec{Shards: 2})
	m := clustertest.MigratedMap(t, c)

	t.Run("configure", func(t *testing.T) {
		if got := syncCommit(t, m); !allAre(got, "on") {
			t.Fatalf("before: synchronous_commit %v, want on everywhere", got)
		}
		restore, err := mutant.Configure(ctxT(t), m, mutant.SynchronousCommitOff)
		if err != nil {
			t.Fatal(err)
		}
		if got := syncCommit(t, m); !allAre(got, "off") {
			t.Errorf("configured: synchronous_commit %v, want off everywhere", got)
		}
		if err := restore(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if got := syncCommit(t, m); !allAre(got, "on") {
			t.Errorf("restored: synchronous_commit %v, want on everywhere", got)
		}
		if err := restore(ctxT(t)); err != nil {
			t.Errorf("a second restore: %v", err)
		}
		noop, err := mutant.Configure(ctxT(t), m, "")
		if err != nil || noop(ctxT(t)) != nil || !allAre(syncCommit(t, m), "on") {
			t.Errorf("Configure(\"\") changed something or failed: %v", err)
		}
	})

	t.Run("crash loses acknowledged commits", func(t *testing.T) {
		if missing := crashUnderLoad(t, c, m); missing != 0 {
			t.Fatalf("control (synchronous_commit on): %d acknowledged commits lost in a crash", missing)
		}
		restore, err := mutant.Configure(ctxT(t), m, mutant.SynchronousCommitOff)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := restore(context.Background()); err != nil {
				t.Error(err)
			}
		})
		// The loss depends on where the crash falls in the WAL writer's
		// cycle: a few crashes, and one that loses nothing is retried.
		for round := 1; round <= 3; round++ {
			if missing := crashUnderLoad(t, c, m); missing > 0 {
				return
			}
		}
		t.Fatal("synchronous_commit = off: three crashes under load lost no acknowledged commit")
	})
}

// crashUnderLoad first-saves new executions on shard 0 from 8 goroutines,
// crashes the shard (immediate stop) once 300 were acknowledged, restarts
// it and returns how many acknowledged executions are missing.
func crashUnderLoad(t *testing.T, c *cluster.Cluster, m *shardmap.Map) int {
	t.Helper()
	ctx := ctxT(t)
	s, err := mutant.OpenStore(ctx, m, false, "", store.Options{ConnectAttempts: 1, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var onShard0 []string
	for _, id := range ids(uint64(time.Now().UnixNano()), 40000) {
		if m.ShardIndexForBucket(m.Bucket(id)) == 0 {
			onShard0 = append(onShard0, id)
		}
	}
	var (
		next  atomic.Int64
		mu    sync.Mutex
		acked []string
	)
	loadCtx, stop := context.WithCancel(ctx)
	defer stop()
	var g errgroup.Group
	for range 8 {
		g.Go(func() error {
			for loadCtx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(onShard0) {
					return errors.New("ran out of ids before the crash")
				}
				x := &store.Execution{ID: onShard0[i], DefinitionID: "def", Status: "running"}
				if err := s.Save(loadCtx, x); err != nil {
					return nil // the crash (or the end of the load)
				}
				mu.Lock()
				acked = append(acked, x.ID)
				mu.Unlock()
			}
			return nil
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 300 {
			break
		}
		if time.Now().After(deadline) {
			stop()
			_ = g.Wait()
			t.Fatalf("only %d commits acknowledged in 30 s", n)
		}
		<-tick.C
	}
	tick.Stop()
	if err := c.StopShard(ctx, 0, cluster.Immediate); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartShard(ctx, 0); err != nil {
		t.Fatal(err)
	}
	var present int
	if err := shardConn(t, m, 0).QueryRow(ctx, `SELECT count(*) FROM executions WHERE id = ANY($1)`, acked).Scan(&present); err != nil {
		t.Fatal(err)
	}
	t.Logf("crash under load: %d commits acknowledged, %d of them missing after recovery", len(acked), len(acked)-present)
	return len(acked) - present
}
