package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/chaos"
	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/shardmap"
)

// Exit codes of `pgshard chaos` and `pgshard verify`.
const (
	ExitViolations = 1 // an invariant was violated (or a mutant was missed)
	ExitVacuous    = 2 // the faults did not land, or the run could not be done
)

func newChaosCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run fault-injection scenarios against the local cluster and prove the store's invariants survived",
		Long: `Chaos suites for CI: run the store's real workload (loadgen's workers, outbox
relay and timer sweeper) while faults are injected on a seeded schedule —
backends terminated mid-transaction, commit acknowledgements lost, PgBouncer
killed and paused, shards crashed, network latency, stalls, resets and
partitions in a user-space relay, the proxy restarted — record every
operation in a history, heal everything and let the system quiesce, then
check the history and the final contents of every shard with the
independent verifier (pgshard verify).

  run      one scenario, verified
  mutants  the same scenario against deliberately broken stores: every one
           must be caught (the checker proving its own power)
  replay   run a recorded run's seed and fault schedule again and say whether
           the verdict reproduced

Chaos only ever targets a cluster on this machine (loopback addresses) and
empties the store's six tables on every shard when a run starts.

Exit codes: 0 every invariant held and every scheduled fault kind landed;
1 violations (or a mutant was missed); 2 vacuous run (faults did not land)
or the run could not be done.`,
	}
	cmd.AddCommand(newChaosRunCmd(), newChaosMutantsCmd(), newChaosReplayCmd())
	return cmd
}

// chaosFlags are the flags run and mutants share.
type chaosFlags struct {
	config, scenario, target, out, compress, clusterDir string
	proxyBin                                            string
	duration                                            time.Duration
	seed                                                uint64
	minLanded                                           int
	quiet                                               bool
}

func addChaosFlags(cmd *cobra.Command) *chaosFlags {
	f := &chaosFlags{}
	fl := cmd.Flags()
	fl.StringVarP(&f.config, "config", "c", "", "config file with the shard map (default $PGSHARD_CONFIG, ./pgshard.yaml or ./.pgshard/pgshard.yaml)")
	fl.StringVar(&f.scenario, "scenario", "", "scenario YAML (see configs/chaos/); default: the built-in default scenario")
	fl.StringVar(&f.target, "target", "", "override the scenario's target: direct, pgbouncer, proxy or pgbouncer+proxy")
	fl.DurationVar(&f.duration, "duration", 0, "override the scenario's duration (load and faults; the quiesce phase comes after)")
	fl.Uint64Var(&f.seed, "seed", 0, "override the scenario's seed (workload choices and fault schedule)")
	fl.StringVar(&f.out, "out", "", "output directory (default chaos-out/<scenario>-<time>)")
	fl.StringVar(&f.compress, "compress", "", "compress the history: gz or zst")
	fl.StringVar(&f.clusterDir, "cluster-dir", "", "state directory of the local cluster, for process control (default: the config file's directory when it holds one)")
	fl.IntVar(&f.minLanded, "min-landed", -1, "override the scenario's min_landed: landings each scheduled fault kind needs")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no live progress")
	fl.StringVar(&f.proxyBin, "proxy-bin", "", "pgshard binary to run the proxy with (default: this one)")
	_ = fl.MarkHidden("proxy-bin")
	return f
}

// chaosSetup is a resolved chaos command.
type chaosSetup struct {
	cfg     *config.Config
	m       *shardmap.Map
	cluster *cluster.Cluster
	sc      *chaos.Scenario
	out     string
	bin     string
}

func resolveChaos(cmd *cobra.Command, f *chaosFlags) (*chaosSetup, error) {
	cfg, err := config.Load(config.Options{Path: f.config, RequireMap: true})
	if err != nil {
		return nil, err
	}
	if err := checkChaosMapCurrent(cmd.Context(), cfg); err != nil {
		return nil, err
	}
	s := &chaosSetup{cfg: cfg, m: cfg.Map}
	if f.scenario != "" {
		if s.sc, err = chaos.LoadScenario(f.scenario); err != nil {
			return nil, usageError{err}
		}
	} else if s.sc, err = chaos.DefaultScenarioFile(); err != nil {
		return nil, err
	}
	fl := cmd.Flags()
	if fl.Changed("target") {
		s.sc.Target = f.target
	}
	if fl.Changed("duration") {
		s.sc.Duration = chaos.Duration(f.duration)
	}
	if fl.Changed("seed") {
		s.sc.Seed = f.seed
	}
	if f.minLanded >= 0 {
		s.sc.MinLanded = f.minLanded
	}
	if err := s.sc.Validate(); err != nil {
		return nil, usagef("scenario %s: %v", s.sc.Name, err)
	}
	switch f.compress {
	case "", "gz", "zst":
	default:
		return nil, usagef("--compress: want gz or zst (got %q)", f.compress)
	}
	dir := f.clusterDir
	if dir == "" && cfg.Path != "" {
		if _, err := os.Stat(filepath.Join(filepath.Dir(cfg.Path), cluster.StateFile)); err == nil {
			dir = filepath.Dir(cfg.Path)
		}
	}
	if dir != "" {
		if s.cluster, err = cluster.Load(dir); err != nil {
			return nil, fmt.Errorf("cluster for process control: %w", err)
		}
	}
	s.out = f.out
	if s.out == "" {
		s.out = filepath.Join("chaos-out", safeName(s.sc.Name)+"-"+time.Now().Format("20060102-150405"))
	}
	s.bin = f.proxyBin
	if s.bin == "" {
		if s.bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find the pgshard binary (the proxy runs as its subcommand): %w", err)
		}
	}
	return s, nil
}

func newChaosRunCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run one chaos scenario and verify it",
		Long: `Run one scenario (workload + seeded fault schedule + heal and quiesce) against
the cluster of the config, then verify: the verdict table is printed and
written with the HTML report to the output directory, next to the history
(history.jsonl), the realized fault schedule (faults.json), the run record
(run.json, what replay reads) and loadgen's reports.`,
		Example: `  pgshard dev up --dir .pgshard-chaos --shards 3
  pgshard chaos run --config .pgshard-chaos/pgshard.yaml --scenario configs/chaos/ci.yaml
  pgshard chaos run --scenario configs/chaos/smoke.yaml --target proxy --duration 20s --seed 7`,
		Args: cobra.NoArgs,
	}
	f := addChaosFlags(cmd)
	var asJSON bool
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the verdict as JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		s, err := resolveChaos(cmd, f)
		if err != nil {
			return err
		}
		_, v, err := s.runAndVerify(cmd, f, "", nil, s.out, asJSON)
		if err != nil {
			return err
		}
		return v.exitError()
	}
	return cmd
}

// runAndVerify runs the scenario (with mutant k, or the plan of a replay)
// into out and verifies it.
func (s *chaosSetup) runAndVerify(cmd *cobra.Command, f *chaosFlags, k string, plan []chaos.Planned, out string, asJSON bool) (*chaos.RunResult, *verdictOutcome, error) {
	ctx := cmd.Context()
	errw := cmd.ErrOrStderr()
	o := chaos.RunOptions{Scenario: s.sc, Map: s.m, Cluster: s.cluster, CatalogDSN: s.cfg.Catalog.DSN, Out: out, Bin: s.bin,
		Compress: f.compress, Mutant: mutantKind(k), Plan: plan}
	if !f.quiet {
		o.Progress, o.Terminal = errw, isTerminal(errw)
		what := s.sc.Name
		if k != "" {
			what += " (mutant " + k + ")"
		}
		period := time.Duration(s.sc.Duration).String()
		if s.sc.MaxDuration > 0 && s.sc.MinCommits > 0 {
			landed := "every kind landed"
			if k != "" {
				landed = "the faults the mutant needs landed"
			}
			period = fmt.Sprintf("%s to %s (until %d commits and %s)", period, time.Duration(s.sc.MaxDuration), s.sc.MinCommits, landed)
		}
		fmt.Fprintf(errw, "chaos: %s: target %s, %d shards, %s of load and faults, seed %d; output in %s\n",
			what, s.sc.Target, len(s.m.Shards), period, s.sc.Seed, out)
	}
	res, err := chaos.Run(ctx, o)
	if res == nil {
		return nil, nil, &ExitCodeError{Code: ExitVacuous, Err: fmt.Errorf("chaos run: %w", err)}
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return res, nil, fmt.Errorf("interrupted; the partial history is in %s", res.History)
		}
		fmt.Fprintf(errw, "chaos: the run ended with an error (verifying what it recorded): %v\n", err)
	}
	if !f.quiet {
		fmt.Fprintf(errw, "chaos: %d operations recorded in %s; verifying...\n", res.Ops, res.Duration.Round(time.Second))
	}
	v, verr := verifyRun(ctx, cmd, s.m, res.History, out, s.sc, err, asJSON)
	if verr != nil {
		return res, nil, &ExitCodeError{Code: ExitVacuous, Err: verr}
	}
	return res, v, nil
}

func newChaosReplayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replay DIR",
		Short: "Run a recorded run's seed and fault schedule again and say whether the verdict reproduced",
		Long: `Read DIR/run.json (scenario, seed, target, mutant) and DIR/faults.json (the
fault schedule that was run), run them again against the cluster into
DIR/replay-N, verify, and compare the verdict with DIR's: the same result
(pass, violations, vacuous) and the same violated invariants is
"reproduced". The workload's choices and the fault schedule repeat exactly;
the interleaving of operations is the machine's, so a rare race may need
more than one replay.

Exit codes: 0 reproduced, 1 not reproduced, 2 the replay could not be done.`,
		Args: cobra.ExactArgs(1),
	}
	f := addChaosFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return replay(cmd, f, args[0])
	}
	return cmd
}

// checkChaosMapCurrent refuses a config whose shard map is older than its
// catalog's (catalog.dsn; reshard moves since dev up or dev add-shard last
// wrote the config): a run resets every shard's fence to the config's map,
// which would undo those moves and leave the catalog's map and the shards'
// fences disagreeing. A catalog that cannot be read within 5 s is not
// checked.
func checkChaosMapCurrent(ctx context.Context, cfg *config.Config) error {
	if cfg.Catalog.DSN == "" || cfg.Map == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := catalog.Open(ctx, cfg.Catalog.DSN, catalog.Options{ApplicationName: "pgshard chaos"})
	if err != nil {
		return nil
	}
	defer c.Close()
	epoch, err := c.Epoch(ctx)
	if err != nil || epoch <= cfg.Map.Epoch {
		return nil
	}
	dir := "DIR"
	if abs, err := filepath.Abs(cfg.Path); cfg.Path != "" && err == nil {
		dir = filepath.Dir(abs)
	}
	return fmt.Errorf("the config's shard map (epoch %d) is older than its catalog's (epoch %d, %s): a chaos run resets every shard's fence to the config's map and would undo the moves made since; write the catalog's map into the config first (pgshard dev up --dir %s does)",
		cfg.Map.Epoch, epoch, c.Addr(), dir)
}
