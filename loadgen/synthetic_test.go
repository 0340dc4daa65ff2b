package loadgen_test

import (
	"time"

	"github.com/pgshard/pgshard/loadgen"
)

// syntheticResult is a fixed result for golden files and thresholds.
func syntheticResult() *loadgen.Result {
	o := loadgen.DefaultOptions()
	o.Target = "direct"
	o.Concurrency = 16
	o.Warmup = 5 * time.Second
	o.Duration = 30 * time.Second
	spec := func(p50, p99, max float64) []loadgen.SpectrumPoint {
		return []loadgen.SpectrumPoint{{Percentile: 0, Ms: p50 / 4}, {Percentile: 50, Ms: p50}, {Percentile: 90, Ms: (p50 + p99) / 2},
			{Percentile: 99, Ms: p99}, {Percentile: 99.9, Ms: (p99 + max) / 2}, {Percentile: 100, Ms: max}}
	}
	kind := func(n int64, mean, p50, p99, max float64) *loadgen.KindStats {
		return &loadgen.KindStats{Count: n, Mean: mean, Min: p50 / 4, P50: p50, P90: (p50 + p99) / 2, P99: p99,
			P999: (p99 + max) / 2, Max: max, Stddev: mean / 2, Spectrum: spec(p50, p99, max)}
	}
	return &loadgen.Result{
		Version: loadgen.ResultVersion, Label: "direct", Target: "direct",
		Shards: []string{"shard0", "shard1", "shard2", "shard3"}, Options: o,
		Start:        time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		SetupSeconds: 2.5, WarmupSeconds: 5, MeasuredSeconds: 30,
		Ops: 36000, Throughput: 1200, CommitRate: 1100,
		Kinds: map[string]*loadgen.KindStats{
			"op":             kind(36000, 13, 12, 40, 120),
			"load":           kind(37000, 1.2, 1, 4, 30),
			"commit":         kind(33000, 10.5, 10, 30, 110),
			"fast_commit":    kind(20000, 8.2, 8, 20, 90),
			"complex_commit": kind(13000, 14, 14, 35, 110),
		},
		Outcomes: map[string]int64{"ok": 34000, "dedupe_hit": 1800, "conflict": 250, "retry": 248, "gave_up": 2, "error": 3},
		Errors:   map[string]int64{"sqlstate_40": 2, "timeout": 1},
		PerShard: []loadgen.ShardStats{
			{Name: "shard0", Ops: 9360, Share: 0.26, P50: 12, P99: 41},
			{Name: "shard1", Ops: 8640, Share: 0.24, P50: 11, P99: 39},
			{Name: "shard2", Ops: 9000, Share: 0.25, P50: 12, P99: 40},
			{Name: "shard3", Ops: 9000, Share: 0.25, P50: 12, P99: 40},
		},
		HottestShare: 0.26,
		Windows: []loadgen.Window{
			{T: 1, Warmup: true, Rate: 900, P50: 11, P99: 50, Max: 80},
			{T: 6, Rate: 1200, P50: 12, P99: 40, Max: 100, Conflicts: 8, GenCPU: 0.2, HostCPU: 0.85, Load1: 2.5},
		},
		Relays:    loadgen.RelayStats{OutboxDelivered: 13000, OutboxDeduped: 5, TimersFired: 2000, SpawnsAcked: 600, OutboxBacklog: 12},
		SelfCheck: loadgen.SelfCheck{CPUs: 2, GenCPU: 0.22, GenCPUSeconds: 5.3, GenCPUPerOpUS: 147.2, HostCPU: 0.93, Load1Max: 3.1, SchedP99: 0.8, SchedMax: 4, Warnings: []string{"machine overloaded: CPU 93% busy"}},
	}
}
