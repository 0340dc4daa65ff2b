package mutant_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/store"
)

// commitHooks, installed in the test's database only, break a commit at a
// chosen point: an outbox event containing "boom" fails its INSERT (before
// the COMMIT), one containing "nap" holds it there for up to 30 s, and a
// deferred constraint trigger runs inside the COMMIT
// itself, refusing a row whose data contains "refuse-at-commit" and holding
// one containing "sleep-at-commit" for up to 30 s.
const commitHooks = `
CREATE FUNCTION test_outbox_boom() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.event LIKE '%boom%' THEN
        RAISE EXCEPTION 'injected failure' USING ERRCODE = '23514';
    END IF;
    IF NEW.event LIKE '%nap%' THEN
        PERFORM pg_sleep(30);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_outbox_boom BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION test_outbox_boom();
CREATE FUNCTION test_commit_hook() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.data LIKE '%refuse-at-commit%' THEN
        RAISE EXCEPTION 'refused at commit' USING ERRCODE = '23514';
    END IF;
    IF NEW.data LIKE '%sleep-at-commit%' THEN
        PERFORM pg_sleep(30);
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER test_commit_hook AFTER INSERT OR UPDATE ON executions
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_commit_hook();
`

// TestOutcomeClassification: a commit that fails before its COMMIT or is
// refused by the server at COMMIT is a definite failure with nothing
// applied; one whose COMMIT was sent and not answered is an unknown
// outcome — for the reference store as for the production store. They
// differ, both correctly, on a commit whose context ends before its COMMIT
// was sent: the production store's single pipeline was already sent (so
// it cannot know), the reference store never sent its COMMIT (so nothing
// can have committed).
func TestOutcomeClassification(t *testing.T) {
	c := clustertest.Get(t)
	m := clustertest.MigratedMap(t, c)
	for i := range m.Shards {
		if _, err := shardConn(t, m, i).Exec(ctxT(t), commitHooks); err != nil {
			t.Fatal(err)
		}
	}
	prod, err := router.Open(ctxT(t), m, router.Options{Store: store.Options{ConnectAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	ref := openStore(t, m, false, "", store.Options{})
	// The same with a statement timeout shorter than a nap.
	timed := store.Options{ConnectAttempts: 3, StatementTimeout: 300 * time.Millisecond}
	prodTimed, err := router.Open(ctxT(t), m, router.Options{Store: timed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prodTimed.Close)
	refTimed := openStore(t, m, false, "", timed)
	fresh := ids(5, 16)
	for _, tc := range []struct {
		name        string
		status      string
		event       string
		timeout     time.Duration
		wantUnknown bool
		// timed uses the stores with a statement timeout.
		timed bool
		// prodUnknown, when set, is the production store's answer where
		// it differs.
		prodUnknown *bool
	}{
		{name: "statement fails before COMMIT", status: "running", event: `{"boom":1}`},
		{name: "refused at COMMIT", status: "refuse-at-commit", event: `{"n":1}`},
		{name: "statement timeout before COMMIT", status: "running", event: `{"nap":1}`, timed: true},
		{name: "context ends before COMMIT", status: "running", event: `{"nap":1}`, timeout: 500 * time.Millisecond, prodUnknown: ptr(true)},
		{name: "no answer to COMMIT", status: "sleep-at-commit", event: `{"n":1}`, timeout: 500 * time.Millisecond, wantUnknown: true},
	} {
		stores := []struct {
			name string
			s    store.ExecutionStore
		}{{"production", prod}, {"reference", ref}}
		if tc.timed {
			stores[0].s, stores[1].s = prodTimed, refTimed
		}
		for _, s := range stores {
			t.Run(tc.name+"/"+s.name, func(t *testing.T) {
				ctx := ctxT(t)
				wantUnknown := tc.wantUnknown
				if s.name == "production" && tc.prodUnknown != nil {
					wantUnknown = *tc.prodUnknown
				}
				x := &store.Execution{ID: fresh[0], DefinitionID: "def", Status: "running"}
				fresh = fresh[1:]
				if err := s.s.Save(ctx, x); err != nil {
					t.Fatal(err)
				}
				x.Status = tc.status
				cctx := ctx
				if tc.timeout > 0 {
					var cancel context.CancelFunc
					cctx, cancel = context.WithTimeout(ctx, tc.timeout)
					defer cancel()
				}
				err := s.s.Commit(cctx, x, []store.Emit{{Event: json.RawMessage(tc.event)}}, "ev", nil, nil, json.RawMessage(`{"t":1}`))
				switch {
				case err == nil:
					t.Fatal("the commit succeeded")
				case errors.Is(err, store.ErrConflict):
					t.Fatalf("a conflict: %v", err)
				case errors.Is(err, store.ErrOutcomeUnknown) != wantUnknown:
					t.Fatalf("error %v: unknown outcome %v, want %v", err, !wantUnknown, wantUnknown)
				}
				if x.Version != 1 {
					t.Errorf("exe.Version %d after the failure, want 1 restored", x.Version)
				}
				if wantUnknown {
					return // it may or may not have been applied
				}
				got, err := s.s.Load(ctx, x.ID)
				if err != nil || got.Version != 1 {
					t.Fatalf("after a definite failure: %v, %v; want version 1", got, err)
				}
				if n := countAll(t, m, `SELECT count(*) FROM processed_events WHERE execution_id = $1`, x.ID) +
					countAll(t, m, `SELECT count(*) FROM trace WHERE execution_id = $1`, x.ID); n != 0 {
					t.Fatalf("a definite failure left %d rows", n)
				}
			})
		}
	}
}

func ptr[T any](v T) *T { return &v }
