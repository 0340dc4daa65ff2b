package reshard

import (
	"context"
	"time"

	"github.com/pgshard/pgshard/internal/ctxtime"
)

// paceSlice is how long the copy and the clean-up work before the pacer
// may pause them: short enough that a pause follows soon, long enough
// that the clock is read rarely relative to the work.
const paceSlice = 20 * time.Millisecond

// pacer spaces one move's background work — the bulk copy, the catch-up
// rounds before a freeze, the clean-up's deletes — so that the mover is
// busy at most a share duty of the time (Options.DutyCycle): after a
// stretch of work that took t it pauses t·(1−duty)/duty. It never runs
// inside a freeze (the freeze's last catch-up does not call it). A nil
// *pacer, or duty ≥ 1, never pauses.
type pacer struct {
	duty  float64
	now   func() time.Time
	pause func(context.Context, time.Duration) error

	start  time.Time     // of the current stretch of work
	paused time.Duration // pauses taken, in all
	pauses int
}

func newPacer(o Options) *pacer {
	p := &pacer{duty: o.DutyCycle, now: time.Now, pause: ctxtime.Sleep}
	if o.pause != nil {
		p.pause = o.pause
	}
	if o.now != nil {
		p.now = o.now
	}
	return p
}

// begin starts a stretch of work.
func (p *pacer) begin() {
	if p != nil {
		p.start = p.now()
	}
}

// rest ends a stretch of work with its pause, scaled by scale (0: none),
// and starts the next stretch.
func (p *pacer) rest(ctx context.Context, scale float64) error {
	if p == nil || p.duty >= 1 || p.duty <= 0 {
		return nil
	}
	busy := p.now().Sub(p.start)
	d := time.Duration(float64(busy) * (1 - p.duty) / p.duty * scale)
	if d > 0 {
		if err := p.pause(ctx, d); err != nil {
			return err
		}
		p.paused += d
		p.pauses++
	}
	p.begin()
	return nil
}

// tick is called between small units of work (rows of the copy, tables
// of the clean-up): it rests once the current stretch is a slice long.
func (p *pacer) tick(ctx context.Context) error {
	if p == nil || p.duty >= 1 || p.duty <= 0 {
		return nil
	}
	if p.now().Sub(p.start) < paceSlice {
		return nil
	}
	return p.rest(ctx, 1)
}

// catchUpPace decides the pause after each catch-up round outside a
// freeze — the rounds after the copy, after an abandoned freeze, and
// those a freeze runs on its own connections before it requests the
// range's lock — so that pacing never keeps the catch-up from
// converging: the backlog is what the capture adds while the mover
// pauses, and a mover that pauses too long never gets it small enough to
// freeze.
//
//   - Every round is followed by its pause, a full batch included: a round
//     that replayed a full batch does not say whether the backlog shrank,
//     and an unpaced run through a large backlog (the copy leaves
//     thousands of records) is what took the unmoved ranges' share.
//   - A round that replayed no fewer records than the round before (the
//     backlog did not shrink under the pace, or two full batches in a
//     row: it may not have) halves the pauses for the rest of the move;
//     under a sixteenth they stop.
//
// So while the backlog shrinks the mover keeps its duty cycle, and when it
// does not, it falls back within five rounds to the unpaced mover, which
// converges as long as it replays faster than the writers change the range
// (and otherwise the freeze's own catch-up is abandoned, as unpaced). One
// catchUpPace serves a move's every catch-up (reset): a move whose
// backlog needed the fallback keeps it for its rounds before the lock.
type catchUpPace struct {
	scale float64 // of the pauses; starts at 1
	prev  int     // records the previous round of this catch-up replayed (-1: none yet)
	// waived counts the rounds followed by no pause, or a shortened one.
	waived int
}

func newCatchUpPace() *catchUpPace {
	return &catchUpPace{scale: 1, prev: -1}
}

// reset starts another catch-up of the same move: the scale reached is
// kept, the previous round forgotten (what accumulated in between says
// nothing of the pace).
func (c *catchUpPace) reset() {
	c.prev = -1
}

// after returns the scale of the pause after a round that replayed n
// records.
func (c *catchUpPace) after(n int) float64 {
	defer func() { c.prev = n }()
	if c.prev >= 0 && n >= c.prev {
		c.scale /= 2
		if c.scale < 1.0/16 {
			c.scale = 0
		}
	}
	if c.scale < 1 {
		c.waived++
	}
	return c.scale
}
