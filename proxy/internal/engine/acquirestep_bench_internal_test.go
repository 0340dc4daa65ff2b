package engine

import "testing"

// BenchmarkPlanAcquireStep plans a keyed point SELECT's pipeline (Parse,
// Bind, Describe, Execute, Sync) of an idle session with its backend's
// acquisition as the plan's step: the planning of the hot path, no I/O
// (nothing listens at the pools' address; the step is never taken).
// Allocations per plan are reported (-benchmem).
func BenchmarkPlanAcquireStep(b *testing.B) {
	for _, fence := range []FenceMode{FenceOff, FenceOn} {
		b.Run(map[FenceMode]string{FenceOff: "fence=off", FenceOn: "fence=on"}[fence], func(b *testing.B) {
			s := stepSession(b, "127.0.0.1:1", fence)
			b.ReportAllocs()
			for b.Loop() {
				p := planPipeline(s)
				if !p.planner.plan.acquire.on {
					b.Fatal("no acquisition step planned")
				}
				p.planner.plan.acquire.on = false
				s.fenceBuckets = s.fenceBuckets[:0]
			}
		})
	}
}
