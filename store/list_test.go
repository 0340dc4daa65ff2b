package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/store"
)

// listFixture commits executions whose ids sort differently bytewise and
// in a natural-language collation, across definitions, statuses and
// parents, and returns them by id.
func listFixture(t *testing.T, s store.ExecutionStore, n int) []store.Summary {
	t.Helper()
	ctx := ctxT(t)
	var all []store.Summary
	for i := 0; i < n; i++ {
		id := newID(t)
		switch i % 7 {
		case 0:
			id = "A" + id[1:] // uppercase sorts before lowercase bytewise
		case 1:
			id = "_" + id[1:]
		}
		e := &store.Execution{ID: id, DefinitionID: []string{"order", "refund"}[i%2],
			Status: []string{"running", "done", "failed"}[i%3]}
		if i%4 == 0 {
			e.ParentID = newID(t)
		}
		if i%3 != 2 {
			e.ActivePath = []string{"root", fmt.Sprintf("root.s%d", i%3)}
		}
		if e.Status == "done" {
			e.Outcome = json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))
		}
		if err := s.Save(ctx, e); err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 { // a second version
			if err := s.Save(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		all = append(all, store.Summary{ID: e.ID, DefinitionID: e.DefinitionID, Version: e.Version, Status: e.Status,
			ParentID: e.ParentID, ActivePath: e.ActivePath, Outcome: e.Outcome})
	}
	slices.SortFunc(all, func(a, b store.Summary) int { return compareStrings(a.ID, b.ID) })
	return all
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// filterSummaries is ListOptions' filter, in Go.
func filterSummaries(all []store.Summary, o store.ListOptions) []store.Summary {
	var out []store.Summary
	for _, s := range all {
		if o.DefinitionID != "" && s.DefinitionID != o.DefinitionID {
			continue
		}
		if len(o.Statuses) > 0 && !slices.Contains(o.Statuses, s.Status) {
			continue
		}
		if o.RootsOnly && s.ParentID != "" {
			continue
		}
		out = append(out, s)
	}
	return out
}

// pageAll lists every page of o and checks the pages' sizes.
func pageAll(t *testing.T, s store.ExecutionStore, o store.ListOptions) []store.Summary {
	t.Helper()
	var got []store.Summary
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("more than 1000 pages: the cursor does not advance")
		}
		p, err := s.ListExecutions(ctxT(t), o)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Items) > o.PageLimit() {
			t.Fatalf("page of %d items, limit %d", len(p.Items), o.PageLimit())
		}
		if p.NextCursor != "" && len(p.Items) != o.PageLimit() {
			t.Fatalf("a short page (%d of %d) with a next cursor", len(p.Items), o.PageLimit())
		}
		got = append(got, p.Items...)
		if p.NextCursor == "" {
			return got
		}
		o.Cursor = p.NextCursor
	}
}

func summariesEqual(a, b []store.Summary) bool {
	return slices.EqualFunc(a, b, func(x, y store.Summary) bool {
		return x.ID == y.ID && x.DefinitionID == y.DefinitionID && x.Version == y.Version && x.Status == y.Status &&
			x.ParentID == y.ParentID && slices.Equal(x.ActivePath, y.ActivePath) && string(x.Outcome) == string(y.Outcome)
	})
}

// TestListExecutions: every filter combination, paged at several limits,
// yields exactly the matching executions in bytewise id order.
func TestListExecutions(t *testing.T) {
	eachMode(t, store.Options{}, func(t *testing.T, s *store.Store, _ testDB) {
		all := listFixture(t, s, 40)
		for _, o := range []store.ListOptions{
			{},
			{DefinitionID: "order"},
			{Statuses: []string{"done", "failed"}},
			{RootsOnly: true},
			{DefinitionID: "refund", Statuses: []string{"running"}, RootsOnly: true},
			{DefinitionID: "nope"},
		} {
			for _, limit := range []int{1, 3, 7, 100} {
				o.Limit = limit
				t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
					got := pageAll(t, s, o)
					want := filterSummaries(all, o)
					if !summariesEqual(got, want) {
						t.Errorf("got  %v\nwant %v", summaryIDs(got), summaryIDs(want))
						for i := range min(len(got), len(want)) {
							if !summariesEqual(got[i:i+1], want[i:i+1]) {
								t.Errorf("first difference: got %+v, want %+v", got[i], want[i])
								break
							}
						}
					}
				})
			}
		}
		if _, err := s.ListExecutions(ctxT(t), store.ListOptions{Cursor: "%%%"}); !errors.Is(err, store.ErrBadCursor) {
			t.Errorf("bad cursor: %v", err)
		}
	})
}

func summaryIDs(s []store.Summary) []string {
	ids := make([]string, len(s))
	for i, x := range s {
		ids[i] = x.ID
	}
	return ids
}

// TestLongIDs is the regression test of issue 11, defect 5: Commit refuses
// an id longer than MaxIDLength with an error saying so (before, it stored
// it and its listing cursor was then refused), and a listing pages past
// longer ids that another program stored.
func TestLongIDs(t *testing.T) {
	d := freshDB(t, "direct")
	s := d.open(t, store.Options{})
	ctx := ctxT(t)
	long := strings.Repeat("x", store.MaxIDLength+1)
	err := s.Save(ctx, &store.Execution{ID: long, DefinitionID: "d"})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d bytes", store.MaxIDLength+1)) ||
		!strings.Contains(err.Error(), fmt.Sprintf("at most %d", store.MaxIDLength)) {
		t.Fatalf("commit of a %d-byte id: %v, want an error naming the limit", len(long), err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM executions`); n != 0 {
		t.Fatalf("%d rows after the refused commit", n)
	}
	if err := s.Save(ctx, &store.Execution{ID: strings.Repeat("y", store.MaxIDLength), DefinitionID: "d"}); err != nil {
		t.Fatalf("commit of a %d-byte id: %v", store.MaxIDLength, err)
	}
	// A foreign writer's 2000-byte id (Postgres indexes up to ~2700 bytes).
	foreign := "m" + strings.Repeat("z", 1999)
	if _, err := s.Pool().Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1, 'd', '{"status":"running"}', 1)`, foreign); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, &store.Execution{ID: "n", DefinitionID: "d"}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	cursor := ""
	for page := 0; page < 10; page++ {
		p, err := s.ListExecutions(ctx, store.ListOptions{Limit: 1, Cursor: cursor})
		if err != nil {
			t.Fatalf("page %d (after an id of %d bytes): %v", page, len(cursor), err)
		}
		for _, it := range p.Items {
			ids = append(ids, it.ID)
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if want := []string{foreign, "n", strings.Repeat("y", store.MaxIDLength)}; !slices.Equal(ids, want) {
		t.Errorf("listed %d ids %v, want the 3 (lengths %d, 1, %d)", len(ids), lens(ids), len(foreign), store.MaxIDLength)
	}
}

func lens(ss []string) []int {
	out := make([]int, len(ss))
	for i, s := range ss {
		out[i] = len(s)
	}
	return out
}
