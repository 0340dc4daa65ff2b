package verify_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/verify"
)

// fenceMap is the final map of the fence cases: 8 buckets at epoch 3,
// shard0 owning 0-3 and shard1 4-7.
func fenceMap() verify.MapInfo {
	return verify.MapInfo{Epoch: 3, Buckets: 8, Shards: []verify.MapShard{
		{Name: "shard0", Ordinal: 0, Ranges: [][2]int{{0, 3}}},
		{Name: "shard1", Ordinal: 1, Ranges: [][2]int{{4, 7}}},
	}}
}

// fenceState is a state with no store rows whose shards hold the given
// fences (nil: not dumped).
func fenceState(f0, f1 *verify.Fence) *verify.State {
	id := func(name string, ord int) *verify.Identity {
		return &verify.Identity{Name: name, Ordinal: ord, Buckets: 8, MapEpoch: 1}
	}
	return &verify.State{Map: fenceMap(), Shards: []*verify.ShardState{
		{Name: "shard0", Ordinal: 0, Identity: id("shard0", 0), Fence: f0},
		{Name: "shard1", Ordinal: 1, Identity: id("shard1", 1), Fence: f1},
	}}
}

func on(epoch uint64, rows ...verify.FenceRow) *verify.Fence {
	for i := range rows {
		rows[i].Enabled = true
	}
	return &verify.Fence{Enabled: true, Epoch: epoch, Buckets: 8, Rows: rows}
}

func row(lo, hi int, state string, epoch uint64, owner string) verify.FenceRow {
	return verify.FenceRow{Lo: lo, Hi: hi, State: state, Epoch: epoch, Owner: owner}
}

