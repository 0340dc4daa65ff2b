package loadgen

import (
	"context"
	"fmt"
	"math"
)

// SweepOptions configure a sweep: one run per step, each warmed up and
// measured, over the same executions.
type SweepOptions struct {
	// Base is every step's options; Base.Model says whether Steps are
	// concurrencies (closed) or rates (open).
	Base Options
	// Steps lists the concurrencies or rates, in increasing order.
	Steps []float64
	// SLO decides the knee: the step of highest throughput that meets it.
	SLO SLO
	// TargetRate, when > 0, asks the capacity model for a shard count.
	TargetRate float64
	// Headroom is the share of a shard's capacity kept free.
	Headroom float64
	// Buckets is the shard map's bucket count, for the key model
	// (0: no key model, the measured skew is assumed to hold).
	Buckets int
	// StepDone, when set, is called after each step.
	StepDone func(i int, res *Result)
}

// SweepStep is one measured step.
type SweepStep struct {
	// X is the step's concurrency (closed loop) or rate (open loop).
	X            float64  `json:"x"`
	Throughput   float64  `json:"throughput"`
	CommitRate   float64  `json:"commit_rate"`
	P50          float64  `json:"p50_ms"`
	P99          float64  `json:"p99_ms"`
	P999         float64  `json:"p999_ms"`
	Errors       int64    `json:"errors"`
	Conflicts    int64    `json:"conflicts"`
	HottestShare float64  `json:"hottest_share"`
	SLOMet       bool     `json:"slo_met"`
	SLOWorst     float64  `json:"slo_worst_ratio"`
	Interrupted  bool     `json:"interrupted,omitempty"`
	Warnings     []string `json:"warnings"`
	// Dir is where the step's reports are (set by the caller).
	Dir string `json:"dir,omitempty"`
}

// Sweep is a sweep's result.
type Sweep struct {
	Version     int         `json:"version"`
	Label       string      `json:"label"`
	Target      string      `json:"target"`
	Model       Model       `json:"model"`
	Shards      []string    `json:"shards"`
	Options     Options     `json:"options"`
	SLO         string      `json:"slo"`
	Steps       []SweepStep `json:"steps"`
	Interrupted bool        `json:"interrupted"`
	// Knee is the index in Steps of the highest throughput within the SLO
	// (-1: no step met it).
	Knee int `json:"knee"`
	// USL is the fit of throughput to concurrency (closed loop, 3+ steps).
	USL      *USL   `json:"usl,omitempty"`
	USLError string `json:"usl_error,omitempty"`
	// Capacity is the capacity model's answer (when a target rate was given).
	Capacity      *Capacity `json:"capacity,omitempty"`
	CapacityError string    `json:"capacity_error,omitempty"`
}

// RunSweep creates the executions once, runs every step and analyses the
// steps: knee, USL fit and capacity. On cancellation it returns the steps
// done so far (Interrupted) with ctx's error.
func RunSweep(ctx context.Context, t Target, loc Locator, so SweepOptions) (*Sweep, error) {
	if len(so.Steps) == 0 {
		return nil, fmt.Errorf("sweep: no steps")
	}
	if len(so.SLO) == 0 {
		return nil, fmt.Errorf("sweep: an SLO is needed to find the knee (e.g. p99=50ms)")
	}
	for i, x := range so.Steps {
		o := stepOptions(so.Base, x)
		if err := o.Validate(); err != nil {
			return nil, fmt.Errorf("sweep step %d (%g): %w", i+1, x, err)
		}
		if i > 0 && x <= so.Steps[i-1] {
			return nil, fmt.Errorf("sweep: steps must increase (%g after %g)", x, so.Steps[i-1])
		}
	}
	if loc == nil {
		loc = SingleShard("all")
	}
	sw := &Sweep{Version: ResultVersion, Label: so.Base.Label, Target: so.Base.Target, Model: so.Base.Model,
		Shards: loc.Shards(), Options: so.Base, SLO: so.SLO.String(), Knee: -1}
	if sw.Label == "" {
		sw.Label = sw.Target
	}
	if !so.Base.SkipSetup {
		if err := Setup(ctx, withTimeout(t, so.Base.OpTimeout), so.Base.Workload, 16); err != nil {
			return nil, err
		}
	}
	for i, x := range so.Steps {
		o := stepOptions(so.Base, x)
		o.SkipSetup = true
		o.Label = fmt.Sprintf("%s %s", sw.Label, stepName(so.Base.Model, x))
		res, err := Run(ctx, t, loc, o)
		if res != nil {
			sw.Steps = append(sw.Steps, stepOf(x, res, so.SLO))
			if so.StepDone != nil {
				so.StepDone(i, res)
			}
		}
		if err != nil {
			sw.Interrupted = true
			sw.analyse(so)
			return sw, err
		}
	}
	sw.analyse(so)
	return sw, nil
}

