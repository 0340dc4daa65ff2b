package loadgen

import (
	"fmt"
	"math"

	"github.com/pgshard/pgshard/shardmap"
)

// MaxPlannedShards bounds the capacity model's answer (shard ordinals are
// 0..1023).
const MaxPlannedShards = shardmap.MaxOrdinal + 1

// CapacityInput is what the capacity model needs from a sweep.
type CapacityInput struct {
	// MeasuredShards is the shard count of the measured cluster.
	MeasuredShards int
	// KneeCommitRate is the cluster's commit rate at the knee.
	KneeCommitRate float64
	// HottestShare is the busiest shard's measured share of operations at
	// the knee.
	HottestShare float64
	// BucketMass is each bucket's share of the traffic from the key
	// distribution (nil: assume the measured skew ratio holds at any size).
	BucketMass []float64
	// TargetRate is the commits per second to plan for.
	TargetRate float64
	// Headroom is the share of each shard's capacity kept free (0.3 = run
	// shards at most 70% of their capacity at the SLO).
	Headroom float64
}

// Capacity is the capacity model's answer.
type Capacity struct {
	MeasuredShards int     `json:"measured_shards"`
	KneeCommitRate float64 `json:"knee_commit_rate"`
	// HottestShareMeasured is the busiest shard's measured share.
	HottestShareMeasured float64 `json:"hottest_share_measured"`
	// HottestShareModel is the busiest shard's share the key model
	// predicts for the measured shard count (a cross-check).
	HottestShareModel float64 `json:"hottest_share_model"`
	// PerShardCapacity is the commits per second one shard sustained
	// within the SLO: the hottest shard's load at the knee.
	PerShardCapacity float64 `json:"per_shard_capacity"`
	TargetRate       float64 `json:"target_rate"`
	Headroom         float64 `json:"headroom"`
	// ShardsNeeded is the answer, 0 when no shard count can meet the
	// target (one bucket's traffic alone exceeds a shard's capacity).
	ShardsNeeded int `json:"shards_needed"`
	// HottestShareNeeded is the hottest shard's share at ShardsNeeded.
	HottestShareNeeded float64 `json:"hottest_share_needed"`
	// HottestBucketShare is the largest single bucket's share of traffic
	// (the floor under any shard's share).
	HottestBucketShare float64        `json:"hottest_bucket_share"`
	Plan               []CapacityPlan `json:"plan"`
	Verdict            string         `json:"verdict"`
	Assumptions        []string       `json:"assumptions"`
}

// CapacityPlan is the hottest shard's load at one shard count.
type CapacityPlan struct {
	Shards       int     `json:"shards"`
	HottestShare float64 `json:"hottest_share"`
	// HottestLoad is the commits/s the hottest shard would take at the
	// target rate.
	HottestLoad float64 `json:"hottest_load"`
	// Utilization is HottestLoad over the per-shard capacity at the SLO.
	Utilization float64 `json:"utilization"`
}

// hottestShare returns the largest share of traffic that one of n shards
// gets when the buckets are split into n contiguous, even ranges (as
// shardmap.Even splits them).
func hottestShare(mass []float64, n int) float64 {
	b := len(mass)
	if n > b {
		n = b
	}
	var best float64
	lo := 0
	for i := 0; i < n; i++ {
		size := b / n
		if i < b%n {
			size++
		}
		var s float64
		for _, m := range mass[lo : lo+size] {
			s += m
		}
		best = math.Max(best, s)
		lo += size
	}
	return best
}

// BucketMass returns each of b buckets' share of a workload's traffic, from
// its key distribution over its execution ids.
func BucketMass(w Workload, b int) []float64 {
	ids := ExecutionIDs(w.Seed, w.Executions)
	km := keyMass(w.Keys, w.Executions)
	mass := make([]float64, b)
	for i, id := range ids {
		mass[shardmap.BucketText(id, b)] += km[i]
	}
	return mass
}

