package shardmap_test

import (
	"fmt"
	"math/bits"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/pgshard/pgshard/shardmap"
)

func mustEven(t testing.TB, buckets int, s []shardmap.Shard) *shardmap.Map {
	t.Helper()
	m, err := shardmap.Even(buckets, s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPlanExamples pins a few plans bucket by bucket.
func TestPlanExamples(t *testing.T) {
	two := mustEven(t, 16, shards(2)) // s0 0-7, s1 8-15
	s2 := shardmap.Shard{Name: "s2", Ordinal: 2, DSN: "postgres://s2/db"}
	added, err := shardmap.PlanAdd(two, s2)
	if err != nil {
		t.Fatal(err)
	}
	// 16 over 3: the remainder bucket stays with s0 (most buckets, lowest
	// ordinal); s0 gives its highest 2, s1 its highest 3.
	wantMoves := []shardmap.Move{{Lo: 6, Hi: 7, From: "s0", To: "s2"}, {Lo: 13, Hi: 15, From: "s1", To: "s2"}}
	moves, err := shardmap.Diff(two, added)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(moves, wantMoves) {
		t.Errorf("PlanAdd moves = %v, want %v", moves, wantMoves)
	}
	if added.Epoch != 2 || !reflect.DeepEqual(added.BucketCounts(), map[string]int{"s0": 6, "s1": 5, "s2": 5}) {
		t.Errorf("epoch %d counts %v", added.Epoch, added.BucketCounts())
	}
	if got := moves[1].String(); got != "buckets 13-15: s1 -> s2" {
		t.Errorf("Move.String() = %q", got)
	}

	removed, err := shardmap.PlanRemove(added, "s0")
	if err != nil {
		t.Fatal(err)
	}
	// s0's 6 buckets (0-5) go to s1 (ordinal 1) then s2 until both hold 8.
	wantMoves = []shardmap.Move{{Lo: 0, Hi: 2, From: "s0", To: "s1"}, {Lo: 3, Hi: 5, From: "s0", To: "s2"}}
	if moves, _ := shardmap.Diff(added, removed); !reflect.DeepEqual(moves, wantMoves) {
		t.Errorf("PlanRemove moves = %v, want %v", moves, wantMoves)
	}
	if removed.Epoch != 3 || len(removed.Shards) != 2 {
		t.Errorf("epoch %d shards %v", removed.Epoch, removed.Shards)
	}

	if moves, err := shardmap.Diff(two, two.Clone()); err != nil || len(moves) != 0 {
		t.Errorf("Diff of equal maps = %v, %v", moves, err)
	}
	// Diff coalesces adjacent buckets with the same (from, to), and only those.
	a := base()
	b := base()
	b.Ranges = []shardmap.Range{{0, 9, "b"}, {10, 19, "c"}, {20, 1365, "a"}, {1366, 2730, "b"}, {2731, 4095, "c"}}
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	wantMoves = []shardmap.Move{{0, 9, "a", "b"}, {10, 19, "a", "c"}}
	if moves, _ := shardmap.Diff(a, b); !reflect.DeepEqual(moves, wantMoves) {
		t.Errorf("Diff = %v, want %v", moves, wantMoves)
	}
}

// TestPlanErrors: the planners refuse impossible or ambiguous changes.
func TestPlanErrors(t *testing.T) {
	m := mustEven(t, 16, shards(3))
	full := mustEven(t, 16, shards(16))
	one := mustEven(t, 16, shards(1))
	tests := []struct {
		name string
		plan func() (*shardmap.Map, error)
		want string
	}{
		{"add duplicate name", func() (*shardmap.Map, error) {
			return shardmap.PlanAdd(m, shardmap.Shard{Name: "s1", Ordinal: 9, DSN: "d"})
		}, `shard "s1" is already in the map`},
		{"add duplicate ordinal", func() (*shardmap.Map, error) {
			return shardmap.PlanAdd(m, shardmap.Shard{Name: "new", Ordinal: 2, DSN: "d"})
		}, `ordinal 2 is already used by shard "s2"`},
		{"add beyond the bucket count", func() (*shardmap.Map, error) {
			return shardmap.PlanAdd(full, shardmap.Shard{Name: "new", Ordinal: 99, DSN: "d"})
		}, "17 shards cannot share 16 buckets"},
		{"add without dsn", func() (*shardmap.Map, error) {
			return shardmap.PlanAdd(m, shardmap.Shard{Name: "new", Ordinal: 9})
		}, `"new": dsn is empty`},
		{"add bad ordinal", func() (*shardmap.Map, error) {
			return shardmap.PlanAdd(m, shardmap.Shard{Name: "new", Ordinal: 1024, DSN: "d"})
		}, "ordinal 1024 is outside"},
		{"add bad name", func() (*shardmap.Map, error) {
			return shardmap.PlanAdd(m, shardmap.Shard{Name: "new shard", Ordinal: 9, DSN: "d"})
		}, "may only contain"},
		{"remove unknown", func() (*shardmap.Map, error) { return shardmap.PlanRemove(m, "zz") },
			`shard "zz" is not in the map`},
		{"remove the last shard", func() (*shardmap.Map, error) { return shardmap.PlanRemove(one, "s0") },
			`cannot remove "s0", the only shard`},
		{"diff across bucket counts", func() (*shardmap.Map, error) {
			_, err := shardmap.Diff(m, mustEven(t, 64, shards(3)))
			return nil, err
		}, "bucket counts differ (16 vs 64)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.plan()
			if err == nil {
				t.Fatalf("no error; got %+v", got)
			}
			if got != nil {
				t.Errorf("a map came back with the error")
			}
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q, want one line mentioning %q", err, tt.want)
			}
		})
	}
	// The input maps are untouched by failed (and successful) plans.
	if m.Epoch != 1 || len(m.Shards) != 3 || !reflect.DeepEqual(m.BucketCounts(), map[string]int{"s0": 6, "s1": 5, "s2": 5}) {
		t.Errorf("input map changed: %+v", m)
	}
}

