package chaos

import (
	"sort"
	"time"
)

// The ops' corroboration of the faults, online: the verifier's rule
// (verify/faults.go, landings) applied as each op and fault line is
// written, so that an extended run stops on the landings the verdict will
// count. What the writer credits is a lower bound of what the verifier
// credits: whatever the writer cannot yet tell (a fault not yet reported
// that may overlap an op, a window whose heal is not yet known), it waits
// for, and what it cannot tell at all it does not credit.
//
// The rule: an op corroborates at most one fault on its shard (or a
// global one; a move or mover-kill only for the ops of executions in its
// range): the one whose window proper (inject to heal) it overlaps; if
// none, the latest injected of those whose corrSlack after the heal it
// overlaps; an op in two windows proper is ambiguous and credits neither.
// Lost-acks and catalog losses have no such window (history_acks.go
// matches lost-acks; the lease invariant judges catalog losses).
//
//	op ──▶ decidable? (every fault that may overlap it reported and healed)
//	        ├─ yes: its one fault ─▶ the kind's rule holds ─▶ credited
//	        └─ no:  pending (bounded) ◀── re-tried on each fault line
const (
	// corrSlack is the verifier's corroborationSlack: how long after a
	// heal an op may still show the fault.
	corrSlack = int64(3 * time.Second)
	// corrHorizon is how long a healed window is kept after its slack:
	// an op that began before the oldest dropped window's end is never
	// credited (it might overlap a window no longer known).
	corrHorizon = int64(2 * time.Minute)
	// maxCorrWindows and maxCorrPending bound the tables: ops wait
	// seconds (a heal, a lock-delayed injection) and windows live
	// corrHorizon; a run stays bounded whatever its length.
	maxCorrWindows = 2048
	maxCorrPending = 8192
	// ackExclusion widens a lost-ack's window for the unknown-outcome
	// commits it may claim (the verifier does not credit a claimed op to
	// any other fault): its tolerance and a second more.
	ackExclusion = int64(ackTolerance) + int64(time.Second)
)

// Corroboration rules of the verifier (verify/faults.go, corroboration).
const (
	ruleErrors = "errors" // the op failed or is unknown, ended after the inject
	ruleCut    = "cut"    // ... and began before the heal
	ruleHeld   = "held"   // in flight in the window: failed, unknown, or ended at/after the heal
	ruleSlow   = "slow"   // ok, wholly inside, took >= 2x the delay
)

// corrRules is the verifier's table: kinds corroborated by the ops (the
// verifier's "drop" rule for lost-acks is history_acks.go's). Kinds not
// here are credited by their evidence alone.
var corrRules = map[Kind]string{
	KindTerminate: ruleErrors, KindPgBouncerKill: ruleErrors, KindShardCrash: ruleErrors, KindBackendKill: ruleErrors,
	KindProxyRestart: ruleErrors, KindReset: ruleCut, KindPartition: ruleHeld, KindStall: ruleHeld, KindLatency: ruleSlow,
}

// healEvidence: kinds of corrRules whose heal carries the evidence the
// verifier reads (the new pid, the recovery lines, what was delayed or
// held): its Landed is the verifier's rule. The others' heal has none and
// their inject's Landed is.
var healEvidence = map[Kind]bool{
	KindPgBouncerKill: true, KindProxyRestart: true, KindShardCrash: true, KindBackendKill: true,
	KindLatency: true, KindStall: true, KindPartition: true,
}

// evidence records whether a fault of a kind the ops corroborate landed
// as the verifier reads its evidence (verify/faults.go, landedByEvidence:
// the inject's with the heal's laid over it; a failed injection never
// lands).
func (m *corrMatcher) evidence(e Event) {
	if _, ok := corrRules[e.Kind]; !ok {
		return
	}
	switch {
	case e.Phase == "inject" && e.Err != "":
		m.failed[e.ID] = true
	case e.Phase == "inject" && !healEvidence[e.Kind]:
		m.landed[e.ID] = e.Landed
	case e.Phase == "heal" && healEvidence[e.Kind]:
		m.landed[e.ID] = e.Landed && !m.failed[e.ID]
	}
}

// corrWindow is one injection's window.
type corrWindow struct {
	id      string
	kind    Kind
	shard   string // "": global
	from    int64  // the inject's t
	to      int64  // the first heal's t (a lost-ack: when its heal returned)
	healed  bool
	delayMS float64
	// move: a move or mover-kill, which affects only the ops of
	// executions in buckets [lo, hi].
	move   bool
	lo, hi int
	ack    bool // a lost-ack: only excludes the commits it may claim
}

