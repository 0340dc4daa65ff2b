package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is a verdict's overall result.
type Result string

// The results, and their exit codes (ExitCode).
const (
	// Pass: every invariant held, every scheduled fault kind landed often
	// enough, the history is complete and the run quiesced. Exit 0.
	Pass Result = "PASS"
	// Fail: at least one invariant was violated (or work was left pending
	// after a quiesce that claimed to have drained it). Exit 1.
	Fail Result = "FAIL"
	// Vacuous: no violation, but a scheduled fault kind did not land
	// MinLanded times, so the run proves nothing about it. Exit 2.
	Vacuous Result = "VACUOUS"
	// Error: the run or the check could not be completed: a truncated
	// history, a quiesce that ran out of time, a linearizability check
	// that could not decide, a map that disagrees. Exit 2.
	Error Result = "ERROR"
)

// Invariant names, in the order of the verdict table.
const (
	InvCAS          = "cas"
	InvLinearizable = "linearizability"
	InvOutbox       = "outbox"
	InvDedupe       = "dedupe"
	InvTimers       = "timers"
	InvSpawns       = "spawns"
	InvTrace        = "trace"
	InvPlacement    = "placement"
	// InvLiveness is not a safety invariant: work left pending after the
	// quiesce (outbox rows, spawn intents, due timers).
	InvLiveness = "liveness"
)

// Invariants lists the safety invariants in table order, with what each
// one checks.
var Invariants = []struct{ Name, Checks string }{
	{InvCAS, "versions 1..N, one committed writer each; ok commits present; info commits resolved; final row intact"},
	{InvLinearizable, "each execution's loads and commits linearizable as a CAS register (porcupine)"},
	{InvOutbox, "an event exists iff its commit committed; each applied to its target exactly once"},
	{InvDedupe, "processed_events rows == applied events; no event or input applied twice; loads see the ledger"},
	{InvTimers, "armed set == last committed state; stale sweeps never remove a re-armed timer; fires at most once per arming"},
	{InvSpawns, "spawn intents == the parents' committed children, exactly once"},
	{InvTrace, "rings hold the last min(trace_max, n) traced commits, contiguous idx"},
	{InvPlacement, "every row on the shard owning its bucket, once; seqs on their ordinal's stride; identities match"},
}

// Verdict is the outcome of Check. Its JSON form (WriteJSON) is stable:
// members are only ever added. See VERDICT.md.
type Verdict struct {
	Result Result `json:"result"`
	// Reasons say why Result is not PASS (one line each).
	Reasons  []string `json:"reasons,omitempty"`
	Run      string   `json:"run"`
	Scenario string   `json:"scenario,omitempty"`
	Target   string   `json:"target,omitempty"`
	Seed     int64    `json:"seed"`
	// Truncated: the history has no end line.
	Truncated bool `json:"truncated"`
	// Quiesced: the end line says the quiesce drained everything.
	Quiesced bool `json:"quiesced"`

	Ops        int `json:"ops"`
	Commits    int `json:"commits"`
	Executions int `json:"executions"`

	// Invariants is the verdict table: one row per safety invariant
	// (Invariants order) and the liveness row last.
	Invariants []InvariantResult `json:"invariants"`
	// Violations of the safety invariants, by invariant then execution.
	Violations []Violation `json:"violations"`
	// Liveness failures: pending work after the quiesce.
	Liveness []Violation `json:"liveness"`

	// Unknown outcomes (info commits) and how they were resolved.
	Unknown Unknowns `json:"unknown"`
	// Undecided partitions of the linearizability check (timeout or
	// budget exhausted); any makes the result ERROR unless it is FAIL.
	Undecided []string `json:"undecided,omitempty"`
	// UndecidedExecutions are the executions for which a check could not
	// run, or accepted something only because an unresolved commit might
	// explain it: checks that did not run are not counted as passed. More
	// than Bound makes the result VACUOUS unless it is worse.
	UndecidedExecutions UndecidedExecutions `json:"undecided_executions"`
	// Visualizations are porcupine's HTML files of failing partitions,
	// relative to the report directory (written by WriteReport).
	Visualizations []string `json:"visualizations,omitempty"`

	// Faults is the fault landing table, one row per kind scheduled or
	// injected.
	Faults    []FaultLanding `json:"faults"`
	MinLanded int            `json:"min_landed"`

	// Timeline is the per-second throughput, errors and unknown outcomes
	// and the fault windows, for the report.
	Timeline *Timeline `json:"timeline,omitempty"`

	CheckedAt time.Time `json:"checked_at"`
	// CheckMS is how long Check took.
	CheckMS int64 `json:"check_ms"`

	lin []linFailure // for WriteReport's visualizations
}

