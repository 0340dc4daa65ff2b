package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/internal/ctxtime"
	"github.com/pgshard/pgshard/reshard"
	"github.com/pgshard/pgshard/shardmap"
)

// The move faults: bucket ranges moved online in the run's catalog by the
// production mover (package reshard), with the store under test following
// the catalog. They share one resource, "mover": one mover at a time, as
// reshard's lease requires anyway.

// Move defaults.
const (
	moveMinWidth      = 8
	moveMaxWidth      = 32
	moveDefaultBudget = 100 * time.Millisecond
	moveDefaultTO     = 60 * time.Second
	// MoverOwner names the chaos mover in the catalog's journal.
	MoverOwner = "pgshard-chaos-mover"
	// moveLeaseTTL is the mover's lease's TTL: a mover whose release
	// failed (the catalog's server was down) blocks the next one this
	// long, not reshard's default 30 s.
	moveLeaseTTL = 5 * time.Second
	// moveRetryPause is the pause between tries of a mover step that
	// failed (a shard or the catalog down, the lease still held).
	moveRetryPause = 500 * time.Millisecond
	// moveFreezeRetry is the mover's pause after an abandoned freeze
	// (reshard.Options.RetryPause, growing linearly per attempt): a
	// freeze is abandoned when a writer held the range past the budget,
	// which on a loaded machine is most first tries; reshard's default
	// 200 ms would make the move wait longer than the writer did.
	moveFreezeRetry = 20 * time.Millisecond
)

// retrying runs f until it succeeds or ctx ends (the fault's timeout, or
// the heal's bound): the shards and the catalog go down under the other
// faults, and a move or a resume must outlast them.
func retrying(ctx context.Context, env *Env, what string, f func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := f(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		env.logf("chaos: %s (try %d): %v", what, attempt, err)
		if ctxtime.Sleep(ctx, moveRetryPause) != nil {
			return err
		}
	}
}

var moveParams = map[string]paramCheck{
	"buckets":       intParam(1, 1<<16),
	"hot":           enumParam("true", "false"),
	"freeze_budget": durationParam(time.Millisecond, 10*time.Second),
	"duty_cycle":    floatParam(0.01, 1),
	"timeout":       durationParam(time.Second, 10*time.Minute),
}

var moveInfo = kindInfo{
	needs:    NeedsCatalog,
	instant:  true,
	global:   true,
	resource: "mover",
	params:   moveParams,
	new:      func() Fault { return &move{} },
}

var moverKillInfo = kindInfo{
	needs:    NeedsCatalog,
	instant:  true,
	global:   true,
	resource: "mover",
	params: map[string]paramCheck{
		"buckets":       moveParams["buckets"],
		"hot":           moveParams["hot"],
		"freeze_budget": moveParams["freeze_budget"],
		"duty_cycle":    moveParams["duty_cycle"],
		"timeout":       moveParams["timeout"],
		"resolve":       enumParam("resume", "abort", "seeded"),
	},
	new: func() Fault { return &moverKill{} },
}

// moveState is what the move faults of one run share.
type moveState struct {
	mu sync.Mutex
	// kills counts mover-kill injections: the next one stops at
	// reshard.Steps[(start+kills) % len].
	kills int
	start int
	began bool
}

// nextKillStep returns the step the next mover-kill stops at: successive
// calls take reshard.Steps in turn from a start drawn by the first.
func (s *moveState) nextKillStep(rng *rand.Rand) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.began {
		s.start, s.began = rng.IntN(len(reshard.Steps)), true
	}
	step := reshard.Steps[(s.start+s.kills)%len(reshard.Steps)]
	s.kills++
	return step
}

// movePick is one planned range move.
type movePick struct {
	Lo, Hi   int
	From, To string
}

// pickMove draws a range move on m: a seeded start bucket, width buckets
// (0: seeded in 8..32) cut at the end of the range that holds the start
// (so the move has one source), to a seeded shard other than its owner.
// A map with fewer than two shards has nothing to move to. With hot
// buckets given, the start is a seeded one of them (a range that holds a
// hot key of the workload).
func pickMove(m *shardmap.Map, width int, hot []int, rng *rand.Rand) (movePick, error) {
	if len(m.Shards) < 2 {
		return movePick{}, fmt.Errorf("a move needs two shards; the map has %d", len(m.Shards))
	}
	if width <= 0 {
		width = moveMinWidth + rng.IntN(moveMaxWidth-moveMinWidth+1)
	}
	lo := rng.IntN(m.Buckets)
	if len(hot) > 0 {
		lo = hot[rng.IntN(len(hot))]
	}
	var r shardmap.Range
	for _, x := range m.Ranges {
		if x.Lo <= lo && lo <= x.Hi {
			r = x
			break
		}
	}
	if r.Shard == "" {
		return movePick{}, fmt.Errorf("bucket %d is in no range of map epoch %d", lo, m.Epoch)
	}
	hi := min(lo+width-1, r.Hi)
	var others []string
	for _, s := range m.Shards {
		if s.Name != r.Shard {
			others = append(others, s.Name)
		}
	}
	return movePick{Lo: lo, Hi: hi, From: r.Shard, To: others[rng.IntN(len(others))]}, nil
}

