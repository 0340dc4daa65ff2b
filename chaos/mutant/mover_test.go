package mutant_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/chaos/mutant"
	"github.com/pgshard/pgshard/reshard"
)

// cutOver runs reshard.CutSteps through around as the mover does, each
// step logging its name when it runs (and DeleteSource "delete-source"),
// and returns the log; a step named fail fails.
func cutOver(t *testing.T, around func(context.Context, reshard.CutStep) error, fail string) ([]string, error) {
	t.Helper()
	var log []string
	for _, name := range reshard.CutSteps {
		s := reshard.CutStep{Name: name, Move: catalog.MoveRecord{ID: 1, Lo: 8, Hi: 15},
			Run: func(context.Context) error {
				log = append(log, name)
				if name == fail {
					return errors.New(name + " failed")
				}
				return nil
			},
			DeleteSource: func(context.Context) error { log = append(log, "delete-source"); return nil },
		}
		var err error
		if around == nil {
			err = s.Run(t.Context())
		} else {
			err = around(t.Context(), s)
		}
		if err != nil {
			return log, err
		}
	}
	return log, nil
}

// TestMover: each mover mutant changes the cut-over's steps as documented
// and nothing else; the control (Kind "") is no Around at all.
func TestMover(t *testing.T) {
	around, err := mutant.Mover("")
	if err != nil || around != nil {
		t.Fatalf(`Mover("") = %v, %v; want nil, nil (the production mover)`, around != nil, err)
	}
	all := []string{"freeze", "final-catch-up", "flip"}
	if !slices.Equal(reshard.CutSteps, all) {
		t.Fatalf("reshard.CutSteps = %v: the mutants below name %v", reshard.CutSteps, all)
	}
	for _, c := range []struct {
		kind mutant.Kind
		want []string
	}{
		{mutant.MoveWithoutFinalCatchUp, []string{"freeze", "flip"}},
		{mutant.FlipWithoutFreeze, []string{"final-catch-up", "flip"}},
		{mutant.DeleteSourceBeforeFlip, []string{"freeze", "final-catch-up", "delete-source", "flip"}},
	} {
		t.Run(string(c.kind), func(t *testing.T) {
			around, err := mutant.Mover(c.kind)
			if err != nil {
				t.Fatal(err)
			}
			got, err := cutOver(t, around, "")
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("steps run = %v, %v; want %v", got, err, c.want)
			}
		})
	}
	// A final catch-up that fails is not followed by the delete: the
	// mutant deletes only what it believes copied.
	around, err = mutant.Mover(mutant.DeleteSourceBeforeFlip)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cutOver(t, around, "final-catch-up")
	if err == nil || !slices.Equal(got, []string{"freeze", "final-catch-up"}) {
		t.Errorf("failed catch-up: steps run = %v, %v; want freeze, final-catch-up and its error", got, err)
	}
}
