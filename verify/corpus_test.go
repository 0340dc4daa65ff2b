package verify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/verify"
)

var update = flag.Bool("update", false, "rewrite the generated regression corpus in testdata/corpus")

// want is a corpus case's expected verdict (want.json).
type want struct {
	// Note says what the case is.
	Note   string        `json:"note"`
	Result verify.Result `json:"result"`
	// Violated is the set of invariants with violations.
	Violated []string `json:"violated"`
	// Liveness: whether liveness failures are expected.
	Liveness bool `json:"liveness"`
	// Unknown, when set, are the expected counts of unknown outcomes.
	Unknown *unknownCounts `json:"unknown,omitempty"`
	// Landed, when set, are the expected landed counts per fault kind.
	Landed map[string]int `json:"landed,omitempty"`
	// Undecided, when set, are the expected undecided executions per
	// check skipped.
	Undecided map[string]int `json:"undecided,omitempty"`
}

type unknownCounts struct {
	Present    int `json:"resolved_present"`
	Absent     int `json:"resolved_absent"`
	Unresolved int `json:"unresolved"`
}

// scenario is a built sim with the ids the cases refer to.
type scenario struct {
	s       *sim
	A, B, C string
	// racedA is the conflicted first attempt of w1's racing step on A.
	racedA string
	// aFirst is w0's first step on A (it emits to B and arms t0).
	aFirst string
}

// baseScenario is the clean run every case starts from: three executions
// on two shards; steps with emits, timers (armed, fired, re-armed,
// cancelled), a spawn and a traced ring that wraps (trace_max 2); a
// conflict and its retry; a redelivery; the relay, the sweeper and the
// spawn relay; then a drained quiesce.
func baseScenario(s *sim, tweak func(sc *scenario)) *scenario {
	sc := &scenario{s: s, A: s.exeID("shard0", 0), B: s.exeID("shard1", 0), C: s.exeID("shard0", 1)}
	A, B, C := sc.A, sc.B, sc.C
	s.setup(A)
	s.setup(B)
	s.setup(C)
	sc.aFirst = s.step("w0", A, spec{emits: []string{B}, timers: []verify.TimerOp{{Path: "t0", FireAt: s.unix(100 * time.Millisecond)}}, trace: true}, mOK)[0]
	s.step("w1", B, spec{}, mOK)
	s.step("w0", C, spec{spawns: []string{"child-1"}, timers: []verify.TimerOp{{Path: "t1", FireAt: s.unix(time.Hour)}}, trace: true}, mOK)
	ids := s.stepRacing("w1", A, spec{trace: true}, func() { s.step("w0", A, spec{trace: true}, mOK) })
	sc.racedA = ids[0]
	s.redeliver("w0", A, "r1-w0-1")
	if tweak != nil {
		tweak(sc)
	}
	s.relay()
	s.now += int64(200 * time.Millisecond)
	s.sweep(s.unix(0), nil)
	s.step("w0", A, spec{timers: []verify.TimerOp{{Path: "t0", FireAt: s.unix(10 * time.Millisecond)}}}, mOK)
	s.step("w0", B, spec{timers: []verify.TimerOp{{Path: "t2", FireAt: s.unix(time.Hour)}}}, mOK)
	s.step("w1", B, spec{timers: []verify.TimerOp{{Path: "t2", Cancel: true}}, trace: true}, mOK)
	s.now += int64(50 * time.Millisecond)
	s.sweep(s.unix(0), nil)
	s.relay()
	return sc
}

// corpusCase builds one case: a scenario, then corruptions of the
// history lines or of the final state.
type corpusCase struct {
	name string
	want want
	// build runs the sim (baseScenario and finish by default).
	build func(s *sim) *scenario
	// mutate edits the history lines and the state.
	mutate func(sc *scenario, lines []obj, st *verify.State) []obj
	// opts are the Check options (MinLanded).
	minLanded int
}

func clean(s *sim) *scenario {
	sc := baseScenario(s, nil)
	s.finish(true)
	return sc
}

// pendingScenario leaves A's last emit undelivered: the quiesce did not
// drain it (ok=false unless drained is set).
func pendingScenario(drained bool) func(s *sim) *scenario {
	return func(s *sim) *scenario {
		sc := baseScenario(s, nil)
		s.step("w1", sc.C, spec{emits: []string{sc.A}}, mOK)
		s.finish(drained)
		return sc
	}
}

func withMutant(f func(m *mutants), tweak func(sc *scenario)) func(s *sim) *scenario {
	return func(s *sim) *scenario {
		f(&s.mut)
		sc := baseScenario(s, tweak)
		s.finish(true)
		return sc
	}
}

func fail(inv ...string) want { return want{Result: verify.Fail, Violated: inv} }

