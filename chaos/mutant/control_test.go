package mutant_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// transcript records what a sequence of store operations returned.
type transcript struct{ lines []string }

func (tr *transcript) add(format string, args ...any) {
	tr.lines = append(tr.lines, fmt.Sprintf(format, args...))
}

// outcome describes an operation's error: ok, a conflict with its
// versions, not found, or the error's text.
func outcome(err error) string {
	var ce *store.ConflictError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &ce):
		return fmt.Sprintf("conflict(expected %d, found %d)", ce.Expected, ce.Found)
	case errors.Is(err, store.ErrNotFound):
		return "not found"
	case errors.Is(err, store.ErrOutcomeUnknown):
		return "unknown: " + err.Error()
	}
	return "error: " + err.Error()
}

func asJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "marshal: " + err.Error()
	}
	return string(b)
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// script runs, against s, every operation the chaos workload uses, in
// every case the store distinguishes, and returns what each returned.
// ids must cover every shard; missing is an id that is never saved.
func script(ctx context.Context, s store.ExecutionStore, ids []string, missing string) []string {
	var tr transcript
	exes := make([]*store.Execution, len(ids))
	commit := func(what string, i int, e *store.Execution, emits []store.Emit, event string, timers []store.TimerOp, spawns []store.Spawn, trace string) {
		var tj json.RawMessage
		if trace != "" {
			tj = raw(trace)
		}
		err := s.Commit(ctx, e, emits, event, timers, spawns, tj)
		tr.add("%s %d: %s, version now %d", what, i, outcome(err), e.Version)
	}
	for i, id := range ids {
		exes[i] = &store.Execution{ID: id, DefinitionID: "def", Status: "running", ActivePath: []string{"a"},
			Context: raw(fmt.Sprintf(`{"n":%d}`, i)), Extra: map[string]json.RawMessage{"zz": raw(`[1, 2]`)}}
		if i%2 == 1 {
			exes[i].ParentID = ids[i-1]
		}
		err := s.Save(ctx, exes[i])
		tr.add("first save %d: %s, version %d", i, outcome(err), exes[i].Version)
	}
	for i, id := range ids {
		again := &store.Execution{ID: id, DefinitionID: "def"}
		commit("second first save", i, again, nil, "", nil, nil, "")
	}
	for i, e := range exes {
		// Every side effect; timer ops in an order whose net effect is
		// schedule a, c and not b.
		commit("complex", i, e,
			[]store.Emit{{TargetID: ids[(i+1)%len(ids)], Event: raw(fmt.Sprintf(`{"id":"e-%d-0"}`, i))}, {Event: raw(fmt.Sprintf(`{"id":"e-%d-1"}`, i))}},
			fmt.Sprintf("ev-%d-1", i),
			[]store.TimerOp{store.Schedule("a", float64(1000+i)), store.Schedule("b", 5000.25), store.Cancel("b"), store.Cancel("c"), store.Schedule("c", 1500.5+float64(i))},
			[]store.Spawn{{ChildID: "child-" + ids[i], RootPath: "r"}, {ChildID: "child2-" + ids[i], RootPath: "r2", Context: raw(`{"k": 1}`)}},
			`{"step":1}`)
		stale := e.Clone()
		stale.Version = 1
		commit("stale complex", i, stale, []store.Emit{{TargetID: ids[i], Event: raw(`{"id":"stale"}`)}}, "ev-stale",
			[]store.TimerOp{store.Cancel("a"), store.Schedule("z", 1)}, []store.Spawn{{ChildID: "stale-child"}}, `{"stale":true}`)
		stale.Version = 1
		commit("stale fast", i, stale, nil, "ev-stale-fast", nil, nil, "")
		e.Status = "waiting"
		commit("fast with event", i, e, nil, fmt.Sprintf("ev-%d-2", i), nil, nil, "")
		commit("fast", i, e, nil, "", nil, nil, "")
		commit("dedupe again", i, e, nil, fmt.Sprintf("ev-%d-1", i), nil, nil, "")
		for k := 2; k <= 6; k++ {
			var timers []store.TimerOp
			if k == 4 {
				timers = []store.TimerOp{store.Schedule("a", 2000)} // re-arm; ties across executions
			}
			commit(fmt.Sprintf("trace %d", k), i, e, nil, "", timers, nil, fmt.Sprintf(`{"step":%d}`, k))
		}
	}
	for i, id := range ids {
		for _, ev := range []string{fmt.Sprintf("ev-%d-1", i), fmt.Sprintf("ev-%d-2", i), "ev-stale", "ev-stale-fast", ""} {
			e, done, err := s.LoadForEvent(ctx, id, ev)
			tr.add("load %d for %q: %s %v %s", i, ev, outcome(err), done, asJSON(e))
			ok, err := s.IsProcessed(ctx, id, ev)
			tr.add("is processed %d %q: %s %v", i, ev, outcome(err), ok)
		}
		e, err := s.Load(ctx, id)
		tr.add("load %d: %s %s", i, outcome(err), asJSON(e))
		trace, err := s.ReadTrace(ctx, id)
		tr.add("trace %d: %s %s", i, outcome(err), asJSON(trace))
	}
	_, _, err := s.LoadForEvent(ctx, missing, "x")
	tr.add("load missing: %s", outcome(err))
	_, err = s.Load(ctx, missing)
	tr.add("load missing: %s", outcome(err))

	all, err := s.PendingOutbox(ctx, 0)
	tr.add("pending outbox: %s %s", outcome(err), asJSON(all))
	first3, err := s.PendingOutbox(ctx, 3)
	tr.add("pending outbox 3: %s %s", outcome(err), asJSON(first3))
	for _, r := range first3 {
		tr.add("ack outbox %d: %s", r.Seq, outcome(s.AckOutbox(ctx, r.Seq)))
		tr.add("ack outbox %d again: %s", r.Seq, outcome(s.AckOutbox(ctx, r.Seq)))
	}
	tr.add("ack outbox never used: %s", outcome(s.AckOutbox(ctx, 1+100*shardmap.SeqStride)))
	all, err = s.PendingOutbox(ctx, 0)
	tr.add("pending outbox after acks: %s %s", outcome(err), asJSON(all))

	spawns, err := s.PendingSpawns(ctx, 0)
	tr.add("pending spawns: %s %s", outcome(err), asJSON(spawns))
	two, err := s.PendingSpawns(ctx, 2)
	tr.add("pending spawns 2: %s %s", outcome(err), asJSON(two))
	for _, r := range two {
		tr.add("ack spawn %d: %s", r.Seq, outcome(s.AckSpawn(ctx, r.Seq)))
	}
	spawns, err = s.PendingSpawns(ctx, 0)
	tr.add("pending spawns after acks: %s %s", outcome(err), asJSON(spawns))

	for _, q := range []struct {
		now   float64
		limit int
	}{{999, 0}, {1800, 0}, {1e9, 0}, {1e9, 3}, {1e9, len(ids) + 4}} {
		due, err := s.DueTimers(ctx, q.now, q.limit)
		tr.add("due timers %v %d: %s %s", q.now, q.limit, outcome(err), asJSON(due))
	}
	for _, d := range []struct {
		path string
		at   float64
	}{{"a", 1000}, {"a", 2000}, {"a", 2000}, {"c", 1500.5}, {"b", 5000.25}} {
		ok, err := s.DeleteTimer(ctx, ids[0], d.path, d.at)
		tr.add("delete timer %s %v: %s %v", d.path, d.at, outcome(err), ok)
	}
	due, err := s.DueTimers(ctx, 1e9, 0)
	tr.add("due timers after deletes: %s %s", outcome(err), asJSON(due))
	return tr.lines
}

