// Package loadgen drives the execution store's real hot path under load and
// turns what it measures into capacity answers: "how many shards for N
// commits/s at p99 ≤ X".
//
// Pipeline:
//
//	Workload ─▶ closed loop (W workers) ─┐
//	         └▶ open loop (dispatcher at t0+i/rate ─▶ bounded pool) ─┤
//	                                      ▼
//	Target (store/router/proxy) ◀── worker loop: LoadForEvent → transition → Commit
//	       ◀── relays: outbox (pending → deliver → ack), timers (due → fire → delete)
//	                                      ▼
//	Recorders (HDR per kind and shard, outcomes, 1 s windows) + self-checks
//	                                      ▼
//	Result ─▶ text / JSON / .hgrm / HTML ─▶ Sweep (knee, USL fit) ─▶ capacity model
//
// The engine knows the store only through [Target], a handful of operations,
// and [Locator], which says on which shard an execution lives; adapters for
// the router and a single store are in package loadgen/storetarget.
//
// Measurement: an HDR histogram (1 µs – 60 s, 3 significant digits) per
// operation kind and per shard. A histogram is not safe for concurrent
// use, so workers record into up to 16 striped recorders, each behind its
// own mutex (taken by its workers and, once a second, by the collector that
// cuts the 1 s windows); the result merges them. Striping bounds memory
// (about 140 KB per histogram) whatever the concurrency.
//
// Honesty rules the engine follows:
//   - open-loop latency is measured from each operation's intended start
//     (t0 + i/rate), so coordinated omission is corrected; operations that
//     started late and operations dropped at the in-flight bound are counted;
//   - warm-up is excluded from every figure of the result;
//   - the generator watches itself (dispatcher lag, Go scheduler latency,
//     its CPU share, the machine's load) and the report warns when the
//     generator, not the database, may be the bottleneck.
package loadgen
