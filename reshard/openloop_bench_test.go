package reshard_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/reshard"
)

// BenchmarkMoveAtOfferedLoad is BenchmarkMoveAsClientsSeeIt at a fixed
// offered load instead of saturation: the clients' benchmark's writers
// (closed loop, as fast as the machine lets them) take every core the
// mover leaves, so its unmoved share counts the mover's CPU against the
// unmoved range whatever the load a user would run. Here, in one run:
//
//  1. the saturation rate: the clients' benchmark's four closed-loop
//     writers (two per half of the buckets) for a window, commits/s;
//  2. an open loop offering a fixed rate of commits — RESHARD_OFFERED_RATE
//     (commits/s over both halves) when set, else RESHARD_OFFERED_SHARE
//     (default 0.5) of the saturation rate — half to keys of the moving
//     range, half to the unmoved one, each commit started at its
//     scheduled time by a pool of workers (no two on one key) and timed
//     from that scheduled time, so a commit that waited for a worker or
//     for a freeze counts its wait (no coordinated omission);
//  3. a window before the moves, b.N moves of the lower half back and
//     forth, a window after.
//
// Reported: the unmoved range's commits/s during the moves and outside
// them (the windows before and after, averaged) as a fraction of what it
// was offered, and its p50/p99 latency during and outside; the moving
// range's commits during the moves as clients see them (p50, p99, max:
// the freeze, any wait behind it and any reload-and-retry after a fence
// error are inside); each flipped freeze as the mover measured it (p50,
// p99, max); the commits that failed; the saturation and offered rates.
// The chaos `ci` and `reshard` scenarios are closed loops too (24 and 12
// workers through PgBouncer and the proxy, under faults, at 100–300
// acknowledged commits a second; ~1,000 fault-free, README "Chaos
// testing"), so half the saturation rate of this machine stands for
// their load. The log also counts the unmoved commits over slowMark by
// the mover's last step (Options.Hook) when they were scheduled. The
// default rate is a share of the saturation measured at the start: on a
// machine whose load rises after it, the run becomes an overload test
// (set RESHARD_OFFERED_RATE to compare runs). Not in a timed test;
// asserts nothing:
//
//	go test -run '^$' -bench MoveAtOfferedLoad -benchtime 4x ./reshard
func BenchmarkMoveAtOfferedLoad(b *testing.B) {
	const window = 3 * time.Second
	e := newEnv(b, 1000)
	moving, unmoved := e.halves()
	sat := e.saturation(b, moving, unmoved, window)
	offered := offeredRate(b, sat)
	ol := newOpenLoop(e, offered/2, moving, unmoved)
	ws := newWaitSampler(b, e.ctx, e.shards, func() string {
		if sp := ol.step.Load(); sp != nil {
			return *sp
		}
		return "start"
	})
	ol.start()
	defer ol.stop()
	ws.start(e.ctx)
	defer ws.stop()

	time.Sleep(window)
	t1 := time.Now()
	ol.phase.Store(1)
	b.ResetTimer()
	held, abandoned := e.moveBackAndForth(b, ol.hook)
	b.StopTimer()
	during := time.Since(t1)
	ol.phase.Store(2)
	time.Sleep(window)
	ol.stop()

	ol.mu.Lock()
	defer ol.mu.Unlock()
	var bySteps strings.Builder
	for _, st := range slices.Sorted(maps.Keys(ol.slow)) {
		c := ol.slow[st]
		fmt.Fprintf(&bySteps, " %s %d/%d", st, c[0], c[1])
	}
	b.Logf("unmoved commits over %v / scheduled, by the mover's last step (→src: shard0, the unmoved range's, is the source):%s", slowMark, bySteps.String())
	for msg, n := range ol.errs {
		b.Logf("failed %d×: %s", n, msg)
	}
	ol.logMovingSlow(b)
	ws.log(b, 3)
	n, total, longest := e.reloads.get()
	b.Logf("router reloads (catalog map loads): %d, mean %v, max %v", n, (total / time.Duration(max(n, 1))).Round(time.Microsecond), longest.Round(time.Microsecond))
	per := offered / 2
	outside := float64(ol.done[1][0]+ol.done[1][2]) / (2 * window.Seconds() * per)
	in := float64(ol.done[1][1]) / (during.Seconds() * per)
	ms := func(us int64) float64 { return float64(us) / 1000 }
	out := mergedHist(ol.lat[1][0], ol.lat[1][2])
	mv, um := ol.lat[0][1], ol.lat[1][1]
	b.ReportMetric(sat, "commits/s-saturation")
	b.ReportMetric(offered, "commits/s-offered")
	b.ReportMetric(in, "x-unmoved-of-offered-during")
	b.ReportMetric(outside, "x-unmoved-of-offered-outside")
	b.ReportMetric(ms(um.ValueAtQuantile(50)), "ms-unmoved-p50-during")
	b.ReportMetric(ms(um.ValueAtQuantile(99)), "ms-unmoved-p99-during")
	b.ReportMetric(ms(out.ValueAtQuantile(99)), "ms-unmoved-p99-outside")
	b.ReportMetric(ms(mv.ValueAtQuantile(50)), "ms-moving-p50")
	b.ReportMetric(ms(mv.ValueAtQuantile(99)), "ms-moving-p99")
	b.ReportMetric(ms(mv.Max()), "ms-moving-max")
	b.ReportMetric(float64(ol.failed), "failed")
	b.ReportMetric(float64(abandoned)/float64(b.N), "freezes-abandoned/move")
	if len(held) > 0 {
		slices.Sort(held)
		b.ReportMetric(ms(held[len(held)/2].Microseconds()), "ms-freeze-p50")
		b.ReportMetric(ms(held[(len(held)*99+99)/100-1].Microseconds()), "ms-freeze-p99")
		b.ReportMetric(ms(held[len(held)-1].Microseconds()), "ms-freeze-max")
	}
	b.Logf("saturation %.0f commits/s, offered %.0f (%.0f a range); %d moves in %s, %d freezes flipped (+%d abandoned); "+
		"unmoved range: %.0f commits/s during the moves (×%.2f of offered, p50 %.1f ms, p99 %.1f ms) vs ×%.2f outside them (p50 %.1f ms, p99 %.1f ms); "+
		"moving range during the moves: %d commits, p50 %.1f ms, p99 %.1f ms, max %.1f ms (outside: p99 %.1f ms); %d commits not started (workers all busy); failed commits: %d",
		sat, offered, per, b.N, during.Round(time.Millisecond), len(held), abandoned,
		float64(ol.done[1][1])/during.Seconds(), in, ms(um.ValueAtQuantile(50)), ms(um.ValueAtQuantile(99)),
		outside, ms(out.ValueAtQuantile(50)), ms(out.ValueAtQuantile(99)),
		mv.TotalCount(), ms(mv.ValueAtQuantile(50)), ms(mv.ValueAtQuantile(99)), ms(mv.Max()),
		ms(mergedHist(ol.lat[0][0], ol.lat[0][2]).ValueAtQuantile(99)), ol.dropped, ol.failed)
}

