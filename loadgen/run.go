package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sync/errgroup"
)

// maxStripes bounds the recorders (and so the histograms' memory): workers
// share them round-robin.
const maxStripes = 16

// runner is one run's state. Its goroutines (workers, dispatcher, relays,
// collector) all belong to one errgroup that Run waits for.
type runner struct {
	t    Target
	loc  Locator
	o    Options
	ids  []string
	keys *chooser

	nonce   string // makes this run's event ids unique across runs
	payload string
	shards  int

	recs     []*recorder
	relayRec *recorder

	start        time.Time
	measureStart time.Time
	measureEnd   time.Time

	stopOnce    sync.Once
	stopCh      chan struct{} // closed when no new operations may start
	stoppedAt   atomic.Int64  // unix nanos of the stop
	interrupted atomic.Bool

	measuredIssued atomic.Int64 // for the Ops bound
	completedIn    atomic.Int64 // ok + dedupe ops completing inside the measured period (any intended start)
	commitsIn      atomic.Int64 // successful commits completing inside the measured period
	inFlight       atomic.Int64

	// open loop (measured period)
	intended, started, late, dropped atomic.Int64
	lagMu                            sync.Mutex
	lag                              *hdr.Histogram // dispatcher lag, measured period
	lagWindow                        *hdr.Histogram

	relays       relayCounters
	backlogStart int

	windows []Window
	checks  *selfChecker
}

type relayCounters struct {
	delivered, deduped, spawns, fired, timerDeduped, errors atomic.Int64
}

// worker is one closed-loop worker or open-loop executor.
type worker struct {
	idx    int
	rng    *rand.Rand
	rec    *recorder
	seq    int64
	recent []processed // ring of events this worker had committed
	next   int
}

type processed struct{ id, event string }

const recentSize = 64

func (w *worker) remember(id, event string) {
	if len(w.recent) < recentSize {
		w.recent = append(w.recent, processed{id, event})
		return
	}
	w.recent[w.next] = processed{id, event}
	w.next = (w.next + 1) % recentSize
}

// Run sets up the workload's executions (unless o.SkipSetup), runs the load
// against t, and returns what it measured. It returns an error only when
// the run could not be done (bad options, setup failed); operation errors
// are counted in the result. When ctx is canceled the run stops, in-flight
// operations get o.DrainTimeout to finish, and the partial result is
// returned with Interrupted set, together with ctx's error.
func Run(ctx context.Context, t Target, loc Locator, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if loc == nil {
		loc = SingleShard("all")
	}
	t = withTimeout(t, o.OpTimeout)
	r := &runner{t: t, loc: loc, o: o, shards: len(loc.Shards()), stopCh: make(chan struct{})}
	var err error
	if r.keys, err = newChooser(o.Workload.Keys, o.Workload.Executions); err != nil {
		return nil, err
	}
	r.ids = ExecutionIDs(o.Workload.Seed, o.Workload.Executions)
	r.payload = strings.Repeat("x", o.Workload.PayloadBytes)
	r.nonce = strconv.FormatInt(time.Now().UnixNano(), 36)
	var setup time.Duration
	if !o.SkipSetup {
		t0 := time.Now()
		if err := Setup(ctx, t, o.Workload, min(max(o.Concurrency, 4), 32)); err != nil {
			return nil, err
		}
		setup = time.Since(t0)
	}
	res := r.run(ctx)
	res.SetupSeconds = setup.Seconds()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, nil
}

