package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/chaos"
	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/verify"
)

func mustDigest(t *testing.T, doc string) string {
	t.Helper()
	d, err := verify.ContentDigest([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestContentDigestsAgree: the writer's digests (loadgen) and the
// reader's (verify) are two implementations of one definition
// (verify/HISTORY.md, "Content digests"); they agree on the forms a
// document takes in the store (members reordered, whitespace), and differ
// when content differs.
func TestContentDigestsAgree(t *testing.T) {
	docs := []struct{ written, stored string }{
		{`{"id":"e1","name":"ping","from":"aa","op":"r/w0/1","emitted_ns":1764590000123456789}`,
			`{"id": "e1", "op": "r/w0/1", "from": "aa", "name": "ping", "emitted_ns": 1764590000123456789}`},
		{`{"op":"r/w0/1","step":3,"event":"<&>é","active":"b"}`, `{"step": 3, "active": "b", "event": "<&>é", "op": "r/w0/1"}`},
		{`{"step":2,"active":"a","timers":{"t1":1764590000.123456,"t0":1.5},"payload":"xx"}`,
			`{"active":"a","payload":"xx","step":2,"timers":{"t0":1.5,"t1":1764590000.123456}}`},
	}
	st := loadgen.State{Step: 2, Active: "a", Op: "r/w0/1", Timers: map[string]float64{"t0": 1.5}, Payload: "xx"}
	if got, want := loadgen.StateDigest(st), mustDigest(t, `{"step":2,"active":"a","op":"r/w0/1","timers":{"t0":1.5},"payload":"xx"}`); got != want {
		t.Errorf("StateDigest %s, want the digest of the state's document %s", got, want)
	}
	for _, d := range docs {
		w, err := loadgen.ContentDigest([]byte(d.written))
		if err != nil {
			t.Fatal(err)
		}
		if r := mustDigest(t, d.stored); r != w {
			t.Errorf("%s: writer digest %s, reader digest of the stored form %s", d.written, w, r)
		}
		if r := mustDigest(t, strings.Replace(d.stored, "a", "A", 1)); r == w {
			t.Errorf("%s: a changed document has the same digest", d.written)
		}
	}
}

// TestHistoryRoundTrip writes every kind of op, fault and end line with
// the chaos writer and reads them back with the independent reader of
// package verify (plain, gzip and zstd): the two sides of the format
// (verify/HISTORY.md) agree member by member.
func TestHistoryRoundTrip(t *testing.T) {
	m, err := shardmap.Even(64, []shardmap.Shard{
		{Name: "shard0", Ordinal: 0, DSN: "postgres://u@127.0.0.1:1/db"},
		{Name: "shard1", Ordinal: 1, DSN: "postgres://u@127.0.0.1:2/db"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{"", ".gz", ".zst"} {
		t.Run("history.jsonl"+ext, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "history.jsonl"+ext)
			start := time.Now()
			at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
			plan := []chaos.Planned{{ID: "f1", Kind: chaos.KindShardCrash, Shard: 1, At: time.Second, Hold: 500 * time.Millisecond, Params: chaos.Params{"mode": "immediate"}}}
			h, err := chaos.CreateHistory(path, chaos.Header{Run: "r1", StartedAt: start, Seed: 9, Scenario: "t", Target: "pgbouncer",
				Workload: chaos.HeaderWorkload{Executions: 2, DefinitionID: "chaos", TraceMax: 4}, Map: chaos.HeaderMapOf(m),
				Schedule: []chaos.HeaderPlanned{{ID: "f1", Kind: "shard-crash", Shard: "shard1", AtMs: 1000, HoldMs: 500, Params: plan[0].Params}}}, m, start)
			if err != nil {
				t.Fatal(err)
			}
			exe := "aa11"
			fire := 1764590000.123456
			c := &loadgen.Commit{Exe: loadgen.Execution{ID: exe, Version: 3, State: loadgen.State{Op: "r1/w0/2"}},
				ProcessedEventID: "r1-w0-1", Trace: `{"op":"r1/w0/2"}`,
				Emits:  []loadgen.Emit{{ID: "r1-w0-1-e0", TargetID: "bb22", Event: "{}"}},
				Timers: []loadgen.TimerOp{{Path: "t0", FireAt: fire}, {Path: "t1", Cancel: true}},
				Spawns: []loadgen.Spawn{{ChildID: "cc33"}}}
			pgErr := &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}
			ops := []*loadgen.Op{
				{ID: "r1/w0/1", Kind: loadgen.OpLoad, Src: "w0", ExecutionID: exe, Invoke: at(1), Complete: at(2), Cause: loadgen.CauseWorker,
					EventID: "r1-w0-1", Exists: true, Version: 3, Writer: "r1/w1/7"},
				{ID: "r1/w0/2", Kind: loadgen.OpCommit, Src: "w0", ExecutionID: exe, Invoke: at(2), Complete: at(3), Cause: loadgen.CauseWorker,
					EventID: "r1-w0-1", Input: "r1-w0-1", Commit: c},
				{ID: "r1/w0/3", Kind: loadgen.OpCommit, Src: "w0", ExecutionID: exe, Invoke: at(3), Complete: at(4), Cause: loadgen.CauseWorker,
					Commit: c, Err: &loadgen.ConflictError{Found: 5, Err: errors.New("conflict")}, Found: 5},
				{ID: "r1/w0/4", Kind: loadgen.OpCommit, Src: "w0", ExecutionID: exe, Invoke: at(4), Complete: at(5), Cause: loadgen.CauseWorker,
					Commit: c, Err: fmt.Errorf("%w: %w", loadgen.ErrOutcomeUnknown, pgErr), Unknown: true},
				{ID: "r1/sweeper/1", Kind: loadgen.OpDueTimers, Src: "sweeper", Invoke: at(5), Complete: at(6), Now: fire + 1,
					Timers: []loadgen.TimerEntry{{ExecutionID: exe, Path: "t0", FireAt: fire}}, N: 1},
				{ID: "r1/sweeper/2", Kind: loadgen.OpDeleteTimer, Src: "sweeper", ExecutionID: exe, Invoke: at(6), Complete: at(7), Path: "t0", FireAt: fire, Deleted: true},
				{ID: "r1/relay/1", Kind: loadgen.OpAckOutbox, Src: "relay", Invoke: at(7), Complete: at(8), Seq: 2, EventID: "r1-w0-1-e0", Target: "bb22",
					Err: context.DeadlineExceeded, Unknown: true},
				{ID: "r1/relay/2", Kind: loadgen.OpAckSpawn, Src: "relay", ExecutionID: exe, Invoke: at(8), Complete: at(9), Seq: 1, Child: "cc33"},
				{ID: "r1/relay/3", Kind: loadgen.OpReadOutbox, Src: "relay", Invoke: at(9), Complete: at(10), N: 7},
			}
			for _, op := range ops {
				h.Observe(op)
			}
			h.Fault(chaos.Event{ID: "f1", Kind: chaos.KindShardCrash, Phase: "inject", T: time.Second, Shard: "shard1", Landed: true, Evidence: map[string]any{"old_pid": 10}})
			h.Fault(chaos.Event{ID: "f1", Kind: chaos.KindShardCrash, Phase: "heal", T: 1500 * time.Millisecond, Shard: "shard1", Landed: true,
				Evidence: map[string]any{"old_pid": 10, "new_pid": 11, "recovery": []string{"automatic recovery in progress"}}})
			if st := h.Stats(); st.Ops != int64(len(ops)) || st.Commits != 1 || st.Conflicts != 1 || st.Unknown != 2 || st.Errors != 0 {
				t.Errorf("stats %+v", st)
			}
			h.End(chaos.End{EndedAt: at(20), Quiesce: &chaos.EndQuiesce{OK: true, Ms: 12}})
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}

			got, err := verify.OpenHistory(path)
			if err != nil {
				t.Fatal(err)
			}
			if got.Header.Run != "r1" || got.Header.Seed != 9 || got.Header.Workload.TraceMax != 4 || len(got.Header.Map.Shards) != 2 ||
				len(got.Header.Schedule) != 1 || got.Header.Schedule[0].HoldMS != 500 {
				t.Errorf("header %+v", got.Header)
			}
			if len(got.Ops) != len(ops) || got.Truncated() || !got.End.Quiesce.OK || got.End.Ops != len(ops) {
				t.Fatalf("%d ops (want %d), end %+v", len(got.Ops), len(ops), got.End)
			}
			shard := m.Lookup(exe).Name
			load, ok := got.Ops[0], got.Ops[1]
			if load.Kind != "load" || load.Outcome != verify.OutcomeOK || !load.Exists || load.Version != 3 || load.Writer != "r1/w1/7" ||
				load.Shard != shard || load.T0 != int64(time.Millisecond) || load.T1 != int64(2*time.Millisecond) {
				t.Errorf("load %+v", load)
			}
			if ok.Exp != 3 || ok.New != 4 || ok.Input != "r1-w0-1" || ok.Event != "r1-w0-1" || ok.Fast || !ok.Trace ||
				len(ok.Emits) != 1 || ok.Emits[0] != (verify.Emit{Event: "r1-w0-1-e0", Target: "bb22", Digest: mustDigest(t, "{}")}) ||
				ok.TraceDigest != mustDigest(t, `{"op":"r1/w0/2"}`) || ok.DataDigest != loadgen.StateDigest(c.Exe.State) || len(ok.SpawnDigests) != 1 ||
				len(ok.Timers) != 2 || ok.Timers[0].FireAt != fire || ok.Timers[0].Path != "t0" || !ok.Timers[1].Cancel ||
				len(ok.Spawns) != 1 || ok.Spawns[0] != "cc33" || ok.Step == nil || *ok.Step != 0 || ok.Armed == nil {
				t.Errorf("commit %+v", ok)
			}
			if c := got.Ops[2]; c.Outcome != verify.OutcomeFail || !c.Conflict || c.Found == nil || *c.Found != 5 {
				t.Errorf("conflict %+v", c)
			}
			if c := got.Ops[3]; c.Outcome != verify.OutcomeInfo || c.SQLState != "57P01" {
				t.Errorf("unknown %+v", c)
			}
			if d := got.Ops[4]; len(d.Timers) != 1 || d.Timers[0] != (verify.TimerOp{Exe: exe, Path: "t0", FireAt: fire}) || d.Now != fire+1 {
				t.Errorf("due timers %+v", d)
			}
			if d := got.Ops[5]; d.Path != "t0" || d.FireAt != fire || !d.Deleted {
				t.Errorf("delete timer %+v", d)
			}
			if a := got.Ops[6]; a.Outcome != verify.OutcomeInfo || a.Seq != 2 || a.Event != "r1-w0-1-e0" || a.Target != "bb22" || a.Shard != "shard1" {
				t.Errorf("ack outbox %+v (seq 2 names ordinal 1)", a)
			}
			if a := got.Ops[7]; a.Seq != 1 || a.Parent != exe || a.Child != "cc33" {
				t.Errorf("ack spawn %+v", a)
			}
			if len(got.Faults) != 2 || got.Faults[1].Phase != "heal" || string(got.Faults[1].Evidence["new_pid"]) != "11" || got.Faults[0].T != int64(time.Second) {
				t.Errorf("faults %+v", got.Faults)
			}
			// The error class is written for counting.
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if ext == "" {
				for _, want := range []string{`"class":"conflict"`, `"class":"57"`, `"class":"timeout"`} {
					if !strings.Contains(string(raw), want) {
						t.Errorf("history lacks %s", want)
					}
				}
			}
		})
	}
}