// PlanCapacity answers "how many shards for in.TargetRate commits/s within
// the SLO": the smallest n whose hottest shard's load, target × share(n),
// stays within the per-shard capacity × (1 − headroom).
func PlanCapacity(in CapacityInput) (*Capacity, error) {
	if in.MeasuredShards < 1 || !(in.KneeCommitRate > 0) || !(in.HottestShare > 0) {
		return nil, fmt.Errorf("capacity: no step met the SLO with a positive commit rate")
	}
	if !(in.TargetRate > 0) {
		return nil, fmt.Errorf("capacity: the target rate must be positive")
	}
	if in.Headroom < 0 || in.Headroom >= 1 {
		return nil, fmt.Errorf("capacity: headroom must be in [0, 1) (got %g)", in.Headroom)
	}
	c := &Capacity{
		MeasuredShards: in.MeasuredShards, KneeCommitRate: in.KneeCommitRate,
		HottestShareMeasured: in.HottestShare, TargetRate: in.TargetRate, Headroom: in.Headroom,
		PerShardCapacity: in.KneeCommitRate * in.HottestShare,
	}
	share := func(n int) float64 {
		if in.BucketMass != nil {
			return hottestShare(in.BucketMass, n)
		}
		// Without a key model: the measured skew (hottest / mean) holds.
		return math.Min(1, in.HottestShare*float64(in.MeasuredShards)/float64(n))
	}
	if in.BucketMass != nil {
		c.HottestShareModel = hottestShare(in.BucketMass, in.MeasuredShards)
		for _, m := range in.BucketMass {
			c.HottestBucketShare = math.Max(c.HottestBucketShare, m)
		}
	} else {
		c.HottestShareModel = in.HottestShare
	}
	usable := c.PerShardCapacity * (1 - in.Headroom)
	for n := 1; n <= MaxPlannedShards; n++ {
		h := share(n)
		if in.TargetRate*h <= usable {
			c.ShardsNeeded, c.HottestShareNeeded = n, h
			break
		}
	}
	seen := map[int]bool{}
	for _, n := range []int{1, 2, in.MeasuredShards, c.ShardsNeeded - 1, c.ShardsNeeded, c.ShardsNeeded + 1, 2 * max(c.ShardsNeeded, in.MeasuredShards)} {
		if n < 1 || n > MaxPlannedShards || seen[n] {
			continue
		}
		seen[n] = true
		h := share(n)
		c.Plan = append(c.Plan, CapacityPlan{Shards: n, HottestShare: h, HottestLoad: in.TargetRate * h, Utilization: in.TargetRate * h / c.PerShardCapacity})
	}
	sortPlan(c.Plan)
	if c.ShardsNeeded > 0 {
		c.Verdict = fmt.Sprintf("%d shards for %s commits/s: the hottest shard takes %.1f%% of traffic = %s commits/s, %.0f%% of the %s commits/s one shard sustained within the SLO (headroom %.0f%%)",
			c.ShardsNeeded, fmtNum(in.TargetRate), 100*c.HottestShareNeeded, fmtNum(in.TargetRate*c.HottestShareNeeded),
			100*in.TargetRate*c.HottestShareNeeded/c.PerShardCapacity, fmtNum(c.PerShardCapacity), 100*in.Headroom)
	} else if in.TargetRate*c.HottestBucketShare > usable {
		c.Verdict = fmt.Sprintf("no shard count meets %s commits/s: the hottest bucket alone gets %.2f%% of the traffic (%s commits/s), more than one shard sustains within the SLO (%s commits/s with %.0f%% headroom); reduce the key skew",
			fmtNum(in.TargetRate), 100*c.HottestBucketShare, fmtNum(in.TargetRate*c.HottestBucketShare), fmtNum(usable), 100*in.Headroom)
	} else {
		h := share(MaxPlannedShards)
		c.Verdict = fmt.Sprintf("no shard count up to %d meets %s commits/s: even then the hottest shard gets %.2f%% of the traffic (%s commits/s, above the %s commits/s one shard sustains with %.0f%% headroom): the traffic is concentrated on too few keys to spread (more executions, or less skew)",
			MaxPlannedShards, fmtNum(in.TargetRate), 100*h, fmtNum(in.TargetRate*h), fmtNum(usable), 100*in.Headroom)
	}
	return c, nil
}

func sortPlan(p []CapacityPlan) {
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && p[j].Shards < p[j-1].Shards; j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
}
