package mutant_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/chaos/mutant"
	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/store"
)

// fakeTarget is an in-memory loadgen.Target that logs every call, so tests
// can see the order in which a wrapper calls it.
type fakeTarget struct {
	mu        sync.Mutex
	log       []string
	exes      map[string]loadgen.Execution // stored, with its version
	processed map[string]bool              // "id/event"
	outbox    []loadgen.OutboxEntry
	// lostAcks commits apply and then report an unknown outcome (a lost
	// acknowledgement); unknownNoApply commits report it without applying.
	lostAcks, unknownNoApply int
	failAck                  int64 // AckOutbox of this seq fails
	closed                   bool
}

var _ loadgen.Target = (*fakeTarget)(nil)

func (f *fakeTarget) logf(format string, args ...any) {
	f.log = append(f.log, fmt.Sprintf(format, args...))
}

func (f *fakeTarget) LoadForEvent(_ context.Context, id, event string) (*loadgen.Execution, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logf("load %s %s", id, event)
	e, ok := f.exes[id]
	if !ok {
		return nil, false, nil
	}
	return &e, f.processed[id+"/"+event], nil
}

func (f *fakeTarget) Commit(_ context.Context, c *loadgen.Commit) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logf("commit %s v%d event %s", c.Exe.ID, c.Exe.Version, c.ProcessedEventID)
	if f.unknownNoApply > 0 {
		f.unknownNoApply--
		return fmt.Errorf("%w: connection reset", loadgen.ErrOutcomeUnknown)
	}
	if cur := f.exes[c.Exe.ID]; cur.Version != c.Exe.Version {
		return fmt.Errorf("%w: found %d", loadgen.ErrConflict, cur.Version)
	}
	e := c.Exe
	e.Version++
	if f.exes == nil {
		f.exes, f.processed = map[string]loadgen.Execution{}, map[string]bool{}
	}
	f.exes[e.ID] = e
	if c.ProcessedEventID != "" {
		f.processed[e.ID+"/"+c.ProcessedEventID] = true
	}
	if f.lostAcks > 0 {
		f.lostAcks--
		return fmt.Errorf("%w: reply lost", loadgen.ErrOutcomeUnknown)
	}
	return nil
}

func (f *fakeTarget) PendingOutbox(_ context.Context, limit int) ([]loadgen.OutboxEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logf("pending outbox %d", limit)
	return slices.Clone(f.outbox), nil
}

func (f *fakeTarget) AckOutbox(_ context.Context, seq int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logf("ack outbox %d", seq)
	if seq == f.failAck {
		return errors.New("ack failed")
	}
	f.outbox = slices.DeleteFunc(f.outbox, func(r loadgen.OutboxEntry) bool { return r.Seq == seq })
	return nil
}

func (f *fakeTarget) PendingSpawns(context.Context, int) ([]loadgen.SpawnEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logf("pending spawns")
	return nil, nil
}

func (f *fakeTarget) AckSpawn(_ context.Context, seq int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logf("ack spawn %d", seq)
	return nil
}

func (f *fakeTarget) DueTimers(context.Context, float64, int) ([]loadgen.TimerEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logf("due timers")
	return nil, nil
}

func (f *fakeTarget) DeleteTimer(_ context.Context, id, path string, _ float64) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logf("delete timer %s %s", id, path)
	return true, nil
}

func (f *fakeTarget) Close() { f.closed = true }

func threeRows() []loadgen.OutboxEntry {
	return []loadgen.OutboxEntry{{Seq: 1, TargetID: "a", Event: `{"id":"e1"}`}, {Seq: 1025, TargetID: "b", Event: `{"id":"e2"}`}, {Seq: 2, Event: `{"id":"e3"}`}}
}

func TestWrapControlIsTheTarget(t *testing.T) {
	f := &fakeTarget{}
	got, err := mutant.Wrap(f, "")
	if err != nil || got != loadgen.Target(f) {
		t.Fatalf("Wrap(t, \"\") = %v, %v; want t itself", got, err)
	}
}

