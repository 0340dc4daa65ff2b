package reshard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/internal/ctxtime"
)

// Steps are the points of a move at which Options.Hook is called, in the
// order a move passes them; each follows a journal step or a change on a
// shard, so a mover stopped at any of them has left the state a crash
// there leaves.
var Steps = []string{
	"copying",      // journaled copying; fences set (destination incoming, source split)
	"copied",       // capture on, range copied, journaled catching_up
	"caught-up",    // catch-up rounds done, before the first freeze
	"frozen",       // journaled frozen, before the range lock is taken
	"locked",       // range lock held, source fence frozen (committed)
	"flip",         // last catch-up done, before the catalog's flip
	"flipped",      // the catalog's flip committed (the commit point)
	"source-moved", // source fence moved, destination not yet owned
	"released",     // destination owned, range lock released
	"cleaning",     // journaled cleaning
	"cleaned",      // source rows and capture gone, before journaling done
}

// CutSteps name the steps of a freeze that Options.Around is given, in
// the order a freeze runs them.
var CutSteps = []string{
	"freeze",         // the range lock EXCLUSIVE and the source's fence frozen (committed)
	"final-catch-up", // the last catch-up, until a round leaves no record of its snapshot
	"flip",           // catalog.Flip (prepared before the lock): the commit point
}

// CutStep is one step of a freeze, as Options.Around sees it.
type CutStep struct {
	// Name is one of CutSteps.
	Name string
	// Move is the move being cut over.
	Move catalog.MoveRecord
	// Run runs the real step.
	Run func(context.Context) error
	// DeleteSource deletes the range's rows on the source, as the
	// clean-up does after the flip.
	DeleteSource func(context.Context) error
}

// around runs step name (real) through Options.Around when it is set.
func (mv *mover) around(ctx context.Context, name string, m catalog.MoveRecord, src *shard, real func(context.Context) error) error {
	if mv.opts.Around == nil {
		return real(ctx)
	}
	return mv.opts.Around(ctx, CutStep{Name: name, Move: m, Run: real, DeleteSource: func(ctx context.Context) error {
		_, err := deleteRange(ctx, src, m.Lo, m.Hi, mv.nb, mv.opts.CleanupBatch, nil)
		return err
	}})
}

// ErrInjected is what a test's hook returns to stop a mover at a step.
var ErrInjected = errors.New("reshard: stopped at a step (injected)")

// errAbandoned means a freeze could not finish within its budget and
// was undone: the range is owned by its source again.
var errAbandoned = errors.New("freeze abandoned")

// errKeptComing is errAbandoned for a last catch-up that never drained:
// changes kept coming faster than it replayed them.
var errKeptComing = fmt.Errorf("%w: changes kept coming during the freeze", errAbandoned)

// recordTimeout bounds the journal write of a freeze that failed (the
// catalog may be what failed).
const recordTimeout = 5 * time.Second

// mover runs the moves of one Apply or Abort.
type mover struct {
	cat    *catalog.Catalog
	opts   Options
	shards map[string]*shard
	nb     int

	mu   sync.Mutex
	flip time.Duration // how long the last flip took, to its release (0: none yet)
}

// afterFlip is the part of budget kept for the flip and what follows it.
func (mv *mover) afterFlip(budget time.Duration) time.Duration {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	if mv.flip == 0 {
		return budget / 4
	}
	return min(mv.flip, budget/2)
}

func (mv *mover) setAfterFlip(d time.Duration) {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	mv.flip = d
}

// Result is what one move did, for reports.
type Result struct {
	Move       catalog.MoveRecord
	RowsCopied int64         // by the first copy
	CopyTime   time.Duration // of the first copy
	Replayed   int64         // change records replayed
	Freezes    []Freeze      // every freeze tried, in order
	Epoch      uint64        // the epoch its flip wrote
	// Paused is the time the pacer (Options.DutyCycle) held the move's
	// background work back, in Pauses pauses; PaceWaived counts the
	// catch-up rounds whose pause was shortened or dropped because the
	// backlog was not shrinking.
	Paused     time.Duration
	Pauses     int
	PaceWaived int
	// CleanupRows are the rows the clean-up deleted on the source, in
	// CleanupBatches committed batches (Options.CleanupBatch rows at
	// most each); a clean-up resumed from the journal counts only what
	// it deleted itself.
	CleanupRows    int64
	CleanupBatches int

	// pace paces this move's background work (nil: none, e.g. abort);
	// catchUp scales its pauses after the catch-up's rounds, across the
	// move's catch-ups (nil until the first).
	pace    *pacer
	catchUp *catchUpPace

	// flipped is the freeze that flipped, until the clean-up's journal
	// step records it (in the move's detail; ARCHITECTURE.md §6).
	flipped *catalog.FreezeRecord
}

