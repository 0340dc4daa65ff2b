package reshard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/reshard"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

const buckets = 64

// env is a two-shard store on fresh databases: shard0 owns every bucket,
// shard1 is registered empty; the catalog lives in shard0's database; a
// router follows the catalog (it reloads on fence errors).
type env struct {
	t      testing.TB
	ctx    context.Context
	cat    *catalog.Catalog
	rt     *router.Router
	pools  map[string]*pgxpool.Pool
	shards []shardmap.Shard
	ids    []string

	mu    sync.Mutex
	acked map[string]int // id → highest acknowledged version

	reloads reloadTimes // the router's map loads from the catalog
}

// reloadTimes times the router's map loads (its reloads after a fence
// refusal), for the benchmarks' logs.
type reloadTimes struct {
	mu           sync.Mutex
	n            int
	total, worst time.Duration
}

func (r *reloadTimes) get() (int, time.Duration, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n, r.total, r.worst
}

// timedMaps is the catalog as the router's map source, timing each load.
type timedMaps struct {
	cat *catalog.Catalog
	t   *reloadTimes
}

func (m timedMaps) Load(ctx context.Context) (*shardmap.Map, error) {
	t0 := time.Now()
	mp, err := m.cat.Load(ctx)
	d := time.Since(t0)
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	m.t.n++
	m.t.total += d
	m.t.worst = max(m.t.worst, d)
	return mp, err
}

