package verify_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
		// Crash recovery as the writer requires it: a new postmaster ran
		// automatic recovery (a log line about the crash is not enough).
		{verify.FaultShardCrash, `{"old_pid":10,"new_pid":11,"recovery":["LOG:  automatic recovery in progress"]}`, true, 1, true, ""},
		{verify.FaultShardCrash, `{"old_pid":10,"new_pid":11,"recovery":["redo done"]}`, true, 0, true, ""},
		{verify.FaultShardCrash, `{"old_pid":10,"new_pid":11,"recovery":[]}`, true, 0, true, ""},
		// This very backend died of SIGKILL.
		{verify.FaultBackendKill, `{"pid":12,"recovery":["LOG:  client backend (PID 12) was terminated by signal 9: Killed"]}`, true, 1, true, ""},
		{verify.FaultBackendKill, `{"pid":12,"recovery":["terminating any other active server processes"]}`, true, 0, true, ""},
		{verify.FaultBackendKill, `{"pid":12,"recovery":["LOG:  client backend (PID 13) was terminated by signal 9: Killed"]}`, true, 0, true, ""},
		{verify.FaultProxyRestart, `{"old_pid":10,"new_pid":11,"clients":3}`, true, 1, true, ""},
		// A reset lands when it cut a request in flight, and an op in
		// flight at that instant failed.
		{verify.FaultReset, `{"reset":4,"in_flight":1}`, true, 1, true, ""},
		{verify.FaultReset, `{"reset":4,"in_flight":0}`, true, 0, true, ""}, // idle pooled connections only
		{verify.FaultReset, `{"reset":4}`, true, 0, true, ""},
		{verify.FaultReset, `{"reset":4,"in_flight":1}`, false, 0, true, ""},
		{verify.FaultPgBouncerPause, `{"paused":true,"waiting":3}`, false, 1, false, ""},
		{verify.FaultPgBouncerPause, `{"paused":true,"waiting":0}`, false, 0, false, ""},
		// RECONNECT closed server connections and the pool made new ones.
		{verify.FaultPgBouncerReconnect, `{"reconnected":true}`, false, 0, false, ""},
		{verify.FaultPgBouncerReconnect, `{"reconnected":true,"servers":2}`, false, 1, false, `{"reconnected":true,"servers":2,"closed":2,"new":1}`},
		{verify.FaultPgBouncerReconnect, `{"reconnected":true,"servers":0}`, false, 0, false, `{"reconnected":true,"servers":0,"closed":0,"new":1}`},
		// Relay kinds: held or failed requests (stall, partition), slow
		// ones (latency) corroborate them.
		{verify.FaultStall, `{"stalled":2}`, true, 1, true, ""},
		{verify.FaultStall, `{"stalled":2}`, false, 0, true, ""},
		{verify.FaultPartition, `{"held":3,"in_flight":0,"requests":5}`, true, 1, true, ""},
		{verify.FaultPartition, `{"held":3,"refused":5}`, true, 0, true, ""}, // idle connections held: no request
		{verify.FaultPartition, `{"held":0,"in_flight":0,"requests":0}`, true, 0, true, ""},
		{verify.FaultLatency, `{"delay_ms":50,"delayed":9}`, false, 0, true, ""}, // no op was slowed
		{"future-kind", `{"whatever":1}`, false, 1, false, ""},                   // the writer's own reading
		// What only the end of a fault shows is in its heal line.
		{verify.FaultShardCrash, `{"old_pid":10}`, true, 1, true, `{"old_pid":10,"new_pid":11,"recovery":["automatic recovery in progress"]}`},
		{verify.FaultShardCrash, `{"old_pid":10}`, true, 0, true, `{"old_pid":10,"new_pid":10,"recovery":["automatic recovery in progress"]}`},
		{verify.FaultBackendKill, `{"pid":12,"state":"active"}`, true, 1, true, `{"pid":12,"recovery":["(PID 12) was terminated by signal 9"]}`},
		{verify.FaultStall, `{"conns":3}`, true, 1, true, `{"stalled":3}`},
		{verify.FaultStall, `{"conns":3}`, true, 0, true, `{"stalled":0}`},
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
				e := errOp
				if c.kind == verify.FaultReset { // in flight at the instant of the reset
					e = strings.Replace(e, `"t0":4000000`, `"t0":2900000`, 1)
				}
				ls = append(ls, e)
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

// lostAckEvidence is a lost-ack's heal evidence with one dropped reply,
// sent at the sim's now and complete 1 ms later (the next op's span).
func lostAckEvidence(s *sim, committed, errored bool) obj {
	at := s.start.Add(time.Duration(s.now))
	r := obj{{"conn", 7}, {"sent", at.Format(time.RFC3339Nano)}, {"at", at.Add(time.Millisecond).Format(time.RFC3339Nano)},
		{"bytes", 60}, {"error", errored}, {"committed", committed}, {"status", "I"}}
	if errored {
		r = append(r, kv{"sqlstate", "40001"})
	}
	return obj{{"via", "shard"}, {"dropped", 1}, {"replies", []obj{r}}, {"passed", 0}}
}

