package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// fixedMaps is a MapSource that yields one map and counts its loads.
type fixedMaps struct {
	m     *shardmap.Map
	loads atomic.Int32
}

func (f *fixedMaps) Load(context.Context) (*shardmap.Map, error) {
	f.loads.Add(1)
	return f.m.Clone(), nil
}

// moveBucket returns m at the next epoch with bucket b alone moved to
// shard to (its range split around it).
func moveBucket(t *testing.T, m *shardmap.Map, b int, to string) *shardmap.Map {
	t.Helper()
	next := m.Clone()
	next.Epoch++
	next.Ranges = nil
	for _, r := range m.Ranges {
		if b < r.Lo || b > r.Hi {
			next.Ranges = append(next.Ranges, r)
			continue
		}
		if r.Lo < b {
			next.Ranges = append(next.Ranges, shardmap.Range{Lo: r.Lo, Hi: b - 1, Shard: r.Shard})
		}
		next.Ranges = append(next.Ranges, shardmap.Range{Lo: b, Hi: b, Shard: to})
		if b < r.Hi {
			next.Ranges = append(next.Ranges, shardmap.Range{Lo: b + 1, Hi: r.Hi, Shard: r.Shard})
		}
	}
	if err := next.Validate(); err != nil {
		t.Fatal(err)
	}
	return next
}

// copyQuery reads one row of an execution (read, by its id) and writes
// it (write, with the row's columns as its parameters).
type copyQuery struct{ read, write string }

