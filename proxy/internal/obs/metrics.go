package obs

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the handles of the proxy's Prometheus counters of events
// without a shard, shared by the server and its client sessions. The
// server registers them (Collectors) on its own registry, together with
// its per-shard series, which it reads at scrape time from the pools'
// statistics (proxy/metrics.go).
type Metrics struct {
	Clients        prometheus.Gauge
	ClientsTotal   prometheus.Counter
	ClientsRefused *prometheus.CounterVec
	Refusals       *prometheus.CounterVec
	BackendErrors  *prometheus.CounterVec
	Fanouts        prometheus.Counter
	Cancels        prometheus.Counter
	Reloads        *prometheus.CounterVec
	TxnReads       prometheus.Counter
	FenceRetries   *prometheus.CounterVec
	// Cursors and CursorBytes: the reads of every shard fetched in parts
	// whose merged rows the sessions keep, and those rows' bytes.
	Cursors     prometheus.Gauge
	CursorBytes prometheus.Gauge
}

// NewMetrics makes the handles, not yet registered.
func NewMetrics() *Metrics {
	return &Metrics{
		Clients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pgshard_proxy_client_connections", Help: "Client connections currently open."}),
		ClientsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pgshard_proxy_client_connections_total", Help: "Client connections accepted."}),
		ClientsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgshard_proxy_client_refused_total", Help: "Client connections refused, by reason (max_clients, auth, tls_required, disabled, shutting_down, not_admin, no_database)."}, []string{"reason"}),
		Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgshard_proxy_refusals_total", Help: "Statements refused instead of routed, by reason."}, []string{"reason"}),
		BackendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgshard_proxy_backend_errors_total", Help: "Backend connection failures, by shard and kind (connect, lost, down, unclean: returned not idle)."}, []string{"shard", "kind"}),
		Fanouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pgshard_proxy_fanouts_total", Help: "Statements run on every shard (DDL, merged reads)."}),
		TxnReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pgshard_proxy_transaction_reads_total", Help: "Reads of shards other than (or as well as) the transaction's own, run in a client's transaction (key-less reads, reads of another shard)."}),
		Cancels: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pgshard_proxy_cancel_requests_total", Help: "Cancel requests forwarded to a backend."}),
		FenceRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgshard_proxy_fence_retries_total", Help: "Statements the proxy ran again after a shard's fence refused them before anything reached the client: by the range's state, after their opening assert was refused (moved: after a newer map; frozen: after a back-off), or served: a read of every shard whose parts' served sets were not its map's (a range move's flip)."}, []string{"state"}),
		Cursors: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pgshard_proxy_cursors", Help: "Reads of every shard fetched in parts (a row limit, a Flush before the Execute, DECLARE CURSOR) whose merged rows the proxy keeps, over all sessions."}),
		CursorBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pgshard_proxy_cursor_bytes", Help: "Bytes of merged rows kept for those reads, over all sessions (each read at most proxy.cursor_buffer_bytes)."}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgshard_proxy_config_reloads_total", Help: "Configuration reloads (RELOAD, SIGHUP), by result (applied, rejected)."}, []string{"result"}),
	}
}

// Collectors are the handles, for registering them.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Clients, m.ClientsTotal, m.ClientsRefused, m.Refusals,
		m.BackendErrors, m.Fanouts, m.TxnReads, m.FenceRetries, m.Cancels, m.Reloads, m.Cursors, m.CursorBytes}
}
