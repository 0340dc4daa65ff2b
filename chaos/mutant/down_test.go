package mutant_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/store"
)

// downBound is how long an operation on a stopped shard may take to fail
// (without stall checks it would wait for PgBouncer's query_wait_timeout,
// 120 s); far above the measured times, which are logged.
const downBound = 20 * time.Second

// TestShardDown stops one shard's Postgres behind its PgBouncer: the
// reference store's operations that need it fail within downBound naming
// it — the first, queued by PgBouncer, through the stall check
// (store.ErrUnreachable), later ones from PgBouncer's refused logins; a
// commit as a definite failure, its COMMIT was never sent — the other
// shard keeps working, and after a restart everything works again.
func TestShardDown(t *testing.T) {
	c := clustertest.Private(t, cluster.Spec{Shards: 2, PgBouncer: true})
	m := clustertest.MigratedMap(t, c)
	ctx := ctxT(t)
	s := openStore(t, m, true, "", store.Options{ConnectTimeout: time.Second})
	byShard := map[int]*store.Execution{}
	for _, id := range ids(3, 50) {
		if i := m.ShardIndexForBucket(m.Bucket(id)); byShard[i] == nil {
			byShard[i] = &store.Execution{ID: id, DefinitionID: "def"}
			if err := s.Save(ctx, byShard[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	up, down := byShard[0], byShard[1]
	if err := c.StopShard(ctx, 1, cluster.Fast); err != nil {
		t.Fatal(err)
	}
	var first error
	for _, op := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"load", func(ctx context.Context) error { _, _, err := s.LoadForEvent(ctx, down.ID, "e"); return err }},
		{"commit", func(ctx context.Context) error {
			err := s.Save(ctx, down.Clone())
			if errors.Is(err, store.ErrOutcomeUnknown) {
				t.Errorf("commit: an unknown outcome, though no COMMIT was sent: %v", err)
			}
			return err
		}},
		{"outbox fan-out", func(ctx context.Context) error { _, err := s.PendingOutbox(ctx, 10); return err }},
		{"delete timer", func(ctx context.Context) error { _, err := s.DeleteTimer(ctx, down.ID, "p", 1); return err }},
	} {
		start := time.Now()
		opCtx, cancel := context.WithTimeout(ctx, downBound)
		err := op.run(opCtx)
		cancel()
		took := time.Since(start)
		if first == nil {
			first = err
		}
		t.Logf("%s on the stopped shard: failed after %v: %v", op.name, took.Round(time.Millisecond), err)
		if err == nil || !strings.Contains(err.Error(), `"shard1"`) || took >= downBound {
			t.Errorf("%s: error %v after %v, want one naming shard1 within %v", op.name, err, took, downBound)
		}
	}
	if err := first; !errors.Is(err, store.ErrUnreachable) {
		t.Errorf("the first operation on the stopped shard: %v, want the stall check's store.ErrUnreachable", err)
	}
	if err := s.Save(ctx, up); err != nil {
		t.Errorf("commit on the healthy shard: %v", err)
	}
	if err := c.StartShard(ctx, 1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := s.Save(ctx, down)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted shard still fails: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling for the pooler's reconnect, bounded above
	}
}
