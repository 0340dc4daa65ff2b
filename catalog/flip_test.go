package catalog_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/shardmap"
)

// frozenMove pushes m (epoch 1) to c and journals one move, frozen, of
// buckets lo..hi from → to.
func frozenMove(t *testing.T, c *catalog.Catalog, m *shardmap.Map, mv shardmap.Move) catalog.MoveRecord {
	t.Helper()
	ctx := testCtx(t)
	if err := c.Push(ctx, m, 0); err != nil {
		t.Fatal(err)
	}
	ms, err := c.PlanMoves(ctx, m.Epoch, []shardmap.Move{mv})
	if err != nil || len(ms) != 1 {
		t.Fatalf("plan: %v, %v", ms, err)
	}
	if err := c.UpdateMove(ctx, ms[0].ID, nil, catalog.MoveUpdate{Phase: catalog.PhaseFrozen}); err != nil {
		t.Fatal(err)
	}
	return ms[0]
}

// generationRows dumps the catalog rows of generation epoch (all but
// pushed_at, the server's clock), as text, in a fixed order.
func generationRows(t *testing.T, dsn string, epoch uint64) []string {
	t.Helper()
	ctx := testCtx(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `
		SELECT 'generation ' || (to_jsonb(g) - 'pushed_at')::text FROM pgshard_catalog.generations g WHERE epoch = $1::bigint
		UNION ALL (SELECT 'shard ' || to_jsonb(s)::text FROM pgshard_catalog.shards s WHERE epoch = $1::bigint ORDER BY position)
		UNION ALL (SELECT 'range ' || to_jsonb(r)::text FROM pgshard_catalog.ranges r WHERE epoch = $1::bigint ORDER BY lo, shard)`,
		pgx.QueryExecModeExec, int64(epoch))
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A flip writes the same rows as a push of Reassign's successor (the
// one-statement-at-a-time path FlipMove used to take), and journals the
// move flipped at the new epoch.
func TestFlipWritesTheSuccessor(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		ctx := testCtx(t)
		m := testMap(t, 1, 64, "s0", "s1", "s2")
		mv := shardmap.Move{Lo: 0, Hi: 9, From: m.Ranges[0].Shard, To: "s2"}

		c, dsn := installed(t, mode)
		rec := frozenMove(t, c, m, mv)
		plan, err := c.PrepareFlip(ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if plan.Epoch != 1 || plan.Next.Epoch != 2 {
			t.Fatalf("plan: epoch %d → %d, want 1 → 2", plan.Epoch, plan.Next.Epoch)
		}
		to, err := c.Flip(ctx, plan)
		if err != nil || to != 2 {
			t.Fatalf("flip: %d, %v", to, err)
		}

		// The reference: the same successor, pushed.
		ref, refDSN := installed(t, mode)
		if err := ref.Push(ctx, m, 0); err != nil {
			t.Fatal(err)
		}
		want, err := catalog.Reassign(m, mv.Lo, mv.Hi, mv.From, mv.To)
		if err != nil {
			t.Fatal(err)
		}
		if err := ref.Push(ctx, want, 1); err != nil {
			t.Fatal(err)
		}
		got, wantRows := generationRows(t, dsn, 2), generationRows(t, refDSN, 2)
		if len(got) == 0 || len(got) != len(wantRows) {
			t.Fatalf("generation 2 rows:\n%q\nwant\n%q", got, wantRows)
		}
		for i := range got {
			if got[i] != wantRows[i] {
				t.Errorf("row %d: %s, want %s", i, got[i], wantRows[i])
			}
		}
		loaded, err := c.Load(ctx)
		if err != nil || mustMarshal(t, loaded) != mustMarshal(t, want) {
			t.Errorf("loaded after the flip: %v\n%s\nwant\n%s", err, mustMarshal(t, loaded), mustMarshal(t, want))
		}
		ms, err := c.Moves(ctx, false)
		if err != nil || len(ms) != 1 || ms[0].Phase != catalog.PhaseFlipped || ms[0].ToEpoch != 2 || ms[0].Error != "" {
			t.Errorf("journal after the flip: %+v, %v", ms, err)
		}
		// A second flip of the same plan finds the map changed.
		if _, err := c.Flip(ctx, plan); !errors.Is(err, catalog.ErrStaleFlip) {
			t.Errorf("flip again: want ErrStaleFlip, got %v", err)
		}
	})
}

