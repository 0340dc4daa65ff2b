package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/pgshard/pgshard/chaos"
	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/verify"
)

// landedEvidence is evidence the verifier reads as landed, by kind.
var landedEvidence = map[chaos.Kind]map[string]any{
	chaos.KindTerminate:      {"terminated": 1},
	chaos.KindPartition:      {"requests": 1},
	chaos.KindStall:          {"stalled": 1},
	chaos.KindReset:          {"in_flight": 1},
	chaos.KindLatency:        {"delayed": 1, "delay_ms": 15},
	chaos.KindPgBouncerPause: {"paused": 1, "waiting": 1},
}

// corrLine is one line the synthetic run writes, at the time it is
// reported (an op at its end, a fault phase when it returned).
type corrLine struct {
	at    time.Duration
	op    *loadgen.Op
	fault *chaos.Event
}

// TestWriterCorroborationIsTheVerifiers: on a synthetic run of
// overlapping faults on two shards (every kind the ops corroborate, and
// one that only makes windows ambiguous) and ops of every outcome, the
// writer's online count per kind (History.Corroborated) is at most the
// verifier's (the verdict's corroborated column) — and, every line being
// reported in order, equal. A single fault with one failed op is
// corroborated by both.
func TestWriterCorroborationIsTheVerifiers(t *testing.T) {
	for _, c := range []struct {
		name   string
		seed   uint64
		faults int
		ops    int
	}{{"simple", 0, 1, 1}, {"seed1", 1, 80, 3000}, {"seed2", 2, 150, 3000}, {"seed3", 3, 40, 5000}} {
		t.Run(c.name, func(t *testing.T) {
			writer, verifier := corroborateBoth(t, c.seed, c.faults, c.ops)
			t.Logf("writer %v, verifier %v", writer, verifier)
			total := 0
			for k, n := range verifier {
				total += n
				if writer[k] != n {
					t.Errorf("%s: writer %d, verifier %d", k, writer[k], n)
				}
			}
			for k, n := range writer {
				if n > verifier[k] {
					t.Errorf("%s: writer %d > verifier %d", k, n, verifier[k])
				}
			}
			if total == 0 {
				t.Error("nothing corroborated: the case tests nothing")
			}
		})
	}
}

// corroborateBoth writes a synthetic run and returns the writer's and
// the verifier's corroborated counts of the kinds the ops corroborate.
func corroborateBoth(t *testing.T, seed uint64, nFaults, nOps int) (writer, verifier map[chaos.Kind]int) {
	t.Helper()
	m, err := shardmap.Even(64, []shardmap.Shard{
		{Name: "shard0", Ordinal: 0, DSN: "postgres://u@127.0.0.1:1/db"},
		{Name: "shard1", Ordinal: 1, DSN: "postgres://u@127.0.0.1:2/db"},
	})
	if err != nil {
		t.Fatal(err)
	}
	exes := map[string][]string{}
	for i := 0; i < 200; i++ {
		id := fmt.Sprintf("exe-%d", i)
		exes[m.Lookup(id).Name] = append(exes[m.Lookup(id).Name], id)
	}
	shards := []string{"shard0", "shard1"}
	kinds := []chaos.Kind{chaos.KindTerminate, chaos.KindPartition, chaos.KindStall, chaos.KindReset, chaos.KindLatency, chaos.KindPgBouncerPause}
	rng := rand.New(rand.NewPCG(seed, 7))
	ms := time.Millisecond
	start := time.Now()
	var lines []corrLine
	var sched []chaos.HeaderPlanned
	for i := range nFaults {
		k, shard := kinds[rng.IntN(len(kinds))], shards[rng.IntN(2)]
		from := time.Duration(rng.IntN(60000)) * ms
		to := from + time.Duration(10+rng.IntN(1000))*ms
		if nFaults == 1 {
			k, shard, from, to = chaos.KindTerminate, "shard0", time.Second, 2*time.Second
		}
		id := fmt.Sprintf("f%d", i)
		sched = append(sched, chaos.HeaderPlanned{ID: id, Kind: string(k), Shard: shard, AtMs: from.Milliseconds()})
		ev := landedEvidence[k]
		// Each phase is reported when it returned: the heal after the
		// inject.
		injected := from + time.Duration(rng.IntN(300))*ms
		healed := max(to+time.Duration(rng.IntN(300))*ms, injected+ms)
		lines = append(lines,
			corrLine{at: injected, fault: &chaos.Event{ID: id, Kind: k, Phase: "inject", Shard: shard, T: from, Landed: true, Evidence: ev}},
			corrLine{at: healed, fault: &chaos.Event{ID: id, Kind: k, Phase: "heal", Shard: shard, T: to, Landed: true, Evidence: ev}})
	}
	for i := range nOps {
		shard := shards[rng.IntN(2)]
		t0 := time.Duration(rng.IntN(62000)) * ms
		t1 := t0 + time.Duration(1+rng.IntN(100))*ms
		if rng.IntN(10) == 0 {
			t1 = t0 + time.Duration(rng.IntN(2000))*ms
		}
		if nOps == 1 {
			shard, t0, t1 = "shard0", 1500*ms, 1600*ms
		}
		exe := exes[shard][rng.IntN(len(exes[shard]))]
		op := &loadgen.Op{ID: fmt.Sprintf("o%d", i), Kind: loadgen.OpLoad, Src: "w0", ExecutionID: exe,
			Invoke: start.Add(t0), Complete: start.Add(t1)}
		switch r := rng.IntN(20); {
		case nOps == 1 || r < 5:
			op.Err = errors.New("server closed the connection")
		case r < 7:
			op.Err, op.Unknown = fmt.Errorf("timeout: %w", loadgen.ErrOutcomeUnknown), true
		}
		lines = append(lines, corrLine{at: t1, op: op})
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].at < lines[j].at })

	path := filepath.Join(t.TempDir(), "history.jsonl")
	h, err := chaos.CreateHistory(path, chaos.Header{Run: "r1", StartedAt: start.UTC(), Map: chaos.HeaderMapOf(m), Schedule: sched}, m, start)
	if err != nil {
		t.Fatal(err)
	}
	h.ScheduleStarted(0)
	for _, l := range lines {
		if l.op != nil {
			h.Observe(l.op)
		} else {
			h.Fault(*l.fault)
		}
	}
	writer = h.Corroborated()
	delete(writer, chaos.KindPgBouncerPause) // credited by evidence alone
	h.End(chaos.End{EndedAt: start.Add(70 * time.Second)})
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	vh, err := verify.OpenHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	v := verify.Check(context.Background(), vh, &verify.State{}, verify.Options{MinLanded: -1})
	verifier = map[chaos.Kind]int{}
	for _, f := range v.Faults {
		if f.Corroborated > 0 {
			verifier[chaos.Kind(f.Kind)] = f.Corroborated
		}
	}
	return writer, verifier
}
