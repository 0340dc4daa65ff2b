package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/loadgen/storetarget"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/store"
)

// Exit codes of `pgshard loadgen`.
const (
	// ExitThresholdBreached: the run completed but a --fail-if held.
	ExitThresholdBreached = 3
	// ExitRunFailed: the run could not be done (no connection, setup failed).
	ExitRunFailed = 4
)

func newLoadgenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "loadgen",
		Short: "Load the store's hot path and answer capacity questions (runs, sweeps, comparisons)",
		Long: `Drive the execution store's real hot path — LoadForEvent, a deterministic
transition, Commit (state-only fast path or complex commits with outbox emits,
timers, spawns and trace), redelivered events that must be deduplicated,
conflicts retried with a reload — with the production outbox relay and timer
sweeper running beside it, and measure it honestly (HDR histograms per
operation kind and shard; open-loop latency from each operation's intended
start; warm-up excluded; the generator checks itself).

  run      one run: text, JSON, .hgrm and HTML reports; --fail-if thresholds for CI
  sweep    steps concurrency (or rate), finds the knee at an SLO, fits the USL,
           and answers how many shards a target commit rate needs
  compare  runs or sweeps side by side (e.g. direct vs pgbouncer vs proxy)
  merge    the reports of the N parts of one run (run --part K/N on N
           machines) merged into one report of the whole run

Targets: direct (router to each shard's Postgres), pgbouncer (router to each
shard's PgBouncer), proxy (one DSN to pgshard proxy, --dsn).

Exit codes: 0 ok, 3 a --fail-if threshold was breached, 4 the run failed,
2 bad flags, 130 interrupted (a partial report is still written).`,
	}
	cmd.AddCommand(newLoadgenRunCmd(), newLoadgenSweepCmd(), newLoadgenCompareCmd(), newLoadgenMergeCmd())
	return cmd
}

// loadgenFlags are the flags of run and sweep; each is bound to a key of
// the config's loadgen section (flags > env > file > defaults).
type loadgenFlags struct {
	config  string
	profile string
	failIf  []string
	quiet   bool
	label   string
	part    string
}

// loadgenBind maps config keys to flag names.
var loadgenBind = map[string]string{
	"loadgen.target": "target", "loadgen.dsn": "dsn", "loadgen.duration": "duration", "loadgen.warmup": "warmup",
	"loadgen.ops": "ops", "loadgen.concurrency": "concurrency", "loadgen.rate": "rate",
	"loadgen.max_outstanding": "max-outstanding", "loadgen.late_threshold": "late-threshold",
	"loadgen.executions": "executions", "loadgen.seed": "seed", "loadgen.keys": "keys",
	"loadgen.mix.fast": "fast", "loadgen.mix.max_emits": "max-emits", "loadgen.mix.timer": "timers",
	"loadgen.mix.spawn": "spawns", "loadgen.redelivery": "redelivery", "loadgen.retry_cap": "retry-cap",
	"loadgen.payload_bytes": "payload-bytes", "loadgen.relays": "relays", "loadgen.op_timeout": "op-timeout", "loadgen.relay_workers": "relay-workers", "loadgen.out": "out",
	"loadgen.slo": "slo", "loadgen.steps": "steps", "loadgen.target_rate": "target-rate", "loadgen.headroom": "headroom",
	"catalog.dsn": "catalog",
}

