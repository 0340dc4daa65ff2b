// Package obs holds the proxy's observation handles that cross the engine
// boundary: the Prometheus counters of events without a shard, which the
// server registers and its client sessions (proxy/internal/engine) count
// into. It imports nothing of ours.
//
//	metrics.go  Metrics: the handles, NewMetrics, Collectors
package obs
