package catalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/shardmap"
)

// FlipPlan is a move's flip computed ahead of it (PrepareFlip): the
// successor of the generation at Epoch in which the move's buckets belong
// to its destination. Flip writes it only if the catalog is still at
// Epoch.
type FlipPlan struct {
	Move     int64
	Lo, Hi   int
	From, To string
	// Epoch is the catalog's epoch the plan was computed on; Next (epoch
	// Epoch+1) is its successor, checked by CheckSuccessor.
	Epoch uint64
	Next  *shardmap.Map
}

// ErrStaleFlip is matched (errors.Is) by a *StaleFlipError.
var ErrStaleFlip = errors.New("the catalog's map changed since the flip was prepared")

// StaleFlipError means Flip found the catalog at another epoch than the
// one its plan was computed on (another move flipped, or a map was
// pushed, in between). Nothing was written: prepare the flip again.
type StaleFlipError struct {
	Move     int64
	Expected uint64 // the plan's epoch
	Found    uint64 // the catalog's epoch (0 if it could not be read)
}

func (e *StaleFlipError) Error() string {
	return fmt.Sprintf("flip move %d: the catalog is at epoch %d, not %d as the flip was prepared on (the map changed meanwhile); nothing was written: prepare the flip again",
		e.Move, e.Found, e.Expected)
}

// Is makes errors.Is(err, ErrStaleFlip) true.
func (e *StaleFlipError) Is(target error) bool { return target == ErrStaleFlip }

// PrepareFlip computes move id's flip on the catalog's current generation
// (Reassign, then CheckSuccessor), without writing or locking anything:
// the work of the commit point that can be done before the freeze. The
// move must be frozen (Flip checks it again).
func (c *Catalog) PrepareFlip(ctx context.Context, id int64) (*FlipPlan, error) {
	p := &FlipPlan{Move: id}
	var phase string
	err := c.pool.QueryRow(ctx, `SELECT lo, hi, from_shard, to_shard, phase FROM `+Schema+`.moves WHERE id = $1::bigint`, id).
		Scan(&p.Lo, &p.Hi, &p.From, &p.To, &phase)
	if err != nil {
		return nil, c.wrap(fmt.Sprintf("prepare the flip of move %d", id), err)
	}
	if phase != PhaseFrozen {
		return nil, fmt.Errorf("prepare the flip of move %d: it is %s, not frozen: %w", id, phase, ErrMovePhase)
	}
	prev, err := loadGeneration(ctx, c.pool, `(SELECT epoch FROM `+Schema+`.head)`)
	if err != nil {
		return nil, c.wrap(fmt.Sprintf("prepare the flip of move %d: read the current generation", id), err)
	}
	m, err := Reassign(prev.Map, p.Lo, p.Hi, p.From, p.To)
	if err != nil {
		return nil, fmt.Errorf("prepare the flip of move %d: %w", id, err)
	}
	if err := CheckSuccessor(prev.Map, m); err != nil {
		return nil, fmt.Errorf("prepare the flip of move %d: %w", id, err)
	}
	if m.Epoch > math.MaxInt64 {
		return nil, fmt.Errorf("prepare the flip of move %d: epoch %d does not fit the catalog's BIGINT", id, m.Epoch)
	}
	p.Epoch, p.Next = prev.Map.Epoch, m
	return p, nil
}

// flipRollbackTimeout bounds the ROLLBACK of a flip that did not hold.
const flipRollbackTimeout = 5 * time.Second

