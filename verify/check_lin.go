package verify

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"golang.org/x/sync/errgroup"
)

// maxTime is the return time of an op whose effect may come at any time
// after its invocation (an unknown outcome): porcupine's "never returned".
const maxTime = math.MaxInt64

// regState is the model's state of one execution: its version and the op
// that wrote it.
type regState struct {
	v int
	w string
}

// linInput is one op of the register model.
type linInput struct {
	load bool
	// commit
	exp     int
	op      string
	unknown bool // an unresolved info commit: it may or may not apply
	// conflict: the commit lost; found (if known) is what it saw.
	conflict bool
	found    *int
}

// linOutput is what a load returned.
type linOutput struct {
	exists bool
	v      int
	w      string
}

var seed = maphash.MakeSeed()

// registerModel is a CAS register: load returns (version, writer);
// commit(exp, op) acknowledged ⇒ version == exp, then (exp+1, op);
// conflict ⇒ version != exp (== found when known); an unresolved unknown
// outcome ⇒ either no change or the commit. Resolved-present unknowns are
// given as acknowledged commits that never returned, resolved-absent ones
// and failed non-conflicts are left out.
var registerModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{regState{}} },
	Step: func(state, input, output any) []any {
		s, in := state.(regState), input.(linInput)
		switch {
		case in.load:
			out := output.(linOutput)
			if !out.exists {
				if s.v == 0 {
					return []any{s}
				}
				return nil
			}
			if s.v == out.v && (out.w == "" || s.w == out.w) {
				return []any{s}
			}
			return nil
		case in.conflict:
			if s.v != in.exp && (in.found == nil || s.v == *in.found) {
				return []any{s}
			}
			return nil
		case in.unknown:
			if s.v == in.exp {
				return []any{s, regState{in.exp + 1, in.op}}
			}
			return []any{s}
		default:
			if s.v == in.exp {
				return []any{regState{in.exp + 1, in.op}}
			}
			return nil
		}
	},
	Hash: func(state any) uint64 {
		s := state.(regState)
		return maphash.String(seed, s.w) ^ uint64(s.v)*0x9e3779b97f4a7c15
	},
	DescribeOperation: func(input, output any) string {
		in := input.(linInput)
		switch {
		case in.load:
			out := output.(linOutput)
			if !out.exists {
				return "load → absent"
			}
			return fmt.Sprintf("load → v%d by %s", out.v, out.w)
		case in.conflict:
			if in.found != nil {
				return fmt.Sprintf("commit %s exp %d → conflict (found %d)", in.op, in.exp, *in.found)
			}
			return fmt.Sprintf("commit %s exp %d → conflict", in.op, in.exp)
		case in.unknown:
			return fmt.Sprintf("commit %s exp %d → unknown", in.op, in.exp)
		}
		return fmt.Sprintf("commit %s exp %d → v%d", in.op, in.exp, in.exp+1)
	},
	DescribeState: func(state any) string {
		s := state.(regState)
		if s.v == 0 {
			return "absent"
		}
		return fmt.Sprintf("v%d by %s", s.v, s.w)
	},
}

// deterministicModel is registerModel for a partition without unresolved
// unknown outcomes (the usual case once unknowns are resolved): the same
// steps with one state instead of a set, which porcupine checks much
// faster.
var deterministicModel = porcupine.Model{
	Init: func() any { return regState{} },
	Step: func(state, input, output any) (bool, any) {
		next := registerModel.Step(state, input, output)
		if len(next) != 1 {
			return false, state
		}
		return true, next[0]
	},
	Equal:             func(a, b any) bool { return a.(regState) == b.(regState) },
	DescribeOperation: registerModel.DescribeOperation,
	DescribeState:     registerModel.DescribeState,
}

// linFailure is a partition porcupine found illegal, kept for the
// visualization.
type linFailure struct {
	exe  string
	info porcupine.LinearizationInfo
}

// partition builds the porcupine history of one execution.
func (ck *checker) partition(e *exe) []porcupine.Operation {
	clients := map[string]int{}
	client := func(src string) int {
		if id, ok := clients[src]; ok {
			return id
		}
		clients[src] = len(clients)
		return clients[src]
	}
	ops := make([]porcupine.Operation, 0, len(e.loads)+len(e.commits))
	for _, l := range e.loads {
		if l.Outcome != OutcomeOK {
			continue // a failed read says nothing
		}
		ops = append(ops, porcupine.Operation{ClientId: client(l.Src), Input: linInput{load: true},
			Call: l.T0, Output: linOutput{exists: l.Exists, v: l.Version, w: l.Writer}, Return: l.T1, Metadata: l.ID})
	}
	for _, c := range e.commits {
		in := linInput{exp: c.Exp, op: c.ID}
		ret := c.T1
		switch {
		case c.Outcome == OutcomeOK:
		case c.Outcome == OutcomeFail && c.Conflict:
			in.conflict, in.found = true, c.Found
		case c.Outcome == OutcomeFail:
			continue // definitely no effect
		case c.st == present:
			ret = maxTime
		case c.st == absent:
			continue
		default:
			in.unknown, ret = true, maxTime
		}
		ops = append(ops, porcupine.Operation{ClientId: client(c.Src), Input: in, Call: c.T0, Return: ret, Metadata: c.ID})
	}
	return ops
}

