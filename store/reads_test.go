package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/store"
)

func TestLoadNotFound(t *testing.T) {
	eachMode(t, store.Options{}, func(t *testing.T, s *store.Store, _ testDB) {
		ctx := ctxT(t)
		id := newID(t)
		if _, err := s.Load(ctx, id); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), id) {
			t.Errorf("Load: %v, want ErrNotFound naming the id", err)
		}
		if _, _, err := s.LoadForEvent(ctx, id, "ev"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LoadForEvent: %v, want ErrNotFound", err)
		}
	})
}

// TestLoadRoundTrip: what Commit stores, Load returns, including fields
// this store does not know.
func TestLoadRoundTrip(t *testing.T) {
	eachMode(t, store.Options{}, func(t *testing.T, s *store.Store, _ testDB) {
		ctx := ctxT(t)
		e := &store.Execution{ID: newID(t), DefinitionID: "order", Status: "waiting", Outcome: json.RawMessage(`{"paid":12.5}`),
			ActivePath: []string{"root", "root.wait"}, ParentID: newID(t), Context: json.RawMessage(`{"items":[1,2,3]}`),
			Extra: map[string]json.RawMessage{"history": json.RawMessage(`[{"e":"Go"}]`)}}
		if err := s.Save(ctx, e); err != nil {
			t.Fatal(err)
		}
		got, err := s.Load(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(e)
		gotJSON, _ := json.Marshal(got)
		if string(gotJSON) != string(want) {
			t.Errorf("loaded  %s\nsaved   %s", gotJSON, want)
		}
	})
}

// TestDedupe: the processed event id is recorded by the commit that applied
// the event, seen by IsProcessed and LoadForEvent, and recording it again
// is not an error.
func TestDedupe(t *testing.T) {
	eachMode(t, store.Options{}, func(t *testing.T, s *store.Store, _ testDB) {
		for _, k := range commitKinds {
			t.Run(k.name, func(t *testing.T) {
				ctx := ctxT(t)
				e := &store.Execution{ID: newID(t), DefinitionID: "d"}
				if err := s.Save(ctx, e); err != nil {
					t.Fatal(err)
				}
				if _, seen, err := s.LoadForEvent(ctx, e.ID, "ev1"); err != nil || seen {
					t.Fatalf("before: seen=%v err=%v", seen, err)
				}
				if err := k.commit(t, s, e, "ev1"); err != nil {
					t.Fatal(err)
				}
				got, seen, err := s.LoadForEvent(ctx, e.ID, "ev1")
				if err != nil || !seen || got.Version != 2 {
					t.Fatalf("after: %+v seen=%v err=%v", got, seen, err)
				}
				if ok, err := s.IsProcessed(ctx, e.ID, "ev1"); err != nil || !ok {
					t.Errorf("IsProcessed = %v, %v", ok, err)
				}
				if ok, err := s.IsProcessed(ctx, e.ID, "ev2"); err != nil || ok {
					t.Errorf("IsProcessed(other event) = %v, %v", ok, err)
				}
				if ok, err := s.IsProcessed(ctx, newID(t), "ev1"); err != nil || ok {
					t.Errorf("IsProcessed(other execution) = %v, %v", ok, err)
				}
				// A redelivered event applied again records nothing new.
				if err := k.commit(t, s, e, "ev1"); err != nil {
					t.Fatal(err)
				}
				if n := countRows(t, s, `SELECT count(*) FROM processed_events WHERE execution_id = $1`, e.ID); n != 1 {
					t.Errorf("%d dedupe rows, want 1", n)
				}
			})
		}
	})
}

// TestTimers: schedule upserts, re-arming replaces fire_at, cancel deletes,
// and a stale sweep (DeleteTimer with the fire_at it saw) never removes a
// re-armed timer. fire_at values survive the trip through text exactly.
func TestTimers(t *testing.T) {
	eachMode(t, store.Options{}, func(t *testing.T, s *store.Store, _ testDB) {
		ctx := ctxT(t)
		e := &store.Execution{ID: newID(t), DefinitionID: "d"}
		commit := func(ops ...store.TimerOp) {
			t.Helper()
			if err := s.Commit(ctx, e, nil, "", ops, nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		due := func(now float64) []store.Timer {
			t.Helper()
			ts, err := s.DueTimers(ctx, now, 0)
			if err != nil {
				t.Fatal(err)
			}
			return ts
		}
		odd := 0.1 + 0.2 // not representable in few digits
		commit(store.Schedule("a", 100+odd), store.Schedule("b", 200), store.Schedule("c", 1e-300))
		if got := due(150); len(got) != 2 || got[0].Path != "c" || got[0].FireAt != 1e-300 || got[1].Path != "a" || got[1].FireAt != 100+odd {
			t.Fatalf("due at 150: %+v", got)
		}
		// Re-arm a later, cancel c, within one commit: upsert and delete.
		commit(store.Schedule("a", 300), store.Cancel("c"), store.Cancel("never-armed"))
		if got := due(250); len(got) != 1 || got[0].Path != "b" {
			t.Fatalf("due at 250: %+v", got)
		}
		// A sweep saw a at 100.3 (stale): it must not delete the re-armed timer.
		if ok, err := s.DeleteTimer(ctx, e.ID, "a", 100+odd); err != nil || ok {
			t.Fatalf("stale DeleteTimer = %v, %v", ok, err)
		}
		all := due(1e12)
		if len(all) != 2 || all[1].Path != "a" || all[1].FireAt != 300 {
			t.Fatalf("timers: %+v", all)
		}
		// Deleting with the exact fire_at read back works.
		for _, tm := range all {
			if ok, err := s.DeleteTimer(ctx, tm.ExecutionID, tm.Path, tm.FireAt); err != nil || !ok {
				t.Fatalf("DeleteTimer(%+v) = %v, %v", tm, ok, err)
			}
		}
		if got := due(1e12); len(got) != 0 {
			t.Fatalf("left: %+v", got)
		}
		// Non-finite fire_at is refused before anything is sent.
		before := e.Version
		if err := s.Commit(ctx, e, nil, "", []store.TimerOp{store.Schedule("x", nan())}, nil, nil); err == nil || e.Version != before {
			t.Errorf("NaN fire_at: err=%v version=%d", err, e.Version)
		}
	})
}

// TestDueTimersOrderAndLimit: ties on fire_at are ordered by execution id
// and path bytewise, and the limit cuts the ordered list.
func TestDueTimersOrderAndLimit(t *testing.T) {
	eachMode(t, store.Options{}, func(t *testing.T, s *store.Store, _ testDB) {
		ctx := ctxT(t)
		var want []store.Timer
		for _, id := range []string{"B", "a", "_", "Z"} {
			e := &store.Execution{ID: id, DefinitionID: "d"}
			if err := s.Commit(ctx, e, nil, "", []store.TimerOp{store.Schedule("p2", 5), store.Schedule("P1", 5), store.Schedule("z", 1)}, nil, nil); err != nil {
				t.Fatal(err)
			}
			want = append(want, store.Timer{ExecutionID: id, Path: "p2", FireAt: 5}, store.Timer{ExecutionID: id, Path: "P1", FireAt: 5},
				store.Timer{ExecutionID: id, Path: "z", FireAt: 1})
		}
		sort.Slice(want, func(i, j int) bool {
			a, b := want[i], want[j]
			if a.FireAt != b.FireAt {
				return a.FireAt < b.FireAt
			}
			if a.ExecutionID != b.ExecutionID {
				return a.ExecutionID < b.ExecutionID
			}
			return a.Path < b.Path
		})
		for _, limit := range []int{0, 1, 5, 12, 20} {
			got, err := s.DueTimers(ctx, 10, limit)
			if err != nil {
				t.Fatal(err)
			}
			w := want
			if limit > 0 && limit < len(w) {
				w = w[:limit]
			}
			if !slices.Equal(got, w) {
				t.Errorf("limit %d:\ngot  %v\nwant %v", limit, got, w)
			}
		}
	})
}

// TestOutboxAndSpawns: rows appear in commit order with seqs strided for
// the shard's ordinal, a NULL target reads as "", the limit is honoured and
// acks delete exactly their row (and are idempotent).
func TestOutboxAndSpawns(t *testing.T) {
	eachMode(t, store.Options{}, func(t *testing.T, s *store.Store, d testDB) {
		ctx := ctxT(t)
		e := &store.Execution{ID: newID(t), DefinitionID: "d"}
		var emits []store.Emit
		var spawns []store.Spawn
		for i := 0; i < 5; i++ {
			target := fmt.Sprintf("t%d", i)
			if i == 3 {
				target = ""
			}
			emits = append(emits, store.Emit{TargetID: target, Event: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
			spawns = append(spawns, store.Spawn{ChildID: fmt.Sprintf("c%d", i), RootPath: "r", Context: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
		}
		spawns[4].Context = nil
		if err := s.Commit(ctx, e, emits[:2], "", nil, spawns[:2], nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(ctx, e, emits[2:], "", nil, spawns[2:], nil); err != nil {
			t.Fatal(err)
		}
		rows, err := s.PendingOutbox(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 5 {
			t.Fatalf("%d outbox rows, want 5", len(rows))
		}
		for i, r := range rows {
			if r.TargetID != emits[i].TargetID || string(r.Event) != string(emits[i].Event) {
				t.Errorf("row %d: %+v, want %+v", i, r, emits[i])
			}
			if (r.Seq-1)%1024 != int64(d.shard.Ordinal) || (i > 0 && r.Seq <= rows[i-1].Seq) {
				t.Errorf("row %d: seq %d (ordinal %d, previous %d)", i, r.Seq, d.shard.Ordinal, rows[max(i-1, 0)].Seq)
			}
		}
		if got, err := s.PendingOutbox(ctx, 2); err != nil || len(got) != 2 || got[1].Seq != rows[1].Seq {
			t.Errorf("limit 2: %+v, %v", got, err)
		}
		if err := s.AckOutbox(ctx, rows[1].Seq); err != nil {
			t.Fatal(err)
		}
		if err := s.AckOutbox(ctx, rows[1].Seq); err != nil {
			t.Errorf("second ack: %v", err)
		}
		if got, _ := s.PendingOutbox(ctx, 0); len(got) != 4 || got[1].Seq != rows[2].Seq {
			t.Errorf("after ack: %+v", got)
		}

		sp, err := s.PendingSpawns(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(sp) != 5 {
			t.Fatalf("%d spawns, want 5", len(sp))
		}
		for i, r := range sp {
			wantCtx := string(spawns[i].Context)
			if wantCtx == "" {
				wantCtx = "{}"
			}
			if r.ParentID != e.ID || r.ChildID != spawns[i].ChildID || r.RootPath != "r" || string(r.Context) != wantCtx {
				t.Errorf("spawn %d: %+v", i, r)
			}
		}
		if got, _ := s.PendingSpawns(ctx, 3); len(got) != 3 {
			t.Errorf("limit 3: %d spawns", len(got))
		}
		if err := s.AckSpawn(ctx, sp[0].Seq); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.PendingSpawns(ctx, 0); len(got) != 4 || got[0].Seq != sp[1].Seq {
			t.Errorf("after ack: %+v", got)
		}
	})
}

// TestTraceRing: entries get durable, contiguous indexes; with TraceMax the
// ring keeps the newest TraceMax, and indexes continue past dropped ones.
// Concurrent appends to one ring (commits and standalone appends) never
// collide on an index.
func TestTraceRing(t *testing.T) {
	const max = 4
	eachMode(t, store.Options{TraceMax: max, MaxConns: 8}, func(t *testing.T, s *store.Store, _ testDB) {
		ctx := ctxT(t)
		e := &store.Execution{ID: newID(t), DefinitionID: "d"}
		for i := 0; i < 7; i++ {
			var err error
			entry := json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
			if i%2 == 0 {
				err = s.Commit(ctx, e, nil, "", nil, nil, entry)
			} else {
				err = s.AppendTrace(ctx, e.ID, entry)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.ReadTrace(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != max {
			t.Fatalf("%d entries, want %d: %+v", len(got), max, got)
		}
		for j, te := range got {
			i := 7 - max + j
			if te.Index != i || string(te.Entry) != fmt.Sprintf(`{"i":%d}`, i) {
				t.Errorf("entry %d: %+v, want index %d", j, te, i)
			}
		}
		// Concurrent appends: commits and standalone appends race on one ring.
		var g errgroup.Group
		var mu sync.Mutex
		appended := 0
		for w := 0; w < 6; w++ {
			g.Go(func() error {
				for i := 0; i < 10; i++ {
					if w%2 == 0 {
						if err := s.AppendTrace(ctx, e.ID, json.RawMessage(`{"w":1}`)); err != nil {
							return err
						}
					} else {
						cur, err := s.Load(ctx, e.ID)
						if err != nil {
							return err
						}
						err = s.Commit(ctx, cur, nil, "", nil, nil, json.RawMessage(`{"w":2}`))
						if errors.Is(err, store.ErrConflict) {
							continue
						}
						if err != nil {
							return err
						}
					}
					mu.Lock()
					appended++
					mu.Unlock()
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		got, err = s.ReadTrace(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		last := 7 + appended - 1
		if len(got) != max || got[max-1].Index != last {
			t.Fatalf("after %d concurrent appends: %+v, want %d entries ending at index %d", appended, got, max, last)
		}
		for j := 1; j < len(got); j++ {
			if got[j].Index != got[j-1].Index+1 {
				t.Errorf("indexes not contiguous: %+v", got)
			}
		}
	})
	t.Run("unbounded", func(t *testing.T) {
		d := freshDB(t, "direct")
		s := d.open(t, store.Options{})
		ctx := ctxT(t)
		id := newID(t)
		for i := 0; i < 30; i++ {
			if err := s.AppendTrace(ctx, id, json.RawMessage(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.ReadTrace(ctx, id)
		if err != nil || len(got) != 30 || got[29].Index != 29 {
			t.Fatalf("%d entries, %v", len(got), err)
		}
		if err := s.AppendTrace(ctx, id, json.RawMessage(`{`)); err == nil {
			t.Error("an invalid JSON entry was accepted")
		}
	})
}

// TestTraceRingDefaultCap is the regression test of issue 11, defect 7:
// without TraceMax the ring is capped at DefaultTraceMax (the seed's
// default); NoTraceCap keeps every entry.
func TestTraceRingDefaultCap(t *testing.T) {
	d := freshDB(t, "direct")
	tests := []struct {
		name string
		max  int
		want int
	}{
		{"default", 0, store.DefaultTraceMax},
		{"unbounded", store.NoTraceCap, store.DefaultTraceMax + 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := d.open(t, store.Options{TraceMax: tt.max})
			ctx := ctxT(t)
			id := newID(t)
			const n = store.DefaultTraceMax + 5
			for i := range n {
				if err := s.AppendTrace(ctx, id, json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.ReadTrace(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.want || got[0].Index != n-tt.want || got[len(got)-1].Index != n-1 {
				t.Fatalf("%d entries (indexes %d..%d), want %d (indexes %d..%d)",
					len(got), got[0].Index, got[len(got)-1].Index, tt.want, n-tt.want, n-1)
			}
		})
	}
}
