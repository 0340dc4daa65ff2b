package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// TestAsFenceError maps the fence's server error to a *FenceError with
// its fields, through any wrapping, and nothing else (no database).
func TestAsFenceError(t *testing.T) {
	if store.FenceSQLState != migrations.FenceSQLState {
		t.Fatalf("store's SQLSTATE %s, the migration's %s", store.FenceSQLState, migrations.FenceSQLState)
	}
	pe := &pgconn.PgError{Severity: "ERROR", Code: "PS001", Message: `pgshard fence: shard "s0" refuses to write key "k"`,
		Detail: "bucket=17 lo=16 hi=31 state=moved epoch=7 owner=s1 shard=s0", Hint: "reload"}
	for _, tc := range []struct {
		name string
		err  error
		want *store.FenceError
	}{
		{"bare", pe, &store.FenceError{Shard: "s0", Bucket: 17, Lo: 16, Hi: 31, State: "moved", Epoch: 7, Owner: "s1", Err: pe}},
		{"wrapped", fmt.Errorf("load execution k: %w", pe), &store.FenceError{Shard: "s0", Bucket: 17, Lo: 16, Hi: 31, State: "moved", Epoch: 7, Owner: "s1", Err: pe}},
		{"no range", &pgconn.PgError{Code: "PS001", Detail: "bucket=3 shard=s0"}, &store.FenceError{Shard: "s0", Bucket: 3, Lo: -1, Hi: -1}},
		{"unknown owner", &pgconn.PgError{Code: "PS001", Detail: "bucket=3 lo=0 hi=9 state=incoming epoch=2 owner= shard=s0"},
			&store.FenceError{Shard: "s0", Bucket: 3, Lo: 0, Hi: 9, State: "incoming", Epoch: 2}},
		{"garbled detail", &pgconn.PgError{Code: "PS001", Detail: "bucket=x lo= epoch=-1 what"}, &store.FenceError{Lo: -1, Hi: -1}},
		{"another SQLSTATE", &pgconn.PgError{Code: "40001"}, nil},
		{"not a server error", errors.New("conn closed"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe, ok := store.AsFenceError(tc.err)
			if ok != (tc.want != nil) {
				t.Fatalf("AsFenceError: %v, want %v", ok, tc.want != nil)
			}
			if !ok {
				if errors.Is(tc.err, store.ErrFenced) {
					t.Error("errors.Is(ErrFenced) on a non-fence error")
				}
				return
			}
			got := *fe
			got.Err = nil
			want := *tc.want
			want.Err = nil
			if got != want {
				t.Errorf("got %+v\nwant %+v", got, want)
			}
			if !errors.Is(fe, store.ErrFenced) {
				t.Error("errors.Is(fe, ErrFenced) is false")
			}
			if fe.Frozen() != (fe.State == "frozen") {
				t.Error("Frozen")
			}
		})
	}
	fe, _ := store.AsFenceError(pe)
	if s := fe.Error(); !strings.Contains(s, pe.Message) || !strings.Contains(s, "PS001") || !strings.Contains(s, "reload") {
		t.Errorf("Error() = %q", s)
	}
}

