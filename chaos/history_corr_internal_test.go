package chaos

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pgshard/pgshard/loadgen"
)

// failedOp is a load of exe over [from, to] after start that failed (not
// a conflict), or succeeded when ok.
func failedOp(start time.Time, exe string, from, to time.Duration, ok bool) *loadgen.Op {
	op := &loadgen.Op{ID: fmt.Sprintf("%s/%v", exe, from), Kind: loadgen.OpLoad, Src: "w0", ExecutionID: exe,
		Invoke: start.Add(from), Complete: start.Add(to)}
	if !ok {
		op.Err = errors.New("server closed the connection")
	}
	return op
}

// window injects and heals a landed fault of kind on shard over [from, to].
func window(h *History, id string, k Kind, shard string, from, to time.Duration, ev map[string]any) {
	h.Fault(Event{ID: id, Kind: k, Phase: "inject", Shard: shard, T: from, Done: from, Landed: true, Evidence: ev})
	h.Fault(Event{ID: id, Kind: k, Phase: "heal", Shard: shard, T: to, Done: to, Landed: true, Evidence: ev})
}

// TestCorroborationCreditsTheOneFault: a failed op of the fault's shard
// inside its window credits it; one of another shard does not; one inside
// two faults' windows proper credits neither; one after the heal credits
// the latest fault whose slack it is in (an errors kind), but never a held
// kind (it must have been in flight before the heal), nor any fault past
// the slack.
func TestCorroborationCreditsTheOneFault(t *testing.T) {
	h, start, exe := goalHistory(t)
	h.ScheduleStarted(0)
	s, ms := time.Second, time.Millisecond
	// Another shard's op, and an ok op: nothing.
	window(h, "t1", KindTerminate, "shard0", 1*s, 1*s+100*ms, nil)
	h.Observe(failedOp(start, exe["shard1"], 1*s, 1*s+50*ms, false))
	h.Observe(failedOp(start, exe["shard0"], 1*s, 1*s+50*ms, true))
	if got := h.Corroborated()[KindTerminate]; got != 0 {
		t.Fatalf("terminate corroborated %d by another shard's op or an ok op, want 0", got)
	}
	h.Observe(failedOp(start, exe["shard0"], 1*s+10*ms, 1*s+60*ms, false))
	if got := h.Corroborated()[KindTerminate]; got != 1 {
		t.Fatalf("terminate corroborated %d, want 1", got)
	}

	// Two windows proper on shard0: an op inside both credits neither.
	window(h, "t2", KindTerminate, "shard0", 10*s, 11*s, nil)
	window(h, "p1", KindPartition, "shard0", 10500*ms, 12*s, nil)
	h.Observe(failedOp(start, exe["shard0"], 10600*ms, 10700*ms, false))
	if got := h.Corroborated(); got[KindTerminate] != 1 || got[KindPartition] != 0 {
		t.Fatalf("corroborated %v by an op in two windows, want terminate 1 (t1), partition 0", got)
	}
	// After p1's heal, within its slack: the latest fault of those whose
	// slack it is in, p1, which is held: an op that began after its heal
	// does not count.
	h.Observe(failedOp(start, exe["shard0"], 12100*ms, 12200*ms, false))
	if got := h.Corroborated(); got[KindTerminate] != 1 || got[KindPartition] != 0 {
		t.Fatalf("corroborated %v by an op after the heal, want terminate 1, partition 0", got)
	}
	// An op waiting past p1's heal: credited to p1 (t2's window proper
	// ended before it began).
	h.Observe(failedOp(start, exe["shard0"], 11500*ms, 12500*ms, true))
	if got := h.Corroborated(); got[KindPartition] != 1 {
		t.Fatalf("corroborated %v, want partition 1 (an op waited past its heal)", got)
	}

	// Errors after the heal, within the slack: credited; past it: not.
	window(h, "t3", KindTerminate, "shard1", 20*s, 20100*ms, nil)
	h.Observe(failedOp(start, exe["shard1"], 24*s, 24100*ms, false))
	if got := h.Corroborated()[KindTerminate]; got != 1 {
		t.Fatalf("terminate corroborated %d by an op past the slack, want 1", got)
	}
	h.Observe(failedOp(start, exe["shard1"], 22*s, 22100*ms, false))
	if got := h.Corroborated()[KindTerminate]; got != 2 {
		t.Fatalf("terminate corroborated %d by an op in the slack, want 2", got)
	}
}

