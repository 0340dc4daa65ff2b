package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/chaos/mutant"
	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/loadgen/storetarget"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// Files a run writes into its output directory.
const (
	HistoryFile     = "history.jsonl"
	FaultsFile      = "faults.json"
	RunFile         = "run.json"
	LoadgenDir      = "loadgen"
	ProxyConfigFile = "proxy.yaml"
	ProxyLog        = "proxy.log"
	// ChaosLog is the fault schedule's own log: each inject and heal,
	// and the mover's lines (moves, freezes, retries), timestamped.
	ChaosLog = "chaos.log"
)

// WorkloadApp is the application_name of the workload's connections.
const WorkloadApp = "pgshard-chaos"

// RunOptions configure Run.
type RunOptions struct {
	// Scenario is what to run.
	Scenario *Scenario
	// Map is the cluster's shard map: direct DSNs, and pooler DSNs for
	// the PgBouncer and proxy targets.
	Map *shardmap.Map
	// Cluster gives process control (shard crashes, pooler restarts);
	// nil when the cluster has none: faults that need it are refused up
	// front.
	Cluster *cluster.Cluster
	// CatalogDSN is the config's catalog.dsn, "" for none: runs with move
	// faults make their own catalog on its server when that is no
	// shard's, else on shard0's (see openRunCatalog).
	CatalogDSN string
	// Out is the output directory (created).
	Out string
	// Bin is the pgshard binary that runs the proxy (proxy targets).
	Bin string
	// Compress is "", "gz" or "zst": how the history is written.
	Compress string
	// Mutant, when set, replaces the store (or the client) with a
	// deliberately broken variant (package chaos/mutant).
	Mutant mutant.Kind
	// Plan, when not nil, is the fault schedule to run (a replay) instead
	// of one drawn from the scenario's seed.
	Plan []Planned
	// Progress, when set, receives a live progress line; Terminal says
	// it is a terminal (the line is redrawn in place each second, else a
	// line is printed every 10 s).
	Progress io.Writer
	Terminal bool
}

// RunResult is what a run did; the verdict comes from package verify,
// which reads the history and the shards.
type RunResult struct {
	// Dir is the output directory, History the history file in it.
	Dir, History string
	// RunID prefixes every op and event id of the run.
	RunID string
	// Plan is the schedule that was run; Events what each fault did.
	Plan   []Planned
	Events []Event
	// Load is loadgen's result (throughput, latency, quiesce).
	Load *loadgen.Result
	// Ops is the number of op lines in the history.
	Ops int64
	// Landed counts the faults whose own evidence says they landed.
	Landed map[Kind]int
	// Duration is the whole run, setup and quiesce included.
	Duration time.Duration
	// PoolerRestarts counts the PgBouncers that exited on their own
	// during the faults and were started again (pooler_watch.go).
	PoolerRestarts int
}

// RunRecord is run.json: what `chaos replay` needs to run it again.
type RunRecord struct {
	RunID     string    `json:"run"`
	StartedAt time.Time `json:"started_at"`
	Scenario  Scenario  `json:"scenario"`
	Mutant    string    `json:"mutant,omitempty"`
	Compress  string    `json:"compress,omitempty"`
	Ops       int64     `json:"ops"`
	Seconds   float64   `json:"seconds"`
	// PoolerRestarts counts the PgBouncers that exited on their own and
	// were started again during the faults (pooler_watch.go).
	PoolerRestarts int `json:"pooler_restarts,omitempty"`
}

// FaultsRecord is faults.json: the schedule drawn and what happened.
type FaultsRecord struct {
	Plan   []Planned `json:"plan"`
	Events []Event   `json:"events"`
}

