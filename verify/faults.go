package verify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Fault kinds of HISTORY.md.
const (
	FaultTerminate          = "terminate"
	FaultLostAck            = "lost-ack"
	FaultPgBouncerKill      = "pgbouncer-kill"
	FaultPgBouncerPause     = "pgbouncer-pause"
	FaultPgBouncerReconnect = "pgbouncer-reconnect"
	FaultShardCrash         = "shard-crash"
	FaultBackendKill        = "backend-kill"
	FaultLatency            = "latency"
	FaultStall              = "stall"
	FaultReset              = "reset"
	FaultPartition          = "partition"
	FaultProxyRestart       = "proxy-restart"
	FaultMove               = "move"
	FaultMoverKill          = "mover-kill"
	FaultCatalogCut         = "catalog-cut"
	FaultCatalogCrash       = "catalog-crash"
)

// corroborationSlack extends a fault's window for its corroboration: a
// client may see the error of a fault a little after the heal (a request
// that was blocked, a pool noticing a dead connection).
const corroborationSlack = 3 * time.Second

// dropTolerance is how far the times a lost-ack records for a
// dropped reply (sent, at) may lie outside the op's [t0, t1]. Both are on
// the history's clock: the op's times are monotonic offsets from the
// header's started_at, and a drop's are written as started_at plus its
// monotonic offset (HISTORY.md), so a step of the wall clock during a run
// moves neither.
const dropTolerance = 250 * time.Millisecond

// landedByEvidence reads a fault's evidence (the injection's with its
// heal's laid over it): did the injection do what it exists for? The
// rules are the writer's own (chaos/fault_*.go), never looser. Kinds whose
// evidence this reader does not know count only when the writer says they
// landed.
func landedByEvidence(f *FaultEvent) bool {
	if f.Err != "" {
		return false
	}
	ev := f.Evidence
	switch f.Kind {
	case FaultTerminate:
		return positive(ev["terminated"])
	case FaultLostAck:
		return len(committedDrops(ev)) > 0
	case FaultPgBouncerKill, FaultProxyRestart:
		return pidChanged(ev)
	case FaultShardCrash:
		// A new postmaster ran crash recovery.
		return pidChanged(ev) && anyLine(ev["recovery"], "automatic recovery in progress")
	case FaultBackendKill:
		// The postmaster saw this very backend die of SIGKILL.
		var pid int64
		if json.Unmarshal(ev["pid"], &pid) != nil || pid <= 0 {
			return false
		}
		return anyLine(ev["recovery"], "(PID "+strconv.FormatInt(pid, 10)+") was terminated by signal 9")
	case FaultPgBouncerPause:
		return positive(ev["paused"]) && positive(ev["waiting"])
	case FaultPgBouncerReconnect:
		// Server connections in use were closed and re-established.
		return positive(ev["closed"]) && positive(ev["new"])
	case FaultLatency:
		return positive(ev["delayed"])
	case FaultStall:
		return positive(ev["stalled"])
	case FaultReset:
		// A connection with a request in flight was cut.
		return positive(ev["in_flight"])
	case FaultPartition:
		// Requests were held: in flight when it began, or sent into it.
		return positive(ev["in_flight"]) || positive(ev["requests"])
	case FaultCatalogCut:
		// The cut outlasted the lease's TTL, and the follower tried the
		// catalog during it.
		c, ok := readCut(f)
		return ok && c.healed && c.heal-c.cut > c.ttl && (positive(ev["requests"]) || positive(ev["refused"]))
	case FaultCatalogCrash:
		// The catalog server was down longer than the lease's TTL, and a
		// new postmaster ran crash recovery.
		c, ok := readCut(f)
		return ok && c.healed && c.heal-c.cut > c.ttl && pidChanged(ev) && anyLine(ev["recovery"], "automatic recovery in progress")
	}
	return f.Landed
}

// droppedReply is one reply of a lost-ack's evidence ("replies").
type droppedReply struct {
	Conn      uint64    `json:"conn"`
	Sent      time.Time `json:"sent"`
	At        time.Time `json:"at"`
	Error     bool      `json:"error"`
	Committed *bool     `json:"committed"`
	Status    string    `json:"status"`
}

