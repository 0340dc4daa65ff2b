package proxy_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pgshard/pgshard/proxy"
)

// freeAddr returns a loopback address nothing listens on (for
// MetricsListen).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// scrape fetches and parses the metrics endpoint (polling until it answers).
func scrape(t *testing.T, addr string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode == 200 {
				p := expfmt.NewTextParser(model.UTF8Validation)
				mfs, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
				if err != nil {
					t.Fatalf("metrics do not parse: %v\n%s", err, body)
				}
				return mfs, string(body)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics endpoint %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// series returns the value of the family's series with the given labels
// (a counter's or gauge's value, a histogram's sample count); ok false if
// there is none.
func series(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetricsScrape: the Prometheus endpoint serves per-shard transactions,
// statements, bytes, routing decisions by kind, errors by SQLSTATE class,
// pool figures, latency and wait histograms, health, clients and the build,
// with Prometheus's naming conventions.
func TestMetricsScrape(t *testing.T) {
	addr := freeAddr(t)
	e := startProxy(t, poolSize(1), func(c *proxy.Config) { c.MetricsListen = addr })
	ctx := ctxT(t, 2*time.Minute)
	a := e.connect(t)
	b := e.connect(t)
	k0 := e.db.keysOn(0, 4, 33_000_000)
	k1 := e.db.keysOn(1, 1, 33_000_000)[0]
	for _, k := range k0 {
		if _, err := a.Exec(ctx, "SELECT abalance FROM accounts WHERE aid = $1", k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Exec(ctx, "SELECT count(*) FROM accounts"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, "SELECT 1/0 FROM accounts WHERE aid = $1", k0[0]); pgCode(err) != "22012" {
		t.Fatalf("division by zero: %v", err)
	}
	tx, _ := a.Begin(ctx)
	_, _ = tx.Exec(ctx, "UPDATE accounts SET note = 'x' WHERE aid = $1", k0[0])
	_, _ = tx.Exec(ctx, "UPDATE accounts SET note = 'x' WHERE aid = $1", k1) // refused: a second shard's write
	// A wait: the pool of shard0 has one connection, held by tx.
	waited := make(chan error, 1)
	go func() { _, err := b.Exec(ctx, "SELECT 1 FROM accounts WHERE aid = $1", k0[1]); waited <- err }()
	time.Sleep(200 * time.Millisecond)
	_ = tx.Rollback(ctx)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}

	mfs, body := scrape(t, addr)
	checks := []struct {
		name   string
		labels []string
		min    float64
	}{
		{"pgshard_build_info", nil, 1},
		{"pgshard_proxy_client_connections", nil, 2},
		{"pgshard_proxy_transactions_total", []string{"shard", "shard0"}, float64(len(k0))},
		{"pgshard_proxy_statements_total", []string{"shard", "shard0"}, float64(len(k0))},
		{"pgshard_proxy_received_bytes_total", []string{"shard", "shard0"}, 1},
		{"pgshard_proxy_sent_bytes_total", []string{"shard", "shard0"}, 1},
		{"pgshard_proxy_routes_total", []string{"shard", "shard0", "kind", "keyed"}, float64(len(k0))},
		{"pgshard_proxy_routes_total", []string{"shard", "shard1", "kind", "fanout"}, 1},
		{"pgshard_proxy_routes_total", []string{"shard", "shard1", "kind", "refused"}, 1},
		{"pgshard_proxy_refusals_total", []string{"reason", "cross_shard"}, 1},
		{"pgshard_proxy_fanouts_total", nil, 1},
		{"pgshard_proxy_shard_errors_total", []string{"shard", "shard0", "class", "22"}, 1},
		{"pgshard_proxy_transaction_duration_seconds", []string{"shard", "shard0"}, float64(len(k0))},
		{"pgshard_proxy_pool_wait_seconds", []string{"shard", "shard0"}, 1},
		{"pgshard_proxy_pool_waits_total", []string{"shard", "shard0"}, 1},
		{"pgshard_proxy_backend_connections", []string{"shard", "shard0"}, 1},
		{"pgshard_proxy_backend_connections_idle", []string{"shard", "shard0"}, 1},
		{"pgshard_proxy_backend_connections_active", []string{"shard", "shard0"}, 0},
		{"pgshard_proxy_pool_waiting_clients", []string{"shard", "shard0"}, 0},
		{"pgshard_proxy_pool_max_wait_seconds", []string{"shard", "shard0"}, 0},
		{"pgshard_proxy_pool_size", []string{"shard", "shard0"}, 1},
		{"pgshard_proxy_shard_up", []string{"shard", "shard3"}, 1},
		{"pgshard_proxy_shard_state", []string{"shard", "shard0", "state", "up"}, 1},
		{"pgshard_proxy_config_generation", nil, 1},
		{"pgshard_proxy_shard_map_epoch", nil, 1},
	}
	for _, c := range checks {
		v, ok := series(mfs, c.name, c.labels...)
		if !ok || v < c.min {
			t.Errorf("%s%v = %v (present %v), want ≥ %v", c.name, c.labels, v, ok, c.min)
		}
	}
	if v, _ := series(mfs, "pgshard_proxy_shard_state", "shard", "shard0", "state", "down"); v != 0 {
		t.Errorf("shard0 state down = %v", v)
	}
	bi := mfs["pgshard_build_info"].GetMetric()[0]
	for _, want := range []string{"version", "revision", "goversion"} {
		found := false
		for _, l := range bi.GetLabel() {
			found = found || l.GetName() == want && l.GetValue() != ""
		}
		if !found {
			t.Errorf("pgshard_build_info has no %s label", want)
		}
	}
	// Conventions: our families are pgshard_*, counters end in _total,
	// durations are histograms in seconds.
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "pgshard_") {
			continue
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			if !strings.HasSuffix(name, "_total") {
				t.Errorf("counter %s does not end in _total", name)
			}
		case dto.MetricType_HISTOGRAM:
			if !strings.HasSuffix(name, "_seconds") {
				t.Errorf("histogram %s is not in seconds", name)
			}
		}
		if strings.HasSuffix(name, "_total") && mf.GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s ends in _total but is a %s", name, mf.GetType())
		}
		if mf.GetHelp() == "" {
			t.Errorf("%s has no help", name)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}

var _ = context.Background