// TestRelayAcksBeforeDelivering: the wrapped PendingOutbox deletes every
// row before the relay has delivered any, so a delivery that fails has
// nothing left to retry; the production target only reads.
func TestRelayAcksBeforeDelivering(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		bug       mutant.Kind
		failAck   int64
		wantLog   []string
		wantRows  []int64 // seqs returned
		wantLeft  []int64 // seqs still pending afterwards
		wantError bool
	}{
		{name: "control", wantLog: []string{"pending outbox 100"}, wantRows: []int64{1, 1025, 2}, wantLeft: []int64{1, 1025, 2}},
		{name: "mutant", bug: mutant.RelayAcksBeforeDelivering,
			wantLog:  []string{"pending outbox 100", "ack outbox 1", "ack outbox 1025", "ack outbox 2"},
			wantRows: []int64{1, 1025, 2}, wantLeft: []int64{}},
		{name: "mutant, an ack fails", bug: mutant.RelayAcksBeforeDelivering, failAck: 1025,
			wantLog:  []string{"pending outbox 100", "ack outbox 1", "ack outbox 1025"},
			wantRows: []int64{1}, wantLeft: []int64{1025, 2}, wantError: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeTarget{outbox: threeRows(), failAck: c.failAck}
			tg, err := mutant.Wrap(f, c.bug)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := tg.PendingOutbox(ctx, 100)
			if (err != nil) != c.wantError {
				t.Fatalf("PendingOutbox error %v, want error %v", err, c.wantError)
			}
			seqs := func(rs []loadgen.OutboxEntry) []int64 {
				out := []int64{}
				for _, r := range rs {
					out = append(out, r.Seq)
				}
				return out
			}
			if got := seqs(rows); !reflect.DeepEqual(got, c.wantRows) {
				t.Errorf("returned seqs %v, want %v", got, c.wantRows)
			}
			if !reflect.DeepEqual(f.log, c.wantLog) {
				t.Errorf("calls %q, want %q", f.log, c.wantLog)
			}
			// The relay's delivery of every returned row fails now: what
			// is still pending is all it can ever deliver.
			if got := seqs(f.outbox); !reflect.DeepEqual(got, c.wantLeft) {
				t.Errorf("pending after the poll %v, want %v", got, c.wantLeft)
			}
			if len(rows) > 0 && rows[0].Event != `{"id":"e1"}` {
				t.Errorf("row content changed: %+v", rows[0])
			}
		})
	}
}

// TestRetryUnknownWithNewEvent: after an unknown outcome the wrapped
// Commit reloads and commits the same step again with event+"-retry",
// once; a commit that did apply is then applied twice.
func TestRetryUnknownWithNewEvent(t *testing.T) {
	ctx := context.Background()
	step := func() *loadgen.Commit {
		return &loadgen.Commit{
			Exe:              loadgen.Execution{ID: "x", DefinitionID: "d", Version: 1, State: loadgen.State{Step: 2, Last: "E"}},
			ProcessedEventID: "E",
			Emits:            []loadgen.Emit{{TargetID: "y", Event: `{"id":"E-e0"}`}},
		}
	}
	for _, c := range []struct {
		name                     string
		bug                      mutant.Kind
		lostAcks, unknownNoApply int
		conflict                 bool
		wantErr                  error // nil, or what the error must match
		wantLog                  []string
		wantVersion              int
		wantProcessed            []string
	}{
		{name: "control, lost ack", lostAcks: 1, wantErr: loadgen.ErrOutcomeUnknown,
			wantLog: []string{"commit x v1 event E"}, wantVersion: 2, wantProcessed: []string{"x/E"}},
		{name: "mutant, lost ack: applied twice", bug: mutant.RetryUnknownWithNewEvent, lostAcks: 1,
			wantLog:     []string{"commit x v1 event E", "load x E-retry", "commit x v2 event E-retry"},
			wantVersion: 3, wantProcessed: []string{"x/E", "x/E-retry"}},
		{name: "mutant, not applied: the event id is lost", bug: mutant.RetryUnknownWithNewEvent, unknownNoApply: 1,
			wantLog:     []string{"commit x v1 event E", "load x E-retry", "commit x v1 event E-retry"},
			wantVersion: 2, wantProcessed: []string{"x/E-retry"}},
		{name: "mutant retries once", bug: mutant.RetryUnknownWithNewEvent, unknownNoApply: 2, wantErr: loadgen.ErrOutcomeUnknown,
			wantLog:     []string{"commit x v1 event E", "load x E-retry", "commit x v1 event E-retry"},
			wantVersion: 1, wantProcessed: []string{}},
		{name: "mutant, conflict: no retry", bug: mutant.RetryUnknownWithNewEvent, conflict: true, wantErr: loadgen.ErrConflict,
			wantLog: []string{"commit x v1 event E"}, wantVersion: 5, wantProcessed: []string{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeTarget{lostAcks: c.lostAcks, unknownNoApply: c.unknownNoApply,
				exes: map[string]loadgen.Execution{"x": {ID: "x", DefinitionID: "d", Version: 1}}, processed: map[string]bool{}}
			if c.conflict {
				f.exes["x"] = loadgen.Execution{ID: "x", DefinitionID: "d", Version: 5}
			}
			tg, err := mutant.Wrap(f, c.bug)
			if err != nil {
				t.Fatal(err)
			}
			in := step()
			err = tg.Commit(ctx, in)
			switch {
			case c.wantErr == nil && err != nil:
				t.Fatalf("Commit: %v", err)
			case c.wantErr != nil && !errors.Is(err, c.wantErr):
				t.Fatalf("Commit error %v, want one matching %v", err, c.wantErr)
			}
			if !reflect.DeepEqual(f.log, c.wantLog) {
				t.Errorf("calls %q, want %q", f.log, c.wantLog)
			}
			if got := f.exes["x"].Version; got != c.wantVersion {
				t.Errorf("stored version %d, want %d", got, c.wantVersion)
			}
			got := []string{}
			for k := range f.processed {
				got = append(got, k)
			}
			slices.Sort(got)
			if !reflect.DeepEqual(got, c.wantProcessed) {
				t.Errorf("processed %v, want %v", got, c.wantProcessed)
			}
			if !reflect.DeepEqual(in, step()) {
				t.Errorf("Commit modified its argument: %+v", in)
			}
		})
	}
}