// movedPart returns a bucket of pick that m places on a shard other than
// pick.From, and that shard ("" when From owns every bucket of it).
func movedPart(m *shardmap.Map, pick movePick) (int, string) {
	for b := pick.Lo; b <= pick.Hi; b++ {
		if s := m.ShardForBucket(b); s.Name != pick.From {
			return b, s.Name
		}
	}
	return 0, ""
}

// moveRun is what one fault's mover did: the evidence of a move.
type moveRun struct {
	pick     movePick
	ids      []int64
	results  []*reshard.Result
	finished int // unfinished moves of an earlier fault finished first
}

// startMove finishes what an earlier fault left unfinished, draws a range
// on the catalog's current map and records its move in the journal.
func startMove(ctx context.Context, env *Env, p Params, rng *rand.Rand, opts reshard.Options) (*moveRun, error) {
	if env.Catalog == nil {
		return nil, errors.New("no catalog: move faults need the run's catalog")
	}
	width, err := p.int("buckets", 0)
	if err != nil {
		return nil, err
	}
	var hot []int
	if p.str("hot", "false") == "true" {
		if hot = env.HotBuckets; len(hot) == 0 {
			return nil, errors.New("param hot: the workload has no hot keys (keys: hotset:SHARE:FRACTION)")
		}
	}
	mr := &moveRun{}
	// The draws are made once, on the map as it is before the first try.
	var pickErr error
	err = retrying(ctx, env, "start a move", func(ctx context.Context) error {
		left, err := env.Catalog.Moves(ctx, true)
		if err != nil {
			return err
		}
		if len(left) > 0 {
			if _, err := reshard.Apply(ctx, env.Catalog, opts); err != nil {
				return fmt.Errorf("finish %d unfinished move(s) first: %w", len(left), err)
			}
			mr.finished += len(left)
		}
		m, err := env.Catalog.Load(ctx)
		if err != nil {
			return err
		}
		if mr.pick.To == "" {
			if mr.pick, pickErr = pickMove(m, width, hot, rng); pickErr != nil {
				return nil
			}
		}
		if b, owner := movedPart(m, mr.pick); owner != "" {
			// An earlier move finished meanwhile moved part of it: draw
			// again. Every bucket, not just the first: the evidence names
			// one source for the whole range (the verifier credits a
			// move's copies to its source and destination), so a pick
			// Plan would split across owners must not be moved.
			mr.pick = movePick{}
			return fmt.Errorf("bucket %d moved to %s meanwhile", b, owner)
		}
		recs, err := reshard.Plan(ctx, env.Catalog, reshard.Request{Lo: mr.pick.Lo, Hi: mr.pick.Hi, To: mr.pick.To})
		if err != nil {
			return fmt.Errorf("plan %d-%d %s→%s: %w", mr.pick.Lo, mr.pick.Hi, mr.pick.From, mr.pick.To, err)
		}
		for _, r := range recs {
			mr.ids = append(mr.ids, r.ID)
		}
		return nil
	})
	if err == nil {
		err = pickErr
	}
	if err != nil {
		return nil, err
	}
	return mr, nil
}

// moveOptions are the mover's options from a fault's params.
func moveOptions(env *Env, p Params) (reshard.Options, time.Duration, error) {
	budget, err := p.duration("freeze_budget", moveDefaultBudget)
	if err != nil {
		return reshard.Options{}, 0, err
	}
	to, err := p.duration("timeout", moveDefaultTO)
	if err != nil {
		return reshard.Options{}, 0, err
	}
	duty, err := p.float("duty_cycle", reshard.DefaultDutyCycle)
	if err != nil {
		return reshard.Options{}, 0, err
	}
	opts := reshard.Options{FreezeBudget: budget, Owner: MoverOwner, Log: env.Logf, LeaseTTL: moveLeaseTTL,
		RetryPause: moveFreezeRetry, Around: env.MoverAround, DutyCycle: duty}
	if env.catchUps != nil {
		// Shard crashes aimed at the catch-up (catchup.go).
		opts.Hook = env.catchUps.hook
	}
	return opts, to, nil
}

