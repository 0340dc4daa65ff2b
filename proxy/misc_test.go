package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/proxy"
)

// TestSessionFeatures: SQL-level PREPARE/EXECUTE routed by the EXECUTE
// arguments, DEALLOCATE, DISCARD ALL resetting settings and statements,
// and the session features a transaction pooler cannot keep, which pin the
// session (pin_test.go) until DISCARD ALL.
func TestSessionFeatures(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t, func(c *pgx.ConnConfig) { c.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol })
	var keys []int64
	for s := range e.db.m.Shards {
		k := e.db.keysOn(s, 1, 7_000_000)[0]
		keys = append(keys, k)
		if _, err := conn.Exec(ctx, fmt.Sprintf("INSERT INTO accounts (aid, abalance, note) VALUES (%d, %d, 'prep')", k, s)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, "PREPARE byaid(int8) AS SELECT abalance, (SELECT shard_name FROM pgshard_identity) FROM accounts WHERE aid = $1"); err != nil {
		t.Fatal(err)
	}
	for s, k := range keys {
		var bal int
		var shard string
		if err := conn.QueryRow(ctx, fmt.Sprintf("EXECUTE byaid(%d)", k)).Scan(&bal, &shard); err != nil {
			t.Fatalf("EXECUTE for shard %d: %v", s, err)
		}
		if bal != s || shard != e.db.m.Shards[s].Name {
			t.Fatalf("EXECUTE byaid(%d): %d on %s, want %d on %s", k, bal, shard, s, e.db.m.Shards[s].Name)
		}
	}
	if _, err := conn.Exec(ctx, "DEALLOCATE byaid"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("EXECUTE byaid(%d)", keys[0])); pgCode(err) != "26000" {
		t.Fatalf("EXECUTE after DEALLOCATE: %v, want 26000", err)
	}
	// DISCARD ALL: settings back to the startup values.
	if _, err := conn.Exec(ctx, "SET search_path = pg_catalog"); err != nil {
		t.Fatal(err)
	}
	var sp string
	if err := conn.QueryRow(ctx, "SHOW search_path").Scan(&sp); err != nil || sp != "pg_catalog" {
		t.Fatalf("after SET: %q %v", sp, err)
	}
	if _, err := conn.Exec(ctx, "DISCARD ALL"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SHOW search_path").Scan(&sp); err != nil || sp != `"$user", public` {
		t.Fatalf("after DISCARD ALL: %q %v", sp, err)
	}
	// An invalid SET is Postgres's own error; the session is unchanged.
	if _, err := conn.Exec(ctx, "SET statement_timeout = 'soon'"); pgCode(err) != "22023" {
		t.Fatalf("invalid SET: %v, want 22023", err)
	}
	for _, q := range []string{
		"LISTEN somewhere",
		"SELECT pg_advisory_lock(1)",
		"CREATE TEMP TABLE tmp_x (x int)",
		"SELECT set_config('work_mem', '8MB', false)",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Errorf("%s (pins the session): %v", q, err)
		}
	}
	waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 1)
	if _, err := conn.Exec(ctx, "DISCARD ALL"); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)
	// A transaction-scoped advisory lock on the default shard works.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(42)"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCopy: COPY FROM STDIN to the shard a hint names, COPY TO STDOUT of a
