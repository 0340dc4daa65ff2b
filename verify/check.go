package verify

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"time"
)

// Options tune Check. The zero value is usable.
type Options struct {
	// MinLanded is how many times each scheduled fault kind must have
	// landed (counted from evidence) for the run not to be vacuous
	// (0: the default, 1; negative: no floor, for a measurement run whose
	// kinds that did not land are reported, not vacuous).
	MinLanded int
	// MinLandedKind raises the floor of single kinds above MinLanded
	// (a scenario's per-fault min_landed, e.g. 20 completed moves).
	MinLandedKind map[string]int
	// PartitionTimeout bounds porcupine on one execution (default 10 s);
	// a partition it cannot decide in time is undecided, never a pass.
	PartitionTimeout time.Duration
	// LinearizabilityBudget bounds the whole linearizability check
	// (default 2 min); partitions not checked when it runs out are
	// undecided.
	LinearizabilityBudget time.Duration
	// Parallel is how many partitions are checked at once (default
	// GOMAXPROCS).
	Parallel int
	// TimerSlack: an armed timer due more than this before the run's end
	// must have fired (default 2 s: a sweeper polls at least that often).
	TimerSlack time.Duration
	// MaxPartitionOps bounds the ops of one execution porcupine is given
	// (default 20000): a larger partition is undecided at once (ERROR),
	// instead of exhausting time or memory. Spread the workload's keys.
	MaxPartitionOps int

	// MinCommits: fewer acknowledged (ok) commits than this make the run
	// VACUOUS (0: no floor). The scenario's min_commits.
	MinCommits int64
	// MinLandedShare: each scheduled fault kind must also have landed at
	// least this share of its injections (0: no share), so a floor met by
	// a few landings of many does not pass.
	MinLandedShare float64
	// ExpectKinds are the fault kinds the run was configured to inject
	// (the scenario's): a kind with no schedule entry makes the run
	// VACUOUS, and so does an empty schedule when any is configured.
	ExpectKinds []string
	// RunError is the error the run itself ended with ("" none): the
	// verdict is ERROR (FAIL if violations were found anyway).
	RunError string
}

func (o *Options) defaults() {
	if o.MinLanded == 0 {
		o.MinLanded = 1
	}
	if o.PartitionTimeout <= 0 {
		o.PartitionTimeout = 10 * time.Second
	}
	if o.LinearizabilityBudget <= 0 {
		o.LinearizabilityBudget = 2 * time.Minute
	}
	if o.Parallel <= 0 {
		o.Parallel = runtime.GOMAXPROCS(0)
	}
	if o.TimerSlack <= 0 {
		o.TimerSlack = 2 * time.Second
	}
	if o.MaxPartitionOps <= 0 {
		o.MaxPartitionOps = 20000
	}
}

// checker collects the violations and item counts of one Check.
type checker struct {
	w       *world
	o       Options
	v       *Verdict
	checked map[string]int
	viol    map[string][]Violation
	// tooLarge counts partitions left undecided for their size.
	tooLarge int
	// undecided: execution → check → why the check could not decide it
	// (see skip).
	undecided map[string]map[string]string
}

// skip records that check could not decide execution exeID (an
// ambiguity left by unresolved unknown outcomes): the check did not pass
// there, it did not run.
func (ck *checker) skip(exeID, check, why string) {
	m := ck.undecided[exeID]
	if m == nil {
		m = map[string]string{}
		ck.undecided[exeID] = m
	}
	if _, ok := m[check]; !ok {
		m[check] = why
	}
}

// maxUndecided is the bound on undecided executions of a run that can
// PASS: 0.5 % of its executions, and never more than 10.
func maxUndecided(executions int) int { return min(10, executions/200) }

func (ck *checker) undecidedExecutions(executions int) UndecidedExecutions {
	u := UndecidedExecutions{Bound: maxUndecided(executions), ByCheck: map[string]int{}}
	for _, id := range sortedKeys(ck.undecided) {
		m := ck.undecided[id]
		u.Count++
		x := UndecidedExecution{Execution: id}
		for _, c := range sortedKeys(m) {
			u.ByCheck[c]++
			x.Checks = append(x.Checks, c)
			x.Why = append(x.Why, c+": "+m[c])
		}
		if len(u.List) < 100 {
			u.List = append(u.List, x)
		}
	}
	return u
}

func (ck *checker) add(inv, exeID, summary string, ops []OpRef, rows []RowRef) {
	ck.viol[inv] = append(ck.viol[inv], Violation{Invariant: inv, Execution: exeID, Summary: summary, Ops: ops, Rows: rows})
}

func (ck *checker) count(inv string, n int) { ck.checked[inv] += n }

// drained reports whether the run's end line says the quiesce drained
// everything (outbox, spawns, due timers): only then is pending work a
// liveness failure rather than expected.
func (ck *checker) drained() bool {
	e := ck.w.h.End
	return e != nil && e.Quiesce != nil && e.Quiesce.OK
}