// committedDrops returns the dropped replies of commits that committed:
// no error, committed true, the transaction ended (status I), with the
// times to match them to their op.
func committedDrops(ev map[string]json.RawMessage) []droppedReply {
	var all []droppedReply
	if json.Unmarshal(ev["replies"], &all) != nil {
		return nil
	}
	var out []droppedReply
	for _, d := range all {
		if !d.Error && d.Committed != nil && *d.Committed && d.Status == "I" && !d.Sent.IsZero() && !d.At.IsZero() {
			out = append(out, d)
		}
	}
	return out
}

// anyLine reports whether a list of log lines has one containing s.
func anyLine(raw json.RawMessage, s string) bool {
	var lines []string
	if json.Unmarshal(raw, &lines) != nil {
		return false
	}
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// Corroboration rules: how the ops confirm a kind landed, each op
// matched to exactly one fault (see landings).
const (
	// corrErrors: an op on the fault's shard failed (not a conflict) or
	// has an unknown outcome, within [inject, heal+slack].
	corrErrors = "errors"
	// corrCut: an op in flight during the fault's instant (between its
	// inject and heal lines: the reset waits for a request in flight)
	// failed or has an unknown outcome.
	corrCut = "cut"
	// corrHeld: an op in flight during the fault failed, has an unknown
	// outcome, or waited: completed at or after the heal.
	corrHeld = "held"
	// corrSlow: an op wholly inside the fault took at least twice the
	// delay (a round trip passes the relay twice).
	corrSlow = "slow"
	// corrDrop: an unknown-outcome commit on the shard, around the
	// dropped reply's times, resolved present.
	corrDrop = "drop"
)

// corroboration says how the ops can confirm each kind landed. Kinds
// whose own evidence is direct and need not make any op fail (pauses,
// reconnects) are not corroborated.
var corroboration = map[string]string{
	FaultTerminate: corrErrors, FaultPgBouncerKill: corrErrors, FaultShardCrash: corrErrors, FaultBackendKill: corrErrors,
	FaultProxyRestart: corrErrors, FaultReset: corrCut, FaultLostAck: corrDrop,
	FaultPartition: corrHeld, FaultStall: corrHeld, FaultLatency: corrSlow,
}

// positive reads an evidence value as "something happened": a number > 0,
// true, a non-empty string, array or object.
func positive(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return false
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	switch x := v.(type) {
	case bool:
		return x
	case float64:
		return x > 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return false
}

func pidChanged(ev map[string]json.RawMessage) bool {
	var o, n float64
	if json.Unmarshal(ev["old_pid"], &o) != nil || json.Unmarshal(ev["new_pid"], &n) != nil {
		return false
	}
	return o > 0 && n > 0 && o != n
}

// window is one injection and its heal.
type window struct {
	inject *FaultEvent
	// evidence is the injection's with the heal's evidence laid over it:
	// what only the end of a fault can show (the log lines of a crash
	// recovery, the replies a lost-ack dropped, the chunks a latency
	// delayed) is in its heal line.
	evidence *FaultEvent
	to       int64 // the heal's time, or the scheduled hold, or the end
}

func (w *world) windows() []window {
	heal := map[string]int64{}
	healed := map[string]*FaultEvent{}
	for _, f := range w.h.Faults {
		if f.Phase == "heal" {
			if _, ok := heal[f.ID]; !ok {
				heal[f.ID], healed[f.ID] = f.T, f
			}
		}
	}
	hold := map[string]int64{}
	for _, s := range w.h.Header.Schedule {
		hold[s.ID] = s.HoldMS * int64(time.Millisecond)
	}
	end := int64(0)
	if w.h.End != nil {
		end = w.h.End.T
	}
	for _, o := range w.h.Ops {
		end = max(end, o.T1)
	}
	var out []window
	for _, f := range w.h.Faults {
		if f.Phase != "inject" {
			continue
		}
		to, ok := heal[f.ID]
		switch {
		case ok && to >= f.T:
		case hold[f.ID] > 0:
			to = f.T + hold[f.ID]
		default:
			to = max(end, f.T)
		}
		ev := f
		if h := healed[f.ID]; h != nil && (len(h.Evidence) > 0 || h.Landed) {
			merged := *f
			merged.Landed = f.Landed || h.Landed
			merged.Evidence = make(map[string]json.RawMessage, len(f.Evidence)+len(h.Evidence))
			for k, v := range f.Evidence {
				merged.Evidence[k] = v
			}
			for k, v := range h.Evidence {
				merged.Evidence[k] = v
			}
			ev = &merged
		}
		out = append(out, window{inject: f, evidence: ev, to: to})
	}
	return out
}

// landings counts, per fault kind scheduled, configured or injected, how
// many injections landed: their evidence shows the fault did what it
// exists for and, for kinds the ops can corroborate, an op shows it too.
// An op corroborates at most one fault on its shard (or a global one; a
// move or mover-kill only for the ops of executions in its range):
// the one whose window proper (inject to heal) the op overlaps; if none,
// the latest injected of those whose corroborationSlack after the heal it
// overlaps; an op inside two faults' windows proper is ambiguous and
// corroborates neither, so a fault is never counted on another's effects.
// A lost-ack
// is matched to its own op: the unknown-outcome commit around each
// dropped reply. It returns the table and, by fault id, whether each
// injection landed.
func landings(w *world, o Options) ([]FaultLanding, map[string]bool) {
	wins := w.windows()
	start := w.h.Header.StartedAt
	// Lost-ack: each committed dropped reply claims one op.
	claimed := map[*Op]bool{}
	dropMatched := map[string]bool{}
	var infoCommits []*Op
	for _, op := range w.h.Ops {
		if op.Kind == KindCommit && op.Outcome == OutcomeInfo {
			infoCommits = append(infoCommits, op)
		}
	}
	for _, win := range wins {
		if win.inject.Kind != FaultLostAck || start.IsZero() {
			continue
		}
		for _, d := range committedDrops(win.evidence.Evidence) {
			sent, at := d.Sent.Sub(start).Nanoseconds(), d.At.Sub(start).Nanoseconds()
			tol := int64(dropTolerance)
			for _, op := range infoCommits {
				if claimed[op] {
					continue
				}
				if win.inject.Shard != "" && op.Shard != win.inject.Shard {
					continue
				}
				if op.T0 > sent+tol || op.T1 < at-tol {
					continue
				}
				if c := w.commits[op.ID]; c == nil || c.st != present {
					continue
				}
				claimed[op] = true
				dropMatched[win.inject.ID] = true
				break
			}
		}
	}
	// The other kinds: each op's one fault.
	type span struct {
		win      window
		from, to int64
		// a move's buckets: it can affect only the ops of executions in
		// them (other ranges never wait, ARCHITECTURE.md §6).
		moveLo, moveHi int
		move           bool
	}
	var spans []span
	for _, win := range wins {
		if win.inject.Kind == FaultLostAck || isCatalogLoss(win.inject.Kind) {
			// A catalog cut or crash is not corroborated by the ops (the
			// lease invariant judges them): its long global window would
			// make the ops of every fault inside it ambiguous.
			continue
		}
		sp := span{win: win, from: win.inject.T, to: win.to + int64(corroborationSlack)}
		if win.inject.Kind == FaultMove || win.inject.Kind == FaultMoverKill {
			sp.move, sp.moveLo, sp.moveHi = true, 0, -1
			ev := win.inject.Evidence
			if json.Unmarshal(ev["lo"], &sp.moveLo) != nil || json.Unmarshal(ev["hi"], &sp.moveHi) != nil {
				sp.moveLo, sp.moveHi = 0, math.MaxInt // no range recorded: any op
			}
		}
		spans = append(spans, sp)
	}
	// bucketOf is the bucket of an op's execution (its final row's), -1
	// when unknown.
	bucketOf := func(op *Op) int {
		if e := w.exes[op.Exe]; e != nil && len(e.rows) > 0 {
			return e.rows[0].r.Bucket
		}
		return -1
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].from < spans[j].from })
	longest := int64(0)
	for _, sp := range spans {
		longest = max(longest, sp.to-sp.from)
	}
	corr := map[string]bool{}
	for _, op := range w.h.Ops {
		if claimed[op] || len(spans) == 0 {
			continue
		}
		// The op's fault: the one whose window proper (inject to heal)
		// the op overlaps; none such: the latest injected of those whose
		// slack after the heal it overlaps; two or more: ambiguous.
		var core, tail *span
		cores := 0
		lo := sort.Search(len(spans), func(i int) bool { return spans[i].from >= op.T0-longest })
		for i := lo; i < len(spans); i++ {
			sp := &spans[i]
			if sp.from > op.T1 {
				break
			}
			if op.T0 > sp.to || (sp.win.inject.Shard != "" && op.Shard != sp.win.inject.Shard) {
				continue
			}
			if sp.move {
				if b := bucketOf(op); b >= 0 && (b < sp.moveLo || b > sp.moveHi) {
					continue
				}
			}
			if op.T0 < sp.win.to || op.T0 == sp.from {
				cores++
				core = sp
			} else {
				tail = sp // spans are in inject order: the latest wins
			}
		}
		only := core
		switch {
		case cores > 1:
			continue
		case cores == 0 && tail == nil:
			continue
		case cores == 0:
			only = tail
		}
		if corr[only.win.inject.ID] {
			continue
		}
		f := only.win.inject
		bad := op.Outcome == OutcomeInfo || (op.Outcome == OutcomeFail && !op.Conflict)
		ok := false
		switch corroboration[f.Kind] {
		case corrErrors:
			ok = bad && op.T1 >= f.T
		case corrCut:
			ok = bad && op.T0 <= only.win.to && op.T1 >= f.T
		case corrHeld:
			ok = op.T0 < only.win.to && op.T1 >= f.T && (bad || op.T1 >= only.win.to)
		case corrSlow:
			var delayMS float64
			_ = json.Unmarshal(only.win.evidence.Evidence["delay_ms"], &delayMS)
			ok = delayMS > 0 && op.T0 >= f.T && op.T1 <= only.win.to && op.Outcome == OutcomeOK &&
				float64(op.T1-op.T0) >= 2*delayMS*float64(time.Millisecond)
		}
		if ok {
			corr[f.ID] = true
		}
	}
	for id := range dropMatched {
		corr[id] = true
	}

	rows := map[string]*FaultLanding{}
	var order []string
	row := func(kind string) *FaultLanding {
		r := rows[kind]
		if r == nil {
			r = &FaultLanding{Kind: kind, Corroborated: -1}
			if _, ok := corroboration[kind]; ok {
				r.Corroborated = 0
			}
			rows[kind] = r
			order = append(order, kind)
		}
		return r
	}
	for _, s := range w.h.Header.Schedule {
		if w.h.Due(s) {
			row(s.Kind).Scheduled++
		}
	}
	for _, k := range o.ExpectKinds {
		row(k)
	}
	landed := map[string]bool{}
	for _, win := range wins {
		f := win.inject
		r := row(f.Kind)
		r.Injected++
		if win.evidence.Landed {
			r.WriterLanded++
		}
		ev := landedByEvidence(win.evidence)
		if ev {
			r.Evidence++
		}
		_, corroborable := corroboration[f.Kind]
		c := corroborable && corr[f.ID]
		if c {
			r.Corroborated++
		}
		if ev && (c || !corroborable) {
			r.Landed++
			landed[f.ID] = true
		}
	}
	out := make([]FaultLanding, 0, len(order))
	for _, k := range order {
		r := rows[k]
		switch {
		case r.Scheduled == 0 && r.Injected == 0:
			r.Why = "configured but never scheduled"
		case r.Scheduled > 0 && r.Landed < max(o.MinLanded, o.MinLandedKind[k]):
			r.Why = fmt.Sprintf("scheduled %d times, injected %d, landed %d (< %d)", r.Scheduled, r.Injected, r.Landed, max(o.MinLanded, o.MinLandedKind[k]))
		case r.Scheduled > 0 && o.MinLandedShare > 0 && float64(r.Landed) < o.MinLandedShare*float64(max(r.Injected, r.Scheduled)):
			r.Why = fmt.Sprintf("landed %d of %d injections (< %.0f%%)", r.Landed, max(r.Injected, r.Scheduled), 100*o.MinLandedShare)
		}
		r.Vacuous = r.Why != ""
		out = append(out, *r)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out, landed
}

// Timeline is the history in 1 s buckets (by completion time) and the
// fault windows, for the report.
type Timeline struct {
	// BucketNS is the bucket width (1 s, wider for runs over a day).
	BucketNS int64 `json:"bucket_ns"`
	// OK counts ops with outcome ok, Errors failed ops other than
	// conflicts, Conflicts lost compare-and-swaps, Unknown info outcomes.
	OK        []int `json:"ok"`
	Errors    []int `json:"errors"`
	Conflicts []int `json:"conflicts"`
	Unknown   []int `json:"unknown"`
	// Faults are the fault windows (inject to heal).
	Faults []FaultWindow `json:"faults"`
	// EndNS is the end of the run (the end line's t, or the last op).
	EndNS int64 `json:"end_ns"`
}

// FaultWindow is one injection's window.
type FaultWindow struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"`
	Shard  string `json:"shard,omitempty"`
	FromNS int64  `json:"from_ns"`
	ToNS   int64  `json:"to_ns"`
	Landed bool   `json:"landed"`
	// Move is set for a move or mover-kill fault whose evidence names
	// its range: what the timeline marks it with.
	Move *MoveMark `json:"move,omitempty"`
}

