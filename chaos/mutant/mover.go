package mutant

import (
	"context"
	"fmt"

	"github.com/pgshard/pgshard/reshard"
)

// Mover returns the reshard.Options.Around of a LevelMover mutant: the
// chaos run's move faults give it to every mover they run (moves, resumed
// and finished moves alike), so the run's mover is the broken one
// throughout. Kind "" returns nil (the production mover); any other
// level's kind is an error.
//
//   - MoveWithoutFinalCatchUp: step final-catch-up is skipped.
//   - FlipWithoutFreeze: step freeze is skipped (no range lock, the
//     source's fence stays owned until the flip sets it moved).
//   - DeleteSourceBeforeFlip: step final-catch-up, once it succeeded,
//     deletes the range's rows on the source (CutStep.DeleteSource).
//
// Every other step runs as it is.
func Mover(k Kind) (func(context.Context, reshard.CutStep) error, error) {
	if k == "" {
		return nil, nil
	}
	if _, err := lookupLevel(k, LevelMover, "Mover"); err != nil {
		return nil, err
	}
	switch k {
	case MoveWithoutFinalCatchUp:
		return skip("final-catch-up"), nil
	case FlipWithoutFreeze:
		return skip("freeze"), nil
	case DeleteSourceBeforeFlip:
		return func(ctx context.Context, s reshard.CutStep) error {
			if err := s.Run(ctx); err != nil || s.Name != "final-catch-up" {
				return err
			}
			if err := s.DeleteSource(ctx); err != nil {
				return fmt.Errorf("mutant %s: %w", DeleteSourceBeforeFlip, err)
			}
			return nil
		}, nil
	}
	return nil, fmt.Errorf("mutant Mover: %q has no mover implementation", k) // unreachable: every mover kind has one
}

// skip is an Around that skips the step named name and runs the others.
func skip(name string) func(context.Context, reshard.CutStep) error {
	return func(ctx context.Context, s reshard.CutStep) error {
		if s.Name == name {
			return nil
		}
		return s.Run(ctx)
	}
}
