package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/shardmap"
)

// keyOn returns a key whose bucket m gives to shard name.
func keyOn(t *testing.T, m *shardmap.Map, name string) string {
	t.Helper()
	for i := range 100000 {
		k := fmt.Sprintf("fence-key-%d", i)
		if m.Lookup(k).Name == name {
			return k
		}
	}
	t.Fatalf("no key for shard %s in 100000 tries", name)
	return ""
}

// fenceErr returns err's *pgconn.PgError if it is the fence's refusal.
func fenceErr(t *testing.T, err error) *pgconn.PgError {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != migrations.FenceSQLState {
		t.Fatalf("want the fence's error (SQLSTATE %s), got %v", migrations.FenceSQLState, err)
	}
	return pe
}

// TestFenceSetByApply: Apply turns every shard's fence on from the map; a
// shard refuses the keys of other shards' buckets in its commit functions
// (all three) and its keyed read check, naming range, state, epoch and
// owner, and serves its own; the scan filter serves exactly its ranges.
func TestFenceSetByApply(t *testing.T) {
	_, m := freshMap(t)
	rep := mustApply(t, m, migrations.Options{})
	for _, s := range rep.Shards {
		if !strings.Contains(s.Fence, fmt.Sprintf("fence on at epoch %d", m.Epoch)) {
			t.Errorf("shard %s: fence %q", s.Shard, s.Fence)
		}
	}
	ctx := ctxT(t)
	conn := connect(t, m.Shards[0].DSN)
	mine, theirs := keyOn(t, m, m.Shards[0].Name), keyOn(t, m, m.Shards[1].Name)
	theirRange := m.Ranges[m.ShardIndexForBucket(m.Bucket(theirs))]
	for _, r := range m.Ranges {
		if r.Lo <= m.Bucket(theirs) && m.Bucket(theirs) <= r.Hi {
			theirRange = r
		}
	}

	for _, q := range []string{
		`SELECT pgshard_fence_assert($1)`,
		`SELECT pgshard_fence_check($1)`,
		`SELECT committed FROM pgshard_commit_cas($1, 'd', '{}', 0, 'ev')`,
		`SELECT committed FROM pgshard_commit($1, 'd', '{}', 0, 'ev', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', NULL, 0)`,
		`SELECT harel_commit_cas($1, 'd', '{}', 0, 'ev')`,
	} {
		if _, err := conn.Exec(ctx, q, mine); err != nil {
			t.Errorf("%s on its own key: %v", q, err)
		}
		_, err := conn.Exec(ctx, q, theirs)
		pe := fenceErr(t, err)
		verb := "refuses key "
		if strings.Contains(q, "fence_check") {
			verb = "refuses to read key "
		}
		want := []string{`shard "shard0" ` + verb + fmt.Sprintf("%q", theirs), theirRange.String(),
			`moved to shard "` + theirRange.Shard + `" at epoch ` + fmt.Sprint(m.Epoch)}
		for _, w := range want {
			if !strings.Contains(pe.Message, w) {
				t.Errorf("%s: message %q lacks %q", q, pe.Message, w)
			}
		}
		wantDetail := fmt.Sprintf("bucket=%d lo=%d hi=%d state=moved epoch=%d owner=%s shard=shard0",
			m.Bucket(theirs), theirRange.Lo, theirRange.Hi, m.Epoch, theirRange.Shard)
		if pe.Detail != wantDetail || !strings.Contains(pe.Hint, `retry on shard "`+theirRange.Shard+`"`) {
			t.Errorf("%s: detail %q (want %q), hint %q", q, pe.Detail, wantDetail, pe.Hint)
		}
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM executions WHERE id = $1`, theirs).Scan(&n); err != nil || n != 0 {
		t.Errorf("refused commits left %d rows (%v)", n, err)
	}

	// The fence's inlinable bucket is pgshard_bucket's.
	var differ int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM generate_series(1, 20000) i, (VALUES (1), (64), (4096), (1 << 20)) b(n)
		WHERE pgshard_fence_bucket(md5(i::text), b.n) IS DISTINCT FROM pgshard_bucket(md5(i::text), b.n)`).Scan(&differ); err != nil || differ != 0 {
		t.Errorf("pgshard_fence_bucket differs from pgshard_bucket on %d keys (%v)", differ, err)
	}

	// The scan filter: served = this shard's ranges.
	var served string
	if err := conn.QueryRow(ctx, `SELECT served::text FROM pgshard_fence_served()`).Scan(&served); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range m.RangesOf(m.Shards[0].Name) {
		want = append(want, fmt.Sprintf("[%d,%d)", r.Lo, r.Hi+1))
	}
	if served != "{"+strings.Join(want, ",")+"}" {
		t.Errorf("served %s, want %v", served, want)
	}

	// A stale map is refused; the same epoch again is fine.
	if _, err := migrations.SetFence(ctx, conn, m); err != nil {
		t.Errorf("set the same epoch again: %v", err)
	}
	newer := m.Clone()
	newer.Epoch++
	if _, err := migrations.SetFence(ctx, conn, newer); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.SetFence(ctx, conn, m); err == nil || !strings.Contains(err.Error(), "newer than epoch") {
		t.Errorf("a stale map: %v", err)
	}

	// A shard in the middle of a move is refused, naming the move's state,
	// and nothing changes; once the move is over, it is set again.
	for _, midMove := range []struct{ set, undo, want string }{
		{fmt.Sprintf(`UPDATE pgshard_fence SET state = 'frozen' WHERE lo = %d`, m.RangesOf(m.Shards[0].Name)[0].Lo),
			fmt.Sprintf(`UPDATE pgshard_fence SET state = 'owned' WHERE lo = %d`, m.RangesOf(m.Shards[0].Name)[0].Lo), " frozen"},
		{`INSERT INTO pgshard_move_capture (move_id, lo, hi) VALUES (7, 0, 0)`, `DELETE FROM pgshard_move_capture`, "change capture for move 7"},
	} {
		if _, err := conn.Exec(ctx, midMove.set); err != nil {
			t.Fatal(err)
		}
		_, err := migrations.SetFence(ctx, conn, newer)
		var mm *migrations.MidMoveError
		if !errors.As(err, &mm) || !strings.Contains(err.Error(), midMove.want) || !strings.Contains(err.Error(), "pgshard reshard abort") || mm.Shard != "shard0" {
			t.Errorf("mid-move (%s): %v", midMove.set, err)
		}
		if _, err := conn.Exec(ctx, midMove.undo); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := migrations.SetFence(ctx, conn, newer); err != nil {
		t.Errorf("after the move: %v", err)
	}

	// Off: everything is served, as before the fence; on again: refused.
	if _, err := conn.Exec(ctx, `SELECT pgshard_fence_off()`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pgshard_fence_assert($1), pgshard_fence_check($1)`, theirs); err != nil {
		t.Errorf("fence off: %v", err)
	}
	if err := conn.QueryRow(ctx, `SELECT coalesce(served::text, 'all') FROM pgshard_fence_served()`).Scan(&served); err != nil || served != "all" {
		t.Errorf("fence off: served %s (%v)", served, err)
	}
	if _, err := conn.Exec(ctx, `SELECT pgshard_fence_on()`); err != nil {
		t.Fatal(err)
	}
	_, err := conn.Exec(ctx, `SELECT pgshard_fence_check($1)`, theirs)
	fenceErr(t, err)
}

// TestFenceUnsetServesAll: a shard whose migration created the fence but
// that never had it set (a database migrated by a build that stops before
// setting it) refuses nothing; the config row says off explicitly.
func TestFenceUnsetServesAll(t *testing.T) {
	_, m := freshMap(t)
	mustApply(t, m, migrations.Options{})
	ctx := ctxT(t)
	conn := connect(t, m.Shards[0].DSN)
	if _, err := conn.Exec(ctx, `TRUNCATE pgshard_fence; UPDATE pgshard_fence_config SET enabled = false, epoch = 0, buckets = NULL`); err != nil {
		t.Fatal(err)
	}
	theirs := keyOn(t, m, m.Shards[1].Name)
	if _, err := conn.Exec(ctx, `SELECT pgshard_commit_cas($1, 'd', '{}', 0, '')`, theirs); err != nil {
		t.Errorf("unset fence refused a commit: %v", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pgshard_fence_on()`); err == nil {
		t.Error("pgshard_fence_on turned on a fence never set")
	}
	// On with no range for a bucket refuses it, naming no range.
	if _, err := conn.Exec(ctx, `UPDATE pgshard_fence_config SET enabled = true, epoch = 1, buckets = $1`, m.Buckets); err != nil {
		t.Fatal(err)
	}
	_, err := conn.Exec(ctx, `SELECT pgshard_fence_check($1)`, theirs)
	if pe := fenceErr(t, err); !strings.Contains(pe.Message, "in no range of its fence") {
		t.Errorf("message %q", pe.Message)
	}
}

// TestFenceFreezeDrains: the range lock makes a mover's freeze work. A
// writer that asserted the fence holds its range's lock SHARED until its
// transaction ends, so the mover's EXCLUSIVE lock waits for it; a writer
// that asserts while the mover holds the lock waits, and when the mover
// commits a flip it is refused — it sees the flip, not the state it found
// before waiting.
func TestFenceFreezeDrains(t *testing.T) {
	_, m := freshMap(t)
	mustApply(t, m, migrations.Options{})
	ctx := ctxT(t)
	dsn := m.Shards[0].DSN
	key := keyOn(t, m, m.Shards[0].Name)
	var lo int
	for _, r := range m.RangesOf(m.Shards[0].Name) {
		if r.Lo <= m.Bucket(key) && m.Bucket(key) <= r.Hi {
			lo = r.Lo
		}
	}
	writer, mover, observer := connect(t, dsn), connect(t, dsn), connect(t, dsn)

	// 1. A writer in flight holds the mover off.
	wtx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wtx.Exec(ctx, `SELECT pgshard_fence_assert($1)`, key); err != nil {
		t.Fatal(err)
	}
	mtx, err := mover.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mtx.Exec(ctx, `SET LOCAL lock_timeout = '200ms'`); err != nil {
		t.Fatal(err)
	}
	_, err = mtx.Exec(ctx, `SELECT pg_advisory_xact_lock(pgshard_fence_lock_class(), $1)`, lo)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55P03" {
		t.Fatalf("the mover's lock beside a writer in flight: %v, want a lock timeout", err)
	}
	_ = mtx.Rollback(ctx)
	if err := wtx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// 2. The mover freezes; a new writer waits; the mover flips and
	// commits; the writer is refused.
	mtx, err = mover.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mtx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := mtx.Exec(ctx, `SELECT pg_advisory_xact_lock(pgshard_fence_lock_class(), $1)`, lo); err != nil {
		t.Fatal(err)
	}
	var writerPID int
	if err := writer.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&writerPID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := writer.Exec(ctx, `SELECT pgshard_fence_assert($1)`, key)
		done <- err
	}()
	waitFor(t, func() bool {
		var waiting bool
		err := observer.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted)`, writerPID).Scan(&waiting)
		return err == nil && waiting
	})
	select {
	case err := <-done:
		t.Fatalf("the writer did not wait for the freeze: %v", err)
	default:
	}
	if _, err := mtx.Exec(ctx, `UPDATE pgshard_fence SET state = 'moved', owner = 'shard9', epoch = epoch + 1 WHERE lo = $1`, lo); err != nil {
		t.Fatal(err)
	}
	if err := mtx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if pe := fenceErr(t, err); !strings.Contains(pe.Message, `moved to shard "shard9"`) {
			t.Errorf("message %q", pe.Message)
		}
	case <-ctx.Done():
		t.Fatal("the writer never finished")
	}
}

// TestFenceRepeatableReadSeesFlip: a REPEATABLE READ transaction whose
// snapshot predates a flip cannot write through it: the assert fails with
// a serialization failure rather than serving the stale state.
func TestFenceRepeatableReadSeesFlip(t *testing.T) {
	_, m := freshMap(t)
	mustApply(t, m, migrations.Options{})
	ctx := ctxT(t)
	dsn := m.Shards[0].DSN
	key := keyOn(t, m, m.Shards[0].Name)
	a, b := connect(t, dsn), connect(t, dsn)
	tx := snapshotThenFlip(t, a, b, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, key)
	_, err := tx.Exec(ctx, `SELECT pgshard_fence_assert($1)`, key)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || (pe.Code != "40001" && pe.Code != migrations.FenceSQLState) {
		t.Fatalf("a repeatable-read writer after a flip: %v, want 40001 or %s", err, migrations.FenceSQLState)
	}
}

// TestFenceReadOnlySnapshot: a READ ONLY transaction at REPEATABLE READ
// or SERIALIZABLE asserts the fence without a row lock (migration 0014;
// FOR SHARE fails with 25006 in a read-only transaction): the procedure
// the proxy calls and the function both serve a key this shard owns and
// refuse one it does not, and a snapshot taken before a flip is served as
// of that snapshot — the range and its rows as they were then — while a
// read-write transaction at the same level still fails.
func TestFenceReadOnlySnapshot(t *testing.T) {
	_, m := freshMap(t)
	mustApply(t, m, migrations.Options{})
	ctx := ctxT(t)
	dsn := m.Shards[0].DSN
	mine, theirs := keyOn(t, m, m.Shards[0].Name), keyOn(t, m, m.Shards[1].Name)
	a, b := connect(t, dsn), connect(t, dsn)
	if _, err := b.Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1, 'ro', '{}', 1)`, mine); err != nil {
		t.Fatal(err)
	}
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		for _, call := range []string{`CALL pgshard_fence_enter($1)`, `SELECT pgshard_fence_assert($1)`} {
			tx, err := a.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso, AccessMode: pgx.ReadOnly})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, call, mine); err != nil {
				t.Errorf("%s read only, %s of an owned key: %v", iso, call, err)
			}
			_ = tx.Rollback(ctx)
			tx, err = a.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso, AccessMode: pgx.ReadOnly})
			if err != nil {
				t.Fatal(err)
			}
			_, err = tx.Exec(ctx, call, theirs)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != migrations.FenceSQLState {
				t.Errorf("%s read only, %s of another shard's key: %v, want %s", iso, call, err, migrations.FenceSQLState)
			}
			_ = tx.Rollback(ctx)
		}
	}

	// A snapshot from before a flip reads the range as it was.
	tx := snapshotThenFlip(t, a, b, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, mine)
	if _, err := b.Exec(ctx, `DELETE FROM executions WHERE id = $1`, mine); err != nil { // the mover's clean-up
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `CALL pgshard_fence_enter($1)`, mine); err != nil {
		t.Fatalf("a read-only snapshot from before the flip: %v", err)
	}
	var version int
	if err := tx.QueryRow(ctx, `SELECT version FROM executions WHERE id = $1`, mine).Scan(&version); err != nil || version != 1 {
		t.Errorf("the snapshot's row: version %d, %v", version, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// After the flip, a new read-only snapshot is refused, and a writer too.
	for _, mode := range []pgx.TxAccessMode{pgx.ReadOnly, pgx.ReadWrite} {
		tx, err := a.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: mode})
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, `CALL pgshard_fence_enter($1)`, mine)
		fenceErr(t, err)
		_ = tx.Rollback(ctx)
	}
}

