package store_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/pgshard/pgshard/store"
)

// TestListingMatchesSeed is a regression test of issue 11, defect 4: the
// listing summary carries active_path, as the seed's list_executions does,
// and roots_only keeps the executions whose parent_id IS NULL (JSON null
// or absent), not those with an empty parent id.
func TestListingMatchesSeed(t *testing.T) {
	eachMode(t, store.Options{}, func(t *testing.T, s *store.Store, _ testDB) {
		ctx := ctxT(t)
		ours := &store.Execution{ID: "a1", DefinitionID: "d", Status: "running", ActivePath: []string{"root", "root.busy"}}
		child := &store.Execution{ID: "a2", DefinitionID: "d", Status: "running", ParentID: "a1"}
		for _, e := range []*store.Execution{ours, child} {
			if err := s.Save(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		// Documents another writer (the seed's Python store) could have left.
		for id, data := range map[string]string{
			"b1": `{"status":"done","parent_id":"","active_path":["x"]}`, // an empty parent id: not a root
			"b2": `{"status":"done","parent_id":null}`,                   // JSON null: a root
			"b3": `{"status":"done"}`,                                    // absent: a root
		} {
			if _, err := s.Pool().Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1, 'd', $2, 1)`, id, data); err != nil {
				t.Fatal(err)
			}
		}
		all, err := s.ListExecutions(ctx, store.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		paths := map[string][]string{}
		for _, it := range all.Items {
			paths[it.ID] = it.ActivePath
		}
		want := map[string][]string{"a1": {"root", "root.busy"}, "a2": {}, "b1": {"x"}, "b2": nil, "b3": nil}
		for id, w := range want {
			if !slices.Equal(paths[id], w) {
				t.Errorf("%s: active path %q, want %q", id, paths[id], w)
			}
		}
		roots, err := s.ListExecutions(ctx, store.ListOptions{RootsOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := summaryIDs(roots.Items); !slices.Equal(got, []string{"a1", "b2", "b3"}) {
			t.Errorf("roots_only: %v, want [a1 b2 b3] (parent_id IS NULL)", got)
		}
	})
}

// TestOutboxTargetNullOrEmpty is a regression test of issue 11, defect 4:
// an emit without a target stores NULL, an emit with the empty target id
// stores ” (as the seed does for target_id ""), and the two read back
// differently.
func TestOutboxTargetNullOrEmpty(t *testing.T) {
	eachMode(t, store.Options{}, func(t *testing.T, s *store.Store, _ testDB) {
		ctx := ctxT(t)
		e := &store.Execution{ID: newID(t), DefinitionID: "d"}
		emits := []store.Emit{
			{TargetID: "t", Event: json.RawMessage(`{"n":0}`)},
			{Event: json.RawMessage(`{"n":1}`)},                  // no target: NULL
			{HasTarget: true, Event: json.RawMessage(`{"n":2}`)}, // the empty id: ''
		}
		if err := s.Commit(ctx, e, emits, "", nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		// The seed's own statement, for an event whose target_id is "".
		if _, err := s.Pool().Exec(ctx, `INSERT INTO outbox (target_id, event) VALUES ($1, $2)`, "", `{"n":3}`); err != nil {
			t.Fatal(err)
		}
		rows, err := s.PendingOutbox(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		type tgt struct {
			id  string
			has bool
		}
		var got []tgt
		for _, r := range rows {
			got = append(got, tgt{r.TargetID, r.HasTarget})
		}
		if want := []tgt{{"t", true}, {"", false}, {"", true}, {"", true}}; !slices.Equal(got, want) {
			t.Errorf("targets %+v, want %+v", got, want)
		}
		if n := countRows(t, s, `SELECT count(*) FROM outbox WHERE target_id IS NULL`); n != 1 {
			t.Errorf("%d rows with a NULL target, want 1", n)
		}
		if n := countRows(t, s, `SELECT count(*) FROM outbox WHERE target_id = ''`); n != 2 {
			t.Errorf("%d rows with target '', want 2", n)
		}
	})
}
