package verify

import (
	"bytes"
	"encoding/json"
	"sort"
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
)

// corroborationSlack extends a fault's window for its corroboration: a
// client may see the error of a fault a little after the heal (a request
// that was blocked, a pool noticing a dead connection).
const corroborationSlack = 3 * time.Second

// landedByEvidence reads a fault's evidence: did the injection land?
// Kinds whose evidence this reader does not know count only when the
// writer says they landed (and the history corroborates it).
func landedByEvidence(f *FaultEvent) bool {
	if f.Err != "" {
		return false
	}
	ev := f.Evidence
	switch f.Kind {
	case FaultTerminate:
		return positive(ev["terminated"])
	case FaultLostAck:
		return positive(ev["dropped"])
	case FaultPgBouncerKill, FaultProxyRestart:
		return pidChanged(ev)
	case FaultShardCrash:
		return pidChanged(ev) && positive(ev["recovery"])
	case FaultBackendKill:
		return positive(ev["pid"]) && positive(ev["recovery"])
	case FaultPgBouncerPause:
		return positive(ev["paused"]) && positive(ev["waiting"])
	case FaultPgBouncerReconnect:
		return positive(ev["reconnected"])
	case FaultLatency:
		return positive(ev["delayed"])
	case FaultStall:
		return positive(ev["stalled"])
	case FaultReset:
		return positive(ev["reset"])
	case FaultPartition:
		return positive(ev["held"]) || positive(ev["refused"])
	}
	return f.Landed
}

// corroboration says how the ops can confirm a kind landed: errors (a
// failed non-conflict op or an unknown outcome) on the fault's shard in
// its window, or, for a lost acknowledgement, an unknown-outcome commit
// there that resolved present. Kinds that need not make any op fail
// (latency, stalls, pauses, reconnects, partitions) are not corroborated.
var corroboration = map[string]string{
	FaultTerminate: "errors", FaultPgBouncerKill: "errors", FaultShardCrash: "errors", FaultBackendKill: "errors",
	FaultReset: "errors", FaultProxyRestart: "errors", FaultLostAck: "present-unknowns",
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

// landings counts, per fault kind scheduled or injected, how many
// injections landed, from their evidence and, where the history can
// corroborate it, from the ops inside the fault's window.
func landings(w *world, o Options) []FaultLanding {
	type evt struct {
		t       int64
		shard   string
		present bool // an unknown-outcome commit resolved present
		unknown bool
	}
	var errs []evt
	for _, op := range w.h.Ops {
		switch {
		case op.Outcome == OutcomeInfo:
			p := false
			if c := w.commits[op.ID]; c != nil {
				p = c.st == present
			}
			errs = append(errs, evt{op.T1, op.Shard, p, true})
		case op.Outcome == OutcomeFail && !op.Conflict:
			errs = append(errs, evt{op.T1, op.Shard, false, false})
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].t < errs[j].t })
	corroborated := func(win window, how string) bool {
		f := win.inject
		hi := win.to + int64(corroborationSlack)
		i := sort.Search(len(errs), func(i int) bool { return errs[i].t >= f.T })
		for ; i < len(errs) && errs[i].t <= hi; i++ {
			e := errs[i]
			if f.Shard != "" && e.shard != f.Shard {
				continue
			}
			if how == "errors" || e.present {
				return true
			}
		}
		return false
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
		row(s.Kind).Scheduled++
	}
	for _, win := range w.windows() {
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
		how, corroborable := corroboration[f.Kind]
		c := false
		if corroborable {
			c = corroborated(win, how)
			if c {
				r.Corroborated++
			}
		}
		if ev && (c || !corroborable) {
			r.Landed++
		}
	}
	out := make([]FaultLanding, 0, len(order))
	for _, k := range order {
		r := rows[k]
		r.Vacuous = r.Scheduled > 0 && r.Landed < o.MinLanded
		out = append(out, *r)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
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
}

func timeline(w *world) *Timeline {
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
		tl.Faults = append(tl.Faults, FaultWindow{ID: f.ID, Kind: f.Kind, Shard: f.Shard, FromNS: f.T, ToNS: win.to, Landed: landedByEvidence(f)})
	}
	return tl
}