// TestAsServedMismatch parses migration 0015's refusal (PS002) — the
// DETAIL the migrations test reads from a real shard — and nothing else:
// another SQLSTATE, or a DETAIL without the fence's epoch (no database).
func TestAsServedMismatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		pe   *pgconn.PgError
		want store.ServedMismatch
		ok   bool
	}{
		{"refusal", &pgconn.PgError{Code: "PS002", Detail: "epoch=7 map_epoch=6 shard=s1 served={[0,64)} expected={[0,32)}"},
			store.ServedMismatch{Shard: "s1", Epoch: 7, MapEpoch: 6}, true},
		{"no epoch", &pgconn.PgError{Code: "PS002", Detail: "map_epoch=6 shard=s1"}, store.ServedMismatch{Shard: "s1", MapEpoch: 6}, false},
		{"garbled epoch", &pgconn.PgError{Code: "PS002", Detail: "epoch=x"}, store.ServedMismatch{}, false},
		{"a fence refusal", &pgconn.PgError{Code: "PS001", Detail: "bucket=3 epoch=2 shard=s0"}, store.ServedMismatch{}, false},
		{"none", nil, store.ServedMismatch{}, false},
	} {
		if got, ok := store.AsServedMismatch(tc.pe); ok != tc.ok || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// moveHalf sets the fence of d's shard (64 buckets, all its own) so that
// buckets 32..63 are moved to "elsewhere" at the next epoch.
func moveHalf(t *testing.T, s *store.Store, d testDB) {
	t.Helper()
	m := &shardmap.Map{Epoch: 1 << 20, Buckets: 64, Ranges: []shardmap.Range{
		{Lo: 0, Hi: 31, Shard: d.shard.Name}, {Lo: 32, Hi: 63, Shard: "elsewhere"}}}
	if _, err := migrations.SetFence(ctxT(t), s.Pool(), m); err != nil {
		t.Fatal(err)
	}
}

// idIn returns a fresh id whose bucket (of 64) is in lo..hi.
func idIn(t *testing.T, lo, hi int) string {
	t.Helper()
	for range 10000 {
		id := newID(t)
		if b := shardmap.BucketText(id, 64); lo <= b && b <= hi {
			return id
		}
	}
	t.Fatal("no id in 10000 tries")
	return ""
}

// wantFenced fails unless err is the fence's refusal of a moved bucket
// owned by "elsewhere".
func wantFenced(t *testing.T, what string, err error) {
	t.Helper()
	var fe *store.FenceError
	if !errors.As(err, &fe) || !errors.Is(err, store.ErrFenced) {
		t.Errorf("%s: %v, want a *FenceError", what, err)
		return
	}
	if fe.State != "moved" || fe.Owner != "elsewhere" || fe.Epoch != 1<<20 || fe.Lo != 32 || fe.Hi != 63 {
		t.Errorf("%s: %+v", what, fe)
	}
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrOutcomeUnknown) {
		t.Errorf("%s: %v also matches not-found or outcome-unknown", what, err)
	}
}

