package loadgen

import (
	"context"
	"fmt"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// result assembles the Result once every goroutine of the run has ended.
func (r *runner) result(ctx context.Context) *Result {
	o := r.o
	stoppedAt := time.Unix(0, r.stoppedAt.Load())
	end := r.measureEnd
	if stoppedAt.Before(end) {
		end = stoppedAt
	}
	measured := max(end.Sub(r.measureStart), 0)
	label := o.Label
	if label == "" {
		label = o.Target
	}
	res := &Result{
		Version:         ResultVersion,
		Label:           label,
		Target:          o.Target,
		Shards:          r.loc.Shards(),
		Options:         o,
		Start:           r.start,
		WarmupSeconds:   o.Warmup.Seconds(),
		MeasuredSeconds: measured.Seconds(),
		Interrupted:     r.interrupted.Load(),
		Kinds:           map[string]*KindStats{},
		Windows:         r.windows,
		hists:           map[string]*hdr.Histogram{},
	}
	if res.Windows == nil {
		res.Windows = []Window{}
	}
	all := append(append([]*recorder(nil), r.recs...), r.relayRec)
	t := mergeRecorders(r.shards, all)
	for k, h := range t.kinds {
		if h.TotalCount() > 0 {
			name := Kind(k).String()
			res.Kinds[name] = kindStats(h)
			res.hists[name] = h
		}
	}
	commits := newHist()
	commits.Merge(t.kinds[KindFast])
	commits.Merge(t.kinds[KindComplex])
	if commits.TotalCount() > 0 {
		res.Kinds[KindCommit] = kindStats(commits)
		res.hists[KindCommit] = commits
	}
	res.Outcomes = t.counts
	for k, v := range t.counts {
		if k != OutcomeConflict && k != OutcomeRetry && k != "late" && k != "dropped" {
			res.Ops += v
		}
	}
	delete(res.Outcomes, "late")
	delete(res.Outcomes, "dropped")
	res.Errors = t.classes
	res.ErrorSamples = t.samples
	if s := measured.Seconds(); s > 0 {
		res.Throughput = float64(r.completedIn.Load()) / s
		res.CommitRate = float64(r.commitsIn.Load()) / s
	}
	var totalShardOps int64
	for _, n := range t.shardOps {
		totalShardOps += n
	}
	for i, name := range res.Shards {
		ss := ShardStats{Name: name, Ops: t.shardOps[i]}
		if totalShardOps > 0 {
			ss.Share = float64(ss.Ops) / float64(totalShardOps)
		}
		if t.shards[i].TotalCount() > 0 {
			ss.P50 = msOf(t.shards[i].ValueAtQuantile(50))
			ss.P99 = msOf(t.shards[i].ValueAtQuantile(99))
		}
		res.HottestShare = max(res.HottestShare, ss.Share)
		res.PerShard = append(res.PerShard, ss)
	}
	if o.Model == Open {
		res.OpenLoop = &OpenLoopStats{
			Rate: o.Rate, Intended: r.intended.Load(), Started: r.started.Load(),
			Late: r.late.Load(), LateThresholdMs: float64(o.LateThreshold) / 1e6,
			Dropped: r.dropped.Load(), MaxOutstanding: o.MaxOutstanding,
			LagP50: msOf(r.lag.ValueAtQuantile(50)), LagP99: msOf(r.lag.ValueAtQuantile(99)), LagMax: msOf(r.lag.Max()),
		}
	}
	res.Relays = RelayStats{
		OutboxDelivered: r.relays.delivered.Load(), OutboxDeduped: r.relays.deduped.Load(),
		SpawnsAcked: r.relays.spawns.Load(), TimersFired: r.relays.fired.Load(),
		TimersDeduped: r.relays.timerDeduped.Load(), Errors: r.relays.errors.Load(),
		OutboxBacklogStart: r.backlogStart,
	}
	if o.Relays && ctx.Err() == nil {
		bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if rows, err := r.t.PendingOutbox(bctx, 0); err == nil {
			res.Relays.OutboxBacklog = len(rows)
		}
		if o.Workload.Mix.Timer == 0 {
			// no sweeper ran
		} else if due, err := r.t.DueTimers(bctx, unixSeconds(time.Now()), 0); err == nil {
			res.Relays.TimerBacklog = len(due)
		}
		cancel()
	}
	res.Quiesce = r.quiesce
	res.Histograms = r.histograms(t)
	res.SelfCheck = r.checks.summary()
	if res.Ops > 0 {
		res.SelfCheck.GenCPUPerOpUS = res.SelfCheck.GenCPUSeconds * 1e6 / float64(res.Ops)
	}
	res.SelfCheck.Warnings = warnings(res.SelfCheck, res.OpenLoop)
	if lag := res.Kinds[KindOutboxLag.String()]; o.Relays && (res.Relays.OutboxBacklog > relayBatch || (lag != nil && lag.P99 > 1000)) {
		lagText := "none of this run's emits was delivered"
		if lag != nil {
			lagText = fmt.Sprintf("emit-to-delivery p99 %.0f ms", lag.P99)
		}
		res.SelfCheck.Warnings = append(res.SelfCheck.Warnings, fmt.Sprintf("the outbox relay fell behind (%d rows pending at the start, %d at the end; %s): raise relay_workers, or the commits measured outrun what the relays deliver",
			res.Relays.OutboxBacklogStart, res.Relays.OutboxBacklog, lagText))
	}
	return res
}

// histograms encodes the run's histograms for result.json (nil if one
// could not be encoded: the result is still complete, only not mergeable).
func (r *runner) histograms(t *totals) *Histograms {
	hs := &Histograms{Kinds: map[string]string{}, Shards: make([]string, len(t.shards)), Windows: r.windowHists}
	if hs.Windows == nil {
		hs.Windows = []string{}
	}
	var err error
	for k, h := range t.kinds {
		if h.TotalCount() > 0 {
			if hs.Kinds[Kind(k).String()], err = encodeHist(h); err != nil {
				return nil
			}
		}
	}
	for i, h := range t.shards {
		if hs.Shards[i], err = encodeHist(h); err != nil {
			return nil
		}
	}
	if r.o.Model == Open {
		if hs.Lag, err = encodeHist(r.lag); err != nil {
			return nil
		}
	}
	if len(hs.Windows) != len(r.windows) {
		return nil
	}
	return hs
}
