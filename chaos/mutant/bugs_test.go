package mutant_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/pgshard/pgshard/chaos/mutant"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// bugEnv is one store bug's test: a fresh migrated map, the control and
// the mutant on it.
type bugEnv struct {
	ctx       context.Context
	m         *shardmap.Map
	ctrl, mut store.ExecutionStore
	ids       []string
	next      int
}

// id returns a fresh execution id.
func (e *bugEnv) id() string { e.next++; return e.ids[e.next-1] }

// saved first-saves a new execution through s and returns it at version 1.
func (e *bugEnv) saved(t *testing.T, s store.ExecutionStore) *store.Execution {
	t.Helper()
	x := &store.Execution{ID: e.id(), DefinitionID: "def", Status: "running"}
	if err := s.Save(e.ctx, x); err != nil {
		t.Fatal(err)
	}
	return x
}

// commit commits x through s and fails the test on an error.
func (e *bugEnv) commit(t *testing.T, s store.ExecutionStore, x *store.Execution, timers []store.TimerOp, trace string) {
	t.Helper()
	var tj json.RawMessage
	if trace != "" {
		tj = json.RawMessage(trace)
	}
	if err := s.Commit(e.ctx, x, nil, "", timers, nil, tj); err != nil {
		t.Fatal(err)
	}
}

// owner returns the index of the shard owning id.
func (e *bugEnv) owner(id string) int { return e.m.ShardIndexForBucket(e.m.Bucket(id)) }

func (e *bugEnv) rows(t *testing.T, sql string, args ...any) int {
	t.Helper()
	return countAll(t, e.m, sql, args...)
}

// stale returns a copy of x at version v (a writer that read an older
// version).
func stale(x *store.Execution, v int) *store.Execution {
	c := x.Clone()
	c.Version = v
	c.Status = fmt.Sprintf("stale from %d", v)
	return c
}

func wantConflict(t *testing.T, err error, found int) {
	t.Helper()
	var ce *store.ConflictError
	if !errors.As(err, &ce) || ce.Found != found {
		t.Fatalf("commit error %v, want a conflict finding version %d", err, found)
	}
}