// Flip is the commit point of plan's move, in one transaction and two
// round trips to the catalog: one pipelined batch — BEGIN; the head's
// compare-and-swap from plan.Epoch to plan.Next.Epoch (which locks the
// head row: flips of moves running in parallel take turns); the move's
// step to flipped, conditional on its being frozen; the generation's rows
// — then COMMIT if every statement held, else ROLLBACK. A catalog no
// longer at plan.Epoch yields a *StaleFlipError (ErrStaleFlip), a move
// no longer frozen ErrMovePhase; both write nothing. Once it returned nil
// the move can only be completed; if it returned an error nothing was
// written, unless the error is the commit's own (then the journal says
// which: read the move again). It returns the new epoch.
func (c *Catalog) Flip(ctx context.Context, p *FlipPlan) (uint64, error) {
	if p == nil || p.Next == nil || p.Next.Epoch != p.Epoch+1 {
		return 0, errors.New("flip: no plan (PrepareFlip makes one)")
	}
	op := fmt.Sprintf("flip move %d", p.Move)
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return 0, c.wrap(op, err)
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(`UPDATE `+Schema+`.head SET epoch = $1::bigint, updated_at = now() WHERE epoch = $2::bigint`,
		int64(p.Next.Epoch), int64(p.Epoch))
	b.Queue(`UPDATE `+Schema+`.moves SET phase = 'flipped', to_epoch = $2::bigint, error = NULL, updated_at = now()
		WHERE id = $1::bigint AND phase = 'frozen'`, p.Move, int64(p.Next.Epoch))
	for _, st := range generationStatements(p.Next, c.opts.ApplicationName) {
		b.Queue(st.sql, st.args...)
	}
	br := conn.SendBatch(ctx, b)
	held, err := readFlip(br, b.Len())
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && held == flipHeld {
		tag, err := conn.Exec(ctx, `COMMIT`)
		if err != nil {
			return 0, c.wrap(op+": commit", err)
		}
		if tag.String() != "COMMIT" {
			return 0, c.wrap(op, fmt.Errorf("the commit answered %q", tag.String()))
		}
		return p.Next.Epoch, nil
	}
	// Nothing is committed: roll back (a connection left in its
	// transaction is closed by the pool instead).
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flipRollbackTimeout)
	_, _ = conn.Exec(rctx, `ROLLBACK`)
	cancel()
	switch {
	case held == flipStale:
		e := &StaleFlipError{Move: p.Move, Expected: p.Epoch}
		if found, err := c.Epoch(ctx); err == nil {
			e.Found = found
		}
		return 0, e
	case held == flipPhase:
		phase := "not found"
		if err := c.pool.QueryRow(ctx, `SELECT phase FROM `+Schema+`.moves WHERE id = $1::bigint`, p.Move).Scan(&phase); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			phase = "unknown (" + err.Error() + ")"
		}
		return 0, fmt.Errorf("flip move %d: it is %s, not frozen: %w", p.Move, phase, ErrMovePhase)
	}
	return 0, c.wrap(op, err)
}

// What a flip's batch found.
const (
	flipHeld  = iota // every statement held
	flipStale        // the head's compare-and-swap matched no row
	flipPhase        // the move was not frozen
	flipError        // a statement failed
)

// readFlip reads the n results of Flip's batch, in order: BEGIN, the
// head's compare-and-swap, the move's step, then the generation's rows.
// A check that matched no row decides, whatever failed after it.
func readFlip(br pgx.BatchResults, n int) (int, error) {
	for i := range n {
		tag, err := br.Exec()
		if err != nil {
			return flipError, err
		}
		switch {
		case i == 1 && tag.RowsAffected() == 0:
			return flipStale, nil
		case i == 2 && tag.RowsAffected() == 0:
			return flipPhase, nil
		}
	}
	return flipHeld, nil
}

// FlipMove is move id's commit point in one call: PrepareFlip, then
// Flip, again (at most flipMoveTries times in all) when the map changed
// in between. It returns the new epoch.
func (c *Catalog) FlipMove(ctx context.Context, id int64) (uint64, error) {
	var err error
	for range flipMoveTries {
		var p *FlipPlan
		if p, err = c.PrepareFlip(ctx, id); err != nil {
			return 0, err
		}
		var e uint64
		if e, err = c.Flip(ctx, p); !errors.Is(err, ErrStaleFlip) {
			return e, err
		}
	}
	return 0, err
}

const flipMoveTries = 3