// saturation runs the clients' benchmark's four closed-loop writers (two
// on each half, keys of their own) for d and returns their commits/s.
func (e *env) saturation(b *testing.B, moving, unmoved []string, d time.Duration) float64 {
	var n atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		ids := [][]string{moving, unmoved}[w%2]
		half := len(ids) / 2
		ids = ids[(w/2)*half : (w/2+1)*half]
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 17))
			for range 1 << 30 {
				select {
				case <-stop:
					return
				default:
				}
				if e.commit(ids[rng.IntN(len(ids))]) == nil {
					n.Add(1)
				}
			}
		}()
	}
	t0 := time.Now()
	time.Sleep(d)
	close(stop)
	wg.Wait()
	rate := float64(n.Load()) / time.Since(t0).Seconds()
	if rate <= 0 {
		b.Fatal("no commit in the saturation window")
	}
	return rate
}

// offeredRate is RESHARD_OFFERED_RATE, or RESHARD_OFFERED_SHARE (default
// 0.5) of the saturation rate sat.
func offeredRate(b *testing.B, sat float64) float64 {
	if v := os.Getenv("RESHARD_OFFERED_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 {
			b.Fatalf("RESHARD_OFFERED_RATE=%q: want commits/s > 0", v)
		}
		return r
	}
	share := 0.5
	if v := os.Getenv("RESHARD_OFFERED_SHARE"); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s <= 0 || s > 1 {
			b.Fatalf("RESHARD_OFFERED_SHARE=%q: want a number in (0, 1]", v)
		}
		share = s
	}
	return share * sat
}