func stepOptions(base Options, x float64) Options {
	o := base
	if o.Model == Open {
		o.Rate = x
	} else {
		o.Concurrency = int(math.Round(x))
	}
	return o
}

func stepName(m Model, x float64) string {
	if m == Open {
		return fmt.Sprintf("rate=%s", fmtNum(x))
	}
	return fmt.Sprintf("c=%d", int(x))
}

func stepOf(x float64, res *Result, slo SLO) SweepStep {
	s := SweepStep{X: x, Throughput: res.Throughput, CommitRate: res.CommitRate, Errors: res.ErrorCount(),
		Conflicts: res.Outcomes[OutcomeConflict], HottestShare: res.HottestShare, Interrupted: res.Interrupted,
		Warnings: res.SelfCheck.Warnings}
	if k := res.Kinds["op"]; k != nil {
		s.P50, s.P99, s.P999 = k.P50, k.P99, k.P999
	}
	s.SLOMet, s.SLOWorst = slo.Met(res)
	if s.Interrupted || s.Errors > 0 {
		s.SLOMet = false // a step with errors or cut short is not a capacity
	}
	return s
}

// analyse finds the knee, fits the USL and runs the capacity model.
func (sw *Sweep) analyse(so SweepOptions) {
	for i, s := range sw.Steps {
		if s.SLOMet && (sw.Knee < 0 || s.Throughput > sw.Steps[sw.Knee].Throughput) {
			sw.Knee = i
		}
	}
	if sw.Model == Closed {
		var n, x []float64
		for _, s := range sw.Steps {
			if !s.Interrupted {
				n = append(n, s.X)
				x = append(x, s.Throughput)
			}
		}
		if u, err := FitUSL(n, x); err != nil {
			sw.USLError = err.Error()
		} else {
			sw.USL = &u
		}
	}
	if so.TargetRate > 0 {
		if sw.Knee < 0 {
			sw.CapacityError = fmt.Sprintf("no step met the SLO %s: lower the concurrency steps or relax the SLO", sw.SLO)
			return
		}
		k := sw.Steps[sw.Knee]
		in := CapacityInput{MeasuredShards: len(sw.Shards), KneeCommitRate: k.CommitRate, HottestShare: k.HottestShare,
			TargetRate: so.TargetRate, Headroom: so.Headroom}
		if so.Buckets > 0 {
			in.BucketMass = BucketMass(so.Base.Workload, so.Buckets)
		}
		c, err := PlanCapacity(in)
		if err != nil {
			sw.CapacityError = err.Error()
			return
		}
		c.Assumptions = sw.assumptions(so, k)
		sw.Capacity = c
	}
}

func (sw *Sweep) assumptions(so SweepOptions, knee SweepStep) []string {
	a := []string{
		fmt.Sprintf("per-shard capacity = the hottest shard's load at the knee (%s: %s commits/s × %.1f%% share) while every operation met %s; the true limit lies between the knee and the next step",
			stepName(sw.Model, knee.X), fmtNum(knee.CommitRate), 100*knee.HottestShare, sw.SLO),
		fmt.Sprintf("\"a shard of this kind\" is one of the %d measured shards as it ran here, sharing this machine's CPUs with the other shards, their poolers and the generator; a shard on its own hardware is at least as fast, so the count is conservative for that hardware", len(sw.Shards)),
		"shards are independent: each commit touches one shard, so cluster capacity is the sum over shards, limited by the hottest one",
		fmt.Sprintf("the traffic keeps this run's mix, payload (%d bytes) and key distribution (%s over %d executions); commits/s counts worker commits and relay commits (outbox deliveries, timer fires)",
			so.Base.Workload.PayloadBytes, so.Base.Workload.Keys, so.Base.Workload.Executions),
		fmt.Sprintf("headroom: shards are planned to run at most %.0f%% of their capacity at the SLO", 100*(1-so.Headroom)),
	}
	if so.Buckets > 0 {
		a = append(a, fmt.Sprintf("skew: buckets (B=%d) are split evenly in contiguous ranges over n shards; each shard's share is the key distribution's mass on its buckets", so.Buckets))
	} else {
		a = append(a, "skew: no shard map was known, so the measured ratio of hottest to mean shard load is assumed at every shard count")
	}
	if len(knee.Warnings) > 0 {
		a = append(a, "the knee step had self-check warnings (see its report): the generator or the machine may have limited it, so the capacity may be understated")
	}
	return a
}
