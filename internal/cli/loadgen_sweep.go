package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/loadgen"
)

func newLoadgenSweepCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Step concurrency (or rate), find the knee at an SLO, fit the USL, plan shards",
		Long: `Run one warmed-up, measured step per value of --steps (concurrencies; with
--rate > 0 the steps are open-loop arrival rates) over the same executions.

The knee is the step of highest throughput that meets --slo without errors.
Throughput against concurrency is fitted to the Universal Scalability Law
X(N) = λN / (1 + σ(N−1) + κN(N−1)) (σ contention, κ coherency, with R²).
With --target-rate the capacity model answers how many shards of the measured
kind are needed: per-shard capacity = the hottest shard's commits/s at the
knee; shards = the smallest n whose hottest shard, given the key distribution
over buckets split evenly into n ranges, stays within that capacity minus
--headroom. The report states these assumptions.

Reports: DIR/sweep.txt, sweep.json, sweep.html, and every step's full report
in DIR/step-NN-.../.`,
		Example: `  pgshard loadgen sweep -c /tmp/lg-dev/pgshard.yaml --steps 1,2,4,8,16,32 --duration 10s \
      --slo p99=20ms --target-rate 20000 --headroom 0.3`,
		Args: cobra.NoArgs,
	}
	lf := addLoadgenFlags(cmd, true)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		s, err := resolveLoadgen(cmd, lf)
		if err != nil {
			return err
		}
		l := s.cfg.Loadgen
		steps, err := parseSteps(l.Steps)
		if err != nil {
			return usagef("loadgen.steps (--steps): %v", err)
		}
		slo, err := loadgen.ParseSLO(l.SLO)
		if err != nil {
			return usagef("loadgen.slo (--slo): %v", err)
		}
		ctx := cmd.Context()
		t, loc, buckets, err := openTarget(ctx, s)
		if err != nil {
			return runFailed(err)
		}
		defer t.Close()
		out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
		var werr error
		so := loadgen.SweepOptions{Base: s.opts, Steps: steps, SLO: slo, TargetRate: l.TargetRate, Headroom: l.Headroom, Buckets: buckets}
		stepDirs := map[int]string{}
		so.StepDone = func(i int, res *loadgen.Result) {
			dir := filepath.Join(s.out, fmt.Sprintf("step-%02d-%s", i+1, safeName(stepLabel(s.opts.Model, steps[i]))))
			stepDirs[i] = dir
			if _, err := loadgen.WriteReports(dir, res); err != nil && werr == nil {
				werr = err
			}
			fmt.Fprintf(errw, "step %d/%d %s: %.1f ops/s, p99 %.2fms, errors %d\n", i+1, len(steps),
				stepLabel(s.opts.Model, steps[i]), res.Throughput, p99(res), res.ErrorCount())
		}
		if s.opts.Progress != nil {
			fmt.Fprintf(errw, "loadgen sweep: target %s (%d shards), %d steps of %s + %s; setting up %d executions...\n",
				s.opts.Target, len(loc.Shards()), len(steps), s.opts.Warmup, s.opts.Duration, s.opts.Workload.Executions)
		}
		sw, err := loadgen.RunSweep(ctx, t, loc, so)
		if sw == nil {
			return runFailed(err)
		}
		for i := range sw.Steps {
			sw.Steps[i].Dir = stepDirs[i]
		}
		files, ferr := loadgen.WriteSweepReports(s.out, sw)
		if ferr != nil || werr != nil {
			return runFailed(fmt.Errorf("write reports: %w", errors.Join(ferr, werr)))
		}
		if err := loadgen.WriteSweepText(out, sw); err != nil {
			return err
		}
		fmt.Fprintln(out)
		printFiles(out, s.out, files)
		fmt.Fprintf(out, "HTML report: %s\n", filepath.Join(s.out, loadgen.SweepHTMLFile))
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return fmt.Errorf("interrupted: partial sweep in %s", s.out)
			}
			return runFailed(err)
		}
		return nil
	}
	return cmd
}

func stepLabel(m loadgen.Model, x float64) string {
	if m == loadgen.Open {
		return fmt.Sprintf("rate%g", x)
	}
	return fmt.Sprintf("c%d", int(x))
}

func p99(r *loadgen.Result) float64 {
	if k := r.Kinds["op"]; k != nil {
		return k.P99
	}
	return 0
}