// copyRows copies execution id's rows from src to dst, one row per query,
// as a mover's copy would.
func copyRows(ctx context.Context, t *testing.T, src, dst *store.Store, id string, qs []copyQuery) {
	t.Helper()
	for _, q := range qs {
		rows, err := src.Pool().Query(ctx, q.read, id)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := collect(rows)
		if err != nil || len(vals) != 1 {
			t.Fatalf("%s: %v, %v", q.read, vals, err)
		}
		if _, err := dst.Pool().Exec(ctx, q.write, vals[0]...); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStaleRouterFenced: a bucket moves from one shard to another (its
// rows copied, every shard's fence set from the new map, as a mover
// would). A router still holding the old map cannot read or write the
// moved execution, nor read a moved key that has no row — each is the
// fence's error naming the new owner, never a stale answer or "not found"
// — and nothing it tried was applied. A router with a map source reloads
// on the refusal and gets the right answer from the new owner, once.
func TestStaleRouterFenced(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			ctx := ctxT(t)
			old := clustertest.MigratedMap(t, clustertest.Get(t))
			stale := openRouter(t, old, mode, store.Options{})
			id := newID(t)
			from := old.Lookup(id).Name
			to := old.Shards[(old.ShardIndexForBucket(old.Bucket(id))+1)%len(old.Shards)].Name
			e := &store.Execution{ID: id, DefinitionID: "fence", Status: "running"}
			if err := stale.Commit(ctx, e, nil, "ev1", nil, nil, json.RawMessage(`{"n":1}`)); err != nil {
				t.Fatal(err)
			}

			// The move: copy the execution's rows, then flip every fence.
			next := moveBucket(t, old, old.Bucket(id), to)
			src, dst := shardStore(t, stale, from), shardStore(t, stale, to)
			copyRows(ctx, t, src, dst, id, []copyQuery{
				{`SELECT id, definition_id, data, version FROM executions WHERE id = $1`, `INSERT INTO executions VALUES ($1, $2, $3, $4)`},
				{`SELECT execution_id, event_id FROM processed_events WHERE execution_id = $1`, `INSERT INTO processed_events VALUES ($1, $2)`},
			})
			for _, sh := range next.Shards {
				if _, err := migrations.SetFence(ctx, shardStore(t, stale, sh.Name).Pool(), next); err != nil {
					t.Fatal(err)
				}
			}

			// The stale router is refused, reads and writes alike.
			wantFenced := func(what string, err error) {
				t.Helper()
				var fe *store.FenceError
				if !errors.As(err, &fe) || fe.Owner != to || fe.Epoch != next.Epoch || fe.State != "moved" {
					t.Fatalf("stale %s: %v (%+v), want the fence's error naming owner %s at epoch %d", what, err, fe, to, next.Epoch)
				}
				if got := router.FailedShards(err); len(got) != 1 || got[0] != from {
					t.Errorf("stale %s: failed shards %v, want [%s]", what, got, from)
				}
			}
			_, err := stale.Load(ctx, id)
			wantFenced("load", err)
			e2 := &store.Execution{ID: id, DefinitionID: "fence", Status: "done", Version: 1}
			wantFenced("commit", stale.Commit(ctx, e2, nil, "ev2", nil, nil, nil))
			wantFenced("save", stale.Save(ctx, e2))
			if e2.Version != 1 {
				t.Errorf("a refused commit left version %d", e2.Version)
			}
			var absent string
			for i := 0; absent == ""; i++ {
				if k := fmt.Sprintf("%s-%d", id, i); next.Lookup(k).Name == to && old.Lookup(k).Name == from {
					absent = k
				}
				if i > 1_000_000 {
					t.Fatal("no absent key in the moved bucket")
				}
			}
			_, err = stale.Load(ctx, absent)
			wantFenced("load of a key without a row", err)
			if n := count(t, src, `SELECT version FROM executions WHERE id = $1`, id); n != 1 {
				t.Errorf("the old owner's row is at version %d, want 1 (untouched)", n)
			}

			// A router that can reload gets the right answer, once.
			maps := &fixedMaps{m: next}
			r, err := router.Open(ctx, old, router.Options{UsePooler: mode == "pgbouncer", Maps: maps,
				Store: store.Options{ConnectAttempts: 3}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.Close)
			got, done, err := r.LoadForEvent(ctx, id, "ev1")
			if err != nil || !done || got.Version != 1 {
				t.Fatalf("reloading router: %+v, %v, %v", got, done, err)
			}
			if r.Map().Epoch != next.Epoch || maps.loads.Load() != 1 {
				t.Errorf("epoch %d after %d loads, want %d after 1", r.Map().Epoch, maps.loads.Load(), next.Epoch)
			}
			got.Status = "done"
			if err := r.Commit(ctx, got, nil, "ev2", nil, nil, nil); err != nil {
				t.Fatal(err)
			}
			if n := count(t, dst, `SELECT version FROM executions WHERE id = $1`, id); n != 2 {
				t.Errorf("the new owner's row is at version %d, want 2", n)
			}
			if n := count(t, src, `SELECT version FROM executions WHERE id = $1`, id); n != 1 {
				t.Errorf("the old owner's row is at version %d, want 1", n)
			}
			if _, err := r.Load(ctx, absent); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("absent key after reload: %v, want ErrNotFound", err)
			}

			// A refusal the map in force cannot fix is returned after one
			// reload, not retried: a shard whose fence the map disagrees
			// with (here: the new owner's fence set back to the old map
			// would be refused as stale, so turn the bucket's row away).
			if _, err := dst.Pool().Exec(ctx, `UPDATE pgshard_fence SET state = 'incoming', owner = $2 WHERE lo = $1`, next.Bucket(id), from); err != nil {
				t.Fatal(err)
			}
			before := maps.loads.Load()
			_, err = r.Load(ctx, id)
			var fe *store.FenceError
			if !errors.As(err, &fe) || fe.State != "incoming" || !strings.Contains(err.Error(), "incoming") {
				t.Errorf("load of an incoming range: %v", err)
			}
			if maps.loads.Load() != before+1 {
				t.Errorf("%d reloads, want 1", maps.loads.Load()-before)
			}

			// Scans leave the moved bucket's rows out on the old owner and
			// find them on the new one; with the bucket served by nobody a
			// listing fails rather than leave it out (TestScanCoverage).
			page, err := r.ListExecutions(ctx, store.ListOptions{DefinitionID: "fence"})
			if !errors.Is(err, router.ErrNotCovered) {
				t.Errorf("list with the bucket incoming on its owner: %+v, %v; want ErrNotCovered", page.Items, err)
			}
			if _, err := dst.Pool().Exec(ctx, `UPDATE pgshard_fence SET state = 'owned', owner = $2 WHERE lo = $1`, next.Bucket(id), to); err != nil {
				t.Fatal(err)
			}
			page, err = stale.ListExecutions(ctx, store.ListOptions{DefinitionID: "fence"})
			if err != nil || len(page.Items) != 1 || page.Items[0].Version != 2 {
				t.Errorf("list: %+v, %v; want the one execution at version 2 (the old owner's copy left out)", page.Items, err)
			}
		})
	}
}

