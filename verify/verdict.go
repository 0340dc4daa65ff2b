package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
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
	// Vacuous: no violation, but the run proves too little: a scheduled
	// fault kind did not land often enough, a configured kind was never
	// scheduled, too few acknowledged commits, the run was interrupted.
	// Exit 2.
	Vacuous Result = "VACUOUS"
	// Error: the run or the check could not be completed: the run itself
	// failed, a truncated history, a quiesce that ran out of time, a
	// linearizability check that could not decide, a map that disagrees.
	// Exit 2.
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
	InvLease        = "lease"
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
	{InvLease, "no keyed op through a client cut off from the catalog succeeds once its lease must have lapsed, before the heal"},
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

	// Interrupted: the end line says the run was cut short.
	Interrupted bool `json:"interrupted"`
	// RunError is the error the run itself ended with (Options.RunError).
	RunError string `json:"run_error,omitempty"`

	Ops     int `json:"ops"`
	Commits int `json:"commits"`
	// Acked counts the acknowledged (ok) commits; MinCommits is the floor
	// they were held to (0: none).
	Acked      int   `json:"acked_commits"`
	MinCommits int64 `json:"min_commits,omitempty"`
	Executions int   `json:"executions"`

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
	// MinLandedShare is the share of its injections each scheduled kind
	// had to land (besides MinLanded).
	MinLandedShare float64 `json:"min_landed_share"`

	// Recovery is the availability under faults: the fault-free ok-op
	// rate and, per fault, how long after its heal the rate was back.
	Recovery *Recovery `json:"recovery,omitempty"`

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
	// Vacuous: scheduled, but fewer than MinLanded landed, or fewer than
	// MinLandedShare of the injections, or configured and never
	// scheduled.
	Vacuous bool `json:"vacuous"`
	// Why says why the kind is vacuous ("" if it is not).
	Why string `json:"why,omitempty"`
}

// decideInputs are what decide needs besides the verdict's own members.
type decideInputs struct {
	// reasons found before the checks (a map that disagrees): ERROR.
	reasons []string
	// drained: the end line says the quiesce drained everything.
	drained bool
	// tooLarge counts partitions left undecided for their size.
	tooLarge int
	// vacuous are further reasons that make an otherwise passing run
	// VACUOUS (a check that could not run must not count as passed).
	vacuous []string
}