func addLoadgenFlags(cmd *cobra.Command, sweep bool) *loadgenFlags {
	lf := &loadgenFlags{}
	d := config.Defaults().Loadgen
	f := cmd.Flags()
	f.StringVarP(&lf.config, "config", "c", "", "config file (default $PGSHARD_CONFIG, ./pgshard.yaml or ./.pgshard/pgshard.yaml)")
	f.StringVar(&lf.profile, "profile", "", "YAML file whose loadgen section replaces the config's (e.g. configs/loadgen-ci.yaml); flags still override it")
	f.String("target", d.Target, "direct (router to the shards), pgbouncer (router to their PgBouncers) or proxy (--dsn)")
	f.String("dsn", d.DSN, "DSN of pgshard proxy (target proxy)")
	f.String("catalog", "", "DSN of the shard map's catalog: targets direct and pgbouncer then route by the catalog's map and follow it (config key catalog.dsn, $PGSHARD_CATALOG_DSN)")
	f.Duration("duration", d.Duration, "measured period of the run (each step of a sweep)")
	f.Duration("warmup", d.Warmup, "warm-up before measuring (excluded from every figure)")
	f.Int64("ops", d.Ops, "end after this many measured operations (0: duration only)")
	f.Int("concurrency", d.Concurrency, "closed loop: workers")
	f.Float64("rate", d.Rate, "open loop: arrivals per second (0: closed loop)")
	f.Int("max-outstanding", d.MaxOutstanding, "open loop: operations in flight at most; arrivals beyond are dropped and counted")
	f.Duration("late-threshold", d.LateThreshold, "open loop: an operation starting later than this after its intended time is late")
	f.Int("executions", d.Executions, "executions created in the setup phase")
	f.Uint64("seed", d.Seed, "seed of the workload (same seed: same executions and choices)")
	f.String("keys", d.Keys, "key choice: uniform, zipfian[:theta] or hotset[:key-share:op-share]")
	f.Float64("fast", d.Mix.Fast, "share of state-only (fast path) commits; the rest are complex commits")
	f.Int("max-emits", d.Mix.MaxEmits, "complex commits emit 0..N outbox events")
	f.Float64("timers", d.Mix.Timer, "chance that a complex commit schedules or cancels a timer")
	f.Float64("spawns", d.Mix.Spawn, "chance that a complex commit records a spawn")
	f.Float64("redelivery", d.Redelivery, "share of operations that resend an already processed event (must be deduplicated)")
	f.Int("retry-cap", d.RetryCap, "reload-and-retry attempts after a conflict")
	f.Int("payload-bytes", d.PayloadBytes, "padding of each execution's stored state")
	f.Duration("op-timeout", d.OpTimeout, "bound on every call to the target: a hung target fails calls as timeouts (0: none)")
	f.Bool("relays", d.Relays, "run the outbox relay and timer sweeper during the run")
	f.Int("relay-workers", d.RelayWorkers, "deliveries (and timer fires) each relay runs at once")
	f.String("out", d.Out, "report directory (default loadgen-out/<label>-<time>)")
	f.BoolVarP(&lf.quiet, "quiet", "q", false, "no live progress (for CI)")
	f.StringVar(&lf.label, "label", "", "name of the run in reports and comparisons (default: the target)")
	if sweep {
		f.String("steps", d.Steps, "concurrencies (or, with --rate, rates) to step through, e.g. 1,2,4,8,16")
		f.String("slo", d.SLO, "latency objective of the knee, e.g. p99=50ms or 'p99(commit)=20ms,p50=5ms'")
		f.Float64("target-rate", d.TargetRate, "commits/s to plan shards for (0: no capacity answer)")
		f.Float64("headroom", d.Headroom, "share of each shard's capacity to keep free in the plan")
	} else {
		f.StringVar(&lf.part, "part", "", "run part K of N (K/N, K from 0 to N-1) of a run split over N generators: the executions i with i mod N = K, at 1/N of --rate (or of --concurrency); merge the N reports with pgshard loadgen merge")
		f.StringArrayVar(&lf.failIf, "fail-if", nil, "CI threshold, repeatable: 'p99(commit)>50ms', 'errors>0', 'throughput<1000' (exit 3 when one holds)")
	}
	return lf
}

// loadgenSetup is a resolved run or sweep.
type loadgenSetup struct {
	cfg    *config.Config
	opts   loadgen.Options
	out    string
	failIf []loadgen.Threshold
}

