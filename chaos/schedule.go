package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/internal/ctxtime"
)

// The fault schedule: Plan draws it from a seed before the run, Check
// refuses what the env cannot do, Execute runs it.
//
//	[]Spec ──Plan(seed)──▶ []Planned ──Check(env)──▶ Execute(env, start, record)
//	                                                    ├─ one goroutine per Planned:
//	                                                    │    wait At ─▶ lock resource ─▶ Inject ─▶ record
//	                                                    │    wait At+Hold ─▶ Heal ─▶ record ─▶ unlock
//	                                                    └─ ctx ends: heal what is injected (bounded)
//	HealAll(env): relays pass through, shards and poolers up, RESUMEd, proxy up, unfinished moves finished

// Spec is one entry of a scenario's `faults:` list.
type Spec struct {
	// Kind is the fault.
	Kind Kind
	// Every is the mean interval between injections; each interval is
	// drawn uniformly from [Every/2, 3·Every/2) with the seed, the first
	// injection from [0, Every). 0: only At.
	Every time.Duration
	// At are explicit offsets from the start of the fault period.
	At []time.Duration
	// Hold is how long the fault stays before Heal (0 for instantaneous
	// kinds, which refuse a hold; lost-ack and the window kinds need one).
	Hold time.Duration
	// Shards restricts the targets by name; empty = any shard (a seeded
	// choice among those free at the time). Not for the proxy's kinds.
	Shards []string
	// Params are kind-specific (see each Kind).
	Params Params
}

// Planned is one scheduled injection.
type Planned struct {
	// ID is "f1", "f2", ... in order of At.
	ID string
	// Kind is the fault.
	Kind Kind
	// Shard indexes the plan's shards (Env.Map.Shards); -1 for the
	// proxy's kinds (proxy-restart, lost-ack via=proxy).
	Shard int
	// At is the injection's offset from the start; Hold how long it stays.
	At, Hold time.Duration
	// Params are the spec's.
	Params Params
	// Seed seeds the fault's own random source (Inject's rng).
	Seed uint64
	// Spec is the index of the Spec it came from.
	Spec int
}

// ShardName names the planned fault's shard among shards (the names Plan
// was given), "" for the proxy's kinds.
func (p Planned) ShardName(shards []string) string {
	if p.Shard < 0 || p.Shard >= len(shards) {
		return ""
	}
	return shards[p.Shard]
}

// planGap is the least time between two faults on one resource, after
// the first's hold and settling time.
const planGap = 250 * time.Millisecond

// needsHold reports whether a kind needs a hold: the window kinds and
// lost-ack (how long the relay stays armed). The restarts take 0 as
// "start again at once"; the instantaneous kinds refuse one.
func needsHold(k Kind) bool {
	switch k {
	case KindLostAck, KindLatency, KindStall, KindPartition, KindPgBouncerPause, KindCatalogCut, KindCatalogCrash:
		return true
	}
	return false
}

