package router_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/store"
)

// idOn returns a fresh execution id that the router places on shard.
func idOn(t *testing.T, r *router.Router, shard string) string {
	t.Helper()
	for {
		if id := newID(t); r.ShardOf(id) == shard {
			return id
		}
	}
}

// backlog commits n outbox rows and n spawn intents on shard, in one
// commit of a fresh execution there.
func backlog(t *testing.T, r *router.Router, shard string, n int, tag string) {
	t.Helper()
	e := &store.Execution{ID: idOn(t, r, shard), DefinitionID: "d"}
	var emits []store.Emit
	var spawns []store.Spawn
	for i := range n {
		emits = append(emits, store.Emit{TargetID: e.ID, Event: json.RawMessage(fmt.Sprintf(`{"tag":%q,"i":%d}`, tag, i))})
		spawns = append(spawns, store.Spawn{ChildID: fmt.Sprintf("%s-%d", tag, i), RootPath: "r"})
	}
	if err := r.Commit(ctxT(t), e, emits, "", nil, spawns, nil); err != nil {
		t.Fatal(err)
	}
}

// TestDrainingIsFair is the regression test of issue 11, defect 2: a hot
// shard with a deep backlog (its seqs are large: a seq counts its shard's
// inserts) and a quiet shard that keeps at least a batch pending (small
// seqs) share every batch of PendingOutbox and PendingSpawns, so relaying
// drains both, and neither starves the other. Before, rows were merged by
// seq and the quiet shard won every batch.
func TestDrainingIsFair(t *testing.T) {
	c := clustertest.Get(t)
	r := openRouter(t, clustertest.MigratedMap(t, c), "direct", store.Options{})
	ctx := ctxT(t)
	const batch = 100
	hot, quiet := "shard1", "shard0"
	// The hot shard has inserted a lot already: its seqs are far above
	// the quiet shard's.
	if _, err := shardStore(t, r, hot).Pool().Exec(ctx, `SELECT setval(pg_get_serial_sequence('outbox', 'seq'), 2 + 1024 * 100000),
		setval(pg_get_serial_sequence('spawns', 'seq'), 2 + 1024 * 100000)`); err != nil {
		t.Fatal(err)
	}
	backlog(t, r, hot, 3*batch, "hot")
	for round := 0; round < 6; round++ {
		backlog(t, r, quiet, batch, fmt.Sprintf("quiet%d", round)) // the quiet shard never runs dry
		rows, err := r.PendingOutbox(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		sp, err := r.PendingSpawns(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		spPer := map[string]int{}
		for _, o := range rows {
			per[shardOfSeq(t, r, o.Seq)]++
		}
		for _, s := range sp {
			spPer[shardOfSeq(t, r, s.Seq)]++
		}
		hotLeft := count(t, shardStore(t, r, hot), `SELECT count(*) FROM outbox`)
		t.Logf("round %d: outbox batch %v, spawns batch %v, hot backlog %d", round, per, spPer, hotLeft)
		if len(rows) != batch || len(sp) != batch {
			t.Fatalf("round %d: batches of %d and %d rows, want %d", round, len(rows), len(sp), batch)
		}
		if hotLeft > 0 && (per[hot] < batch/2 || spPer[hot] < batch/2) {
			t.Errorf("round %d: the hot shard got %d outbox and %d spawn rows of %d with a backlog of %d: starved",
				round, per[hot], spPer[hot], batch, hotLeft)
		}
		if per[quiet] < batch/2 || spPer[quiet] < batch/2 {
			t.Errorf("round %d: the quiet shard got %d outbox and %d spawn rows of %d: starved", round, per[quiet], spPer[quiet], batch)
		}
		// Each shard's rows come in its own seq order.
		last := map[string]int64{}
		for _, o := range rows {
			s := shardOfSeq(t, r, o.Seq)
			if o.Seq <= last[s] {
				t.Errorf("round %d: %s's rows out of seq order (%d after %d)", round, s, o.Seq, last[s])
			}
			last[s] = o.Seq
		}
		// The relay delivers and acks the batch.
		for _, o := range rows {
			if err := r.AckOutbox(ctx, o.Seq); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range sp {
			if err := r.AckSpawn(ctx, s.Seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	if left := count(t, shardStore(t, r, hot), `SELECT count(*) FROM outbox`); left != 0 {
		t.Errorf("the hot shard's backlog of %d rows still has %d after 6 batches of %d", 3*batch, left, batch)
	}
	// A batch smaller than the number of shards with rows: successive
	// calls take turns.
	seen := map[string]bool{}
	for range 4 {
		rows, err := r.PendingOutbox(ctx, 1)
		if err != nil || len(rows) != 1 {
			t.Fatalf("PendingOutbox(1): %v, %v", rows, err)
		}
		seen[shardOfSeq(t, r, rows[0].Seq)] = true
	}
	backlog(t, r, hot, 1, "hot-again")
	for range 4 {
		rows, err := r.PendingOutbox(ctx, 1)
		if err != nil || len(rows) != 1 {
			t.Fatalf("PendingOutbox(1): %v, %v", rows, err)
		}
		seen[shardOfSeq(t, r, rows[0].Seq)] = true
	}
	if !seen[hot] || !seen[quiet] {
		t.Errorf("PendingOutbox(1) served only %v in 8 calls, want both shards with rows", seen)
	}
}

func shardOfSeq(t *testing.T, r *router.Router, seq int64) string {
	t.Helper()
	sh, err := r.Map().ShardForSeq(seq)
	if err != nil {
		t.Fatal(err)
	}
	return sh.Name
}