// linearizability checks each execution's loads and commits against the
// register model with porcupine, one partition per execution, each
// bounded by PartitionTimeout and all by LinearizabilityBudget. Illegal
// is a violation; a timeout is undecided (never a pass).
func (ck *checker) linearizability(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, ck.o.LinearizabilityBudget)
	defer cancel()
	nondet := registerModel.ToModel()
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(ck.o.Parallel)
	for _, id := range ck.w.exeOrder {
		e := ck.w.exes[id]
		ops := ck.partition(e)
		if len(ops) == 0 {
			continue
		}
		if len(ops) > ck.o.MaxPartitionOps {
			// porcupine's search and its cache grow with the ops that
			// overlap; past this it runs out of time or memory.
			ck.v.Undecided = append(ck.v.Undecided, id)
			ck.tooLarge++
			continue
		}
		model := deterministicModel
		for _, op := range ops {
			if op.Input.(linInput).unknown {
				model = nondet
				break
			}
		}
		g.Go(func() error {
			if ctx.Err() != nil {
				mu.Lock()
				ck.v.Undecided = append(ck.v.Undecided, id)
				mu.Unlock()
				return nil
			}
			timeout := ck.o.PartitionTimeout
			if dl, ok := ctx.Deadline(); ok {
				timeout = min(timeout, time.Until(dl))
			}
			res, info := porcupine.CheckOperationsVerbose(model, ops, max(timeout, time.Millisecond))
			mu.Lock()
			defer mu.Unlock()
			switch res {
			case porcupine.Ok:
				ck.count(InvLinearizable, len(ops)) // decided: counted
			case porcupine.Illegal:
				ck.count(InvLinearizable, len(ops))
				ck.v.lin = append(ck.v.lin, linFailure{exe: id, info: info})
				ck.add(InvLinearizable, id, fmt.Sprintf("the loads and commits of execution %s are not linearizable as a CAS register (%s)",
					id, longestPrefix(info)), linRefs(ck.w, ops, info), nil)
			default:
				ck.v.Undecided = append(ck.v.Undecided, id)
			}
			return nil
		})
	}
	_ = g.Wait()
	slices.Sort(ck.v.Undecided)
}

// longestPrefix describes how far porcupine got.
func longestPrefix(info porcupine.LinearizationInfo) string {
	best := 0
	for _, p := range info.PartialLinearizations() {
		for _, l := range p {
			best = max(best, len(l))
		}
	}
	return fmt.Sprintf("the longest linearizable prefix has %d ops; see the visualization", best)
}

// linRefs lists the ops of a failing partition that matter most: those
// porcupine could not fit into its longest linearizable prefix (up to 8,
// by invocation), then the last ops of that prefix (up to 4).
func linRefs(w *world, ops []porcupine.Operation, info porcupine.LinearizationInfo) []OpRef {
	var best []int
	for _, p := range info.PartialLinearizations() {
		for _, l := range p {
			if len(l) > len(best) {
				best = l
			}
		}
	}
	in := make([]bool, len(ops))
	for _, i := range best {
		if i >= 0 && i < len(ops) {
			in[i] = true
		}
	}
	var outside []int
	for i := range ops {
		if !in[i] {
			outside = append(outside, i)
		}
	}
	slices.SortStableFunc(outside, func(a, b int) int { return cmp.Compare(ops[a].Call, ops[b].Call) })
	var out []OpRef
	add := func(i int, note string) {
		o := ops[i]
		id, _ := o.Metadata.(string)
		op := w.opByID(id)
		if op == nil {
			return
		}
		d := registerModel.DescribeOperation(o.Input, o.Output)
		if c := w.commits[id]; c != nil {
			r := c.ref(note + ": " + d)
			out = append(out, r)
			return
		}
		out = append(out, ref(op, note+": "+d))
	}
	for k, i := range outside {
		if k == 8 {
			break
		}
		add(i, "not linearizable after the prefix")
	}
	for k := max(0, len(best)-4); k < len(best); k++ {
		if best[k] >= 0 && best[k] < len(ops) {
			add(best[k], fmt.Sprintf("prefix op %d of %d", k+1, len(best)))
		}
	}
	return out
}