// Plan draws the fault schedule of a period from seed (math/rand/v2 PCG):
// deterministic for the same specs, period, shards and seed. Every planned
// fault injects and heals within [0, period); two faults on one resource —
// a shard's processes (terminate, PgBouncer kill/pause/reconnect, crash,
// backend kill), a shard's relay (latency, stall, reset, partition,
// lost-ack), the proxy, the proxy's relay — never overlap, counting each
// fault's settling time (a restart's recovery) and a gap: a fault that
// would is moved to when the resource is free, or to another free shard
// (when the spec allows any), and dropped if that is past the period.
// shards are the names of Env.Map.Shards, in order. Errors name the spec
// index and the key.
func Plan(specs []Spec, period time.Duration, shards []string, seed uint64) ([]Planned, error) {
	var probs []string
	if period <= 0 {
		probs = append(probs, fmt.Sprintf("period: %v is not positive", period))
	}
	if len(shards) == 0 {
		probs = append(probs, "shards: none given")
	}
	index := map[string]int{}
	for i, s := range shards {
		if _, dup := index[s]; dup {
			probs = append(probs, fmt.Sprintf("shards: %q twice", s))
		}
		index[s] = i
	}
	for i, sp := range specs {
		for _, p := range validateSpec(sp, period, index) {
			probs = append(probs, fmt.Sprintf("faults[%d] (%s): %s", i, sp.Kind, p))
		}
	}
	if len(probs) > 0 {
		return nil, fmt.Errorf("fault schedule: %s", strings.Join(probs, "; "))
	}

	type candidate struct {
		spec, seq int
		at        time.Duration
	}
	var cands []candidate
	rngs := make([]*rand.Rand, len(specs))
	for i, sp := range specs {
		// Each spec has its own stream: adding a spec does not change
		// another's draws.
		rngs[i] = rand.New(rand.NewPCG(seed, uint64(i)+1))
		seq := 0
		for _, at := range sp.At {
			cands = append(cands, candidate{i, seq, at})
			seq++
		}
		if sp.Every > 0 {
			for at := time.Duration(rngs[i].Int64N(int64(sp.Every))); at < period; {
				cands = append(cands, candidate{i, seq, at})
				seq++
				at += sp.Every/2 + time.Duration(rngs[i].Int64N(int64(sp.Every)))
			}
		}
	}
	slices.SortStableFunc(cands, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.spec, b.spec), cmp.Compare(a.seq, b.seq))
	})

	free := map[string]time.Duration{} // resource key → when it is free again
	var plan []Planned
	for _, c := range cands {
		sp := specs[c.spec]
		info := kindInfos[sp.Kind]
		_, global, res := info.target(sp.Params)
		at, shard := c.at, -1
		key := res
		if !global {
			allowed := make([]int, 0, len(shards))
			if len(sp.Shards) == 0 {
				for i := range shards {
					allowed = append(allowed, i)
				}
			} else {
				for _, name := range sp.Shards {
					allowed = append(allowed, index[name])
				}
			}
			var idle []int
			for _, i := range allowed {
				if free[res+":"+shards[i]] <= at {
					idle = append(idle, i)
				}
			}
			pick := rngs[c.spec].IntN(len(allowed)) // drawn either way: the stream stays aligned
			if len(idle) > 0 {
				shard = idle[pick%len(idle)]
			} else {
				shard = allowed[0]
				for _, i := range allowed[1:] {
					if free[res+":"+shards[i]] < free[res+":"+shards[shard]] {
						shard = i
					}
				}
			}
			key = res + ":" + shards[shard]
		}
		at = max(at, free[key])
		if at+sp.Hold >= period {
			continue
		}
		free[key] = at + sp.Hold + info.settle + planGap
		plan = append(plan, Planned{Kind: sp.Kind, Shard: shard, At: at, Hold: sp.Hold, Params: sp.Params, Spec: c.spec})
	}
	slices.SortStableFunc(plan, func(a, b Planned) int {
		return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Spec, b.Spec))
	})
	seeds := rand.New(rand.NewPCG(seed, 0))
	for i := range plan {
		plan[i].ID = fmt.Sprintf("f%d", i+1)
		plan[i].Seed = seeds.Uint64()
	}
	return plan, nil
}

// validateSpec lists the problems of one spec.
func validateSpec(sp Spec, period time.Duration, shards map[string]int) []string {
	info, ok := kindInfos[sp.Kind]
	if !ok {
		_, err := ParseKind(string(sp.Kind))
		return []string{"kind: " + err.Error()}
	}
	var probs []string
	add := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if sp.Every < 0 {
		add("every: %v is negative", sp.Every)
	}
	if sp.Every == 0 && len(sp.At) == 0 {
		add("every/at: give a mean interval (every) or times (at)")
	}
	if sp.Every > 0 && sp.Every < 10*time.Millisecond {
		add("every: %v is below 10ms", sp.Every)
	}
	for j, at := range sp.At {
		if at < 0 || (period > 0 && at >= period) {
			add("at[%d]: %v is outside the period [0, %v)", j, at, period)
		}
	}
	switch {
	case sp.Hold < 0:
		add("hold: %v is negative", sp.Hold)
	case info.instant && sp.Hold > 0:
		add("hold: %s is instantaneous; omit hold", sp.Kind)
	case needsHold(sp.Kind) && sp.Hold == 0:
		add("hold: %s needs a hold (how long the fault stays)", sp.Kind)
	case period > 0 && sp.Hold >= period:
		add("hold: %v does not fit in the period %v", sp.Hold, period)
	case (sp.Kind == KindCatalogCut || sp.Kind == KindCatalogCrash) && sp.Hold < catalogCutMinHold:
		add("hold: %v is too short for %s: the followers' leases (ttl %v) must lapse within it; give at least %v", sp.Hold, sp.Kind, CatalogCutTTL, catalogCutMinHold)
	}
	probs = append(probs, validateParams(sp.Kind, sp.Params)...)
	_, global, _ := info.target(sp.Params)
	if global && len(sp.Shards) > 0 {
		add("shards: %s acts on %s, not on a shard", sp.Kind, globalTarget(sp.Kind))
	}
	for j, s := range sp.Shards {
		if _, ok := shards[s]; !ok {
			add("shards[%d]: unknown shard %q", j, s)
		}
	}
	return probs
}

