package reshard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/reshard"
)

// BenchmarkUnmovedByPhase says where the unmoved range's commits go while
// a range moves: the writers of BenchmarkMoveAsClientsSeeIt (two on the
// moving range, two on the unmoved one, which stays on shard0), and the
// time between the mover's steps (Options.Hook) cut into phases — the
// copy, the catch-up, the freeze (frozen to released, abandoned freezes
// and their catch-ups included), the clean-up, the rest of Apply — per
// direction (shard0 the source, or the destination); before the moves, a
// window with only a capture on (the triggers of a move of the lower
// half on shard0, no mover), then with the capture on and off while the
// moving range's writers wait (the triggers' cost on unmoved keys alone:
// compare those two windows, not with idle). For each phase: its time, the unmoved
// range's commits/s as a share of the idle windows' rate, and the CPU
// (cores) of each kind of Postgres process on both shards (the mover's
// backends, the clients', background) and of this test process (writers,
// router and mover), read from /proc at each step outside the freeze.
// The moves take the duty cycles of RESHARD_DUTY_CYCLES in turn, a move
// there and back each (default: unpaced, then DefaultDutyCycle), so that
// the machine's drifts hit each alike; it prints each one's moves as a
// whole too. Not in `make bench-reshard` (it is a diagnosis). Linux only;
// asserts nothing:
//
//	go test -run '^$' -bench UnmovedByPhase -benchtime 4x ./reshard
func BenchmarkUnmovedByPhase(b *testing.B) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		b.Skip("needs /proc")
	}
	const window = 3 * time.Second
	e := newEnv(b, 1000)
	moving, unmoved := e.halves()
	ph := &phases{e: e, at: map[string]*phaseStat{}}
	ph.enter("idle")
	stop := make(chan struct{})
	var hush atomic.Bool // the moving range's writers wait while set
	var wg sync.WaitGroup
	for w := range 4 {
		ids := [][]string{moving, unmoved}[w%2]
		half := len(ids) / 2
		ids = ids[(w/2)*half : (w/2+1)*half]
		isMoving := w%2 == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 13))
			for range 1 << 30 {
				select {
				case <-stop:
					return
				default:
				}
				if isMoving && hush.Load() {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if err := e.commit(ids[rng.IntN(len(ids))]); err == nil && !isMoving {
					ph.count()
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(window)

	// The triggers alone: a capture of the lower half on shard0, no mover.
	src := e.pools[e.shards[0].Name]
	if _, err := src.Exec(e.ctx, `SELECT pgshard_move_capture_begin(999, 0, $1::int)`, buckets/2-1); err != nil {
		b.Fatal(err)
	}
	ph.enter("capture only (src)")
	time.Sleep(window)
	// The triggers' cost on unmoved keys alone: the moving range's
	// writers (whose commits the capture records) wait, with the capture
	// on and then off.
	hush.Store(true)
	ph.enter("capture, unmoved only")
	time.Sleep(window)
	ph.enter("idle")
	if _, err := src.Exec(e.ctx, `SELECT pgshard_move_capture_end(999)`); err != nil {
		b.Fatal(err)
	}
	if _, err := src.Exec(e.ctx, `DELETE FROM pgshard_move_rows WHERE move_id = 999`); err != nil {
		b.Fatal(err)
	}
	ph.enter("no capture, unmoved only")
	time.Sleep(window)
	hush.Store(false)
	ph.enter("idle")
	time.Sleep(window / 2)

	duties := benchDuties(b)
	type moveStat struct {
		d, paused time.Duration
		freezes   []time.Duration
		abandoned int
		moves     int
	}
	per := map[float64]*moveStat{}
	b.ResetTimer()
	for i := range b.N {
		to, role := e.shards[1].Name, "src"
		if i%2 == 1 {
			to, role = e.shards[0].Name, "dst"
		}
		duty := duties[(i/2)%len(duties)]
		role = fmt.Sprintf("%s, duty %g", role, duty)
		if _, err := reshard.Plan(e.ctx, e.cat, reshard.Request{Lo: 0, Hi: buckets/2 - 1, To: to}); err != nil {
			b.Fatal(err)
		}
		next := map[string]string{
			"copying": "copy", "copied": "catch-up", "frozen": "freeze",
			"released": "apply, other", "cleaning": "clean-up", "cleaned": "apply, other",
		}
		hook := func(_ context.Context, step string, _ catalog.MoveRecord) error {
			if p, ok := next[step]; ok {
				ph.enter(p + " (" + role + ")")
			}
			return nil
		}
		ph.enter("apply, other (" + role + ")")
		t0 := time.Now()
		res, err := reshard.Apply(e.ctx, e.cat, reshard.Options{DutyCycle: duty, Hook: hook})
		if err != nil {
			b.Fatal(err)
		}
		st := per[duty]
		if st == nil {
			st = &moveStat{}
			per[duty] = st
		}
		st.d += time.Since(t0)
		st.moves++
		for _, r := range res {
			st.paused += r.Paused
			for _, f := range r.Freezes {
				if f.Abandoned {
					st.abandoned++
					fmt.Printf("duty %g: freeze abandoned after %v: %s\n", duty, f.Duration.Round(time.Millisecond), f.Reason)
				} else {
					st.freezes = append(st.freezes, f.Duration)
				}
			}
		}
		ph.enter("idle")
		time.Sleep(window / 2)
	}
	b.StopTimer()
	time.Sleep(window / 2)
	ph.enter("end")
	ph.report(b, duties)
	for _, d := range duties {
		st := per[d]
		if st == nil {
			continue
		}
		sort.Slice(st.freezes, func(i, j int) bool { return st.freezes[i] < st.freezes[j] })
		p50, p99 := time.Duration(0), time.Duration(0)
		if n := len(st.freezes); n > 0 {
			p50, p99 = st.freezes[n/2], st.freezes[(n*99+99)/100-1]
		}
		fmt.Printf("duty %g: %d moves, %.2f s per move (%.2f s of it paused), freeze p50 %.1f ms, p99 %.1f ms, %d abandoned\n",
			d, st.moves, st.d.Seconds()/float64(st.moves), st.paused.Seconds()/float64(st.moves),
			float64(p50.Microseconds())/1000, float64(p99.Microseconds())/1000, st.abandoned)
	}
}

// benchDuties are the duty cycles BenchmarkUnmovedByPhase takes in turn
// (each for a move there and back): RESHARD_DUTY_CYCLES, comma-separated,
// else unpaced and the default.
func benchDuties(b *testing.B) []float64 {
	v := os.Getenv("RESHARD_DUTY_CYCLES")
	if v == "" {
		return []float64{1, reshard.DefaultDutyCycle}
	}
	var out []float64
	for _, f := range strings.Split(v, ",") {
		d, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || d <= 0 || d > 1 {
			b.Fatalf("RESHARD_DUTY_CYCLES=%q: want numbers in (0, 1]", v)
		}
		out = append(out, d)
	}
	return out
}

// phases accounts the unmoved commits, the time and the CPU per phase.
type phases struct {
	e       *env
	n       atomic.Int64 // unmoved commits in the current phase
	mu      sync.Mutex
	cur     string
	since   time.Time
	last    map[int]procCPU // pid → its kind and CPU at the last sample
	at      map[string]*phaseStat
	order   []string
	clkTick float64
}

type procCPU struct {
	kind  string
	ticks int64
}

type phaseStat struct {
	d       time.Duration
	commits int64
	cpu     map[string]float64 // kind → CPU seconds
}

func (p *phases) count() { p.n.Add(1) }

// enter ends the current phase and starts phase name.
func (p *phases) enter(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	sample := p.sample()
	if p.cur != "" {
		st := p.at[p.cur]
		if st == nil {
			st = &phaseStat{cpu: map[string]float64{}}
			p.at[p.cur] = st
			p.order = append(p.order, p.cur)
		}
		st.d += now.Sub(p.since)
		st.commits += p.n.Swap(0)
		for pid, c := range sample {
			prev := p.last[pid] // a new process: all its CPU is since the last sample
			st.cpu[c.kind] += float64(c.ticks-prev.ticks) / 100
		}
	} else {
		p.n.Store(0)
	}
	p.cur, p.since, p.last = name, now, sample
}

// sample reads the CPU of every Postgres process of both shards (by
// application_name, or backend type) and of this process.
func (p *phases) sample() map[int]procCPU {
	out := map[int]procCPU{os.Getpid(): {kind: "go (test process)", ticks: ticks(os.Getpid())}}
	for name, pool := range p.e.pools {
		rows, err := pool.Query(p.e.ctx, `SELECT pid, application_name, backend_type FROM pg_stat_activity`)
		if err != nil {
			continue
		}
		for rows.Next() {
			var pid int
			var app, typ string
			if rows.Scan(&pid, &app, &typ) != nil {
				continue
			}
			kind := name + " bg"
			switch {
			case typ != "client backend":
			case app == "pgshard reshard":
				kind = name + " mover"
			case app == "reshard test":
				kind = name + " catalog"
			default:
				kind = name + " clients"
			}
			out[pid] = procCPU{kind: kind, ticks: ticks(pid)}
		}
		rows.Close()
	}
	return out
}

// ticks is a process's user+system CPU in clock ticks (100 Hz).
func ticks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

func (p *phases) report(b *testing.B, duties []float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	idle := p.at["idle"]
	if idle == nil || idle.d == 0 {
		return
	}
	base := float64(idle.commits) / idle.d.Seconds()
	var kinds []string
	seen := map[string]bool{}
	for _, st := range p.at {
		for k := range st.cpu {
			if !seen[k] {
				seen[k] = true
				kinds = append(kinds, k)
			}
		}
	}
	sort.Strings(kinds)
	var sb strings.Builder
	fmt.Fprintf(&sb, "idle: %.0f unmoved commits/s\n", base)
	fmt.Fprintf(&sb, "%-24s %8s %9s %6s", "phase", "s", "commits/s", "×idle")
	for _, k := range kinds {
		fmt.Fprintf(&sb, " %14s", k)
	}
	sb.WriteString("  (CPU: cores)\n")
	for _, name := range p.order {
		st := p.at[name]
		rate := float64(st.commits) / st.d.Seconds()
		fmt.Fprintf(&sb, "%-24s %8.2f %9.0f %6.2f", name, st.d.Seconds(), rate, rate/base)
		for _, k := range kinds {
			fmt.Fprintf(&sb, " %14.2f", st.cpu[k]/st.d.Seconds())
		}
		sb.WriteByte('\n')
	}
	// Each duty cycle's moves as a whole (every phase but idle).
	for _, d := range duties {
		var t time.Duration
		var n int64
		for name, st := range p.at {
			if strings.Contains(name, fmt.Sprintf("duty %g)", d)) {
				t += st.d
				n += st.commits
			}
		}
		if t > 0 {
			rate := float64(n) / t.Seconds()
			fmt.Fprintf(&sb, "duty %g, all its moves: %.2f s, %.0f unmoved commits/s, ×%.2f of idle\n", d, t.Seconds(), rate, rate/base)
		}
	}
	// Printed, not logged: a benchmark's log is cut to a few lines.
	fmt.Print(sb.String())
}