// Setup creates the workload's executions that do not exist yet, with
// up to parallel concurrent creators.
func Setup(ctx context.Context, t Target, w Workload, parallel int) error {
	ids := ExecutionIDs(w.Seed, w.Executions)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	payload := strings.Repeat("x", w.PayloadBytes)
	for _, id := range ids {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			exe, _, err := t.LoadForEvent(gctx, id, "")
			if err != nil {
				return fmt.Errorf("setup: load %s: %w", id, err)
			}
			if exe != nil {
				return nil
			}
			c := &Commit{Exe: Execution{ID: id, DefinitionID: w.DefinitionID, Version: 0,
				State: State{Active: activeStates[0], Payload: payload}}}
			if err := t.Commit(gctx, c); err != nil && !errors.Is(err, ErrConflict) {
				return fmt.Errorf("setup: create %s: %w", id, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// activeStates is the cycle of the workload's state machine.
var activeStates = []string{"idle", "running", "waiting", "done"}

func (r *runner) stop() {
	r.stopOnce.Do(func() {
		r.stoppedAt.Store(time.Now().UnixNano())
		close(r.stopCh)
	})
}

func (r *runner) stopped() bool {
	select {
	case <-r.stopCh:
		return true
	default:
		return false
	}
}

func (r *runner) measured(intended time.Time) bool {
	return !intended.Before(r.measureStart) && intended.Before(r.measureEnd)
}

func (r *runner) inMeasuredPeriod(t time.Time) bool {
	return !t.Before(r.measureStart) && !t.After(r.measureEnd)
}

func (r *runner) run(ctx context.Context) *Result {
	o := r.o
	workers := o.Concurrency
	if o.Model == Open {
		workers = o.MaxOutstanding
	}
	r.recs = make([]*recorder, min(workers, maxStripes))
	for i := range r.recs {
		r.recs[i] = newRecorder(r.shards)
	}
	r.relayRec = newRecorder(r.shards)
	r.lag, r.lagWindow = newHist(), newHist()
	r.checks = newSelfChecker()

	// Operations run on opCtx: not canceled by ctx at once, so that
	// in-flight operations can finish (DrainTimeout) after a stop.
	opCtx, cancelOps := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelOps()

	if o.Relays {
		bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if rows, err := r.t.PendingOutbox(bctx, 0); err == nil {
			r.backlogStart = len(rows)
		}
		cancel()
	}
	r.start = time.Now()
	r.measureStart = r.start.Add(o.Warmup)
	r.measureEnd = r.measureStart.Add(o.Duration)
	endTimer := time.AfterFunc(time.Until(r.measureEnd), r.stop)
	defer endTimer.Stop()
	stopWatch := context.AfterFunc(ctx, func() {
		r.interrupted.Store(true)
		r.stop()
	})
	defer stopWatch()
	var load, bg errgroup.Group
	bgCtx, cancelBg := context.WithCancel(opCtx)
	defer cancelBg()
	bg.Go(func() error { r.collect(bgCtx); return nil })
	bg.Go(func() error {
		// After the stop, in-flight operations get DrainTimeout to finish.
		select {
		case <-r.stopCh:
		case <-bgCtx.Done():
			return nil
		}
		drain := time.NewTimer(o.DrainTimeout)
		defer drain.Stop()
		select {
		case <-drain.C:
			cancelOps()
		case <-bgCtx.Done():
		}
		return nil
	})
	if o.Relays {
		bg.Go(func() error { r.outboxRelay(opCtx); return nil })
		if o.Workload.Mix.Timer > 0 { // a workload without timers has none to sweep
			bg.Go(func() error { r.timerSweeper(opCtx); return nil })
		}
	}
	switch o.Model {
	case Closed:
		for i := 0; i < o.Concurrency; i++ {
			w := &worker{idx: i, rng: rand.New(rand.NewPCG(o.Workload.Seed, uint64(i)+1)), rec: r.recs[i%len(r.recs)]}
			load.Go(func() error { r.closedWorker(opCtx, w); return nil })
		}
	case Open:
		r.openLoop(opCtx, &load)
	}
	_ = load.Wait()
	r.stop()
	cancelBg()
	_ = bg.Wait()
	return r.result(opCtx)
}

func (r *runner) closedWorker(ctx context.Context, w *worker) {
	for !r.stopped() {
		now := time.Now()
		if !now.Before(r.measureEnd) {
			r.stop()
			return
		}
		m := r.measured(now)
		if m && r.o.Ops > 0 && r.measuredIssued.Add(1) > r.o.Ops {
			r.stop()
			return
		}
		r.doOp(ctx, w, w.rng, now, m)
	}
}

type job struct {
	i        int64
	intended time.Time
	measured bool
}

// openLoop dispatches operations at t0 + i/rate. Each operation's latency
// is measured from its intended start, so a slow system cannot slow the
// schedule down (coordinated omission). At most MaxOutstanding operations
// are in flight (queued or running); an arrival beyond that is dropped.
func (r *runner) openLoop(ctx context.Context, g *errgroup.Group) {
	o := r.o
	jobs := make(chan job, o.MaxOutstanding)
	slots := make(chan struct{}, o.MaxOutstanding)
	for i := 0; i < o.MaxOutstanding; i++ {
		w := &worker{idx: i, rec: r.recs[i%len(r.recs)]}
		g.Go(func() error {
			for j := range jobs {
				startAt := time.Now()
				if j.measured {
					r.started.Add(1)
					if startAt.Sub(j.intended) > o.LateThreshold {
						r.late.Add(1)
						w.rec.count(true, "late", 1)
					}
				}
				rng := rand.New(rand.NewPCG(o.Workload.Seed, uint64(j.i)|1<<63))
				r.doOp(ctx, w, rng, j.intended, j.measured)
				<-slots
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(jobs)
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		t0 := r.start
		for i := int64(0); ; i++ {
			intended := t0.Add(time.Duration(float64(i) * 1e9 / o.Rate))
			if !intended.Before(r.measureEnd) {
				r.stop()
				return nil
			}
			if d := time.Until(intended); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-r.stopCh:
					return nil
				}
			} else if r.stopped() {
				return nil
			}
			lag := time.Since(intended)
			m := r.measured(intended)
			r.lagMu.Lock()
			recordUS(r.lagWindow, lag)
			if m {
				recordUS(r.lag, lag)
			}
			r.lagMu.Unlock()
			if m {
				if o.Ops > 0 && r.measuredIssued.Add(1) > o.Ops {
					r.stop()
					return nil
				}
				r.intended.Add(1)
			}
			select {
			case slots <- struct{}{}:
				jobs <- job{i: i, intended: intended, measured: m}
			default:
				if m {
					r.dropped.Add(1)
				}
				r.recs[int(i)%len(r.recs)].count(m, "dropped", 1)
			}
		}
	})
}

// doOp runs one worker operation and records it.
func (r *runner) doOp(ctx context.Context, w *worker, rng *rand.Rand, intended time.Time, measured bool) {
	r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	var id, outcome string
	if r.o.Workload.Redelivery > 0 && rng.Float64() < r.o.Workload.Redelivery && len(w.recent) > 0 {
		p := w.recent[rng.IntN(len(w.recent))]
		id = p.id
		outcome = r.redeliver(ctx, w, p, measured)
	} else {
		id = r.ids[r.keys.next(rng)]
		outcome = r.transition(ctx, w, rng, id, measured)
	}
	end := time.Now()
	w.rec.recordOp(measured, r.loc.ShardOf(id), end.Sub(intended), outcome)
	// Throughput counts what the system delivered during the measured
	// period, whenever the operation was meant to start.
	if r.inMeasuredPeriod(end) && (outcome == OutcomeOK || outcome == OutcomeDedupeHit) {
		r.completedIn.Add(1)
	}
}

// redeliver sends an already processed event again: the store must say it
// was processed (dedupe), and nothing is committed.
func (r *runner) redeliver(ctx context.Context, w *worker, p processed, measured bool) string {
	t0 := time.Now()
	_, done, err := r.t.LoadForEvent(ctx, p.id, p.event)
	w.rec.recordKind(measured, KindRedelivery, time.Since(t0))
	switch {
	case err != nil:
		return r.fail(ctx, w.rec, measured, err)
	case !done:
		w.rec.recordError(measured, fmt.Errorf("%w: %s on %s", errDedupeMiss, p.event, p.id))
		return OutcomeDedupeMiss
	}
	return OutcomeDedupeHit
}

func (r *runner) fail(ctx context.Context, rec *recorder, measured bool, err error) string {
	if ctx.Err() != nil {
		return OutcomeCanceled
	}
	rec.recordError(measured, err)
	return OutcomeError
}

// plan is what a transition will write, drawn before the first attempt so
// that retries write the same thing.
type plan struct {
	fast  bool
	emits []string
	timer *TimerOp
	spawn bool
}

func (r *runner) draw(rng *rand.Rand) plan {
	m := r.o.Workload.Mix
	if rng.Float64() < m.Fast {
		return plan{fast: true}
	}
	var p plan
	if m.MaxEmits > 0 {
		for n := rng.IntN(m.MaxEmits + 1); n > 0; n-- {
			p.emits = append(p.emits, r.ids[r.keys.next(rng)])
		}
	}
	if m.Timer > 0 && rng.Float64() < m.Timer {
		path := "t" + strconv.Itoa(rng.IntN(3))
		if rng.Float64() < 0.3 {
			p.timer = &TimerOp{Path: path, Cancel: true}
		} else {
			p.timer = &TimerOp{Path: path}
		}
	}
	p.spawn = m.Spawn > 0 && rng.Float64() < m.Spawn
	return p
}

// transition loads id, applies the next event and commits, retrying with a
// reload after each conflict up to the retry cap.
func (r *runner) transition(ctx context.Context, w *worker, rng *rand.Rand, id string, measured bool) string {
	w.seq++
	event := fmt.Sprintf("%s%d-%d", r.eventPrefix(), w.idx, w.seq)
	p := r.draw(rng)
	for attempt := 0; ; attempt++ {
		t0 := time.Now()
		exe, done, err := r.t.LoadForEvent(ctx, id, event)
		w.rec.recordKind(measured, KindLoad, time.Since(t0))
		switch {
		case err != nil:
			return r.fail(ctx, w.rec, measured, err)
		case exe == nil:
			return r.fail(ctx, w.rec, measured, fmt.Errorf("%w: %s", errMissing, id))
		case done:
			return OutcomeDedupeHit // an earlier attempt committed after all
		}
		c := r.commitFor(exe, event, p)
		if r.o.Hook != nil {
			r.o.Hook()
		}
		t1 := time.Now()
		err = r.t.Commit(ctx, c)
		kind := KindComplex
		if c.Fast() {
			kind = KindFast
		}
		w.rec.recordKind(measured, kind, time.Since(t1))
		switch {
		case err == nil:
			w.remember(id, event)
			if r.inMeasuredPeriod(time.Now()) {
				r.commitsIn.Add(1)
			}
			return OutcomeOK
		case errors.Is(err, ErrConflict):
			w.rec.count(measured, OutcomeConflict, 1)
			if attempt >= r.o.Workload.RetryCap {
				return OutcomeGaveUp
			}
			w.rec.count(measured, OutcomeRetry, 1)
		default:
			return r.fail(ctx, w.rec, measured, err)
		}
	}
}

// next applies event to exe: the workload's deterministic transition.
func (r *runner) next(exe *Execution, event string) Execution {
	n := *exe
	n.State.Step++
	n.State.Active = activeStates[n.State.Step%int64(len(activeStates))]
	n.State.Last = event
	n.State.Payload = r.payload
	return n
}

func (r *runner) commitFor(exe *Execution, event string, p plan) *Commit {
	c := &Commit{Exe: r.next(exe, event), ProcessedEventID: event}
	if p.fast {
		return c
	}
	now := time.Now()
	c.Trace = fmt.Sprintf(`{"step":%d,"event":%q,"active":%q}`, c.Exe.State.Step, event, c.Exe.State.Active)
	for k, target := range p.emits {
		c.Emits = append(c.Emits, Emit{TargetID: target,
			Event: fmt.Sprintf(`{"id":"%s-e%d","name":"ping","from":%q,"emitted_ns":%d}`, event, k, exe.ID, now.UnixNano())})
	}
	if p.timer != nil {
		op := *p.timer
		if !op.Cancel {
			op.FireAt = unixSeconds(now.Add(r.o.Workload.TimerDelay))
		}
		c.Timers = []TimerOp{op}
	}
	if p.spawn {
		c.Spawns = []Spawn{{ChildID: derivedID(event), RootPath: "child", Context: "{}"}}
	}
	return c
}

// eventPrefix starts the id of every event this run creates.
func (r *runner) eventPrefix() string { return "lg-" + r.nonce + "-" }

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