// keyed query and of a sharded table (every shard's rows: copyout_test.go
// compares them with one database's); COPY FROM STDIN without a key and
// COPY of a key-less query whose rows need merging are refused.
func TestCopy(t *testing.T) {
	psql := needBinary(t, "psql", "/usr/bin/psql")
	e := startProxy(t)
	k := e.db.keysOn(2, 3, 8_000_000)
	data := fmt.Sprintf("%d\t1\n%d\t2\n%d\t3\n", k[0], k[1], k[2])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", e.dsn, "-c",
		"/* pgshard:shard=shard2 */ COPY accounts (aid, abalance) FROM STDIN")
	cmd.Stdin = strings.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("COPY FROM STDIN: %v\n%s", err, out)
	}
	out, err := run(t, time.Minute, "", psql, "-X", "-At", "-d", e.dsn, "-c",
		fmt.Sprintf("COPY (SELECT abalance FROM accounts WHERE aid = %d) TO STDOUT", k[1]))
	if err != nil || strings.TrimSpace(out) != "2" {
		t.Fatalf("COPY TO STDOUT: %v %q", err, out)
	}
	out, err = run(t, time.Minute, "", psql, "-X", "-At", "-d", e.dsn, "-c", "COPY accounts (aid, abalance) TO STDOUT")
	for i, key := range k {
		if err != nil || !strings.Contains("\n"+out, fmt.Sprintf("\n%d\t%d\n", key, i+1)) {
			t.Fatalf("COPY of a sharded table (every shard): %v, no row %d in %.200q", err, key, out)
		}
	}
	// An ordered key-less query: merged by pgshard, written as the COPY.
	out, err = run(t, time.Minute, "", psql, "-X", "-At", "-d", e.dsn, "-c", "COPY (SELECT aid FROM accounts ORDER BY aid) TO STDOUT")
	var aids []int64
	for _, l := range strings.Fields(out) {
		aid, perr := strconv.ParseInt(l, 10, 64)
		if perr != nil {
			err = perr
		}
		aids = append(aids, aid)
	}
	if err != nil || !slices.IsSorted(aids) || !slices.Contains(aids, k[0]) || !slices.Contains(aids, k[2]) {
		t.Fatalf("COPY of an ordered key-less query: %v %.200q (want every aid, in order)", err, out)
	}
	cmd = exec.CommandContext(ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", e.dsn, "-c", "COPY accounts (aid, abalance) FROM STDIN")
	cmd.Stdin = strings.NewReader(data)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "routed by its key") {
		t.Fatalf("COPY FROM STDIN into a sharded table without a hint: %v %q (want a refusal)", err, out)
	}
	var n int
	if err := e.db.shardConn(t, 2).QueryRow(ctx, "SELECT count(*) FROM accounts WHERE aid = ANY($1)", k).Scan(&n); err != nil || n != 3 {
		t.Fatalf("rows on shard2: %d %v", n, err)
	}
}

// TestIdleInTransactionTimeout: a client idle inside a transaction for
// longer than the limit is disconnected with 25P03 and its backend freed.
func TestIdleInTransactionTimeout(t *testing.T) {
	e := startProxy(t, poolSize(1), func(c *proxy.Config) { c.IdleInTransactionTimeout = 300 * time.Millisecond })
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t)
	k := e.db.keysOn(1, 1, 8_500_000)[0]
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k); err != nil {
		t.Fatal(err)
	}
	// Meanwhile another client needs the only backend connection of shard1.
	other := e.connect(t)
	start := time.Now()
	var n int
	if err := other.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k).Scan(&n); err != nil {
		t.Fatalf("other client: %v", err)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Fatalf("the other client did not wait for the idle transaction (%v)", waited)
	}
	_, err = tx.Exec(ctx, "SELECT 1")
	if err == nil {
		t.Fatal("statement after the idle-in-transaction timeout succeeded")
	}
	if code := pgCode(err); code != "25P03" && !strings.Contains(err.Error(), "closed") && !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("after the timeout: %v", err)
	}
}

// TestMetrics: the Prometheus endpoint serves the proxy's counters.
func TestMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	e := startProxy(t, func(c *proxy.Config) { c.MetricsListen = addr })
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t)
	k := e.db.keysOn(0, 1, 9_000_000)[0]
	if _, err := conn.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k); err != nil {
		t.Fatal(err)
	}
	tx, _ := conn.Begin(ctx)
	_, _ = tx.Exec(ctx, "UPDATE accounts SET abalance = abalance WHERE aid = $1", k)
	_, _ = tx.Exec(ctx, "UPDATE accounts SET abalance = abalance WHERE aid = $1", e.db.keysOn(1, 1, 9_000_000)[0])
	_ = tx.Rollback(ctx)
	var body []byte
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics endpoint: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{
		`pgshard_proxy_client_connections 1`,
		`pgshard_proxy_transactions_total{shard="shard0"}`,
		`pgshard_proxy_refusals_total{reason="cross_shard"} 1`,
		`pgshard_proxy_backend_connections{shard="shard0"}`,
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		os.Stderr.Write(body)
	}
}
