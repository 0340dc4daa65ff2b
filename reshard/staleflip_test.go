package reshard_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/reshard"
)

// A freeze whose flip was prepared on a map that changed before the flip
// (another writer pushed an epoch while the range was locked) is
// abandoned, nothing flipped, and the next freeze flips on the new map.
func TestFreezeOnAChangedMapIsAbandoned(t *testing.T) {
	e := newEnv(t, 20)
	const lo, hi = 0, 15
	if _, err := reshard.Plan(e.ctx, e.cat, reshard.Request{Lo: lo, Hi: hi, To: e.shards[1].Name}); err != nil {
		t.Fatal(err)
	}
	locked := 0
	var pushed uint64
	hook := func(ctx context.Context, s string, _ catalog.MoveRecord) error {
		if s != "locked" {
			return nil
		}
		locked++
		if locked > 1 {
			return nil
		}
		// Another writer: the same map at the next epoch.
		m, err := e.cat.Load(ctx)
		if err != nil {
			return err
		}
		next := m.Clone()
		next.Epoch = m.Epoch + 1
		pushed = next.Epoch
		return e.cat.Push(ctx, next, m.Epoch)
	}
	// A budget no loaded machine exceeds: only the changed map abandons.
	res, err := reshard.Apply(e.ctx, e.cat, reshard.Options{FreezeBudget: 10 * time.Second, RetryPause: 10 * time.Millisecond, Hook: hook, Log: logf(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || len(res[0].Freezes) != 2 || !res[0].Freezes[0].Abandoned || res[0].Freezes[1].Abandoned {
		t.Fatalf("want a first freeze abandoned and the second flipped, got %+v", res)
	}
	if res[0].Epoch != pushed+1 {
		t.Errorf("flipped at epoch %d, want %d (after the pushed %d)", res[0].Epoch, pushed+1, pushed)
	}
	ms, err := e.cat.Moves(e.ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	last := ms[len(ms)-1]
	fs, err := last.Freezes()
	if err != nil {
		t.Fatal(err)
	}
	if last.Phase != catalog.PhaseDone || last.ToEpoch != pushed+1 || len(fs) != 2 || fs[0].Why != catalog.WhyMapChanged || fs[1].Outcome != catalog.FreezeFlipped {
		t.Errorf("journal: %+v, freezes %+v; want done at epoch %d, a first freeze abandoned (map changed), the second flipped", last, fs, pushed+1)
	}
	m, err := e.cat.Load(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Epoch != pushed+1 || m.ShardForBucket(lo).Name != e.shards[1].Name || m.ShardForBucket(hi+1).Name != e.shards[0].Name {
		t.Errorf("after the move: epoch %d, ranges %v", m.Epoch, m.Ranges)
	}
}