// InvariantResult is one row of the verdict table.
type InvariantResult struct {
	Name string `json:"name"`
	// Checked counts the items checked (versions, rows, ops, ...).
	Checked int `json:"checked"`
	// Violations counts the violations (before any cap in the text form).
	Violations int    `json:"violations"`
	Checks     string `json:"checks"`
}

// Unknowns counts the info commits of the history.
type Unknowns struct {
	Total      int `json:"total"`
	Present    int `json:"resolved_present"`
	Absent     int `json:"resolved_absent"`
	Unresolved int `json:"unresolved"`
	// UnresolvedOps lists the unresolved ones (at most 100).
	UnresolvedOps []OpRef `json:"unresolved_ops,omitempty"`
}

// UndecidedExecutions counts the executions some check could not decide
// because unresolved unknown outcomes left it ambiguous.
type UndecidedExecutions struct {
	// Count is the number of undecided executions.
	Count int `json:"count"`
	// Bound is the most the run may have and still PASS: 0.5 % of its
	// executions (rounded down), and at most 10.
	Bound int `json:"bound"`
	// ByCheck counts undecided executions per check skipped.
	ByCheck map[string]int `json:"by_check"`
	// List names them (at most 100), with the checks skipped and why.
	List []UndecidedExecution `json:"list,omitempty"`
}

// UndecidedExecution is one execution some check could not decide.
type UndecidedExecution struct {
	Execution string `json:"execution"`
	// Checks are the invariants not (fully) checked.
	Checks []string `json:"checks"`
	// Why says, per check, what made it undecidable.
	Why []string `json:"why"`
}

// Violation is one broken invariant, explained with the ops and rows
// involved.
type Violation struct {
	Invariant string `json:"invariant"`
	// Execution is the execution concerned, "" if none in particular.
	Execution string `json:"execution,omitempty"`
	// Summary is one line saying what is wrong.
	Summary string   `json:"summary"`
	Ops     []OpRef  `json:"ops,omitempty"`
	Rows    []RowRef `json:"rows,omitempty"`
}

// OpRef is an op of the history involved in a violation.
type OpRef struct {
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	Outcome string `json:"outcome"`
	Exe     string `json:"exe,omitempty"`
	// T0, T1 are the op's invoke and complete times (ns since the start).
	T0   int64 `json:"t0"`
	T1   int64 `json:"t1"`
	Line int   `json:"line"`
	// Resolved and Evidence are set for info commits.
	Resolved string `json:"resolved,omitempty"`
	Evidence string `json:"evidence,omitempty"`
	// Note says what the op has to do with the violation.
	Note string `json:"note,omitempty"`
}

// RowRef is a row of the final state involved in a violation.
type RowRef struct {
	Shard string `json:"shard"`
	Table string `json:"table"`
	// Key is the row's primary key, e.g. "id=…" or "seq=1025".
	Key  string `json:"key"`
	Note string `json:"note,omitempty"`
}

// FaultLanding is one row of the fault table.
type FaultLanding struct {
	Kind string `json:"kind"`
	// Scheduled counts the header's schedule entries of this kind.
	Scheduled int `json:"scheduled"`
	// Injected counts inject lines.
	Injected int `json:"injected"`
	// Evidence counts injections whose evidence shows they landed.
	Evidence int `json:"evidence"`
	// Corroborated counts injections that the ops also show (errors or
	// unknown outcomes on the shard within the window); -1 for kinds the
	// history cannot corroborate.
	Corroborated int `json:"corroborated"`
	// Landed counts injections that landed: Evidence, and Corroborated
	// for kinds that can be corroborated.
	Landed int `json:"landed"`
	// WriterLanded counts injections the writer itself called landed.
	WriterLanded int `json:"writer_landed"`
	// Vacuous: scheduled, but fewer than MinLanded landed.
	Vacuous bool `json:"vacuous"`
}

// ExitCode is the process exit code for the verdict: 0 PASS, 1 FAIL,
// 2 VACUOUS or ERROR.
func (v *Verdict) ExitCode() int {
	switch v.Result {
	case Pass:
		return 0
	case Fail:
		return 1
	}
	return 2
}

// WriteJSON writes the verdict as indented JSON.
func (v *Verdict) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// MaxExplained caps the violations explained per invariant in the text
// form ("and N more").
const MaxExplained = 10

