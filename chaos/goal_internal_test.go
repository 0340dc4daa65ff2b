package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pgshard/pgshard/chaos/mutant"
	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/shardmap"
)

// goalHistory is a history over a two-shard map and the ids of an
// execution on each shard.
func goalHistory(t *testing.T) (h *History, start time.Time, exe map[string]string) {
	t.Helper()
	m, err := shardmap.Even(64, []shardmap.Shard{
		{Name: "shard0", Ordinal: 0, DSN: "postgres://u@127.0.0.1:1/db"},
		{Name: "shard1", Ordinal: 1, DSN: "postgres://u@127.0.0.1:2/db"},
	})
	if err != nil {
		t.Fatal(err)
	}
	exe = map[string]string{}
	for i := 0; i < 1000 && len(exe) < 2; i++ {
		id := fmt.Sprintf("exe-%d", i)
		if s := m.Lookup(id).Name; exe[s] == "" {
			exe[s] = id
		}
	}
	if len(exe) != 2 {
		t.Fatalf("no execution id for each shard: %v", exe)
	}
	start = time.Now()
	h, err = CreateHistory(filepath.Join(t.TempDir(), "history.jsonl"), Header{Run: "r1", StartedAt: start, Map: HeaderMapOf(m)}, m, start)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, start, exe
}

// commitOp is a commit op of exe over [from, to] after start, acknowledged
// (ok) or of unknown outcome.
func commitOp(start time.Time, exe string, from, to time.Duration, ok bool) *loadgen.Op {
	op := &loadgen.Op{ID: exe + "/" + from.String(), Kind: loadgen.OpCommit, Src: "w0", ExecutionID: exe,
		Invoke: start.Add(from), Complete: start.Add(to), Commit: &loadgen.Commit{}}
	if !ok {
		op.Err, op.Unknown = fmt.Errorf("reset: %w", loadgen.ErrOutcomeUnknown), true
	}
	return op
}

// lostAckHeal is a lost-ack's heal on shard reporting one committed
// dropped reply over [sent, at] after start.
func lostAckHeal(id, shard string, start time.Time, sent, at time.Duration) Event {
	yes := true
	// Wall-clock times, as the relay records them.
	d := DroppedReply{Conn: 1, Sent: start.Add(sent).Round(0), At: start.Add(at).Round(0), Bytes: 188, Committed: &yes, Status: "I"}
	return Event{ID: id, Kind: KindLostAck, Phase: "heal", Shard: shard, Landed: true,
		Evidence: map[string]any{"via": "shard", "dropped": 1, "replies": []DroppedReply{d}}}
}

// TestGoalWaitsForCorroboratedLostAcks: an extended run's goal counts a
// lost-ack as the verifier does — by an unknown-outcome commit op of its
// shard around a dropped reply — not by the dropped reply alone. Evidence
// without such an op (none at all, an acknowledged commit, an op of
// another shard, one far from the drop) leaves the goal unmet; the
// matching op, seen before or after the heal, meets it.
func TestGoalWaitsForCorroboratedLostAcks(t *testing.T) {
	sc := &Scenario{MinLanded: 1, MinCommits: 1, MaxDuration: Duration(time.Minute)}
	plan := []Planned{{ID: "f1", Kind: KindLostAck}, {ID: "f2", Kind: KindLostAck}}
	h, start, exe := goalHistory(t)
	done := goal(sc, plan, h)
	s := time.Second

	// Two lost-acks land by their evidence (the margin over min_landed 1
	// is 1): the writer's count is met, the verifier's is not.
	h.Observe(commitOp(start, exe["shard0"], 1*s, 1*s+10*time.Millisecond, true)) // acknowledged: not a lost reply
	h.Observe(commitOp(start, exe["shard1"], 1*s, 2*s, false))                    // unknown, but another shard
	h.Observe(commitOp(start, exe["shard0"], 5*s, 6*s, false))                    // unknown, but seconds after the drop
	h.Fault(lostAckHeal("f1", "shard0", start, 1*s, 1*s+20*time.Millisecond))
	h.Fault(lostAckHeal("f2", "shard1", start, 3*s, 3*s+20*time.Millisecond))
	if got := h.Landed()[KindLostAck]; got != 2 {
		t.Fatalf("lost-acks landed by evidence %d, want 2", got)
	}
	if got := h.Corroborated()[KindLostAck]; got != 0 {
		t.Fatalf("lost-acks corroborated %d with no matching op, want 0", got)
	}
	if done() {
		t.Fatal("goal met by evidence alone: no unknown-outcome commit op matches a dropped reply")
	}

	// An unknown-outcome op of shard0 around f1's drop, seen after its
	// heal (the op completes at the reset, or at its timeout).
	h.Observe(commitOp(start, exe["shard0"], 1*s-5*time.Millisecond, 1*s+25*time.Millisecond, false))
	if got := h.Corroborated()[KindLostAck]; got != 1 {
		t.Fatalf("lost-acks corroborated %d, want 1 (f1)", got)
	}
	if done() {
		t.Fatal("goal met with 1 lost-ack corroborated, want 2")
	}
	// f3's op comes first: its heal is reported after it. (f2's drop
	// is still waiting for its op.)
	h.Observe(commitOp(start, exe["shard0"], 8*s, 8*s+30*time.Millisecond, false))
	if done() {
		t.Fatal("goal met before f3's heal")
	}
	h.Fault(lostAckHeal("f3", "shard0", start, 8*s+1*time.Millisecond, 8*s+20*time.Millisecond))
	if got := h.Corroborated()[KindLostAck]; got != 2 {
		t.Fatalf("lost-acks corroborated %d, want 2 (f1, f3)", got)
	}
	if !done() {
		t.Fatal("goal not met with 2 lost-acks corroborated (min_landed 1 and a margin of 1)")
	}
}