// snapshotThenFlip begins a transaction of opts on a, takes its snapshot,
// then flips the range of key away from the shard (moved to "shard9",
// the next epoch) on b; the transaction is rolled back at the test's end.
func snapshotThenFlip(t *testing.T, a, b *pgx.Conn, opts pgx.TxOptions, key string) pgx.Tx {
	t.Helper()
	ctx := ctxT(t)
	tx, err := a.BeginTx(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, `SELECT 1 FROM executions LIMIT 1`); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, `UPDATE pgshard_fence SET state = 'moved', owner = 'shard9', epoch = epoch + 1
		WHERE lo <= pgshard_bucket($1::text) AND pgshard_bucket($1::text) <= hi`, key); err != nil {
		t.Fatal(err)
	}
	return tx
}

// waitFor polls cond until it holds, bounded by a generous deadline.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFenceServedBy: pgshard_fence_served_by returns the served set when
// it is the ranges the given map gives the shard, raises PS002 naming
// both sets and the fence's epoch (DETAIL epoch=N) when it is not — a
// map where the shard owns one more range, or one less — and returns
// NULL, checking nothing, with the fence off.
func TestFenceServedBy(t *testing.T) {
	_, m := freshMap(t)
	mustApply(t, m, migrations.Options{})
	ctx := ctxT(t)
	conn := connect(t, m.Shards[0].DSN)
	args := func(m *shardmap.Map) (los, his []int32, owners []string) {
		for _, r := range m.Ranges {
			los, his, owners = append(los, int32(r.Lo)), append(his, int32(r.Hi)), append(owners, r.Shard)
		}
		return
	}
	servedBy := func(m *shardmap.Map) (*string, error) {
		los, his, owners := args(m)
		var got *string
		err := conn.QueryRow(ctx, `SELECT pgshard_fence_served_by($1, $2, $3, $4)::text`, int64(m.Epoch), los, his, owners).Scan(&got)
		return got, err
	}
	got, err := servedBy(m)
	var mine []string
	for _, r := range m.RangesOf(m.Shards[0].Name) {
		mine = append(mine, fmt.Sprintf("[%d,%d)", r.Lo, r.Hi+1))
	}
	if want := "{" + strings.Join(mine, ",") + "}"; err != nil || got == nil || *got != want {
		t.Fatalf("the map's own ranges: %v, %v; want %s", got, err, want)
	}
	for _, to := range []string{m.Shards[0].Name, m.Shards[1].Name} {
		// One bucket of another shard given to shard0, or one of shard0's taken away.
		b := m.Bucket(keyOn(t, m, m.Shards[1].Name))
		if to == m.Shards[1].Name {
			b = m.Bucket(keyOn(t, m, m.Shards[0].Name))
		}
		other := m.Clone()
		other.Ranges = nil
		for _, r := range m.Ranges {
			switch {
			case b < r.Lo || b > r.Hi:
				other.Ranges = append(other.Ranges, r)
			default:
				for _, p := range []shardmap.Range{{Lo: r.Lo, Hi: b - 1, Shard: r.Shard}, {Lo: b, Hi: b, Shard: to}, {Lo: b + 1, Hi: r.Hi, Shard: r.Shard}} {
					if p.Lo <= p.Hi {
						other.Ranges = append(other.Ranges, p)
					}
				}
			}
		}
		other.Epoch = m.Epoch + 1
		_, err := servedBy(other)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "PS002" || !strings.Contains(pe.Detail, fmt.Sprintf("epoch=%d map_epoch=%d", m.Epoch, other.Epoch)) ||
			!strings.Contains(pe.Message, `shard "`+m.Shards[0].Name+`" serves buckets`) {
			t.Fatalf("bucket %d given to %s: %v; want PS002 naming the shard, its fence's epoch and the map's", b, to, err)
		}
	}
	if _, err := conn.Exec(ctx, `SELECT pgshard_fence_off()`); err != nil {
		t.Fatal(err)
	}
	if got, err := servedBy(m); err != nil || got != nil {
		t.Fatalf("fence off: %v, %v; want NULL", got, err)
	}
}