// moveBackAndForth moves the lower half of the buckets b.N times, to
// shard1 and back, applying a move again (bounded) whose freezes were all
// abandoned, and returns each flipped freeze as the mover measured it and
// the count of abandoned ones.
func (e *env) moveBackAndForth(b *testing.B, hook func(context.Context, string, catalog.MoveRecord) error) (held []time.Duration, abandoned int) {
	opts := benchOptions(b)
	opts.Hook = hook
	for i := range b.N {
		to := e.shards[1].Name
		if i%2 == 1 {
			to = e.shards[0].Name
		}
		if _, err := reshard.Plan(e.ctx, e.cat, reshard.Request{Lo: 0, Hi: buckets/2 - 1, To: to}); err != nil {
			b.Fatal(err)
		}
		for attempt := 1; ; attempt++ {
			res, err := reshard.Apply(e.ctx, e.cat, opts)
			for _, r := range res {
				for _, f := range r.Freezes {
					if f.Abandoned {
						abandoned++
					} else {
						held = append(held, f.Duration)
					}
				}
			}
			if err == nil {
				break
			}
			if attempt == 5 {
				b.Fatal(err)
			}
			b.Logf("apply again: %v", err)
		}
	}
	return held, abandoned
}

// openLoop offers commits at a fixed rate to each of two key sets (0 the
// moving range's, 1 the unmoved one's): a scheduler per set hands each
// commit's scheduled time to a pool of workers, which take a key no
// other worker holds, commit, and record the time from the schedule to
// the acknowledgement under the phase (0 before, 1 moving, 2 after) the
// commit was scheduled in.
type openLoop struct {
	e     *env
	rate  float64 // commits/s per key set
	keys  [2][]string
	phase atomic.Int32
	quit  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once

	// step is the mover's last step (Options.Hook) and the direction
	// ("→src": the unmoved range's shard, shard0, is the move's source).
	step atomic.Pointer[string]

	mu      sync.Mutex
	slow    map[string][2]int64   // unmoved commits over slowMark by the step they were scheduled in: slow, all
	mvSlow  map[string]*slowSplit // moving commits over movingSlowMark during the moves, by the steps they were scheduled in and ended in
	busy    map[string]bool
	lat     [2][3]*hdr.Histogram
	done    [2][3]int64 // acknowledged, by key set and the phase at acknowledgement
	failed  int64
	dropped int64 // scheduled commits no worker could take (queue full)
	errs    map[string]int
}

// slowMark is the unmoved commit latency counted as slow, by the
// mover's step it was scheduled in.
const slowMark = 50 * time.Millisecond

// hook records the mover's step as the steps' Options.Hook.
func (ol *openLoop) hook(_ context.Context, step string, m catalog.MoveRecord) error {
	dir := "→dst"
	if m.From == ol.e.shards[0].Name {
		dir = "→src"
	}
	s := step + dir
	ol.step.Store(&s)
	return nil
}

// openLoopWorkers bounds each key set's commits in flight; a commit
// scheduled while its queue is full is dropped (and so not achieved).
const openLoopWorkers = 64

func newOpenLoop(e *env, rate float64, moving, unmoved []string) *openLoop {
	ol := &openLoop{e: e, rate: rate, keys: [2][]string{moving, unmoved}, quit: make(chan struct{}),
		busy: map[string]bool{}, errs: map[string]int{}, slow: map[string][2]int64{}, mvSlow: map[string]*slowSplit{}}
	for s := range 2 {
		for p := range 3 {
			ol.lat[s][p] = hdr.New(1, int64(time.Minute/time.Microsecond), 3)
		}
	}
	return ol
}

func (ol *openLoop) start() {
	for s := range 2 {
		jobs := make(chan time.Time, 4*openLoopWorkers)
		for w := range openLoopWorkers {
			ol.wg.Add(1)
			go ol.worker(s, w, jobs)
		}
		ol.wg.Add(1)
		go ol.schedule(jobs)
	}
}

// stop ends the load and waits for every goroutine; idempotent.
func (ol *openLoop) stop() {
	ol.once.Do(func() { close(ol.quit) })
	ol.wg.Wait()
}

