package cli

import (
	"slices"
	"testing"

	"github.com/pgshard/pgshard/chaos"
	"github.com/pgshard/pgshard/chaos/mutant"
)

func kindsOf(ms []mutant.Mutant) []mutant.Kind {
	var out []mutant.Kind
	for _, m := range ms {
		out = append(out, m.Kind)
	}
	return out
}

// TestSelectMutants: without --only, a scenario without move faults skips
// the resharding mutants and one with them runs every mutant; --only takes
// kinds and the group "reshard", whatever the scenario.
func TestSelectMutants(t *testing.T) {
	all := mutant.All()
	var reshard, others []mutant.Kind
	for _, m := range all {
		if m.InGroup(mutant.ReshardGroup) {
			reshard = append(reshard, m.Kind)
		} else {
			others = append(others, m.Kind)
		}
	}
	if len(reshard) != 5 || len(others) != 10 {
		t.Fatalf("%d resharding mutants and %d others, want 5 and 10", len(reshard), len(others))
	}
	noMoves := &chaos.Scenario{Faults: []chaos.ScenarioFault{{Kind: "lost-ack"}, {Kind: "shard-crash"}}}
	moves := &chaos.Scenario{Faults: []chaos.ScenarioFault{{Kind: "move"}, {Kind: "mover-kill"}}}
	for _, c := range []struct {
		name               string
		only               []string
		sc                 *chaos.Scenario
		wantList, wantSkip []mutant.Kind
	}{
		{"all, no move faults", nil, noMoves, others, reshard},
		{"all, move faults", nil, moves, kindsOf(all), nil},
		{"the group", []string{"reshard"}, moves, reshard, nil},
		{"the group, no move faults", []string{"reshard"}, noMoves, reshard, nil},
		{"kinds and the group", []string{"cas-without-version", "reshard"}, moves,
			append([]mutant.Kind{mutant.CASWithoutVersion}, reshard...), nil},
		{"one kind", []string{"flip-without-freeze"}, noMoves, []mutant.Kind{mutant.FlipWithoutFreeze}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			list, skipped := selectMutants(all, c.only, c.sc)
			if got := kindsOf(list); !slices.Equal(got, c.wantList) {
				t.Errorf("run %v, want %v", got, c.wantList)
			}
			if got := kindsOf(skipped); !slices.Equal(got, c.wantSkip) {
				t.Errorf("skipped %v, want %v", got, c.wantSkip)
			}
		})
	}
}
