package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/proxy"
)

// TestPgBouncerBackPressure: while shard0's PgBouncer has clients waiting
// for a server (its pool of 20 is busy with other clients' slow queries),
// the proxy reads cl_waiting/maxwait from PgBouncer's admin console and
// fails new transactions for shard0 at once with 53300 naming it, instead
// of queueing them inside PgBouncer; shard1 is not affected; the readings
// are in SHOW SHARDS and the metrics; when the queue is gone, shard0 works
// again.
func TestPgBouncerBackPressure(t *testing.T) {
	c := clustertest.Get(t)
	d, err := newTestDB(c, fmt.Sprintf("bouncer_%d", time.Now().UnixNano()%1e6))
	if err != nil {
		t.Fatal(err)
	}
	e := startProxyFor(t, d, func(c *proxy.Config) {
		c.AdminUsers = []string{"postgres"}
		c.MetricsListen = "127.0.0.1:0"
		c.PgBouncer = proxy.BouncerConfig{AdminUser: "postgres", PollInterval: 100 * time.Millisecond, MaxWaiting: 3}
	})
	addr := metricsAddr(t, e)
	ctx := ctxT(t, 2*time.Minute)
	k0 := d.keysOn(0, 1, 41_000_000)[0]
	k1 := d.keysOn(1, 1, 41_000_000)[0]
	conn := e.connect(t)
	if _, err := conn.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k0); err != nil {
		t.Fatal(err)
	}

	// 26 other clients of shard0's PgBouncer (pool size 20) sleep 3 s.
	const others, sleep = 26, 5
	var wg sync.WaitGroup
	errs := make(chan error, others)
	for range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			oc, err := pgx.Connect(ctx, d.m.Shards[0].PoolerDSN)
			if err == nil {
				_, err = oc.Exec(ctx, fmt.Sprintf("SELECT pg_sleep(%d)", sleep))
				oc.Close(ctx)
			}
			errs <- err
		}()
	}
	// The proxy sees the queue (its next reading of PgBouncer) ...
	admin := e.connectAdmin(t)
	shardRow := func(name string) map[string]any {
		rows, err := admin.Query(ctx, "SHOW SHARDS")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]any{}
			for i, f := range rows.FieldDescriptions() {
				m[f.Name] = v[i]
			}
			if m["shard"] == name {
				return m
			}
		}
		t.Fatalf("SHOW SHARDS has no %s", name)
		return nil
	}
	deadline := time.Now().Add(sleep * time.Second)
	for shardRow("shard0")["state"] != "overloaded" {
		if time.Now().After(deadline) {
			t.Fatalf("shard0 never overloaded while its PgBouncer queued clients: %v", shardRow("shard0"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// ... and fails shard0's new transactions at once.
	start := time.Now()
	_, refused := conn.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k0)
	// Refused, not queued: a queued client would wait for a pg_sleep to
	// end (up to 5 s); half of that is far above a refusal's cost even on
	// a loaded machine.
	if took := time.Since(start); pgCode(refused) == "53300" && took > sleep*time.Second/2 {
		t.Fatalf("the refusal took %s (want at once)", took)
	}
	if refused == nil || !strings.Contains(refused.Error(), `shard "shard0" is overloaded`) || !strings.Contains(refused.Error(), "waiting") {
		t.Fatalf("no 53300 naming shard0 while its PgBouncer queued clients: %v", refused)
	}
	if _, err := conn.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k1); err != nil {
		t.Fatalf("shard1 while shard0's PgBouncer is overloaded: %v", err)
	}
	row := shardRow("shard0")
	state, _ := row["state"].(string)
	waiting, _ := row["pgbouncer_cl_waiting"].(int32)
	if state != "overloaded" || waiting < 3 {
		t.Errorf("SHOW SHARDS shard0: state %q, pgbouncer_cl_waiting %d", state, waiting)
	}
	mfs, _ := scrape(t, addr)
	if v, _ := series(mfs, "pgshard_proxy_pgbouncer_clients_waiting", "shard", "shard0"); v < 3 {
		t.Errorf("pgshard_proxy_pgbouncer_clients_waiting{shard0} = %v", v)
	}
	if v, _ := series(mfs, "pgshard_proxy_shard_state", "shard", "shard0", "state", "overloaded"); v != 1 {
		t.Errorf("pgshard_proxy_shard_state{shard0,overloaded} = %v", v)
	}
	if v, _ := series(mfs, "pgshard_proxy_shard_errors_total", "shard", "shard0", "class", "53"); v < 1 {
		t.Errorf("pgshard_proxy_shard_errors_total{shard0,53} = %v", v)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a PgBouncer client: %v", err)
		}
	}
	pollOK(t, 10*time.Second, func() error {
		_, err := conn.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k0)
		return err
	})
	mfs, _ = scrape(t, addr)
	if v, _ := series(mfs, "pgshard_proxy_shard_state", "shard", "shard0", "state", "up"); v != 1 {
		t.Errorf("pgshard_proxy_shard_state{shard0,up} = %v after the queue is gone", v)
	}
}

var _ = context.Background