// decide sets Result and Reasons from everything the verdict holds. It is
// the only place a result is decided: the text, the JSON, verdict.json,
// the report and the exit code are all read from its outcome. Order of
// seriousness: ERROR for a map that disagrees or a truncated history;
// FAIL for violations (even if the run errored: a violation is real);
// ERROR for a run that failed, an undecided check or an unfinished
// quiesce; VACUOUS for a run that proves too little; else PASS. Every
// reason that applies is listed, not only the deciding one.
func (v *Verdict) decide(h *History, o Options, in decideInputs) {
	var errs, vac []string
	errs = append(errs, in.reasons...)
	fail := false
	var failWhy []string
	if h.Truncated() {
		errs = append(errs, "the history is truncated (no end line): the run did not finish; violations may involve ops it never recorded")
	}
	if n := len(v.Violations); n > 0 {
		fail = true
		var names []string
		for _, r := range v.Invariants {
			if r.Violations > 0 && r.Name != InvLiveness {
				names = append(names, fmt.Sprintf("%s %d", r.Name, r.Violations))
			}
		}
		failWhy = append(failWhy, fmt.Sprintf("%d violations (%s)", n, strings.Join(names, ", ")))
	}
	if len(v.Liveness) > 0 && in.drained {
		fail = true
		failWhy = append(failWhy, fmt.Sprintf("%d liveness failures although the quiesce reported everything drained", len(v.Liveness)))
	}
	var late []string // ERROR, but below FAIL
	if v.RunError != "" {
		late = append(late, "the run itself failed: "+v.RunError)
	}
	if len(v.Undecided) > 0 {
		r := fmt.Sprintf("linearizability undecided for %d executions (timeout): not a pass", len(v.Undecided)-in.tooLarge)
		if in.tooLarge > 0 {
			r = fmt.Sprintf("linearizability undecided for %d executions (%d timed out, %d with more than %d ops, porcupine's bound: spread the workload's keys): not a pass",
				len(v.Undecided), len(v.Undecided)-in.tooLarge, in.tooLarge, o.MaxPartitionOps)
		}
		late = append(late, r)
	}
	if len(v.Liveness) > 0 && !in.drained {
		late = append(late, fmt.Sprintf("the quiesce did not finish (%d liveness failures): delivery, firing and acking are not proven", len(v.Liveness)))
	}
	if v.Interrupted {
		vac = append(vac, "the run was interrupted (end.interrupted): it did not run its course")
	}
	if o.MinCommits > 0 && int64(v.Acked) < o.MinCommits {
		vac = append(vac, fmt.Sprintf("only %d acknowledged commits; the scenario asks for at least %d", v.Acked, o.MinCommits))
	}
	if len(o.ExpectKinds) > 0 && len(h.Header.Schedule) == 0 {
		vac = append(vac, fmt.Sprintf("the fault schedule is empty although %d fault kinds are configured (%s)", len(o.ExpectKinds), strings.Join(o.ExpectKinds, ", ")))
	}
	for _, f := range v.Faults {
		if f.Vacuous {
			vac = append(vac, fmt.Sprintf("fault %s: %s: vacuous", f.Kind, f.Why))
		}
	}
	vac = append(vac, in.vacuous...)
	switch {
	case len(errs) > 0:
		v.Result = Error
	case fail:
		v.Result = Fail
	case len(late) > 0:
		v.Result = Error
	case len(vac) > 0:
		v.Result = Vacuous
	default:
		v.Result = Pass
	}
	reasons := append(append(append(errs, failWhy...), late...), vac...)
	v.Reasons = reasons
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
	fmt.Fprintf(ew, "%d ops, %d commits (%d acknowledged), %d executions; unknown outcomes: %d (%d present, %d absent, %d unresolved)\n\n",
		v.Ops, v.Commits, v.Acked, v.Executions, v.Unknown.Total, v.Unknown.Present, v.Unknown.Absent, v.Unknown.Unresolved)
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
				mark = "  vacuous: " + f.Why
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%s\n", f.Kind, f.Scheduled, f.Injected, f.Evidence, corr, f.Landed, mark)
		}
		_ = tw.Flush()
	}
	v.writeRecovery(ew)
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

// writeRecovery writes the availability under faults: the baseline and,
// per kind, the recovery times after the heal.
func (v *Verdict) writeRecovery(w io.Writer) {
	rc := v.Recovery
	if rc == nil || (len(rc.Faults) == 0 && rc.Note == "") {
		return
	}
	fmt.Fprintf(w, "\navailability under faults: time from heal until the ok-op rate is back at >= %.0f%% of the fault-free rate\n", 100*rc.Share)
	if rc.Note != "" {
		fmt.Fprintf(w, "  not measured: %s\n", rc.Note)
		return
	}
	fmt.Fprintf(w, "  fault-free rate: %.0f ok ops/s, %s", rc.BaselineOKPerS, rc.BaselineFrom)
	shards := make([]string, 0, len(rc.BaselineShards))
	for s := range rc.BaselineShards {
		shards = append(shards, s)
	}
	sort.Strings(shards)
	for i, s := range shards {
		if i == 0 {
			fmt.Fprint(w, "; per shard:")
		}
		fmt.Fprintf(w, " %s %.0f", s, rc.BaselineShards[s])
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault\tfaults\tmeasured\tp50\tmax\tnot recovered\toverlapped\ttoo late\t")
	for _, k := range rc.Kinds {
		p50, mx := "-", "-"
		if k.Measured > 0 {
			p50, mx = fmtMS(k.P50MS), fmtMS(k.MaxMS)
		}
		if k.NotRecovered > 0 {
			mx = "not recovered"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%d\t%d\t\n", k.Kind, k.Faults, k.Measured, p50, mx, k.NotRecovered, k.Overlapped, k.Unmeasurable)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "  (the rate must stay back for 2 s; p50 and max leave out faults overlapped by another on the same shard, and those healed less than 2 s before the load ended: too late)")
	for _, f := range rc.Faults {
		if !f.Recovered && f.Overlapped == "" && !f.Unmeasurable {
			fmt.Fprintf(w, "  %s %s %s healed at %s: not recovered within the run\n", f.ID, f.Kind, f.Shard, fmtNS(f.HealNS))
		}
	}
}
