package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the proxy's Prometheus metrics, registered on the server's
// own registry (Server.Registry).
type metrics struct {
	clients         prometheus.Gauge
	clientsTotal    prometheus.Counter
	clientsRefused  *prometheus.CounterVec
	txns            *prometheus.CounterVec
	refusals        *prometheus.CounterVec
	poolWaits       *prometheus.CounterVec
	poolWaitSeconds *prometheus.HistogramVec
	backendErrors   *prometheus.CounterVec
	fanouts         prometheus.Counter
	txnReads        prometheus.Counter
	cancels         prometheus.Counter
	// txnByShard caches the per-shard counters (no label lookup per txn).
	txnByShard []prometheus.Counter
}

func newMetrics(reg *prometheus.Registry, shards []string, poolStats func(i int) (open, idle int)) *metrics {
	m := &metrics{
		clients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pgshard_proxy_client_connections", Help: "Client connections currently open."}),
		clientsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pgshard_proxy_client_connections_total", Help: "Client connections accepted."}),
		clientsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgshard_proxy_client_refused_total", Help: "Client connections refused, by reason."}, []string{"reason"}),
		txns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgshard_proxy_transactions_total", Help: "Transactions (explicit or single-statement) run, by shard."}, []string{"shard"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgshard_proxy_refusals_total", Help: "Statements refused instead of routed, by reason."}, []string{"reason"}),
		poolWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgshard_proxy_pool_waits_total", Help: "Times a session waited for a backend connection, by shard."}, []string{"shard"}),
		poolWaitSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pgshard_proxy_pool_wait_seconds", Help: "Time spent waiting for a backend connection, by shard.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"shard"}),
		backendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgshard_proxy_backend_errors_total", Help: "Backend connection failures, by shard and kind (connect, lost, unclean: returned not idle, closed)."}, []string{"shard", "kind"}),
		fanouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pgshard_proxy_fanouts_total", Help: "Statements run on every shard (DDL, merged reads)."}),
		txnReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pgshard_proxy_transaction_reads_total", Help: "Reads of shards other than (or as well as) the transaction's own, run in a client's transaction (key-less reads, reads of another shard)."}),
		cancels: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pgshard_proxy_cancel_requests_total", Help: "Cancel requests forwarded to a backend."}),
	}
	reg.MustRegister(m.clients, m.clientsTotal, m.clientsRefused, m.txns, m.refusals, m.poolWaits,
		m.poolWaitSeconds, m.backendErrors, m.fanouts, m.txnReads, m.cancels)
	for i, s := range shards {
		m.txnByShard = append(m.txnByShard, m.txns.WithLabelValues(s))
		i := i
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pgshard_proxy_backend_connections", Help: "Backend connections open (idle or in use), by shard.",
			ConstLabels: prometheus.Labels{"shard": s}}, func() float64 { o, _ := poolStats(i); return float64(o) }))
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pgshard_proxy_backend_connections_idle", Help: "Idle backend connections, by shard.",
			ConstLabels: prometheus.Labels{"shard": s}}, func() float64 { _, n := poolStats(i); return float64(n) }))
	}
	return m
}
