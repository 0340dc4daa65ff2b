package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/internal/config"
	"github.com/pgshard/pgshard/reshard"
)

// reshardTimeout bounds apply and abort (a move of a large range copies
// for a while; the journal lets a later apply resume).
const reshardTimeout = 6 * time.Hour

func newReshardCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reshard",
		Short: "Move bucket ranges between shards online (plan, apply, status, abort)",
		Long: `Move bucket ranges between shards while the store runs. The catalog
(--catalog DSN) holds the map and the move journal:

  pgshard reshard plan --add-shard NAME | --remove-shard NAME | --move LO-HI --to SHARD
  pgshard reshard apply [--max-parallel N] [--freeze-budget 100ms]
  pgshard reshard status
  pgshard reshard abort

Each range is copied, caught up, frozen for at most the freeze budget (a freeze
that cannot finish in time is abandoned and retried, never extended) and
flipped in the catalog. Every step is journaled: after a crash, apply again
resumes; abort rolls back the moves that have not flipped (and completes those
that have).`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newReshardPlanCmd(), newReshardApplyCmd(), newReshardStatusCmd(), newReshardAbortCmd())
	return cmd
}

// withReshardCatalog gives cmd the --config and --catalog flags and makes
// run its RunE with the catalog open (closed after run) and a context
// bounded by timeout.
func withReshardCatalog(cmd *cobra.Command, timeout time.Duration, run func(ctx context.Context, cmd *cobra.Command, c *catalog.Catalog) error) *cobra.Command {
	cfgPath := addConfigFlag(cmd)
	addCatalogFlag(cmd)
	check := cmd.PreRunE
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if check != nil {
			if err := check(cmd, nil); err != nil {
				return err
			}
		}
		cfg, err := config.Load(config.Options{Path: *cfgPath, Flags: cmd.Flags(), Bind: catalogBind})
		if err != nil {
			return err
		}
		if cfg.Catalog.DSN == "" {
			return usageError{errNoCatalog}
		}
		c, err := catalog.Open(cmd.Context(), cfg.Catalog.DSN, catalog.Options{ApplicationName: "pgshard reshard"})
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
		defer cancel()
		return run(ctx, cmd, c)
	}
	cmd.PreRunE = nil
	return cmd
}

// parseBucketRange parses "LO-HI" (or one bucket "B").
func parseBucketRange(s string) (int, int, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	if err1 != nil || err2 != nil || lo < 0 || hi < lo {
		return 0, 0, fmt.Errorf("%q is not a bucket range LO-HI (0 <= LO <= HI)", s)
	}
	return lo, hi, nil
}

