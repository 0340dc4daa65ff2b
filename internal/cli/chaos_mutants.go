package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/chaos"
	"github.com/pgshard/pgshard/chaos/mutant"
)

// mutantRow is one line of the mutation table (mutants.json).
type mutantRow struct {
	Mutant      string   `json:"mutant"`
	Level       string   `json:"level"`
	Description string   `json:"description"`
	Result      string   `json:"result"` // caught, missed, passed (control), false-positive (control), error
	Verdict     string   `json:"verdict"`
	Violated    []string `json:"violated,omitempty"`
	Ops         int64    `json:"ops"`
	Seconds     float64  `json:"seconds"`
	Dir         string   `json:"dir"`
}

func mutantKind(k string) mutant.Kind { return mutant.Kind(k) }

func newChaosMutantsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mutants",
		Short: "Run the scenario against every deliberately broken store variant: the verifier must catch each one",
		Long: `Prove the checker's power: run the scenario once with the production store
(the control, which must pass: no false positives), then once per mutant — a
store, client or configuration with one deliberate bug (outbox written
outside the commit transaction, CAS without its version predicate, dedupe
outside the transaction, timer delete without the fire_at match, a cancel
that does not delete, a relay that acks before delivering, a client that
retries an unknown commit with a new event id, the trace ring trimmed off by
one, rows placed on the wrong shard, synchronous_commit=off with shard
crashes; and the resharding mutants: a mover that flips without its last
catch-up, one that flips without freezing, one that deletes the source's
rows before the flip, shards that do not fence, a client that takes a fence
refusal for success; and a proxy whose catalog lease outlives the one the
run records, so that it ignores a lapsed lease through catalog cuts) — and
verify each run.

The resharding mutants need move faults: without --only, a scenario
without them (configs/chaos/mutants.yaml) skips them; run them with
--scenario configs/chaos/mutants-reshard.yaml --only reshard ("reshard"
names the group; the control runs against the same scenario). The lease
mutants need catalog-cut faults on a target with the proxy, resp. the
router: --scenario configs/chaos/mutants-lease.yaml --only
proxy-ignores-lease,router-ignores-lease. A mutant is caught when the verifier finds
violations. Mutants are reachable only from here: nothing in the store,
router, proxy or any config selects them.

Prints the mutation table and writes mutants.json to --out.
Exit codes: 0 the control passed and every mutant was caught; 1 a mutant was
missed or the control failed; 2 a run could not be done.`,
		Example: `  pgshard chaos mutants --config .pgshard-chaos/pgshard.yaml --scenario configs/chaos/mutants.yaml
  pgshard chaos mutants --only cas-without-version,outbox-outside-tx --duration 10s
  pgshard chaos mutants --config .pgshard-chaos/pgshard.yaml --scenario configs/chaos/mutants-reshard.yaml --only reshard`,
		Args: cobra.NoArgs,
	}
	f := addChaosFlags(cmd)
	var only []string
	var noControl bool
	cmd.Flags().StringSliceVar(&only, "only", nil, "run only these mutants (comma-separated kinds, or \"reshard\": every resharding mutant)")
	cmd.Flags().BoolVar(&noControl, "no-control", false, "skip the control run with the production store")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		s, err := resolveChaos(cmd, f)
		if err != nil {
			return err
		}
		if !cmd.Flags().Changed("duration") && s.sc.MutantDuration > 0 {
			s.sc.Duration = s.sc.MutantDuration
		}
		for _, k := range only {
			if k == mutant.ReshardGroup {
				continue
			}
			if _, err := mutant.Lookup(mutant.Kind(k)); err != nil {
				return usageError{fmt.Errorf("%w (or the group %q)", err, mutant.ReshardGroup)}
			}
		}
		list, skipped := selectMutants(mutant.All(), only, s.sc)
		out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
		for _, mu := range skipped {
			how := fmt.Sprintf("the resharding mutants run with --scenario configs/chaos/mutants-reshard.yaml --only %s", mutant.ReshardGroup)
			if !mu.InGroup(mutant.ReshardGroup) {
				how = fmt.Sprintf("it runs with --scenario configs/chaos/mutants-lease.yaml --only %s", mu.Kind)
			}
			fmt.Fprintf(errw, "chaos mutants: %s skipped: scenario %s has no %s faults (%s)\n",
				mu.Kind, s.sc.Name, strings.Join(mu.NeedsFaults, "/"), how)
		}
		var rows []mutantRow
		run := func(k, level, desc string) error {
			name := k
			if name == "" {
				name = "control"
			}
			dir := filepath.Join(s.out, name)
			t0 := time.Now()
			res, v, err := s.runAndVerify(cmd, f, k, nil, dir, false)
			row := mutantRow{Mutant: name, Level: level, Description: desc, Dir: dir, Seconds: time.Since(t0).Seconds()}
			if res != nil {
				row.Ops = res.Ops
			}
			switch {
			case err != nil:
				row.Result, row.Verdict = "error", err.Error()
			case k == "":
				row.Result, row.Verdict, row.Violated = "false-positive", v.status, v.violated
				if v.code == 0 {
					row.Result = "passed"
				}
			default:
				row.Result, row.Verdict, row.Violated = "missed", v.status, v.violated
				if v.code == ExitViolations {
					row.Result = "caught"
				}
			}
			rows = append(rows, row)
			fmt.Fprintf(errw, "chaos mutants: %s: %s (%s)\n", name, row.Result, row.Verdict)
			return cmd.Context().Err()
		}
		if !noControl {
			if err := run("", "-", "the production store (must pass)"); err != nil {
				return err
			}
		}
		for _, mu := range list {
			if err := run(string(mu.Kind), string(mu.Level), mu.Description); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(s.out, 0o755); err != nil {
			return err
		}
		if err := writeJSONFile(filepath.Join(s.out, "mutants.json"), rows); err != nil {
			return err
		}
		caught, total, bad := writeMutantTable(out, rows)
		fmt.Fprintf(out, "\ncaught %d of %d mutants (%.0f%%); results in %s\n", caught, total, 100*float64(caught)/float64(max(total, 1)), s.out)
		if bad > 0 {
			for _, r := range rows {
				if r.Result == "error" {
					return &ExitCodeError{Code: ExitVacuous, Err: fmt.Errorf("mutant run %s could not be done: %s", r.Mutant, r.Verdict)}
				}
			}
			return &ExitCodeError{Code: ExitViolations, Err: fmt.Errorf("%d of %d runs did not give the expected verdict", bad, len(rows))}
		}
		return nil
	}
	return cmd
}