// phases returns the journal phase of each of ids ("" if not found).
func movePhases(ctx context.Context, cat *catalog.Catalog, ids []int64) ([]string, uint64, error) {
	all, err := cat.Moves(ctx, false)
	if err != nil {
		return nil, 0, err
	}
	out := make([]string, len(ids))
	var epoch uint64
	for _, m := range all {
		if i := slices.Index(ids, m.ID); i >= 0 {
			out[i] = m.Phase
			epoch = max(epoch, m.ToEpoch)
		}
	}
	return out, epoch, nil
}

// evidence fills f with the move's figures: range, shards, moves, epoch
// after, freezes (count, durations in ms, starts, abandoned), rows
// copied, and each move's phase; it returns whether every move reached
// phase.
func (mr *moveRun) evidence(ctx context.Context, env *Env, f map[string]any, want ...string) bool {
	f["lo"], f["hi"], f["from"], f["to"] = mr.pick.Lo, mr.pick.Hi, mr.pick.From, mr.pick.To
	f["moves"] = mr.ids
	if mr.finished > 0 {
		f["finished_first"] = mr.finished
	}
	mr.freezeEvidence(f, env.Clock)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var phases []string
	var epoch uint64
	err := retrying(ctx, env, "read the journal", func(ctx context.Context) error {
		var err error
		phases, epoch, err = movePhases(ctx, env.Catalog, mr.ids)
		return err
	})
	if err != nil {
		f["journal_error"] = err.Error()
		return false
	}
	f["phases"] = phases
	if epoch > 0 {
		f["epoch"] = epoch
	}
	if len(phases) == 0 {
		return false
	}
	for _, ph := range phases {
		if !slices.Contains(want, ph) {
			return false
		}
	}
	return true
}

// freezeEvidence fills f with what the mover's results say of the
// freezes: rows copied, freezes (count), freeze_ms (each one's hold, in
// the order tried), abandoned (count) and abandoned_why, and — when clock,
// the history's time origin, is set — freeze_t (each one's start, ns on
// the history's clock, paired with freeze_ms): the same freezes the
// mover records in the journal.
func (mr *moveRun) freezeEvidence(f map[string]any, clock time.Time) {
	var rows int64
	freezes := []float64{}
	var at []int64
	abandoned := 0
	var reasons []string
	for _, r := range mr.results {
		if r == nil {
			continue
		}
		rows += r.RowsCopied
		for _, fz := range r.Freezes {
			freezes = append(freezes, float64(fz.Duration.Microseconds())/1000)
			at = append(at, int64(fz.Start.Sub(clock)))
			if fz.Abandoned {
				abandoned++
				if !slices.Contains(reasons, fz.Reason) {
					reasons = append(reasons, fz.Reason)
				}
			}
		}
	}
	f["rows_copied"], f["freezes"], f["freeze_ms"], f["abandoned"] = rows, len(freezes), freezes, abandoned
	if !clock.IsZero() && len(at) > 0 {
		f["freeze_t"] = at
	}
	if len(reasons) > 0 {
		f["abandoned_why"] = reasons
	}
}

// move is KindMove.
type move struct {
	p  Params
	mr *moveRun
}

func (*move) Kind() Kind   { return KindMove }
func (*move) Needs() Needs { return moveInfo.needs }