// Check refuses, up front and with a clear message, a plan that env cannot
// carry out: kinds that need process control on a cluster without it, a
// PgBouncer where the map has none, a relay or a proxy the env lacks.
func Check(plan []Planned, env *Env) error {
	if env == nil || env.Map == nil {
		return errors.New("chaos: the env has no shard map")
	}
	type miss struct {
		kind Kind
		what string
	}
	var order []miss
	where := map[miss][]string{}
	note := func(k Kind, what, target string) {
		m := miss{k, what}
		if _, ok := where[m]; !ok {
			order = append(order, m)
		}
		if !slices.Contains(where[m], target) {
			where[m] = append(where[m], target)
		}
	}
	for _, p := range plan {
		info, ok := kindInfos[p.Kind]
		if !ok {
			note(p.Kind, "a known kind", p.ID)
			continue
		}
		needs, global, _ := info.target(p.Params)
		target := globalTarget(p.Kind)
		if !global {
			if p.Shard < 0 || p.Shard >= len(env.Map.Shards) {
				note(p.Kind, fmt.Sprintf("shard %d of the map", p.Shard), p.ID)
				continue
			}
			target = env.Map.Shards[p.Shard].Name
		}
		if needs&NeedsProcessControl != 0 {
			switch {
			case env.Cluster == nil:
				note(p.Kind, "process control of the cluster (a local cluster, e.g. from `pgshard dev up`); this cluster has none", target)
			case env.Cluster.Provider != "local":
				note(p.Kind, fmt.Sprintf("process control, which the %s provider does not give", env.Cluster.Provider), target)
			case !global:
				if _, err := env.clusterShard(p.Shard); err != nil {
					note(p.Kind, "a cluster that runs the shard ("+err.Error()+")", target)
				}
			}
		}
		if needs&NeedsPooler != 0 && !global {
			if env.Map.Shards[p.Shard].PoolerDSN == "" {
				note(p.Kind, "a PgBouncer in front of the shard (a pooler DSN in the map)", target)
			} else if needs&NeedsProcessControl != 0 && env.Cluster != nil && !env.Cluster.Spec.PgBouncer {
				note(p.Kind, "a PgBouncer the cluster runs", target)
			}
		}
		if needs&NeedsShardRelay != 0 && !global {
			if p.Shard >= len(env.Relays) || env.Relays[p.Shard] == nil {
				note(p.Kind, "a relay in front of the shard", target)
			}
		}
		if needs&NeedsProxy != 0 && env.Proxy == nil {
			note(p.Kind, "the chaos-owned proxy (target proxy)", target)
		}
		if needs&NeedsProxyRelay != 0 && env.ProxyRelay == nil {
			note(p.Kind, "a relay in front of the proxy (target proxy)", target)
		}
		if needs&NeedsCatalog != 0 && env.Catalog == nil {
			note(p.Kind, "the run's catalog, followed by the store under test (the router, the chaos-owned proxy)", "the mover")
		}
		if needs&NeedsCatalogServer != 0 {
			if why := env.catalogServerCheck(); why != "" {
				note(p.Kind, why, target)
			}
		}
		if needs&NeedsCatalogRelay != 0 && env.CatalogRelay == nil {
			note(p.Kind, "a relay between the store under test (the router, the chaos-owned proxy) and the run's catalog (without a store mutant)", target)
		}
	}
	if len(order) == 0 {
		return nil
	}
	var lines []string
	for _, m := range order {
		lines = append(lines, fmt.Sprintf("%s (on %s) needs %s", m.kind, strings.Join(where[m], ", "), m.what))
	}
	return fmt.Errorf("chaos: the schedule cannot run here: %s", strings.Join(lines, "; "))
}

