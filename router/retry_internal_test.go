package router

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

type noMaps struct{}

func (noMaps) Load(context.Context) (*shardmap.Map, error) { return nil, errors.New("not used") }

// fencedErr is a store error carrying the fence's refusal.
func fencedErr() error {
	fe, _ := store.AsFenceError(&pgconn.PgError{Severity: "ERROR", Code: store.FenceSQLState,
		Detail: "bucket=1 lo=0 hi=9 state=moved epoch=2 owner=shard1 shard=shard0"})
	return fmt.Errorf("load execution x: %w", fe)
}

// TestKeyedRetryPolicy: a keyed operation the fence refused is retried
// once, after a reload that changed the map, on the new map's store;
// anything else — a commit whose outcome is unknown above all, a
// conflict — is never retried, and without a map source nothing reloads.
func TestKeyedRetryPolicy(t *testing.T) {
	unknown := fmt.Errorf("commit execution x: %w", errors.Join(store.ErrOutcomeUnknown, errors.New("conn closed")))
	conflict := &store.ConflictError{ID: "x", Expected: 1, Found: 2}
	tests := []struct {
		name        string
		maps        MapSource
		changes     bool    // the reload switches the map
		errs        []error // what the op returns, call by call
		wantCalls   int
		wantReloads int
		wantErr     error // nil: success
	}{
		{"fenced, reloaded, retried", noMaps{}, true, []error{fencedErr(), nil}, 2, 1, nil},
		{"fenced twice", noMaps{}, true, []error{fencedErr(), fencedErr()}, 2, 1, store.ErrFenced},
		{"fenced, the map in force is the refused one", noMaps{}, false, []error{fencedErr()}, 1, 1, store.ErrFenced},
		{"fenced without a map source", nil, true, []error{fencedErr()}, 1, 0, store.ErrFenced},
		{"outcome unknown", noMaps{}, true, []error{unknown}, 1, 0, store.ErrOutcomeUnknown},
		{"outcome unknown beside a fence error", noMaps{}, true, []error{errors.Join(unknown, fencedErr())}, 1, 0, store.ErrOutcomeUnknown},
		{"conflict", noMaps{}, true, []error{conflict}, 1, 0, store.ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := fakeRouter(t, 2)
			r.opts.Maps = tt.maps
			first := r.rt.Load()
			next := &routing{m: first.m.Clone(), stores: []*store.Store{new(store.Store), new(store.Store)}}
			next.m.Epoch++
			reloads := 0
			r.reloadHook = func(context.Context) (bool, error) {
				reloads++
				if tt.changes {
					r.rt.Store(next)
				}
				return tt.changes, nil
			}
			var calls int
			var used []*store.Store
			_, err := keyed(context.Background(), r, "x", func(s *store.Store) (int, error) {
				used = append(used, s)
				calls++
				return 0, tt.errs[calls-1]
			})
			if calls != tt.wantCalls || reloads != tt.wantReloads {
				t.Errorf("%d calls, %d reloads; want %d, %d", calls, reloads, tt.wantCalls, tt.wantReloads)
			}
			if (tt.wantErr == nil) != (err == nil) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("err %v, want %v", err, tt.wantErr)
			}
			if calls == 2 {
				i := next.m.ShardIndexForBucket(next.m.Bucket("x"))
				if used[1] != next.stores[i] {
					t.Error("the retry did not use the reloaded map's store")
				}
			}
		})
	}
}

// TestKeyedRefusalsShareOneReload: the keyed operations one flip refuses
// together (all routed by the same map) reload the map once between them:
// the first reads the catalog, the others find its newer map in force and
// retry on it without reading the catalog again.
func TestKeyedRefusalsShareOneReload(t *testing.T) {
	const n = 8
	r := fakeRouter(t, 2)
	r.opts.Maps = noMaps{}
	first := r.rt.Load()
	next := &routing{m: first.m.Clone(), stores: []*store.Store{new(store.Store), new(store.Store)}}
	next.m.Epoch = max(first.m.Epoch+1, 2) // fencedErr's epoch is 2
	var mu sync.Mutex
	reloads := 0
	r.reloadHook = func(context.Context) (bool, error) {
		mu.Lock()
		reloads++
		mu.Unlock()
		r.rt.Store(next)
		return true, nil
	}
	// Every operation is refused only once all n were routed by the first
	// map, as a flip refuses the range's clients in flight.
	var entered sync.WaitGroup
	entered.Add(n)
	all := make(chan struct{})
	go func() { entered.Wait(); close(all) }()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			calls := 0
			_, errs[i] = keyed(context.Background(), r, "x", func(s *store.Store) (int, error) {
				calls++
				if calls > 1 {
					return 0, nil
				}
				entered.Done()
				select {
				case <-all:
				case <-time.After(30 * time.Second):
					return 0, errors.New("the other operations never came")
				}
				return 0, fencedErr()
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("operation %d: %v", i, err)
		}
	}
	if reloads != 1 {
		t.Errorf("%d reloads for %d operations refused by one flip, want 1", reloads, n)
	}
}

// TestReloadGate: the zero value is ready; a second reload waits for the
// first and gives up when its context ends.
func TestReloadGate(t *testing.T) {
	var g reloadGate
	if err := g.enter(context.Background()); err != nil {
		t.Fatalf("first enter: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.enter(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("enter while held, context ended: %v, want context.Canceled", err)
	}
	g.leave()
	if err := g.enter(context.Background()); err != nil {
		t.Fatalf("enter after leave: %v", err)
	}
	g.leave()
}
