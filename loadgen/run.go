package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
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
	own  map[string]struct{} // a part's executions (nil: a whole run drives every one)
	keys *chooser

	runID   string // prefixes op ids and event ids: unique across runs
	payload string
	shards  int

	setupIDs, relayIDs, sweepIDs *opIDs

	// The relays stop at relayStop: with the stop of the workers, or
	// after the quiesce phase when there is one.
	relayStopOnce sync.Once
	relayStop     chan struct{}
	quiesce       *QuiesceStats

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
	lagPending                       []lagValue // lags not yet recorded (see recorder)

	relays       relayCounters
	backlogStart int

	windows     []Window
	windowHists []string       // the windows' op histograms, encoded
	windowHist  *hdr.Histogram // the collector's merge of the current window (reused)
	checks      *selfChecker
}

type relayCounters struct {
	delivered, deduped, spawns, fired, timerDeduped, errors atomic.Int64
}

// worker is one closed-loop worker or open-loop executor.
type worker struct {
	idx    int
	src    string // "w<idx>"
	ids    *opIDs
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
	r := &runner{t: t, loc: loc, o: o, shards: len(loc.Shards()), stopCh: make(chan struct{}), relayStop: make(chan struct{})}
	var err error
	r.ids = partIDs(ExecutionIDs(o.Workload.Seed, o.Workload.Executions), o.Part)
	if !o.Part.Whole() {
		r.own = make(map[string]struct{}, len(r.ids))
		for _, id := range r.ids {
			r.own[id] = struct{}{}
		}
	}
	if r.keys, err = newChooser(o.Workload.Keys, len(r.ids)); err != nil {
		return nil, err
	}
	r.payload = strings.Repeat("x", o.Workload.PayloadBytes)
	r.runID = o.RunID
	if r.runID == "" {
		r.runID = "lg" + strconv.FormatInt(time.Now().UnixNano(), 36)
		if !o.Part.Whole() { // parts started at the same instant on two machines stay distinct
			r.runID += "p" + strconv.Itoa(o.Part.Index)
		}
	}
	r.setupIDs, r.relayIDs, r.sweepIDs = newOpIDs(r.runID, "setup"), newOpIDs(r.runID, "relay"), newOpIDs(r.runID, "sweeper")
	var setup time.Duration
	if !o.SkipSetup {
		t0 := time.Now()
		if err := r.setup(ctx, min(max(o.Concurrency, 4), 32)); err != nil {
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
	o := DefaultOptions()
	o.Workload = w
	r := &runner{t: t, o: o, runID: "setup" + strconv.FormatInt(time.Now().UnixNano(), 36),
		payload: strings.Repeat("x", w.PayloadBytes)}
	r.setupIDs = newOpIDs(r.runID, "setup")
	return r.setup(ctx, parallel)
}

// setup creates the run's executions that do not exist yet, recording
// each load and create when the run has an Observer.
func (r *runner) setup(ctx context.Context, parallel int) error {
	w := r.o.Workload
	ids := partIDs(ExecutionIDs(w.Seed, w.Executions), r.o.Part)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	for _, id := range ids {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			op := r.startLoad("setup", id, "", CauseSetup, r.setupIDs)
			exe, _, err := r.t.LoadForEvent(gctx, id, "")
			r.endLoad(op, exe, false, err)
			if err != nil {
				return fmt.Errorf("setup: load %s: %w", id, err)
			}
			if exe != nil {
				return nil
			}
			opID := r.setupIDs.next()
			c := &Commit{Exe: Execution{ID: id, DefinitionID: w.DefinitionID, Version: 0,
				State: State{Active: activeStates[0], Op: opID, Payload: r.payload}}}
			cop := r.startCommit("setup", opID, c, CauseSetup, "")
			err = r.t.Commit(gctx, c)
			r.done(cop, err)
			if err != nil && !errors.Is(err, ErrConflict) {
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

// stopRelays ends the relays' loops (they finish the batch at hand).
func (r *runner) stopRelays() { r.relayStopOnce.Do(func() { close(r.relayStop) }) }

func (r *runner) relaysStopped() bool {
	select {
	case <-r.relayStop:
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
	if o.OnStart != nil {
		o.OnStart(r.start)
	}
	r.measureStart = r.start.Add(o.Warmup)
	r.measureEnd = r.measureStart.Add(o.Duration)
	var endTimer *time.Timer
	if o.Until == nil {
		endTimer = time.AfterFunc(time.Until(r.measureEnd), r.stop)
	} else {
		// Extended: the ceiling ends the run; from Duration on, the goal
		// ends it as soon as it is met (checked by untilGoal).
		r.measureEnd = r.measureStart.Add(o.MaxDuration)
		goalFrom := r.measureStart.Add(o.Duration)
		endTimer = time.AfterFunc(time.Until(r.measureEnd), r.stop)
		goalDone := make(chan struct{})
		defer func() { <-goalDone }()
		go func() { defer close(goalDone); r.untilGoal(goalFrom) }()
	}
	defer endTimer.Stop()
	stopWatch := context.AfterFunc(ctx, func() {
		r.interrupted.Store(true)
		r.stop()
	})
	defer stopWatch()
	// The relays run on their own context: with a quiesce phase they go
	// on after the workers' operations were drained.
	relayCtx, cancelRelays := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRelays()
	if o.Quiesce == nil {
		stopRelays := context.AfterFunc(opCtx, cancelRelays)
		defer stopRelays()
	} else {
		// Interrupted: the relays' operations get DrainTimeout too.
		stopRelays := context.AfterFunc(ctx, func() { time.AfterFunc(o.DrainTimeout, cancelRelays) })
		defer stopRelays()
	}
	var load, bg, relays errgroup.Group
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
		relays.Go(func() error { r.outboxRelay(relayCtx); return nil })
		if o.Workload.Mix.Timer > 0 { // a workload without timers has none to sweep
			relays.Go(func() error { r.timerSweeper(relayCtx); return nil })
		}
	}
	switch o.Model {
	case Closed:
		for i := 0; i < o.Concurrency; i++ {
			w := r.newWorker(i)
			w.rng = rand.New(rand.NewPCG(o.Workload.Seed, uint64(i)+1))
			load.Go(func() error { r.closedWorker(opCtx, w); return nil })
		}
	case Open:
		r.openLoop(opCtx, &load)
	}
	_ = load.Wait()
	r.flushLag()
	r.stop()
	if o.Quiesce != nil && !r.interrupted.Load() {
		r.quiesceRun(ctx, relayCtx)
	}
	r.stopRelays()
	_ = relays.Wait()
	cancelBg()
	_ = bg.Wait()
	return r.result(opCtx)
}

// quiesceRun is the heal-and-quiesce phase: Heal, then wait until the
// relays have drained the outbox and the spawns and fired every timer,
// or the timeout passes. Interrupting the run (ctx) ends it early.
func (r *runner) quiesceRun(ctx, relayCtx context.Context) {
	q := r.o.Quiesce
	t0 := time.Now()
	qctx, cancel := context.WithTimeout(ctx, q.Timeout)
	defer cancel()
	st := &QuiesceStats{OutboxLeft: -1, SpawnsLeft: -1, TimersLeft: -1}
	r.quiesce = st
	defer func() { st.Seconds = time.Since(t0).Seconds() }()
	if q.Heal != nil {
		if err := q.Heal(qctx); err != nil {
			st.HealError = err.Error()
		}
	}
	poll := q.Poll
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		st.OutboxLeft, st.SpawnsLeft, st.TimersLeft = r.pending(qctx)
		if st.OutboxLeft == 0 && st.SpawnsLeft == 0 && st.TimersLeft == 0 {
			st.OK = true
			return
		}
		select {
		case <-tick.C:
		case <-qctx.Done():
			return
		case <-relayCtx.Done():
			return
		}
	}
}

// pending counts what the relays still have to do: outbox rows, spawn
// intents and armed timers, due or not (-1: could not be counted).
func (r *runner) pending(ctx context.Context) (outbox, spawns, timers int) {
	outbox, spawns, timers = -1, -1, -1
	if rows, err := r.t.PendingOutbox(ctx, 0); err == nil {
		outbox = len(rows)
	}
	if rows, err := r.t.PendingSpawns(ctx, 0); err == nil {
		spawns = len(rows)
	}
	if rows, err := r.t.DueTimers(ctx, math.MaxFloat64, 0); err == nil {
		timers = len(rows)
	}
	return outbox, spawns, timers
}

// untilGoal stops the run once it is past from and o.Until reports its
// goal met; it returns when the run stops either way.
func (r *runner) untilGoal(from time.Time) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-r.stopCh:
			return
		case now := <-t.C:
			if !now.Before(from) && r.o.Until() {
				r.stop()
				return
			}
		}
	}
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

func (r *runner) newWorker(i int) *worker {
	src := "w" + strconv.Itoa(i)
	return &worker{idx: i, src: src, ids: newOpIDs(r.runID, src), rec: r.recs[i%len(r.recs)]}
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
	// Executors start on demand, so that there are always at least as many
	// as operations in flight (queued or running: the slots taken) and no
	// queued operation waits for one; at most MaxOutstanding. A few
	// executors then serve a low rate (cheaper to schedule, and their
	// stacks stay grown) while a slow system still gets one executor per
	// operation in flight. Only the dispatcher starts them.
	executors := 0
	spawn := func() {
		w := r.newWorker(executors)
		executors++
		pcg := rand.NewPCG(0, 0)
		rng := rand.New(pcg)
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
				// Operation i's choices depend on i only, whichever
				// executor runs it.
				pcg.Seed(o.Workload.Seed, uint64(j.i)|1<<63)
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
		// A part's arrivals are offset by its index in the whole run's
		// schedule (Index/Count of an interval).
		offset := 0.0
		if !o.Part.Whole() {
			offset = float64(o.Part.Index) / float64(o.Part.Count)
		}
		for i := int64(0); ; i++ {
			intended := t0.Add(time.Duration((float64(i) + offset) * 1e9 / o.Rate))
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
			r.holdLag(lag, m)
			if m {
				if o.Ops > 0 && r.measuredIssued.Add(1) > o.Ops {
					r.stop()
					return nil
				}
				r.intended.Add(1)
			}
			select {
			case slots <- struct{}{}:
				// Slots are only released concurrently, so this holds
				// when the job is sent too.
				for executors < len(slots) {
					spawn()
				}
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

// lagValue is a dispatcher lag held for the lag histograms.
type lagValue struct {
	us       int64
	measured bool
}

// holdLag holds a dispatch's lag; like a recorder's values, lags are
// recorded into the (cold) histograms a batch at a time.
func (r *runner) holdLag(lag time.Duration, measured bool) {
	r.lagMu.Lock()
	defer r.lagMu.Unlock()
	r.lagPending = append(r.lagPending, lagValue{clampUS(lag), measured})
	if len(r.lagPending) >= pendingSize {
		r.flushLagLocked()
	}
}

func (r *runner) flushLag() {
	r.lagMu.Lock()
	defer r.lagMu.Unlock()
	r.flushLagLocked()
}

func (r *runner) flushLagLocked() {
	for _, v := range r.lagPending {
		_ = r.lagWindow.RecordValue(v.us) // in range by construction
		if v.measured {
			_ = r.lag.RecordValue(v.us)
		}
	}
	r.lagPending = r.lagPending[:0]
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
	op := r.startLoad(w.src, p.id, p.event, CauseRedeliver, w.ids)
	exe, done, err := r.t.LoadForEvent(ctx, p.id, p.event)
	r.endLoad(op, exe, done, err)
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
	event := r.eventPrefix() + w.src + "-" + strconv.FormatInt(w.seq, 10)
	p := r.draw(rng)
	for attempt := 0; ; attempt++ {
		t0 := time.Now()
		lop := r.startLoad(w.src, id, event, CauseWorker, w.ids)
		exe, done, err := r.t.LoadForEvent(ctx, id, event)
		r.endLoad(lop, exe, done, err)
		w.rec.recordKind(measured, KindLoad, time.Since(t0))
		switch {
		case err != nil:
			return r.fail(ctx, w.rec, measured, err)
		case exe == nil:
			return r.fail(ctx, w.rec, measured, fmt.Errorf("%w: %s", errMissing, id))
		case done:
			return OutcomeDedupeHit // an earlier attempt committed after all
		}
		opID := w.ids.next()
		c := r.commitFor(exe, event, p, opID)
		if r.o.Hook != nil {
			r.o.Hook()
		}
		cop := r.startCommit(w.src, opID, c, CauseWorker, event)
		t1 := time.Now()
		err = r.t.Commit(ctx, c)
		r.done(cop, err)
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
			if errors.Is(err, ErrOutcomeUnknown) {
				r.readBack(ctx, w.src, w.ids, id, event)
			}
			return r.fail(ctx, w.rec, measured, err)
		}
	}
}

// next applies event to exe as the commit op opID: the workload's
// deterministic transition. The armed timers carry over (a copy).
func (r *runner) next(exe *Execution, event, opID string) Execution {
	n := *exe
	n.State.Step++
	n.State.Active = activeStates[n.State.Step%int64(len(activeStates))]
	n.State.Last = event
	n.State.Op = opID
	n.State.Payload = r.payload
	n.State.Timers = nil
	for p, at := range exe.State.Timers {
		if n.State.Timers == nil {
			n.State.Timers = make(map[string]float64, len(exe.State.Timers)+1)
		}
		n.State.Timers[p] = at
	}
	return n
}

// commitFor is a worker step's commit of event as op opID: every effect
// carries opID, and the state's armed timers follow the step's timer op.
func (r *runner) commitFor(exe *Execution, event string, p plan, opID string) *Commit {
	c := &Commit{Exe: r.next(exe, event, opID), ProcessedEventID: event}
	if p.fast {
		return c
	}
	now := time.Now()
	// The documents are built as fmt.Sprintf with %q would (the same
	// bytes: strconv.AppendQuote is what %q does), without its reflection.
	b := make([]byte, 0, 256)
	b = append(b, `{"op":`...)
	b = strconv.AppendQuote(b, opID)
	b = append(b, `,"step":`...)
	b = strconv.AppendInt(b, c.Exe.State.Step, 10)
	b = append(b, `,"event":`...)
	b = strconv.AppendQuote(b, event)
	b = append(b, `,"active":`...)
	b = strconv.AppendQuote(b, c.Exe.State.Active)
	c.Trace = string(append(b, '}'))
	if len(p.emits) > 0 {
		c.Emits = make([]Emit, 0, len(p.emits))
	}
	for k, target := range p.emits {
		id := event + "-e" + strconv.Itoa(k)
		b = append(b[:0], `{"id":`...)
		b = strconv.AppendQuote(b, id)
		b = append(b, `,"name":"ping","from":`...)
		b = strconv.AppendQuote(b, exe.ID)
		b = append(b, `,"op":`...)
		b = strconv.AppendQuote(b, opID)
		b = append(b, `,"emitted_ns":`...)
		b = strconv.AppendInt(b, now.UnixNano(), 10)
		c.Emits = append(c.Emits, Emit{ID: id, TargetID: target, Event: string(append(b, '}'))})
	}
	if p.timer != nil {
		op := *p.timer
		st := &c.Exe.State
		if op.Cancel {
			delete(st.Timers, op.Path)
		} else {
			op.FireAt = unixSeconds(now.Add(r.o.Workload.TimerDelay))
			if st.Timers == nil {
				st.Timers = map[string]float64{}
			}
			st.Timers[op.Path] = op.FireAt
		}
		c.Timers = []TimerOp{op}
	}
	if p.spawn {
		c.Spawns = []Spawn{{ChildID: derivedID(event), RootPath: "child", Context: `{"op":` + strconv.Quote(opID) + `}`}}
	}
	return c
}

// eventPrefix starts the id of every event this run creates.
func (r *runner) eventPrefix() string { return r.runID + "-" }

// startLoad starts recording a load (nil when the run records nothing).
func (r *runner) startLoad(src, id, event, cause string, ids *opIDs) *Op {
	op := r.observing(OpLoad, src, id)
	if op != nil {
		op.ID, op.EventID, op.Cause = ids.next(), event, cause
	}
	return op
}

// endLoad completes a load op with what it read.
func (r *runner) endLoad(op *Op, exe *Execution, processed bool, err error) {
	if op == nil {
		return
	}
	if err == nil && exe != nil {
		op.Exists, op.Version, op.Writer, op.Processed = true, exe.Version, exe.State.Op, processed
		op.ReadDigest = StateDigest(exe.State)
	}
	r.done(op, err)
}

// startCommit starts recording commit attempt opID of c (nil when the run
// records nothing).
func (r *runner) startCommit(src, opID string, c *Commit, cause, input string) *Op {
	op := r.observing(OpCommit, src, c.Exe.ID)
	if op != nil {
		op.ID, op.Commit, op.Cause, op.EventID, op.Input = opID, c, cause, c.ProcessedEventID, input
	}
	return op
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