// Run runs the scenario against the cluster: reset the store's tables,
// put a relay in front of every shard (and the proxy), start the proxy
// when the target needs one, run the workload with its relays for the
// scenario's duration while the fault schedule runs, heal everything and
// quiesce, and write the history, the realized schedule and loadgen's
// reports into o.Out. It returns an error only when the run could not be
// done; what the store did is for the verifier to judge.
func Run(ctx context.Context, o RunOptions) (res *RunResult, err error) {
	t0 := time.Now()
	sc := o.Scenario
	if sc == nil || o.Map == nil {
		return nil, errors.New("chaos run: no scenario or no shard map")
	}
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	m := o.Map
	if err := checkLoopback(m); err != nil {
		return nil, err
	}
	if sc.Shards > 0 && sc.Shards != len(m.Shards) {
		return nil, fmt.Errorf("scenario %s wants %d shards; the cluster has %d", sc.Name, sc.Shards, len(m.Shards))
	}
	pooler := sc.Target != TargetDirect
	if pooler {
		for _, s := range m.Shards {
			if s.PoolerDSN == "" {
				return nil, fmt.Errorf("target %s needs PgBouncer: shard %s has no pooler_dsn in the map (start the cluster with PgBouncer, or use --target direct)", sc.Target, s.Name)
			}
		}
	}
	var mut mutant.Mutant
	if o.Mutant != "" {
		if mut, err = mutant.Lookup(o.Mutant); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	database, user, err := dbAndUser(m.Shards[0].DSN)
	if err != nil {
		return nil, err
	}

	// The schedule first: a scenario the cluster cannot run fails before
	// anything is touched.
	plan := o.Plan
	if plan == nil {
		if plan, err = Plan(sc.specs(), sc.faultPeriod(), shardNames(m), sc.Seed); err != nil {
			return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
	}

	// Refuse what the cluster cannot do before anything is touched:
	// check the plan against the env the run will build (its relays and
	// proxy stand in as placeholders here).
	will := &Env{Cluster: o.Cluster, Map: m, Relays: make([]*Relay, len(m.Shards))}
	for i := range will.Relays {
		will.Relays[i] = &Relay{}
	}
	if sc.Target == TargetProxy || sc.Target == TargetPgBouncerPlusPx {
		will.Proxy, will.ProxyRelay = &ProxyProcess{}, &Relay{}
	}
	moves := hasMoves(plan)
	if moves && mut.Level != mutant.LevelStore {
		will.Catalog = &catalog.Catalog{}
		if hasCatalogCut(plan) {
			will.CatalogRelay = &Relay{}
		}
		if will.CatalogServer, err = runCatalogAddr(m, o.CatalogDSN); err != nil {
			return nil, err
		}
	}
	if err := Check(plan, will); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	if mut.Level == mutant.LevelProxy && (!hasCatalogCut(plan) || will.Proxy == nil) {
		return nil, fmt.Errorf("mutant %s breaks the proxy's lease: scenario %s has no catalog-cut faults on a proxy target (use configs/chaos/mutants-lease.yaml)", mut.Kind, sc.Name)
	}
	if mut.Level == mutant.LevelRouter && (!hasCatalogCut(plan) || sc.Target == TargetProxy) {
		return nil, fmt.Errorf("mutant %s breaks the router's lease: scenario %s has no catalog-cut faults on a target with the router (use configs/chaos/mutants-lease.yaml)", mut.Kind, sc.Name)
	}
	if mut.Level == mutant.LevelMover && !moves {
		return nil, fmt.Errorf("mutant %s breaks the mover: scenario %s has no move faults (use configs/chaos/mutants-reshard.yaml)", mut.Kind, sc.Name)
	}

	if err := resetStore(ctx, &Env{Map: m}); err != nil {
		return nil, err
	}
	// A former run's moves left the fences where they went: back to m.
	if err := resetFences(ctx, &Env{Map: m}, m, moves); err != nil {
		return nil, err
	}

	// Relays in front of the endpoint every shard is used through.
	relayed, relays, err := RelayMap(m, pooler, RelayOptions{})
	if err != nil {
		return nil, err
	}
	defer CloseRelays(relays)
	env := &Env{Cluster: o.Cluster, Map: m, Database: database, User: user, Relays: relays}
	env.HotBuckets = hotBuckets(sc, m)
	logFile, err := os.Create(filepath.Join(o.Out, ChaosLog))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	var logMu sync.Mutex
	env.Logf = func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(logFile, "%s %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	var catalogDSN string
	if moves {
		cat, dsn, err := openRunCatalog(ctx, env, relayed, o.CatalogDSN)
		if err != nil {
			return nil, err
		}
		defer cat.Close()
		env.Catalog, catalogDSN = cat, dsn
		env.moves, env.catchUps = &moveState{}, &catchUpBoard{}
		if env.CatalogServer, err = runCatalogAddr(m, o.CatalogDSN); err != nil {
			return nil, err
		}
		if hasKind(plan, KindCatalogCrash) {
			// The followers' leases must lapse within a crash's hold, as
			// within a cut's.
			env.CatalogTTL = CatalogCutTTL
		}
		if hasCatalogCut(plan) {
			// The store under test (the proxy, the router) reaches the
			// catalog through a relay, which catalog-cut cuts; the
			// mover's connection stays direct.
			cr, cutDSN, err := catalogRelay(dsn)
			if err != nil {
				return nil, err
			}
			defer cr.Close()
			env.CatalogRelay, env.CatalogTTL, catalogDSN = cr, CatalogCutTTL, cutDSN
		}
	}

	sopts := store.Options{
		ConnectAttempts: 3, ConnectInterval: 500 * time.Millisecond, ConnectTimeout: 2 * time.Second,
		MaxConns: sc.Workload.MaxConns, TraceMax: sc.Workload.TraceMax, ApplicationName: WorkloadApp,
		// The server bounds every statement too (set_config in the same
		// pipeline as each operation, through the proxy as well).
		StatementTimeout: time.Duration(sc.Workload.OpTimeout),
	}

	// The proxy, behind its own relay, for the proxy targets.
	var proxyTarget loadgen.Target
	if sc.Target == TargetProxy || sc.Target == TargetPgBouncerPlusPx {
		var lies map[string]string
		if mut.Level == mutant.LevelProxy {
			if lies, err = mutant.ProxyConfig(mut.Kind); err != nil {
				return nil, err
			}
		}
		px, pr, err := startProxy(ctx, o, relayed, catalogDSN, env.CatalogTTL, lies, pooler, user)
		if px != nil {
			defer px.Stop(context.WithoutCancel(ctx))
		}
		if pr != nil {
			defer pr.Close()
		}
		if err != nil {
			return nil, err
		}
		env.Proxy, env.ProxyRelay = px, pr
		if env.CatalogTTL > 0 {
			env.CatalogFollowers = append(env.CatalogFollowers, "proxy")
		}
		dsn, err := withHost(m.Shards[0].DSN, pr.Addr())
		if err != nil {
			return nil, err
		}
		st, err := store.Open(ctx, dsn, sopts)
		if err != nil {
			return nil, fmt.Errorf("connect to the proxy: %w", err)
		}
		if catalogDSN != "" {
			// The proxy announces itself ready (StartProxy waits for
			// that) only once it holds its first catalog lease. A safety
			// net all the same, which normally costs one keyed read: the
			// workload's setup must not meet a refusal (57P03), and a
			// 2 s lease on a loaded machine may lapse between the two.
			if err := waitLease(ctx, st, catalogLeaseWait, env.Logf); err != nil {
				st.Close()
				return nil, fmt.Errorf("the proxy's catalog lease: %w", err)
			}
		}
		proxyTarget = storetarget.New(st)
	}
	if err := Check(plan, env); err != nil {
		if proxyTarget != nil {
			proxyTarget.Close()
		}
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}

	// The store under test: the production router, or a mutant.
	var target loadgen.Target
	var split *splitTarget // the pgbouncer+proxy target's
	switch sc.Target {
	case TargetProxy:
		target = proxyTarget
	default:
		var st store.ExecutionStore
		switch {
		case mut.Level == mutant.LevelStore:
			st, err = mutant.OpenStore(ctx, relayed, pooler, mut.Kind, sopts)
		case env.Catalog != nil:
			// The router follows the run's catalog: the moves change its
			// map, the shards' fences refuse it until it has reloaded.
			// With catalog cuts it reaches the catalog through their
			// relay, with their lease TTL, like the proxy.
			var stop func()
			ro := router.Options{Store: sopts, UsePooler: pooler}
			if env.CatalogRelay != nil {
				// A router-level mutant's lease TTL replaces the run's,
				// which the history records all the same.
				ttl, terr := env.CatalogTTL, error(nil)
				if mut.Level == mutant.LevelRouter {
					ttl, terr = mutant.RouterLeaseTTL(mut.Kind)
				}
				if terr != nil {
					err = terr
				} else {
					st, stop, err = openRelayedRouter(ctx, catalogDSN, ttl, ro, env.Logf)
				}
				if err == nil {
					env.CatalogFollowers = append(env.CatalogFollowers, "router")
				}
			} else {
				// TTL 0 (the default) but in a run with catalog
				// crashes (CatalogCutTTL).
				st, stop, err = openFollowingRouter(ctx, env.Catalog, env.CatalogTTL, ro, env.Logf)
				if err == nil && env.CatalogTTL > 0 {
					env.CatalogFollowers = append(env.CatalogFollowers, "router")
				}
			}
			if err == nil {
				st = stoppingStore{st, stop}
			}
		default:
			st, err = router.Open(ctx, relayed, router.Options{Store: sopts, UsePooler: pooler})
		}
		if err != nil {
			if proxyTarget != nil {
				proxyTarget.Close()
			}
			return nil, fmt.Errorf("open the store (%s): %w", sc.Target, err)
		}
		target = storetarget.New(st)
		if proxyTarget != nil {
			split = &splitTarget{ts: [2]loadgen.Target{target, proxyTarget}}
			target = split
		}
	}
	defer target.Close()
	if mut.Level == mutant.LevelClient {
		if target, err = mutant.Wrap(target, mut.Kind); err != nil {
			return nil, err
		}
	}
	if mut.Level == mutant.LevelMover {
		// The move faults run the broken mover.
		if env.MoverAround, err = mutant.Mover(mut.Kind); err != nil {
			return nil, err
		}
	}
	if mut.Level == mutant.LevelConfig {
		restore, err := mutant.Configure(ctx, m, mut.Kind)
		if err != nil {
			return nil, fmt.Errorf("mutant %s: %w", mut.Kind, err)
		}
		defer func() {
			if rerr := restore(context.WithoutCancel(ctx)); rerr != nil && err == nil {
				err = fmt.Errorf("mutant %s: restore the configuration: %w", mut.Kind, rerr)
			}
		}()
	}

	runID := "c" + strconv.FormatInt(time.Now().UnixNano(), 36)
	start := time.Now()
	env.Clock = start
	histPath := filepath.Join(o.Out, HistoryFile)
	if o.Compress != "" {
		histPath += "." + o.Compress
	}
	h, err := CreateHistory(histPath, header(sc, m, plan, runID, string(o.Mutant), start), m, start)
	if err != nil {
		return nil, err
	}
	h.SetVia(viaOf(sc.Target, split))
	res = &RunResult{Dir: o.Out, History: histPath, RunID: runID, Plan: plan}
	closed := false
	defer func() {
		if !closed {
			_ = h.Close()
		}
	}()

	// The fault schedule starts with the workload's clock (after the
	// setup) and runs until the heal-and-quiesce phase stops it.
	var events []Event
	var evMu sync.Mutex
	record := func(e Event) {
		evMu.Lock()
		events = append(events, e)
		evMu.Unlock()
		h.Fault(e)
	}
	started := make(chan time.Time, 1)
	faultCtx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	var faults errgroup.Group
	var faultErr error
	env.poolers = newPoolerGuard() // before any fault runs
	faults.Go(func() error {
		var s time.Time
		select {
		case s = <-started:
		case <-faultCtx.Done():
			return nil
		}
		offset := s.Sub(start)
		h.ScheduleStarted(offset)
		faultErr = Execute(faultCtx, env, plan, s, func(e Event) {
			e.T += offset // history times count from the history's start
			record(e)
		})
		return nil
	})
	// A PgBouncer that exits on its own during the faults is started
	// again (pooler_watch.go), until the heal, which starts every one.
	faults.Go(func() error {
		res.PoolerRestarts = watchPoolers(faultCtx, env)
		return nil
	})
	var healOnce sync.Once
	var workloadStart time.Time // set by OnStart, before any heal
	var scheduleCut time.Duration
	heal := func(ctx context.Context) error {
		var err error
		healOnce.Do(func() {
			if !workloadStart.IsZero() {
				scheduleCut = time.Since(workloadStart)
			}
			stopFaults()
			_ = faults.Wait()
			err = HealAll(ctx, env)
		})
		return err
	}

	lo := sc.loadgenOptions()
	lo.Observer, lo.RunID = h, runID
	lo.Quiesce = &loadgen.Quiesce{Timeout: time.Duration(sc.QuiesceTimeout), Heal: heal}
	lo.OnStart = func(s time.Time) { workloadStart = s; started <- s }
	if sc.extended() {
		lo.Until = goal(sc, waitedFor(plan, mut), h)
	}
	lo.Label = sc.Name
	if o.Mutant != "" {
		lo.Label += " mutant " + string(o.Mutant)
	}
	progressCtx, stopProgress := context.WithCancel(ctx)
	var prog errgroup.Group
	if o.Progress != nil {
		prog.Go(func() error { progress(progressCtx, o, h, start); return nil })
	}
	load, runErr := loadgen.Run(ctx, target, loadgen.MapLocator(m), lo)
	stopProgress()
	_ = prog.Wait()
	// On an early end (setup failed, interrupted) the faults still heal.
	if herr := heal(context.WithoutCancel(ctx)); herr != nil && runErr == nil && (load == nil || load.Quiesce == nil) {
		runErr = fmt.Errorf("heal: %w", herr)
	}
	if res.PoolerRestarts > 0 {
		env.logf("chaos: %d PgBouncer(s) exited on their own during the faults and were started again (PgBouncer 1.18's cancel-request crash, pgbouncer/pgbouncer#822: see each one's log line above)", res.PoolerRestarts)
	}
	// Execute ends with its context's error when the heal stopped it
	// before the last planned fault: that is the plan's end, not an error.
	if faultErr != nil && !(errors.Is(faultErr, context.Canceled) && ctx.Err() == nil) && runErr == nil {
		runErr = faultErr
	}
	end := End{EndedAt: time.Now(), Interrupted: ctx.Err() != nil}
	if scheduleCut > 0 {
		// Planned faults from here on were never due: an extended run
		// plans up to its ceiling and stops where its goal was met.
		end.ScheduleCutMs = max(scheduleCut.Milliseconds(), 1)
	}
	if load != nil && load.Quiesce != nil {
		q := load.Quiesce
		end.Quiesce = &EndQuiesce{OK: q.OK, Ms: int64(q.Seconds * 1000), HealError: q.HealError,
			OutboxLeft: q.OutboxLeft, SpawnsLeft: q.SpawnsLeft, TimersLeft: q.TimersLeft}
	}
	if env.Catalog != nil {
		// The map the moves left: the verifier places rows by it.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		final, err := env.Catalog.Load(lctx)
		cancel()
		if err != nil && runErr == nil {
			runErr = fmt.Errorf("read the final map from the run's catalog: %w", err)
		}
		if err == nil {
			hm := HeaderMapOf(final)
			end.Map = &hm
		}
	}
	if runErr != nil {
		end.Error = runErr.Error()
	}
	h.End(end)
	res.Ops, res.Landed = h.Ops(), h.Landed()
	closed = true
	if cerr := h.Close(); cerr != nil && runErr == nil {
		runErr = cerr
	}
	evMu.Lock()
	res.Events = events
	evMu.Unlock()
	res.Load = load
	res.Duration = time.Since(t0)
	if load != nil {
		if _, werr := loadgen.WriteReports(filepath.Join(o.Out, LoadgenDir), load); werr != nil && runErr == nil {
			runErr = fmt.Errorf("write loadgen reports: %w", werr)
		}
	}
	if werr := writeJSON(filepath.Join(o.Out, FaultsFile), FaultsRecord{Plan: plan, Events: res.Events}); werr != nil && runErr == nil {
		runErr = werr
	}
	rec := RunRecord{RunID: runID, StartedAt: start, Scenario: *sc, Mutant: string(o.Mutant), Compress: o.Compress,
		Ops: res.Ops, Seconds: res.Duration.Seconds(), PoolerRestarts: res.PoolerRestarts}
	if werr := writeJSON(filepath.Join(o.Out, RunFile), rec); werr != nil && runErr == nil {
		runErr = werr
	}
	return res, runErr
}

// waitedFor is the part of the plan an extended run waits to land: all of
// it, or in a mutant's run only the kinds the mutant needs to show
// (mutant.Mutant.NeedsFaults). A mutant is caught by the violations it
// causes, not by the run's coverage, and a store-level mutant stops some
// kinds landing at all (a lost acknowledgement needs the production
// commit's reply to drop): waiting for every kind ran seven of the ten
// mutants to max_duration, four times as long as their floors, for
// nothing the verdict uses. The control run (no mutant) waits for all.
func waitedFor(plan []Planned, mut mutant.Mutant) []Planned {
	if mut.Kind == "" {
		return plan
	}
	var out []Planned
	for _, p := range plan {
		if slices.Contains(mut.NeedsFaults, string(p.Kind)) {
			out = append(out, p)
		}
	}
	return out
}

// goal is an extended run's goal: MinCommits acknowledged commits, and
// every fault kind of the plan landed MinLanded times as the verifier
// will count them (History.Corroborated, a lower bound of the verifier's
// count: a kind the ops corroborate by an op the verifier credits to it,
// matched online by the verifier's rule — a run once stopped with 19
// partitions by evidence and 9 corroborated), so that a run on a slow
// machine, or one whose faults land less often than scheduled, goes on
// instead of ending vacuous. The run stays bounded by max_duration.
func goal(sc *Scenario, plan []Planned, h *History) func() bool {
	kinds := map[Kind]bool{}
	for _, p := range plan {
		kinds[p.Kind] = true
	}
	return func() bool {
		if h.Stats().Commits < sc.MinCommits {
			return false
		}
		landed := h.Corroborated()
		for k := range kinds {
			n := sc.MinLandedOf(k)
			if landed[k] < n+landedMargin(k, n) {
				return false
			}
		}
		return true
	}
}

// landedMargin is how many landings of kind k beyond the floor n an
// extended run waits for. The writer's count is the verifier's rule
// applied online (History.Corroborated), so the margin is only one to
// spare against a divergence the replays have not shown (in a reshard run
// the writer places an op in a moving range by its execution's bucket,
// where the verifier reads the final rows); a lost-ack keeps a fifth, as
// the verifier also wants its claimed commit in the final state, which
// only the end can tell. A floor of 0 waits for none.
func landedMargin(k Kind, n int) int {
	switch {
	case n <= 0:
		return 0
	case k == KindLostAck:
		return max(1, n/5)
	}
	return 1
}

// header is the history's first line.
func header(sc *Scenario, m *shardmap.Map, plan []Planned, runID, mut string, start time.Time) Header {
	w := sc.Workload
	h := Header{
		Run: runID, StartedAt: start.UTC(), Seed: sc.Seed, Scenario: sc.Name, Target: sc.Target,
		Workload: HeaderWorkload{Executions: w.Executions, DefinitionID: "chaos", TraceMax: effectiveTraceMax(w.TraceMax),
			TimerDelayMs: time.Duration(w.TimerDelay).Milliseconds(), Fast: w.Fast, MaxEmits: w.MaxEmits,
			Timer: w.Timers, Spawn: w.Spawns, Redelivery: w.Redelivery, RetryCap: w.RetryCap,
			Concurrency: w.Concurrency, PayloadBytes: w.PayloadBytes, Mutant: mut},
		Map: HeaderMapOf(m),
	}
	names := shardNames(m)
	for _, p := range plan {
		h.Schedule = append(h.Schedule, HeaderPlanned{ID: p.ID, Kind: string(p.Kind), Shard: p.ShardName(names),
			AtMs: p.At.Milliseconds(), HoldMs: p.Hold.Milliseconds(), Params: p.Params})
	}
	return h
}

// startProxy starts the chaos-owned proxy over the relayed map (or, with
// catalogDSN, following the run's catalog, which holds the relayed map and
// the moves' epochs after it, with leaseTTL as its lease's TTL when
// positive), and a relay in front of it.
func startProxy(ctx context.Context, o RunOptions, relayed *shardmap.Map, catalogDSN string, leaseTTL time.Duration, lies map[string]string, pooler bool, user string) (*ProxyProcess, *Relay, error) {
	if o.Bin == "" {
		return nil, nil, errors.New("target proxy: no pgshard binary to run the proxy with")
	}
	data, err := relayed.Marshal()
	if err != nil {
		return nil, nil, err
	}
	keys := [][2]string{{"use_pooler", strconv.FormatBool(pooler)}, {"pool_size", strconv.Itoa(2 * o.Scenario.Workload.MaxConns)}, {"verify_identity", "true"}}
	if catalogDSN != "" {
		// The proxy follows the run's catalog: the moves change its map.
		keys = append(keys, [2]string{"catalog", strconv.Quote(catalogDSN)})
		if leaseTTL > 0 {
			// A run with catalog cuts: a lease that lapses within a cut.
			keys = append(keys, [2]string{"catalog_lease_ttl", leaseTTL.String()})
		}
	}
	// A proxy-level mutant's configuration replaces the run's.
	for _, k := range slices.Sorted(maps.Keys(lies)) {
		i := slices.IndexFunc(keys, func(kv [2]string) bool { return kv[0] == k })
		if i < 0 {
			keys = append(keys, [2]string{k, lies[k]})
		} else {
			keys[i][1] = lies[k]
		}
	}
	var b strings.Builder
	b.WriteString("# Written by `pgshard chaos run`: the proxy under test, over the fault relays.\n")
	if len(lies) > 0 {
		b.WriteString("# A proxy-level mutant's configuration (package chaos/mutant) is in it.\n")
	}
	b.WriteString("proxy:\n")
	for _, kv := range keys {
		fmt.Fprintf(&b, "  %s: %s\n", kv[0], kv[1])
	}
	if catalogDSN == "" {
		b.WriteString("shardmap:\n")
		for _, line := range strings.SplitAfter(string(data), "\n") {
			if line != "" {
				b.WriteString("  " + line)
			}
		}
	}
	cfgPath := filepath.Join(o.Out, ProxyConfigFile)
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o644); err != nil {
		return nil, nil, err
	}
	px, err := StartProxy(ctx, ProxyConfig{Bin: o.Bin, ConfigPath: cfgPath, Listen: "127.0.0.1:0",
		LogPath: filepath.Join(o.Out, ProxyLog), ReadyFile: filepath.Join(o.Out, "proxy.ready"), TrustUser: user})
	if err != nil {
		return nil, nil, fmt.Errorf("start the proxy: %w", err)
	}
	pr, err := NewRelay(px.Addr(), RelayOptions{Name: "proxy"})
	if err != nil {
		return px, nil, fmt.Errorf("relay for the proxy: %w", err)
	}
	return px, pr, nil
}

// resetStore empties the store's tables on every shard, so that the
// final state holds this run's rows only. The sequences keep counting
// (their stride names the shard).
func resetStore(ctx context.Context, env *Env) error {
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range env.Map.Shards {
		g.Go(func() error {
			c, err := adminConnect(gctx, env, i)
			if err != nil {
				return fmt.Errorf("reset the store: %w", err)
			}
			defer c.Close(context.WithoutCancel(gctx))
			if _, err := c.Exec(gctx, `TRUNCATE executions, outbox, processed_events, timers, spawns, trace`); err != nil {
				return fmt.Errorf("reset the store on %s: %w", s.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// effectiveTraceMax is the ring cap the store applies for a scenario's
// trace_max (0: the store's default).
func effectiveTraceMax(n int) int {
	if n == 0 {
		return store.DefaultTraceMax
	}
	return n
}

func shardNames(m *shardmap.Map) []string {
	names := make([]string, len(m.Shards))
	for i, s := range m.Shards {
		names[i] = s.Name
	}
	return names
}

// dbAndUser reads the database and user a DSN names.
func dbAndUser(dsn string) (string, string, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", "", fmt.Errorf("shard DSN %s: %w", redact(dsn), err)
	}
	return cfg.Database, cfg.User, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// progress prints a live line: time, ops/s, commits, faults, unknowns.
func progress(ctx context.Context, o RunOptions, h *History, start time.Time) {
	every := time.Second
	if !o.Terminal {
		every = 10 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	total := fmt.Sprintf("%.0fs", time.Duration(o.Scenario.Duration).Seconds())
	if o.Scenario.extended() {
		total = fmt.Sprintf("%s+ (until %d commits, at most %.0fs)", total, o.Scenario.MinCommits, time.Duration(o.Scenario.MaxDuration).Seconds())
	}
	var last int64
	lastT := time.Now()
	for {
		select {
		case <-ctx.Done():
			if o.Terminal {
				fmt.Fprintln(o.Progress)
			}
			return
		case now := <-t.C:
			st := h.Stats()
			rate := float64(st.Ops-last) / now.Sub(lastT).Seconds()
			last, lastT = st.Ops, now
			landed, byKind := 0, h.Landed()
			for _, n := range byKind {
				landed += n
			}
			line := fmt.Sprintf("chaos %s: %4.0fs/%s  %6.0f ops/s  %d commits  %d conflicts  %d errors  %d unknown  faults landed %d",
				o.Scenario.Name, time.Since(start).Seconds(), total, rate, st.Commits, st.Conflicts, st.Errors, st.Unknown, landed)
			if n := byKind[KindLostAck]; n > 0 {
				// What the goal waits for: the lost-acks the ops corroborate.
				line += fmt.Sprintf(" (lost-ack %d, %d corroborated)", n, h.Corroborated()[KindLostAck])
			}
			corr := 0
			for _, n := range h.Corroborated() {
				corr += n
			}
			line += fmt.Sprintf(", %d as the verifier counts", corr)
			if o.Terminal {
				fmt.Fprintf(o.Progress, "\r\033[K%s", line)
			} else {
				fmt.Fprintln(o.Progress, line)
			}
		}
	}
}

// hotBuckets are the buckets of the scenario's hot executions (keys:
// hotset: the first share of loadgen.ExecutionIDs, which get the hot
// fraction of the operations), sorted, each once; nil for other keys.
func hotBuckets(sc *Scenario, m *shardmap.Map) []int {
	keys, err := loadgen.ParseKeys(sc.Workload.Keys)
	if err != nil || keys.Dist != loadgen.HotSet || sc.Workload.Executions < 1 {
		return nil
	}
	n := sc.Workload.Executions
	hot := min(max(int(math.Ceil(keys.HotSet*float64(n))), 1), n)
	var out []int
	for _, id := range loadgen.ExecutionIDs(sc.Seed, n)[:hot] {
		out = append(out, m.Bucket(id))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// hasKind reports whether a plan has faults of kind k.
func hasKind(plan []Planned, k Kind) bool {
	return slices.ContainsFunc(plan, func(p Planned) bool { return p.Kind == k })
}

// runCatalogAddr is the host:port of the server runCatalogServer picks
// for the run's catalog.
func runCatalogAddr(m *shardmap.Map, catalogDSN string) (string, error) {
	adminDSN, _, err := runCatalogServer(m, catalogDSN)
	if err != nil {
		return "", err
	}
	return hostPort(adminDSN)
}

// hasCatalogCut reports whether a plan has catalog-cut faults.
func hasCatalogCut(plan []Planned) bool {
	for _, p := range plan {
		if p.Kind == KindCatalogCut {
			return true
		}
	}
	return false
}

// catalogRelay starts a relay in front of the catalog's server and returns
// it with dsn rewritten to lead through it.
func catalogRelay(dsn string) (*Relay, string, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		return nil, "", fmt.Errorf("run catalog: the DSN %s is not a URL with a host", redact(dsn))
	}
	host := u.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "5432")
	}
	r, err := NewRelay(host, RelayOptions{Name: "catalog"})
	if err != nil {
		return nil, "", fmt.Errorf("relay for the run's catalog: %w", err)
	}
	u.Host = r.Addr()
	return r, u.String(), nil
}

// viaOf says which client of the target each op goes through (the op
// line's via): "proxy" (the chaos-owned proxy) or "router" (the router,
// directly or over PgBouncer, or a store mutant); for the pgbouncer+proxy
// target, by the split's rule for the calls it routes by execution (load,
// commit, delete_timer), "" for the calls it alternates.
func viaOf(t string, split *splitTarget) func(*loadgen.Op) string {
	switch {
	case t == TargetProxy:
		return func(*loadgen.Op) string { return "proxy" }
	case split != nil:
		return func(op *loadgen.Op) string {
			switch op.Kind {
			case loadgen.OpLoad, loadgen.OpCommit, loadgen.OpDeleteTimer:
				if op.ExecutionID != "" {
					return [2]string{"router", "proxy"}[split.side(op.ExecutionID)]
				}
			}
			return ""
		}
	}
	return func(*loadgen.Op) string { return "router" }
}

// waitLease waits, polling every 20 ms for at most within, until a keyed
// read through st (an execution that does not exist) is not refused for a
// lease that is not live (57P03): the proxy behind st holds its catalog
// lease. A refusal of the first read is logged: the proxy, ready, should
// hold its lease already.
func waitLease(ctx context.Context, st store.ExecutionStore, within time.Duration, logf func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for first := true; ; first = false {
		_, err := st.Load(ctx, "pgshard-chaos-lease-probe")
		if err == nil || sqlState(err) != "57P03" {
			return nil
		}
		if first && logf != nil {
			logf("chaos: the proxy, ready, refused a keyed read for its lease (waiting for it at most %v): %v", within, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("keyed reads still refused after %v: %w", within, err)
		case <-t.C:
		}
	}
}
