package loadgen

import (
	"fmt"
	"strconv"
	"strings"
)

// Part makes a run one of Count generators that share a workload: part
// Index (0-based, 0 ≤ Index < Count) drives the executions whose index in
// ExecutionIDs(seed, executions) is congruent to Index modulo Count — a
// disjoint slice, the same on every machine for the same seed — at 1/Count
// of the rate (open loop) or of the workers (closed loop). Its setup
// creates only its slice, its workers pick keys (with the workload's
// distribution over the slice) and emit only to it, and its open-loop
// schedule is offset by Index arrivals, so that Count parts started
// together interleave like one run. Each part's relays deliver the outbox
// rows, ack the spawn intents and fire the timers of its own executions
// (its emits and timers concern only them), so the parts share the relay
// work without doing it twice; a row or timer left more than partGrace
// (2 s) past its time — its part stopped — is taken by any part, and
// deduplicated as with several production relays. MergeResults puts the
// parts' results back together.
//
// The zero Part (Count 0) is a whole run.
type Part struct {
	Index int `json:"index"`
	Count int `json:"count"`
}

// Whole reports whether p is a whole run, not a part.
func (p Part) Whole() bool { return p.Count == 0 }

// String is "K/N" ("" for a whole run).
func (p Part) String() string {
	if p.Whole() {
		return ""
	}
	return strconv.Itoa(p.Index) + "/" + strconv.Itoa(p.Count)
}

// ParsePart reads "K/N" (0 ≤ K < N), as given to `loadgen run --part`.
func ParsePart(s string) (Part, error) {
	ks, ns, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Part{}, fmt.Errorf("part %q: want K/N, e.g. 0/4 (K from 0 to N-1)", s)
	}
	k, err1 := strconv.Atoi(strings.TrimSpace(ks))
	n, err2 := strconv.Atoi(strings.TrimSpace(ns))
	if err1 != nil || err2 != nil {
		return Part{}, fmt.Errorf("part %q: K and N must be integers (K/N, e.g. 0/4)", s)
	}
	p := Part{Index: k, Count: n}
	if n < 1 {
		return Part{}, fmt.Errorf("part %d/%d: N must be at least 1", k, n)
	}
	if err := p.Validate(); err != nil {
		return Part{}, err
	}
	return p, nil
}

// Validate checks 0 ≤ Index < Count (or the zero Part).
func (p Part) Validate() error {
	switch {
	case p == Part{}:
		return nil
	case p.Count < 1:
		return fmt.Errorf("part %d/%d: N must be at least 1", p.Index, p.Count)
	case p.Index < 0 || p.Index >= p.Count:
		return fmt.Errorf("part %d/%d: K must be in [0, %d] (parts are numbered from 0, like a Kubernetes Job's completion index)", p.Index, p.Count, p.Count-1)
	}
	return nil
}

// ForPart returns the options of part p of the run o describes: o's rate
// (open loop) is divided by p.Count and its workers (closed loop) are
// shared out, the first Concurrency mod Count parts taking one more. It
// fails when the run cannot be split that way (fewer executions or workers
// than parts).
func (o Options) ForPart(p Part) (Options, error) {
	if err := p.Validate(); err != nil {
		return o, err
	}
	if !o.Part.Whole() {
		return o, fmt.Errorf("part %s: the options are already those of part %s", p, o.Part)
	}
	if p.Whole() {
		return o, nil
	}
	if o.Workload.Executions < p.Count {
		return o, fmt.Errorf("part %s: %d executions cannot be shared by %d parts", p, o.Workload.Executions, p.Count)
	}
	switch o.Model {
	case Open:
		o.Rate /= float64(p.Count)
	case Closed:
		if o.Concurrency < p.Count {
			return o, fmt.Errorf("part %s: concurrency %d cannot be shared by %d parts (each needs a worker)", p, o.Concurrency, p.Count)
		}
		c := o.Concurrency / p.Count
		if p.Index < o.Concurrency%p.Count {
			c++
		}
		o.Concurrency = c
	}
	if o.Ops > 0 {
		ops := o.Ops / int64(p.Count)
		if int64(p.Index) < o.Ops%int64(p.Count) {
			ops++
		}
		o.Ops = max(ops, 1)
	}
	o.Part = p
	return o, nil
}

// partIDs returns the executions of part p among ids (all of them for a
// whole run).
func partIDs(ids []string, p Part) []string {
	if p.Whole() {
		return ids
	}
	out := make([]string, 0, len(ids)/p.Count+1)
	for i := p.Index; i < len(ids); i += p.Count {
		out = append(out, ids[i])
	}
	return out
}