// Event is one inject or heal of a planned fault, as Execute records it.
type Event struct {
	// ID, Kind: the planned fault's.
	ID   string
	Kind Kind
	// Phase is "inject" or "heal".
	Phase string
	// T is when the phase began, Done when it returned, both since
	// Execute's start (monotonic).
	T, Done time.Duration
	// Shard names the target shard, "" for the proxy's kinds.
	Shard string
	// Landed and Evidence are the phase's Evidence.
	Landed   bool
	Evidence map[string]any
	// Err says why the phase failed ("" if it did not).
	Err string
}

// healTimeout bounds a heal run after Execute's ctx ended, and HealAll's
// steps.
const healTimeout = 2 * time.Minute

// Execute runs plan from start: each planned fault on its own goroutine
// (owned, waited for) injects at start+At and heals at start+At+Hold (or
// when Inject returns, if later); two faults on one resource never run at
// once (a late one waits). record gets every inject and heal, one call at
// a time. An inject or heal error is recorded (Event.Err) and the run goes
// on; Heal runs even after a failed Inject. When ctx ends, faults not yet
// injected are skipped and those injected are healed at once (each heal
// bounded by 2 minutes), and Execute returns ctx's error; otherwise nil
// after the last heal. It first runs Check.
func Execute(ctx context.Context, env *Env, plan []Planned, start time.Time, record func(Event)) error {
	if err := Check(plan, env); err != nil {
		return err
	}
	var recMu sync.Mutex
	rec := func(e Event) {
		env.logf("chaos: %s %s %s %s at %v: landed %v %v %s", e.ID, e.Kind, e.Phase, e.Shard, e.T.Round(time.Millisecond), e.Landed, e.Evidence, e.Err)
		if record != nil {
			recMu.Lock()
			defer recMu.Unlock()
			record(e)
		}
	}
	locks := map[string]chan struct{}{}
	for _, p := range plan {
		_, global, res := kindInfos[p.Kind].target(p.Params)
		if !global {
			res += ":" + env.Map.Shards[p.Shard].Name
		}
		if locks[res] == nil {
			locks[res] = make(chan struct{}, 1)
		}
	}
	var g errgroup.Group
	for _, p := range plan {
		_, global, res := kindInfos[p.Kind].target(p.Params)
		if !global {
			res += ":" + env.Map.Shards[p.Shard].Name
		}
		lock := locks[res]
		g.Go(func() error {
			runPlanned(ctx, env, p, start, lock, rec)
			return nil
		})
	}
	_ = g.Wait()
	return ctx.Err()
}

// runPlanned injects and heals one planned fault.
func runPlanned(ctx context.Context, env *Env, p Planned, start time.Time, lock chan struct{}, rec func(Event)) {
	if ctxtime.Sleep(ctx, time.Until(start.Add(p.At))) != nil {
		return
	}
	select {
	case lock <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-lock }()
	f, err := NewFault(p.Kind)
	if err != nil { // Check saw to it
		return
	}
	rng := rand.New(rand.NewPCG(p.Seed, uint64(p.Shard+1)))
	ev := Event{ID: p.ID, Kind: p.Kind, Phase: "inject", Shard: env.shardName(p.Shard), T: time.Since(start)}
	e, err := f.Inject(ctx, env, p.Shard, p.Params, rng)
	ev.Done, ev.Landed, ev.Evidence = time.Since(start), e.Landed, e.Fields
	if err != nil {
		ev.Err = err.Error()
	}
	rec(ev)
	_ = ctxtime.Sleep(ctx, time.Until(start.Add(p.At+p.Hold)))
	// The schedule's end (ctx canceled) cuts the hold short, never the
	// heal: a heal canceled midway (a PgBouncer half restarted) would
	// leave the fault's evidence broken and HealAll to clean up.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), healTimeout)
	defer cancel()
	ev = Event{ID: p.ID, Kind: p.Kind, Phase: "heal", Shard: env.shardName(p.Shard), T: time.Since(start)}
	e, err = f.Heal(hctx, env, p.Shard)
	ev.Done, ev.Landed, ev.Evidence = time.Since(start), e.Landed, e.Fields
	if err != nil {
		ev.Err = err.Error()
	}
	rec(ev)
}

