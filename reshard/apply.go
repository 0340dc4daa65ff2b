package reshard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/shardmap"
)

// Defaults of Options.
const (
	DefaultFreezeBudget   = 100 * time.Millisecond
	DefaultFreezeAttempts = 20
	DefaultRetryPause     = 200 * time.Millisecond
	DefaultCatchUpBatch   = 2000
	DefaultCatchUpRounds  = 50
	DefaultDDLLockTimeout = 2 * time.Second
	DefaultLeaseTTL       = 30 * time.Second
	DefaultDutyCycle      = 0.5
	DefaultCleanupBatch   = 1000
	// MaxCleanupBatch bounds Options.CleanupBatch: a batch that large is
	// already the long transaction the batches exist to avoid.
	MaxCleanupBatch = 1000000
)

// LeaseOwner is the owner name of the mover's lease in the catalog: one
// Apply or Abort at a time per catalog.
const LeaseOwner = "pgshard-reshard"

// Options configure Apply and Abort. The zero value is usable.
type Options struct {
	// MaxParallel bounds the moves run at once (default 1).
	MaxParallel int
	// FreezeBudget bounds one freeze of a range, from the request of its
	// lock to its release (default 100 ms): a freeze that cannot flip
	// within it is abandoned (the source owns the range again) and
	// retried later, never extended.
	FreezeBudget time.Duration
	// FreezeAttempts bounds the freezes tried per move in one Apply
	// (default 20); RetryPause is the pause after the first abandoned
	// one, growing linearly (default 200 ms).
	FreezeAttempts int
	RetryPause     time.Duration
	// CatchUpBatch is the change records replayed per round (default
	// 2000); CatchUpRounds bounds the rounds before a freeze (default 50).
	CatchUpBatch  int
	CatchUpRounds int
	// DutyCycle is the share of the time, in (0, 1], that a move's
	// background work — the bulk copy, the catch-up rounds before a
	// freeze (those on the freeze's own connections just before its
	// lock included), the clean-up's deletes — may keep the mover busy (default
	// DefaultDutyCycle): after a stretch of such work that took t, the
	// mover pauses t·(1−DutyCycle)/DutyCycle, so the shards' other
	// ranges keep most of the CPU and I/O. 1 never pauses. A freeze is
	// never paced, and a catch-up whose backlog stops shrinking shortens
	// and then drops its pauses, so a paced move still converges
	// (ARCHITECTURE.md §6). Each of MaxParallel moves is paced alone.
	DutyCycle float64
	// CleanupBatch is the most rows of one table the clean-up deletes
	// per transaction (default DefaultCleanupBatch; at most
	// MaxCleanupBatch): after a flip the moved range's rows are deleted
	// on the source in committed batches, paced by DutyCycle between
	// them, so that no transaction holds their row locks or produces
	// their WAL all at once. Abort empties the destination the same way.
	CleanupBatch int
	// DDLLockTimeout bounds the wait of starting and stopping a capture
	// (its triggers wait for the writers of each table; default 2 s).
	DDLLockTimeout time.Duration
	// LeaseTTL is the mover's lease's time to live (default 30 s),
	// renewed every third of it. Apply and Abort hold the lease
	// LeaseOwner while they run: a second one fails (catalog.ErrLeaseHeld),
	// and one whose lease is lost stops.
	LeaseTTL time.Duration
	// Owner is recorded in the journal as the mover (default
	// "pgshard-reshard@<host>:<pid>").
	Owner string
	// Hook, when set, is called at each of Steps; an error it returns
	// stops the move there, as if its mover died (tests inject faults).
	Hook func(ctx context.Context, step string, m catalog.MoveRecord) error
	// Around, when set, runs each of CutSteps in the mover's place: it is
	// given the real step and decides what runs. Nothing in pgshard sets
	// it; it exists for chaos/mutant's broken movers, which the chaos
	// verifier must catch (a production mover leaves it nil).
	Around func(ctx context.Context, s CutStep) error
	// Log, when set, receives one line per event of note.
	Log func(format string, args ...any)

	// pause and now replace the pacer's sleep and clock (tests).
	pause func(context.Context, time.Duration) error
	now   func() time.Time
}