// TestCorroborationWaitsForWhatItCannotTell: an op is decided only once
// every fault that may overlap it has been reported (no planned fault due
// before its end still unreported) and healed; an op that turns out to
// be inside two windows then credits neither, and an op whose fault
// never heals is never credited. A fault the writer's evidence says did
// not land is not counted even when an op credits it.
func TestCorroborationWaitsForWhatItCannotTell(t *testing.T) {
	h, start, exe := goalHistory(t)
	h.corr = newCorrMatcher([]HeaderPlanned{{ID: "a", AtMs: 1000}, {ID: "b", AtMs: 1500, HoldMs: 500}, {ID: "c", AtMs: 5000}})
	s, ms := time.Second, time.Millisecond
	h.Observe(failedOp(start, exe["shard0"], 1100*ms, 1600*ms, false))
	h.ScheduleStarted(0)
	window(h, "a", KindTerminate, "shard0", 1*s, 1200*ms, nil)
	if got := h.Corroborated()[KindTerminate]; got != 0 {
		t.Fatalf("terminate corroborated %d while b (due at 1.5 s) is unreported, want 0", got)
	}
	// b injects at 1.55 s (its lock delayed it): the op overlaps both
	// windows proper.
	h.Fault(Event{ID: "b", Kind: KindStall, Phase: "inject", Shard: "shard0", T: 1550 * ms, Landed: true})
	if len(h.corr.pending) != 1 {
		t.Fatalf("%d ops pending before b's heal, want 1", len(h.corr.pending))
	}
	h.Fault(Event{ID: "b", Kind: KindStall, Phase: "heal", Shard: "shard0", T: 2 * s, Landed: true})
	if got := h.Corroborated(); got[KindTerminate] != 0 || got[KindStall] != 0 || len(h.corr.pending) != 0 {
		t.Fatalf("corroborated %v, %d pending: want nothing (the op is in two windows), none pending", got, len(h.corr.pending))
	}
	// c never heals: its op stays pending, never credited.
	h.Fault(Event{ID: "c", Kind: KindReset, Phase: "inject", Shard: "shard1", T: 5 * s, Landed: true})
	h.Observe(failedOp(start, exe["shard1"], 5*s, 5100*ms, false))
	if got := h.Corroborated()[KindReset]; got != 0 || len(h.corr.pending) != 1 {
		t.Fatalf("reset corroborated %d, %d pending: want 0, 1", got, len(h.corr.pending))
	}
	// Credited but not landed by evidence: not counted.
	h.Fault(Event{ID: "d", Kind: KindTerminate, Phase: "inject", Shard: "shard0", T: 9 * s})
	h.Fault(Event{ID: "d", Kind: KindTerminate, Phase: "heal", Shard: "shard0", T: 9100 * ms})
	h.Observe(failedOp(start, exe["shard0"], 9*s, 9050*ms, false))
	if _, ok := h.corr.credited["d"]; !ok {
		t.Fatal("d not credited by its op")
	}
	if got := h.Corroborated()[KindTerminate]; got != 0 {
		t.Fatalf("terminate counted %d with no evidence of landing, want 0", got)
	}
}

// TestCorroborationRules: the other rules — a latency by an ok op wholly
// inside taking twice the delay; a reset by a failed op in flight at its
// instant; a lost-ack's window keeps the unknown-outcome commits it may
// claim from crediting another fault.
func TestCorroborationRules(t *testing.T) {
	h, start, exe := goalHistory(t)
	h.ScheduleStarted(0)
	s, ms := time.Second, time.Millisecond
	window(h, "l1", KindLatency, "shard0", 1*s, 2*s, map[string]any{"delay_ms": int64(15)})
	h.Observe(failedOp(start, exe["shard0"], 1100*ms, 1120*ms, true)) // 20 ms < 30
	if got := h.Corroborated()[KindLatency]; got != 0 {
		t.Fatalf("latency corroborated %d by a 20 ms op, want 0 (2x15 ms)", got)
	}
	h.Observe(failedOp(start, exe["shard0"], 1200*ms, 1240*ms, true))
	if got := h.Corroborated()[KindLatency]; got != 1 {
		t.Fatalf("latency corroborated %d, want 1", got)
	}
	window(h, "r1", KindReset, "shard1", 3*s, 3010*ms, nil)
	h.Observe(failedOp(start, exe["shard1"], 3020*ms, 3100*ms, false)) // began after the cut
	if got := h.Corroborated()[KindReset]; got != 0 {
		t.Fatalf("reset corroborated %d by an op begun after it, want 0", got)
	}
	h.Observe(failedOp(start, exe["shard1"], 2900*ms, 3100*ms, false))
	if got := h.Corroborated()[KindReset]; got != 1 {
		t.Fatalf("reset corroborated %d, want 1", got)
	}
	window(h, "a1", KindLostAck, "shard0", 5*s, 7*s, nil)
	window(h, "t1", KindTerminate, "shard0", 6*s, 6100*ms, nil)
	h.Observe(commitOp(start, exe["shard0"], 6*s, 6050*ms, false))
	if got := h.Corroborated()[KindTerminate]; got != 0 {
		t.Fatalf("terminate corroborated %d by a commit a lost-ack may claim, want 0", got)
	}
	h.Observe(failedOp(start, exe["shard0"], 6*s, 6050*ms, false))
	if got := h.Corroborated()[KindTerminate]; got != 1 {
		t.Fatalf("terminate corroborated %d by a failed load, want 1", got)
	}
}