// schedule sends the scheduled start of each commit, rate a second, until
// quit; behind schedule it sends at once (the times stay the schedule's).
func (ol *openLoop) schedule(jobs chan<- time.Time) {
	defer ol.wg.Done()
	defer close(jobs)
	interval := time.Duration(float64(time.Second) / ol.rate)
	t0 := time.Now()
	for i := range 1 << 40 {
		at := t0.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			select {
			case <-ol.quit:
				return
			case <-time.After(d):
			}
		}
		select {
		case <-ol.quit:
			return
		case jobs <- at:
		default:
			ol.mu.Lock()
			ol.dropped++
			ol.mu.Unlock()
		}
	}
}

func (ol *openLoop) worker(s, w int, jobs <-chan time.Time) {
	defer ol.wg.Done()
	rng := rand.New(rand.NewPCG(uint64(s*1000+w), 19))
	for at := range jobs {
		p := ol.phase.Load()
		step := "start"
		if sp := ol.step.Load(); sp != nil {
			step = *sp
		}
		id := ol.take(rng, ol.keys[s])
		started := time.Now()
		load, err := ol.e.commitSplit(id)
		d := time.Since(at)
		if s == 0 && p == 1 && err == nil && d > movingSlowMark {
			end := "start"
			if sp := ol.step.Load(); sp != nil {
				end = *sp
			}
			ol.noteMovingSlow(step+" … "+end, started.Sub(at), load, d-started.Sub(at)-load)
		}
		ol.mu.Lock()
		delete(ol.busy, id)
		if err != nil {
			ol.failed++
			ol.errs[err.Error()]++
		} else {
			_ = ol.lat[s][p].RecordValue(max(1, d.Microseconds()))
			ol.done[s][ol.phase.Load()]++
			if s == 1 && p == 1 {
				c := ol.slow[step]
				c[1]++
				if d > slowMark {
					c[0]++
				}
				ol.slow[step] = c
			}
		}
		ol.mu.Unlock()
	}
}

// movingSlowMark is the moving range's commit latency (from its scheduled
// start) whose time is broken down in the log.
const movingSlowMark = 100 * time.Millisecond

// slowSplit sums the parts of slow commits: the wait for a worker (open
// loop queueing), the load, the commit.
type slowSplit struct {
	n                   int
	queue, load, commit time.Duration
	maxTotal            time.Duration
}

func (ol *openLoop) noteMovingSlow(steps string, queue, load, commit time.Duration) {
	ol.mu.Lock()
	defer ol.mu.Unlock()
	sp := ol.mvSlow[steps]
	if sp == nil {
		sp = &slowSplit{}
		ol.mvSlow[steps] = sp
	}
	sp.n++
	sp.queue += queue
	sp.load += load
	sp.commit += commit
	sp.maxTotal = max(sp.maxTotal, queue+load+commit)
}

// logMovingSlow logs the moving range's slow commits by the mover's steps
// they were scheduled in and ended in, with their mean split.
func (ol *openLoop) logMovingSlow(b *testing.B) {
	for _, st := range slices.Sorted(maps.Keys(ol.mvSlow)) {
		sp := ol.mvSlow[st]
		n := time.Duration(sp.n)
		b.Logf("moving commits over %v, scheduled … ended in step %s: %d, mean queue %v, load %v, commit %v; max %v",
			movingSlowMark, st, sp.n, (sp.queue / n).Round(time.Millisecond), (sp.load / n).Round(time.Millisecond),
			(sp.commit / n).Round(time.Millisecond), sp.maxTotal.Round(time.Millisecond))
	}
}

// take marks and returns a key of ids no worker holds (ids has far more
// keys than there are workers, so a few draws find one; bounded).
func (ol *openLoop) take(rng *rand.Rand, ids []string) string {
	ol.mu.Lock()
	defer ol.mu.Unlock()
	id := ids[rng.IntN(len(ids))]
	for range 4 * len(ids) {
		if !ol.busy[id] {
			break
		}
		id = ids[rng.IntN(len(ids))]
	}
	ol.busy[id] = true
	return id
}

func mergedHist(hs ...*hdr.Histogram) *hdr.Histogram {
	m := hdr.New(1, int64(time.Minute/time.Microsecond), 3)
	for _, h := range hs {
		m.Merge(h)
	}
	return m
}
