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
// Files: options.go (Options, Workload, load models), run.go (setup,
// workers, open loop, the worker step), relays.go (outbox relay, timer
// sweeper), history.go (Observer: every operation as it completes),
// measure.go and collect.go (recorders, windows), hdrenc.go (histograms
// encoded for result.json), selfcheck.go (the
// generator watching itself), build.go and result.go (the Result; its
// Freezes, the range moves' freezes the command reads from the catalog),
// report.go, html.go and svg.go (reports; freezes as timeline bands),
// threshold.go (CI conditions
// such as p99(commit)>50ms), part.go and merge.go (a run split over N
// generators, and its parts merged back into one result), compare.go
// (runs side by side), sweep.go and
// sweep_report.go, usl.go and capacity.go (capacity answers), target.go
// and locator.go (what is driven), keys.go (key choice), timeout.go.
//
// History (chaos runs): with Options.Observer set, every operation — the
// setup's creates, loads, each commit attempt, relay polls, deliveries,
// acks, timer fires and deletes — is handed to the Observer when it
// completes, and every effect of a commit carries the committing op's id
// (State.Op in the execution's data, "op" in each outbox event, the trace
// entry and each spawn's context), so a commit whose outcome was unknown
// can be resolved from the final state. The state also lists the timers
// it arms (State.Timers). Options.Quiesce adds a heal-and-quiesce phase
// after the workers stop: Heal, then the relays drain the outbox and the
// spawns and fire every armed timer, bounded in time.
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
// (about 140 KB per histogram) whatever the concurrency. A recorder holds
// up to 256 values and records them together (and before every window or
// merge): at a low rate each histogram is cold by the next operation.
// Calls to the target share deadline contexts (timeout.go: each call gets
// between OpTimeout and 9/8 of it). BenchmarkEngineCPU measures the
// engine's CPU per operation beside a bare open loop's (the floor).
//
// Honesty rules the engine follows:
//   - open-loop latency is measured from each operation's intended start
//     (t0 + i/rate), so coordinated omission is corrected; operations that
//     started late and operations dropped at the in-flight bound are counted;
//   - warm-up is excluded from every figure of the result;
//   - the generator watches itself (dispatcher lag, Go scheduler latency,
//     its CPU share and CPU time per operation, the machine's load) and
//     the report warns when the generator, not the database, may be the
//     bottleneck.
//
// Beyond one machine: a run split with Options.ForPart(Part{K, N}) drives
// the executions i with i mod N = K at 1/N of the rate; result.json keeps
// every HDR histogram (encoded), so MergeResults rebuilds the whole run's
// result from its N parts without loss.
package loadgen