// resolveLoadgen loads the config with the flags and turns it into options.
func resolveLoadgen(cmd *cobra.Command, lf *loadgenFlags) (*loadgenSetup, error) {
	bind := map[string]string{}
	for k, fl := range loadgenBind {
		if cmd.Flags().Lookup(fl) != nil {
			bind[k] = fl
		}
	}
	cfg, err := config.Load(config.Options{Path: lf.config, Flags: cmd.Flags(), Bind: bind})
	if err != nil {
		return nil, err
	}
	if lf.profile != "" {
		// The profile's loadgen section (with the same flags and
		// environment on top) replaces the config file's.
		p, err := config.Load(config.Options{Path: lf.profile, Flags: cmd.Flags(), Bind: bind})
		if err != nil {
			return nil, fmt.Errorf("profile: %w", err)
		}
		cfg.Loadgen = p.Loadgen
	}
	target := cfg.Loadgen.Target
	if target != "proxy" && cfg.Map == nil && cfg.Catalog.DSN == "" {
		if cfg.Path == "" {
			return nil, usagef("target %s needs a shard map: pass --config FILE (e.g. the pgshard.yaml written by `pgshard dev up`), or use --target proxy --dsn DSN", target)
		}
		return nil, usagef("config %s has no shard map (needed by target %s)", cfg.Path, target)
	}
	if target == "proxy" && cfg.Loadgen.DSN == "" {
		return nil, usagef("target proxy needs --dsn (or loadgen.dsn): the proxy's DSN, e.g. postgres://pgshard@127.0.0.1:6543/pgshard")
	}
	l := cfg.Loadgen
	keys, err := loadgen.ParseKeys(l.Keys)
	if err != nil {
		return nil, usagef("loadgen.keys (--keys): %v", err)
	}
	o := loadgen.DefaultOptions()
	o.Target, o.Label = target, lf.label
	o.Workload.Executions, o.Workload.Seed, o.Workload.Keys = l.Executions, l.Seed, keys
	o.Workload.Mix = loadgen.Mix{Fast: l.Mix.Fast, MaxEmits: l.Mix.MaxEmits, Timer: l.Mix.Timer, Spawn: l.Mix.Spawn}
	o.Workload.Redelivery, o.Workload.RetryCap, o.Workload.PayloadBytes = l.Redelivery, l.RetryCap, l.PayloadBytes
	o.Concurrency, o.MaxOutstanding, o.LateThreshold = l.Concurrency, l.MaxOutstanding, l.LateThreshold
	if l.Rate > 0 {
		o.Model, o.Rate = loadgen.Open, l.Rate
	}
	o.Warmup, o.Duration, o.Ops, o.Relays, o.RelayWorkers = l.Warmup, l.Duration, l.Ops, l.Relays, l.RelayWorkers
	o.OpTimeout = l.OpTimeout
	if lf.part != "" {
		p, err := loadgen.ParsePart(lf.part)
		if err != nil {
			return nil, usagef("--part: %v", err)
		}
		if o, err = o.ForPart(p); err != nil {
			return nil, usagef("--part: %v", err)
		}
	}
	if !lf.quiet {
		o.Progress = cmd.ErrOrStderr()
	}
	s := &loadgenSetup{cfg: cfg, opts: o, out: l.Out}
	fail := l.FailIf
	if f := cmd.Flags().Lookup("fail-if"); f != nil && f.Changed {
		fail = lf.failIf
	}
	if s.failIf, err = loadgen.ParseThresholds(fail); err != nil {
		return nil, usagef("--fail-if: %v", err)
	}
	if s.out == "" {
		name := o.Label
		if name == "" {
			name = target
		}
		if !o.Part.Whole() {
			name += fmt.Sprintf("-part%dof%d", o.Part.Index, o.Part.Count)
		}
		s.out = filepath.Join("loadgen-out", safeName(name)+"-"+time.Now().Format("20060102-150405"))
	}
	return s, nil
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == '\\' || r == ':' {
			return '_'
		}
		return r
	}, s)
}

// openTarget connects to the target the setup names.
func openTarget(ctx context.Context, s *loadgenSetup) (loadgen.Target, loadgen.Locator, int, error) {
	cfg := s.cfg
	sopts := storeOptions(cfg.Store)
	sopts.ApplicationName = "pgshard-loadgen"
	buckets := 0
	if cfg.Map != nil {
		buckets = cfg.Map.Buckets
	}
	switch cfg.Loadgen.Target {
	case "proxy":
		st, err := store.Open(ctx, cfg.Loadgen.DSN, sopts)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("connect to the proxy: %w", err)
		}
		loc := loadgen.SingleShard("proxy")
		if cfg.Map != nil {
			loc = loadgen.MapLocator(cfg.Map) // the proxy routes by the same map
		}
		return storetarget.New(st), loc, buckets, nil
	case "direct", "pgbouncer":
		pooler := cfg.Loadgen.Target == "pgbouncer"
		if pooler && cfg.Map != nil {
			for _, sh := range cfg.Map.Shards {
				if sh.PoolerDSN == "" {
					return nil, nil, 0, usagef("target pgbouncer: shard %s has no pooler_dsn in the map", sh.Name)
				}
			}
		}
		rt, err := openStoreRouter(ctx, cfg, router.Options{Store: sopts, UsePooler: pooler}, "loadgen", os.Stderr)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("open the router (%s): %w", cfg.Loadgen.Target, err)
		}
		// Per-shard figures attribute each key by the map the run
		// started from: a range moved during the run stays counted on
		// its old shard.
		return storetarget.New(rt), loadgen.MapLocator(rt.Start), rt.Start.Buckets, nil
	}
	return nil, nil, 0, usagef("unknown target %q", cfg.Loadgen.Target)
}

// runFailed marks an error of the run itself (not a threshold).
func runFailed(err error) error {
	var ue usageError
	if errors.As(err, &ue) {
		return err
	}
	return &ExitCodeError{Code: ExitRunFailed, Err: err}
}

// parseSteps parses "1,2,4,8".
func parseSteps(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || !(v > 0) {
			return nil, fmt.Errorf("step %q is not a positive number", p)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("no steps")
	}
	return out, nil
}

func printFiles(w io.Writer, dir string, files []string) {
	fmt.Fprintf(w, "reports in %s:", dir)
	for _, f := range files {
		fmt.Fprintf(w, " %s", filepath.Base(f))
	}
	fmt.Fprintln(w)
}
