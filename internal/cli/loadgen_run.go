package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/loadgen"
)

func newLoadgenRunCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "One bounded load run with reports (and CI thresholds)",
		Long: `Create --executions executions (if missing), warm up, then run the worker loop
for --duration (and/or --ops) in a closed loop (--concurrency workers) or an
open loop (--rate arrivals/s, latency from each operation's intended start),
with the outbox relay and timer sweeper running beside it.

Reports go to --out: summary.txt, result.json (every figure), one .hgrm per
operation kind (HdrHistogram percentile format) and report.html (offline,
self-contained). When the config names a catalog (catalog.dsn, or the
proxy's proxy.catalog), the range moves' freezes within the run are read
from its move journal at the end and marked on the report's timelines.
Live progress goes to stderr each second unless --quiet.
Ctrl-C ends the run cleanly and still writes a partial report.

--fail-if thresholds (repeatable) make CI gates:
  --fail-if 'p99(commit)>50ms' --fail-if 'errors>0' --fail-if 'throughput<1000'
Metrics: pNN(kind), mean|max|min(kind), count(kind), throughput, commit_rate,
ops, errors, errors(class), error_rate, conflicts, conflict_rate, retries,
gave_up, dedupe_miss, dropped, late, hottest_share, warnings. Kinds: op, load,
commit, fast_commit, complex_commit, redelivery, relay_delivery, outbox_lag,
timer_fire, timer_lag.

--part K/N makes the run one of N generators sharing the load (K from 0 to
N-1, e.g. a Kubernetes Job's completion index): it drives the executions
whose index i (in the seed's list of --executions ids) has i mod N = K, at
1/N of --rate (closed loop: 1/N of --concurrency), with the same flags on
every machine; ` + "`pgshard loadgen merge`" + ` then merges the N report directories.

Exit codes: 0 ok, 3 a threshold was breached, 4 the run failed, 130 interrupted.`,
		Example: `  pgshard dev up --dir /tmp/lg-dev
  pgshard loadgen run --config /tmp/lg-dev/pgshard.yaml --duration 30s --concurrency 16
  pgshard loadgen run -c /tmp/lg-dev/pgshard.yaml --target pgbouncer --rate 2000 --duration 20s
  pgshard loadgen run --target proxy --dsn postgres://pgshard@127.0.0.1:6543/pgshard --quiet \
      --fail-if 'p99(commit)>50ms' --fail-if 'errors>0'
  pgshard loadgen run -c pgshard.yaml --rate 8000 --part 2/4 --out out/part2   # on the 3rd of 4 machines`,
		Args: cobra.NoArgs,
	}
	lf := addLoadgenFlags(cmd, false)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		s, err := resolveLoadgen(cmd, lf)
		if err != nil {
			return err
		}
		return runLoadgen(cmd, s)
	}
	return cmd
}

func runLoadgen(cmd *cobra.Command, s *loadgenSetup) error {
	ctx := cmd.Context()
	out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
	t, loc, _, err := openTarget(ctx, s)
	if err != nil {
		return runFailed(err)
	}
	defer t.Close()
	o := s.opts
	if o.Progress != nil {
		fmt.Fprintf(errw, "loadgen: %s; setting up %d executions...\n", describeSetup(o, loc), o.Workload.Executions)
	}
	res, err := loadgen.Run(ctx, t, loc, o)
	if res == nil {
		return runFailed(err)
	}
	if dsn := freezeCatalog(s.cfg); dsn != "" {
		// The moves' freezes within the run, for the reports' timelines
		// (optional: a catalog that cannot be read only loses the marks).
		// The window includes the setup (its creates go through the same
		// store): a freeze then has a negative StartS.
		sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
		fz, ferr := readRunFreezes(context.WithoutCancel(ctx), dsn, res.Start.Add(-sec(res.SetupSeconds)), res.Start,
			res.Start.Add(sec(res.WarmupSeconds+res.MeasuredSeconds)))
		if ferr != nil {
			fmt.Fprintf(errw, "loadgen: no freeze marks in the report: %v\n", ferr)
		}
		res.Freezes = fz
	}
	files, werr := loadgen.WriteReports(s.out, res)
	if werr != nil {
		return runFailed(fmt.Errorf("write reports: %w", werr))
	}
	if err := loadgen.WriteText(out, res); err != nil {
		return err
	}
	fmt.Fprintln(out)
	printFiles(out, s.out, files)
	fmt.Fprintf(out, "HTML report: %s\n", filepath.Join(s.out, loadgen.HTMLFile))
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("interrupted: partial report in %s", s.out)
		}
		return runFailed(err)
	}
	if len(s.failIf) > 0 {
		var breached []string
		fmt.Fprintln(out, "\nthresholds:")
		for _, b := range loadgen.Check(res, s.failIf) {
			fmt.Fprintf(out, "  %s\n", b)
			if b.Breached {
				breached = append(breached, b.Threshold.Text)
			}
		}
		if len(breached) > 0 {
			return &ExitCodeError{Code: ExitThresholdBreached, Err: fmt.Errorf("threshold breached: %s", strings.Join(breached, ", "))}
		}
	}
	return nil
}

func describeSetup(o loadgen.Options, loc loadgen.Locator) string {
	load := fmt.Sprintf("closed loop, %d workers", o.Concurrency)
	if o.Model == loadgen.Open {
		load = fmt.Sprintf("open loop at %g ops/s", o.Rate)
	}
	return fmt.Sprintf("target %s (%d shards), %s, %s warm-up + %s", o.Target, len(loc.Shards()), load, o.Warmup, o.Duration)
}