var corpusCases = []corpusCase{
	// ---- clean runs ----
	{name: "clean", want: want{Note: "a correct run with every kind of op, no faults", Result: verify.Pass,
		Unknown: &unknownCounts{}}},
	{name: "clean-info-resolved", want: want{Note: "unknown outcomes resolved from evidence: by a load, by the ledger (the reload failed), as the sole candidate for a version, by a held slot, beyond the final version",
		Result: verify.Pass, Unknown: &unknownCounts{Present: 3, Absent: 2}},
		build: func(s *sim) *scenario {
			sc := baseScenario(s, nil)
			D := s.exeID("shard1", 1)
			// committed, reply lost; the reload names it (load writer).
			s.step("w1", sc.B, spec{}, mInfoApplied)
			// sent, not committed; the retry takes its version.
			s.step("w0", sc.C, spec{}, mInfoLost)
			// committed; the reload failed, and so did the load of the
			// next step on C: only processed_events knows.
			s.step("w1", sc.C, spec{}, mInfoApplied)
			s.step("w0", sc.C, spec{}, mOK)
			// first save committed, reply lost, nothing else names it
			// but its version: the next step's load failed (edited).
			s.commit("setup", D, 0, spec{cause: verify.CauseSetup}, mInfoApplied)
			s.step("w0", D, spec{}, mOK)
			// a last step that was sent but not committed, and the
			// worker stopped: its version is beyond N.
			v, _ := s.load("w0", sc.A, "r1-w0-last", verify.CauseWorker)
			s.commit("w0", sc.A, v, spec{event: "r1-w0-last", input: "r1-w0-last", cause: verify.CauseWorker}, mInfoLost)
			s.finish(true)
			return sc
		},
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			// The reload after w1's unknown commit on C, and every load
			// that read its version, failed.
			for _, i := range loadsReading(lines, sc.C, "r1/w1/") {
				failLoad(lines[i])
			}
			D := sc.s.exeID("shard1", 1)
			for i, l := range lines {
				if l.get("kind") == "load" && l.get("exe") == D && l.get("writer") == "r1/setup/4" {
					failLoad(lines[i])
				}
			}
			return lines
		}},
	{name: "clean-unresolved", want: want{Note: "two unknown first saves of one execution, nothing tells which committed: unresolved, not a violation, but the execution is undecided (its version 1 is not checked): not a pass (before: PASS)",
		Result: verify.Vacuous, Unknown: &unknownCounts{Unresolved: 2}, Undecided: map[string]int{"cas": 1, "timers": 1, "trace": 1}},
		build: func(s *sim) *scenario {
			sc := baseScenario(s, nil)
			D := s.exeID("shard1", 1)
			s.commit("setup", D, 0, spec{cause: verify.CauseSetup}, mInfoLost)
			s.commit("setup", D, 0, spec{cause: verify.CauseSetup}, mInfoApplied)
			s.step("w0", D, spec{}, mOK)
			s.finish(true)
			return sc
		},
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			D := sc.s.exeID("shard1", 1)
			for i, l := range lines {
				if l.get("kind") == "load" && l.get("exe") == D && l.get("version") == 1 {
					failLoad(lines[i])
				}
			}
			return lines
		}},
	{name: "due-arming-vanished-rearmed", want: want{Note: "a due timer row deleted by no op, then re-armed: a complete due_timers read after it was due did not return it (before: PASS, only the last arming was checked)",
		Result: verify.Fail, Violated: []string{"timers"}},
		build: func(s *sim) *scenario {
			sc := baseScenario(s, nil)
			s.step("w0", sc.B, spec{timers: []verify.TimerOp{{Path: "t5", FireAt: s.unix(10 * time.Millisecond)}}}, mOK)
			s.now += int64(50 * time.Millisecond)
			delete(s.timers[sc.B], "t5") // the corruption: the row vanishes while due
			s.sweep(s.unix(0), nil)
			s.step("w1", sc.B, spec{timers: []verify.TimerOp{{Path: "t5", FireAt: s.unix(time.Hour)}}}, mOK)
			s.finish(true)
			return sc
		}},
	{name: "forged-ledger-under-unresolved", want: want{Note: "a processed_events row no commit wrote, recorded only by unresolved commits of an ambiguous version: undecided, not a pass (before: PASS, the tolerance accepted it)",
		Result: verify.Vacuous, Unknown: &unknownCounts{Unresolved: 3}, Undecided: map[string]int{"cas": 1, "dedupe": 1, "timers": 1, "trace": 1}},
		build: func(s *sim) *scenario {
			sc := baseScenario(s, nil)
			D := s.exeID("shard1", 1)
			s.commit("setup", D, 0, spec{cause: verify.CauseSetup, event: "r1-init-D", input: "r1-init-D"}, mInfoLost)
			s.commit("setup", D, 0, spec{cause: verify.CauseSetup, event: "r1-init-D", input: "r1-init-D"}, mInfoLost)
			s.commit("setup", D, 0, spec{cause: verify.CauseSetup}, mInfoApplied)
			s.step("w0", D, spec{}, mOK)
			s.finish(true)
			return sc
		},
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			D := sc.s.exeID("shard1", 1)
			for i, l := range lines {
				if l.get("kind") == "load" && l.get("exe") == D && l.get("version") == 1 {
					failLoad(lines[i])
				}
			}
			ss, _ := exeRow(st, D)
			ss.Processed = append(ss.Processed, verify.ProcessedRow{ExecutionID: D, EventID: "r1-init-D", Bucket: sc.s.mp.Bucket(D)})
			return lines
		}},
	{name: "faults-landed", want: want{Note: "faults whose evidence and ops show they landed", Result: verify.Pass,
		Landed: map[string]int{"terminate": 1, "lost-ack": 1, "pgbouncer-kill": 1, "latency": 1}},
		build: func(s *sim) *scenario {
			sc := baseScenario(s, nil)
			s.fault("f1", verify.FaultTerminate, "shard0", true, obj{{"terminated", []obj{{{"pid", 4711}, {"state", "idle in transaction"}}}}})
			s.errOp("w0", sc.A, "57P01")
			s.heal("f1", verify.FaultTerminate, "shard0")
			s.fault("f2", verify.FaultLostAck, "shard1", true, lostAckEvidence(s, true, false))
			s.step("w1", sc.B, spec{}, mInfoApplied)
			s.heal("f2", verify.FaultLostAck, "shard1")
			s.fault("f3", verify.FaultPgBouncerKill, "shard0", true, obj{{"old_pid", 100}, {"new_pid", 200}})
			s.errOp("w0", sc.C, "")
			s.heal("f3", verify.FaultPgBouncerKill, "shard0")
			s.fault("f4", verify.FaultLatency, "shard1", true, obj{{"delay_ms", 0.4}, {"delayed", 12}}) // the sim's ops take 1 ms
			s.step("w1", sc.B, spec{}, mOK)
			s.heal("f4", verify.FaultLatency, "shard1")
			s.finish(true)
			return sc
		}},
	{name: "vacuous", want: want{Note: "a scheduled pgbouncer-kill whose pid did not change and a terminate that found no backend: the run proves nothing about them",
		Result: verify.Vacuous, Landed: map[string]int{"terminate": 0, "pgbouncer-kill": 0}},
		build: func(s *sim) *scenario {
			sc := baseScenario(s, nil)
			s.fault("f1", verify.FaultPgBouncerKill, "shard0", true, obj{{"old_pid", 100}, {"new_pid", 100}})
			s.errOp("w0", sc.A, "")
			s.heal("f1", verify.FaultPgBouncerKill, "shard0")
			s.fault("f2", verify.FaultTerminate, "shard1", false, obj{{"terminated", []obj{}}})
			s.heal("f2", verify.FaultTerminate, "shard1")
			s.finish(true)
			return sc
		}},
	{name: "vacuous-uncorroborated", want: want{Note: "a terminate whose evidence says it killed a backend, but no op on that shard saw an error in its window",
		Result: verify.Vacuous, Landed: map[string]int{"terminate": 0}},
		build: func(s *sim) *scenario {
			sc := baseScenario(s, nil)
			s.fault("f1", verify.FaultTerminate, "shard1", true, obj{{"terminated", []obj{{{"pid", 4711}, {"state", "active"}}}}})
			s.step("w1", sc.B, spec{}, mOK)
			s.heal("f1", verify.FaultTerminate, "shard1")
			s.now += int64(10 * time.Second)
			s.errOp("w0", sc.B, "57P01") // too late to be this fault's
			s.finish(true)
			return sc
		}},
	{name: "truncated", want: want{Note: "the run died: no end line", Result: verify.Error},
		build: func(s *sim) *scenario { return baseScenario(s, nil) }},
	{name: "pending-after-drain", want: want{Note: "an emit left pending although the quiesce says it drained everything",
		Result: verify.Fail, Liveness: true}, build: pendingScenario(true)},
	{name: "quiesce-timeout", want: want{Note: "the quiesce ran out of time with an emit pending: not proven, an error",
		Result: verify.Error, Liveness: true}, build: pendingScenario(false)},
	{name: "timer-never-fired", want: want{Note: "a timer due seconds before the end never fired, although the quiesce says it drained everything",
		Result: verify.Fail, Liveness: true},
		build: func(s *sim) *scenario {
			sc := baseScenario(s, nil)
			s.step("w0", sc.C, spec{timers: []verify.TimerOp{{Path: "t5", FireAt: s.unix(10 * time.Millisecond)}}}, mOK)
			s.now += int64(3 * time.Second)
			s.finish(true)
			return sc
		}},
	{name: "map-mismatch", want: want{Note: "the history was routed by another map than the one dumped", Result: verify.Error},
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			st.Map.Shards[0].Ranges[0][1]--
			st.Map.Shards[1].Ranges[0][0]--
			return lines
		}},

	// ---- CAS: corruptions of executions ----
	{name: "exec-row-deleted", want: fail("cas"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss, i := exeRow(st, sc.B)
		ss.Executions = slices.Delete(ss.Executions, i, i+1)
		return lines
	}},
	{name: "version-bumped", want: fail("cas"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss, i := exeRow(st, sc.B)
		ss.Executions[i].Version++
		return lines
	}},
	{name: "version-huge", want: fail("cas"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss, i := exeRow(st, sc.B)
		ss.Executions[i].Version = 2147483647
		return lines
	}},
	{name: "history-exp-huge", want: fail("cas", "dedupe", "linearizability"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		// A corrupt history line: an acknowledged commit at an absurd
		// version. It must be reported, not allocate by version.
		sc.s.now += int64(time.Millisecond)
		return append(lines, obj{{"type", "op"}, {"id", "r1/w1/901"}, {"kind", "commit"}, {"src", "w1"}, {"exe", sc.C}, {"shard", "shard0"},
			{"t0", sc.s.now - 1000}, {"t1", sc.s.now}, {"outcome", "ok"}, {"exp", 1 << 50}, {"new", 1<<50 + 1},
			{"event", "r1-w1-901"}, {"input", "r1-w1-901"}, {"cause", "worker"}, {"fast", true}})
	}},
	{name: "version-bumped-consistently", want: fail("cas"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss, i := exeRow(st, sc.B)
		ss.Executions[i].Version++
		editData(st, sc.B, func(d map[string]any) {
			d["version"] = d["version"].(float64) + 1
			c := d["context"].(map[string]any)
			c["step"] = c["step"].(float64) + 1
		})
		return lines
	}},
	{name: "context-op-other", want: fail("cas"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		editContext(st, sc.A, func(c map[string]any) { c["op"] = sc.aFirst })
		return lines
	}},
	{name: "context-op-unknown", want: fail("cas"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		editContext(st, sc.A, func(c map[string]any) { c["op"] = "r1/w9/99" })
		return lines
	}},
	{name: "context-op-failed", want: fail("cas"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		editContext(st, sc.A, func(c map[string]any) { c["op"] = sc.racedA })
		return lines
	}},
	{name: "data-id-edited", want: fail("cas"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		editData(st, sc.C, func(d map[string]any) { d["id"] = sc.A })
		return lines
	}},
	{name: "context-last-edited", want: fail("cas"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		editContext(st, sc.C, func(c map[string]any) { c["last"] = "r1-w0-1" })
		return lines
	}},
	{name: "context-step-edited", want: fail("cas"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		editContext(st, sc.C, func(c map[string]any) { c["step"] = 0 })
		return lines
	}},
	// ---- content rewritten in place (history version 2 digests) ----
	{name: "content-data-payload-rewritten", want: want{Note: "executions.data: the padding rewritten, identity intact (before: PASS)", Result: verify.Fail, Violated: []string{"cas"}},
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			editContext(st, sc.C, func(c map[string]any) { c["payload"] = "yy" })
			return lines
		}},
	{name: "content-data-member-added", want: want{Note: "executions.data: a member the writer never wrote, in the context and at the top (before: PASS)", Result: verify.Fail, Violated: []string{"cas"}},
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			editContext(st, sc.A, func(c map[string]any) { c["note"] = "edited" })
			editData(st, sc.B, func(d map[string]any) { d["owner"] = "ops" })
			return lines
		}},
	{name: "content-load-rewritten", want: want{Note: "a load returned a state its writer never wrote (the load's digest differs from its writer's)", Result: verify.Fail, Violated: []string{"cas"}},
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			i := findOp(lines, "kind", "load", "exe", sc.A, "version", 2)
			lines[i].set("data_digest", mustDigest([]byte(`{"active":"a","step":1}`)))
			return lines
		}},
	{name: "content-trace-entry-rewritten", want: want{Note: "trace.entry: the event rewritten, op and step intact (before: PASS)", Result: verify.Fail, Violated: []string{"trace"}},
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			ss, _ := exeRow(st, sc.A)
			i := slices.IndexFunc(ss.Trace, func(r verify.TraceRow) bool { return r.ExecutionID == sc.A })
			var d map[string]any
			_ = json.Unmarshal([]byte(ss.Trace[i].Entry), &d)
			d["event"] = "r1-forged"
			b, _ := json.Marshal(d)
			ss.Trace[i].Entry = verify.Doc(b)
			return lines
		}},
	{name: "content-outbox-event-rewritten", want: want{Note: "outbox.event of a pending row: the name rewritten, id/from/op intact (before: ERROR for the pending row only)", Result: verify.Fail, Violated: []string{"outbox"}, Liveness: true},
		build: pendingScenario(false),
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			for _, ss := range st.Shards {
				for i, r := range ss.Outbox {
					var d map[string]any
					_ = json.Unmarshal([]byte(r.Event), &d)
					d["name"] = "pong"
					b, _ := json.Marshal(d)
					ss.Outbox[i].Event = verify.Doc(b)
				}
			}
			return lines
		}},
	{name: "content-outbox-delivery-rewritten", want: want{Note: "the relay read an outbox event whose body is not what its emitter wrote", Result: verify.Fail, Violated: []string{"outbox"}},
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			i := findOp(lines, "kind", "commit", "cause", "outbox")
			lines[i].set("body_digest", mustDigest([]byte(`{"id":"x","name":"pong"}`)))
			return lines
		}},
	{name: "content-spawn-rewritten", want: want{Note: "spawns: root_path and context rewritten, op intact (before: ERROR for the pending row only)", Result: verify.Fail, Violated: []string{"spawns"}, Liveness: true},
		build: func(s *sim) *scenario {
			sc := baseScenario(s, nil)
			s.step("w0", sc.C, spec{spawns: []string{"child-2", "child-3"}}, mOK)
			s.finish(false)
			return sc
		},
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			ss, _ := exeRow(st, sc.C)
			ss.Spawns[0].RootPath = "elsewhere"
			var d map[string]any
			_ = json.Unmarshal([]byte(ss.Spawns[1].Context), &d)
			d["extra"] = true
			b, _ := json.Marshal(d)
			ss.Spawns[1].Context = verify.Doc(b)
			return lines
		}},
	{name: "data-not-json", want: fail("cas"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss, i := exeRow(st, sc.C)
		ss.Executions[i].Data = "{truncated"
		return lines
	}},
	{name: "row-rolled-back", want: fail("cas", "timers"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		// A's row as it was before its last commit (the second timer
		// fire): an acknowledged commit undone in the database.
		last := lastOp(lines, "kind", "commit", "exe", sc.A, "outcome", "ok")
		prev := lastOp(lines[:last], "kind", "commit", "exe", sc.A, "outcome", "ok")
		ss, i := exeRow(st, sc.A)
		ss.Executions[i].Version--
		editData(st, sc.A, func(d map[string]any) {
			d["version"] = d["version"].(float64) - 1
			c := d["context"].(map[string]any)
			c["step"] = c["step"].(float64) - 1
			c["op"] = lines[prev].get("id")
			c["last"] = lines[prev].get("event")
			c["timers"] = map[string]any{"t0": lines[last].get("fire_at")}
		})
		return lines
	}},
	{name: "exec-row-inserted", want: fail("cas"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		id := sc.s.exeID("shard1", 3)
		d, _ := json.Marshal(map[string]any{"id": id, "definition_id": "chaos", "version": 1,
			"context": map[string]any{"step": 0, "op": sc.aFirst}})
		ss := shardNamed(st, "shard1")
		ss.Executions = append(ss.Executions, verify.ExecutionRow{ID: id, DefinitionID: "chaos", Version: 1, Data: verify.Doc(d), Bucket: sc.s.mp.Bucket(id)})
		return lines
	}},
	{name: "acked-commit-lost", want: fail("cas", "dedupe"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		// The history says a commit of C was acknowledged; the database
		// does not have it.
		ss, i := exeRow(st, sc.C)
		v := ss.Executions[i].Version
		sc.s.now += int64(time.Millisecond)
		return append(lines, obj{{"type", "op"}, {"id", "r1/w1/900"}, {"kind", "commit"}, {"src", "w1"}, {"exe", sc.C}, {"shard", "shard0"},
			{"t0", sc.s.now - 1000}, {"t1", sc.s.now}, {"outcome", "ok"}, {"exp", v}, {"new", v + 1},
			{"event", "r1-w1-900"}, {"input", "r1-w1-900"}, {"cause", "worker"}, {"fast", true}})
	}},

	// ---- linearizability ----
	{name: "stale-read", want: fail("linearizability"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		// After everything, a load of A returns version 1.
		sc.s.now += int64(time.Millisecond)
		return append(lines, obj{{"type", "op"}, {"id", "r1/w0/900"}, {"kind", "load"}, {"src", "w0"}, {"exe", sc.A}, {"shard", "shard0"},
			{"t0", sc.s.now - 1000}, {"t1", sc.s.now}, {"outcome", "ok"}, {"event", ""}, {"cause", "worker"},
			{"exists", true}, {"version", 1}, {"writer", "r1/setup/1"}, {"processed", false}})
	}},
	{name: "conflict-at-expected-version", want: fail("linearizability"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		i := findOp(lines, "id", sc.racedA)
		lines[i].set("found", lines[i].get("exp"))
		return lines
	}},

	// ---- outbox ----
	{name: "outbox-row-inserted", want: fail("outbox"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss := shardNamed(st, "shard0")
		ev, _ := json.Marshal(map[string]any{"id": "r1-w0-1-e7", "name": "ping", "from": sc.A, "op": sc.aFirst})
		t := sc.B
		ss.Outbox = append(ss.Outbox, verify.OutboxRow{Seq: 1 + 1024*40, TargetID: &t, Event: verify.Doc(ev), Bucket: sc.s.mp.Bucket(sc.A)})
		return lines
	}},
	{name: "outbox-row-of-failed-commit", want: want{Result: verify.Fail, Violated: []string{"cas", "outbox"}},
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			ss := shardNamed(st, "shard0")
			ev, _ := json.Marshal(map[string]any{"id": "r1-w1-2-e0", "name": "ping", "from": sc.A, "op": sc.racedA})
			t := sc.B
			ss.Outbox = append(ss.Outbox, verify.OutboxRow{Seq: 1 + 1024*40, TargetID: &t, Event: verify.Doc(ev), Bucket: sc.s.mp.Bucket(sc.A)})
			return lines
		}},
	{name: "outbox-row-duplicated", want: want{Result: verify.Fail, Violated: []string{"outbox"}, Liveness: true}, build: pendingScenario(false),
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			ss := shardNamed(st, "shard0")
			r := ss.Outbox[len(ss.Outbox)-1]
			r.Seq += 1024
			ss.Outbox = append(ss.Outbox, r)
			return lines
		}},
	{name: "outbox-row-deleted-undelivered", want: fail("outbox"), build: pendingScenario(true),
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			ss := shardNamed(st, "shard0")
			ss.Outbox = ss.Outbox[:len(ss.Outbox)-1]
			return lines
		}},
	{name: "mutant-outbox-outside-tx", want: want{Note: "a commit that lost its CAS still wrote its outbox row, which was delivered", Result: verify.Fail, Violated: []string{"cas", "outbox"}},
		build: withMutant(func(m *mutants) { m.outboxOutsideTx = true }, func(sc *scenario) {
			sc.s.stepRacing("w1", sc.C, spec{emits: []string{sc.B}}, func() { sc.s.step("w0", sc.C, spec{}, mOK) })
		})},
	{name: "mutant-ack-before-deliver", want: want{Note: "the relay acks a row before delivering it, and the delivery fails", Result: verify.Fail, Violated: []string{"outbox"}},
		build: withMutant(func(m *mutants) { m.ackBeforeApply = true }, nil)},

	// ---- dedupe ----
	{name: "processed-row-deleted", want: fail("dedupe"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss := shardNamed(st, "shard1")
		for i, r := range ss.Processed {
			if r.ExecutionID == sc.B && r.EventID == "r1-w1-1" {
				ss.Processed = slices.Delete(ss.Processed, i, i+1)
				return lines
			}
		}
		panic("no row")
	}},
	{name: "info-present-partly", want: want{Note: "an unknown-outcome commit resolved present (the reload read its version) lacks its ledger row: not wholly present",
		Result: verify.Fail, Violated: []string{"dedupe"}},
		build: func(s *sim) *scenario {
			sc := baseScenario(s, nil)
			s.step("w1", sc.B, spec{}, mInfoApplied)
			s.step("w0", sc.B, spec{}, mOK)
			s.finish(true)
			return sc
		},
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			i := lastOp(lines, "kind", "commit", "exe", sc.B, "outcome", "info")
			ev := lines[i].get("event").(string)
			ss := shardNamed(st, "shard1")
			ss.Processed = slices.DeleteFunc(ss.Processed, func(r verify.ProcessedRow) bool { return r.EventID == ev })
			return lines
		}},
	{name: "processed-row-inserted", want: fail("dedupe"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss := shardNamed(st, "shard1")
		ss.Processed = append(ss.Processed, verify.ProcessedRow{ExecutionID: sc.B, EventID: "r1-w9-1", Bucket: sc.s.mp.Bucket(sc.B)})
		return lines
	}},
	{name: "mutant-dedupe-outside-tx", want: want{Note: "a commit that was sent but failed still recorded its event: the client's reload believes it applied",
		Result: verify.Fail, Violated: []string{"dedupe"}},
		build: withMutant(func(m *mutants) { m.dedupeOutsideTx = true }, func(sc *scenario) { sc.s.step("w1", sc.C, spec{}, mInfoLost) })},
	{name: "mutant-new-event-retry", want: want{Note: "after an unknown outcome the client retries under a new event id: the input is applied twice",
		Result: verify.Fail, Violated: []string{"dedupe"}},
		build: withMutant(func(m *mutants) { m.newEventRetry = true }, func(sc *scenario) { sc.s.step("w1", sc.C, spec{}, mInfoApplied) })},
	{name: "redeliver-not-processed", want: fail("dedupe"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		i := findOp(lines, "kind", "load", "cause", "redeliver")
		lines[i].set("processed", false)
		return lines
	}},

	// ---- timers ----
	{name: "timer-row-deleted", want: fail("timers"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss := shardNamed(st, "shard0")
		ss.Timers = slices.DeleteFunc(ss.Timers, func(r verify.TimerRow) bool { return r.ExecutionID == sc.C })
		return lines
	}},
	{name: "timer-row-fire-at-edited", want: fail("timers"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss := shardNamed(st, "shard0")
		for i := range ss.Timers {
			if ss.Timers[i].ExecutionID == sc.C {
				ss.Timers[i].FireAt -= 3600
			}
		}
		return lines
	}},
	{name: "timer-row-inserted", want: fail("timers"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss := shardNamed(st, "shard0")
		ss.Timers = append(ss.Timers, verify.TimerRow{ExecutionID: sc.A, Path: "t9", FireAt: 1.8e9, Bucket: sc.s.mp.Bucket(sc.A)})
		return lines
	}},
	{name: "context-timers-edited", want: fail("cas", "timers"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		editContext(st, sc.C, func(c map[string]any) { c["timers"] = map[string]any{"t1": 1.5e9} })
		return lines
	}},
	{name: "mutant-cancel-not-deleting", want: want{Note: "a cancel disarms the state but leaves the timers row", Result: verify.Fail, Violated: []string{"timers"}},
		build: withMutant(func(m *mutants) { m.cancelNoDelete = true }, nil)},
	{name: "mutant-stale-delete", want: want{Note: "delete_timer ignores fire_at: a stale sweep removes a re-armed timer", Result: verify.Fail, Violated: []string{"timers"}},
		build: func(s *sim) *scenario {
			s.mut.staleDelete = true
			sc := baseScenario(s, nil)
			// A arms t3 due now; the sweeper reads it; A re-arms t3 an
			// hour later; the stale fire changes nothing, the delete
			// removes the re-armed row.
			s.step("w0", sc.A, spec{timers: []verify.TimerOp{{Path: "t3", FireAt: s.unix(0)}}}, mOK)
			s.now += int64(time.Millisecond)
			s.sweep(s.unix(0), func() {
				s.step("w1", sc.A, spec{timers: []verify.TimerOp{{Path: "t3", FireAt: s.unix(time.Hour)}}}, mOK)
			})
			s.finish(true)
			return sc
		}},
	{name: "due-read-superseded", want: fail("timers"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		// After B's t2 was cancelled, a sweep is told t2 is due.
		i := lastOp(lines, "kind", "commit", "exe", sc.B, "outcome", "ok")
		arm := lastOp(lines[:i], "kind", "commit", "exe", sc.B, "outcome", "ok")
		at := lines[arm].get("timers").([]obj)[0].get("fire_at")
		sc.s.now += int64(time.Millisecond)
		return append(lines, obj{{"type", "op"}, {"id", "r1/sweeper/900"}, {"kind", "due_timers"}, {"src", "sweeper"}, {"exe", ""}, {"shard", ""},
			{"t0", sc.s.now - 1000}, {"t1", sc.s.now}, {"outcome", "ok"}, {"now", at},
			{"timers", []obj{{{"exe", sc.B}, {"path", "t2"}, {"fire_at", at}}}}})
	}},

	// ---- spawns ----
	{name: "spawn-never-acked-row-gone", want: fail("spawns"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		i := findOp(lines, "kind", "ack_spawn")
		return slices.Delete(lines, i, i+1)
	}},
	{name: "spawn-row-inserted", want: fail("spawns"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		i := findOp(lines, "kind", "commit", "exe", sc.C, "cause", "worker")
		c, _ := json.Marshal(map[string]any{"op": lines[i].get("id")})
		ss := shardNamed(st, "shard0")
		ss.Spawns = append(ss.Spawns, verify.SpawnRow{Seq: 1 + 1024*50, ParentID: sc.C, ChildID: "child-9", RootPath: "child", Context: verify.Doc(c), Bucket: sc.s.mp.Bucket(sc.C)})
		return lines
	}},
	{name: "spawn-row-of-failed-commit", want: fail("cas", "spawns"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		c, _ := json.Marshal(map[string]any{"op": sc.racedA})
		ss := shardNamed(st, "shard0")
		ss.Spawns = append(ss.Spawns, verify.SpawnRow{Seq: 1 + 1024*50, ParentID: sc.A, ChildID: "child-8", RootPath: "child", Context: verify.Doc(c), Bucket: sc.s.mp.Bucket(sc.A)})
		return lines
	}},

	// ---- trace ----
	{name: "trace-newest-deleted", want: fail("trace"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss := shardNamed(st, "shard0")
		n := -1
		for i, r := range ss.Trace {
			if r.ExecutionID == sc.A {
				n = i
			}
		}
		ss.Trace = slices.Delete(ss.Trace, n, n+1)
		return lines
	}},
	{name: "trace-oldest-deleted", want: fail("trace"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss := shardNamed(st, "shard0")
		i := slices.IndexFunc(ss.Trace, func(r verify.TraceRow) bool { return r.ExecutionID == sc.A })
		ss.Trace = slices.Delete(ss.Trace, i, i+1)
		return lines
	}},
	{name: "trace-idx-edited", want: fail("trace"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss := shardNamed(st, "shard0")
		i := slices.IndexFunc(ss.Trace, func(r verify.TraceRow) bool { return r.ExecutionID == sc.A })
		ss.Trace[i].Idx--
		return lines
	}},
	{name: "trace-entry-op-edited", want: fail("cas", "trace"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss := shardNamed(st, "shard0")
		n := -1
		for i, r := range ss.Trace {
			if r.ExecutionID == sc.A {
				n = i
			}
		}
		var d map[string]any
		_ = json.Unmarshal([]byte(ss.Trace[n].Entry), &d)
		d["op"] = sc.aFirst
		j, _ := json.Marshal(d)
		ss.Trace[n].Entry = verify.Doc(j)
		return lines
	}},
	{name: "mutant-trace-off-by-one", want: want{Note: "the ring keeps trace_max+1 entries", Result: verify.Fail, Violated: []string{"trace"}},
		build: withMutant(func(m *mutants) { m.traceOffByOne = true }, nil)},

	// ---- placement ----
	{name: "exec-row-copied", want: fail("placement"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss, i := exeRow(st, sc.B)
		o := otherShard(st, ss.Name)
		o.Executions = append(o.Executions, ss.Executions[i])
		return lines
	}},
	{name: "exec-row-moved", want: fail("placement"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss, i := exeRow(st, sc.C)
		o := otherShard(st, ss.Name)
		o.Executions = append(o.Executions, ss.Executions[i])
		ss.Executions = slices.Delete(ss.Executions, i, i+1)
		return lines
	}},
	{name: "processed-row-copied", want: fail("placement"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		ss := shardNamed(st, "shard0")
		o := otherShard(st, "shard0")
		o.Processed = append(o.Processed, ss.Processed[0])
		return lines
	}},
	{name: "outbox-seq-off-stride", want: want{Result: verify.Fail, Violated: []string{"placement"}, Liveness: true}, build: pendingScenario(false),
		mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
			ss := shardNamed(st, "shard0")
			ss.Outbox[len(ss.Outbox)-1].Seq++
			return lines
		}},
	{name: "identity-ordinal-edited", want: fail("placement"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		st.Shards[1].Identity.Ordinal = 7
		return lines
	}},
	{name: "identity-missing", want: fail("placement"), mutate: func(sc *scenario, lines []obj, st *verify.State) []obj {
		st.Shards[0].Identity = nil
		return lines
	}},
}

