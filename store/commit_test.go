package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/store"
)

// commitKind is a way to commit: the fast path or the pipelined complex path.
type commitKind struct {
	name   string
	commit func(t *testing.T, s *store.Store, e *store.Execution, eventID string) error
}

var commitKinds = []commitKind{
	{"fast", func(t *testing.T, s *store.Store, e *store.Execution, eventID string) error {
		return s.Commit(ctxT(t), e, nil, eventID, nil, nil, nil)
	}},
	{"complex", func(t *testing.T, s *store.Store, e *store.Execution, eventID string) error {
		ev := json.RawMessage(fmt.Sprintf(`{"from":%q,"version":%d}`, e.ID, e.Version+1))
		return s.Commit(ctxT(t), e, []store.Emit{{TargetID: "t", Event: ev}}, eventID, nil, nil, nil)
	}},
}

// TestCommitCAS: first save inserts, later commits advance the version by
// one, stale versions and lost first saves are conflicts naming expected
// and found versions, and the in-memory version is restored on failure.
func TestCommitCAS(t *testing.T) {
	eachMode(t, store.Options{}, func(t *testing.T, s *store.Store, _ testDB) {
		for _, k := range commitKinds {
			t.Run(k.name, func(t *testing.T) {
				ctx := ctxT(t)
				id := newID(t)
				e := &store.Execution{ID: id, DefinitionID: "order", Status: "running", Context: json.RawMessage(`{"n":0}`)}
				if err := k.commit(t, s, e, ""); err != nil {
					t.Fatalf("first save: %v", err)
				}
				if e.Version != 1 {
					t.Fatalf("version after first save = %d, want 1", e.Version)
				}
				for want := 2; want <= 4; want++ {
					e.Context = json.RawMessage(fmt.Sprintf(`{"n":%d}`, want))
					if err := k.commit(t, s, e, ""); err != nil {
						t.Fatalf("commit to version %d: %v", want, err)
					}
					if e.Version != want {
						t.Fatalf("version = %d, want %d", e.Version, want)
					}
				}
				got, err := s.Load(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if got.Version != 4 || got.DefinitionID != "order" || string(got.Context) != `{"n":4}` || got.Status != "running" {
					t.Errorf("loaded %+v", got)
				}
				// The committed JSON carries the committed version.
				var data string
				var col int
				if err := s.Pool().QueryRow(ctx, `SELECT data, version FROM executions WHERE id = $1`, id).Scan(&data, &col); err != nil {
					t.Fatal(err)
				}
				var doc struct{ Version int }
				if err := json.Unmarshal([]byte(data), &doc); err != nil || doc.Version != 4 || col != 4 {
					t.Errorf("stored JSON version %d, column %d, want 4 and 4 (%v)", doc.Version, col, err)
				}

				conflicts := []struct {
					name     string
					exe      *store.Execution
					expected int
					found    int
				}{
					{"stale version", &store.Execution{ID: id, DefinitionID: "order", Version: 2}, 2, 4},
					{"version from the future", &store.Execution{ID: id, DefinitionID: "order", Version: 9}, 9, 4},
					{"second first save", &store.Execution{ID: id, DefinitionID: "order"}, 0, 4},
					{"update of an absent execution", &store.Execution{ID: newID(t), DefinitionID: "order", Version: 3}, 3, 0},
				}
				for _, c := range conflicts {
					t.Run(c.name, func(t *testing.T) {
						err := k.commit(t, s, c.exe, "ev-conflict")
						var ce *store.ConflictError
						if !errors.As(err, &ce) || !errors.Is(err, store.ErrConflict) {
							t.Fatalf("error %v, want a *ConflictError", err)
						}
						if ce.ID != c.exe.ID || ce.Expected != c.expected || ce.Found != c.found {
							t.Errorf("conflict %+v, want id %s expected %d found %d", ce, c.exe.ID, c.expected, c.found)
						}
						if c.exe.Version != c.expected {
							t.Errorf("in-memory version %d after the conflict, want it restored to %d", c.exe.Version, c.expected)
						}
						if errors.Is(err, store.ErrOutcomeUnknown) {
							t.Error("a conflict must not be an unknown outcome")
						}
						// The conflicting commit's dedupe record was not written.
						if ok, err := s.IsProcessed(ctxT(t), c.exe.ID, "ev-conflict"); err != nil || ok {
							t.Errorf("IsProcessed after a conflict = %v, %v", ok, err)
						}
					})
				}
				n := countRows(t, s, `SELECT count(*) FROM outbox WHERE event LIKE '%' || $1 || '%'`, id)
				if k.name == "complex" && n != 4 {
					t.Errorf("%d outbox rows from %s, want 4 (one per successful commit, none from conflicts)", n, id)
				}
			})
		}
	})
}

// TestConcurrentFirstSaves: many writers create the same execution at
// once; exactly one wins, the others get conflicts that found version 1.
func TestConcurrentFirstSaves(t *testing.T) {
	eachMode(t, store.Options{MaxConns: 8}, func(t *testing.T, s *store.Store, _ testDB) {
		for _, k := range commitKinds {
			t.Run(k.name, func(t *testing.T) {
				for round := 0; round < 5; round++ {
					id := newID(t)
					const writers = 8
					var wins, conflicts int
					var mu sync.Mutex
					var g errgroup.Group
					start := make(chan struct{})
					for w := 0; w < writers; w++ {
						g.Go(func() error {
							<-start
							e := &store.Execution{ID: id, DefinitionID: "d", Status: fmt.Sprintf("w%d", w)}
							err := k.commit(t, s, e, "")
							mu.Lock()
							defer mu.Unlock()
							var ce *store.ConflictError
							switch {
							case err == nil:
								wins++
							case errors.As(err, &ce) && ce.Found == 1 && ce.Expected == 0 && e.Version == 0:
								conflicts++
							default:
								return fmt.Errorf("writer %d: %v (version %d)", w, err, e.Version)
							}
							return nil
						})
					}
					close(start)
					if err := g.Wait(); err != nil {
						t.Fatal(err)
					}
					if wins != 1 || conflicts != writers-1 {
						t.Fatalf("round %d: %d wins, %d conflicts, want 1 and %d", round, wins, conflicts, writers-1)
					}
				}
			})
		}
	})
}

// TestCASRace: goroutines advance the same executions concurrently with a
// mix of fast and complex commits. Every version has exactly one winner,
// whose outbox event (complex commits) is present exactly once, and the
// final version is the number of successful commits.
func TestCASRace(t *testing.T) {
	eachMode(t, store.Options{MaxConns: 8}, func(t *testing.T, s *store.Store, _ testDB) {
		ctx := ctxT(t)
		const execs, writers = 3, 8
		deadline := time.Now().Add(4 * time.Second)
		ids := make([]string, execs)
		for i := range ids {
			ids[i] = newID(t)
			if err := s.Save(ctx, &store.Execution{ID: ids[i], DefinitionID: "race"}); err != nil {
				t.Fatal(err)
			}
		}
		type win struct {
			id      string
			version int
			complex bool
		}
		var mu sync.Mutex
		var wins []win
		conflicts := 0
		var g errgroup.Group
		for w := 0; w < writers; w++ {
			g.Go(func() error {
				for i := 0; time.Now().Before(deadline) && i < 400; i++ {
					id := ids[(w+i)%execs]
					e, err := s.Load(ctx, id)
					if err != nil {
						return err
					}
					complex := (w+i)%2 == 0
					var emits []store.Emit
					if complex {
						emits = []store.Emit{{TargetID: id, Event: json.RawMessage(fmt.Sprintf(`{"v":%d,"w":%d}`, e.Version+1, w))}}
					}
					before := e.Version
					err = s.Commit(ctx, e, emits, "", nil, nil, nil)
					mu.Lock()
					switch {
					case err == nil:
						if e.Version != before+1 {
							mu.Unlock()
							return fmt.Errorf("won with version %d after %d", e.Version, before)
						}
						wins = append(wins, win{id, e.Version, complex})
					case errors.Is(err, store.ErrConflict):
						var ce *store.ConflictError
						errors.As(err, &ce)
						if ce.Found <= before || e.Version != before {
							mu.Unlock()
							return fmt.Errorf("conflict %+v after loading version %d (in memory now %d)", ce, before, e.Version)
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
		t.Logf("%d successful commits, %d conflicts", len(wins), conflicts)
		if conflicts == 0 {
			t.Error("no conflicts: the race did not race")
		}
		perExec := map[string]map[int]bool{}
		complexWins := map[string]int{}
		for _, w := range wins {
			if perExec[w.id] == nil {
				perExec[w.id] = map[int]bool{}
			}
			if perExec[w.id][w.version] {
				t.Fatalf("two winners for %s version %d", w.id, w.version)
			}
			perExec[w.id][w.version] = true
			if w.complex {
				complexWins[w.id]++
			}
		}
		for _, id := range ids {
			e, err := s.Load(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if want := 1 + len(perExec[id]); e.Version != want {
				t.Errorf("%s: final version %d, want %d (1 save + %d successful commits)", id, e.Version, want, want-1)
			}
			for v := 2; v <= e.Version; v++ {
				if !perExec[id][v] {
					t.Errorf("%s: no winner recorded for version %d", id, v)
				}
			}
			// Each complex win left exactly its one event; no loser did.
			n := countRows(t, s, `SELECT count(*) FROM outbox WHERE target_id = $1`, id)
			distinct := countRows(t, s, `SELECT count(DISTINCT (event::jsonb)->>'v') FROM outbox WHERE target_id = $1`, id)
			if n != complexWins[id] || distinct != n {
				t.Errorf("%s: %d outbox rows (%d distinct versions), want %d", id, n, distinct, complexWins[id])
			}
		}
	})
}
