package reshard_test

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/pgshard/pgshard/reshard"
	"github.com/pgshard/pgshard/shardmap"
)

// BenchmarkMoveAsClientsSeeIt moves the lower half of the buckets back and
// forth b.N times while writers commit through a router following the
// catalog — two on keys of the moving range, two on keys outside it, no key
// shared by two writers — and
// reports, from one run:
//
//   - the commit latency the moving range's clients saw during the moves
//     (HDR: p50, p99, max; the freeze and any reload-and-retry after a
//     fence error are inside it), beside the same clients' p99 before any
//     move;
//   - the unmoved range's commits/s during the moves as a share of its
//     rate outside them (the windows before the first and after the last
//     move, averaged, so a drift of the machine's load hits both sides);
//   - the commits either side saw fail (goal 0: the router retries a
//     commit refused by the fence before it did anything);
//   - each flipped freeze as the mover measured it (range lock request to
//     release: p99 and max), and the freezes abandoned per move.
//
// Both shards, the catalog, the mover and the clients share this machine's
// cores, so the unmoved share includes the copy's and the capture's CPU.
// Nothing is asserted:
//
//	go test -run '^$' -bench MoveAsClientsSeeIt -benchtime 6x ./reshard
func BenchmarkMoveAsClientsSeeIt(b *testing.B) {
	const window = 3 * time.Second
	e := newEnv(b, 1000)
	moving, unmoved := e.halves()
	var (
		phase    atomic.Int32 // 0 before, 1 moving, 2 after
		mu       sync.Mutex
		lat      = [3]*hdr.Histogram{hdr.New(1, int64(time.Minute/time.Microsecond), 3), hdr.New(1, int64(time.Minute/time.Microsecond), 3), hdr.New(1, int64(time.Minute/time.Microsecond), 3)}
		unmovedN [3]int64
		failed   [2]int64 // moving, unmoved
		errs     = map[string]int{}
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	writer := func(w int, ids []string, isMoving bool) {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(uint64(w), 11))
		for range 1 << 30 {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			err := e.commit(ids[rng.IntN(len(ids))])
			d := time.Since(t0)
			p := phase.Load()
			mu.Lock()
			if err != nil {
				errs[err.Error()]++
			}
			switch {
			case err != nil && isMoving:
				failed[0]++
			case err != nil:
				failed[1]++
			case isMoving:
				_ = lat[p].RecordValue(max(1, d.Microseconds()))
			default:
				unmovedN[p]++
			}
			mu.Unlock()
		}
	}
	// Each writer has keys of its own: two writers of one key would
	// refuse each other's commits (version conflicts), which is not what
	// this measures.
	for w := range 4 {
		ids := [][]string{moving, unmoved}[w%2]
		half := len(ids) / 2
		wg.Add(1)
		go writer(w, ids[(w/2)*half:(w/2+1)*half], w%2 == 0)
	}
	defer func() { close(stop); wg.Wait() }()

	time.Sleep(window)
	t1 := time.Now()
	phase.Store(1)
	b.ResetTimer()
	freezes, abandoned := 0, 0
	var held []time.Duration // each flipped freeze as the mover measured it
	for i := range b.N {
		to := e.shards[1].Name
		if i%2 == 1 {
			to = e.shards[0].Name
		}
		if _, err := reshard.Plan(e.ctx, e.cat, reshard.Request{Lo: 0, Hi: buckets/2 - 1, To: to}); err != nil {
			b.Fatal(err)
		}
		// A move whose freezes were all abandoned (the machine too slow
		// for the budget at that moment) is applied again, as a user
		// would; bounded.
		for attempt := 1; ; attempt++ {
			res, err := reshard.Apply(e.ctx, e.cat, benchOptions(b))
			for _, r := range res {
				for _, f := range r.Freezes {
					if f.Abandoned {
						abandoned++
					} else {
						freezes++
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
	b.StopTimer()
	during := time.Since(t1)
	phase.Store(2)
	time.Sleep(window)
	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // the deferred close must not close it twice

	mu.Lock()
	defer mu.Unlock()
	for msg, n := range errs {
		b.Logf("failed %d×: %s", n, msg)
	}
	outside := float64(unmovedN[0]+unmovedN[2]) / (2 * window.Seconds())
	in := float64(unmovedN[1]) / during.Seconds()
	ms := func(us int64) float64 { return float64(us) / 1000 }
	h := lat[1]
	b.ReportMetric(ms(h.ValueAtQuantile(50)), "ms-moving-p50")
	b.ReportMetric(ms(h.ValueAtQuantile(99)), "ms-moving-p99")
	b.ReportMetric(ms(h.Max()), "ms-moving-max")
	b.ReportMetric(ms(lat[0].ValueAtQuantile(99)), "ms-before-p99")
	b.ReportMetric(in/outside, "x-unmoved-commits/s")
	b.ReportMetric(float64(failed[0]+failed[1]), "failed")
	b.ReportMetric(float64(abandoned)/float64(b.N), "freezes-abandoned/move")
	if len(held) > 0 {
		slices.Sort(held)
		b.ReportMetric(ms(held[(len(held)*99+99)/100-1].Microseconds()), "ms-freeze-p99")
		b.ReportMetric(ms(held[len(held)-1].Microseconds()), "ms-freeze-max")
	}
	b.Logf("%d moves in %s, %d freezes (+%d abandoned); moving range: %d commits, p50 %.1f ms, p99 %.1f ms, max %.1f ms (before: p99 %.1f ms); unmoved range: %.0f commits/s during the moves vs %.0f outside them (×%.2f); failed commits: %d moving, %d unmoved",
		b.N, during.Round(time.Millisecond), freezes, abandoned, h.TotalCount(), ms(h.ValueAtQuantile(50)), ms(h.ValueAtQuantile(99)), ms(h.Max()), ms(lat[0].ValueAtQuantile(99)), in, outside, in/outside, failed[0], failed[1])
}

// halves splits the env's executions by bucket: those of the lower half
// of the buckets (the range the benchmarks move) and the others.
func (e *env) halves() (moving, unmoved []string) {
	for _, id := range e.ids {
		if shardmap.BucketText(id, buckets) < buckets/2 {
			moving = append(moving, id)
		} else {
			unmoved = append(unmoved, id)
		}
	}
	return moving, unmoved
}