// Freeze is one freeze of a range as clients saw it: from the request of
// the range lock (new writers queue behind it) to its release. The
// journal records each in the move's detail (catalog.FreezeRecord).
type Freeze struct {
	Start     time.Time // the range lock's request (with the monotonic clock)
	Duration  time.Duration
	Abandoned bool
	Why       string // why it was abandoned: catalog.WhyDeadline, WhyCatchUp, WhyMapChanged or WhyError
	Reason    string // why it was abandoned, in words
	// Flip is how long the catalog's flip (the commit point, under the
	// lock) took in a freeze that reached it; 0 in one that did not.
	Flip time.Duration

	flipped bool // the flip committed (the move passed its commit point)
	stopped bool // Options.Hook stopped the mover in it (a test's crash)
}

// Record is f as the journal records it.
func (f Freeze) Record() catalog.FreezeRecord {
	outcome, why, reason := catalog.FreezeFlipped, "", ""
	if f.Abandoned || !f.flipped {
		outcome, why, reason = catalog.FreezeAbandoned, f.Why, f.Reason
		if why == "" {
			why = catalog.WhyError
		}
	}
	return catalog.NewFreezeRecord(f.Start, f.Duration, outcome, why, reason)
}

func (mv *mover) hook(ctx context.Context, step string, m catalog.MoveRecord) error {
	if mv.opts.Hook == nil {
		return nil
	}
	return mv.opts.Hook(ctx, step, m)
}

func (mv *mover) logf(format string, args ...any) {
	if mv.opts.Log != nil {
		mv.opts.Log(format, args...)
	}
}

func (mv *mover) shard(name string) (*shard, error) {
	s, ok := mv.shards[name]
	if !ok {
		return nil, fmt.Errorf("shard %q is not in the catalog's map", name)
	}
	return s, nil
}

func (mv *mover) journal(ctx context.Context, m catalog.MoveRecord, from []string, u catalog.MoveUpdate) error {
	if u.Owner == "" {
		u.Owner = mv.opts.Owner
	}
	return mv.cat.UpdateMove(ctx, m.ID, from, u)
}

// run takes move m from its journaled phase to done.
func (mv *mover) run(ctx context.Context, m catalog.MoveRecord) (*Result, error) {
	res := &Result{Move: m, Epoch: m.ToEpoch, pace: newPacer(mv.opts)}
	defer func() { res.Paused, res.Pauses = res.pace.paused, res.pace.pauses }()
	src, err := mv.shard(m.From)
	if err != nil {
		return res, err
	}
	dst, err := mv.shard(m.To)
	if err != nil {
		return res, err
	}
	if !catalog.Flipped(m.Phase) {
		if err := mv.prepare(ctx, m, src, dst, res); err != nil {
			return res, err
		}
		if err := mv.cutOver(ctx, m, src, dst, res); err != nil {
			return res, err
		}
	}
	return res, mv.finish(ctx, m, src, dst, res)
}