// genMap draws a valid map: B in {16, 64, 4096}, 1..16 shards with random
// ordinals, either balanced (Even followed by up to 6 random plans, so
// possibly fragmented) or arbitrary (random cut points, random owners,
// counts far apart).
func genMap(t *rapid.T) *shardmap.Map {
	b := rapid.SampledFrom([]int{16, 64, 4096}).Draw(t, "buckets")
	n := rapid.IntRange(1, 16).Draw(t, "shards")
	ords := rapid.SliceOfNDistinct(rapid.IntRange(0, shardmap.MaxOrdinal), n, n, rapid.ID[int]).Draw(t, "ordinals")
	ss := make([]shardmap.Shard, n)
	for i, o := range ords {
		ss[i] = shardmap.Shard{Name: fmt.Sprintf("shard%02d", i), Ordinal: o, DSN: fmt.Sprintf("postgres://h%d/db", o)}
	}
	if rapid.Bool().Draw(t, "balanced") {
		m, err := shardmap.Even(b, ss)
		if err != nil {
			t.Fatal(err)
		}
		steps := rapid.IntRange(0, 6).Draw(t, "steps")
		for i := range steps {
			if len(m.Shards) > 1 && (len(m.Shards) >= 16 || rapid.Bool().Draw(t, "remove")) {
				victim := rapid.SampledFrom(m.Shards).Draw(t, "victim").Name
				if m, err = shardmap.PlanRemove(m, victim); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if m, err = shardmap.PlanAdd(m, freshShard(t, m, i)); err != nil {
				t.Fatal(err)
			}
		}
		return m
	}
	// Arbitrary: k ranges (k >= n), every shard owns at least one.
	k := rapid.IntRange(n, min(b, 3*n+4)).Draw(t, "ranges")
	cuts := rapid.SliceOfNDistinct(rapid.IntRange(1, b-1), k-1, k-1, rapid.ID[int]).Draw(t, "cuts")
	slices.Sort(cuts)
	owners := make([]int, 0, k)
	for i := range n {
		owners = append(owners, i)
	}
	for len(owners) < k {
		owners = append(owners, rapid.IntRange(0, n-1).Draw(t, "owner"))
	}
	owners = rapid.Permutation(owners).Draw(t, "owners")
	m := &shardmap.Map{Epoch: rapid.Uint64Range(1, 1<<40).Draw(t, "epoch"), Buckets: b, Shards: ss}
	lo := 0
	for i, o := range owners {
		hi := b - 1
		if i < len(cuts) {
			hi = cuts[i] - 1
		}
		m.Ranges = append(m.Ranges, shardmap.Range{Lo: lo, Hi: hi, Shard: ss[o].Name})
		lo = hi + 1
	}
	if err := m.Validate(); err != nil {
		t.Fatalf("generated an invalid map: %v", err)
	}
	return m
}

// freshShard draws a shard whose name and ordinal are not used in m.
func freshShard(t *rapid.T, m *shardmap.Map, salt int) shardmap.Shard {
	o := rapid.IntRange(0, shardmap.MaxOrdinal).Draw(t, "new ordinal")
	for {
		if _, err := m.ShardByOrdinal(o); err != nil {
			break
		}
		o = (o + 1) % (shardmap.MaxOrdinal + 1)
	}
	name := fmt.Sprintf("new%d-%d", o, salt)
	return shardmap.Shard{Name: name, Ordinal: o, DSN: "postgres://" + name + "/db"}
}

// minMoves is the fewest bucket moves that leave n shards (the survivors,
// holding cur buckets each, plus any new ones holding none) within one
// bucket of each other, not counting buckets of a removed shard (which
// must all move). The final counts are then f = B/n or f+1, exactly B%n
// of them f+1, and a shard must give away max(0, cur-target) buckets; this
// tries every choice of the B%n shards that get f+1 — exhaustively, to be
// independent of the planner's greedy choice.
func minMoves(cur []int, buckets int) int {
	n := len(cur)
	f, r := buckets/n, buckets%n
	best := -1
	for mask := uint32(0); mask < 1<<n; mask++ {
		if bits.OnesCount32(mask) != r {
			continue
		}
		moves := 0
		for i, c := range cur {
			target := f
			if mask&(1<<i) != 0 {
				target++
			}
			moves += max(0, c-target)
		}
		if best < 0 || moves < best {
			best = moves
		}
	}
	return best
}

func balanced(counts map[string]int) bool {
	lo, hi := -1, -1
	for _, c := range counts {
		if lo < 0 || c < lo {
			lo = c
		}
		hi = max(hi, c)
	}
	return hi-lo <= 1
}

// checkPlan verifies the properties every plan must have: a valid map with
// epoch+1 and the expected shards, counts within one, a Diff that explains
// the new map exactly, no shard both giving and receiving, and the minimal
// number of moved buckets.
func checkPlan(t *rapid.T, old, plan *shardmap.Map, wantShards []shardmap.Shard, removed string) []shardmap.Move {
	if plan.Epoch != old.Epoch+1 || plan.Buckets != old.Buckets {
		t.Fatalf("epoch %d→%d, buckets %d→%d", old.Epoch, plan.Epoch, old.Buckets, plan.Buckets)
	}
	if !reflect.DeepEqual(plan.Shards, wantShards) {
		t.Fatalf("shards = %v, want %v", plan.Shards, wantShards)
	}
	// The plan validates on its own, also after a YAML round trip.
	data, err := plan.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	reparsed, err := shardmap.Parse(data)
	if err != nil {
		t.Fatalf("plan does not validate: %v", err)
	}
	if !reflect.DeepEqual(export(reparsed), export(plan)) {
		t.Fatal("plan changes in a YAML round trip")
	}
	for i := 1; i < len(plan.Ranges); i++ {
		if plan.Ranges[i].Shard == plan.Ranges[i-1].Shard {
			t.Fatalf("ranges %v and %v of one shard are not coalesced", plan.Ranges[i-1], plan.Ranges[i])
		}
	}
	before, after := old.BucketCounts(), plan.BucketCounts()
	if !balanced(after) {
		t.Fatalf("counts not within one bucket: %v", after)
	}

	moves, err := shardmap.Diff(old, plan)
	if err != nil {
		t.Fatal(err)
	}
	moved, gave, got := 0, map[string]int{}, map[string]int{}
	inMove := make([]bool, old.Buckets)
	for i, mv := range moves {
		if mv.From == mv.To || mv.Lo > mv.Hi || (i > 0 && mv.Lo <= moves[i-1].Hi) {
			t.Fatalf("bad move %v after %v", mv, moves[max(i-1, 0)])
		}
		if i > 0 && mv.Lo == moves[i-1].Hi+1 && mv.From == moves[i-1].From && mv.To == moves[i-1].To {
			t.Fatalf("moves %v and %v not coalesced", moves[i-1], mv)
		}
		for b := mv.Lo; b <= mv.Hi; b++ {
			if old.ShardForBucket(b).Name != mv.From || plan.ShardForBucket(b).Name != mv.To {
				t.Fatalf("move %v: bucket %d goes %s -> %s", mv, b, old.ShardForBucket(b).Name, plan.ShardForBucket(b).Name)
			}
			inMove[b] = true
		}
		moved += mv.Len()
		gave[mv.From] += mv.Len()
		got[mv.To] += mv.Len()
	}
	for b, in := range inMove {
		if !in && old.ShardForBucket(b).Name != plan.ShardForBucket(b).Name {
			t.Fatalf("bucket %d changed owner but is in no move", b)
		}
	}
	for name := range gave {
		if got[name] > 0 {
			t.Fatalf("shard %s both gives %d and receives %d buckets", name, gave[name], got[name])
		}
	}

	// Minimality, from first principles.
	var cur []int
	for _, s := range wantShards {
		cur = append(cur, before[s.Name]) // 0 for a new shard
	}
	want := before[removed] + minMoves(cur, old.Buckets)
	if moved != want {
		t.Fatalf("moved %d buckets, the minimum is %d (counts %v → %v)", moved, want, before, after)
	}
	return moves
}

// TestPlanAddProperties: PlanAdd on random valid maps.
func TestPlanAddProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := genMap(t)
		if len(m.Shards) >= m.Buckets {
			t.Skip("no room for another shard")
		}
		s := freshShard(t, m, 99)
		plan, err := shardmap.PlanAdd(m, s)
		if err != nil {
			t.Fatal(err)
		}
		wasBalanced := balanced(m.BucketCounts())
		moves := checkPlan(t, m, plan, append(slices.Clone(m.Shards), s), "")
		for _, mv := range moves {
			if wasBalanced && mv.To != s.Name {
				t.Fatalf("balanced map: move %v does not go to the new shard", mv)
			}
		}
		if got := plan.BucketCounts()[s.Name]; got != m.Buckets/(len(m.Shards)+1) {
			// The planner's choice among minimal plans: remainder buckets stay
			// with old shards, the new one takes the floor share.
			t.Fatalf("new shard holds %d buckets, want %d", got, m.Buckets/(len(m.Shards)+1))
		}
		// Deterministic: the same input plans the same map.
		again, _ := shardmap.PlanAdd(m, s)
		if !reflect.DeepEqual(export(again), export(plan)) {
			t.Fatal("PlanAdd is not deterministic")
		}
	})
}

