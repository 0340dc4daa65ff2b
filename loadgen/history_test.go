package loadgen_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/loadgen/loadgentest"
)

// collector is an Observer that keeps every op.
type collector struct {
	mu    sync.Mutex
	ops   []*loadgen.Op
	kinds map[string]int // kind/cause
}

func (c *collector) Observe(op *loadgen.Op) {
	c.mu.Lock()
	c.ops = append(c.ops, op)
	if c.kinds == nil {
		c.kinds = map[string]int{}
	}
	c.kinds[string(op.Kind)+"/"+op.Cause]++
	c.mu.Unlock()
}

// seen reports whether an op of every kind/cause was observed.
func (c *collector) seen(kinds []string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range kinds {
		if c.kinds[k] == 0 {
			return false
		}
	}
	return true
}

// historyKinds are the kind/cause pairs a run with every mix part records.
var historyKinds = []string{"commit/setup", "load/setup", "commit/worker", "load/worker", "load/redeliver",
	"commit/outbox", "commit/timer", "read_outbox/", "ack_outbox/", "due_timers/", "delete_timer/", "ack_spawn/"}

// TestHistoryRecordsEveryOperation runs a short workload with relays and a
// quiesce phase against the in-memory target and checks that the history
// tells the whole story: every commit op's id is in the state it wrote and
// in each of its effects, every version read names a recorded writer,
// every delivery and fire names its source, and after the quiesce nothing
// is left pending.
func TestHistoryRecordsEveryOperation(t *testing.T) {
	tg := loadgentest.New(loadgentest.Options{Shards: 2})
	col := &collector{}
	healed := 0
	o := loadgen.DefaultOptions()
	o.Workload.Executions = 40
	o.Workload.Mix = loadgen.Mix{Fast: 0.3, MaxEmits: 2, Timer: 0.6, Spawn: 0.2}
	o.Workload.Redelivery = 0.1
	o.Workload.TimerDelay = 50 * time.Millisecond
	o.Concurrency = 4
	o.Warmup, o.Duration = 0, 400*time.Millisecond
	// A loaded machine may do few operations in 400ms: the run goes on
	// until every kind of op was recorded (bounded).
	o.Until, o.MaxDuration = func() bool { return col.seen(historyKinds) }, 10*time.Second
	o.Observer = col
	o.RunID = "rtest"
	o.Quiesce = &loadgen.Quiesce{Timeout: 10 * time.Second, Heal: func(context.Context) error { healed++; return nil }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := loadgen.Run(ctx, tg, tg, o)
	if err != nil {
		t.Fatal(err)
	}
	if healed != 1 {
		t.Errorf("Heal ran %d times, want 1", healed)
	}
	if res.Quiesce == nil || !res.Quiesce.OK || res.Quiesce.OutboxLeft != 0 || res.Quiesce.TimersLeft != 0 || res.Quiesce.SpawnsLeft != 0 {
		t.Fatalf("quiesce: %+v", res.Quiesce)
	}

	ids := map[string]bool{}
	commits := map[string]*loadgen.Op{}
	okCommits := map[string]*loadgen.Op{}
	kinds := map[string]int{}
	for _, op := range col.ops {
		if ids[op.ID] {
			t.Fatalf("op id %s used twice", op.ID)
		}
		ids[op.ID] = true
		if !strings.HasPrefix(op.ID, "rtest/"+op.Src+"/") {
			t.Errorf("op id %s does not name its run and source %s", op.ID, op.Src)
		}
		if op.Complete.Before(op.Invoke) {
			t.Errorf("op %s completes before it is invoked", op.ID)
		}
		kinds[string(op.Kind)+"/"+op.Cause]++
		if op.Kind != loadgen.OpCommit {
			continue
		}
		commits[op.ID] = op
		c := op.Commit
		if c.Exe.State.Op != op.ID {
			t.Fatalf("commit %s wrote state of op %q", op.ID, c.Exe.State.Op)
		}
		if c.Trace != "" && !strings.Contains(c.Trace, `"op":"`+op.ID+`"`) {
			t.Errorf("commit %s: trace %s lacks the op id", op.ID, c.Trace)
		}
		for _, e := range c.Emits {
			var ev struct{ ID, Op, From string }
			if err := json.Unmarshal([]byte(e.Event), &ev); err != nil || ev.ID != e.ID || ev.Op != op.ID || ev.From != c.Exe.ID {
				t.Errorf("commit %s: emit %+v decodes as %+v (%v)", op.ID, e, ev, err)
			}
		}
		for _, s := range c.Spawns {
			if s.Context != `{"op":"`+op.ID+`"}` {
				t.Errorf("commit %s: spawn context %s", op.ID, s.Context)
			}
		}
		if op.Err == nil {
			okCommits[op.ID] = op
		}
		switch op.Cause {
		case loadgen.CauseSetup, loadgen.CauseWorker, loadgen.CauseOutbox, loadgen.CauseTimer:
		default:
			t.Errorf("commit %s has cause %q", op.ID, op.Cause)
		}
	}
	for _, k := range historyKinds {
		if kinds[k] == 0 {
			t.Errorf("no %s op recorded (have %v)", k, kinds)
		}
	}
	for _, op := range col.ops {
		switch {
		case op.Kind == loadgen.OpLoad && op.Err == nil && op.Exists:
			w, ok := okCommits[op.Writer]
			if !ok {
				t.Fatalf("load %s read version %d written by %q, not an acknowledged commit of the history", op.ID, op.Version, op.Writer)
			}
			if w.Commit.Exe.Version+1 != op.Version || w.ExecutionID != op.ExecutionID {
				t.Fatalf("load %s read %s v%d, but its writer %s committed %s v%d", op.ID, op.ExecutionID, op.Version, w.ID, w.ExecutionID, w.Commit.Exe.Version+1)
			}
			// The content read is the content written (digests).
			if op.ReadDigest == "" || op.ReadDigest != loadgen.StateDigest(w.Commit.Exe.State) {
				t.Fatalf("load %s read state digest %q, its writer %s wrote %q", op.ID, op.ReadDigest, w.ID, loadgen.StateDigest(w.Commit.Exe.State))
			}
		case op.Kind == loadgen.OpDueTimers:
			if op.Limit <= 0 || op.N != len(op.Timers) {
				t.Fatalf("due_timers %s: limit %d, n %d, %d timers", op.ID, op.Limit, op.N, len(op.Timers))
			}
		case op.Kind == loadgen.OpCommit && op.Cause == loadgen.CauseOutbox:
			src, ok := commits[op.Origin]
			if !ok || op.Seq == 0 || op.Input != op.EventID {
				t.Fatalf("delivery %s: origin %q seq %d input %q", op.ID, op.Origin, op.Seq, op.Input)
			}
			found := false
			for _, e := range src.Commit.Emits {
				found = found || (e.ID == op.EventID && e.TargetID == op.ExecutionID)
			}
			if !found {
				t.Fatalf("delivery %s of %s to %s: not an emit of %s", op.ID, op.EventID, op.ExecutionID, op.Origin)
			}
			for _, e := range src.Commit.Emits {
				if want, _ := loadgen.ContentDigest([]byte(e.Event)); e.ID == op.EventID && op.BodyDigest != want {
					t.Fatalf("delivery %s read body digest %q, its origin wrote %q", op.ID, op.BodyDigest, want)
				}
			}
		case op.Kind == loadgen.OpCommit && op.Cause == loadgen.CauseTimer:
			if op.Path == "" || op.FireAt == 0 || !strings.HasPrefix(op.Input, "timer:"+op.Path+":") {
				t.Fatalf("timer fire %s: path %q fire_at %v input %q", op.ID, op.Path, op.FireAt, op.Input)
			}
			if at, armed := op.Commit.Exe.State.Timers[op.Path]; armed && at == op.FireAt {
				t.Fatalf("timer fire %s left %s armed at its own fire time", op.ID, op.Path)
			}
		}
	}
	// The state's armed timers are what the store holds: after the
	// quiesce, nothing.
	for _, id := range loadgen.ExecutionIDs(o.Workload.Seed, o.Workload.Executions) {
		exe, _, err := tg.LoadForEvent(ctx, id, "")
		if err != nil || exe == nil {
			t.Fatalf("load %s: %v", id, err)
		}
		if len(exe.State.Timers) != 0 {
			t.Errorf("%s: state still arms %v after the quiesce", id, exe.State.Timers)
		}
	}
}

// TestReadBackAfterUnknownOutcome: after a commit whose outcome is
// unknown, the worker (or relay) reads the execution back — a load with
// cause readback of the same execution and event, by the same source —
// so that the history names the version's writer.
func TestReadBackAfterUnknownOutcome(t *testing.T) {
	var n atomic.Int64
	tg := loadgentest.New(loadgentest.Options{Err: func(op string) error {
		if op != "commit" {
			return nil
		}
		if k := n.Add(1); k > 20 && k%4 == 0 { // after the setup's 20
			return fmt.Errorf("%w: connection reset", loadgen.ErrOutcomeUnknown)
		}
		return nil
	}})
	col := &collector{}
	o := loadgen.DefaultOptions()
	o.Workload.Executions = 20
	o.Concurrency = 2
	o.Warmup, o.Duration = 0, 300*time.Millisecond
	o.Observer = col
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := loadgen.Run(ctx, tg, tg, o); err != nil {
		t.Fatal(err)
	}
	type key struct{ src, exe, event string }
	readBacks := map[key][]*loadgen.Op{}
	for _, op := range col.ops {
		if op.Kind == loadgen.OpLoad && op.Cause == loadgen.CauseReadback {
			k := key{op.Src, op.ExecutionID, op.EventID}
			readBacks[k] = append(readBacks[k], op)
		}
	}
	unknown := 0
	for _, op := range col.ops {
		if op.Kind != loadgen.OpCommit || !op.Unknown || op.Cause == loadgen.CauseSetup {
			continue
		}
		unknown++
		found := false
		for _, l := range readBacks[key{op.Src, op.ExecutionID, op.EventID}] {
			found = found || !l.Invoke.Before(op.Complete)
		}
		if !found {
			t.Errorf("unknown commit %s (%s on %s, event %s) was not read back", op.ID, op.Src, op.ExecutionID, op.EventID)
		}
	}
	if unknown == 0 {
		t.Fatal("no unknown outcome happened: the test proves nothing")
	}
}

// TestQuiesceTimesOut: a relay that cannot make progress ends the phase at
// its timeout, with what was left counted.
func TestQuiesceTimesOut(t *testing.T) {
	tg := loadgentest.New(loadgentest.Options{Err: func(op string) error {
		if op == "ack_outbox" {
			return context.DeadlineExceeded
		}
		return nil
	}})
	o := loadgen.DefaultOptions()
	o.Workload.Executions = 10
	o.Workload.Mix = loadgen.Mix{Fast: 0, MaxEmits: 2}
	o.Concurrency = 2
	o.Warmup, o.Duration = 0, 200*time.Millisecond
	o.Quiesce = &loadgen.Quiesce{Timeout: 700 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	res, err := loadgen.Run(ctx, tg, tg, o)
	if err != nil {
		t.Fatal(err)
	}
	q := res.Quiesce
	if q == nil || q.OK || q.OutboxLeft <= 0 {
		t.Fatalf("quiesce %+v: want not OK with outbox rows left", q)
	}
	if q.Seconds < 0.6 || time.Since(t0) > 20*time.Second {
		t.Errorf("quiesce took %.2fs (run %s), want its 0.7s timeout", q.Seconds, time.Since(t0))
	}
}