// corrOp is what the matcher keeps of an op.
type corrOp struct {
	shard   string
	bucket  int // its execution's, -1 when it has none
	t0, t1  int64
	bad     bool // failed (not a conflict) or unknown
	ok      bool // outcome ok
	info    bool // an unknown-outcome commit (a lost-ack may claim it)
	settled bool
}

// corrMatcher is the online matcher. Guarded by History.mu.
type corrMatcher struct {
	windows []*corrWindow // by from
	// longest is the longest healed window's span (to - from); openFrom
	// the earliest unhealed window's from: an op's windows begin no
	// earlier than the lesser of its t0 - longest - slack and openFrom.
	longest  int64
	openFrom int64
	byID     map[string]*corrWindow
	pending  []corrOp
	// horizon: ops that began at or before it are not credited (windows
	// overlapping them were dropped).
	horizon int64
	// The schedule, by planned time: no injection not yet reported
	// begins before offset + plan[next].at (a fault injects at or after
	// its planned time). known is false until the schedule's start is.
	plan     []plannedAt
	injected map[string]bool
	next     int
	offset   int64
	known    bool
	hold     map[string]int64
	// credited: fault ids an op corroborates, with their kinds.
	credited map[string]Kind
	// landed: fault ids of the kinds of corrRules whose evidence the
	// verifier reads as landed; failed: ids whose injection failed.
	landed map[string]bool
	failed map[string]bool
}

type plannedAt struct {
	at int64
	id string
}

func newCorrMatcher(schedule []HeaderPlanned) corrMatcher {
	m := corrMatcher{byID: map[string]*corrWindow{}, injected: map[string]bool{}, hold: map[string]int64{},
		credited: map[string]Kind{}, landed: map[string]bool{}, failed: map[string]bool{}, horizon: -1 << 62, openFrom: 1 << 62}
	for _, s := range schedule {
		m.plan = append(m.plan, plannedAt{at: s.AtMs * int64(time.Millisecond), id: s.ID})
		m.hold[s.ID] = s.HoldMs * int64(time.Millisecond)
	}
	sort.SliceStable(m.plan, func(i, j int) bool { return m.plan[i].at < m.plan[j].at })
	return m
}

// watermark is the earliest time an injection not yet reported may have
// begun at.
func (m *corrMatcher) watermark() int64 {
	if !m.known {
		return -1 << 62
	}
	for m.next < len(m.plan) && m.injected[m.plan[m.next].id] {
		m.next++
	}
	if m.next == len(m.plan) {
		return 1 << 62
	}
	return m.offset + m.plan[m.next].at
}

// start says when the schedule's clock began (its offset from the
// history's start).
func (m *corrMatcher) start(offset int64) {
	m.offset, m.known = offset, true
	m.settle()
}

// fault takes a fault line.
func (m *corrMatcher) fault(e Event, evidence map[string]any, now int64) {
	m.evidence(e)
	switch e.Phase {
	case "inject":
		m.injected[e.ID] = true
		if isCatalogLoss(e.Kind) || m.byID[e.ID] != nil {
			break
		}
		w := &corrWindow{id: e.ID, kind: e.Kind, shard: e.Shard, from: int64(e.T), ack: e.Kind == KindLostAck}
		if e.Kind == KindMove || e.Kind == KindMoverKill {
			w.move, w.lo, w.hi = true, 0, 1<<30
			lo, okLo := evInt(evidence["lo"])
			hi, okHi := evInt(evidence["hi"])
			if okLo && okHi {
				w.lo, w.hi = lo, hi
			}
		}
		if d, ok := evFloat(evidence["delay_ms"]); ok {
			w.delayMS = d
		}
		i := sort.Search(len(m.windows), func(i int) bool { return m.windows[i].from > w.from })
		m.windows = append(m.windows, nil)
		copy(m.windows[i+1:], m.windows[i:])
		m.windows[i] = w
		m.byID[e.ID] = w
		m.openFrom = min(m.openFrom, w.from)
	case "heal":
		w := m.byID[e.ID]
		if w == nil || w.healed {
			break
		}
		w.healed, w.to = true, int64(e.T)
		if w.ack {
			w.to = max(int64(e.T), int64(e.Done))
		}
		if w.to < w.from {
			// The verifier falls back on the planned hold.
			if h := m.hold[e.ID]; h > 0 {
				w.to = w.from + h
			} else {
				w.healed = false // the verifier would use the run's end
			}
		}
		if d, ok := evFloat(evidence["delay_ms"]); ok {
			w.delayMS = d
		}
		if w.healed {
			m.longest = max(m.longest, w.to-w.from)
		}
	}
	m.prune(now)
	m.settle()
}