func (o Options) withDefaults() Options {
	orDefault(&o.MaxParallel, 1)
	orDefault(&o.FreezeBudget, DefaultFreezeBudget)
	orDefault(&o.FreezeAttempts, DefaultFreezeAttempts)
	orDefault(&o.RetryPause, DefaultRetryPause)
	orDefault(&o.CatchUpBatch, DefaultCatchUpBatch)
	orDefault(&o.CatchUpRounds, DefaultCatchUpRounds)
	orDefault(&o.DDLLockTimeout, DefaultDDLLockTimeout)
	orDefault(&o.CleanupBatch, DefaultCleanupBatch)
	orDefault(&o.LeaseTTL, DefaultLeaseTTL)
	if o.DutyCycle <= 0 {
		o.DutyCycle = DefaultDutyCycle
	}
	o.DutyCycle = min(o.DutyCycle, 1)
	if o.Owner == "" {
		host, _ := os.Hostname()
		o.Owner = fmt.Sprintf("pgshard-reshard@%s:%d", host, os.Getpid())
	}
	return o
}

// validate refuses options no default stands for (zero values are
// defaults).
func (o Options) validate() error {
	if o.CleanupBatch < 0 || o.CleanupBatch > MaxCleanupBatch {
		return fmt.Errorf("reshard: CleanupBatch must be in 1..%d rows (0: the default %d), got %d", MaxCleanupBatch, DefaultCleanupBatch, o.CleanupBatch)
	}
	return nil
}

// orDefault sets *v to d unless it is positive.
func orDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// newMover connects to every shard of the catalog's current map.
func newMover(ctx context.Context, cat *catalog.Catalog, opts Options) (*mover, func(), error) {
	m, err := cat.Load(ctx)
	if err != nil {
		return nil, nil, err
	}
	mv := &mover{cat: cat, opts: opts.withDefaults(), shards: map[string]*shard{}, nb: m.Buckets}
	closeAll := func() {
		for _, s := range mv.shards {
			s.pool.Close()
		}
	}
	for _, s := range m.Shards {
		sh, err := openShard(ctx, s)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		mv.shards[s.Name] = sh
	}
	return mv, closeAll, nil
}

// Apply runs every unfinished move of the journal to done, at most
// opts.MaxParallel at once, resuming each from its journaled phase. It
// returns what each move did and every move's error, joined; moves that
// failed stay in the journal for the next Apply (or Abort).
func Apply(ctx context.Context, cat *catalog.Catalog, opts Options) ([]*Result, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	moves, err := cat.Moves(ctx, true)
	if err != nil {
		return nil, err
	}
	if len(moves) == 0 {
		return nil, nil
	}
	var out []*Result
	err = withLease(ctx, cat, opts.withDefaults(), func(ctx context.Context) error {
		var err error
		out, err = apply(ctx, cat, opts)
		return err
	})
	return out, err
}

// withLease runs f holding the mover's lease, renewed in the background;
// f's context is cancelled if the lease is lost.
func withLease(ctx context.Context, cat *catalog.Catalog, opts Options, f func(context.Context) error) error {
	epoch, err := cat.Epoch(ctx)
	if err != nil {
		return err
	}
	l, err := cat.Acquire(ctx, LeaseOwner, "mover", epoch, opts.LeaseTTL)
	if err != nil {
		return fmt.Errorf("the mover's lease: another apply or abort runs, or one died less than %v ago: %w", opts.LeaseTTL, err)
	}
	lctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(opts.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
				n, err := cat.Renew(lctx, l, epoch)
				if err != nil {
					cancel(fmt.Errorf("the mover's lease was lost: %w", err))
					return
				}
				l = n
			}
		}
	}()
	err = f(lctx)
	if cause := context.Cause(lctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = fmt.Errorf("%w (%v)", err, cause)
	}
	cancel(nil)
	wg.Wait()
	if rerr := cat.Release(context.WithoutCancel(ctx), l); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

func apply(ctx context.Context, cat *catalog.Catalog, opts Options) ([]*Result, error) {
	moves, err := cat.Moves(ctx, true) // again: under the lease
	if err != nil {
		return nil, err
	}
	mv, closeAll, err := newMover(ctx, cat, opts)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	var (
		mu   sync.Mutex
		out  []*Result
		errs []error
	)
	var g errgroup.Group
	g.SetLimit(mv.opts.MaxParallel)
	for _, m := range moves {
		if m.Phase == catalog.PhaseAborting {
			errs = append(errs, fmt.Errorf("move %d is being aborted: run `pgshard reshard abort` to finish that", m.ID))
			continue
		}
		g.Go(func() error {
			res, err := mv.run(ctx, m)
			mu.Lock()
			defer mu.Unlock()
			out = append(out, res)
			if err != nil {
				errs = append(errs, fmt.Errorf("move %d (%d-%d %s→%s): %w", m.ID, m.Lo, m.Hi, m.From, m.To, err))
			}
			return nil
		})
	}
	_ = g.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].Move.ID < out[j].Move.ID })
	return out, errors.Join(errs...)
}