// prepare sets the fences, starts the capture and copies the range (or,
// when the journal says the copy is done and the capture still runs,
// resumes with the catch-up), then catches up until little is left.
func (mv *mover) prepare(ctx context.Context, m catalog.MoveRecord, src, dst *shard, res *Result) error {
	epoch, err := mv.cat.Epoch(ctx)
	if err != nil {
		return err
	}
	// Destination: incoming from the source (refuses every key); source:
	// owned, as a fence row of its own so its lock is the range's lock
	// (a freeze that a dead mover left is undone here: the flip was not
	// recorded, so the source still owns the range).
	if err := dst.setFence(ctx, nil, m.Lo, m.Hi, "incoming", m.From, epoch, []string{"moved", "incoming"}, true); err != nil {
		return err
	}
	if err := src.setFence(ctx, nil, m.Lo, m.Hi, "owned", m.From, epoch, []string{"owned", "frozen"}, true); err != nil {
		return err
	}
	resume := false
	if m.Phase == catalog.PhaseCatchingUp || m.Phase == catalog.PhaseFrozen {
		var on bool
		if err := src.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pgshard_move_capture WHERE move_id = $1::bigint)`, m.ID).Scan(&on); err != nil {
			return fmt.Errorf("shard %s: %w", src.name, err)
		}
		resume = on
	}
	if resume {
		if m.Phase == catalog.PhaseFrozen {
			if err := mv.journal(ctx, m, []string{catalog.PhaseFrozen}, catalog.MoveUpdate{Phase: catalog.PhaseCatchingUp,
				Error: "resumed after a freeze its mover did not finish (not flipped: undone)"}); err != nil {
				return err
			}
		}
		mv.logf("move %d (%d-%d %s→%s): resuming the catch-up", m.ID, m.Lo, m.Hi, m.From, m.To)
	} else {
		if err := mv.journal(ctx, m, nil, catalog.MoveUpdate{Phase: catalog.PhaseCopying}); err != nil {
			return err
		}
		if err := mv.hook(ctx, "copying", m); err != nil {
			return err
		}
		if err := mv.retryLocked(ctx, func() error {
			return withLockTimeout(ctx, src, mv.opts.DDLLockTimeout, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `SELECT pgshard_move_capture_begin($1::bigint, $2::int, $3::int)`, m.ID, m.Lo, m.Hi)
				return err
			})
		}); err != nil {
			return fmt.Errorf("shard %s: start the capture of %d-%d: %w", src.name, m.Lo, m.Hi, err)
		}
		t0 := time.Now()
		n, err := copyRange(ctx, src, dst, m.ID, m.Lo, m.Hi, mv.nb, res.pace)
		if err != nil {
			return fmt.Errorf("move %d: copy %d-%d %s→%s: %w", m.ID, m.Lo, m.Hi, m.From, m.To, err)
		}
		res.RowsCopied, res.CopyTime = n, time.Since(t0)
		mv.logf("move %d (%d-%d %s→%s): copied %d rows in %v (%.0f rows/s)", m.ID, m.Lo, m.Hi, m.From, m.To,
			n, res.CopyTime.Round(time.Millisecond), float64(n)/max(res.CopyTime.Seconds(), 1e-9))
		if err := mv.journal(ctx, m, []string{catalog.PhaseCopying}, catalog.MoveUpdate{Phase: catalog.PhaseCatchingUp, AddRows: n,
			Detail: mustJSON(map[string]any{"copy_rows": n, "copy_ms": res.CopyTime.Milliseconds()})}); err != nil {
			return err
		}
		if err := mv.hook(ctx, "copied", m); err != nil {
			return err
		}
	}
	if err := mv.catchUpUntil(ctx, m, &round{src: src, dst: dst, paced: true}, res, mv.opts.CatchUpRounds, mv.opts.CatchUpBatch/4, time.Time{}); err != nil {
		return err
	}
	return mv.hook(ctx, "caught-up", m)
}

// catchUpUntil replays recorded changes, round after round, until a
// round replays at most small — under a freeze (deadline set), or less
// than a full batch — or rounds ran out, or the deadline passed (then it
// fails with errAbandoned).
func (mv *mover) catchUpUntil(ctx context.Context, m catalog.MoveRecord, r *round, res *Result, rounds, small int, deadline time.Time) error {
	var replayed, copied int64
	// Paced (r.paced) only outside a freeze: after the copy, after an
	// abandoned freeze, and on a freeze's connections before its lock
	// request; under the lock, never.
	var pace *catchUpPace
	waived := 0
	if r.paced && deadline.IsZero() {
		if res.catchUp == nil {
			res.catchUp = newCatchUpPace()
		}
		pace = res.catchUp
		pace.reset()
		waived = pace.waived
		res.pace.begin()
	}
	defer func() {
		if pace != nil {
			res.PaceWaived += pace.waived - waived
		}
		res.Replayed += replayed
		if copied > 0 && deadline.IsZero() {
			// Best effort: the count is for status only.
			_ = mv.journal(context.WithoutCancel(ctx), m, []string{catalog.PhaseCatchingUp}, catalog.MoveUpdate{Phase: catalog.PhaseCatchingUp, AddRows: copied})
		}
	}()
	for range rounds {
		if !deadline.IsZero() && time.Now().After(deadline) {
			return fmt.Errorf("%w: the last catch-up did not finish within the budget", errAbandoned)
		}
		n, c, err := catchUp(ctx, r, m.ID, m.Lo, m.Hi, mv.nb, mv.opts.CatchUpBatch)
		if err != nil {
			return fmt.Errorf("move %d: catch up: %w", m.ID, err)
		}
		replayed += int64(n)
		copied += c
		if n <= small {
			return nil
		}
		if !deadline.IsZero() && n < mv.opts.CatchUpBatch {
			// Under the freeze a round that read fewer records than it
			// could has replayed every one of them: its snapshot, taken
			// with the range's lock held, sees every fenced writer's
			// commit, and none can write the range until the release.
			return nil
		}
		if pace != nil {
			if err := res.pace.rest(ctx, pace.after(n)); err != nil {
				return err
			}
		}
	}
	if !deadline.IsZero() {
		return errKeptComing
	}
	return nil // not drained: the freeze's last catch-up does the rest
}

// retryLocked runs f until it succeeds or fails otherwise than by a lock
// timeout, at most opts.FreezeAttempts times.
func (mv *mover) retryLocked(ctx context.Context, f func() error) error {
	var err error
	for i := range mv.opts.FreezeAttempts {
		if err = f(); err == nil || !isLockTimeout(err) {
			return err
		}
		if err := ctxtime.Sleep(ctx, mv.opts.RetryPause*time.Duration(i+1)); err != nil {
			return err
		}
	}
	return err
}

// cutOver freezes the range and flips it, retrying a freeze that could not
// finish within its budget (after a pause and another catch-up) up to
// opts.FreezeAttempts times.
func (mv *mover) cutOver(ctx context.Context, m catalog.MoveRecord, src, dst *shard, res *Result) error {
	for attempt := 1; attempt <= mv.opts.FreezeAttempts; attempt++ {
		if err := mv.journal(ctx, m, []string{catalog.PhaseCatchingUp}, catalog.MoveUpdate{Phase: catalog.PhaseFrozen, AddAttempts: 1}); err != nil {
			return err
		}
		if err := mv.hook(ctx, "frozen", m); err != nil {
			return err
		}
		f, epoch, err := mv.freeze(ctx, m, src, dst, res)
		if f != nil {
			res.Freezes = append(res.Freezes, *f)
		}
		if err == nil {
			rec := f.Record()
			res.Epoch, res.flipped = epoch, &rec
			mv.logf("move %d (%d-%d %s→%s): flipped at epoch %d, freeze %v (its flip %v; attempt %d)", m.ID, m.Lo, m.Hi, m.From, m.To,
				epoch, f.Duration.Round(time.Microsecond), f.Flip.Round(time.Microsecond), attempt)
			return nil
		}
		if !errors.Is(err, errAbandoned) {
			if f != nil && !f.stopped {
				// Recorded after the lock's release, best effort: no step
				// follows to record it with (the next apply resumes).
				f.Reason = err.Error()
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
				if rerr := mv.cat.RecordFreezes(rctx, m.ID, []catalog.FreezeRecord{f.Record()}); rerr != nil {
					mv.logf("move %d: record the freeze that failed: %v", m.ID, rerr)
				}
				cancel()
			}
			return err
		}
		mv.logf("move %d (%d-%d %s→%s): freeze attempt %d abandoned after %v: %v", m.ID, m.Lo, m.Hi, m.From, m.To,
			attempt, f.Duration.Round(time.Microsecond), err)
		if err := mv.journal(ctx, m, []string{catalog.PhaseFrozen}, catalog.MoveUpdate{Phase: catalog.PhaseCatchingUp,
			Error: fmt.Sprintf("freeze attempt %d abandoned: %v", attempt, err), Freezes: []catalog.FreezeRecord{f.Record()}}); err != nil {
			return err
		}
		if err := ctxtime.Sleep(ctx, mv.opts.RetryPause*time.Duration(attempt)); err != nil {
			return err
		}
		if err := mv.catchUpUntil(ctx, m, &round{src: src, dst: dst, paced: true}, res, mv.opts.CatchUpRounds, mv.opts.CatchUpBatch/4, time.Time{}); err != nil {
			return err
		}
	}
	return fmt.Errorf("move %d (%d-%d): %d freezes abandoned; run apply again later (the range stays with %s)", m.ID, m.Lo, m.Hi, mv.opts.FreezeAttempts, m.From)
}

// freeze is one freeze: it takes the range's lock EXCLUSIVE on the source
// with lock_timeout = budget (writers in flight finish, new ones wait),
// commits the source's fence frozen, replays the last changes, and — if
// all that fit the budget — flips in the catalog (the commit point), sets
// the source moved and the destination owned, and releases the lock: the
// writers that waited re-read the fence and are sent to the new owner.
// Over budget before the flip, or with a flip prepared (before the lock)
// on a map that has changed since, it sets the source owned again,
// releases, and fails with errAbandoned.
func (mv *mover) freeze(ctx context.Context, m catalog.MoveRecord, src, dst *shard, res *Result) (*Freeze, uint64, error) {
	budget := mv.opts.FreezeBudget
	epoch, err := mv.cat.Epoch(ctx)
	if err != nil {
		return nil, 0, err
	}
	// Every connection the freeze uses is acquired, and the lock's
	// transaction opened, before the lock is requested: a connection the
	// pool has to dial (or ping, after a second idle) while writers wait
	// lengthened the freeze by 15-50 ms on a loaded machine. fc commits
	// the source's fence changes (the frozen state must be committed
	// apart from the lock's transaction, so that writes stay refused if
	// the mover dies); sc and dc run the last catch-up.
	cs, err := acquireFreeze(ctx, src, dst)
	if err != nil {
		return nil, 0, err
	}
	defer cs.release()
	// Warm them, and leave the freeze little to replay: a backend's
	// first statements on a table or function load its catalog entries
	// and plans (on a new connection, the fence write and the last
	// catch-up took 20-70 ms more under the lock, at load 10), so the
	// fence connections set each side's fence to the state it has, and
	// the catch-up connections replay what accumulated since the last
	// catch-up until a round finds little — paced as the catch-up before
	// them (at the duty cycle, or with the pauses the move's backlog
	// already cut), but never after the round that found little: the
	// lock is requested right after it.
	if err := src.setFence(ctx, cs.fc, m.Lo, m.Hi, "owned", m.From, epoch, []string{"owned"}, false); err != nil {
		return nil, 0, err
	}
	if err := dst.setFence(ctx, cs.dc, m.Lo, m.Hi, "incoming", m.From, epoch, []string{"incoming"}, false); err != nil {
		return nil, 0, err
	}
	if err := mv.catchUpUntil(ctx, m, &round{src: src, dst: dst, sc: cs.sc, dc: cs.dc, paced: true}, res, preLockRounds, preLockSmall, time.Time{}); err != nil {
		return nil, 0, err
	}
	// The flip is computed now, before the lock, as late as can be (a
	// flip of another move in between makes it stale): under the lock
	// it is one pipelined batch and a commit to the catalog.
	plan, err := mv.cat.PrepareFlip(ctx, m.ID)
	if err != nil {
		return nil, 0, err
	}
	epoch = plan.Epoch
	hold, err := cs.hold.Begin(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("shard %s: %w", src.name, err)
	}
	// Whatever happens, the lock goes with this transaction; a mover that
	// dies leaves it to the server, which ends it with the connection.
	defer func() { _ = hold.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := hold.Exec(ctx, `SELECT set_config('lock_timeout', $1::text, true)`, fmt.Sprintf("%dms", max(1, budget.Milliseconds()))); err != nil {
		return nil, 0, fmt.Errorf("shard %s: %w", src.name, err)
	}
	start := time.Now()
	// The flip and the fence writes after it cannot be abandoned: the
	// last catch-up must end early enough to leave them their time (as
	// the last flip took, a quarter of the budget before any).
	deadline := start.Add(budget - mv.afterFlip(budget))
	f := &Freeze{Start: start}
	done := func() *Freeze { f.Duration = time.Since(start); return f }
	// stop is a hook's error: the mover stops there as if it died.
	stop := func(err error) (*Freeze, uint64, error) { f.stopped = true; return done(), 0, err }
	tried := false // the lock was granted or timed out: a freeze to report
	if err := mv.around(ctx, "freeze", m, src, func(ctx context.Context) error {
		if _, err := hold.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int, $2::int)`, fenceLockClass, m.Lo); err != nil {
			if isLockTimeout(err) {
				f.Abandoned, f.Why, f.Reason, tried = true, catalog.WhyDeadline, "writers in flight did not finish within the budget", true
				return fmt.Errorf("%w: the range lock was not granted within %v (a transaction on the range held it)", errAbandoned, budget)
			}
			return fmt.Errorf("shard %s: lock range %d-%d: %w", src.name, m.Lo, m.Hi, err)
		}
		tried = true
		return src.setFence(ctx, cs.fc, m.Lo, m.Hi, "frozen", m.From, epoch, []string{"owned"}, false)
	}); err != nil {
		if !tried {
			return nil, 0, err
		}
		return done(), 0, err
	}
	if err := mv.hook(ctx, "locked", m); err != nil {
		return stop(err)
	}
	abandon := func(cause error) (*Freeze, uint64, error) {
		f.Abandoned, f.Why, f.Reason = true, catalog.WhyDeadline, cause.Error()
		switch {
		case errors.Is(cause, errKeptComing):
			f.Why = catalog.WhyCatchUp
		case errors.Is(cause, catalog.ErrStaleFlip):
			f.Why = catalog.WhyMapChanged
		}
		uctx := context.WithoutCancel(ctx)
		if err := src.setFence(uctx, cs.fc, m.Lo, m.Hi, "owned", m.From, epoch, []string{"frozen", "owned"}, false); err != nil {
			return done(), 0, fmt.Errorf("undo the freeze (%v): %w", cause, err)
		}
		return done(), 0, cause
	}
	// The last catch-up runs under the deadline itself, not only between
	// its rounds: on a loaded machine one round can take several budgets,
	// and the writers wait for all of it. A round cut off rolls back on
	// dst (or, its dst commit done, leaves its records on src to be
	// replayed again: a replay replaces rows, so twice is once).
	cctx, cancel := context.WithDeadline(ctx, deadline)
	err = mv.around(cctx, "final-catch-up", m, src, func(ctx context.Context) error {
		return mv.catchUpUntil(ctx, m, &round{src: src, dst: dst, sc: cs.sc, dc: cs.dc, keep: true}, res, 1000, 0, deadline)
	})
	cut := err != nil && cctx.Err() != nil && ctx.Err() == nil
	cancel()
	if err != nil {
		if errors.Is(err, errAbandoned) {
			return abandon(err)
		}
		if cut {
			return abandon(fmt.Errorf("%w: the last catch-up was cut off at the budget (%v)", errAbandoned, err))
		}
		return done(), 0, err
	}
	if time.Now().After(deadline) {
		return abandon(fmt.Errorf("%w: the last catch-up ended after the budget", errAbandoned))
	}
	if err := mv.hook(ctx, "flip", m); err != nil {
		return stop(err)
	}
	flipStart := time.Now()
	var to uint64
	err = mv.around(ctx, "flip", m, src, func(ctx context.Context) error {
		var err error
		to, err = mv.cat.Flip(ctx, plan)
		return err
	})
	if errors.Is(err, catalog.ErrStaleFlip) {
		// The map changed since the plan: nothing was written, and the
		// freeze is undone like one over budget, to be tried again on
		// the new map.
		return abandon(fmt.Errorf("%w: %w", errAbandoned, err))
	}
	if err != nil {
		// Did the commit point pass? The journal says.
		ms, rerr := mv.cat.Moves(context.WithoutCancel(ctx), true)
		if rerr != nil {
			return done(), 0, fmt.Errorf("flip: %w (and the journal could not be read: %v; run apply again)", err, rerr)
		}
		flipped := false
		for _, x := range ms {
			if x.ID == m.ID && catalog.Flipped(x.Phase) {
				flipped, to = true, x.ToEpoch
			}
		}
		if !flipped {
			return done(), 0, fmt.Errorf("flip: %w", err)
		}
	}
	m.ToEpoch, f.flipped, f.Flip = to, true, time.Since(flipStart)
	if err := mv.hook(ctx, "flipped", m); err != nil {
		return stop(err)
	}
	// Source first: from here to the destination's turn the range is
	// served by nobody, never by both.
	if err := src.setFence(ctx, cs.fc, m.Lo, m.Hi, "moved", m.To, to, []string{"frozen", "owned", "moved"}, false); err != nil {
		return done(), 0, err
	}
	if err := mv.hook(ctx, "source-moved", m); err != nil {
		return stop(err)
	}
	if err := dst.setFence(ctx, cs.dc, m.Lo, m.Hi, "owned", m.To, to, []string{"incoming", "owned"}, true); err != nil {
		return done(), 0, err
	}
	if err := hold.Commit(ctx); err != nil {
		return done(), 0, fmt.Errorf("shard %s: release range %d-%d: %w", src.name, m.Lo, m.Hi, err)
	}
	mv.setAfterFlip(time.Since(flipStart))
	return done(), to, nil
}

