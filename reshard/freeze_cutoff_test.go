package reshard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/reshard"
)

// TestSlowLastCatchUpIsCutOff: a last catch-up that runs past the freeze's
// budget (here a round stuck in a 30 s query on the source) is cut off at
// the budget and the freeze abandoned — the writers are not held for the
// whole round — and the next freeze, with a catch-up that runs, flips.
func TestSlowLastCatchUpIsCutOff(t *testing.T) {
	e := newEnv(t, 40)
	const lo, hi = 0, 15
	if _, err := reshard.Plan(e.ctx, e.cat, reshard.Request{Lo: lo, Hi: hi, To: e.shards[1].Name}); err != nil {
		t.Fatal(err)
	}
	src := e.pools[e.shards[0].Name]
	stuck := 0
	around := func(ctx context.Context, s reshard.CutStep) error {
		if s.Name != "final-catch-up" || stuck > 0 {
			return s.Run(ctx)
		}
		stuck++
		// Not cut off, the query ends after 30 s without an error and
		// the freeze is abandoned for ending late, for another reason.
		_, err := src.Exec(ctx, `SELECT pg_sleep(30)`)
		return err
	}
	res, err := reshard.Apply(e.ctx, e.cat, reshard.Options{FreezeBudget: 300 * time.Millisecond, RetryPause: 10 * time.Millisecond, Around: around, Log: logf(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || len(res[0].Freezes) < 2 {
		t.Fatalf("want two freezes or more, got %+v", res)
	}
	fs := res[0].Freezes
	if first := fs[0]; !first.Abandoned || !strings.Contains(first.Reason, "cut off at the budget") {
		t.Errorf("first freeze %+v: want it abandoned, its last catch-up cut off at the budget", first)
	}
	if last := fs[len(fs)-1]; last.Abandoned {
		t.Errorf("last freeze %+v: want it flipped", last)
	}
	e.ownedOnce(lo, hi)
	e.check()
}