// TestStoreBugs shows each store-level bug at the data level: the same
// steps through the control behave, through the mutant they leave the
// state the bug's description says.
func TestStoreBugs(t *testing.T) {
	c := clustertest.Get(t)
	for _, bt := range []struct {
		bug  mutant.Kind
		opts store.Options
		run  func(t *testing.T, e *bugEnv)
	}{
		{mutant.OutboxOutsideTx, store.Options{}, func(t *testing.T, e *bugEnv) {
			for _, s := range []store.ExecutionStore{e.ctrl, e.mut} {
				x := e.saved(t, s)
				e.commit(t, s, x, nil, "") // now at 2
				event := `{"id":"lost-cas-` + x.ID + `"}`
				err := s.Commit(e.ctx, stale(x, 1), []store.Emit{{TargetID: x.ID, Event: json.RawMessage(event)}}, "", nil, nil, nil)
				wantConflict(t, err, 2)
				got := e.rows(t, `SELECT count(*) FROM outbox WHERE event = $1`, event)
				if want := map[bool]int{true: 0, false: 1}[s == e.ctrl]; got != want {
					t.Fatalf("ctrl=%v: %d outbox rows of the commit that lost its CAS, want %d", s == e.ctrl, got, want)
				}
				// A winning commit's events are written once.
				won := `{"id":"won-` + x.ID + `"}`
				if err := s.Commit(e.ctx, x, []store.Emit{{Event: json.RawMessage(won)}}, "", nil, nil, nil); err != nil {
					t.Fatal(err)
				}
				if n := count(t, e.m, e.owner(x.ID), `SELECT count(*) FROM outbox WHERE event = $1 AND target_id IS NULL`, won); n != 1 {
					t.Fatalf("ctrl=%v: a won commit left %d outbox rows, want 1", s == e.ctrl, n)
				}
			}
		}},
		{mutant.CASWithoutVersion, store.Options{}, func(t *testing.T, e *bugEnv) {
			for _, s := range []store.ExecutionStore{e.ctrl, e.mut} {
				x := e.saved(t, s)
				a, b := x.Clone(), x.Clone() // two writers read version 1
				a.Status, b.Status = "a", "b"
				if err := s.Save(e.ctx, a); err != nil {
					t.Fatal(err)
				}
				err := s.Save(e.ctx, b)
				got, lerr := s.Load(e.ctx, x.ID)
				if lerr != nil {
					t.Fatal(lerr)
				}
				if s == e.ctrl {
					wantConflict(t, err, 2)
					if got.Status != "a" || got.Version != 2 {
						t.Fatalf("control: stored %s at %d, want a at 2", got.Status, got.Version)
					}
					continue
				}
				if err != nil || b.Version != 2 || got.Status != "b" || got.Version != 2 {
					t.Fatalf("mutant: second writer got %v (version %d), stored %s at %d; want both writers to win version 2, b stored",
						err, b.Version, got.Status, got.Version)
				}
				// A first save of an existing execution overwrites it too.
				again := &store.Execution{ID: x.ID, DefinitionID: "def", Status: "again"}
				if err := s.Save(e.ctx, again); err != nil || again.Version != 1 {
					t.Fatalf("mutant: a second first save: %v (version %d), want it to win version 1", err, again.Version)
				}
			}
		}},
		{mutant.DedupeOutsideTx, store.Options{}, func(t *testing.T, e *bugEnv) {
			for _, s := range []store.ExecutionStore{e.ctrl, e.mut} {
				x := e.saved(t, s)
				e.commit(t, s, x, nil, "")
				err := s.Commit(e.ctx, stale(x, 1), nil, "ev-lost", nil, nil, nil)
				wantConflict(t, err, 2)
				_, done, err := s.LoadForEvent(e.ctx, x.ID, "ev-lost")
				if err != nil {
					t.Fatal(err)
				}
				rows := count(t, e.m, e.owner(x.ID), `SELECT count(*) FROM processed_events WHERE execution_id = $1 AND event_id = 'ev-lost'`, x.ID)
				if s == e.ctrl && (done || rows != 0) {
					t.Fatalf("control: the lost commit's event is processed=%v (%d rows)", done, rows)
				}
				if s == e.mut && (!done || rows != 1) {
					t.Fatalf("mutant: the lost commit's event is processed=%v (%d rows), want it marked processed", done, rows)
				}
			}
		}},
		{mutant.TimerDeleteWithoutFireAt, store.Options{}, func(t *testing.T, e *bugEnv) {
			for _, s := range []store.ExecutionStore{e.ctrl, e.mut} {
				x := e.saved(t, s)
				e.commit(t, s, x, []store.TimerOp{store.Schedule("t", 100)}, "")
				due, err := s.DueTimers(e.ctx, 150, 0) // the sweeper sees t due at 100 ...
				if err != nil || !slices.ContainsFunc(due, func(d store.Timer) bool { return d.ExecutionID == x.ID && d.FireAt == 100 }) {
					t.Fatalf("due timers %v, %v: want %s's at 100", due, err, x.ID)
				}
				e.commit(t, s, x, []store.TimerOp{store.Schedule("t", 200)}, "") // ... a worker re-arms it ...
				deleted, err := s.DeleteTimer(e.ctx, x.ID, "t", 100)             // ... the stale sweep deletes
				if err != nil {
					t.Fatal(err)
				}
				left := e.rows(t, `SELECT count(*) FROM timers WHERE execution_id = $1 AND path = 't' AND fire_at = 200`, x.ID)
				if s == e.ctrl && (deleted || left != 1) {
					t.Fatalf("control: the stale sweep deleted=%v, %d re-armed rows left, want the re-armed timer kept", deleted, left)
				}
				if s == e.mut && (!deleted || left != 0) {
					t.Fatalf("mutant: the stale sweep deleted=%v, %d re-armed rows left, want the re-armed timer gone", deleted, left)
				}
			}
		}},
		{mutant.CancelDoesNotDelete, store.Options{}, func(t *testing.T, e *bugEnv) {
			for _, s := range []store.ExecutionStore{e.ctrl, e.mut} {
				x := e.saved(t, s)
				e.commit(t, s, x, []store.TimerOp{store.Schedule("t", 100), store.Schedule("u", 100)}, "")
				e.commit(t, s, x, []store.TimerOp{store.Cancel("t")}, "")
				left := e.rows(t, `SELECT count(*) FROM timers WHERE execution_id = $1 AND path = 't'`, x.ID)
				others := e.rows(t, `SELECT count(*) FROM timers WHERE execution_id = $1 AND path = 'u'`, x.ID)
				want := map[bool]int{true: 0, false: 1}[s == e.ctrl]
				if left != want || others != 1 {
					t.Fatalf("ctrl=%v: cancelled timer rows %d (want %d), other timer rows %d (want 1)", s == e.ctrl, left, want, others)
				}
			}
		}},
		{mutant.TraceTrimOffByOne, store.Options{TraceMax: 3}, func(t *testing.T, e *bugEnv) {
			for _, s := range []store.ExecutionStore{e.ctrl, e.mut} {
				x := e.saved(t, s)
				for k := range 6 {
					e.commit(t, s, x, nil, fmt.Sprintf(`{"k":%d}`, k))
				}
				ring, err := s.ReadTrace(e.ctx, x.ID)
				if err != nil {
					t.Fatal(err)
				}
				var idx []int
				for _, r := range ring {
					idx = append(idx, r.Index)
				}
				want := map[bool][]int{true: {3, 4, 5}, false: {2, 3, 4, 5}}[s == e.ctrl]
				if !slices.Equal(idx, want) {
					t.Fatalf("ctrl=%v: ring idx %v after 6 appends with trace_max 3, want %v", s == e.ctrl, idx, want)
				}
			}
		}},
		{mutant.WrongShard, store.Options{}, func(t *testing.T, e *bugEnv) {
			// About 1/8 of ids move.
			moved := 0
			for _, id := range ids(99, 8000) {
				if e.m.Bucket(id)%8 == 3 {
					moved++
				}
			}
			if moved < 800 || moved > 1200 {
				t.Fatalf("%d of 8000 ids are in the moved buckets, want about 1000", moved)
			}
			var in, out string // an id the bug moves, one it does not
			for _, id := range e.ids[e.next:] {
				if e.m.Bucket(id)%8 == 3 && in == "" {
					in = id
				} else if e.m.Bucket(id)%8 != 3 && out == "" {
					out = id
				}
			}
			for _, id := range []string{in, out} {
				x := &store.Execution{ID: id, DefinitionID: "def", Status: "running"}
				if err := e.mut.Save(e.ctx, x); err != nil {
					t.Fatal(err)
				}
				event := `{"id":"placed-` + id + `"}`
				err := e.mut.Commit(e.ctx, x, []store.Emit{{Event: json.RawMessage(event)}}, "ev-"+id,
					[]store.TimerOp{store.Schedule("t", 1)}, []store.Spawn{{ChildID: "c-" + id}}, json.RawMessage(`{"n":1}`))
				if err != nil {
					t.Fatal(err)
				}
				want := e.owner(id)
				if id == in {
					want = (want + 1) % len(e.m.Shards)
				}
				for i, sh := range e.m.Shards {
					n := count(t, e.m, i, `SELECT
  (SELECT count(*) FROM executions WHERE id = $1) + (SELECT count(*) FROM processed_events WHERE execution_id = $1) +
  (SELECT count(*) FROM timers WHERE execution_id = $1) + (SELECT count(*) FROM spawns WHERE parent_id = $1) +
  (SELECT count(*) FROM trace WHERE execution_id = $1) + (SELECT count(*) FROM outbox WHERE event = $2)`, id, event)
					if (i == want) != (n == 6) || (i != want && n != 0) {
						t.Fatalf("id %s (moved %v): %d of its 6 rows on %s, want all on shard index %d", id, id == in, n, sh.Name, want)
					}
				}
				// The shard holding it does not own its bucket, as
				// the shard's own pgshard_bucket says.
				var bucket int
				if err := shardConn(t, e.m, want).QueryRow(e.ctx, `SELECT pgshard_bucket(id) FROM executions WHERE id = $1`, id).Scan(&bucket); err != nil {
					t.Fatal(err)
				}
				owns := e.m.ShardForBucket(bucket).Name == e.m.Shards[want].Name
				if owns == (id == in) {
					t.Fatalf("id %s (moved %v): bucket %d, owned by its shard %s: %v", id, id == in, bucket, e.m.Shards[want].Name, owns)
				}
				// The application works: every operation finds it.
				got, done, err := e.mut.LoadForEvent(e.ctx, id, "ev-"+id)
				if err != nil || !done || got.Version != 2 {
					t.Fatalf("mutant load of %s: %v, %v, %v", id, got, done, err)
				}
				if ok, err := e.mut.DeleteTimer(e.ctx, id, "t", 1); !ok || err != nil {
					t.Fatalf("mutant delete timer of %s: %v, %v", id, ok, err)
				}
				rows, err := e.mut.PendingOutbox(e.ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rows {
					if string(r.Event) == event {
						if err := e.mut.AckOutbox(e.ctx, r.Seq); err != nil {
							t.Fatal(err)
						}
					}
				}
				if n := e.rows(t, `SELECT count(*) FROM outbox WHERE event = $1`, event); n != 0 {
					t.Fatalf("the ack by seq left %d rows of %s", n, id)
				}
				// The control (the map's placement) does not find a moved
				// execution.
				_, err = e.ctrl.Load(e.ctx, id)
				if (id == in) != errors.Is(err, store.ErrNotFound) {
					t.Fatalf("control load of %s (moved %v): %v", id, id == in, err)
				}
			}
		}},
	} {
		t.Run(string(bt.bug), func(t *testing.T) {
			m := clustertest.MigratedMap(t, c)
			e := &bugEnv{ctx: ctxT(t), m: m, ids: ids(uint64(len(bt.bug)), 64)}
			e.ctrl = openStore(t, m, false, "", bt.opts)
			e.mut = openStore(t, m, false, bt.bug, bt.opts)
			bt.run(t, e)
		})
	}
}
