package reshard_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pgshard/pgshard/reshard"
)

// TestAroundGetsTheCutSteps: Options.Around is given each step of the
// freeze, in CutSteps order, with the move and the source's delete in
// hand; an Around that runs every step is the production mover (the move
// completes and every row is where the map says, exactly once).
func TestAroundGetsTheCutSteps(t *testing.T) {
	e := newEnv(t, 60)
	const lo, hi = 40, 55
	m, err := e.cat.Load(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	to := e.shards[1].Name
	if m.ShardForBucket(lo).Name == to {
		to = e.shards[0].Name
	}
	if _, err := reshard.Plan(e.ctx, e.cat, reshard.Request{Lo: lo, Hi: hi, To: to}); err != nil {
		t.Fatal(err)
	}
	var got []string
	around := func(ctx context.Context, s reshard.CutStep) error {
		got = append(got, s.Name)
		if s.Move.Lo != lo || s.Move.Hi != hi || s.Run == nil || s.DeleteSource == nil {
			t.Errorf("step %s: move %d-%d, run %v, delete %v; want %d-%d and both", s.Name, s.Move.Lo, s.Move.Hi, s.Run != nil, s.DeleteSource != nil, lo, hi)
		}
		return s.Run(ctx)
	}
	if _, err := reshard.Apply(e.ctx, e.cat, reshard.Options{FreezeBudget: 2 * time.Second, Around: around, Log: logf(t)}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, reshard.CutSteps) {
		t.Errorf("Around got %v, want %v (one freeze)", got, reshard.CutSteps)
	}
	e.ownedOnce(lo, hi)
	e.check()
}
