package loadgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// MergeResults merges the results of the N parts of one run (each made
// with Options.ForPart, see Part) into one result of the same form as a
// single run's, without loss:
//   - every latency histogram (per kind, per shard, per window, the
//     dispatcher's lag) is the HDR merge of the parts' histograms, so its
//     percentiles are those of all the operations recorded into one;
//   - counts (operations, outcomes, errors, relays, open-loop arrivals)
//     and rates (throughput, commit rate, offered rate) are summed;
//   - the per-shard table sums the parts' operations per shard;
//   - windows are aligned by wall clock: each part's window goes to the
//     1-second slot (from the earliest part's start) holding its middle,
//     and a slot's rate is the sum of the parts' rates in it;
//   - the self-check keeps each part's warnings (prefixed with the part)
//     and sums the generators' CPUs and CPU time.
//
// Every part 0..N-1 must be given once, and the parts must come from the
// same run: the same target, shards and options (the part's own index,
// label, run id and share of the workers or operations aside). Anything
// else is an error naming the difference.
func MergeResults(parts []*Result) (*Result, error) {
	if len(parts) == 0 {
		return nil, errors.New("merge: no results")
	}
	n := parts[0].Options.Part.Count
	byIndex := make([]*Result, max(n, 0))
	for i, p := range parts {
		pt := p.Options.Part
		switch {
		case pt.Whole():
			return nil, fmt.Errorf("merge: result %d (%s) is a whole run, not a part (made without --part)", i+1, p.Label)
		case pt.Count != n:
			return nil, fmt.Errorf("merge: result %d is part %s, result 1 is part %s: the parts of one run share N", i+1, pt, parts[0].Options.Part)
		case pt.Validate() != nil:
			return nil, fmt.Errorf("merge: result %d: %w", i+1, pt.Validate())
		case byIndex[pt.Index] != nil:
			return nil, fmt.Errorf("merge: part %s is given twice", pt)
		case p.Histograms == nil:
			return nil, fmt.Errorf("merge: part %s has no histograms in its result (written by an older pgshard): it cannot be merged without loss", pt)
		}
		if d := differences(parts[0], p); len(d) > 0 {
			return nil, fmt.Errorf("merge: part %s is not from the same run as part %s: %s differ", pt, parts[0].Options.Part, strings.Join(d, ", "))
		}
		byIndex[pt.Index] = p
	}
	var missing []string
	for i, p := range byIndex {
		if p == nil {
			missing = append(missing, fmt.Sprintf("%d/%d", i, n))
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("merge: parts %s are missing (every part 0..%d is needed)", strings.Join(missing, ", "), n-1)
	}
	return merge(byIndex)
}

// differences names what makes b another run than a.
func differences(a, b *Result) []string {
	var d []string
	if a.Version != b.Version {
		d = append(d, "result versions")
	}
	if a.Target != b.Target {
		d = append(d, fmt.Sprintf("targets (%s, %s)", a.Target, b.Target))
	}
	if !reflect.DeepEqual(a.Shards, b.Shards) {
		d = append(d, fmt.Sprintf("shard maps (%v, %v)", a.Shards, b.Shards))
	}
	oa, ob := runOptions(a.Options), runOptions(b.Options)
	for k, va := range oa {
		if !reflect.DeepEqual(va, ob[k]) {
			d = append(d, fmt.Sprintf("options %s (%v, %v)", k, va, ob[k]))
		}
	}
	sort.Strings(d)
	return d
}

// runOptions is o as a map of its settings that the parts of one run
// share (the workload's by their own names).
func runOptions(o Options) map[string]any {
	o.Part, o.Label, o.RunID, o.Concurrency, o.Ops = Part{}, "", "", 0, 0
	b, _ := json.Marshal(o)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if w, ok := m["workload"].(map[string]any); ok {
		delete(m, "workload")
		for k, v := range w {
			m["workload."+k] = v
		}
	}
	return m
}

// partSum folds the parts' histograms.
type partSum struct {
	kinds  map[string]*hdr.Histogram
	shards []*hdr.Histogram
	lag    *hdr.Histogram
}

func merge(parts []*Result) (*Result, error) {
	first := parts[0]
	res := &Result{
		Version: ResultVersion, Label: first.Label, Target: first.Target, Shards: first.Shards,
		Options: first.Options, Start: first.Start, WarmupSeconds: first.WarmupSeconds,
		Kinds: map[string]*KindStats{}, Outcomes: map[string]int64{}, Errors: map[string]int64{},
		hists: map[string]*hdr.Histogram{},
	}
	res.Options.Part, res.Options.RunID = Part{}, ""
	res.Options.Rate, res.Options.Concurrency, res.Options.MaxOutstanding, res.Options.Ops = 0, 0, 0, 0
	sum := partSum{kinds: map[string]*hdr.Histogram{}, shards: make([]*hdr.Histogram, len(first.Shards)), lag: newHist()}
	for i := range sum.shards {
		sum.shards[i] = newHist()
	}
	shardOps := make([]int64, len(first.Shards))
	var measureFrom, measureTo time.Time
	sc := SelfCheck{Warnings: []string{}}
	var hostSum float64
	for i, p := range parts {
		name := "part " + p.Options.Part.String()
		if err := sum.add(p); err != nil {
			return nil, fmt.Errorf("merge: %s: %w", name, err)
		}
		if len(p.PerShard) != len(first.Shards) {
			return nil, fmt.Errorf("merge: %s: %d shards in its table, %d in its map", name, len(p.PerShard), len(first.Shards))
		}
		o := p.Options
		res.Options.Rate += o.Rate
		res.Options.Concurrency += o.Concurrency
		res.Options.MaxOutstanding += o.MaxOutstanding
		res.Options.Ops += o.Ops
		if p.Start.Before(res.Start) {
			res.Start = p.Start
		}
		from := p.Start.Add(time.Duration(p.WarmupSeconds * float64(time.Second)))
		to := from.Add(time.Duration(p.MeasuredSeconds * float64(time.Second)))
		if i == 0 || from.Before(measureFrom) {
			measureFrom = from
		}
		if to.After(measureTo) {
			measureTo = to
		}
		res.SetupSeconds = max(res.SetupSeconds, p.SetupSeconds)
		res.Interrupted = res.Interrupted || p.Interrupted
		res.Ops += p.Ops
		res.Throughput += p.Throughput
		res.CommitRate += p.CommitRate
		addCounts(res.Outcomes, p.Outcomes)
		addCounts(res.Errors, p.Errors)
		for _, s := range p.ErrorSamples {
			if len(res.ErrorSamples) < maxErrorSamples {
				res.ErrorSamples = append(res.ErrorSamples, name+": "+s)
			}
		}
		for j, s := range p.PerShard {
			shardOps[j] += s.Ops
		}
		if ol := p.OpenLoop; ol != nil {
			if res.OpenLoop == nil {
				res.OpenLoop = &OpenLoopStats{LateThresholdMs: ol.LateThresholdMs}
			}
			m := res.OpenLoop
			m.Rate += ol.Rate
			m.Intended += ol.Intended
			m.Started += ol.Started
			m.Late += ol.Late
			m.Dropped += ol.Dropped
			m.MaxOutstanding += ol.MaxOutstanding
		}
		rl, pr := &res.Relays, p.Relays
		rl.OutboxDelivered += pr.OutboxDelivered
		rl.OutboxDeduped += pr.OutboxDeduped
		rl.SpawnsAcked += pr.SpawnsAcked
		rl.TimersFired += pr.TimersFired
		rl.TimersDeduped += pr.TimersDeduped
		rl.Errors += pr.Errors
		// The parts share one database: its backlog is no sum.
		rl.OutboxBacklogStart = max(rl.OutboxBacklogStart, pr.OutboxBacklogStart)
		rl.OutboxBacklog = max(rl.OutboxBacklog, pr.OutboxBacklog)
		rl.TimerBacklog = max(rl.TimerBacklog, pr.TimerBacklog)
		ps := p.SelfCheck
		sc.CPUs += ps.CPUs
		sc.GenCPUSeconds += ps.GenCPUSeconds
		hostSum += ps.HostCPU
		sc.Load1Max = max(sc.Load1Max, ps.Load1Max)
		sc.SchedP99 = max(sc.SchedP99, ps.SchedP99)
		sc.SchedMax = max(sc.SchedMax, ps.SchedMax)
		if ps.CPUs > 0 {
			sc.GenCPU += ps.GenCPU * float64(ps.CPUs) // CPUs busy, divided by all CPUs below
		}
		for _, w := range ps.Warnings {
			sc.Warnings = append(sc.Warnings, name+": "+w)
		}
		res.Parts = append(res.Parts, PartRun{Part: p.Options.Part, Label: p.Label, Start: p.Start, Ops: p.Ops})
	}
	res.MeasuredSeconds = max(measureTo.Sub(measureFrom), 0).Seconds()
	if sc.CPUs > 0 {
		sc.GenCPU /= float64(sc.CPUs)
	}
	sc.HostCPU = hostSum / float64(len(parts))
	if res.Ops > 0 {
		sc.GenCPUPerOpUS = sc.GenCPUSeconds * 1e6 / float64(res.Ops)
	}
	res.SelfCheck = sc
	if len(res.ErrorSamples) == 0 {
		res.ErrorSamples = nil
	}

	for name, h := range sum.kinds {
		res.Kinds[name] = kindStats(h)
		res.hists[name] = h
	}
	commits := newHist()
	for _, k := range []Kind{KindFast, KindComplex} {
		if h := sum.kinds[k.String()]; h != nil {
			commits.Merge(h)
		}
	}
	if commits.TotalCount() > 0 {
		res.Kinds[KindCommit] = kindStats(commits)
		res.hists[KindCommit] = commits
	}
	var total int64
	for _, n := range shardOps {
		total += n
	}
	for i, name := range res.Shards {
		ss := ShardStats{Name: name, Ops: shardOps[i]}
		if total > 0 {
			ss.Share = float64(ss.Ops) / float64(total)
		}
		if h := sum.shards[i]; h.TotalCount() > 0 {
			ss.P50, ss.P99 = msOf(h.ValueAtQuantile(50)), msOf(h.ValueAtQuantile(99))
		}
		res.HottestShare = max(res.HottestShare, ss.Share)
		res.PerShard = append(res.PerShard, ss)
	}
	if m := res.OpenLoop; m != nil {
		m.LagP50, m.LagP99, m.LagMax = msOf(sum.lag.ValueAtQuantile(50)), msOf(sum.lag.ValueAtQuantile(99)), msOf(sum.lag.Max())
	}
	windows, whists, err := mergeWindows(res.Start, parts)
	if err != nil {
		return nil, err
	}
	res.Windows = windows
	hs := &Histograms{Kinds: map[string]string{}, Shards: make([]string, len(sum.shards)), Windows: make([]string, len(whists))}
	for name, h := range sum.kinds {
		if hs.Kinds[name], err = encodeHist(h); err != nil {
			return nil, err
		}
	}
	for i, h := range sum.shards {
		if hs.Shards[i], err = encodeHist(h); err != nil {
			return nil, err
		}
	}
	for i, h := range whists {
		if hs.Windows[i], err = encodeHist(h); err != nil {
			return nil, err
		}
	}
	if res.OpenLoop != nil {
		if hs.Lag, err = encodeHist(sum.lag); err != nil {
			return nil, err
		}
	}
	res.Histograms = hs
	return res, nil
}

func (s *partSum) add(p *Result) error {
	hs := p.Histograms
	for name, enc := range hs.Kinds {
		if name == KindCommit {
			continue // derived
		}
		h, err := decodeHist(enc)
		if err != nil {
			return fmt.Errorf("kind %s: %w", name, err)
		}
		if h.TotalCount() == 0 {
			continue
		}
		if s.kinds[name] == nil {
			s.kinds[name] = newHist()
		}
		s.kinds[name].Merge(h)
	}
	if len(hs.Shards) != len(s.shards) {
		return fmt.Errorf("%d shard histograms for %d shards", len(hs.Shards), len(s.shards))
	}
	for i, enc := range hs.Shards {
		h, err := decodeHist(enc)
		if err != nil {
			return fmt.Errorf("shard %d: %w", i, err)
		}
		s.shards[i].Merge(h)
	}
	h, err := decodeHist(hs.Lag)
	if err != nil {
		return fmt.Errorf("dispatch lag: %w", err)
	}
	s.lag.Merge(h)
	return nil
}

func addCounts(into, from map[string]int64) {
	for k, v := range from {
		into[k] += v
	}
}

// slot is one merged window: per part, the operations and time of its
// windows whose middle falls in the slot.
type slot struct {
	w           Window
	h           *hdr.Histogram
	ops, secs   map[int]float64 // by part
	gen, host   float64         // sums over the windows
	warm, parts int             // windows in warm-up, windows
}

// mergeWindows aligns the parts' windows by wall clock on 1-second slots
// counted from start (the earliest part's start).
func mergeWindows(start time.Time, parts []*Result) ([]Window, []*hdr.Histogram, error) {
	slots := map[int]*slot{}
	for pi, p := range parts {
		if len(p.Histograms.Windows) != len(p.Windows) {
			return nil, nil, fmt.Errorf("merge: part %s: %d window histograms for %d windows", p.Options.Part, len(p.Histograms.Windows), len(p.Windows))
		}
		offset := p.Start.Sub(start).Seconds()
		prevT := 0.0
		for j, w := range p.Windows {
			d := w.T - prevT
			prevT = w.T
			mid := offset + w.T - d/2
			k := int(math.Floor(mid))
			s := slots[k]
			if s == nil {
				s = &slot{w: Window{T: float64(k + 1)}, h: newHist(), ops: map[int]float64{}, secs: map[int]float64{}}
				slots[k] = s
			}
			h, err := decodeHist(p.Histograms.Windows[j])
			if err != nil {
				return nil, nil, fmt.Errorf("merge: part %s: window %d: %w", p.Options.Part, j, err)
			}
			s.h.Merge(h)
			s.ops[pi] += w.Rate * d
			s.secs[pi] += d
			s.w.Conflicts += w.Conflicts
			s.w.Errors += w.Errors
			s.w.Dropped += w.Dropped
			s.w.Late += w.Late
			s.w.InFlight += w.InFlight
			s.w.Load1 = max(s.w.Load1, w.Load1)
			s.w.SchedP99 = max(s.w.SchedP99, w.SchedP99)
			s.w.LagP99 = max(s.w.LagP99, w.LagP99)
			s.gen += w.GenCPU
			s.host += w.HostCPU
			s.parts++
			if w.Warmup {
				s.warm++
			}
		}
	}
	keys := make([]int, 0, len(slots))
	for k := range slots {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	out := make([]Window, 0, len(keys))
	hists := make([]*hdr.Histogram, 0, len(keys))
	for _, k := range keys {
		s := slots[k]
		w := s.w
		for pi, ops := range s.ops {
			if sec := s.secs[pi]; sec > 0 {
				w.Rate += ops / sec
			}
		}
		w.Warmup = s.warm == s.parts
		w.GenCPU, w.HostCPU = s.gen/float64(s.parts), s.host/float64(s.parts)
		w.P50, w.P99, w.Max = msOf(s.h.ValueAtQuantile(50)), msOf(s.h.ValueAtQuantile(99)), msOf(s.h.Max())
		out = append(out, w)
		hists = append(hists, s.h)
	}
	return out, hists, nil
}