// loadsReading are the indexes of the load lines of exe whose writer
// starts with prefix and that follow the last unknown commit of exe by
// that source.
func loadsReading(lines []obj, exeID, prefix string) []int {
	info := lastOp(lines, "kind", "commit", "exe", exeID, "outcome", "info")
	id := lines[info].get("id").(string)
	var out []int
	for i := info + 1; i < len(lines); i++ {
		l := lines[i]
		if l.get("kind") == "load" && l.get("exe") == exeID && l.get("writer") == id && strings.HasPrefix(id, prefix) {
			out = append(out, i)
		}
	}
	return out
}

// failLoad turns a load line into a failed one (a fault hit it).
func failLoad(l obj) {
	for _, k := range []string{"exists", "version", "writer", "processed"} {
		l.del(k)
	}
	l.set("outcome", "fail")
	l.set("err", "conn closed")
}

func (c corpusCase) generate() ([]byte, []byte, want) {
	s := newSim()
	build := c.build
	if build == nil {
		build = clean
	}
	sc := build(s)
	lines := s.historyLines()
	st := s.state()
	if c.mutate != nil {
		// Mutations see the lines after the header (index 0) and keep it.
		body := c.mutate(sc, lines[1:], st)
		lines = append(lines[:1:1], body...)
		// Keep the end line last if a mutation appended after it.
		for i, l := range lines {
			if l.get("type") == "end" && i != len(lines)-1 {
				end := l
				lines = append(append(lines[:i:i], lines[i+1:]...), end)
				lines[len(lines)-1].set("t", sc.s.now+1)
				break
			}
		}
	}
	var sb bytes.Buffer
	if err := st.WriteJSON(&sb); err != nil {
		panic(err)
	}
	w := c.want
	if w.Violated == nil {
		w.Violated = []string{}
	}
	if c.name == "partial-line" {
		_ = w
	}
	return encodeLines(lines), sb.Bytes(), w
}

