package migrations_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/shardmap"
)

// oneShardMap returns a map of one shard with ordinal k over a fresh
// database on the package cluster's first shard.
func oneShardMap(t *testing.T, k int) *shardmap.Map {
	t.Helper()
	c := clustertest.Get(t)
	db := clustertest.FreshDatabase(t, c)
	m, err := shardmap.Even(shardmap.DefaultBuckets, []shardmap.Shard{{Name: "s", Ordinal: k, DSN: c.Shards[0].DSN(db, c.Spec.User)}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// seqs returns table's seqs in order.
func seqs(t *testing.T, conn *pgx.Conn, table string) []int64 {
	t.Helper()
	rows, err := conn.Query(ctxT(t), fmt.Sprintf(`SELECT seq FROM %s ORDER BY seq`, table))
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkNamed fails unless every seq of outbox and spawns names ordinal k
// and the tables hold want rows each.
func checkNamed(t *testing.T, conn *pgx.Conn, m *shardmap.Map, want map[string]int) {
	t.Helper()
	for _, table := range []string{"outbox", "spawns"} {
		got := seqs(t, conn, table)
		if len(got) != want[table] {
			t.Errorf("%s: %d rows %v, want %d", table, len(got), got, want[table])
		}
		for _, seq := range got {
			if sh, err := m.ShardForSeq(seq); err != nil || sh.Name != m.Shards[0].Name {
				t.Errorf("%s: seq %d names ordinal %d, not the shard's %d (%v): AckOutbox/AckSpawn would go to another shard",
					table, seq, (seq-1)%shardmap.SeqStride, m.Shards[0].Ordinal, err)
			}
		}
	}
}

// TestStrideCoversRowsWrittenBeforeIdentity is the regression test of
// issue 11, defect 3: rows written after the tables exist but before the
// first migrate has strided the sequences — committed ones, and one in a
// transaction still open while migrate runs — end up with seqs that name
// the shard, and nothing is lost.
func TestStrideCoversRowsWrittenBeforeIdentity(t *testing.T) {
	m := oneShardMap(t, 7)
	ctx := ctxT(t)
	conn := connect(t, m.Shards[0].DSN)
	if _, _, err := migrations.Migrate(ctx, conn, migrations.All()); err != nil {
		t.Fatal(err)
	}
	// A writer in the window: three outbox rows and two spawns, committed.
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (target_id, event) SELECT 't', 'e' || g FROM generate_series(1, 3) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO spawns (parent_id, child_id, root_path, context) SELECT 'p', 'c' || g, '/', '{}' FROM generate_series(1, 2) g`); err != nil {
		t.Fatal(err)
	}
	// And one still in flight while migrate runs.
	writer := connect(t, m.Shards[0].DSN)
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO outbox (target_id, event) VALUES ('t', 'in flight')`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := migrations.Apply(ctx, m, migrations.Options{})
		done <- err
	}()
	// Wait until migrate either finished or waits for the writer's lock.
	deadline := time.Now().Add(30 * time.Second)
	var applyErr error
	finished := false
	for !finished && time.Now().Before(deadline) {
		select {
		case applyErr = <-done:
			finished = true
			continue
		default:
		}
		var waiting bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE application_name = 'pgshard migrate' AND wait_event_type = 'Lock')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling interval, bounded by the deadline
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !finished {
		select {
		case applyErr = <-done:
		case <-time.After(time.Minute):
			t.Fatal("migrate did not finish a minute after the writer committed")
		}
	}
	if applyErr != nil {
		t.Fatal(applyErr)
	}
	checkNamed(t, conn, m, map[string]int{"outbox": 4, "spawns": 2})
	var events []string
	rows, err := conn.Query(ctx, `SELECT event FROM outbox ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	if events, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(events) != "[e1 e2 e3 in flight]" {
		t.Errorf("events %v after the re-stride, want the four in their order", events)
	}
	// New rows continue the stride above the re-strided ones.
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (target_id, event) VALUES ('t', 'after')`); err != nil {
		t.Fatal(err)
	}
	checkNamed(t, conn, m, map[string]int{"outbox": 5, "spawns": 2})
}

// TestMigrateRestridesStrayRows: a shard migrated before this fix may hold
// rows with seqs that name another ordinal; the next migrate re-strides
// them and the rows after them, keeping their order (and leaves a clean
// shard alone).
func TestMigrateRestridesStrayRows(t *testing.T) {
	m := oneShardMap(t, 7)
	rep := mustApply(t, m, migrations.Options{})
	if got := rep.Shards[0].Identity; got != "created" {
		t.Errorf("first migrate: identity %q, want created", got)
	}
	conn := connect(t, m.Shards[0].DSN)
	ctx := ctxT(t)
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (seq, target_id, event) VALUES (2, 't', 'stray'), (1032, 't', 'fine')`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO spawns (seq, parent_id, child_id, root_path, context) VALUES (5, 'p', 'c', '/', '{}')`); err != nil {
		t.Fatal(err)
	}
	rep = mustApply(t, m, migrations.Options{})
	if got := rep.Shards[0].Identity; got != "verified; re-strided 2 outbox rows, 1 spawns row" {
		t.Errorf("second migrate: identity %q", got)
	}
	checkNamed(t, conn, m, map[string]int{"outbox": 2, "spawns": 1})
	rows, err := conn.Query(ctx, `SELECT event FROM outbox ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	if events, err := pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || fmt.Sprint(events) != "[stray fine]" {
		t.Errorf("outbox events %v (%v): the re-stride must keep the rows' order", events, err)
	}
	if got := seqs(t, conn, "outbox"); len(got) != 2 || got[0] <= 1032 {
		t.Errorf("outbox seqs %v: want both moved above the old maximum 1032", got)
	}
	if rep = mustApply(t, m, migrations.Options{}); rep.Shards[0].Identity != "verified" {
		t.Errorf("third migrate: identity %q, want verified", rep.Shards[0].Identity)
	}
}

// TestRestrideNeverReusesHandedOutSeqs: re-striding moves rows above every
// value the sequence has handed out, not only above the rows still there —
// a relay may hold a seq whose row is gone, and would delete another row if
// the value came back.
func TestRestrideNeverReusesHandedOutSeqs(t *testing.T) {
	m := oneShardMap(t, 7)
	mustApply(t, m, migrations.Options{})
	conn := connect(t, m.Shards[0].DSN)
	ctx := ctxT(t)
	var handedOut int64
	if err := conn.QueryRow(ctx, `WITH ins AS (INSERT INTO outbox (target_id, event) SELECT 't', 'acked' FROM generate_series(1, 5) RETURNING seq)
		SELECT max(seq) FROM ins`).Scan(&handedOut); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM outbox`); err != nil { // delivered and acked
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (seq, target_id, event) VALUES (2, 't', 'stray')`); err != nil {
		t.Fatal(err)
	}
	mustApply(t, m, migrations.Options{})
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (target_id, event) VALUES ('t', 'next')`); err != nil {
		t.Fatal(err)
	}
	checkNamed(t, conn, m, map[string]int{"outbox": 2, "spawns": 0})
	for _, seq := range seqs(t, conn, "outbox") {
		if seq <= handedOut {
			t.Errorf("seq %d is at or below %d, which the sequence had handed out before", seq, handedOut)
		}
	}
}