// prune drops windows no op still to come can overlap, and the oldest
// when over the bound; ops that began before a dropped window's end are
// then not credited.
func (m *corrMatcher) prune(now int64) {
	keep := m.windows[:0]
	for i, w := range m.windows {
		over := len(m.windows)-i > maxCorrWindows
		if over || (w.healed && w.to+corrSlack+ackExclusion < now-corrHorizon) {
			m.horizon = max(m.horizon, w.to+corrSlack+ackExclusion)
			if !w.healed {
				m.horizon = 1 << 62 // never healed: nothing after it is sure
			}
			delete(m.byID, w.id)
			continue
		}
		keep = append(keep, w)
	}
	clear(m.windows[len(keep):])
	m.windows = keep
	m.openFrom = 1 << 62
	for _, w := range m.windows {
		if !w.healed {
			m.openFrom = w.from
			break
		}
	}
}

// observe takes an op.
func (m *corrMatcher) observe(op corrOp) {
	if !op.bad && !op.ok {
		return // a lost compare-and-swap corroborates nothing
	}
	if m.decide(&op) {
		return
	}
	if len(m.pending) >= maxCorrPending {
		m.pending = m.pending[1:]
	}
	m.pending = append(m.pending, op)
}

// settle decides the pending ops that can now be decided.
func (m *corrMatcher) settle() {
	keep := m.pending[:0]
	for i := range m.pending {
		if !m.decide(&m.pending[i]) {
			keep = append(keep, m.pending[i])
		}
	}
	m.pending = keep
}

// decide credits op's one fault if the rule holds; false when that cannot
// be told yet.
func (m *corrMatcher) decide(op *corrOp) bool {
	if op.t0 <= m.horizon {
		return true // a window it may overlap is no longer known
	}
	if op.t1 >= m.watermark() {
		return false // a fault not yet reported may overlap it
	}
	var core, tail *corrWindow
	cores := 0
	first := min(m.openFrom, op.t0-m.longest-corrSlack-ackExclusion)
	lo := sort.Search(len(m.windows), func(i int) bool { return m.windows[i].from >= first })
	for _, w := range m.windows[lo:] {
		if w.from > op.t1 {
			break
		}
		if w.shard != "" && op.shard != w.shard {
			continue
		}
		if w.ack {
			// A lost-ack may claim this op: not credited to any fault.
			if op.info && (!w.healed || op.t0 <= w.to+ackExclusion) && op.t1 >= w.from-ackExclusion {
				return true
			}
			continue
		}
		if w.move && op.bucket >= 0 && (op.bucket < w.lo || op.bucket > w.hi) {
			continue
		}
		if !w.healed {
			return false
		}
		if op.t0 > w.to+corrSlack {
			continue
		}
		if op.t0 < w.to || op.t0 == w.from {
			cores++
			core = w
		} else {
			tail = w // windows are in inject order: the latest wins
		}
	}
	only := core
	switch {
	case cores > 1:
		return true
	case cores == 0 && tail == nil:
		return true
	case cores == 0:
		only = tail
	}
	if m.credits(op, only) {
		m.credited[only.id] = only.kind
	}
	return true
}

// credits applies the kind's rule to the op the window's fault has.
func (m *corrMatcher) credits(op *corrOp, w *corrWindow) bool {
	if _, done := m.credited[w.id]; done {
		return false
	}
	switch corrRules[w.kind] {
	case ruleErrors:
		return op.bad && op.t1 >= w.from
	case ruleCut:
		return op.bad && op.t0 <= w.to && op.t1 >= w.from
	case ruleHeld:
		return op.t0 < w.to && op.t1 >= w.from && (op.bad || op.t1 >= w.to)
	case ruleSlow:
		return w.delayMS > 0 && op.t0 >= w.from && op.t1 <= w.to && op.ok &&
			float64(op.t1-op.t0) >= 2*w.delayMS*float64(time.Millisecond)
	}
	return false
}

func isCatalogLoss(k Kind) bool { return k == KindCatalogCut || k == KindCatalogCrash }

// evInt reads an integer evidence field as the writer sets it.
func evInt(v any) (int, bool) {
	switch x := v.(type) {
	case int:
		return x, true
	case int64:
		return int(x), true
	case float64:
		return int(x), true
	}
	return 0, false
}

// evFloat reads a numeric evidence field.
func evFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}