// spread returns ids of which every shard of m owns at least two.
func spread(m *shardmap.Map) []string {
	per := map[string]int{}
	var out []string
	for _, id := range ids(42, 400) {
		sh := m.Lookup(id).Name
		if per[sh] < 2 {
			per[sh]++
			out = append(out, id)
		}
		if len(out) == 2*len(m.Shards) {
			break
		}
	}
	return out
}

// TestControlBehavesLikeTheRouter runs the same operations against the
// production store (a router over every shard) and the reference store
// without a bug, each on its own fresh database, and compares every result
// and every row of every shard — directly and through PgBouncer.
func TestControlBehavesLikeTheRouter(t *testing.T) {
	c := clustertest.Get(t)
	for _, pooler := range []bool{false, true} {
		name := "direct"
		if pooler {
			name = "pgbouncer"
		}
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			opts := store.Options{TraceMax: 3, ConnectAttempts: 3}
			if pooler {
				opts.StatementTimeout = 5 * time.Second // set_config in every transaction
			}
			prodMap := clustertest.MigratedMap(t, c)
			prod, err := router.Open(ctx, prodMap, router.Options{UsePooler: pooler, Store: opts})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(prod.Close)
			refMap := clustertest.MigratedMap(t, c)
			ref := openStore(t, refMap, pooler, "", opts)

			the := spread(prodMap)
			missing := ids(7, 1)[0]
			want := script(ctx, prod, the, missing)
			got := script(ctx, ref, the, missing)
			compareLines(t, "results", want, got)
			compareLines(t, "rows", dump(t, prodMap), dump(t, refMap))
			for _, l := range want {
				if strings.Contains(l, "unknown") || strings.Contains(l, "error:") {
					t.Errorf("the production store failed an operation of the script: %s", l)
				}
			}
		})
	}
}

// compareLines fails on the first lines where got differs from want (the
// production store's).
func compareLines(t *testing.T, what string, want, got []string) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: the production store produced nothing", what)
	}
	diffs := 0
	for i := 0; i < max(len(want), len(got)); i++ {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			t.Errorf("%s line %d:\n production: %s\n reference:  %s", what, i, w, g)
			if diffs++; diffs == 5 {
				t.Fatalf("%s: more differences left out", what)
			}
		}
	}
	t.Logf("%s: %d lines equal", what, len(want))
}