const corpusDir = "testdata/corpus"

// TestCorpus checks every case of testdata/corpus: the result and the
// set of violated invariants must be what want.json says, and every
// violation must be explained (a summary and the ops or rows involved).
// With -update it first rewrites the generated cases.
func TestCorpus(t *testing.T) {
	if *update {
		for _, c := range corpusCases {
			h, st, w := c.generate()
			dir := filepath.Join(corpusDir, c.name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if c.name == "truncated" {
				h = append(h, []byte(`{"type":"op","id":"r1/w0/999","kind":"comm`)...) // the writer died mid-line
			}
			wb, _ := json.MarshalIndent(w, "", "  ")
			for name, b := range map[string][]byte{"history.jsonl": h, "state.json": st, "want.json": append(wb, '\n')} {
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	dirs, err := os.ReadDir(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < len(corpusCases) {
		t.Fatalf("%d corpus cases on disk, %d generated: run go test -run TestCorpus -update", len(dirs), len(corpusCases))
	}
	for _, d := range dirs {
		t.Run(d.Name(), func(t *testing.T) {
			dir := filepath.Join(corpusDir, d.Name())
			h, err := verify.OpenHistory(filepath.Join(dir, "history.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			st, err := verify.ReadStateFile(filepath.Join(dir, "state.json"))
			if err != nil {
				t.Fatal(err)
			}
			var w want
			wb, err := os.ReadFile(filepath.Join(dir, "want.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(wb, &w); err != nil {
				t.Fatal(err)
			}
			v := verify.Check(context.Background(), h, st, verify.Options{PartitionTimeout: 20 * time.Second})
			var text bytes.Buffer
			_ = v.WriteText(&text)
			got := violated(v)
			if v.Result != w.Result || !slices.Equal(got, sortedCopy(w.Violated)) || (len(v.Liveness) > 0) != w.Liveness {
				t.Errorf("got %s %v liveness=%v, want %s %v liveness=%v\n%s", v.Result, got, len(v.Liveness) > 0, w.Result, w.Violated, w.Liveness, text.String())
			}
			if w.Unknown != nil {
				u := unknownCounts{Present: v.Unknown.Present, Absent: v.Unknown.Absent, Unresolved: v.Unknown.Unresolved}
				if u != *w.Unknown {
					t.Errorf("unknown outcomes %+v, want %+v\n%s", u, *w.Unknown, text.String())
				}
			}
			if d.Name() == "clean" { // every kind of op: every invariant looks at something
				for _, r := range v.Invariants {
					// The lease invariant judges ops inside catalog cuts
					// only, and clean has no faults (TestLeaseCheck).
					if r.Checked == 0 && r.Name != verify.InvLease {
						t.Errorf("invariant %s checked nothing on a history with every kind of op\n%s", r.Name, text.String())
					}
				}
			}
			if w.Undecided != nil && !maps.Equal(w.Undecided, v.UndecidedExecutions.ByCheck) {
				t.Errorf("undecided executions by check %v, want %v\n%s", v.UndecidedExecutions.ByCheck, w.Undecided, text.String())
			}
			if w.Undecided != nil {
				// Said in every form: text, JSON, report.
				dir := t.TempDir()
				if err := verify.WriteReport(dir, v); err != nil {
					t.Fatal(err)
				}
				html, _ := os.ReadFile(filepath.Join(dir, "report.html"))
				js, _ := os.ReadFile(filepath.Join(dir, "verdict.json"))
				if !strings.Contains(text.String(), "undecided executions: ") || !strings.Contains(string(html), "Undecided executions (") ||
					!strings.Contains(string(js), `"undecided_executions"`) || !strings.Contains(strings.Join(v.Reasons, " "), "undecided executions") {
					t.Errorf("undecided executions not reported in the text, report.html, verdict.json and reasons")
				}
			}
			if w.Undecided == nil && v.UndecidedExecutions.Count > 0 {
				t.Errorf("%d undecided executions, want none\n%s", v.UndecidedExecutions.Count, text.String())
			}
			for kind, n := range w.Landed {
				got := -1
				for _, f := range v.Faults {
					if f.Kind == kind {
						got = f.Landed
					}
				}
				if got != n {
					t.Errorf("fault %s landed %d times, want %d\n%s", kind, got, n, text.String())
				}
			}
			for _, x := range append(slices.Clone(v.Violations), v.Liveness...) {
				if x.Summary == "" || len(x.Ops)+len(x.Rows) == 0 && !strings.Contains(x.Summary, " ") {
					t.Errorf("violation without an explanation: %+v", x)
				}
			}
			if testing.Verbose() {
				t.Logf("\n%s", text.String())
			}
		})
	}
}

func violated(v *verify.Verdict) []string {
	var out []string
	for _, r := range v.Invariants {
		if r.Violations > 0 && r.Name != verify.InvLiveness {
			out = append(out, r.Name)
		}
	}
	return sortedCopy(out)
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	sort.Strings(c)
	if c == nil {
		c = []string{}
	}
	return c
}
