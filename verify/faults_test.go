package verify_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/verify"
)

// TestFaultLandings reads each fault kind's evidence: what counts as
// landed, and that kinds which make ops fail also need an error on their
// shard inside their window (corroboration).
func TestFaultLandings(t *testing.T) {
	errOp := `{"type":"op","id":"r1/w0/9","kind":"load","src":"w0","exe":"e1","shard":"shard0","t0":4000000,"t1":4500000,"outcome":"fail","err":"conn closed","event":"","cause":"worker"}`
	cases := []struct {
		kind, evidence string
		withError      bool
		want           int // landed
		corroborable   bool
		heal           string // the heal line's evidence, "" for none
	}{
		{verify.FaultTerminate, `{"terminated":[{"pid":1,"state":"active"}]}`, true, 1, true, ""},
		{verify.FaultTerminate, `{"terminated":[{"pid":1,"state":"active"}]}`, false, 0, true, ""},
		{verify.FaultTerminate, `{"terminated":[]}`, true, 0, true, ""},
		{verify.FaultTerminate, `{"terminated":2}`, true, 1, true, ""},
		{verify.FaultPgBouncerKill, `{"old_pid":10,"new_pid":11}`, true, 1, true, ""},
		{verify.FaultPgBouncerKill, `{"old_pid":10,"new_pid":10}`, true, 0, true, ""},
		{verify.FaultShardCrash, `{"old_pid":10,"new_pid":11,"recovery":["redo done"]}`, true, 1, true, ""},
		{verify.FaultShardCrash, `{"old_pid":10,"new_pid":11,"recovery":[]}`, true, 0, true, ""},
		{verify.FaultBackendKill, `{"pid":12,"recovery":["terminating any other active server processes"]}`, true, 1, true, ""},
		{verify.FaultProxyRestart, `{"old_pid":10,"new_pid":11,"clients":3}`, true, 1, true, ""},
		{verify.FaultReset, `{"reset":4}`, true, 1, true, ""},
		{verify.FaultReset, `{"reset":0}`, true, 0, true, ""},
		{verify.FaultPgBouncerPause, `{"paused":true,"waiting":3}`, false, 1, false, ""},
		{verify.FaultPgBouncerPause, `{"paused":true,"waiting":0}`, false, 0, false, ""},
		{verify.FaultPgBouncerReconnect, `{"reconnected":true}`, false, 1, false, ""},
		{verify.FaultLatency, `{"delay_ms":50,"delayed":9}`, false, 1, false, ""},
		{verify.FaultStall, `{"stalled":2}`, false, 1, false, ""},
		{verify.FaultPartition, `{"held":0,"refused":5}`, false, 1, false, ""},
		{verify.FaultPartition, `{"held":0,"refused":0}`, false, 0, false, ""},
		{"future-kind", `{"whatever":1}`, false, 1, false, ""}, // the writer's own reading
		// What only the end of a fault shows is in its heal line.
		{verify.FaultShardCrash, `{"old_pid":10}`, true, 1, true, `{"old_pid":10,"new_pid":11,"recovery":["automatic recovery in progress"]}`},
		{verify.FaultShardCrash, `{"old_pid":10}`, true, 0, true, `{"old_pid":10,"new_pid":10,"recovery":["automatic recovery in progress"]}`},
		{verify.FaultBackendKill, `{"pid":12,"state":"active"}`, true, 1, true, `{"pid":12,"recovery":["terminated by signal 9"]}`},
		{verify.FaultLatency, `{"delay_ms":15,"conns":3}`, false, 1, false, `{"delay_ms":15,"delayed":40}`},
		{verify.FaultLatency, `{"delay_ms":15,"conns":3}`, false, 0, false, `{"delay_ms":15,"delayed":0}`},
		{verify.FaultStall, `{"conns":3}`, false, 1, false, `{"stalled":3}`},
		{verify.FaultPgBouncerKill, `{"old_pid":10}`, true, 1, true, `{"old_pid":10,"new_pid":11}`},
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("%d-%s", i, c.kind), func(t *testing.T) {
			ls := []string{
				strings.Replace(hdr, `"schedule":[]`, `"schedule":[{"id":"f1","kind":"`+c.kind+`","shard":"shard0","at_ms":3,"hold_ms":2}]`, 1),
				setupOp,
				`{"type":"fault","id":"f1","kind":"` + c.kind + `","phase":"inject","t":3000000,"shard":"shard0","landed":true,"evidence":` + c.evidence + `}`,
			}
			if c.withError {
				ls = append(ls, errOp)
			}
			heal := ""
			if c.heal != "" {
				heal = `,"evidence":` + c.heal
			}
			ls = append(ls, `{"type":"fault","id":"f1","kind":"`+c.kind+`","phase":"heal","t":5000000,"shard":"shard0"`+heal+`}`, endLine)
			h, err := verify.ReadHistory(strings.NewReader(lines(ls...)))
			if err != nil {
				t.Fatal(err)
			}
			v := verify.Check(context.Background(), h, emptyState(h), verify.Options{})
			if len(v.Faults) != 1 {
				t.Fatalf("faults %+v", v.Faults)
			}
			f := v.Faults[0]
			if f.Landed != c.want || (f.Corroborated >= 0) != c.corroborable || f.Scheduled != 1 || f.Injected != 1 || f.WriterLanded != 1 {
				t.Errorf("%+v, want landed %d corroborable %v", f, c.want, c.corroborable)
			}
			if f.Vacuous != (c.want == 0) {
				t.Errorf("vacuous %v with %d landed", f.Vacuous, f.Landed)
			}
		})
	}
}