// TestWrapPassesThrough: every other call reaches the target unchanged.
func TestWrapPassesThrough(t *testing.T) {
	ctx := context.Background()
	for _, k := range []mutant.Kind{mutant.RelayAcksBeforeDelivering, mutant.RetryUnknownWithNewEvent} {
		t.Run(string(k), func(t *testing.T) {
			f := &fakeTarget{}
			tg, err := mutant.Wrap(f, k)
			if err != nil {
				t.Fatal(err)
			}
			_, _, _ = tg.LoadForEvent(ctx, "x", "e")
			_ = tg.AckOutbox(ctx, 7)
			_, _ = tg.PendingSpawns(ctx, 3)
			_ = tg.AckSpawn(ctx, 8)
			_, _ = tg.DueTimers(ctx, 1, 2)
			_, _ = tg.DeleteTimer(ctx, "x", "p", 1)
			tg.Close()
			want := []string{"load x e", "ack outbox 7", "pending spawns", "ack spawn 8", "due timers", "delete timer x p"}
			if !reflect.DeepEqual(f.log, want) || !f.closed {
				t.Errorf("calls %q (closed %v), want %q and closed", f.log, f.closed, want)
			}
		})
	}
}

// fencedTarget refuses every keyed call with a fence error, as a shard
// whose range moved away does.
type fencedTarget struct {
	fakeTarget
	err error
}

func (f *fencedTarget) LoadForEvent(context.Context, string, string) (*loadgen.Execution, bool, error) {
	return nil, false, f.err
}
func (f *fencedTarget) Commit(context.Context, *loadgen.Commit) error { return f.err }
func (f *fencedTarget) DeleteTimer(context.Context, string, string, float64) (bool, error) {
	return false, f.err
}

// TestProxyIgnoresFence: a fence refusal is taken for success by every
// keyed call; any other error goes through.
func TestProxyIgnoresFence(t *testing.T) {
	refusal := &store.FenceError{Shard: "s0", Bucket: 9, Lo: 8, Hi: 15, State: "moved", Owner: "s1",
		Err: &pgconn.PgError{Code: store.FenceSQLState, Message: "pgshard fence: refused"}}
	for _, c := range []struct {
		name    string
		err     error
		swallow bool
	}{
		{"fence refusal", fmt.Errorf("router: shard s0: %w", refusal), true},
		{"other error", errors.New("connection reset"), false},
		{"unknown outcome", fmt.Errorf("%w: reply lost", loadgen.ErrOutcomeUnknown), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := mutant.Wrap(&fencedTarget{err: c.err}, mutant.ProxyIgnoresFence)
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			exe, processed, lerr := w.LoadForEvent(ctx, "a", "e1")
			cerr := w.Commit(ctx, &loadgen.Commit{Exe: loadgen.Execution{ID: "a", Version: 3}})
			deleted, derr := w.DeleteTimer(ctx, "a", "t", 1)
			if c.swallow {
				if exe != nil || processed || lerr != nil || cerr != nil || deleted || derr != nil {
					t.Errorf("refusal not taken for success: load %v %v %v, commit %v, delete %v %v", exe, processed, lerr, cerr, deleted, derr)
				}
				return
			}
			for _, err := range []error{lerr, cerr, derr} {
				if !errors.Is(err, c.err) {
					t.Errorf("error %v, want %v passed through", err, c.err)
				}
			}
		})
	}
}