// HealAll makes env whole again, whatever faults were left: every relay
// passes traffic through, every shard's Postgres and PgBouncer run and
// accept connections (StartShard/StartPooler, which wait until ready),
// every PgBouncer's workload database is RESUMEd, the cluster's catalog
// server runs when it holds the run's catalog, the proxy runs (unless it
// was stopped for good).
// Idempotent; used before the quiesce phase and on abort. Each step is
// bounded (2 minutes); the errors of all steps are joined.
func HealAll(ctx context.Context, env *Env) error {
	if env == nil {
		return nil
	}
	for _, r := range env.Relays {
		if r != nil {
			r.PassThrough()
		}
	}
	if env.ProxyRelay != nil {
		env.ProxyRelay.PassThrough()
	}
	if env.CatalogRelay != nil {
		env.CatalogRelay.PassThrough()
	}
	ctx, cancel := context.WithTimeout(ctx, healTimeout)
	defer cancel()
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	var g errgroup.Group
	if env.Map != nil {
		for i, sh := range env.Map.Shards {
			g.Go(func() error {
				if env.Cluster != nil && env.Cluster.Provider == "local" {
					if ci, err := env.clusterShard(i); err == nil {
						if err := env.Cluster.StartShard(ctx, ci); err != nil {
							fail(fmt.Errorf("heal %s: %w", sh.Name, err))
						}
						if env.Cluster.Spec.PgBouncer {
							if err := env.Cluster.StartPooler(ctx, ci); err != nil {
								fail(fmt.Errorf("heal %s pgbouncer: %w", sh.Name, err))
							}
						}
					}
				}
				if sh.PoolerDSN != "" {
					db, err := env.database()
					if err == nil {
						_, err = consoleRun(ctx, env, i, "RESUME "+consoleIdent(db))
					}
					if err != nil && !isNotPaused(err) {
						fail(fmt.Errorf("heal %s pgbouncer: %w", sh.Name, err))
					}
				}
				return nil
			})
		}
	}
	// The run's catalog's server, when it is the cluster's catalog
	// server (catalog-crash stops it).
	if env.CatalogServer != "" && env.Cluster != nil && env.Cluster.Provider == "local" && env.catalogServerCheck() == "" {
		g.Go(func() error {
			if err := env.Cluster.StartCatalog(ctx); err != nil {
				fail(fmt.Errorf("heal the catalog server: %w", err))
			}
			return nil
		})
	}
	_ = g.Wait()
	// The proxy last: it checks every shard when it starts.
	if env.Proxy != nil && !env.Proxy.Stopped() {
		if err := env.Proxy.Start(ctx); err != nil && !errors.Is(err, ErrProxyStopped) {
			fail(fmt.Errorf("heal the proxy: %w", err))
		}
	}
	// Moves a fault left unfinished, once the shards are up: a range
	// left frozen or incoming would stay unavailable to the quiesce.
	if err := finishMoves(ctx, env); err != nil {
		fail(fmt.Errorf("heal the moves: %w", err))
	}
	return errors.Join(errs...)
}

// globalTarget names what a fault that acts on no shard acts on, in
// messages: the catalog's followers for catalog-cut, else the proxy.
func globalTarget(k Kind) string {
	switch k {
	case KindCatalogCut:
		return "the catalog's followers"
	case KindCatalogCrash:
		return "the catalog server"
	}
	return "the proxy"
}