// simVerdict checks a finished sim.
func simVerdict(t *testing.T, s *sim, o verify.Options) *verify.Verdict {
	t.Helper()
	h, err := verify.ReadHistory(bytes.NewReader(encodeLines(s.historyLines())))
	if err != nil {
		t.Fatal(err)
	}
	return verify.Check(context.Background(), h, s.state(), o)
}

func landedOf(v *verify.Verdict, kind string) int {
	for _, f := range v.Faults {
		if f.Kind == kind {
			return f.Landed
		}
	}
	return -1
}

// TestLostAckLanding: a lost-ack lands only when it dropped the reply of
// a commit that committed, and that very commit is an unknown outcome in
// the history resolved present. Dropping a conflict's or an error's reply
// (which the client then sees fail) proves nothing about lost acks.
func TestLostAckLanding(t *testing.T) {
	cases := []struct {
		name               string
		committed, errored bool
		op                 mode
		legacy             bool // the old evidence: a bare count
		want               int
	}{
		{"committed reply dropped, op unknown and present", true, false, mInfoApplied, false, 1},
		{"only a lost compare-and-swap's reply dropped", false, false, mInfoApplied, false, 0},
		{"only an error reply dropped", false, true, mInfoApplied, false, 0},
		{"committed reply dropped, but the op resolved absent", true, false, mInfoLost, false, 0},
		{"committed reply dropped, but the op was acknowledged", true, false, mOK, false, 0},
		{"a bare count of dropped replies", true, false, mInfoApplied, true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSim()
			sc := baseScenario(s, nil)
			ev := lostAckEvidence(s, c.committed, c.errored)
			if c.legacy {
				ev = obj{{"dropped", 1}}
			}
			s.fault("f1", verify.FaultLostAck, "shard1", true, ev)
			s.step("w1", sc.B, spec{}, c.op)
			s.heal("f1", verify.FaultLostAck, "shard1")
			s.finish(true)
			v := simVerdict(t, s, verify.Options{})
			if got := landedOf(v, verify.FaultLostAck); got != c.want {
				var b strings.Builder
				_ = v.WriteText(&b)
				t.Fatalf("lost-ack landed %d, want %d\n%s", got, c.want, b.String())
			}
			if want := map[bool]verify.Result{true: verify.Pass, false: verify.Vacuous}[c.want == 1]; v.Result != want {
				t.Errorf("result %s, want %s: %v", v.Result, want, v.Reasons)
			}
		})
	}
}

// TestCorroborationOwnWindow: an op's error is counted for one fault
// only — the one whose window it falls in — never for an overlapping
// fault on the same shard; an op inside two faults' windows proper counts
// for neither.
func TestCorroborationOwnWindow(t *testing.T) {
	term := obj{{"terminated", []obj{{{"pid", 4711}, {"state", "active"}}}}}
	kill := obj{{"old_pid", 100}, {"new_pid", 200}}
	t.Run("each its own", func(t *testing.T) {
		s := newSim()
		sc := baseScenario(s, nil)
		s.fault("f1", verify.FaultTerminate, "shard0", true, term)
		s.errOp("w0", sc.A, "57P01")
		s.heal("f1", verify.FaultTerminate, "shard0")
		s.fault("f2", verify.FaultPgBouncerKill, "shard0", true, kill)
		s.errOp("w0", sc.A, "08006")
		s.heal("f2", verify.FaultPgBouncerKill, "shard0")
		s.finish(true)
		v := simVerdict(t, s, verify.Options{})
		if landedOf(v, verify.FaultTerminate) != 1 || landedOf(v, verify.FaultPgBouncerKill) != 1 {
			t.Fatalf("%+v", v.Faults)
		}
	})
	t.Run("one error for two faults", func(t *testing.T) {
		s := newSim()
		sc := baseScenario(s, nil)
		s.fault("f1", verify.FaultTerminate, "shard0", true, term)
		s.fault("f2", verify.FaultPgBouncerKill, "shard0", true, kill)
		s.errOp("w0", sc.A, "57P01") // inside both windows: whose?
		s.heal("f1", verify.FaultTerminate, "shard0")
		s.heal("f2", verify.FaultPgBouncerKill, "shard0")
		s.finish(true)
		v := simVerdict(t, s, verify.Options{})
		if landedOf(v, verify.FaultTerminate) != 0 || landedOf(v, verify.FaultPgBouncerKill) != 0 || v.Result != verify.Vacuous {
			t.Fatalf("%s %+v", v.Result, v.Faults)
		}
	})
	t.Run("latency needs a slowed op", func(t *testing.T) {
		s := newSim()
		sc := baseScenario(s, nil)
		// The sim's ops take 1 ms: a 0.4 ms delay each way slows them
		// enough to show.
		s.fault("f1", verify.FaultLatency, "shard1", true, obj{{"delay_ms", 0.4}, {"delayed", 12}})
		s.step("w1", sc.B, spec{}, mOK)
		s.heal("f1", verify.FaultLatency, "shard1")
		s.fault("f2", verify.FaultLatency, "shard1", true, obj{{"delay_ms", 5}, {"delayed", 12}})
		s.step("w1", sc.B, spec{}, mOK)
		s.heal("f2", verify.FaultLatency, "shard1")
		s.finish(true)
		v := simVerdict(t, s, verify.Options{MinLandedShare: -1})
		if landedOf(v, verify.FaultLatency) != 1 {
			t.Fatalf("%+v", v.Faults)
		}
	})
}