// preLockRounds bounds the catch-up rounds a freeze runs on its own
// connections just before it requests the range's lock; they stop at a
// round that replays at most preLockSmall records. Paced, they may need
// more rounds than unpaced ones did (4): the pauses' fallback reaches the
// unpaced mover within five rounds whose backlog does not shrink.
const (
	preLockRounds = 8
	preLockSmall  = 64
)

// freezeConns are the connections one freeze holds from before it
// requests the range's lock to its end: on the source the lock's (hold),
// the fence's (fc) and the last catch-up's snapshot (sc); on the
// destination the last catch-up's and the fence's (dc).
type freezeConns struct {
	hold, fc, sc, dc *pgxpool.Conn
}

func acquireFreeze(ctx context.Context, src, dst *shard) (*freezeConns, error) {
	cs := &freezeConns{}
	for _, a := range []struct {
		s *shard
		c **pgxpool.Conn
	}{{src, &cs.hold}, {src, &cs.fc}, {src, &cs.sc}, {dst, &cs.dc}} {
		c, err := a.s.pool.Acquire(ctx)
		if err != nil {
			cs.release()
			return nil, fmt.Errorf("shard %s: %w", a.s.name, err)
		}
		*a.c = c
	}
	return cs, nil
}

func (cs *freezeConns) release() {
	for _, c := range []*pgxpool.Conn{cs.hold, cs.fc, cs.sc, cs.dc} {
		if c != nil {
			c.Release()
		}
	}
}