// selectMutants returns the mutants to run: those only names (kinds, or
// the group mutant.ReshardGroup), or with only empty every mutant whose
// needed faults the scenario plans — a resharding mutant needs the move
// faults, which the default mutant scenario has not, so a run of every
// mutant leaves those out (skipped) rather than miss them.
func selectMutants(all []mutant.Mutant, only []string, sc *chaos.Scenario) (list, skipped []mutant.Mutant) {
	kinds := map[string]bool{}
	for _, f := range sc.Faults {
		kinds[string(f.Kind)] = true
	}
	for _, mu := range all {
		switch {
		case len(only) > 0:
			if slices.Contains(only, string(mu.Kind)) || slices.ContainsFunc(only, mu.InGroup) {
				list = append(list, mu)
			}
		case mu.InGroup(mutant.ReshardGroup) && !kinds["move"],
			slices.Contains(mu.NeedsFaults, "catalog-cut") && !kinds["catalog-cut"]:
			skipped = append(skipped, mu)
		default:
			list = append(list, mu)
		}
	}
	return list, skipped
}

// writeMutantTable prints the mutation table and counts: mutants caught,
// mutants run, and rows that did not give the expected verdict.
func writeMutantTable(w io.Writer, rows []mutantRow) (caught, total, bad int) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MUTANT\tLEVEL\tRESULT\tVERDICT\tVIOLATED INVARIANTS\tOPS\tTIME")
	for _, r := range rows {
		v := strings.Join(r.Violated, ",")
		if v == "" {
			v = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%.0fs\n", r.Mutant, r.Level, strings.ToUpper(r.Result), r.Verdict, v, r.Ops, r.Seconds)
		if r.Mutant != "control" {
			total++
			if r.Result == "caught" {
				caught++
			}
		}
		if r.Result != "caught" && r.Result != "passed" {
			bad++
		}
	}
	_ = tw.Flush()
	return caught, total, bad
}