// Abort rolls back every unfinished move that has not flipped and
// completes those that have (a flipped move is past its commit point).
func Abort(ctx context.Context, cat *catalog.Catalog, opts Options) error {
	if err := opts.validate(); err != nil {
		return err
	}
	moves, err := cat.Moves(ctx, true)
	if err != nil || len(moves) == 0 {
		return err
	}
	return withLease(ctx, cat, opts.withDefaults(), func(ctx context.Context) error {
		return abort(ctx, cat, opts)
	})
}

func abort(ctx context.Context, cat *catalog.Catalog, opts Options) error {
	moves, err := cat.Moves(ctx, true) // again: under the lease
	if err != nil {
		return err
	}
	mv, closeAll, err := newMover(ctx, cat, opts)
	if err != nil {
		return err
	}
	defer closeAll()
	var errs []error
	for _, m := range moves {
		if err := mv.abort(ctx, m); err != nil {
			errs = append(errs, fmt.Errorf("abort move %d (%d-%d %s→%s): %w", m.ID, m.Lo, m.Hi, m.From, m.To, err))
		}
	}
	return errors.Join(errs...)
}

// Request is what a plan asks for: exactly one of AddShard, RemoveShard
// or a range (Lo..Hi) to move To a shard.
type Request struct {
	AddShard    string
	RemoveShard string
	Lo, Hi      int
	To          string
}

// PlanMoves computes the moves that Request needs on map m (in bucket
// order): AddShard rebalances onto a shard already in the map (registered
// empty, e.g. by `pgshard dev add-shard`), RemoveShard spreads a shard's
// buckets over the others (it stays in the map, empty), a range moves
// every bucket of Lo..Hi not already on To.
func PlanMoves(m *shardmap.Map, r Request) ([]shardmap.Move, error) {
	n := 0
	for _, set := range []bool{r.AddShard != "", r.RemoveShard != "", r.To != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, errors.New("plan: name exactly one of --add-shard, --remove-shard or --move LO-HI --to SHARD")
	}
	var next *shardmap.Map
	switch {
	case r.AddShard != "":
		s, err := m.ShardByName(r.AddShard)
		if err != nil {
			return nil, fmt.Errorf("plan: %w (register the shard first: `pgshard dev add-shard` or push a map naming it, empty: true)", err)
		}
		without := m.Clone()
		without.Shards = nil
		for _, x := range m.Shards {
			if x.Name != s.Name {
				without.Shards = append(without.Shards, x)
			}
		}
		if err := without.Validate(); err != nil {
			return nil, fmt.Errorf("plan: shard %q already owns buckets; --add-shard spreads buckets onto a shard that owns none: %w", s.Name, err)
		}
		add := *s
		add.Empty = false
		next, err = shardmap.PlanAdd(without, add)
		if err != nil {
			return nil, err
		}
	case r.RemoveShard != "":
		var err error
		next, err = shardmap.PlanRemove(m, r.RemoveShard)
		if err != nil {
			return nil, err
		}
	default:
		if _, err := m.ShardByName(r.To); err != nil {
			return nil, fmt.Errorf("plan: --to: %w", err)
		}
		if r.Lo < 0 || r.Hi < r.Lo || r.Hi >= m.Buckets {
			return nil, fmt.Errorf("plan: --move %d-%d: buckets are 0-%d", r.Lo, r.Hi, m.Buckets-1)
		}
		var moves []shardmap.Move
		for b := r.Lo; b <= r.Hi; b++ {
			from := m.ShardForBucket(b).Name
			if from == r.To {
				continue
			}
			if k := len(moves); k > 0 && moves[k-1].Hi == b-1 && moves[k-1].From == from {
				moves[k-1].Hi = b
				continue
			}
			moves = append(moves, shardmap.Move{Lo: b, Hi: b, From: from, To: r.To})
		}
		return moves, nil
	}
	return shardmap.Diff(m, next)
}

// Plan computes the moves of r on the catalog's current map and records
// them in the journal as planned (refused while an earlier plan is
// unfinished). It returns the journal's unfinished moves.
func Plan(ctx context.Context, cat *catalog.Catalog, r Request) ([]catalog.MoveRecord, error) {
	m, err := cat.Load(ctx)
	if err != nil {
		return nil, err
	}
	moves, err := PlanMoves(m, r)
	if err != nil {
		return nil, err
	}
	if len(moves) == 0 {
		return nil, errors.New("plan: nothing to move (every bucket is already where the plan puts it)")
	}
	return cat.PlanMoves(ctx, m.Epoch, moves)
}