// TestFenceRefusesKeyed: with half the buckets moved away, every keyed
// operation of a moved key is refused with a *FenceError — reads of rows
// that exist and of rows that do not, commits on both paths, standalone
// trace and timer writes — nothing is written, and the same operations on
// an owned key work. Scans over all rows leave the moved buckets' rows
// out instead of failing.
func TestFenceRefusesKeyed(t *testing.T) {
	eachMode(t, store.Options{TraceMax: 4}, func(t *testing.T, s *store.Store, d testDB) {
		ctx := ctxT(t)
		own, gone, never := idIn(t, 0, 31), idIn(t, 32, 63), idIn(t, 32, 63)
		for _, id := range []string{own, gone} { // written before the move
			e := &store.Execution{ID: id, DefinitionID: "fence", Status: "running", ParentID: ""}
			if err := s.Commit(ctx, e, nil, "ev0", []store.TimerOp{store.Schedule("t", 1)},
				[]store.Spawn{{ChildID: "c-" + id}}, json.RawMessage(`{"n":0}`)); err != nil {
				t.Fatal(err)
			}
		}
		moveHalf(t, s, d)

		for _, id := range []string{gone, never} {
			e := &store.Execution{ID: id, DefinitionID: "fence", Version: map[string]int{gone: 1, never: 0}[id]}
			v := e.Version
			wantFenced(t, "fast commit", s.Save(ctx, e))
			wantFenced(t, "commit", s.Commit(ctx, e, nil, "ev1", nil, nil, json.RawMessage(`{"n":1}`)))
			if e.Version != v {
				t.Errorf("a refused commit left version %d, want %d", e.Version, v)
			}
			_, err := s.Load(ctx, id)
			wantFenced(t, "load", err)
			_, _, err = s.LoadForEvent(ctx, id, "ev0")
			wantFenced(t, "load for event", err)
			_, err = s.IsProcessed(ctx, id, "ev0")
			wantFenced(t, "is processed", err)
			_, err = s.ReadTrace(ctx, id)
			wantFenced(t, "read trace", err)
			wantFenced(t, "append trace", s.AppendTrace(ctx, id, json.RawMessage(`{"x":1}`)))
			_, err = s.DeleteTimer(ctx, id, "t", 1)
			wantFenced(t, "delete timer", err)
		}
		if n := countRows(t, s, `SELECT count(*) FROM executions WHERE id = $1`, never); n != 0 {
			t.Errorf("a refused first save left %d rows", n)
		}
		if n := countRows(t, s, `SELECT (SELECT version FROM executions WHERE id = $1) + (SELECT count(*) FROM trace WHERE execution_id = $1) + (SELECT count(*) FROM timers WHERE execution_id = $1)`, gone); n != 1+1+1 {
			t.Errorf("refused writes changed the moved execution's rows (version+trace+timers = %d, want 3)", n)
		}

		// The owned key: everything works.
		e, err := s.Load(ctx, own)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(ctx, e, nil, "ev1", nil, nil, json.RawMessage(`{"n":1}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Load(ctx, idIn(t, 0, 31)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("load of an absent owned id: %v, want ErrNotFound", err)
		}
		if tr, err := s.ReadTrace(ctx, own); err != nil || len(tr) != 2 {
			t.Errorf("read trace: %v, %v", tr, err)
		}
		if err := s.AppendTrace(ctx, own, json.RawMessage(`{"x":1}`)); err != nil {
			t.Error(err)
		}

		// Scans: the moved execution's rows are left out.
		page, err := s.ListExecutions(ctx, store.ListOptions{DefinitionID: "fence"})
		if err != nil || len(page.Items) != 1 || page.Items[0].ID != own {
			t.Errorf("list: %+v, %v; want only %s", page.Items, err, own)
		}
		timers, err := s.DueTimers(ctx, 10, 0)
		if err != nil || len(timers) != 1 || timers[0].ExecutionID != own {
			t.Errorf("due timers: %+v, %v; want only %s's", timers, err, own)
		}
		spawns, err := s.PendingSpawns(ctx, 0)
		if err != nil || len(spawns) != 1 || spawns[0].ParentID != own {
			t.Errorf("pending spawns: %+v, %v; want only %s's", spawns, err, own)
		}

		// Off: served as before the fence.
		if _, err := s.Pool().Exec(ctx, `SELECT pgshard_fence_off()`); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Load(ctx, gone); err != nil {
			t.Errorf("fence off: %v", err)
		}
		if page, err := s.ListExecutions(ctx, store.ListOptions{DefinitionID: "fence"}); err != nil || len(page.Items) != 2 {
			t.Errorf("fence off: list %+v, %v", page.Items, err)
		}
	})
}

// TestFenceReadVerdicts: the keyed reads' verdict in its edge cases — a
// frozen range is read (its writes are refused), a bucket in no range of
// an on fence is refused as such (not "not found"), and a fence without
// its config row is an error rather than a guess.
func TestFenceReadVerdicts(t *testing.T) {
	d := freshDB(t, "direct")
	s := d.open(t, store.Options{})
	ctx := ctxT(t)
	own, gone := idIn(t, 0, 31), idIn(t, 32, 63)
	if err := s.Save(ctx, &store.Execution{ID: own, DefinitionID: "fence", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	moveHalf(t, s, d)
	exec := func(q string) {
		t.Helper()
		if _, err := s.Pool().Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	exec(`UPDATE pgshard_fence SET state = 'frozen' WHERE lo = 0`)
	e, err := s.Load(ctx, own)
	if err != nil {
		t.Fatalf("load of a frozen range: %v, want it served", err)
	}
	if _, err := s.IsProcessed(ctx, own, "ev"); err != nil {
		t.Errorf("is processed in a frozen range: %v", err)
	}
	var fe *store.FenceError
	if err := s.Save(ctx, e); !errors.As(err, &fe) || !fe.Frozen() {
		t.Errorf("save in a frozen range: %v, want a frozen *FenceError", err)
	}

	exec(`DELETE FROM pgshard_fence WHERE lo = 32`)
	_, err = s.Load(ctx, gone)
	if !errors.As(err, &fe) || fe.Lo != -1 || fe.State != "" || errors.Is(err, store.ErrNotFound) {
		t.Errorf("load of a bucket in no range: %v (%+v), want a *FenceError without a range", err, fe)
	}

	exec(`DELETE FROM pgshard_fence_config`)
	_, err = s.Load(ctx, gone)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55000" || errors.Is(err, store.ErrNotFound) {
		t.Errorf("load without the fence's config row: %v, want SQLSTATE 55000", err)
	}
	if _, err := s.Load(ctx, own); err != nil {
		t.Errorf("load of a range the fence holds, without its config row: %v", err)
	}
}
