package verify

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Availability under faults: how long after each fault's heal the
// workload's ok-op rate is back, measured from the history alone.
//
// The rate is counted from ok ops by completion time (t1) in 100 ms slots,
// per shard: a fault on a shard is judged by the ok-op rate of that shard,
// a fault without a shard (the proxy's) by the whole workload's. The rate
// at t is the ok ops completed in [t, t+1 s). A fault has recovered at the
// first slot boundary t >= its heal from which the rate stays at least
// RecoveryShare of the fault-free rate for recoverySustain (the rates at t
// and at t+1 s: a burst of requests released by the heal is not a
// recovery); its recovery time is t - heal.
//
// The fault-free baseline is the ok-op rate before the first injection
// (from the first op to the first inject), when that period is at least
// baselineMin long; otherwise the median rate over the 1 s windows of the
// load in which no fault was active and none had healed in the last
// baselineQuiet. Recovery.BaselineFrom says which was used.
//
// Overlap: another fault that touches the same shard (a fault without a
// shard touches all) and is active at the heal, or is injected before the
// recovery, confounds the measurement: such a fault's recovery is
// reported with Overlapped naming the other fault, and left out of the
// per-kind p50 and max. A fault whose rate is not back before the load
// ends (the last worker op) is "not recovered within the run"; one healed
// less than recoverySustain before the load's end cannot be measured and
// is counted as such (Unmeasurable), not as either.

// RecoveryShare is the share of the fault-free rate that counts as
// recovered.
const RecoveryShare = 0.8

const (
	recoverySlot   = 100 * time.Millisecond
	recoveryWindow = time.Second
	// recoverySustain: how long the rate must stay up (whole windows).
	recoverySustain = 2 * recoveryWindow
	baselineMin     = 2 * time.Second
	baselineQuiet   = 5 * time.Second
)

// Recovery is the availability under faults.
type Recovery struct {
	// BaselineOKPerS is the fault-free ok-op rate of the whole workload
	// (ops/s); BaselineShards the same per shard.
	BaselineOKPerS float64            `json:"baseline_ok_per_s"`
	BaselineShards map[string]float64 `json:"baseline_shards,omitempty"`
	// BaselineFrom says how the baseline was measured.
	BaselineFrom string `json:"baseline_from"`
	// Share is RecoveryShare.
	Share float64 `json:"share"`
	// Faults: one row per healed injection, in heal order.
	Faults []FaultRecovery `json:"faults"`
	// Kinds: per fault kind, over the faults that were measured cleanly.
	Kinds []KindRecovery `json:"kinds"`
	// Note says why nothing could be measured ("" when measured).
	Note string `json:"note,omitempty"`
}

// FaultRecovery is one fault's recovery.
type FaultRecovery struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"`
	Shard  string `json:"shard,omitempty"`
	HealNS int64  `json:"heal_ns"`
	// Recovered: the rate was back before the load ended; RecoveryMS is
	// then the time from the heal until it was.
	Recovered  bool    `json:"recovered"`
	RecoveryMS float64 `json:"recovery_ms"`
	// Baseline is the fault-free rate it was measured against (ops/s).
	Baseline float64 `json:"baseline_ok_per_s"`
	// Overlapped names another fault that confounds the measurement.
	Overlapped string `json:"overlapped,omitempty"`
	// Unmeasurable: healed less than 2 s before the load ended.
	Unmeasurable bool `json:"unmeasurable,omitempty"`
}

// KindRecovery summarizes one kind: Measured counts the faults recovered
// without overlap, over which P50MS and MaxMS are taken; NotRecovered the
// faults without overlap that did not recover within the run; Overlapped
// the confounded ones; Unmeasurable those healed too close to the load's
// end.
type KindRecovery struct {
	Kind         string  `json:"kind"`
	Faults       int     `json:"faults"`
	Measured     int     `json:"measured"`
	P50MS        float64 `json:"p50_ms"`
	MaxMS        float64 `json:"max_ms"`
	NotRecovered int     `json:"not_recovered"`
	Overlapped   int     `json:"overlapped"`
	Unmeasurable int     `json:"unmeasurable"`
}