func (f *move) Inject(ctx context.Context, env *Env, _ int, p Params, rng *rand.Rand) (Evidence, error) {
	f.p = p
	opts, to, err := moveOptions(env, p)
	if err != nil {
		return Evidence{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	mr, err := startMove(ctx, env, p, rng, opts)
	if err != nil {
		return Evidence{Fields: map[string]any{}}, err
	}
	f.mr = mr
	err = retrying(ctx, env, "apply a move", func(ctx context.Context) error {
		var err error
		mr.results, err = reshard.Apply(ctx, env.Catalog, opts)
		return err
	})
	ev := Evidence{Fields: map[string]any{}}
	ev.Landed = mr.evidence(ctx, env, ev.Fields, catalog.PhaseDone)
	if err != nil {
		ev.Landed = false
	}
	return ev, err
}

// Heal finishes a move the inject left unfinished (its context ended, a
// shard was down): the next fault would otherwise find it.
func (f *move) Heal(ctx context.Context, env *Env, _ int) (Evidence, error) {
	if f.mr == nil || env.Catalog == nil {
		return Evidence{}, nil
	}
	phases, _, err := movePhases(ctx, env.Catalog, f.mr.ids)
	if err != nil || !slices.ContainsFunc(phases, func(s string) bool { return s != catalog.PhaseDone }) {
		return Evidence{}, err
	}
	opts, to, err := moveOptions(env, f.p)
	if err != nil {
		return Evidence{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	err = retrying(ctx, env, "finish a move", func(ctx context.Context) error {
		var err error
		f.mr.results, err = reshard.Apply(ctx, env.Catalog, opts)
		return err
	})
	ev := Evidence{Fields: map[string]any{"finished": true}}
	ev.Landed = f.mr.evidence(ctx, env, ev.Fields, catalog.PhaseDone) && err == nil
	return ev, err
}

// errMoverKilled is what mover-kill's hook returns: the mover dies there.
var errMoverKilled = errors.New("chaos: mover killed")

// moverKill is KindMoverKill.
type moverKill struct {
	p       Params
	mr      *moveRun
	step    string
	killed  bool
	resolve string
}

func (*moverKill) Kind() Kind   { return KindMoverKill }
func (*moverKill) Needs() Needs { return moverKillInfo.needs }

func (f *moverKill) Inject(ctx context.Context, env *Env, _ int, p Params, rng *rand.Rand) (Evidence, error) {
	f.p = p
	if env.moves == nil {
		env.moves = &moveState{}
	}
	f.step = env.moves.nextKillStep(rng)
	f.resolve = p.str("resolve", "seeded")
	if f.resolve == "seeded" {
		f.resolve = []string{"resume", "abort"}[rng.IntN(2)]
	}
	opts, to, err := moveOptions(env, p)
	if err != nil {
		return Evidence{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	ev := Evidence{Fields: map[string]any{"step": f.step, "resolve": f.resolve}}
	mr, err := startMove(ctx, env, p, rng, opts)
	if err != nil {
		return ev, err
	}
	f.mr = mr
	// The mover dies at the first step it reaches at or after the drawn
	// one: a try another fault cut short (a shard down) resumes from its
	// journaled phase, past steps it will not pass again, and is tried
	// again until the mover is killed or the move is done.
	drawn := slices.Index(reshard.Steps, f.step)
	base := opts.Hook
	opts.Hook = func(ctx context.Context, step string, m catalog.MoveRecord) error {
		if base != nil {
			if err := base(ctx, step, m); err != nil {
				return err
			}
		}
		if i := slices.Index(reshard.Steps, step); i >= drawn && !f.killed {
			f.killed, f.step = true, step
			return errMoverKilled
		}
		return nil
	}
	err = retrying(ctx, env, "apply a move to kill", func(ctx context.Context) error {
		var err error
		mr.results, err = reshard.Apply(ctx, env.Catalog, opts)
		if f.killed && !errors.Is(err, errMoverKilled) && err != nil {
			// Killed, and the release of the lease failed on the way
			// out: the kill stands, the heal resumes or aborts.
			env.logf("chaos: mover killed at %s: %v", f.step, err)
			return nil
		}
		if errors.Is(err, errMoverKilled) {
			return nil
		}
		return err
	})
	ev.Fields["step"], ev.Fields["killed"] = f.step, f.killed
	if drawn >= 0 && f.step != reshard.Steps[drawn] {
		ev.Fields["drawn_step"] = reshard.Steps[drawn]
	}
	mr.evidence(ctx, env, ev.Fields)
	// A kill counts once resolved (Heal): killed here, then resumed or
	// rolled back.
	return ev, err
}

// Heal resumes the killed move (reshard.Apply) or rolls it back
// (reshard.Abort), as drawn at inject.
func (f *moverKill) Heal(ctx context.Context, env *Env, _ int) (Evidence, error) {
	if f.mr == nil || env.Catalog == nil {
		return Evidence{}, nil
	}
	opts, to, err := moveOptions(env, f.p)
	if err != nil {
		return Evidence{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	ev := Evidence{Fields: map[string]any{"step": f.step, "resolve": f.resolve, "killed": f.killed}}
	err = retrying(ctx, env, f.resolve+" a killed move", func(ctx context.Context) error {
		if f.resolve == "abort" {
			f.mr.results = nil
			return reshard.Abort(ctx, env.Catalog, opts)
		}
		var err error
		f.mr.results, err = reshard.Apply(ctx, env.Catalog, opts)
		return err
	})
	ok := f.mr.evidence(ctx, env, ev.Fields, catalog.PhaseDone, catalog.PhaseAborted)
	ev.Landed = f.killed && ok && err == nil
	return ev, err
}

// finishMoves finishes every unfinished move of the run's catalog (the
// heal-all before the quiesce): a move left frozen or half-copied would
// keep its range unavailable.
func finishMoves(ctx context.Context, env *Env) error {
	if env.Catalog == nil {
		return nil
	}
	return retrying(ctx, env, "finish the moves", func(ctx context.Context) error {
		left, err := env.Catalog.Moves(ctx, true)
		if err != nil || len(left) == 0 {
			return err
		}
		_, err = reshard.Apply(ctx, env.Catalog, reshard.Options{Owner: MoverOwner, Log: env.Logf, LeaseTTL: moveLeaseTTL, Around: env.MoverAround})
		if err != nil {
			return fmt.Errorf("finish %d unfinished move(s): %w", len(left), err)
		}
		return nil
	})
}