// emptyState is a state of h's map with no rows; setupOp's execution is
// then missing, which these tests ignore (they look at faults only).
func emptyState(h *verify.History) *verify.State {
	st := &verify.State{Map: h.Header.Map}
	for _, s := range h.Header.Map.Shards {
		st.Shards = append(st.Shards, &verify.ShardState{Name: s.Name, Ordinal: s.Ordinal,
			Identity: &verify.Identity{Name: s.Name, Ordinal: s.Ordinal, Buckets: h.Header.Map.Buckets, MapEpoch: 1}})
	}
	return st
}

// TestDoc pins how a text column is written in a state: JSON documents as
// themselves, anything else as a string, and back.
func TestDoc(t *testing.T) {
	for _, c := range []struct{ text, json string }{
		{`{"a":1}`, `{"a":1}`},
		{`[1,2]`, `[1,2]`},
		{`not json`, `"not json"`},
		{`"quoted"`, `"\"quoted\""`},
		{`42`, `"42"`},
		{``, `""`},
		{`{broken`, `"{broken"`},
	} {
		b, err := verify.Doc(c.text).MarshalJSON()
		if err != nil || string(b) != c.json {
			t.Errorf("%q → %s, %v; want %s", c.text, b, err, c.json)
		}
		var back verify.Doc
		if err := back.UnmarshalJSON(b); err != nil || string(back) != c.text {
			t.Errorf("%s → %q, %v; want %q", b, back, err, c.text)
		}
	}
}

// TestPartitionBound: an execution with more ops than porcupine is given
// is undecided — an ERROR saying why — never a pass, and one within the
// bound is checked.
func TestPartitionBound(t *testing.T) {
	ls := []string{hdr, setupOp}
	for i := 0; i < 5; i++ {
		ls = append(ls, fmt.Sprintf(`{"type":"op","id":"r1/w0/%d","kind":"load","src":"w0","exe":"e1","shard":"shard0","t0":%d,"t1":%d,"outcome":"ok","cause":"worker","exists":true,"version":1,"writer":"r1/setup/1","processed":false}`, i+1, 3+i, 4+i))
	}
	h, err := verify.ReadHistory(strings.NewReader(lines(append(ls, endLine)...)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		max       int
		undecided bool
	}{{3, true}, {6, false}} {
		v := verify.Check(context.Background(), h, emptyState(h), verify.Options{MaxPartitionOps: c.max})
		if got := len(v.Undecided) == 1; got != c.undecided {
			t.Fatalf("max %d: undecided %v", c.max, v.Undecided)
		}
		// (The empty state lacks e1: the CAS check fails either way; what
		// matters here is that the bound is reported and nothing passes.)
		if c.undecided && (v.Result == verify.Pass || !strings.Contains(strings.Join(v.Reasons, ";"), "more than 3 ops")) {
			t.Errorf("max %d: %s %v, want a verdict naming the bound", c.max, v.Result, v.Reasons)
		}
	}
}
