package store_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/store"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update after reviewing):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// TestCommitPlanGolden pins what commits send: the statement and its
// arguments (collections as parallel arrays, timer ops reduced to their net
// effect). A change here changes every commit.
func TestCommitPlanGolden(t *testing.T) {
	type tc struct {
		name     string
		emits    []store.Emit
		timers   []store.TimerOp
		spawns   []store.Spawn
		trace    string
		traceMax int
		eventID  string
	}
	cases := []tc{
		{name: "one emit", emits: []store.Emit{{TargetID: "t1", Event: json.RawMessage(`{"kind":"Go"}`)}}},
		{name: "everything, ring capped", eventID: "ev9",
			emits:  []store.Emit{{TargetID: "t1", Event: json.RawMessage(`{"k":1}`)}, {Event: json.RawMessage(`{"k":2}`)}},
			timers: []store.TimerOp{store.Schedule("a", 10), store.Cancel("b"), store.Schedule("b", 20), store.Schedule("a", 11), store.Cancel("c")},
			spawns: []store.Spawn{{ChildID: "c1", RootPath: "r", Context: json.RawMessage(`{"x":1}`)}, {ChildID: "c2", RootPath: "r2"}},
			trace:  `{"step":1}`, traceMax: 50},
		{name: "trace only, unbounded ring", trace: `{"step":2}`},
		{name: "cancels only", timers: []store.TimerOp{store.Schedule("a", 1), store.Cancel("a")}},
		{name: "state only (fast path)", eventID: "ev1"},
	}
	var buf bytes.Buffer
	for _, c := range cases {
		var trace []byte
		if c.trace != "" {
			trace = []byte(c.trace)
		}
		sql, args := store.CommitSQL("e1", "def", `{"version":4}`, 3, c.eventID, c.emits, c.timers, c.spawns, trace, c.traceMax)
		fmt.Fprintf(&buf, "=== %s\n%s\n", c.name, sql)
		for j, a := range args {
			fmt.Fprintf(&buf, "   $%d = %#v\n", j+1, a)
		}
	}
	checkGolden(t, "testdata/commit_plan.golden", buf.Bytes())
}

func TestCollapseTimers(t *testing.T) {
	s, c := store.Schedule, store.Cancel
	tests := []struct {
		name      string
		ops       []store.TimerOp
		schedules []store.TimerOp
		cancels   []string
	}{
		{"empty", nil, nil, nil},
		{"schedule", []store.TimerOp{s("a", 1)}, []store.TimerOp{s("a", 1)}, nil},
		{"re-arm keeps the last fire_at", []store.TimerOp{s("a", 1), s("a", 2)}, []store.TimerOp{s("a", 2)}, nil},
		{"schedule then cancel is a cancel", []store.TimerOp{s("a", 1), c("a")}, nil, []string{"a"}},
		{"cancel then schedule is a schedule", []store.TimerOp{c("a"), s("a", 3)}, []store.TimerOp{s("a", 3)}, nil},
		{"order of first appearance", []store.TimerOp{s("b", 1), c("a"), s("c", 2), s("b", 5)},
			[]store.TimerOp{s("b", 5), s("c", 2)}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gs, gc := store.CollapseTimers(tt.ops)
			if !reflect.DeepEqual(gs, tt.schedules) || !reflect.DeepEqual(gc, tt.cancels) {
				t.Errorf("got %v %v, want %v %v", gs, gc, tt.schedules, tt.cancels)
			}
		})
	}
}

func TestConflictError(t *testing.T) {
	var err error = fmt.Errorf("wrapped: %w", &store.ConflictError{ID: "e1", Expected: 3, Found: 4})
	if !errors.Is(err, store.ErrConflict) {
		t.Error("errors.Is(ErrConflict) is false")
	}
	var ce *store.ConflictError
	if !errors.As(err, &ce) || ce.ID != "e1" || ce.Expected != 3 || ce.Found != 4 {
		t.Errorf("errors.As: %+v", ce)
	}
	if got := ce.Error(); got != "commit conflict on execution e1: expected version 3, found 4" {
		t.Errorf("Error() = %q", got)
	}
}

// TestClassifyCommitError: only a server ERROR proves the implicit
// transaction rolled back; everything else after sending is unknown.
func TestClassifyCommitError(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		unknown bool
	}{
		{"server error", &pgconn.PgError{Severity: "ERROR", Code: "23505"}, false},
		{"wrapped server error", fmt.Errorf("x: %w", &pgconn.PgError{Severity: "ERROR", Code: "57014"}), false},
		{"fatal: the backend may have committed before dying", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, true},
		{"pgbouncer: server conn crashed", &pgconn.PgError{Severity: "ERROR", Code: "08P01", Message: "server conn crashed?"}, true},
		{"operator intervention at severity ERROR", &pgconn.PgError{Severity: "ERROR", Code: "57P03"}, true},
		{"connection lost", errors.New("unexpected EOF"), true},
		{"context ended", fmt.Errorf("read: %w", os.ErrDeadlineExceeded), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := store.ClassifyCommitError(tt.err)
			if errors.Is(got, store.ErrOutcomeUnknown) != tt.unknown {
				t.Errorf("ErrOutcomeUnknown = %v, want %v (%v)", !tt.unknown, tt.unknown, got)
			}
			if !errors.Is(got, tt.err) {
				t.Error("the cause is lost")
			}
		})
	}
}