// TestCorroborationIsBounded: windows of a long run, and ops waiting on
// a fault that never heals, stay within their tables' bounds; an op that
// began before a dropped window's end is not credited.
func TestCorroborationIsBounded(t *testing.T) {
	h, start, exe := goalHistory(t)
	h.ScheduleStarted(0)
	ms := time.Millisecond
	for i := range maxCorrWindows + 100 {
		d := time.Duration(i) * 10 * ms
		window(h, fmt.Sprintf("t%d", i), KindTerminate, "shard1", d, d+ms, nil)
	}
	if n := len(h.corr.windows); n > maxCorrWindows || len(h.corr.byID) > maxCorrWindows {
		t.Fatalf("%d windows (%d by id), bound %d", n, len(h.corr.byID), maxCorrWindows)
	}
	// t50 was dropped: an op inside it is not credited.
	h.Observe(failedOp(start, exe["shard1"], 500*ms, 500*ms+500*time.Microsecond, false))
	if got := h.Corroborated()[KindTerminate]; got != 0 {
		t.Fatalf("terminate corroborated %d by an op older than the windows kept, want 0", got)
	}
	h.Fault(Event{ID: "open", Kind: KindPartition, Phase: "inject", Shard: "shard0", T: 30 * time.Second, Landed: true})
	for i := range maxCorrPending + 100 {
		d := 30*time.Second + time.Duration(i)*ms
		h.Observe(failedOp(start, exe["shard0"], d, d+ms, false))
	}
	if n := len(h.corr.pending); n > maxCorrPending {
		t.Fatalf("%d ops pending, bound %d", n, maxCorrPending)
	}
}

// TestCorroborationReadsEvidenceAsTheVerifier: a stall the inject calls
// landed but whose heal held nothing, and a terminate whose injection
// failed, are not counted however an op credits them.
func TestCorroborationReadsEvidenceAsTheVerifier(t *testing.T) {
	h, start, exe := goalHistory(t)
	h.ScheduleStarted(0)
	s, ms := time.Second, time.Millisecond
	h.Fault(Event{ID: "s1", Kind: KindStall, Phase: "inject", Shard: "shard0", T: 1 * s, Landed: true})
	h.Fault(Event{ID: "s1", Kind: KindStall, Phase: "heal", Shard: "shard0", T: 2 * s, Evidence: map[string]any{"stalled": 0}})
	h.Observe(failedOp(start, exe["shard0"], 1500*ms, 1600*ms, false))
	h.Fault(Event{ID: "t1", Kind: KindTerminate, Phase: "inject", Shard: "shard1", T: 1 * s, Landed: true, Err: "list backends: timeout"})
	h.Fault(Event{ID: "t1", Kind: KindTerminate, Phase: "heal", Shard: "shard1", T: 2 * s})
	h.Observe(failedOp(start, exe["shard1"], 1500*ms, 1600*ms, false))
	if len(h.corr.credited) != 2 {
		t.Fatalf("credited %v, want s1 and t1", h.corr.credited)
	}
	if got := h.Corroborated(); got[KindStall] != 0 || got[KindTerminate] != 0 {
		t.Fatalf("corroborated %v, want no stall (nothing held) and no terminate (failed)", got)
	}
}