// TestPlanRemoveProperties: PlanRemove on random valid maps.
func TestPlanRemoveProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := genMap(t)
		if len(m.Shards) == 1 {
			if _, err := shardmap.PlanRemove(m, m.Shards[0].Name); err == nil {
				t.Fatal("removed the only shard")
			}
			return
		}
		i := rapid.IntRange(0, len(m.Shards)-1).Draw(t, "victim")
		victim := m.Shards[i].Name
		plan, err := shardmap.PlanRemove(m, victim)
		if err != nil {
			t.Fatal(err)
		}
		wasBalanced := balanced(m.BucketCounts())
		moves := checkPlan(t, m, plan, slices.Delete(slices.Clone(m.Shards), i, i+1), victim)
		for _, mv := range moves {
			if wasBalanced && mv.From != victim {
				t.Fatalf("balanced map: move %v does not come from the removed shard", mv)
			}
		}
		if _, err := plan.ShardByName(victim); err == nil {
			t.Fatal("removed shard still in the map")
		}
	})
}

// TestPlanSequence: a long random sequence of plans keeps every invariant
// and the epoch counts the plans.
func TestPlanSequence(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := genMap(t)
		epoch := m.Epoch
		for step := range rapid.IntRange(1, 20).Draw(t, "steps") {
			var plan *shardmap.Map
			var err error
			if len(m.Shards) > 1 && (len(m.Shards) >= min(m.Buckets, 16) || rapid.Bool().Draw(t, "remove")) {
				i := rapid.IntRange(0, len(m.Shards)-1).Draw(t, "victim")
				plan, err = shardmap.PlanRemove(m, m.Shards[i].Name)
				if err == nil {
					checkPlan(t, m, plan, slices.Delete(slices.Clone(m.Shards), i, i+1), m.Shards[i].Name)
				}
			} else {
				s := freshShard(t, m, step)
				plan, err = shardmap.PlanAdd(m, s)
				if err == nil {
					checkPlan(t, m, plan, append(slices.Clone(m.Shards), s), "")
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			m = plan
		}
		if m.Epoch <= epoch {
			t.Fatalf("epoch went from %d to %d", epoch, m.Epoch)
		}
	})
}

func TestMinMoves(t *testing.T) {
	tests := []struct {
		cur     []int
		buckets int
		want    int
	}{
		{[]int{8, 8, 0}, 16, 5},
		{[]int{14, 2, 0}, 16, 8}, // targets 6,5,5: 14 gives 8
		{[]int{10, 6}, 16, 2},    // 8,8
		{[]int{6, 5, 5}, 16, 0},  // already even
		{[]int{5, 5, 6}, 16, 0},  // the remainder may sit anywhere
		{[]int{16, 0, 0, 0}, 16, 12},
		{[]int{3, 3, 3, 3, 4}, 16, 0},
	}
	for _, tt := range tests {
		if got := minMoves(tt.cur, tt.buckets); got != tt.want {
			t.Errorf("minMoves(%v, %d) = %d, want %d", tt.cur, tt.buckets, got, tt.want)
		}
	}
}