// recovery measures the availability under faults (see above).
func recovery(w *world) *Recovery {
	rc := &Recovery{Share: RecoveryShare, Faults: []FaultRecovery{}, Kinds: []KindRecovery{}}
	wins := w.windows()
	if len(w.h.Ops) == 0 {
		rc.Note = "no ops"
		return rc
	}
	// The load: from the first op to the last worker op.
	first, loadEnd := int64(math.MaxInt64), int64(0)
	for _, o := range w.h.Ops {
		first = min(first, o.T0)
		if strings.HasPrefix(o.Src, "w") {
			loadEnd = max(loadEnd, o.T1)
		}
	}
	if loadEnd == 0 {
		for _, o := range w.h.Ops {
			loadEnd = max(loadEnd, o.T1)
		}
	}
	slot := int64(recoverySlot)
	nSlots := int(loadEnd/slot) + 1
	okAll := make([]int, nSlots)
	okShard := map[string][]int{}
	for _, o := range w.h.Ops {
		if o.Outcome != OutcomeOK || o.T1 > loadEnd {
			continue
		}
		i := int(o.T1 / slot)
		okAll[i]++
		if o.Shard != "" {
			s := okShard[o.Shard]
			if s == nil {
				s = make([]int, nSlots)
				okShard[o.Shard] = s
			}
			s[i]++
		}
	}
	per := int(recoveryWindow / recoverySlot) // slots per rate window
	// rate is the ok ops/s in the window starting at slot i.
	rate := func(s []int, i int) float64 {
		n := 0
		for k := i; k < i+per && k < len(s); k++ {
			n += s[k]
		}
		return float64(n) / recoveryWindow.Seconds()
	}
	// The baseline.
	firstInject := int64(math.MaxInt64)
	for _, win := range wins {
		firstInject = min(firstInject, win.inject.T)
	}
	base := func(s []int) float64 { return 0 }
	switch {
	case firstInject == math.MaxInt64 || firstInject-first >= int64(baselineMin):
		hi := min(firstInject, loadEnd)
		lo := first
		d := float64(hi-lo) / 1e9
		rc.BaselineFrom = fmt.Sprintf("the ok-op rate before the first fault (%s..%s)", fmtNS(lo), fmtNS(hi))
		base = func(s []int) float64 {
			n := 0
			for i := int(lo / slot); i < int(hi/slot) && i < len(s); i++ {
				n += s[i]
			}
			return float64(n) / d
		}
	default:
		// 1 s windows with no fault active and none healed within
		// baselineQuiet before them.
		var quiet []int
		for i := int(first/slot) + per; i+per <= nSlots; i += per {
			from, to := int64(i)*slot, int64(i+per)*slot
			ok := true
			for _, win := range wins {
				if win.inject.T < to && win.to+int64(baselineQuiet) > from {
					ok = false
					break
				}
			}
			if ok {
				quiet = append(quiet, i)
			}
		}
		if len(quiet) == 0 {
			rc.Note = fmt.Sprintf("no fault-free period to measure a baseline on: less than %s before the first fault, and no 1 s window of the load without a fault active or healed in the %s before", baselineMin, baselineQuiet)
			return rc
		}
		rc.BaselineFrom = fmt.Sprintf("the median ok-op rate of %d fault-free 1 s windows (no fault active, none healed in the %s before; less than %s before the first fault)", len(quiet), baselineQuiet, baselineMin)
		base = func(s []int) float64 {
			r := make([]float64, len(quiet))
			for k, i := range quiet {
				r[k] = rate(s, i)
			}
			slices.Sort(r)
			return r[len(r)/2]
		}
	}
	rc.BaselineOKPerS = base(okAll)
	rc.BaselineShards = map[string]float64{}
	for sh, s := range okShard {
		rc.BaselineShards[sh] = base(s)
	}
	touches := func(a, b string) bool { return a == "" || b == "" || a == b }
	for _, win := range wins {
		f := win.inject
		if !healedIn(w, f.ID) {
			continue // never healed: nothing to recover from
		}
		fr := FaultRecovery{ID: f.ID, Kind: f.Kind, Shard: f.Shard, HealNS: win.to}
		s := okAll
		fr.Baseline = rc.BaselineOKPerS
		if f.Shard != "" {
			s = okShard[f.Shard]
			fr.Baseline = rc.BaselineShards[f.Shard]
		}
		until := loadEnd
		fr.Unmeasurable = win.to+int64(recoverySustain) > loadEnd
		if s != nil && fr.Baseline > 0 && !fr.Unmeasurable {
			need := RecoveryShare * fr.Baseline
			sustain := int(recoverySustain / recoveryWindow)
			for i := int((win.to + slot - 1) / slot); int64(i+sustain*per)*slot <= loadEnd; i++ {
				up := true
				for k := 0; k < sustain && up; k++ {
					up = rate(s, i+k*per) >= need
				}
				if up {
					fr.Recovered = true
					until = int64(i) * slot
					fr.RecoveryMS = float64(max(until-win.to, 0)) / 1e6
					break
				}
			}
		}
		for _, o := range wins {
			if o.inject.ID == f.ID || !touches(o.inject.Shard, f.Shard) {
				continue
			}
			active := o.inject.T <= win.to && o.to >= win.to
			during := o.inject.T > win.to && o.inject.T <= until
			if active || during {
				fr.Overlapped = o.inject.ID
				break
			}
		}
		rc.Faults = append(rc.Faults, fr)
	}
	sort.SliceStable(rc.Faults, func(i, j int) bool { return rc.Faults[i].HealNS < rc.Faults[j].HealNS })
	kinds := map[string]*KindRecovery{}
	times := map[string][]float64{}
	for _, fr := range rc.Faults {
		k := kinds[fr.Kind]
		if k == nil {
			k = &KindRecovery{Kind: fr.Kind}
			kinds[fr.Kind] = k
		}
		k.Faults++
		switch {
		case fr.Unmeasurable:
			k.Unmeasurable++
		case fr.Overlapped != "":
			k.Overlapped++
		case !fr.Recovered:
			k.NotRecovered++
		default:
			k.Measured++
			times[fr.Kind] = append(times[fr.Kind], fr.RecoveryMS)
		}
	}
	for _, k := range kinds {
		if t := times[k.Kind]; len(t) > 0 {
			slices.Sort(t)
			k.P50MS, k.MaxMS = t[(len(t)-1)/2], t[len(t)-1]
		}
		rc.Kinds = append(rc.Kinds, *k)
	}
	sort.Slice(rc.Kinds, func(i, j int) bool { return rc.Kinds[i].Kind < rc.Kinds[j].Kind })
	return rc
}

// healedIn reports whether the history has a heal line for fault id.
func healedIn(w *world, id string) bool {
	for _, f := range w.h.Faults {
		if f.ID == id && f.Phase == "heal" {
			return true
		}
	}
	return false
}

// fmtMS prints a recovery time.
func fmtMS(ms float64) string {
	if ms < 1000 {
		return fmt.Sprintf("%.0fms", ms)
	}
	return fmt.Sprintf("%.1fs", ms/1000)
}
