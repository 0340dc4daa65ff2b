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
	var reshard, lease, others []mutant.Kind
	for _, m := range all {
		switch {
		case m.InGroup(mutant.ReshardGroup):
			reshard = append(reshard, m.Kind)
		case slices.Contains(m.NeedsFaults, "catalog-cut"):
			lease = append(lease, m.Kind)
		default:
			others = append(others, m.Kind)
		}
	}
	if len(reshard) != 5 || len(others) != 10 || !slices.Equal(lease, []mutant.Kind{mutant.ProxyIgnoresLease, mutant.RouterIgnoresLease}) {
		t.Fatalf("%d resharding mutants, %v lease ones and %d others, want 5, [%s %s] and 10", len(reshard), lease, len(others), mutant.ProxyIgnoresLease, mutant.RouterIgnoresLease)
	}
	noMoves := &chaos.Scenario{Faults: []chaos.ScenarioFault{{Kind: "lost-ack"}, {Kind: "shard-crash"}}}
	moves := &chaos.Scenario{Faults: []chaos.ScenarioFault{{Kind: "move"}, {Kind: "mover-kill"}}}
	cuts := &chaos.Scenario{Faults: []chaos.ScenarioFault{{Kind: "move"}, {Kind: "mover-kill"}, {Kind: "catalog-cut"}}}
	for _, c := range []struct {
		name               string
		only               []string
		sc                 *chaos.Scenario
		wantList, wantSkip []mutant.Kind
	}{
		{"all, no move faults", nil, noMoves, others, append(slices.Clone(reshard), lease...)},
		{"all, move faults", nil, moves, append(slices.Clone(others), reshard...), lease},
		{"all, move faults and catalog cuts", nil, cuts, kindsOf(all), nil},
		{"the lease mutants", []string{"proxy-ignores-lease", "router-ignores-lease"}, noMoves, lease, nil},
		{"one lease mutant", []string{"router-ignores-lease"}, noMoves, []mutant.Kind{mutant.RouterIgnoresLease}, nil},
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
