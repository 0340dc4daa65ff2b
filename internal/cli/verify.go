package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/chaos"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/verify"
)

// verifyExitError is the exit code of `verify` when it cannot reach a
// verdict (a bad history, a shard that is down): like a vacuous run, it
// proves nothing.
const verifyExitError = 2

// StateFile is the name of the dumped final state `verify` writes next to
// its report, so a verdict can be re-checked without the database
// (`pgshard verify --state`).
const StateFile = "state.json.gz"

func newVerifyCmd() *cobra.Command {
	var historyPath, outDir, statePath string
	var asJSON bool
	var minLanded int
	var minCommits int64
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check a chaos run's history against the final state of every shard",
		Long: `Check a chaos run: read its history (history.jsonl, .jsonl.gz or .jsonl.zst)
and the final contents of every shard of the config's map (over each shard's
direct DSN, read-only), and decide whether the store's invariants held — CAS
versions and linearizability, outbox, dedupe, timers, spawns, trace ring,
placement — and whether every scheduled fault kind really landed.

Prints the verdict table (or JSON with --json) and writes verdict.json,
report.html (with porcupine's visualization of any execution that is not
linearizable) and the dumped state (` + StateFile + `) to --out (default: the
history's directory). --state checks against a saved state instead of the
database.

When the history's directory holds the run record of a chaos run
(run.json), its scenario's floors apply as in ` + "`pgshard chaos run`" + ` —
min_landed, min_commits and the fault kinds it configures — so both
commands reach the same verdict; --min-landed and --min-commits override
them.

Exit status: 0 PASS, 1 FAIL (violations), 2 VACUOUS (a scheduled fault kind
landed fewer than --min-landed times or on too few of its injections, a
configured kind never scheduled, fewer than --min-commits acknowledged
commits, an interrupted run) or ERROR (truncated history, quiesce not
finished, undecided check, unreadable input or shard). The exit status,
the printed verdict, verdict.json and report.html always agree.`,
		Args: cobra.NoArgs,
	}
	cfgPath := addConfigFlag(cmd)
	cmd.Flags().StringVar(&historyPath, "history", "", "the run's history file (required)")
	cmd.Flags().StringVar(&outDir, "out", "", "directory for verdict.json, report.html and the state (default: the history's directory)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the verdict as JSON")
	cmd.Flags().IntVar(&minLanded, "min-landed", 1, "landings each scheduled fault kind needs, counted from evidence, for the run not to be vacuous")
	cmd.Flags().Int64Var(&minCommits, "min-commits", 0, "acknowledged commits the run needs for it not to be vacuous (0: no floor)")
	cmd.Flags().StringVar(&statePath, "state", "", "check against this saved state (state.json[.gz]) instead of dumping the shards")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if historyPath == "" {
			return usagef("--history is required")
		}
		if minLanded < 1 {
			return usagef("--min-landed must be at least 1")
		}
		fail := func(err error) error { return &ExitCodeError{Code: verifyExitError, Err: err} }
		if outDir == "" {
			outDir = filepath.Dir(historyPath)
		}
		shards := func() (*shardmap.Map, error) {
			_, m, err := loadMap(cmd, *cfgPath)
			return m, err
		}
		if minCommits < 0 {
			return usagef("--min-commits must not be negative")
		}
		opts := verify.Options{MinLanded: minLanded}
		var rec chaos.RunRecord
		if err := readJSONFile(filepath.Join(filepath.Dir(historyPath), chaos.RunFile), &rec); err == nil {
			opts = scenarioOptions(&rec.Scenario, nil)
			fmt.Fprintf(cmd.ErrOrStderr(), "verify: the floors of scenario %s (from %s)\n", rec.Scenario.Name, chaos.RunFile)
		}
		if cmd.Flags().Changed("min-landed") {
			opts.MinLanded = minLanded
		}
		if cmd.Flags().Changed("min-commits") {
			opts.MinCommits = minCommits
		}
		v, err := checkRun(cmd.Context(), shards, historyPath, statePath, outDir, opts)
		if err != nil {
			return fail(err)
		}
		out := cmd.OutOrStdout()
		if asJSON {
			err = v.WriteJSON(out)
		} else {
			err = v.WriteText(out)
			fmt.Fprintf(out, "\nreport: %s\n", filepath.Join(outDir, verify.ReportFile))
		}
		if err != nil {
			return fail(err)
		}
		if code := v.ExitCode(); code != 0 {
			return &ExitCodeError{Code: code, Err: fmt.Errorf("verdict %s: %s", v.Result, strings.Join(v.Reasons, "; "))}
		}
		return nil
	}
	return cmd
}

// checkRun verifies a run: the history at historyPath against the saved
// state at statePath, or (statePath "") the shards of the map shards
// returns (asked for only then), dumped and saved next to the report in
// outDir. The history is read first: a bad one is reported as such.
func checkRun(ctx context.Context, shards func() (*shardmap.Map, error), historyPath, statePath, outDir string, o verify.Options) (*verify.Verdict, error) {
	h, err := verify.OpenHistory(historyPath)
	if err != nil {
		return nil, err
	}
	var st *verify.State
	if statePath != "" {
		if st, err = verify.ReadStateFile(statePath); err != nil {
			return nil, err
		}
	} else {
		m, err := shards()
		if err != nil {
			return nil, err
		}
		if st, err = verify.Dump(ctx, m, verify.DumpOptions{}); err != nil {
			return nil, err
		}
	}
	v := verify.Check(ctx, h, st, o)
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	if err := verify.WriteReport(outDir, v); err != nil {
		return nil, err
	}
	if statePath == "" {
		if err := verify.WriteStateFile(filepath.Join(outDir, StateFile), st); err != nil {
			return nil, err
		}
	}
	return v, nil
}