// MoveMark is a range move of a fault window and its freezes, from the
// fault's evidence (HISTORY.md): FreezeMS are the freezes' durations in
// the order tried; FreezeNS, when the evidence carries their start times
// (freeze_t, ns on the history's clock), where each began.
type MoveMark struct {
	Lo       int       `json:"lo"`
	Hi       int       `json:"hi"`
	From     string    `json:"from"`
	To       string    `json:"to"`
	Epoch    uint64    `json:"epoch,omitempty"`
	FreezeMS []float64 `json:"freeze_ms,omitempty"`
	FreezeNS []int64   `json:"freeze_t,omitempty"`
}

// moveMark reads a move fault's evidence ("lo", "hi", "from", "to",
// "epoch", "freeze_ms", "freeze_t"); nil when it names no range.
func moveMark(ev map[string]json.RawMessage) *MoveMark {
	var m MoveMark
	if json.Unmarshal(ev["lo"], &m.Lo) != nil || json.Unmarshal(ev["hi"], &m.Hi) != nil ||
		json.Unmarshal(ev["from"], &m.From) != nil || json.Unmarshal(ev["to"], &m.To) != nil || m.Hi < m.Lo {
		return nil
	}
	_ = json.Unmarshal(ev["epoch"], &m.Epoch)
	_ = json.Unmarshal(ev["freeze_ms"], &m.FreezeMS)
	if json.Unmarshal(ev["freeze_t"], &m.FreezeNS) != nil || len(m.FreezeNS) != len(m.FreezeMS) {
		m.FreezeNS = nil // times must pair with the durations
	}
	return &m
}