// A plan made on an epoch the catalog has left is refused with
// ErrStaleFlip, and nothing is written; FlipMove prepares again.
func TestFlipStalePlan(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		ctx := testCtx(t)
		m := testMap(t, 1, 64)
		c, dsn := installed(t, mode)
		rec := frozenMove(t, c, m, shardmap.Move{Lo: 0, Hi: 9, From: m.Ranges[0].Shard, To: "s1"})
		plan, err := c.PrepareFlip(ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		// Another writer pushes epoch 2 (the plan's own next epoch).
		other := m.Clone()
		other.Epoch = 2
		if err := c.Push(ctx, other, 1); err != nil {
			t.Fatal(err)
		}
		before := generationRows(t, dsn, 2)
		_, err = c.Flip(ctx, plan)
		var se *catalog.StaleFlipError
		if !errors.Is(err, catalog.ErrStaleFlip) || !errors.As(err, &se) || se.Expected != 1 || se.Found != 2 || se.Move != rec.ID {
			t.Fatalf("flip on a stale plan: want a StaleFlipError 1 → found 2, got %v", err)
		}
		if e, err := c.Epoch(ctx); err != nil || e != 2 {
			t.Errorf("epoch after the stale flip: %d, %v; want 2", e, err)
		}
		if after := generationRows(t, dsn, 2); !slices.Equal(after, before) {
			t.Errorf("generation 2 changed: %q, was %q", after, before)
		}
		if rows := generationRows(t, dsn, 3); len(rows) != 0 {
			t.Errorf("generation 3 written: %q", rows)
		}
		ms, err := c.Moves(ctx, false)
		if err != nil || len(ms) != 1 || ms[0].Phase != catalog.PhaseFrozen || ms[0].ToEpoch != 0 {
			t.Errorf("journal after the stale flip: %+v, %v", ms, err)
		}
		// FlipMove prepares on the current map and flips.
		if to, err := c.FlipMove(ctx, rec.ID); err != nil || to != 3 {
			t.Errorf("FlipMove: %d, %v; want 3", to, err)
		}
	})
}

// A move that is no longer frozen when its plan is flipped is refused
// with ErrMovePhase, and nothing is written.
func TestFlipPhaseCheck(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		ctx := testCtx(t)
		m := testMap(t, 1, 64)
		c, dsn := installed(t, mode)
		rec := frozenMove(t, c, m, shardmap.Move{Lo: 0, Hi: 9, From: m.Ranges[0].Shard, To: "s1"})
		plan, err := c.PrepareFlip(ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.UpdateMove(ctx, rec.ID, []string{catalog.PhaseFrozen}, catalog.MoveUpdate{Phase: catalog.PhaseCatchingUp}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Flip(ctx, plan); !errors.Is(err, catalog.ErrMovePhase) {
			t.Fatalf("flip of a move not frozen: want ErrMovePhase, got %v", err)
		}
		if e, err := c.Epoch(ctx); err != nil || e != 1 {
			t.Errorf("epoch: %d, %v; want 1", e, err)
		}
		if rows := generationRows(t, dsn, 2); len(rows) != 0 {
			t.Errorf("generation 2 written: %q", rows)
		}
		if _, err := c.PrepareFlip(ctx, rec.ID); !errors.Is(err, catalog.ErrMovePhase) {
			t.Errorf("prepare for a move not frozen: want ErrMovePhase, got %v", err)
		}
		if _, err := c.FlipMove(ctx, rec.ID); !errors.Is(err, catalog.ErrMovePhase) {
			t.Errorf("FlipMove of a move not frozen: want ErrMovePhase, got %v", err)
		}
	})
}
