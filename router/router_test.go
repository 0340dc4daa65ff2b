package router_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// TestOpenRefusesIdentityMismatch: the router compares every shard's
// identity record with its map and refuses to start on a mismatch.
func TestOpenRefusesIdentityMismatch(t *testing.T) {
	c := clustertest.Get(t)
	m := clustertest.MigratedMap(t, c)
	tests := []struct {
		name  string
		edit  func(m *shardmap.Map)
		wants []string
	}{
		{"two entries on one database", func(m *shardmap.Map) {
			m.Shards[1].DSN, m.Shards[1].PoolerDSN = m.Shards[0].DSN, m.Shards[0].PoolerDSN
		}, []string{"identity mismatch", `shard "shard1"`, `belongs to shard "shard0"`}},
		{"swapped databases", func(m *shardmap.Map) {
			m.Shards[2].DSN, m.Shards[3].DSN = m.Shards[3].DSN, m.Shards[2].DSN
			m.Shards[2].PoolerDSN, m.Shards[3].PoolerDSN = m.Shards[3].PoolerDSN, m.Shards[2].PoolerDSN
		}, []string{`shard "shard2"`, `shard "shard3"`, "ordinal"}},
		{"another bucket count", func(m *shardmap.Map) {
			bad, err := shardmap.Even(1024, m.Shards)
			if err != nil {
				t.Fatal(err)
			}
			*m = *bad
		}, []string{"created for 4096 buckets, the map has 1024"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := m.Clone()
			tt.edit(bad)
			if err := bad.Validate(); err != nil {
				t.Fatal(err)
			}
			r, err := router.Open(ctxT(t), bad, router.Options{Store: store.Options{ConnectAttempts: 1}})
			if err == nil {
				r.Close()
				t.Fatal("the router started on a map the shards disagree with")
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	t.Run("unmigrated shard", func(t *testing.T) {
		db := clustertest.FreshDatabase(t, c)
		raw, err := c.MapFor(db, shardmap.DefaultBuckets)
		if err != nil {
			t.Fatal(err)
		}
		_, err = router.Open(ctxT(t), raw, router.Options{Store: store.Options{ConnectAttempts: 1}})
		if err == nil || !strings.Contains(err.Error(), "pgshard migrate") || len(router.FailedShards(err)) != 4 {
			t.Fatalf("error %v, want every shard named and told to migrate", err)
		}
	})
}

// committed is what a test committed through the router.
type committed struct {
	id     string
	shard  string
	seqs   []int64
	timers []store.Timer
}

// commitMany commits n executions through r, each with an emit naming its
// emitter, a dedupe record, a timer, a spawn and a trace entry, then a
// second, state-only commit.
func commitMany(t *testing.T, r *router.Router, n int) []committed {
	t.Helper()
	ctx := ctxT(t)
	out := make([]committed, n)
	for i := range out {
		id := newID(t)
		e := &store.Execution{ID: id, DefinitionID: "placement", Status: "running"}
		fireAt := float64(1000 + i%7) // ties across shards
		err := r.Commit(ctx, e,
			[]store.Emit{{TargetID: newID(t), Event: json.RawMessage(fmt.Sprintf(`{"from":%q}`, id))}},
			"ev-"+id, []store.TimerOp{store.Schedule("p", fireAt)},
			[]store.Spawn{{ChildID: newID(t), RootPath: "r", Context: json.RawMessage(fmt.Sprintf(`{"parent":%q}`, id))}},
			json.RawMessage(`{"step":1}`))
		if err != nil {
			t.Fatal(err)
		}
		e.Status = "waiting"
		if err := r.Save(ctx, e); err != nil {
			t.Fatal(err)
		}
		out[i] = committed{id: id, shard: r.ShardOf(id), timers: []store.Timer{{ExecutionID: id, Path: "p", FireAt: fireAt}}}
	}
	return out
}

// rangeCond is an SQL condition true for keys outside the shard's ranges.
func rangeCond(m *shardmap.Map, shard, key string) string {
	var in []string
	for _, rg := range m.RangesOf(shard) {
		in = append(in, fmt.Sprintf("pgshard_bucket(%s) BETWEEN %d AND %d", key, rg.Lo, rg.Hi))
	}
	return "NOT (" + strings.Join(in, " OR ") + ")"
}

// TestPlacement: every row a commit writes sits on the shard that owns its
// key, checked by each shard's pgshard_bucket in SQL, and the executions
// spread over all shards.
func TestPlacement(t *testing.T) {
	eachMode(t, store.Options{}, func(t *testing.T, r *router.Router) {
		const n = 120
		all := commitMany(t, r, n)
		m := r.Map()
		perShard := map[string]int{}
		for _, c := range all {
			perShard[c.shard]++
			if c.shard != m.Lookup(c.id).Name {
				t.Fatalf("ShardOf(%s) = %s, the map says %s", c.id, c.shard, m.Lookup(c.id).Name)
			}
		}
		total := 0
		for _, name := range r.Shards() {
			s := shardStore(t, r, name)
			checks := map[string]string{
				"executions":       `SELECT count(*) FROM executions WHERE ` + rangeCond(m, name, "id"),
				"processed_events": `SELECT count(*) FROM processed_events WHERE ` + rangeCond(m, name, "execution_id"),
				"timers":           `SELECT count(*) FROM timers WHERE ` + rangeCond(m, name, "execution_id"),
				"trace":            `SELECT count(*) FROM trace WHERE ` + rangeCond(m, name, "execution_id"),
				"spawns":           `SELECT count(*) FROM spawns WHERE ` + rangeCond(m, name, "parent_id"),
				"outbox (emitter)": `SELECT count(*) FROM outbox WHERE ` + rangeCond(m, name, "(event::jsonb)->>'from'"),
			}
			for table, sql := range checks {
				if bad := count(t, s, sql); bad != 0 {
					t.Errorf("shard %s: %d %s rows belong to another shard", name, bad, table)
				}
			}
			got := count(t, s, `SELECT count(*) FROM executions`)
			if got != perShard[name] {
				t.Errorf("shard %s holds %d executions, the router put %d there", name, got, perShard[name])
			}
			for _, table := range []string{"outbox", "spawns", "timers", "trace", "processed_events"} {
				if k := count(t, s, `SELECT count(*) FROM `+table); k != got {
					t.Errorf("shard %s: %d %s rows for %d executions", name, k, table, got)
				}
			}
			if got == 0 {
				t.Errorf("shard %s got no executions out of %d", name, n)
			}
			total += got
			// The global sequences name this shard.
			sh, _ := m.ShardByName(name)
			if bad := count(t, s, `SELECT count(*) FROM outbox WHERE (seq - 1) % 1024 <> $1`, sh.Ordinal); bad != 0 {
				t.Errorf("shard %s: %d outbox seqs name another ordinal", name, bad)
			}
		}
		if total != n {
			t.Errorf("%d executions over all shards, want %d", total, n)
		}
		t.Logf("executions per shard: %v", perShard)
	})
}

// TestFanOutReads: the outbox and spawns batches share the limit fairly
// among the shards, each shard's rows a prefix of its seq order; due
// timers are the global order of all shards' timers cut at the limit; and
// acks routed by seq delete the right row on the right shard.
func TestFanOutReads(t *testing.T) {
	eachMode(t, store.Options{}, func(t *testing.T, r *router.Router) {
		ctx := ctxT(t)
		all := commitMany(t, r, 40)
		var allOutbox []store.OutboxRow
		var allSpawns []store.SpawnRow
		for _, name := range r.Shards() {
			s := shardStore(t, r, name)
			o, err := s.PendingOutbox(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			allOutbox = append(allOutbox, o...)
			sp, err := s.PendingSpawns(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			allSpawns = append(allSpawns, sp...)
		}
		sort.Slice(allOutbox, func(i, j int) bool { return allOutbox[i].Seq < allOutbox[j].Seq })
		sort.Slice(allSpawns, func(i, j int) bool { return allSpawns[i].Seq < allSpawns[j].Seq })
		var allTimers []store.Timer
		for _, c := range all {
			allTimers = append(allTimers, c.timers...)
		}
		sort.Slice(allTimers, func(i, j int) bool {
			a, b := allTimers[i], allTimers[j]
			if a.FireAt != b.FireAt {
				return a.FireAt < b.FireAt
			}
			if a.ExecutionID != b.ExecutionID {
				return a.ExecutionID < b.ExecutionID
			}
			return a.Path < b.Path
		})
		cut := func(n, limit int) int {
			if limit <= 0 || limit > n {
				return n
			}
			return limit
		}
		for _, limit := range []int{0, 1, 3, 10, 39, 40, 100} {
			o, err := r.PendingOutbox(ctx, limit)
			if err != nil {
				t.Fatal(err)
			}
			checkFairBatch(t, r, "PendingOutbox", o, allOutbox, limit, func(x store.OutboxRow) int64 { return x.Seq },
				func(a, b store.OutboxRow) bool {
					return a.Seq == b.Seq && a.TargetID == b.TargetID && a.HasTarget == b.HasTarget && string(a.Event) == string(b.Event)
				})
			sp, err := r.PendingSpawns(ctx, limit)
			if err != nil {
				t.Fatal(err)
			}
			checkFairBatch(t, r, "PendingSpawns", sp, allSpawns, limit, func(x store.SpawnRow) int64 { return x.Seq },
				func(a, b store.SpawnRow) bool {
					return a.Seq == b.Seq && a.ChildID == b.ChildID && a.ParentID == b.ParentID && string(a.Context) == string(b.Context)
				})
			tm, err := r.DueTimers(ctx, 1003, limit)
			if err != nil {
				t.Fatal(err)
			}
			due := allTimers[:sort.Search(len(allTimers), func(i int) bool { return allTimers[i].FireAt > 1003 })]
			if !slices.Equal(tm, due[:cut(len(due), limit)]) {
				t.Errorf("DueTimers(1003, %d):\ngot  %v\nwant %v", limit, tm, due[:cut(len(due), limit)])
			}
		}
		// Acks are routed by seq: each removes exactly its row.
		for _, row := range allOutbox[:10] {
			if err := r.AckOutbox(ctx, row.Seq); err != nil {
				t.Fatal(err)
			}
		}
		for _, row := range allSpawns[:10] {
			if err := r.AckSpawn(ctx, row.Seq); err != nil {
				t.Fatal(err)
			}
		}
		o, _ := r.PendingOutbox(ctx, 0)
		sp, _ := r.PendingSpawns(ctx, 0)
		checkFairBatch(t, r, "PendingOutbox after acks", o, allOutbox[10:], 0, func(x store.OutboxRow) int64 { return x.Seq },
			func(a, b store.OutboxRow) bool { return a.Seq == b.Seq })
		checkFairBatch(t, r, "PendingSpawns after acks", sp, allSpawns[10:], 0, func(x store.SpawnRow) int64 { return x.Seq },
			func(a, b store.SpawnRow) bool { return a.Seq == b.Seq })
		if err := r.AckOutbox(ctx, 1024*5+1000); err == nil || !strings.Contains(err.Error(), "ordinal 999") {
			t.Errorf("ack of a seq no shard generated: %v", err)
		}
		// DeleteTimer routes by id.
		tm := allTimers[0]
		if ok, err := r.DeleteTimer(ctx, tm.ExecutionID, tm.Path, tm.FireAt); err != nil || !ok {
			t.Errorf("DeleteTimer(%+v) = %v, %v", tm, ok, err)
		}
	})
}

// TestListAcrossShards: paging through the router yields every matching
// execution of every shard once, in bytewise id order, at any page size.
func TestListAcrossShards(t *testing.T) {
	eachMode(t, store.Options{}, func(t *testing.T, r *router.Router) {
		ctx := ctxT(t)
		type exe struct {
			id, def, status, parent string
		}
		var all []exe
		for i := 0; i < 60; i++ {
			id := newID(t)
			switch i % 5 {
			case 0:
				id = "A" + id[1:]
			case 1:
				id = "_" + id[1:]
			}
			x := exe{id: id, def: []string{"order", "refund"}[i%2], status: []string{"running", "done", "failed"}[i%3]}
			if i%4 == 0 {
				x.parent = newID(t)
			}
			if err := r.Save(ctx, &store.Execution{ID: x.id, DefinitionID: x.def, Status: x.status, ParentID: x.parent}); err != nil {
				t.Fatal(err)
			}
			all = append(all, x)
		}
		sort.Slice(all, func(i, j int) bool { return all[i].id < all[j].id })
		for _, o := range []store.ListOptions{{}, {DefinitionID: "refund"}, {Statuses: []string{"done"}, RootsOnly: true}} {
			var want []string
			for _, x := range all {
				if (o.DefinitionID == "" || x.def == o.DefinitionID) && (len(o.Statuses) == 0 || slices.Contains(o.Statuses, x.status)) &&
					(!o.RootsOnly || x.parent == "") {
					want = append(want, x.id)
				}
			}
			for _, limit := range []int{1, 4, 7, 25, 1000} {
				o.Limit, o.Cursor = limit, ""
				var got []string
				for pages := 0; ; pages++ {
					if pages > 200 {
						t.Fatal("the cursor does not advance")
					}
					p, err := r.ListExecutions(ctx, o)
					if err != nil {
						t.Fatal(err)
					}
					if len(p.Items) > limit || (p.NextCursor != "" && len(p.Items) != limit) {
						t.Fatalf("page of %d items (limit %d), next cursor %q", len(p.Items), limit, p.NextCursor)
					}
					for _, it := range p.Items {
						got = append(got, it.ID)
					}
					if p.NextCursor == "" {
						break
					}
					o.Cursor = p.NextCursor
				}
				if !slices.Equal(got, want) {
					t.Errorf("%+v: got %d ids %v, want %d %v", o, len(got), got, len(want), want)
				}
			}
		}
		if _, err := r.ListExecutions(ctx, store.ListOptions{Cursor: "@@"}); !errors.Is(err, store.ErrBadCursor) {
			t.Errorf("bad cursor: %v", err)
		}
	})
}

// TestRouterCASRace: goroutines advance executions on every shard through
// the router; every version has exactly one winner and the final version
// is the number of successful commits.
func TestRouterCASRace(t *testing.T) {
	eachMode(t, store.Options{MaxConns: 4}, func(t *testing.T, r *router.Router) {
		ctx := ctxT(t)
		ids := make([]string, 8)
		for i := range ids {
			ids[i] = newID(t)
			if err := r.Save(ctx, &store.Execution{ID: ids[i], DefinitionID: "race"}); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		wins := map[string]map[int]int{}
		conflicts := 0
		deadline := time.Now().Add(3 * time.Second)
		var g errgroup.Group
		for w := 0; w < 8; w++ {
			g.Go(func() error {
				for i := 0; i < 150 && time.Now().Before(deadline); i++ {
					id := ids[(w+i)%len(ids)]
					e, err := r.Load(ctx, id)
					if err != nil {
						return err
					}
					var emits []store.Emit
					if i%2 == 0 {
						emits = []store.Emit{{TargetID: id, Event: json.RawMessage(`{}`)}}
					}
					err = r.Commit(ctx, e, emits, "", nil, nil, nil)
					mu.Lock()
					switch {
					case err == nil:
						if wins[id] == nil {
							wins[id] = map[int]int{}
						}
						wins[id][e.Version]++
					case errors.Is(err, store.ErrConflict):
						var se *router.ShardError
						if !errors.As(err, &se) || se.Shard != r.ShardOf(id) {
							mu.Unlock()
							return fmt.Errorf("conflict %v does not name shard %s", err, r.ShardOf(id))
						}
						conflicts++
					default:
						mu.Unlock()
						return err
					}
					mu.Unlock()
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		if conflicts == 0 {
			t.Error("no conflicts: the race did not race")
		}
		for _, id := range ids {
			e, err := r.Load(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if e.Version != 1+len(wins[id]) {
				t.Errorf("%s: version %d after %d successful commits", id, e.Version, len(wins[id]))
			}
			for v, n := range wins[id] {
				if n != 1 {
					t.Errorf("%s: %d winners of version %d", id, n, v)
				}
			}
		}
	})
}

// TestRouterRoundTrips: a keyed operation is one round trip to one shard;
// a fan-out read one round trip to each shard.
func TestRouterRoundTrips(t *testing.T) {
	eachMode(t, store.Options{PingAfterIdle: -1}, func(t *testing.T, r *router.Router) {
		ctx := ctxT(t)
		id := newID(t)
		e := &store.Execution{ID: id, DefinitionID: "d"}
		if err := r.Save(ctx, e); err != nil {
			t.Fatal(err)
		}
		if _, err := r.PendingOutbox(ctx, 1); err != nil { // connects every shard
			t.Fatal(err)
		}
		rt := func(name string, want uint64, op func() error) {
			t.Helper()
			before := r.Stats()
			if err := op(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			after := r.Stats()
			if got := after.RoundTrips - before.RoundTrips; got != want {
				t.Errorf("%s: %d round trips, want %d", name, got, want)
			}
			if want == 1 {
				owner := r.ShardOf(id)
				if got := after.Shards[owner].RoundTrips - before.Shards[owner].RoundTrips; got != 1 {
					t.Errorf("%s: %d round trips to the owning shard %s", name, got, owner)
				}
			}
		}
		shards := uint64(len(r.Shards()))
		rt("commit", 1, func() error {
			return r.Commit(ctx, e, []store.Emit{{Event: json.RawMessage(`{}`)}}, "ev", []store.TimerOp{store.Schedule("p", 5)}, nil, json.RawMessage(`{}`))
		})
		rt("load", 1, func() error { _, err := r.Load(ctx, id); return err })
		rt("pending outbox", shards, func() error { _, err := r.PendingOutbox(ctx, 10); return err })
		rt("due timers", shards, func() error { _, err := r.DueTimers(ctx, 10, 10); return err })
		rt("list", shards, func() error { _, err := r.ListExecutions(ctx, store.ListOptions{}); return err })
	})
}

// checkFairBatch checks a batch of PendingOutbox or PendingSpawns against
// all pending rows: limit rows (all for limit <= 0); each shard's rows a
// prefix of that shard's rows in seq order; every shard with rows getting
// at least its fair share, limit divided among the shards with rows (or
// all its rows when it has fewer).
func checkFairBatch[T any](t *testing.T, r *router.Router, what string, got, all []T, limit int, seq func(T) int64, eq func(a, b T) bool) {
	t.Helper()
	byShard := map[string][]T{}
	for _, x := range all {
		name := shardOfSeq(t, r, seq(x))
		byShard[name] = append(byShard[name], x)
	}
	for _, xs := range byShard {
		sort.Slice(xs, func(i, j int) bool { return seq(xs[i]) < seq(xs[j]) })
	}
	want := len(all)
	if limit > 0 && limit < want {
		want = limit
	}
	if len(got) != want {
		t.Errorf("%s(%d): %d rows, want %d", what, limit, len(got), want)
	}
	gotBy := map[string][]T{}
	for _, x := range got {
		name := shardOfSeq(t, r, seq(x))
		gotBy[name] = append(gotBy[name], x)
	}
	share := want
	if len(byShard) > 0 {
		share = want / len(byShard)
	}
	for name, xs := range byShard {
		g := gotBy[name]
		if len(g) > len(xs) || !slices.EqualFunc(g, xs[:len(g)], eq) {
			t.Errorf("%s(%d): %s's rows are not the oldest of that shard in seq order", what, limit, name)
		}
		if len(g) < min(share, len(xs)) {
			t.Errorf("%s(%d): %s got %d rows, less than its fair share %d of %d (it has %d)", what, limit, name, len(g), share, want, len(xs))
		}
	}
}