func newReshardPlanCmd() *cobra.Command {
	var add, remove, move, to string
	cmd := &cobra.Command{
		Use:   "plan --add-shard NAME | --remove-shard NAME | --move LO-HI --to SHARD",
		Short: "Record a set of range moves in the catalog's journal and print it",
		Long: `Compute the range moves that one change needs on the catalog's current map
and record them in the move journal as planned; apply runs them.

--add-shard NAME spreads buckets evenly onto NAME, a shard already registered
in the catalog without buckets (pgshard dev add-shard does that).
--remove-shard NAME spreads NAME's buckets over the other shards (it stays in
the map, empty). --move LO-HI --to SHARD moves buckets LO..HI to SHARD.
A plan is refused while moves of an earlier one are unfinished.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&add, "add-shard", "", "spread buckets onto this (registered, empty) shard")
	cmd.Flags().StringVar(&remove, "remove-shard", "", "move every bucket of this shard to the others")
	cmd.Flags().StringVar(&move, "move", "", "bucket range LO-HI to move (with --to)")
	cmd.Flags().StringVar(&to, "to", "", "shard that receives --move's range")
	r := reshard.Request{}
	cmd.PreRunE = func(*cobra.Command, []string) error {
		r = reshard.Request{AddShard: add, RemoveShard: remove}
		if (move == "") != (to == "") {
			return usagef("--move and --to go together")
		}
		if move != "" {
			lo, hi, err := parseBucketRange(move)
			if err != nil {
				return usagef("--move: %v", err)
			}
			r.Lo, r.Hi, r.To = lo, hi, to
		}
		return nil
	}
	return withReshardCatalog(cmd, catalogTimeout, func(ctx context.Context, cmd *cobra.Command, c *catalog.Catalog) error {
		moves, err := reshard.Plan(ctx, c, r)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "planned %s in catalog %s (run `pgshard reshard apply`):\n", plural(len(moves), "move"), c.Addr())
		return reshard.WriteStatus(cmd.OutOrStdout(), reshard.Statuses(moves))
	})
}

func newReshardApplyCmd() *cobra.Command {
	var opts reshard.Options
	cmd := &cobra.Command{
		Use:   "apply [--max-parallel N] [--freeze-budget 100ms] [--duty-cycle 0.5] [--cleanup-batch 1000]",
		Short: "Run the journal's unfinished moves to done (resuming interrupted ones)",
		Args:  cobra.NoArgs,
	}
	cmd.Flags().IntVar(&opts.MaxParallel, "max-parallel", 1, "moves run at once")
	cmd.Flags().DurationVar(&opts.FreezeBudget, "freeze-budget", reshard.DefaultFreezeBudget, "longest write freeze of one range; a freeze over it is abandoned and retried")
	cmd.Flags().IntVar(&opts.FreezeAttempts, "freeze-attempts", reshard.DefaultFreezeAttempts, "freezes tried per move before apply gives up on it (apply again retries)")
	cmd.Flags().Float64Var(&opts.DutyCycle, "duty-cycle", reshard.DefaultDutyCycle, "share of the time a move's copy, catch-up (up to a freeze's lock request) and clean-up may keep the mover busy, in (0, 1]; it pauses the rest (1: never; the freeze itself is never paced, and a catch-up whose backlog stops shrinking drops its pauses)")
	cmd.Flags().IntVar(&opts.CleanupBatch, "cleanup-batch", reshard.DefaultCleanupBatch, "rows of one table the clean-up after a flip deletes per transaction on the source (committed batches, paced by --duty-cycle)")
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if opts.CleanupBatch < 1 || opts.CleanupBatch > reshard.MaxCleanupBatch {
			return usagef("--cleanup-batch must be in 1..%d, got %d", reshard.MaxCleanupBatch, opts.CleanupBatch)
		}
		if opts.MaxParallel < 1 || opts.FreezeBudget <= 0 || opts.FreezeAttempts < 1 {
			return usagef("--max-parallel, --freeze-budget and --freeze-attempts must be positive")
		}
		if opts.DutyCycle <= 0 || opts.DutyCycle > 1 {
			return usagef("--duty-cycle must be in (0, 1], got %v", opts.DutyCycle)
		}
		return nil
	}
	return withReshardCatalog(cmd, reshardTimeout, func(ctx context.Context, cmd *cobra.Command, c *catalog.Catalog) error {
		out := cmd.OutOrStdout()
		opts.Log = func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
		results, err := reshard.Apply(ctx, c, opts)
		for _, r := range results {
			var fs []string
			for _, f := range r.Freezes {
				s := f.Duration.Round(time.Microsecond).String()
				if f.Abandoned {
					s += " (abandoned)"
				}
				fs = append(fs, s)
			}
			fmt.Fprintf(out, "move %d %d-%d %s→%s: %d rows copied, %d changes replayed, paused %v, freezes [%s]\n",
				r.Move.ID, r.Move.Lo, r.Move.Hi, r.Move.From, r.Move.To, r.RowsCopied, r.Replayed, r.Paused.Round(time.Millisecond), strings.Join(fs, ", "))
		}
		if err != nil {
			return err
		}
		if len(results) == 0 {
			fmt.Fprintln(out, "no unfinished moves")
		}
		return nil
	})
}

func newReshardStatusCmd() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the move journal",
		Args:  cobra.NoArgs,
	}
	cmd.Flags().BoolVar(&all, "all", false, "include finished moves")
	return withReshardCatalog(cmd, catalogTimeout, func(ctx context.Context, cmd *cobra.Command, c *catalog.Catalog) error {
		epoch, err := c.Epoch(ctx)
		if err != nil {
			return err
		}
		moves, err := reshard.Status(ctx, c, !all)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "catalog %s at epoch %d: %d moves\n", c.Addr(), epoch, len(moves))
		return reshard.WriteStatus(cmd.OutOrStdout(), moves)
	})
}

func newReshardAbortCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "abort",
		Short: "Roll back the unfinished moves that have not flipped (finish those that have)",
		Args:  cobra.NoArgs,
	}
	return withReshardCatalog(cmd, reshardTimeout, func(ctx context.Context, cmd *cobra.Command, c *catalog.Catalog) error {
		before, err := c.Moves(ctx, true)
		if err != nil {
			return err
		}
		if err := reshard.Abort(ctx, c, reshard.Options{}); err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if len(before) == 0 {
			fmt.Fprintln(out, "no unfinished moves: nothing to abort")
			return nil
		}
		all, err := c.Moves(ctx, false)
		if err != nil {
			return err
		}
		ended := map[int64]bool{}
		for _, m := range before {
			ended[m.ID] = true
		}
		var done []catalog.MoveRecord
		for _, m := range all {
			if ended[m.ID] {
				done = append(done, m)
			}
		}
		fmt.Fprintf(out, "%s ended (aborted, or done if it had flipped); no unfinished moves left:\n", plural(len(before), "unfinished move"))
		return reshard.WriteStatus(out, reshard.Statuses(done))
	})
}

// plural is "1 move", "2 moves".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