// TestHistoryPutsDropsOnItsClock: a dropped reply's times in the history
// are the history's start plus their monotonic offset from it, so that
// the verifier's sent - started_at is the offset the ops' t0 and t1 are
// measured by, whatever the wall clock did meanwhile.
func TestHistoryPutsDropsOnItsClock(t *testing.T) {
	dir := t.TempDir()
	m, err := shardmap.Even(64, []shardmap.Shard{{Name: "shard0", Ordinal: 0, DSN: "postgres://u@127.0.0.1:1/db"}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	path := filepath.Join(dir, "history.jsonl")
	h, err := CreateHistory(path, Header{Run: "r1", StartedAt: start.UTC(), Map: HeaderMapOf(m)}, m, start)
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	sent := time.Now() // with its monotonic reading, as the relay reads it
	d := DroppedReply{Conn: 1, Sent: sent, At: sent.Add(3 * time.Millisecond), Bytes: 188, Committed: &yes, Status: "I"}
	ev := map[string]any{"replies": []DroppedReply{d}}
	h.Fault(Event{ID: "f1", Kind: KindLostAck, Phase: "heal", Shard: "shard0", Landed: true, Evidence: ev})
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if got := ev["replies"].([]DroppedReply)[0]; got != d {
		t.Fatalf("the event's evidence was changed: %+v", got)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var hdr struct {
		StartedAt time.Time `json:"started_at"`
	}
	var fault struct {
		Evidence struct {
			Replies []DroppedReply `json:"replies"`
		} `json:"evidence"`
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	if len(lines) != 2 || json.Unmarshal(lines[0], &hdr) != nil || json.Unmarshal(lines[1], &fault) != nil || len(fault.Evidence.Replies) != 1 {
		t.Fatalf("history:\n%s", data)
	}
	r := fault.Evidence.Replies[0]
	if got, want := r.Sent.Sub(hdr.StartedAt), sent.Sub(start); got != want {
		t.Errorf("sent - started_at = %v, want the monotonic offset %v", got, want)
	}
	if got, want := r.At.Sub(hdr.StartedAt), sent.Sub(start)+3*time.Millisecond; got != want {
		t.Errorf("at - started_at = %v, want %v", got, want)
	}
}

// TestLandedMargin: the goal waits for the floor as the verifier counts
// it (History.Corroborated) and one to spare, no margin by evidence; a
// lost-ack waits for a fifth more (the verifier also wants its claimed
// commit in the final state); a floor of 0 waits for none.
func TestLandedMargin(t *testing.T) {
	for _, c := range []struct {
		k    Kind
		n, m int
	}{
		{KindPartition, 10, 1}, {KindStall, 10, 1}, {KindTerminate, 10, 1}, {KindReset, 10, 1},
		{KindLatency, 10, 1}, {KindShardCrash, 3, 1}, {KindPgBouncerPause, 10, 1}, {KindMove, 20, 1},
		{KindPartition, 0, 0}, {KindLostAck, 10, 2}, {KindLostAck, 21, 4}, {KindLostAck, 1, 1}, {KindLostAck, 0, 0},
	} {
		if got := landedMargin(c.k, c.n); got != c.m {
			t.Errorf("landedMargin(%s, %d) = %d, want %d", c.k, c.n, got, c.m)
		}
	}
}

// TestGoalWaitsForCorroboratedPartitions: a partition whose evidence says
// it landed does not meet the goal until an op the verifier credits to it
// does (in flight in its window, failed or waiting past the heal, in no
// other fault's window).
func TestGoalWaitsForCorroboratedPartitions(t *testing.T) {
	sc := &Scenario{MinLanded: 1, MinCommits: 0, MaxDuration: Duration(time.Minute)}
	h, start, exe := goalHistory(t)
	h.ScheduleStarted(0)
	done := goal(sc, []Planned{{ID: "p", Kind: KindPartition}, {ID: "p2", Kind: KindPartition}}, h)
	s := time.Second
	window(h, "p", KindPartition, "shard0", 1*s, 2*s, nil)
	if got := h.Landed()[KindPartition]; got != 1 || done() {
		t.Fatalf("landed %d by evidence, goal met %v: want 1 and not met", got, done())
	}
	h.Observe(failedOp(start, exe["shard0"], 1500*time.Millisecond, 2500*time.Millisecond, true))
	if got := h.Corroborated()[KindPartition]; got != 1 || done() {
		t.Fatalf("corroborated %d, goal met %v: want 1 and not met (the floor and one to spare)", got, done())
	}
	window(h, "p2", KindPartition, "shard0", 5*s, 6*s, nil)
	h.Observe(failedOp(start, exe["shard0"], 5500*time.Millisecond, 6500*time.Millisecond, true))
	if !done() {
		t.Fatal("goal not met with two partitions corroborated")
	}
}

// TestMutantRunWaitsOnlyForItsFaults: a mutant's extended run waits for the
// kinds the mutant needs (its NeedsFaults) and no other; the control run
// (no mutant) waits for every kind of the plan.
func TestMutantRunWaitsOnlyForItsFaults(t *testing.T) {
	plan := []Planned{{ID: "a", Kind: KindLostAck}, {ID: "b", Kind: KindShardCrash}, {ID: "c", Kind: KindPartition}, {ID: "d", Kind: KindShardCrash}}
	kinds := func(ps []Planned) []Kind {
		var ks []Kind
		for _, p := range ps {
			ks = append(ks, p.Kind)
		}
		return ks
	}
	if got := waitedFor(plan, mutant.Mutant{}); !slices.Equal(kinds(got), kinds(plan)) {
		t.Errorf("control waits for %v, want the whole plan %v", kinds(got), kinds(plan))
	}
	crash, err := mutant.Lookup(mutant.SynchronousCommitOff)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(waitedFor(plan, crash)), []Kind{KindShardCrash, KindShardCrash}; !slices.Equal(got, want) {
		t.Errorf("%s waits for %v, want %v", crash.Kind, got, want)
	}
	cas, err := mutant.Lookup(mutant.CASWithoutVersion)
	if err != nil {
		t.Fatal(err)
	}
	if got := waitedFor(plan, cas); len(got) != 0 {
		t.Errorf("%s needs no fault, waits for %v", cas.Kind, kinds(got))
	}
	// Its goal is then the commit floor alone.
	sc := &Scenario{MinLanded: 1, MinCommits: 1, MaxDuration: Duration(time.Minute)}
	h, start, exe := goalHistory(t)
	done := goal(sc, waitedFor(plan, cas), h)
	if done() {
		t.Fatal("goal met before any commit")
	}
	h.Observe(commitOp(start, exe["shard0"], time.Second, time.Second+time.Millisecond, true))
	if !done() {
		t.Fatal("goal of a mutant that needs no fault not met at the commit floor")
	}
	if goal(sc, plan, h)() {
		t.Fatal("the control's goal met with no fault landed")
	}
}
