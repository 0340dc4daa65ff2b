package router_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// downBound is how long an operation on a stopped shard may take to fail.
// It is a correctness bound (a hang would be a bug: pgxpool would wait for
// the caller's deadline, PgBouncer for query_wait_timeout, 120 s), set far
// above the measured times (logged) so that a busy machine does not fail it.
const downBound = 20 * time.Second

// TestShardDown stops one shard's PostgreSQL (its PgBouncer keeps running):
// operations on the other shards keep working; operations that need the
// stopped shard fail quickly with an error naming it; fan-out reads fail as
// a whole naming it; after the shard starts again, everything works.
func TestShardDown(t *testing.T) {
	c := clustertest.Private(t, cluster.Spec{Shards: 2, PgBouncer: true})
	ctx := ctxT(t)
	m, err := c.Map(shardmap.DefaultBuckets)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, m, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	routers, switchers := map[string]*router.Router{}, map[string]*router.Router{}
	for _, mode := range modes {
		routers[mode] = openRouter(t, m, mode, store.Options{})
		switchers[mode] = openRouter(t, m, mode, store.Options{})
	}
	r0 := routers["direct"]
	// One execution on each shard, committed before the fault.
	ids := map[string]string{}
	for len(ids) < 2 {
		id := newID(t)
		if _, dup := ids[r0.ShardOf(id)]; dup {
			continue
		}
		ids[r0.ShardOf(id)] = id
		if err := r0.Commit(ctx, &store.Execution{ID: id, DefinitionID: "d"},
			[]store.Emit{{TargetID: id, Event: json.RawMessage(`{}`)}}, "", nil, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	up, down := ids["shard0"], ids["shard1"]
	outbox, err := r0.PendingOutbox(ctx, 0)
	if err != nil || len(outbox) != 2 {
		t.Fatalf("outbox before the fault: %v, %v", outbox, err)
	}
	var upSeq int64
	for _, o := range outbox {
		if o.TargetID == up {
			upSeq = o.Seq
		}
	}

	if err := c.StopShard(ctx, 1, cluster.Fast); err != nil {
		t.Fatal(err)
	}
	for _, mode := range modes {
		t.Run(mode+"/down", func(t *testing.T) {
			r := routers[mode]
			// The healthy shard serves keyed operations and acks.
			e, err := r.Load(ctx, up)
			if err != nil {
				t.Fatalf("load from the healthy shard: %v", err)
			}
			if err := r.Save(ctx, e); err != nil {
				t.Fatalf("commit on the healthy shard: %v", err)
			}
			// Operations on the stopped shard fail quickly, naming it.
			failing := map[string]func(context.Context) error{
				"load":   func(ctx context.Context) error { _, err := r.Load(ctx, down); return err },
				"commit": func(ctx context.Context) error { return r.Save(ctx, &store.Execution{ID: down, Version: 1}) },
				"outbox": func(ctx context.Context) error { _, err := r.PendingOutbox(ctx, 10); return err },
				"timers": func(ctx context.Context) error { _, err := r.DueTimers(ctx, 1e12, 10); return err },
				"list":   func(ctx context.Context) error { _, err := r.ListExecutions(ctx, store.ListOptions{}); return err },
			}
			for _, name := range []string{"load", "commit", "outbox", "timers", "list"} {
				opCtx, cancel := context.WithTimeout(ctx, 2*downBound) // a hang fails below, not here
				start := time.Now()
				err := failing[name](opCtx)
				took := time.Since(start)
				cancel()
				t.Logf("%s on the stopped shard failed after %v: %v", name, took.Round(time.Millisecond), err)
				if err == nil {
					t.Errorf("%s: succeeded with shard1 down (a silently partial answer?)", name)
					continue
				}
				if got := router.FailedShards(err); !slices.Equal(got, []string{"shard1"}) || !strings.Contains(err.Error(), `shard "shard1"`) {
					t.Errorf("%s: error %q names shards %v, want only shard1", name, err, got)
				}
				if took > downBound {
					t.Errorf("%s: took %v to fail, more than %v", name, took, downBound)
				}
			}
			if err := r.AckOutbox(ctx, upSeq); err != nil {
				t.Errorf("ack on the healthy shard: %v", err)
			}
		})
	}
	for _, mode := range modes {
		t.Run(mode+"/new map", func(t *testing.T) {
			// A successor map (the same shards, a newer epoch) is taken
			// with shard1 down: its identity was read when the router
			// opened (a catalog follower whose lease lapsed must switch
			// to the catalog's map before it serves again, shard0's keys
			// included).
			r := switchers[mode]
			next := m.Clone()
			next.Epoch++
			if err := r.SetMap(ctx, next); err != nil {
				t.Fatalf("SetMap(epoch %d) with shard1 down: %v", next.Epoch, err)
			}
			if got := r.Epoch(); got != next.Epoch {
				t.Fatalf("epoch %d after SetMap, want %d", got, next.Epoch)
			}
			// A shard at a DSN never verified is read, and refused while
			// it cannot be: the router keeps its map.
			moved := next.Clone()
			moved.Epoch++
			moved.Shards[1].DSN += "&application_name=elsewhere"
			if moved.Shards[1].PoolerDSN != "" {
				moved.Shards[1].PoolerDSN += "&application_name=elsewhere"
			}
			if err := r.SetMap(ctx, moved); err == nil || !strings.Contains(err.Error(), `shard "shard1"`) {
				t.Fatalf("SetMap with shard1 down at a new DSN: %v, want an error naming shard1", err)
			}
			if got := r.Epoch(); got != next.Epoch {
				t.Fatalf("epoch %d after a refused SetMap, want %d", got, next.Epoch)
			}
		})
	}
	if err := c.StartShard(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for _, mode := range modes {
		t.Run(mode+"/recovered", func(t *testing.T) {
			r := routers[mode]
			// Pools and PgBouncer reconnect on their own; poll until they do.
			deadline := time.Now().Add(time.Minute)
			for {
				_, err := r.Load(ctx, down)
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("shard1 not usable a minute after it started: %v", err)
				}
				time.Sleep(100 * time.Millisecond) // polling interval, bounded by the deadline
			}
			if _, err := r.PendingOutbox(ctx, 0); err != nil {
				t.Errorf("fan-out after recovery: %v", err)
			}
		})
	}
}
