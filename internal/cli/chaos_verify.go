package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pgshard/pgshard/chaos"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/verify"
)

// verdictOutcome is a verified run, as the chaos commands report it.
type verdictOutcome struct {
	code     int      // exit code: 0 pass, 1 violations, 2 vacuous or error
	status   string   // PASS, FAIL, VACUOUS, ERROR
	violated []string // invariants with violations
	summary  string   // why not PASS, one line
	v        *verify.Verdict
}

func (o *verdictOutcome) exitError() error {
	if o.code == 0 {
		return nil
	}
	return &ExitCodeError{Code: o.code, Err: fmt.Errorf("verdict %s: %s", o.status, o.summary)}
}

// verifyRun checks a chaos run's history against the shards of m, writes
// verdict.json and report.html and prints the verdict (text or JSON).
// Everything that decides the result — the scenario's floors (min_landed,
// min_commits, the fault kinds it configures) and the run's own error
// (runErr) — goes into verify.Check, so the printed verdict, the files and
// the exit code all come from one final Verdict.
func verifyRun(ctx context.Context, cmd *cobra.Command, m *shardmap.Map, history, out string, sc *chaos.Scenario, runErr error, asJSON bool) (*verdictOutcome, error) {
	v, err := checkRun(ctx, func() (*shardmap.Map, error) { return m, nil }, history, "", out, scenarioOptions(sc, runErr))
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", history, err)
	}
	w := cmd.OutOrStdout()
	if asJSON {
		err = v.WriteJSON(w)
	} else {
		err = v.WriteText(w)
		fmt.Fprintf(w, "\nreport: %s\n", filepath.Join(out, verify.ReportFile))
	}
	if err != nil {
		return nil, err
	}
	return outcomeOf(v), nil
}

// scenarioOptions are the verify options a scenario asks for: its vacuity
// floors and the fault kinds it configures; runErr is the run's own error
// (nil: none).
func scenarioOptions(sc *chaos.Scenario, runErr error) verify.Options {
	// min_landed 0 (set explicitly: the default is 1) is a measurement
	// run's: a kind that did not land is reported, not vacuous.
	o := verify.Options{MinLanded: sc.MinLanded, MinCommits: sc.MinCommits}
	if sc.MinLanded == 0 {
		o.MinLanded = -1 // verify's zero is its default, 1; negative is none
	}
	seen := map[string]bool{}
	for _, f := range sc.Faults {
		if k := string(f.Kind); !seen[k] {
			seen[k] = true
			o.ExpectKinds = append(o.ExpectKinds, k)
		}
		if n := sc.MinLandedOf(f.Kind); n > sc.MinLanded {
			if o.MinLandedKind == nil {
				o.MinLandedKind = map[string]int{}
			}
			o.MinLandedKind[string(f.Kind)] = n
		}
	}
	if runErr != nil {
		o.RunError = runErr.Error()
	}
	return o
}

// outcomeOf reads a final verdict: nothing here may change its result.
func outcomeOf(v *verify.Verdict) *verdictOutcome {
	o := &verdictOutcome{code: v.ExitCode(), status: string(v.Result), summary: strings.Join(v.Reasons, "; "), v: v}
	for _, r := range v.Invariants {
		if r.Violations > 0 {
			o.violated = append(o.violated, r.Name)
		}
	}
	return o
}

// isTerminal reports whether w is a terminal (progress is redrawn in
// place there, printed every few seconds elsewhere).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// replay runs DIR's scenario, seed and fault schedule again and compares
// the verdicts.
func replay(cmd *cobra.Command, f *chaosFlags, dir string) error {
	var rec chaos.RunRecord
	if err := readJSONFile(filepath.Join(dir, chaos.RunFile), &rec); err != nil {
		return &ExitCodeError{Code: ExitVacuous, Err: fmt.Errorf("replay %s: %w (is it the output directory of a chaos run?)", dir, err)}
	}
	var faults chaos.FaultsRecord
	if err := readJSONFile(filepath.Join(dir, chaos.FaultsFile), &faults); err != nil {
		return &ExitCodeError{Code: ExitVacuous, Err: fmt.Errorf("replay %s: %w", dir, err)}
	}
	var was verify.Verdict
	if err := readJSONFile(filepath.Join(dir, verify.VerdictFile), &was); err != nil {
		return &ExitCodeError{Code: ExitVacuous, Err: fmt.Errorf("replay %s: %w (the run was never verified)", dir, err)}
	}
	s, err := resolveChaos(cmd, f)
	if err != nil {
		return err
	}
	sc := rec.Scenario
	s.sc = &sc
	if f.compress == "" {
		f.compress = rec.Compress
	}
	out := f.out
	if out == "" {
		for i := 1; ; i++ {
			out = filepath.Join(dir, fmt.Sprintf("replay-%d", i))
			if _, err := os.Stat(out); os.IsNotExist(err) {
				break
			}
		}
	}
	plan := faults.Plan
	if plan == nil {
		plan = []chaos.Planned{}
	}
	_, v, err := s.runAndVerify(cmd, f, rec.Mutant, plan, out, false)
	if err != nil {
		return err
	}
	old := outcomeOf(&was)
	w := cmd.OutOrStdout()
	same := old.status == v.status && slices.Equal(old.violated, v.violated)
	fmt.Fprintf(w, "\nreplay of %s (seed %d, %d faults scheduled):\n  recorded: %s %s\n  replayed: %s %s\n",
		dir, sc.Seed, len(plan), old.status, list(old.violated), v.status, list(v.violated))
	if !same {
		return &ExitCodeError{Code: ExitViolations, Err: fmt.Errorf("the verdict did not reproduce (recorded %s, replayed %s)", old.status, v.status)}
	}
	fmt.Fprintln(w, "  the verdict reproduced")
	return nil
}

func list(s []string) string {
	if len(s) == 0 {
		return "(no violations)"
	}
	return "(" + strings.Join(s, ", ") + ")"
}

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
