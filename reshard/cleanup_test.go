package reshard_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/reshard"
)

// cleanupBatch is the clean-up's batch in these tests: far fewer rows than
// a half of newEnv's executions has in any table.
const cleanupBatch = 40

func countRows(rows map[string][]string) int {
	n := 0
	for _, r := range rows {
		n += len(r)
	}
	return n
}

// explainCleanup logs the plan of a clean-up batch — the statement the
// mover sends, with a ctid cursor past the first page — on each table:
// no index serves the range's predicate, so each batch must select by a
// TID range scan from its cursor, not a scan from the first page, and
// delete by TID.
func explainCleanup(t *testing.T, e *env, shard string, lo, hi int) {
	t.Helper()
	for _, tb := range rowTables {
		q := reshard.DeleteBatchSQL(tb.name)
		if q == "" {
			t.Fatalf("no clean-up statement for %s", tb.name)
		}
		// The tables here are small enough for the planner to prefer a
		// sequential scan anyway: with it disabled, the plan shows what
		// the statement can use (a TID scan needs none of the table).
		tx, err := e.pools[shard].Begin(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(e.ctx, `SELECT set_config('enable_seqscan', 'off', true)`); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(e.ctx, "EXPLAIN "+q, lo, hi, buckets, "(1,0)", cleanupBatch)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		_ = tx.Rollback(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("clean-up batch on %s: %s", tb.name, strings.Join(plan, " | "))
		p := strings.Join(plan, "\n")
		if !strings.Contains(p, "Tid Range Scan") || !strings.Contains(p, "Tid Scan") {
			t.Errorf("a clean-up batch on %s does not select from its cursor (TID range scan) and delete by TID (TID scan)", tb.name)
		}
	}
}

// TestCleanupInBatches moves a range of more rows than a clean-up batch
// holds: the source keeps none of them, the destination has every one,
// and the clean-up took several batches, as the result and the journal
// say.
func TestCleanupInBatches(t *testing.T) {
	e := newEnv(t, 300)
	src, dst := e.shards[0].Name, e.shards[1].Name
	const lo, hi = 0, buckets/2 - 1
	before := rowsOf(t, e.ctx, e.pools[src], lo, hi, true)
	if n := countRows(before); n <= cleanupBatch {
		t.Fatalf("the range holds %d rows, not more than a batch (%d)", n, cleanupBatch)
	}
	explainCleanup(t, e, src, lo, hi)
	if _, err := reshard.Plan(e.ctx, e.cat, reshard.Request{Lo: lo, Hi: hi, To: dst}); err != nil {
		t.Fatal(err)
	}
	res, err := reshard.Apply(e.ctx, e.cat, reshard.Options{FreezeBudget: 2 * time.Second, CleanupBatch: cleanupBatch, Log: logf(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		t.Fatalf("%d results, want 1", len(res))
	}
	r := res[0]
	t.Logf("clean-up: %d rows in %d batches (the range held %d rows)", r.CleanupRows, r.CleanupBatches, countRows(before))
	if r.CleanupBatches <= 1 {
		t.Errorf("the clean-up took %d batches of at most %d rows for %d rows, want more than 1", r.CleanupBatches, cleanupBatch, countRows(before))
	}
	if r.CleanupRows != int64(countRows(before)) {
		t.Errorf("the clean-up says it deleted %d rows; the range held %d", r.CleanupRows, countRows(before))
	}
	if left := countRows(rowsOf(t, e.ctx, e.pools[src], lo, hi, true)); left != 0 {
		t.Errorf("%d rows of the range are left on the source", left)
	}
	sameRows(t, "destination after the move", before, rowsOf(t, e.ctx, e.pools[dst], lo, hi, true))
	ms, err := e.cat.Moves(e.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	var detail struct {
		Rows    int64 `json:"cleanup_rows"`
		Batches int   `json:"cleanup_batches"`
	}
	for _, m := range ms {
		if m.ID == r.Move.ID {
			if err := json.Unmarshal(m.Detail, &detail); err != nil {
				t.Fatal(err)
			}
		}
	}
	if detail.Rows != r.CleanupRows || detail.Batches != r.CleanupBatches {
		t.Errorf("the journal says the clean-up deleted %d rows in %d batches, the result %d in %d", detail.Rows, detail.Batches, r.CleanupRows, r.CleanupBatches)
	}
	e.check()
}

// TestCleanupResumed stops a clean-up after a few committed batches (the
// pacer's pause, between batches, fails as a dying mover would: a clock
// that advances a second a reading makes the pacer pause before every
// batch) and resumes it with apply, from the journal's cleaning: no row of
// the range is left on the source, every one is on the destination.
func TestCleanupResumed(t *testing.T) {
	e := newEnv(t, 300)
	src, dst := e.shards[0].Name, e.shards[1].Name
	const lo, hi, k = 0, buckets/2 - 1, 3
	before := rowsOf(t, e.ctx, e.pools[src], lo, hi, true)
	if n := len(before["executions"]); n <= k*cleanupBatch {
		t.Fatalf("the range holds %d executions, not more than %d batches", n, k)
	}
	if _, err := reshard.Plan(e.ctx, e.cat, reshard.Request{Lo: lo, Hi: hi, To: dst}); err != nil {
		t.Fatal(err)
	}
	var (
		cleaning atomic.Bool
		mu       sync.Mutex
		clock    = time.Unix(0, 0)
		batches  int
	)
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(time.Second)
		return clock
	}
	pause := func(context.Context, time.Duration) error {
		if !cleaning.Load() {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if batches == k {
			return reshard.ErrInjected
		}
		batches++
		return nil
	}
	hook := func(_ context.Context, step string, _ catalog.MoveRecord) error {
		if step == "cleaning" {
			cleaning.Store(true)
		}
		return nil
	}
	opts := reshard.Options{FreezeBudget: 2 * time.Second, CleanupBatch: cleanupBatch, Hook: hook, Log: logf(t)}
	_, err := reshard.Apply(e.ctx, e.cat, reshard.WithClock(reshard.WithPause(opts, pause), now))
	if !errors.Is(err, reshard.ErrInjected) {
		t.Fatalf("apply: want the injected stop in the clean-up, got %v", err)
	}
	ms, err := e.cat.Moves(e.ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Phase != catalog.PhaseCleaning {
		t.Fatalf("after the stop the journal has %+v, want one move cleaning", ms)
	}
	mid := rowsOf(t, e.ctx, e.pools[src], lo, hi, true)
	t.Logf("stopped after %d batches: %d of %d rows of the range left on the source", k, countRows(mid), countRows(before))
	if got, want := len(mid["executions"]), len(before["executions"])-k*cleanupBatch; got != want {
		t.Errorf("after %d batches of %d the source has %d executions of the range, want %d", k, cleanupBatch, got, want)
	}
	res, err := reshard.Apply(e.ctx, e.cat, reshard.Options{FreezeBudget: 2 * time.Second, CleanupBatch: cleanupBatch, Log: logf(t)})
	if err != nil {
		t.Fatalf("apply after the stop: %v", err)
	}
	if len(res) != 1 {
		t.Fatalf("%d results, want 1", len(res))
	}
	if r := res[0]; r.CleanupRows != int64(countRows(mid)) || r.CleanupBatches < 1 {
		t.Errorf("the resumed clean-up deleted %d rows in %d batches; %d were left", r.CleanupRows, r.CleanupBatches, countRows(mid))
	}
	if left := countRows(rowsOf(t, e.ctx, e.pools[src], lo, hi, true)); left != 0 {
		t.Errorf("%d rows of the range are left on the source", left)
	}
	sameRows(t, "destination after the resumed clean-up", before, rowsOf(t, e.ctx, e.pools[dst], lo, hi, true))
	e.check()
}

// TestCleanupBatchValidated: a negative or too large CleanupBatch is
// refused, 0 is the default.
func TestCleanupBatchValidated(t *testing.T) {
	for _, n := range []int{-1, reshard.MaxCleanupBatch + 1} {
		if err := reshard.ValidateOptions(reshard.Options{CleanupBatch: n}); err == nil {
			t.Errorf("CleanupBatch %d accepted", n)
		}
	}
	for _, n := range []int{0, 1, reshard.DefaultCleanupBatch, reshard.MaxCleanupBatch} {
		if err := reshard.ValidateOptions(reshard.Options{CleanupBatch: n}); err != nil {
			t.Errorf("CleanupBatch %d: %v", n, err)
		}
	}
}