// finish completes a flipped move: the fences as the flip says (again:
// a mover may have died between the flip and the fences), then the
// clean-up — the capture stopped, the range's rows on the source deleted
// in committed batches (a clean-up cut off is resumed from the journal's
// cleaning and finishes the job), the other shards' fences told the new
// owner — and done.
func (mv *mover) finish(ctx context.Context, m catalog.MoveRecord, src, dst *shard, res *Result) error {
	ms, err := mv.cat.Moves(ctx, false)
	if err != nil {
		return err
	}
	for _, x := range ms {
		if x.ID == m.ID {
			m = x
		}
	}
	if !catalog.Flipped(m.Phase) || m.ToEpoch == 0 {
		return fmt.Errorf("move %d: finish: it is %s, not flipped", m.ID, m.Phase)
	}
	if catalog.Finished(m.Phase) {
		return nil
	}
	if err := src.setFence(ctx, nil, m.Lo, m.Hi, "moved", m.To, m.ToEpoch, []string{"frozen", "owned", "moved"}, true); err != nil {
		return err
	}
	if err := dst.setFence(ctx, nil, m.Lo, m.Hi, "owned", m.To, m.ToEpoch, []string{"incoming", "owned"}, true); err != nil {
		return err
	}
	if err := mv.hook(ctx, "released", m); err != nil {
		return err
	}
	// The freeze that flipped is recorded with this step, the first
	// after the range lock's release: not in the flip's transaction, on
	// the freeze's critical path, where its length is not known yet.
	u := catalog.MoveUpdate{Phase: catalog.PhaseCleaning}
	if res.flipped != nil {
		u.Freezes = []catalog.FreezeRecord{*res.flipped}
	}
	if err := mv.journal(ctx, m, []string{catalog.PhaseFlipped, catalog.PhaseCleaning}, u); err != nil {
		return err
	}
	res.flipped = nil
	if err := mv.hook(ctx, "cleaning", m); err != nil {
		return err
	}
	if err := mv.retryLocked(ctx, func() error {
		return withLockTimeout(ctx, src, mv.opts.DDLLockTimeout, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT pgshard_move_capture_end($1::bigint)`, m.ID)
			return err
		})
	}); err != nil {
		return fmt.Errorf("shard %s: stop the capture: %w", src.name, err)
	}
	c, err := deleteRange(ctx, src, m.Lo, m.Hi, mv.nb, mv.opts.CleanupBatch, res.pace)
	res.CleanupRows += c.rows
	res.CleanupBatches += c.batches
	if err != nil {
		return err
	}
	if err := dropSeqMap(ctx, dst, m.ID); err != nil {
		return err
	}
	mv.logf("move %d (%d-%d %s→%s): cleaned up, %d rows deleted on %s in %d batches of at most %d", m.ID, m.Lo, m.Hi, m.From, m.To,
		c.rows, src.name, c.batches, mv.opts.CleanupBatch)
	for name, s := range mv.shards {
		if name == m.From || name == m.To {
			continue
		}
		// Best effort, for the fence's hint only: their rows already
		// refuse the range.
		_ = s.setFence(ctx, nil, m.Lo, m.Hi, "moved", m.To, m.ToEpoch, []string{"moved"}, true)
	}
	if err := mv.hook(ctx, "cleaned", m); err != nil {
		return err
	}
	return mv.journal(ctx, m, []string{catalog.PhaseCleaning}, catalog.MoveUpdate{Phase: catalog.PhaseDone,
		Detail: mustJSON(map[string]any{"cleanup_rows": c.rows, "cleanup_batches": c.batches})})
}

// abort rolls back a move that has not flipped: the destination refuses
// the range again and loses what was copied, the capture stops, and the
// source owns the range (again) — in that order, so the range is never
// owned twice. A flipped move cannot be rolled back: abort completes it.
func (mv *mover) abort(ctx context.Context, m catalog.MoveRecord) error {
	src, err := mv.shard(m.From)
	if err != nil {
		return err
	}
	dst, err := mv.shard(m.To)
	if err != nil {
		return err
	}
	if catalog.Flipped(m.Phase) {
		return mv.finish(ctx, m, src, dst, &Result{})
	}
	if err := mv.journal(ctx, m, nil, catalog.MoveUpdate{Phase: catalog.PhaseAborting}); err != nil {
		return err
	}
	epoch, err := mv.cat.Epoch(ctx)
	if err != nil {
		return err
	}
	if err := dst.setFence(ctx, nil, m.Lo, m.Hi, "moved", m.From, epoch, []string{"incoming", "moved"}, true); err != nil {
		return err
	}
	if _, err := deleteRange(ctx, dst, m.Lo, m.Hi, mv.nb, mv.opts.CleanupBatch, nil); err != nil {
		return err
	}
	if err := dropSeqMap(ctx, dst, m.ID); err != nil {
		return err
	}
	if err := mv.retryLocked(ctx, func() error {
		return withLockTimeout(ctx, src, mv.opts.DDLLockTimeout, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT pgshard_move_capture_end($1::bigint)`, m.ID)
			return err
		})
	}); err != nil {
		return fmt.Errorf("shard %s: stop the capture: %w", src.name, err)
	}
	if err := src.setFence(ctx, nil, m.Lo, m.Hi, "owned", m.From, epoch, []string{"owned", "frozen"}, true); err != nil {
		return err
	}
	return mv.journal(ctx, m, []string{catalog.PhaseAborting}, catalog.MoveUpdate{Phase: catalog.PhaseAborted, Error: ""})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