func timeline(w *world, landed map[string]bool) *Timeline {
	tl := &Timeline{BucketNS: int64(time.Second)}
	for _, o := range w.h.Ops {
		tl.EndNS = max(tl.EndNS, o.T1)
	}
	if w.h.End != nil {
		tl.EndNS = max(tl.EndNS, w.h.End.T)
	}
	// A very long (or corrupt) history gets wider buckets, not an
	// unbounded series.
	const maxBuckets = 100000
	if tl.EndNS/tl.BucketNS >= maxBuckets {
		tl.BucketNS = (tl.EndNS/maxBuckets + 1)
	}
	n := int(tl.EndNS/tl.BucketNS) + 1
	tl.OK, tl.Errors, tl.Conflicts, tl.Unknown = make([]int, n), make([]int, n), make([]int, n), make([]int, n)
	for _, o := range w.h.Ops {
		b := int(o.T1 / tl.BucketNS)
		switch {
		case o.Outcome == OutcomeOK:
			tl.OK[b]++
		case o.Outcome == OutcomeInfo:
			tl.Unknown[b]++
		case o.Conflict:
			tl.Conflicts[b]++
		default:
			tl.Errors[b]++
		}
	}
	for _, win := range w.windows() {
		f := win.inject
		fw := FaultWindow{ID: f.ID, Kind: f.Kind, Shard: f.Shard, FromNS: f.T, ToNS: win.to, Landed: landed[f.ID]}
		if f.Kind == FaultMove || f.Kind == FaultMoverKill {
			fw.Move = moveMark(win.evidence.Evidence)
		}
		tl.Faults = append(tl.Faults, fw)
	}
	return tl
}