// collect reads every row's values.
func collect(rows interface {
	Next() bool
	Values() ([]any, error)
	Err() error
	Close()
}) ([][]any, error) {
	defer rows.Close()
	var out [][]any
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// TestScanCoverage: a fan-out scan (due timers, pending spawns) reads each
// shard filtered to the buckets its fence serves, in that shard's own
// snapshot. Between a move's flip on the source and on the destination a
// range is served by nobody (a fan-out would miss its rows) and, read the
// other way round, by both (it would read them twice): the router reads
// again and, while the fences stay so, fails with ErrNotCovered instead
// of answering. Once the fences agree the rows are found exactly once.
func TestScanCoverage(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			ctx := ctxT(t)
			old := clustertest.MigratedMap(t, clustertest.Get(t))
			r := openRouter(t, old, mode, store.Options{})
			id := newID(t)
			from := old.Lookup(id).Name
			to := old.Shards[(old.ShardIndexForBucket(old.Bucket(id))+1)%len(old.Shards)].Name
			e := &store.Execution{ID: id, DefinitionID: "cover", Status: "running"}
			if err := r.Commit(ctx, e, nil, "ev1", []store.TimerOp{store.Schedule("a", 1000)},
				[]store.Spawn{{ChildID: id + "-child", RootPath: "a"}}, nil); err != nil {
				t.Fatal(err)
			}
			// The move as a mover makes it: the rows copied, the source's
			// fence moved, the destination's owned.
			next := moveBucket(t, old, old.Bucket(id), to)
			src, dst := shardStore(t, r, from), shardStore(t, r, to)
			copyRows(ctx, t, src, dst, id, []copyQuery{
				{`SELECT execution_id, path, fire_at FROM timers WHERE execution_id = $1`, `INSERT INTO timers VALUES ($1, $2, $3)`},
				{`SELECT parent_id, child_id, root_path, context FROM spawns WHERE parent_id = $1`,
					`INSERT INTO spawns (parent_id, child_id, root_path, context) VALUES ($1, $2, $3, $4)`},
			})
			for _, sh := range next.Shards {
				if _, err := migrations.SetFence(ctx, shardStore(t, r, sh.Name).Pool(), next); err != nil {
					t.Fatal(err)
				}
			}
			b := next.Bucket(id)
			scans := func() (timers, spawns int, terr, serr error) {
				tm, terr := r.DueTimers(ctx, 1001, 0)
				for _, x := range tm {
					if x.ExecutionID == id {
						timers++
					}
				}
				sp, serr := r.PendingSpawns(ctx, 0)
				for _, x := range sp {
					if x.ParentID == id {
						spawns++
					}
				}
				return timers, spawns, terr, serr
			}
			want := func(state string) {
				t.Helper()
				nt, ns, terr, serr := scans()
				if terr != nil || serr != nil || nt != 1 || ns != 1 {
					t.Errorf("%s: due timers %d (%v), pending spawns %d (%v); want each once", state, nt, terr, ns, serr)
				}
			}
			wantNotCovered := func(state, says string) {
				t.Helper()
				nt, ns, terr, serr := scans()
				for _, err := range []error{terr, serr} {
					if !errors.Is(err, router.ErrNotCovered) || !strings.Contains(err.Error(), says) {
						t.Errorf("%s: %v; want ErrNotCovered saying %q", state, err, says)
					}
				}
				if nt != 0 || ns != 0 {
					t.Errorf("%s: %d timers, %d spawns returned with the error", state, nt, ns)
				}
			}
			want("moved")
			setState := func(s *store.Store, state string) {
				t.Helper()
				if _, err := s.Pool().Exec(ctx, `UPDATE pgshard_fence SET state = $2 WHERE lo = $1`, b, state); err != nil {
					t.Fatal(err)
				}
			}
			// Source flipped, destination not yet: served by nobody.
			setState(dst, "incoming")
			wantNotCovered("between the flips", fmt.Sprintf("buckets %d-%d are served by no shard", b, b))
			// Destination owned while the source is still frozen: by both.
			setState(dst, "owned")
			setState(src, "frozen")
			wantNotCovered("both serving", fmt.Sprintf("buckets %d-%d are served by two shards", b, b))
			setState(src, "moved")
			want("flipped")
		})
	}
}