// TestRecovery measures availability under faults on a synthetic history:
// 100 ok ops/s on shard0 for 5 s before the first fault (the baseline); a
// fault whose heal is followed by 550 ms without ok ops; one overlapped by
// a second fault before it recovers; one after which the rate stays at
// half; one healed too close to the end of the load to be measured.
func TestRecovery(t *testing.T) {
	const ms = int64(time.Millisecond)
	ls := []string{hdr, setupOp}
	n := 0
	okOp := func(t1 int64) {
		n++
		ls = append(ls, fmt.Sprintf(`{"type":"op","id":"r1/w0/%d","kind":"load","src":"w0","exe":"e1","shard":"shard0","t0":%d,"t1":%d,"outcome":"ok","cause":"worker","exists":true,"version":1,"writer":"r1/setup/1","processed":false}`, n, t1-ms, t1))
	}
	fault := func(id, shard string, at, heal int64) {
		ls = append(ls,
			fmt.Sprintf(`{"type":"fault","id":"%s","kind":"terminate","phase":"inject","t":%d,"shard":"%s","landed":true,"evidence":{"terminated":1}}`, id, at, shard),
			fmt.Sprintf(`{"type":"fault","id":"%s","kind":"terminate","phase":"heal","t":%d,"shard":"%s"}`, id, heal, shard))
	}
	// ok ops every 10 ms, none in the gaps, every 20 ms from 25 s on.
	gaps := [][2]int64{{5000 * ms, 6550 * ms}, {10000 * ms, 13550 * ms}, {18000 * ms, 25000 * ms}}
	for t1 := 10 * ms; t1 <= 30000*ms; t1 += 10 * ms {
		in := t1 >= 25000*ms && t1%(20*ms) != 0
		for _, g := range gaps {
			in = in || (t1 >= g[0] && t1 < g[1])
		}
		if !in {
			okOp(t1)
		}
	}
	fault("f1", "shard0", 5000*ms, 6000*ms)   // ok ops again 550 ms after its heal
	fault("f2", "shard0", 10000*ms, 10500*ms) // f3 comes before it recovers
	fault("f3", "shard0", 11000*ms, 11200*ms) // ok ops again at 13.55 s
	fault("f4", "shard0", 18000*ms, 18100*ms) // never back above half
	fault("f5", "shard1", 29000*ms, 29100*ms) // 0.9 s before the load ends (another shard: no overlap)
	ls = append(ls, `{"type":"end","t":31000000000,"ended_at":"2026-12-01T10:00:31Z","ops":1,"interrupted":false,"quiesce":{"ok":true,"ms":1}}`)
	h, err := verify.ReadHistory(strings.NewReader(lines(ls...)))
	if err != nil {
		t.Fatal(err)
	}
	v := verify.Check(context.Background(), h, emptyState(h), verify.Options{})
	rc := v.Recovery
	if rc == nil || rc.Note != "" {
		t.Fatalf("recovery %+v", rc)
	}
	// 5 s before the first fault at 100 ok ops/s (the first at 10 ms).
	if rc.BaselineOKPerS < 99 || rc.BaselineOKPerS > 101 || !strings.Contains(rc.BaselineFrom, "before the first fault") {
		t.Errorf("baseline %.1f from %q, want 100 before the first fault", rc.BaselineOKPerS, rc.BaselineFrom)
	}
	got := map[string]verify.FaultRecovery{}
	for _, f := range rc.Faults {
		got[f.ID] = f
	}
	// f1: ok ops again from 6.55 s; the rate over [t, t+1 s) is 75/s at
	// t = 6.3 s and 85/s at 6.4 s, 100/s a second later: recovered 400 ms
	// after the heal.
	if f := got["f1"]; !f.Recovered || f.Overlapped != "" || f.RecoveryMS != 400 {
		t.Errorf("f1 %+v, want recovered 400 ms after its heal", f)
	}
	if f := got["f2"]; f.Overlapped != "f3" {
		t.Errorf("f2 %+v, want overlapped by f3", f)
	}
	if f := got["f3"]; !f.Recovered || f.RecoveryMS != 2200 {
		t.Errorf("f3 %+v, want recovered 2200 ms after its heal (at 13.4 s)", f)
	}
	if f := got["f4"]; f.Recovered || f.Overlapped != "" || f.Unmeasurable {
		t.Errorf("f4 %+v, want not recovered within the run", f)
	}
	if f := got["f5"]; !f.Unmeasurable {
		t.Errorf("f5 %+v, want too late to measure", f)
	}
	if len(rc.Kinds) != 1 {
		t.Fatalf("kinds %+v", rc.Kinds)
	}
	k := rc.Kinds[0]
	if k.Faults != 5 || k.Measured != 2 || k.Overlapped != 1 || k.NotRecovered != 1 || k.Unmeasurable != 1 || k.P50MS != 400 || k.MaxMS != 2200 {
		t.Errorf("kind %+v", k)
	}
	var b strings.Builder
	_ = v.WriteText(&b)
	for _, want := range []string{"availability under faults", "fault-free rate: 100 ok ops/s", "not recovered within the run", "f4 terminate shard0"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

// TestScheduleCut: a run extended until its goal plans faults up to its
// ceiling and cuts the schedule where the goal was met; planned faults at
// or after the cut were never due and are not "scheduled" (nor vacuous),
// while one before the cut that never ran still counts.
func TestScheduleCut(t *testing.T) {
	s := newSim()
	sc := baseScenario(s, nil)
	s.fault("f1", verify.FaultTerminate, "shard1", true, obj{{"terminated", 1}})
	s.errOp("w1", sc.B, "57P01")
	s.heal("f1", verify.FaultTerminate, "shard1")
	cut := s.now/1e6 + 1
	// Planned after the cut: never injected.
	s.schedule = append(s.schedule, obj{{"id", "f2"}, {"kind", verify.FaultTerminate}, {"shard", "shard0"}, {"at_ms", cut + 100}, {"hold_ms", 5}},
		obj{{"id", "f3"}, {"kind", verify.FaultShardCrash}, {"shard", "shard0"}, {"at_ms", cut + 200}, {"hold_ms", 5}})
	s.finish(true)
	*s.end = append(*s.end, kv{"schedule_cut_ms", cut})
	v := simVerdict(t, s, verify.Options{MinLanded: 1})
	for _, f := range v.Faults {
		if f.Kind == verify.FaultTerminate && f.Scheduled != 1 {
			t.Errorf("terminate scheduled %d, want 1 (one planned after the cut)", f.Scheduled)
		}
		if f.Kind == verify.FaultShardCrash && (f.Scheduled != 0 || f.Vacuous) {
			t.Errorf("shard-crash planned only after the cut: %+v", f)
		}
	}
	if v.Result != verify.Pass {
		t.Errorf("result %s, want PASS: %v", v.Result, v.Reasons)
	}
	// Without the cut, the never-injected shard-crash makes the run vacuous.
	*s.end = (*s.end)[:len(*s.end)-1]
	if v := simVerdict(t, s, verify.Options{MinLanded: 1}); v.Result != verify.Vacuous {
		t.Errorf("without the cut: result %s, want VACUOUS", v.Result)
	}
}

// TestNoLandingFloor: a measurement run (the scenario's min_landed 0,
// passed as a negative MinLanded) reports a kind that did not land
// without making the run vacuous; the zero value keeps the floor of 1.
// `make chaos`'s recovery scenario was VACUOUS on one terminate that
// found no busy session, though its min_landed is 0.
func TestNoLandingFloor(t *testing.T) {
	s := newSim()
	baseScenario(s, nil)
	// Injected, evidence shown, but no op failed with it: not landed.
	s.fault("f1", verify.FaultTerminate, "shard1", true, obj{{"terminated", 1}})
	s.heal("f1", verify.FaultTerminate, "shard1")
	s.finish(true)
	if v := simVerdict(t, s, verify.Options{}); v.Result != verify.Vacuous {
		t.Errorf("default floor: result %s, want VACUOUS: %v", v.Result, v.Reasons)
	}
	v := simVerdict(t, s, verify.Options{MinLanded: -1})
	if v.Result != verify.Pass || v.MinLanded != 0 {
		t.Errorf("no floor: result %s (min_landed %d), want PASS: %v", v.Result, v.MinLanded, v.Reasons)
	}
	for _, f := range v.Faults {
		if f.Kind == verify.FaultTerminate && (f.Landed != 0 || f.Vacuous || f.Injected != 1) {
			t.Errorf("terminate %+v: want injected 1, landed 0, reported and not vacuous", f)
		}
	}
}