func newEnv(t testing.TB, executions int) *env {
	t.Helper()
	c := clustertest.GetSpec(t, cluster.Spec{Shards: 2})
	db := clustertest.FreshDatabase(t, c)
	full, err := c.MapFor(db, buckets)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	m0, err := shardmap.Even(buckets, full.Shards[:1])
	if err != nil {
		t.Fatal(err)
	}
	m, err := shardmap.AddEmpty(m0, full.Shards[1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, m, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Open(ctx, full.Shards[0].DSN, catalog.Options{ApplicationName: "reshard test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	if _, err := cat.Install(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cat.Push(ctx, m, 0); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, cat: cat, pools: map[string]*pgxpool.Pool{}, shards: m.Shards, acked: map[string]int{}}
	rt, err := router.Open(ctx, m, router.Options{Maps: timedMaps{cat, &e.reloads}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	e.rt = rt
	for _, s := range m.Shards {
		p, err := pgxpool.New(ctx, s.DSN)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		e.pools[s.Name] = p
	}
	for i := range executions {
		e.ids = append(e.ids, fmt.Sprintf("%032x", uint64(i)*0x9e3779b97f4a7c15+1))
	}
	for _, id := range e.ids {
		if err := e.commit(id); err != nil {
			t.Fatalf("seed %s: %v", id, err)
		}
	}
	return e
}

// commit loads id and commits the next version with one processed event,
// one emitted event, a timer, a trace entry and (every third version) a
// spawn intent: every keyed table gets a row per version.
func (e *env) commit(id string) error {
	_, err := e.commitSplit(id)
	return err
}

// commitSplit is commit, also returning how long its load took (the rest
// is the commit's).
func (e *env) commitSplit(id string) (load time.Duration, err error) {
	t0 := time.Now()
	exe, err := e.rt.Load(e.ctx, id)
	load = time.Since(t0)
	if errors.Is(err, store.ErrNotFound) {
		exe, err = &store.Execution{ID: id, DefinitionID: "reshard-test", Status: "running"}, nil
	}
	if err != nil {
		return load, err
	}
	v := exe.Version + 1
	ev, _ := json.Marshal(map[string]any{"from": id, "v": v})
	var spawns []store.Spawn
	if v%3 == 0 {
		spawns = []store.Spawn{{ChildID: fmt.Sprintf("%s-c%d", id[:8], v), RootPath: "root"}}
	}
	err = e.rt.Commit(e.ctx, exe, []store.Emit{{TargetID: id, Event: ev}}, fmt.Sprintf("ev-%d", v),
		[]store.TimerOp{store.Schedule("t", float64(v))}, spawns, json.RawMessage(fmt.Sprintf(`{"v":%d}`, v)))
	if err == nil {
		e.mu.Lock()
		e.acked[id] = max(e.acked[id], v)
		e.mu.Unlock()
	}
	return load, err
}

// workload commits through the router from n goroutines until stop is
// closed (or each made limit attempts); it returns a wait function that
// reports the commits acknowledged and refused.
func (e *env) workload(n, limit int, stop <-chan struct{}) func() (ok, failed int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var okN, failN int
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range limit {
				select {
				case <-stop:
					return
				default:
				}
				err := e.commit(e.ids[rng.IntN(len(e.ids))])
				mu.Lock()
				if err == nil {
					okN++
				} else {
					failN++
				}
				mu.Unlock()
			}
		}()
	}
	return func() (int, int) { wg.Wait(); return okN, failN }
}

// check verifies the final state against the catalog's map: every row of
// every keyed table is on the owner of its key's bucket and nowhere else,
// every execution exists once with a version at least its highest
// acknowledged one and one processed event, trace entry and outbox row
// per version, no capture is left, and seqs are on their shard's stride.
func (e *env) check() {
	t := e.t
	t.Helper()
	m, err := e.cat.Load(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]int{}
	seenOn := map[string][]string{}
	for _, s := range m.Shards {
		p := e.pools[s.Name]
		for _, q := range []struct{ table, key string }{
			{"executions", "id"}, {"processed_events", "execution_id"}, {"timers", "execution_id"},
			{"trace", "execution_id"}, {"spawns", "parent_id"}, {"outbox", "event::jsonb->>'from'"},
		} {
			rows, err := p.Query(e.ctx, "SELECT "+q.key+" FROM "+q.table)
			if err != nil {
				t.Fatal(err)
			}
			keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if owner := m.Lookup(k).Name; owner != s.Name {
					t.Errorf("%s row of %s (bucket %d) is on %s, but %s owns it", q.table, k, m.Bucket(k), s.Name, owner)
				}
			}
		}
		rows, err := p.Query(e.ctx, `SELECT e.id, e.version,
			(SELECT count(*) FROM processed_events p WHERE p.execution_id = e.id),
			(SELECT count(*) FROM trace x WHERE x.execution_id = e.id),
			(SELECT count(*) FROM outbox o WHERE o.event::jsonb->>'from' = e.id),
			(SELECT count(*) FROM spawns s WHERE s.parent_id = e.id)
			FROM executions e`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			var v, pe, tr, ob, sp int
			if err := rows.Scan(&id, &v, &pe, &tr, &ob, &sp); err != nil {
				t.Fatal(err)
			}
			versions[id] = v
			seenOn[id] = append(seenOn[id], s.Name)
			if pe != v || tr != min(v, store.DefaultTraceMax) || ob != v || sp != v/3 {
				t.Errorf("execution %s on %s at version %d has %d processed events, %d trace entries, %d outbox rows, %d spawns (want %d, %d, %d, %d)",
					id, s.Name, v, pe, tr, ob, sp, v, v, v, v/3)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		var off, capture, changes, triggers int
		if err := p.QueryRow(e.ctx, `SELECT
			(SELECT count(*) FROM outbox WHERE (seq % 1024 + 1024) % 1024 <> $1::int) + (SELECT count(*) FROM spawns WHERE (seq % 1024 + 1024) % 1024 <> $1::int),
			(SELECT count(*) FROM pgshard_move_capture), (SELECT count(*) FROM pgshard_move_rows) + (SELECT count(*) FROM pgshard_move_seqs),
			(SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'pgshard\_move\_capture%')`, (s.Ordinal+1)%1024).Scan(&off, &capture, &changes, &triggers); err != nil {
			t.Fatal(err)
		}
		if off+capture+changes+triggers > 0 {
			t.Errorf("shard %s: %d seqs off its stride, %d captures, %d change records and seq maps, %d capture triggers left", s.Name, off, capture, changes, triggers)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range e.ids {
		if len(seenOn[id]) != 1 {
			t.Errorf("execution %s exists on %v: want exactly one shard", id, seenOn[id])
		}
		if versions[id] < e.acked[id] {
			t.Errorf("execution %s is at version %d, but version %d was acknowledged: a commit was lost", id, versions[id], e.acked[id])
		}
	}
	ms, err := e.cat.Moves(e.ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) > 0 {
		t.Errorf("%d moves unfinished: %+v", len(ms), ms)
	}
}

// ownedOnce checks that no bucket of lo..hi is served (owned or frozen)
// by two shards' fences at once, and returns how many serve bucket lo.
func (e *env) ownedOnce(lo, hi int) int {
	e.t.Helper()
	most := 0
	for b := lo; b <= hi; b++ {
		n := 0
		for _, s := range e.shards {
			var st string
			if err := e.pools[s.Name].QueryRow(e.ctx, `SELECT state FROM pgshard_fence WHERE lo <= $1::int AND hi >= $1::int`, b).Scan(&st); err != nil {
				e.t.Fatal(err)
			}
			if st == "owned" || st == "frozen" {
				n++
			}
		}
		if n > 1 {
			e.t.Errorf("bucket %d is served by %d shards", b, n)
		}
		most = max(most, n)
	}
	return most
}

func logf(t testing.TB) func(string, ...any) {
	return func(f string, a ...any) { t.Logf(f, a...) }
}

// TestMoveUnderLoad adds shard1 (half the buckets move to it) while four
// writers commit through a router that follows the catalog.
func TestMoveUnderLoad(t *testing.T) {
	e := newEnv(t, 300)
	stop := make(chan struct{})
	wait := e.workload(4, 100000, stop)
	moves, err := reshard.Plan(e.ctx, e.cat, reshard.Request{AddShard: e.shards[1].Name})
	if err != nil {
		close(stop)
		wait()
		t.Fatal(err)
	}
	if len(moves) != 1 || moves[0].Lo != buckets/2 || moves[0].Hi != buckets-1 {
		t.Errorf("plan --add-shard: %+v, want one move %d-%d", moves, buckets/2, buckets-1)
	}
	res, err := reshard.Apply(e.ctx, e.cat, reshard.Options{FreezeBudget: 2 * time.Second, Log: logf(t)})
	close(stop)
	ok, failed := wait()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		t.Logf("move %d: %d rows copied in %v (%.0f rows/s), %d changes replayed, freezes %+v",
			r.Move.ID, r.RowsCopied, r.CopyTime, float64(r.RowsCopied)/max(r.CopyTime.Seconds(), 1e-9), r.Replayed, r.Freezes)
	}
	t.Logf("workload: %d commits acknowledged, %d refused or failed", ok, failed)
	if ok == 0 {
		t.Error("the workload committed nothing")
	}
	m, err := e.cat.Load(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.RangesOf(e.shards[1].Name); len(got) != 1 || got[0].Lo != buckets/2 || got[0].Hi != buckets-1 {
		t.Errorf("after the move shard1 owns %v", got)
	}
	e.ownedOnce(0, buckets-1)
	e.check()
	// Writes after the move, through the same router: every execution.
	for _, id := range e.ids {
		if err := e.commit(id); err != nil {
			t.Fatalf("commit %s after the move: %v", id, err)
		}
	}
	e.check()
}

// TestMoverKilledAtEachStep stops the mover at every step in turn (a
// light workload running), checks that the range is never served twice,
// then resumes (apply) or rolls back (abort) and checks the state. The
// range moves back and forth.
func TestMoverKilledAtEachStep(t *testing.T) {
	e := newEnv(t, 80)
	const lo, hi = 8, 23
	for i, step := range reshard.Steps {
		abort := i%2 == 1
		m, err := e.cat.Load(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		to := e.shards[1].Name
		if m.ShardForBucket(lo).Name == to {
			to = e.shards[0].Name
		}
		if _, err := reshard.Plan(e.ctx, e.cat, reshard.Request{Lo: lo, Hi: hi, To: to}); err != nil {
			t.Fatalf("step %s: plan: %v", step, err)
		}
		stop := make(chan struct{})
		wait := e.workload(2, 100000, stop)
		hook := func(ctx context.Context, s string, _ catalog.MoveRecord) error {
			if s == step {
				// The mover holds its lease: no abort meanwhile.
				if err := reshard.Abort(ctx, e.cat, reshard.Options{}); !errors.Is(err, catalog.ErrLeaseHeld) {
					t.Errorf("step %s: abort while apply runs: want ErrLeaseHeld, got %v", step, err)
				}
				return reshard.ErrInjected
			}
			return nil
		}
		_, err = reshard.Apply(e.ctx, e.cat, reshard.Options{FreezeBudget: 2 * time.Second, Hook: hook})
		if !errors.Is(err, reshard.ErrInjected) {
			close(stop)
			wait()
			t.Fatalf("step %s: apply: want the injected stop, got %v", step, err)
		}
		e.ownedOnce(lo, hi)
		e.statusShowsLag(step)
		if abort {
			err = reshard.Abort(e.ctx, e.cat, reshard.Options{})
		} else {
			_, err = reshard.Apply(e.ctx, e.cat, reshard.Options{FreezeBudget: 2 * time.Second})
		}
		close(stop)
		ok, _ := wait()
		if err != nil {
			t.Fatalf("step %s: %s after the stop: %v", step, map[bool]string{true: "abort", false: "apply"}[abort], err)
		}
		if n := e.ownedOnce(lo, hi); n != 1 {
			t.Errorf("step %s: buckets %d-%d served by %d shards after recovery, want 1", step, lo, hi, n)
		}
		m, err = e.cat.Load(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("step %-12s %-5s → range on %s (epoch %d), %d commits during", step, map[bool]string{true: "abort", false: "apply"}[abort],
			m.ShardForBucket(lo).Name, m.Epoch, ok)
		e.check()
		if t.Failed() {
			return
		}
	}
}

// statusShowsLag checks reshard.Status on the stopped move: a move whose
// capture runs has its lag read from the source (a count, no error); any
// other has none.
func (e *env) statusShowsLag(step string) {
	e.t.Helper()
	st, err := reshard.Status(e.ctx, e.cat, true)
	if err != nil {
		e.t.Fatalf("step %s: status: %v", step, err)
	}
	if len(st) != 1 {
		e.t.Fatalf("step %s: status lists %d unfinished moves, want 1", step, len(st))
	}
	m := st[0]
	switch m.Phase {
	case catalog.PhaseCopying, catalog.PhaseCatchingUp, catalog.PhaseFrozen:
		if m.LagErr != nil || m.Lag < 0 {
			e.t.Errorf("step %s (phase %s): lag %d, %v; want a count read from %s", step, m.Phase, m.Lag, m.LagErr, m.From)
		}
	default:
		if m.Lag != -1 || m.LagErr != nil {
			e.t.Errorf("step %s (phase %s): lag %d, %v; want none (no capture)", step, m.Phase, m.Lag, m.LagErr)
		}
	}
	var b strings.Builder
	if err := reshard.WriteStatus(&b, st); err != nil {
		e.t.Fatal(err)
	}
	if !strings.Contains(b.String(), "LAG") {
		e.t.Errorf("step %s: status table without a LAG column:\n%s", step, b.String())
	}
}

// TestFreezeOverBudgetIsAbandoned holds a transaction on the moving range
// open across the first freeze: the freeze cannot take the range's lock
// within its budget, is abandoned (the source keeps the range, writable)
// and retried once the transaction ended.
func TestFreezeOverBudgetIsAbandoned(t *testing.T) {
	e := newEnv(t, 40)
	const lo, hi = 0, 15
	var key string
	for _, id := range e.ids {
		if b := shardmap.BucketText(id, buckets); b >= lo && b <= hi {
			key = id
			break
		}
	}
	if key == "" {
		t.Fatal("no execution in the range")
	}
	if _, err := reshard.Plan(e.ctx, e.cat, reshard.Request{Lo: lo, Hi: hi, To: e.shards[1].Name}); err != nil {
		t.Fatal(err)
	}
	src := e.pools[e.shards[0].Name]
	var blocker pgx.Tx
	frozen := 0
	hook := func(ctx context.Context, s string, _ catalog.MoveRecord) error {
		if s != "frozen" {
			return nil
		}
		frozen++
		switch frozen {
		case 1:
			// A writer in flight on the range: it holds the range lock
			// SHARED until it ends.
			tx, err := src.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT pgshard_fence_assert($1::text)`, key); err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
			blocker = tx
		case 2:
			// The source still owns the range after the abandoned
			// freeze: the writer can write and commit.
			if _, err := blocker.Exec(ctx, `UPDATE executions SET data = data WHERE id = $1::text`, key); err != nil {
				return fmt.Errorf("the blocked writer could not write after the abandoned freeze: %w", err)
			}
			if err := blocker.Commit(ctx); err != nil {
				return err
			}
			blocker = nil
		}
		return nil
	}
	defer func() {
		if blocker != nil {
			_ = blocker.Rollback(context.Background())
		}
	}()
	res, err := reshard.Apply(e.ctx, e.cat, reshard.Options{FreezeBudget: 300 * time.Millisecond, RetryPause: 10 * time.Millisecond, Hook: hook, Log: logf(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || len(res[0].Freezes) < 2 || !res[0].Freezes[0].Abandoned || res[0].Freezes[len(res[0].Freezes)-1].Abandoned {
		t.Fatalf("want a first freeze abandoned and a last one flipped, got %+v", res)
	}
	ms, err := e.cat.Moves(e.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	last := ms[len(ms)-1]
	if last.Phase != catalog.PhaseDone || last.Attempts < 2 {
		t.Errorf("journal: %+v, want done after at least 2 freezes", last)
	}
	// The journal records the freezes: the first abandoned (the lock was
	// not granted within the budget), the last flipped, each with a start
	// and a hold of its own.
	fs, err := last.Freezes()
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) < 2 || fs[0].Outcome != catalog.FreezeAbandoned || fs[0].Why != catalog.WhyDeadline ||
		fs[len(fs)-1].Outcome != catalog.FreezeFlipped || fs[len(fs)-1].Why != "" {
		t.Errorf("journal's freezes %+v (detail %s): want the first abandoned (deadline), the last flipped", fs, last.Detail)
	}
	for i, f := range fs {
		if f.MS < 0 || f.StartedAt.IsZero() || f.StartedAt.Location() != time.UTC {
			t.Errorf("journal's freeze %d: %+v, want a UTC start and a hold >= 0", i, f)
		}
	}
	var b strings.Builder
	if err := reshard.WriteStatus(&b, reshard.Statuses(ms)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "LONGEST") || !strings.Contains(b.String(), "ABANDONED") {
		t.Errorf("status table without the freezes' columns:\n%s", b.String())
	}
	t.Logf("journal's freezes %s\n%s", last.Detail, b.String())
	m, err := e.cat.Load(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.ShardForBucket(lo).Name; got != e.shards[1].Name || !slices.Equal(m.RangesOf(e.shards[0].Name), []shardmap.Range{{Lo: hi + 1, Hi: buckets - 1, Shard: e.shards[0].Name}}) {
		t.Errorf("after the move: map ranges %v", m.Ranges)
	}
	e.check()
}

// TestCaptureRecordsOnlyItsRanges: two captures on one shard (two ranges),
// then one: a commit records its rows when, and only when, its bucket is in
// a range still captured (each capture has triggers of its own), a
// capture's triggers stay while it runs, and the last capture's end
// leaves none.
func TestCaptureRecordsOnlyItsRanges(t *testing.T) {
	e := newEnv(t, 48)
	src := e.pools[e.shards[0].Name]
	byRange := map[int][]string{} // 0: buckets 0-15, 1: 32-47, 2: the rest
	for _, id := range e.ids {
		switch b := shardmap.BucketText(id, buckets); {
		case b < 16:
			byRange[0] = append(byRange[0], id)
		case b >= 32 && b < 48:
			byRange[1] = append(byRange[1], id)
		default:
			byRange[2] = append(byRange[2], id)
		}
	}
	for r := range 3 {
		if len(byRange[r]) == 0 {
			t.Fatalf("no key in range %d of %d keys", r, len(e.ids))
		}
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := src.Exec(e.ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// recorded commits one key of each range and returns which ranges got
	// change records (of any of the keyed tables) for it.
	recorded := func() [3]bool {
		t.Helper()
		exec(`DELETE FROM pgshard_move_rows`)
		var got [3]bool
		for r := range 3 {
			id := byRange[r][0]
			if err := e.commit(id); err != nil {
				t.Fatal(err)
			}
			var tables []string
			if err := src.QueryRow(e.ctx, `SELECT coalesce(array_agg(DISTINCT tbl ORDER BY tbl), '{}') FROM pgshard_move_rows`).Scan(&tables); err != nil {
				t.Fatal(err)
			}
			exec(`DELETE FROM pgshard_move_rows`)
			got[r] = len(tables) > 0
			for _, want := range []string{"executions", "outbox", "processed_events", "timers", "trace"} {
				if got[r] && !slices.Contains(tables, want) {
					t.Errorf("range %d: change records from %v, want one of %s too", r, tables, want)
				}
			}
		}
		return got
	}
	triggers := func() int {
		var n int
		if err := src.QueryRow(e.ctx, `SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'pgshard\_move\_capture%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := triggers(); n != 0 {
		t.Fatalf("%d capture triggers before any capture", n)
	}
	exec(`SELECT pgshard_move_capture_begin(901, 0, 15)`)
	exec(`SELECT pgshard_move_capture_begin(902, 32, 47)`)
	if got := recorded(); got != [3]bool{true, true, false} {
		t.Errorf("two captures: recorded %v, want ranges 0 and 1 only", got)
	}
	exec(`SELECT pgshard_move_capture_end(901)`)
	if got := recorded(); got != [3]bool{false, true, false} {
		t.Errorf("capture 902 alone: recorded %v, want range 1 only", got)
	}
	exec(`SELECT pgshard_move_capture_end(901)`) // again: nothing changes
	if n := triggers(); n != 6 {
		t.Errorf("%d capture triggers while one capture runs, want one on each of the 6 tables", n)
	}
	exec(`SELECT pgshard_move_capture_end(902)`)
	if got := recorded(); got != [3]bool{} {
		t.Errorf("no capture: recorded %v", got)
	}
	if n := triggers(); n != 0 {
		t.Errorf("%d capture triggers left after the last capture ended", n)
	}
}
