package chaos

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/reshard"
	"github.com/pgshard/pgshard/shardmap"
)

func moveTestMap(t *testing.T) *shardmap.Map {
	t.Helper()
	m, err := shardmap.Even(256, []shardmap.Shard{
		{Name: "shard0", Ordinal: 0, DSN: "postgres://u@127.0.0.1:1/db"},
		{Name: "shard1", Ordinal: 1, DSN: "postgres://u@127.0.0.1:2/db"},
		{Name: "shard2", Ordinal: 2, DSN: "postgres://u@127.0.0.1:3/db"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// pickMove draws a range inside one owner's range, of the asked width
// (or 8..32), to another shard, and the same seed draws the same move.
func TestPickMove(t *testing.T) {
	m := moveTestMap(t)
	for _, width := range []int{0, 1, 16, 1000} {
		rng := rand.New(rand.NewPCG(7, uint64(width)))
		tos := map[string]bool{}
		for range 200 {
			p, err := pickMove(m, width, nil, rng)
			if err != nil {
				t.Fatal(err)
			}
			owner := m.ShardForBucket(p.Lo).Name
			if p.From != owner || p.To == p.From || p.Lo > p.Hi || p.Hi >= m.Buckets {
				t.Fatalf("width %d: bad move %+v (owner of lo: %s)", width, p, owner)
			}
			for b := p.Lo; b <= p.Hi; b++ {
				if got := m.ShardForBucket(b).Name; got != p.From {
					t.Fatalf("width %d: %+v: bucket %d is %s's, the move has two sources", width, p, b, got)
				}
			}
			n := p.Hi - p.Lo + 1
			switch {
			case width == 0 && n > moveMaxWidth:
				t.Fatalf("default width: %d buckets, want at most %d", n, moveMaxWidth)
			case width > 0 && n > width:
				t.Fatalf("width %d: %d buckets", width, n)
			}
			tos[p.To] = true
		}
		if len(tos) != 3 {
			t.Errorf("width %d: destinations %v, want every shard", width, tos)
		}
	}
	a, _ := pickMove(m, 0, nil, rand.New(rand.NewPCG(1, 2)))
	b, _ := pickMove(m, 0, nil, rand.New(rand.NewPCG(1, 2)))
	if a != b {
		t.Errorf("same seed, two moves: %+v vs %+v", a, b)
	}
	one, err := shardmap.Even(16, m.Shards[:1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pickMove(one, 0, nil, rand.New(rand.NewPCG(1, 2))); err == nil || !strings.Contains(err.Error(), "two shards") {
		t.Errorf("one shard: %v, want a refusal", err)
	}
}

// With hot buckets, every move starts at one of them, and over many
// draws at each.
func TestPickMoveHot(t *testing.T) {
	m := moveTestMap(t)
	hot := []int{3, m.Buckets / 2, m.Buckets - 1}
	rng := rand.New(rand.NewPCG(9, 9))
	seen := map[int]bool{}
	for range 100 {
		p, err := pickMove(m, 0, hot, rng)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(hot, p.Lo) {
			t.Fatalf("move %+v does not start at a hot bucket %v", p, hot)
		}
		seen[p.Lo] = true
	}
	if len(seen) != len(hot) {
		t.Errorf("hot starts drawn %v, want each of %v", seen, hot)
	}
}

// The hot buckets are those of the hotset's first executions; other key
// distributions have none.
func TestHotBuckets(t *testing.T) {
	m := moveTestMap(t)
	sc := &Scenario{Seed: 5, Workload: ScenarioWorkload{Executions: 200, Keys: "hotset:0.05:0.3"}}
	got := hotBuckets(sc, m)
	var want []int
	for _, id := range loadgen.ExecutionIDs(5, 200)[:10] {
		want = append(want, m.Bucket(id))
	}
	slices.Sort(want)
	want = slices.Compact(want)
	if !slices.Equal(got, want) {
		t.Errorf("hot buckets %v, want %v", got, want)
	}
	sc.Workload.Keys = "uniform"
	if got := hotBuckets(sc, m); got != nil {
		t.Errorf("uniform keys: hot buckets %v, want none", got)
	}
}

// Successive mover kills stop at every step of reshard.Steps in turn.
func TestNextKillStep(t *testing.T) {
	var s moveState
	rng := rand.New(rand.NewPCG(3, 4))
	var got []string
	for range 2 * len(reshard.Steps) {
		got = append(got, s.nextKillStep(rng))
	}
	first := got[:len(reshard.Steps)]
	if !slices.Equal(slices.Sorted(slices.Values(first)), slices.Sorted(slices.Values(reshard.Steps))) {
		t.Errorf("the first %d kills stop at %v, want every step once", len(reshard.Steps), first)
	}
	if !slices.Equal(first, got[len(reshard.Steps):]) {
		t.Errorf("the cycle does not repeat: %v", got)
	}
}

// The move kinds' params are validated, they plan on the mover (one at a
// time, no shard) and Check wants the run's catalog.
func TestMovePlanAndParams(t *testing.T) {
	for _, tc := range []struct {
		kind Kind
		p    Params
		bad  string
	}{
		{KindMove, Params{"buckets": "16", "freeze_budget": "50ms", "timeout": "30s"}, ""},
		{KindMove, Params{"buckets": "0"}, "params.buckets"},
		{KindMove, Params{"freeze_budget": "soon"}, "params.freeze_budget"},
		{KindMove, Params{"duty_cycle": "0.5"}, ""},
		{KindMoverKill, Params{"duty_cycle": "1"}, ""},
		{KindMove, Params{"duty_cycle": "0"}, "params.duty_cycle"},
		{KindMove, Params{"duty_cycle": "half"}, "params.duty_cycle"},
		{KindMove, Params{"resolve": "abort"}, "unknown parameter"},
		{KindMoverKill, Params{"resolve": "abort"}, ""},
		{KindMoverKill, Params{"resolve": "later"}, "params.resolve"},
	} {
		probs := strings.Join(validateParams(tc.kind, tc.p), "; ")
		if (tc.bad == "") != (probs == "") || !strings.Contains(probs, tc.bad) {
			t.Errorf("%s %v: %q, want %q", tc.kind, tc.p, probs, tc.bad)
		}
	}
	specs := []Spec{{Kind: KindMove, Every: 300 * time.Millisecond}, {Kind: KindMoverKill, Every: time.Second}}
	plan, err := Plan(specs, 10*time.Second, []string{"shard0", "shard1", "shard2"}, 9)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[Kind]int{}
	for _, p := range plan {
		if p.Shard != -1 {
			t.Errorf("%s %s on shard %d, want the mover (-1)", p.ID, p.Kind, p.Shard)
		}
		kinds[p.Kind]++
	}
	if kinds[KindMove] < 10 || kinds[KindMoverKill] < 3 {
		t.Errorf("planned %v, want moves back to back and kills", kinds)
	}
	env := &Env{Map: moveTestMap(t)}
	if err := Check(plan, env); err == nil || !strings.Contains(err.Error(), "catalog") {
		t.Errorf("Check without a catalog: %v, want a refusal naming the catalog", err)
	}
}

// TestFreezeEvidence: a move's evidence gives each freeze's hold
// (freeze_ms) and, when the history's clock is known, its start on that
// clock (freeze_t, ns), paired in the order tried; abandoned counted with
// their reasons.
func TestFreezeEvidence(t *testing.T) {
	clock := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	mr := &moveRun{results: []*reshard.Result{nil, {RowsCopied: 40, Freezes: []reshard.Freeze{
		{Start: clock.Add(1500 * time.Millisecond), Duration: 300500 * time.Microsecond, Abandoned: true, Why: catalog.WhyDeadline, Reason: "writers in flight"},
		{Start: clock.Add(2 * time.Second), Duration: 65 * time.Millisecond},
	}}}}
	f := map[string]any{}
	mr.freezeEvidence(f, clock)
	if !reflect.DeepEqual(f["freeze_ms"], []float64{300.5, 65}) || !reflect.DeepEqual(f["freeze_t"], []int64{1500e6, 2000e6}) ||
		f["freezes"] != 2 || f["abandoned"] != 1 || f["rows_copied"] != int64(40) || !reflect.DeepEqual(f["abandoned_why"], []string{"writers in flight"}) {
		t.Errorf("evidence %v", f)
	}
	f = map[string]any{}
	mr.freezeEvidence(f, time.Time{})
	if _, ok := f["freeze_t"]; ok || f["freezes"] != 2 {
		t.Errorf("without the history's clock: %v, want no freeze_t", f)
	}
	f = map[string]any{}
	(&moveRun{}).freezeEvidence(f, clock)
	if _, ok := f["freeze_t"]; ok || !reflect.DeepEqual(f["freeze_ms"], []float64{}) {
		t.Errorf("no freezes: %v, want freeze_ms [] and no freeze_t", f)
	}
}

// movedPart finds any bucket of a pick its source no longer owns, not
// only its first: a move finished meanwhile may have taken the pick's
// tail, and the fault then draws again rather than move a range with two
// sources under evidence that names one.
func TestMovedPart(t *testing.T) {
	m := moveTestMap(t)
	r := m.RangesOf("shard1")[0]
	pick := movePick{Lo: r.Lo, Hi: r.Lo + 15, From: "shard1", To: "shard2"}
	if b, owner := movedPart(m, pick); owner != "" {
		t.Fatalf("whole pick owned by shard1: got bucket %d of %s", b, owner)
	}
	// The pick's last bucket now on shard0.
	moved := &shardmap.Map{Epoch: m.Epoch + 1, Buckets: m.Buckets, Shards: m.Shards}
	for _, x := range m.Ranges {
		if x.Lo == r.Lo {
			moved.Ranges = append(moved.Ranges,
				shardmap.Range{Lo: x.Lo, Hi: pick.Hi - 1, Shard: "shard1"},
				shardmap.Range{Lo: pick.Hi, Hi: pick.Hi, Shard: "shard0"},
				shardmap.Range{Lo: pick.Hi + 1, Hi: x.Hi, Shard: "shard1"})
			continue
		}
		moved.Ranges = append(moved.Ranges, x)
	}
	if err := moved.Validate(); err != nil {
		t.Fatal(err)
	}
	if b, owner := movedPart(moved, pick); b != pick.Hi || owner != "shard0" {
		t.Fatalf("tail moved to shard0: got bucket %d of %q, want %d of shard0", b, owner, pick.Hi)
	}
}
