package proxy

import (
	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/obs"

	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// The proxy's Prometheus metrics are registered on the server's own
// registry (Server.Registry). Counters of events without a shard are the
// handles of internal/obs (obs.Metrics), which the sessions count into;
// every per-shard series is read at scrape time from the shard's
// statistics (internal/backend/stats.go) by shardCollector, so a reload
// that adds or removes shards changes the series without re-registering,
// and the admin console and the metrics read the same numbers.
func newMetrics(reg *prometheus.Registry, c *Server) *obs.Metrics {
	m := obs.NewMetrics()
	reg.MustRegister(append(m.Collectors(), &shardCollector{c: c}, buildInfo())...)
	return m
}

// buildInfo is pgshard_build_info: 1, labelled with the build's version.
func buildInfo() prometheus.Collector {
	version, revision := "dev", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	if BuildVersion != "" {
		version = BuildVersion
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "pgshard_build_info",
		Help:        "A metric with a constant '1' value labelled by the version, revision and Go version pgshard was built with.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}

// BuildVersion, when set (by the command, from its build flags), is the
// version pgshard_build_info and SHOW VERSION report.
var BuildVersion string

// Descriptions of the per-shard series.
var (
	descTxns       = shardDesc("pgshard_proxy_transactions_total", "Transactions run on the shard (holds of a backend connection: explicit, implicit, a fan-out's part).")
	descStatements = shardDesc("pgshard_proxy_statements_total", "Statements sent to the shard (Execute and Query messages).")
	descBytesIn    = shardDesc("pgshard_proxy_received_bytes_total", "Bytes received from the shard.")
	descBytesOut   = shardDesc("pgshard_proxy_sent_bytes_total", "Bytes sent to the shard.")
	descWaits      = shardDesc("pgshard_proxy_pool_waits_total", "Times a session waited for a backend connection of the shard.")
	descOpen       = shardDesc("pgshard_proxy_backend_connections", "Backend connections of the shard open or being opened (idle or in use).")
	descIdle       = shardDesc("pgshard_proxy_backend_connections_idle", "Idle backend connections of the shard.")
	descActive     = shardDesc("pgshard_proxy_backend_connections_active", "Backend connections of the shard held by a client session.")
	descWaiting    = shardDesc("pgshard_proxy_pool_waiting_clients", "Sessions waiting for a backend connection of the shard (pool full or shard paused).")
	descMaxWait    = shardDesc("pgshard_proxy_pool_max_wait_seconds", "How long the oldest session waiting for a connection of the shard has waited.")
	descPoolSize   = shardDesc("pgshard_proxy_pool_size", "The most backend connections the proxy opens to the shard.")
	descUp         = shardDesc("pgshard_proxy_shard_up", "1 while the shard's server accepts connections (health probe), else 0.")
	descState      = prometheus.NewDesc("pgshard_proxy_shard_state", "The shard's state: 1 for the current one of up, down, paused, overloaded (PgBouncer back-pressure), removed.", []string{"shard", "state"}, nil)
	descRoutes     = prometheus.NewDesc("pgshard_proxy_routes_total", "Routing decisions by shard and kind (keyed, hinted, any, fanout, refused); shard is empty for refusals before a shard was known.", []string{"shard", "kind"}, nil)
	descErrors     = prometheus.NewDesc("pgshard_proxy_shard_errors_total", "Errors clients got from or about the shard, by SQLSTATE class.", []string{"shard", "class"}, nil)
	descGeneration = prometheus.NewDesc("pgshard_proxy_config_generation", "The configuration's number: 1 at start, one more for each applied reload.", nil, nil)
	descEpoch      = prometheus.NewDesc("pgshard_proxy_shard_map_epoch", "The epoch of the shard map the proxy routes by.", nil, nil)
	descDisabled   = prometheus.NewDesc("pgshard_proxy_logins_disabled", "1 while new client logins are refused (DISABLE), else 0.", nil, nil)
	descDraining   = prometheus.NewDesc("pgshard_proxy_shutting_down", "1 once a graceful shutdown began (SIGTERM, SHUTDOWN, a hand-over), else 0.", nil, nil)

	descBouncerUp      = shardDesc("pgshard_proxy_pgbouncer_up", "1 when the last reading of the shard's PgBouncer admin console succeeded, else 0.")
	descBouncerActive  = shardDesc("pgshard_proxy_pgbouncer_clients_active", "PgBouncer's cl_active for the shard's database (all its clients, not only the proxy's).")
	descBouncerWaiting = shardDesc("pgshard_proxy_pgbouncer_clients_waiting", "PgBouncer's cl_waiting for the shard's database.")
	descBouncerSvAct   = shardDesc("pgshard_proxy_pgbouncer_servers_active", "PgBouncer's sv_active for the shard's database.")
	descBouncerSvIdle  = shardDesc("pgshard_proxy_pgbouncer_servers_idle", "PgBouncer's sv_idle for the shard's database.")
	descBouncerMaxWait = shardDesc("pgshard_proxy_pgbouncer_max_wait_seconds", "PgBouncer's maxwait for the shard's database: how long its oldest waiting client has waited.")
	descBouncerXacts   = shardDesc("pgshard_proxy_pgbouncer_transactions_total", "PgBouncer's total_xact_count for the shard's database.")
)

func shardDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, []string{"shard"}, nil)
}

// shardCollector reads every per-shard series of the current generation
// at scrape time. It is unchecked (Describe sends nothing): the shards
// change with reloads.
type shardCollector struct{ c *Server }

// Describe implements prometheus.Collector (an unchecked collector).
func (*shardCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (sc *shardCollector) Collect(ch chan<- prometheus.Metric) {
	srv := sc.c.current()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, p := range srv.pools {
		name := p.Shard.Name
		st := p.Stats
		counter(descTxns, st.Xacts.Load(), name)
		counter(descStatements, st.Queries.Load(), name)
		counter(descBytesIn, st.BytesIn.Load(), name)
		counter(descBytesOut, st.BytesOut.Load(), name)
		counter(descWaits, st.Waits.Load(), name)
		for k := backend.RouteKind(0); k < backend.NumRouteKinds; k++ {
			counter(descRoutes, st.Routes[k].Load(), name, k.String())
		}
		for class, n := range st.ErrorCounts() {
			counter(descErrors, n, name, class)
		}
		st.XactHist.Collect(ch)
		st.WaitHist.Collect(ch)
		f := p.Figures()
		gauge(descOpen, float64(f.Open), name)
		gauge(descIdle, float64(f.Idle), name)
		gauge(descActive, float64(f.Active), name)
		gauge(descWaiting, float64(f.Waiting), name)
		gauge(descMaxWait, f.MaxWait.Seconds(), name)
		gauge(descPoolSize, float64(srv.cfg.PoolSize), name)
		up := 1.0
		if p.Down.Load() != nil {
			up = 0
		}
		gauge(descUp, up, name)
		cur := p.Ops.State()
		for _, s := range backend.ShardStates {
			v := 0.0
			if s == cur {
				v = 1
			}
			gauge(descState, v, name, s)
		}
		if b := p.Ops.Bouncer.Load(); b != nil {
			ok := 0.0
			if b.Err == "" {
				ok = 1
			}
			gauge(descBouncerUp, ok, name)
			if b.Err == "" {
				gauge(descBouncerActive, float64(b.ClActive), name)
				gauge(descBouncerWaiting, float64(b.ClWaiting), name)
				gauge(descBouncerSvAct, float64(b.SvActive), name)
				gauge(descBouncerSvIdle, float64(b.SvIdle), name)
				gauge(descBouncerMaxWait, b.MaxWait.Seconds(), name)
				counter(descBouncerXacts, b.XactCount, name)
			}
		}
	}
	for k := backend.RouteKind(0); k < backend.NumRouteKinds; k++ {
		if n := sc.c.routes.noShard[k].Load(); n > 0 {
			counter(descRoutes, n, "", k.String())
		}
	}
	gauge(descGeneration, float64(srv.number))
	gauge(descEpoch, float64(srv.cfg.Map.Epoch))
	gauge(descDisabled, boolGauge(sc.c.life.disabled.Load()))
	gauge(descDraining, boolGauge(sc.c.life.draining.Load()))
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