// WriteText writes the verdict table, the fault table and each violation's
// explanation (at most MaxExplained per invariant).
func (v *Verdict) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "verdict: %s", v.Result)
	if v.Run != "" {
		fmt.Fprintf(ew, "  (run %s, seed %d", v.Run, v.Seed)
		if v.Scenario != "" {
			fmt.Fprintf(ew, ", scenario %s", v.Scenario)
		}
		if v.Target != "" {
			fmt.Fprintf(ew, ", target %s", v.Target)
		}
		fmt.Fprint(ew, ")")
	}
	fmt.Fprintln(ew)
	for _, r := range v.Reasons {
		fmt.Fprintf(ew, "  - %s\n", r)
	}
	fmt.Fprintf(ew, "%d ops, %d commits, %d executions; unknown outcomes: %d (%d present, %d absent, %d unresolved)\n\n",
		v.Ops, v.Commits, v.Executions, v.Unknown.Total, v.Unknown.Present, v.Unknown.Absent, v.Unknown.Unresolved)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "invariant\tchecked\tviolations\t")
	for _, r := range v.Invariants {
		fmt.Fprintf(tw, "%s\t%d\t%d\t\n", r.Name, r.Checked, r.Violations)
	}
	_ = tw.Flush()
	if len(v.Faults) > 0 {
		fmt.Fprintln(ew)
		tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "fault\tscheduled\tinjected\tevidence\tcorroborated\tlanded\t")
		for _, f := range v.Faults {
			corr := "-"
			if f.Corroborated >= 0 {
				corr = fmt.Sprint(f.Corroborated)
			}
			mark := ""
			if f.Vacuous {
				mark = fmt.Sprintf("  < %d: vacuous", v.MinLanded)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%s\n", f.Kind, f.Scheduled, f.Injected, f.Evidence, corr, f.Landed, mark)
		}
		_ = tw.Flush()
	}
	if u := v.UndecidedExecutions; u.Count > 0 {
		var parts []string
		for _, k := range sortedKeys(u.ByCheck) {
			parts = append(parts, fmt.Sprintf("%s %d", k, u.ByCheck[k]))
		}
		fmt.Fprintf(ew, "\nundecided executions: %d (bound %d; checks skipped: %s)\n", u.Count, u.Bound, strings.Join(parts, ", "))
		for i, x := range u.List {
			if i == MaxExplained {
				fmt.Fprintf(ew, "  and %d more\n", u.Count-i)
				break
			}
			fmt.Fprintf(ew, "  %s: %s\n", x.Execution, strings.Join(x.Why, "; "))
		}
	}
	writeViolations(ew, "violations", v.Violations)
	writeViolations(ew, "liveness failures", v.Liveness)
	if len(v.Undecided) > 0 {
		fmt.Fprintf(ew, "\nundecided linearizability partitions (%d): %s\n", len(v.Undecided), strings.Join(capList(v.Undecided, MaxExplained), ", "))
	}
	if n := len(v.Unknown.UnresolvedOps); n > 0 {
		fmt.Fprintf(ew, "\nunresolved unknown outcomes (%d):\n", v.Unknown.Unresolved)
		for i, o := range v.Unknown.UnresolvedOps {
			if i == MaxExplained {
				fmt.Fprintf(ew, "  and %d more\n", v.Unknown.Unresolved-i)
				break
			}
			fmt.Fprintf(ew, "  %s\n", o.text())
		}
	}
	return ew.err
}

func capList(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(append([]string{}, s[:n]...), fmt.Sprintf("and %d more", len(s)-n))
}

func writeViolations(w io.Writer, title string, vs []Violation) {
	if len(vs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s (%d):\n", title, len(vs))
	shown := map[string]int{}
	more := map[string]int{}
	var order []string
	for _, x := range vs {
		if _, seen := shown[x.Invariant]; !seen {
			order = append(order, x.Invariant)
		}
		if shown[x.Invariant] >= MaxExplained {
			more[x.Invariant]++
			shown[x.Invariant]++
			continue
		}
		shown[x.Invariant]++
		fmt.Fprintf(w, "[%s] %s\n", x.Invariant, x.Summary)
		for _, o := range x.Ops {
			fmt.Fprintf(w, "    op  %s\n", o.text())
		}
		for _, r := range x.Rows {
			fmt.Fprintf(w, "    row %s\n", r.text())
		}
	}
	for _, inv := range order {
		if n := more[inv]; n > 0 {
			fmt.Fprintf(w, "[%s] and %d more\n", inv, n)
		}
	}
}

func (o OpRef) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", o.ID, o.Kind, o.Outcome)
	if o.Resolved != "" {
		fmt.Fprintf(&b, " (resolved %s: %s)", o.Resolved, o.Evidence)
	}
	fmt.Fprintf(&b, " t=%s..%s line %d", fmtNS(o.T0), fmtNS(o.T1), o.Line)
	if o.Note != "" {
		fmt.Fprintf(&b, ": %s", o.Note)
	}
	return b.String()
}

func (r RowRef) text() string {
	s := fmt.Sprintf("%s[%s]", r.Table, r.Key)
	if r.Shard != "" {
		s = r.Shard + " " + s
	}
	if r.Note != "" {
		s += ": " + r.Note
	}
	return s
}

// fmtNS prints ns since the run's start as seconds with ms precision.
func fmtNS(ns int64) string {
	if ns == maxTime {
		return "∞"
	}
	return fmt.Sprintf("%.3fs", float64(ns)/1e9)
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