// movedHistory is a finished run whose end line carries the final map
// (as a run with moves writes it): the header's map had shard0 own 0-5.
func movedHistory(t *testing.T) *verify.History {
	t.Helper()
	first := fenceMap()
	first.Epoch = 2
	first.Shards[0].Ranges = [][2]int{{0, 5}}
	first.Shards[1].Ranges = [][2]int{{6, 7}}
	hj, _ := json.Marshal(first)
	ej, _ := json.Marshal(fenceMap())
	src := `{"type":"header","format":"pgshard-history","version":1,"run":"r1","seed":1,"map":` + string(hj) + `,"schedule":[]}` + "\n" +
		`{"type":"end","t":1,"ops":0,"quiesce":{"ok":true},"map":` + string(ej) + `}` + "\n"
	h, err := verify.ReadHistory(strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func placementViolations(t *testing.T, h *verify.History, st *verify.State) []verify.Violation {
	t.Helper()
	v := verify.Check(context.Background(), h, st, verify.Options{})
	var out []verify.Violation
	for _, x := range v.Violations {
		if x.Invariant == verify.InvPlacement {
			out = append(out, x)
		} else {
			t.Errorf("unexpected %s violation: %s", x.Invariant, x.Summary)
		}
	}
	return out
}

// TestFenceCheck compares hand-built fence rows with the final map: the
// consistent fences of a finished move pass, and each way of breaking
// them is one violation naming the range, the shards and what each
// fence says.
func TestFenceCheck(t *testing.T) {
	// After buckets 4-5 moved from shard0 to shard1 at epoch 3: shard0's
	// other rows keep the epoch migrate set them at (2).
	good0 := func() *verify.Fence {
		return on(3, row(0, 3, "owned", 2, "shard0"), row(4, 5, "moved", 3, "shard1"), row(6, 7, "moved", 2, "shard1"))
	}
	good1 := func() *verify.Fence {
		return on(3, row(0, 3, "moved", 2, "shard0"), row(4, 5, "owned", 3, "shard1"), row(6, 7, "owned", 2, "shard1"))
	}
	cases := []struct {
		name   string
		f0, f1 *verify.Fence
		want   [][]string // each violation's summary contains all of these
	}{
		{"consistent", good0(), good1(), nil},
		{"owned twice",
			good0(), on(3, row(0, 3, "owned", 2, "shard1"), row(4, 5, "owned", 3, "shard1"), row(6, 7, "owned", 2, "shard1")),
			[][]string{{"buckets 0-3", "owned by 2 shards (shard0, shard1)", "shard0: 0-3 owned at epoch 2", "shard1: 0-3 owned at epoch 2"}}},
		{"owned by none",
			good0(), on(3, row(0, 3, "moved", 2, "shard0"), row(4, 5, "moved", 3, "shard1"), row(6, 7, "owned", 2, "shard1")),
			[][]string{{"buckets 4-5 (shard shard1 in the final map)", "owned by no shard", "shard0: 4-5 moved at epoch 3, owner shard1", "shard1: 4-5 moved at epoch 3"}}},
		{"owned by the wrong shard",
			on(3, row(0, 3, "owned", 2, "shard0"), row(4, 5, "owned", 3, "shard0"), row(6, 7, "moved", 2, "shard1")),
			on(3, row(0, 3, "moved", 2, "shard0"), row(4, 5, "moved", 3, "shard0"), row(6, 7, "owned", 2, "shard1")),
			[][]string{{"buckets 4-5 (shard shard1 in the final map)", "owned by shard shard0", "not owned by shard shard1", "its fence: moved at epoch 3, owner shard0"}}},
		{"left frozen",
			on(3, row(0, 3, "owned", 2, "shard0"), row(4, 5, "frozen", 2, "shard0"), row(6, 7, "moved", 2, "shard1")),
			on(3, row(0, 3, "moved", 2, "shard0"), row(4, 5, "incoming", 2, "shard0"), row(6, 7, "owned", 2, "shard1")),
			[][]string{{"buckets 4-5", "left frozen on shard0", "left incoming on shard1", "shard0: 4-5 frozen at epoch 2"}}},
		{"epoch mismatch",
			good0(), on(5, row(0, 3, "moved", 2, "shard0"), row(4, 5, "owned", 5, "shard1"), row(6, 7, "owned", 2, "shard1")),
			[][]string{
				{"fence configuration of shard shard1", "epoch 5, newer than the final map's 3"},
				{"row 4-5 of shard shard1's fence (owned at epoch 5, owner shard1)", "epoch 5, not in 1..3"},
			}},
		{"no fence at the final epoch",
			on(2, row(0, 3, "owned", 2, "shard0"), row(4, 5, "moved", 2, "shard1"), row(6, 7, "moved", 2, "shard1")),
			on(2, row(0, 3, "moved", 2, "shard0"), row(4, 5, "owned", 2, "shard1"), row(6, 7, "owned", 2, "shard1")),
			[][]string{{"no shard's fence is at the final map's epoch 3", "shard shard0's, at 2"}}},
		{"gap",
			on(3, row(0, 3, "owned", 2, "shard0"), row(6, 7, "moved", 2, "shard1")), good1(),
			[][]string{{"buckets 4-5", "in no row of the fence of shard0", "shard0: no row"}}},
		{"fence off after moves",
			good0(), &verify.Fence{Epoch: 3, Buckets: 8, Rows: good1().Rows},
			[][]string{{"the fence of shard shard1 is off (epoch 3)"}}},
		{"no fence tables after moves",
			good0(), &verify.Fence{NoTables: true},
			[][]string{{"shard shard1 has no fence tables"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := placementViolations(t, movedHistory(t), fenceState(c.f0, c.f1))
			if len(got) != len(c.want) {
				for _, v := range got {
					t.Log(v.Summary)
				}
				t.Fatalf("%d placement violations, want %d", len(got), len(c.want))
			}
			for _, w := range c.want {
				found := false
				for _, v := range got {
					ok := true
					for _, s := range w {
						ok = ok && strings.Contains(v.Summary, s)
					}
					if ok {
						found = true
						if len(v.Rows) == 0 {
							t.Errorf("violation %q names no row", v.Summary)
						}
					}
				}
				if !found {
					for _, v := range got {
						t.Log(v.Summary)
					}
					t.Errorf("no violation saying all of %q", w)
				}
			}
		})
	}
}

// TestFenceCheckWithoutMoves: in a run without moves a fence that is off
// or absent is not compared (someone may have turned it off), but an on
// fence still must agree with the map.
func TestFenceCheckWithoutMoves(t *testing.T) {
	h := emptyHistory(t, fenceMap())
	same := func() *verify.Fence {
		return on(3, row(0, 3, "owned", 3, "shard0"), row(4, 7, "moved", 3, "shard1"))
	}
	if got := placementViolations(t, h, fenceState(same(), &verify.Fence{NoTables: true})); len(got) != 0 {
		t.Errorf("a shard without fence tables: %+v", got)
	}
	if got := placementViolations(t, h, fenceState(same(), &verify.Fence{Epoch: 3, Buckets: 8})); len(got) != 0 {
		t.Errorf("a fence turned off: %+v", got)
	}
	if got := placementViolations(t, h, fenceState(nil, nil)); len(got) != 0 {
		t.Errorf("no fences: %+v", got)
	}
	// A state dumped without fences, also after moves: not compared.
	if got := placementViolations(t, movedHistory(t), fenceState(nil, nil)); len(got) != 0 {
		t.Errorf("a state without fences after moves: %+v", got)
	}
	bad := same()
	bad.Rows[0].State = "frozen"
	got := placementViolations(t, h, fenceState(bad, nil))
	if len(got) != 1 || !strings.Contains(got[0].Summary, "buckets 0-3") || !strings.Contains(got[0].Summary, "left frozen on shard0") {
		t.Errorf("a frozen range without moves: %+v", got)
	}
}