// Check checks every invariant of ARCHITECTURE.md §5 over a history and the
// final state of every shard, counts the landed faults and returns the
// verdict. It needs no database. ctx bounds the linearizability check
// (its end leaves partitions undecided, which is an ERROR result).
func Check(ctx context.Context, h *History, s *State, o Options) *Verdict {
	start := time.Now()
	o.defaults()
	v := &Verdict{
		Run: h.Header.Run, Scenario: h.Header.Scenario, Target: h.Header.Target, Seed: h.Header.Seed,
		Truncated: h.Truncated(), Ops: len(h.Ops), MinLanded: max(o.MinLanded, 0), CheckedAt: start.UTC(),
		MinLandedShare: max(o.MinLandedShare, 0), MinCommits: o.MinCommits, RunError: o.RunError,
	}
	if h.End != nil {
		v.Interrupted = h.End.Interrupted
	}
	if h.End != nil && h.End.Quiesce != nil {
		v.Quiesced = h.End.Quiesce.OK
	}
	var reasons []string
	if len(h.Header.Map.Shards) > 0 {
		if d := mapDiff(h.Header.Map, s.Map); d != "" {
			reasons = append(reasons, "the history's shard map is not the dumped one: "+d)
		}
	}
	w := newWorld(h, s)
	ck := &checker{w: w, o: o, v: v, checked: map[string]int{}, viol: map[string][]Violation{}, undecided: map[string]map[string]string{}}
	bad := w.resolve()
	ck.cas(bad)
	ck.linearizability(ctx)
	ck.outbox()
	ck.dedupe()
	ck.timers()
	ck.spawns()
	ck.trace()
	ck.placement()
	ck.fence()
	ck.lease()

	v.Commits = len(w.commits)
	for _, c := range w.commits {
		if c.Outcome == OutcomeOK {
			v.Acked++
		}
	}
	for _, e := range w.exes {
		if len(e.commits) > 0 || len(e.rows) > 0 {
			v.Executions++
		}
	}
	for _, id := range w.exeOrder {
		for _, c := range w.exes[id].commits {
			if c.Outcome != OutcomeInfo {
				continue
			}
			v.Unknown.Total++
			switch c.st {
			case present:
				v.Unknown.Present++
			case absent:
				v.Unknown.Absent++
			default:
				v.Unknown.Unresolved++
				if len(v.Unknown.UnresolvedOps) < 100 {
					v.Unknown.UnresolvedOps = append(v.Unknown.UnresolvedOps, c.ref(""))
				}
			}
		}
	}
	for _, inv := range Invariants {
		vs := ck.viol[inv.Name]
		sortViolations(vs)
		v.Violations = append(v.Violations, vs...)
		v.Invariants = append(v.Invariants, InvariantResult{Name: inv.Name, Checked: ck.checked[inv.Name], Violations: len(vs), Checks: inv.Checks})
	}
	if v.Violations == nil {
		v.Violations = []Violation{}
	}
	v.Liveness = ck.viol[InvLiveness]
	sortViolations(v.Liveness)
	if v.Liveness == nil {
		v.Liveness = []Violation{}
	}
	v.Invariants = append(v.Invariants, InvariantResult{Name: InvLiveness, Checked: ck.checked[InvLiveness], Violations: len(v.Liveness),
		Checks: "nothing pending after the quiesce: outbox rows, spawn intents, due timers"})
	var landed map[string]bool
	v.Faults, landed = landings(w, o)
	v.Timeline = timeline(w, landed)
	v.Recovery = recovery(w)
	v.UndecidedExecutions = ck.undecidedExecutions(v.Executions)
	var vacuous []string
	if u := v.UndecidedExecutions; u.Count > u.Bound {
		vacuous = append(vacuous, fmt.Sprintf("%d undecided executions (more than %d, 0.5%% of %d executions and at most 10): unresolved unknown outcomes left checks unrun there (%s)",
			u.Count, u.Bound, v.Executions, byCheckText(u.ByCheck)))
	}

	v.decide(h, o, decideInputs{reasons: reasons, drained: ck.drained(), tooLarge: ck.tooLarge, vacuous: vacuous})
	v.CheckMS = time.Since(start).Milliseconds()
	return v
}

func byCheckText(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return joinComma(parts)
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

func sortViolations(vs []Violation) {
	sort.SliceStable(vs, func(i, j int) bool {
		if vs[i].Execution != vs[j].Execution {
			return vs[i].Execution < vs[j].Execution
		}
		return vs[i].Summary < vs[j].Summary
	})
}

// mapDiff says how two maps differ, "" if they are the same.
func mapDiff(a, b MapInfo) string {
	if a.Buckets != b.Buckets {
		return fmt.Sprintf("buckets %d vs %d", a.Buckets, b.Buckets)
	}
	if len(a.Shards) != len(b.Shards) {
		return fmt.Sprintf("%d shards vs %d", len(a.Shards), len(b.Shards))
	}
	norm := func(m MapInfo) map[string]MapShard {
		out := map[string]MapShard{}
		for _, s := range m.Shards {
			r := slices.Clone(s.Ranges)
			sort.Slice(r, func(i, j int) bool { return r[i][0] < r[j][0] })
			s.Ranges = r
			out[s.Name] = s
		}
		return out
	}
	na, nb := norm(a), norm(b)
	for name, sa := range na {
		sb, ok := nb[name]
		switch {
		case !ok:
			return fmt.Sprintf("shard %s is not in the dumped map", name)
		case sa.Ordinal != sb.Ordinal:
			return fmt.Sprintf("shard %s has ordinal %d vs %d", name, sa.Ordinal, sb.Ordinal)
		case !slices.Equal(sa.Ranges, sb.Ranges):
			return fmt.Sprintf("shard %s has ranges %v vs %v", name, sa.Ranges, sb.Ranges)
		}
	}
	return ""
}
