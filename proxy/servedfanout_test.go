package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/proxy"
)

// TestFanoutServedBuckets: with the fence on, a read of every shard reads
// each keyed table only in the buckets its shard serves, so a row of
// another shard's bucket lying on a shard — what a move's copy leaves on
// its destination until the flip, and on its source until the clean-up —
// is read once: by a merged SELECT, a join, an aggregate and COPY (of a
// query and of the table). With the fence off the same reads see it
// twice (the test proves it can fail).
func TestFanoutServedBuckets(t *testing.T) {
	on := startProxy(t, fenceMode(proxy.FenceOn))
	off := startProxy(t, fenceMode(proxy.FenceOff))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := on.db.keysOn(0, 1, 8_900_000)[0]
	pc := on.connect(t)
	if _, err := pc.Exec(ctx, "INSERT INTO accounts (aid, abalance, note) VALUES ($1, 7, 'owner')", k); err != nil {
		t.Fatal(err)
	}
	// Keys of every shard around k: each row on its owner is read once
	// with the fence on (the int8 bucket the shards compute in SQL is
	// the map's, for every one of them).
	const n = 64
	t.Cleanup(func() {
		for i := range on.db.m.Shards {
			_ = execDirect(context.Background(), on.db.m.Shards[i].DSN, fmt.Sprintf("DELETE FROM accounts WHERE aid BETWEEN %d AND %d", k, k+n))
		}
	})
	for i := int64(1); i <= n; i++ {
		if _, err := pc.Exec(ctx, "INSERT INTO accounts (aid, abalance, note) VALUES ($1, 1, 'spread')", k+i); err != nil {
			t.Fatal(err)
		}
	}
	stray := on.db.shardConn(t, 1) // the bucket is shard0's: shard1's fence says moved
	if _, err := stray.Exec(ctx, "INSERT INTO accounts (aid, abalance, note) VALUES ($1, 7, 'copy')", k); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = stray.Exec(context.Background(), "DELETE FROM accounts WHERE aid = $1", k) })

	for _, e := range []*proxyEnv{on, off} {
		var got int
		if err := e.connect(t).QueryRow(ctx, "SELECT count(*) FROM accounts WHERE aid + 0 BETWEEN $1 AND $2", k, k+n).Scan(&got); err != nil || got != n+1+btoi(e == off) {
			t.Fatalf("rows of keys %d..%d (fence on: %v): %d, %v; want %d", k, k+n, e == on, got, err, n+1+btoi(e == off))
		}
	}
	reads := []struct{ name, sql string }{
		{"merged rows", fmt.Sprintf("SELECT note FROM accounts WHERE aid + 0 = %d ORDER BY note", k)},
		{"aggregate", fmt.Sprintf("SELECT count(*), sum(abalance) FROM accounts WHERE aid + 0 = %d", k)},
		{"join", fmt.Sprintf("SELECT a.note, b.note FROM accounts a JOIN accounts b ON b.aid = a.aid WHERE a.aid + 0 = %d", k)},
	}
	for _, r := range reads {
		var got [2]string
		for i, e := range []*proxyEnv{on, off} {
			rows, err := e.connect(t).Query(ctx, r.sql)
			if err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			var b strings.Builder
			for rows.Next() {
				fmt.Fprintf(&b, "%q;", rows.RawValues())
			}
			if rows.Err() != nil {
				t.Fatalf("%s: %v", r.name, rows.Err())
			}
			got[i] = b.String()
		}
		if got[0] == got[1] {
			t.Errorf("%s: the fence changed nothing: %s", r.name, got[0])
		}
		if strings.Contains(got[0], "copy") || !strings.Contains(got[1], "copy") && r.name != "aggregate" {
			t.Errorf("%s: fence on %s, off %s", r.name, got[0], got[1])
		}
	}
	for _, q := range []string{fmt.Sprintf("COPY (SELECT aid, note FROM accounts WHERE aid + 0 = %d) TO STDOUT", k), "COPY accounts (aid, note) TO STDOUT"} {
		var lines [2]int
		for i, e := range []*proxyEnv{on, off} {
			var buf bytes.Buffer
			if _, err := e.connect(t).PgConn().CopyTo(ctx, &buf, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			lines[i] = strings.Count("\n"+buf.String(), fmt.Sprintf("\n%d\t", k))
		}
		if lines != [2]int{1, 2} {
			t.Errorf("%s: key %d's lines with the fence on / off: %v, want [1 2]", q, k, lines)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestFanoutUnservableRefused: with the fence on, a read of every shard
// whose served form cannot be written is refused with 0A000 — run as it
// is, it could read a moving range on both shards — and the session goes
// on; with the fence off the same read is answered.
func TestFanoutUnservableRefused(t *testing.T) {
	on := startProxy(t, fenceMode(proxy.FenceOn))
	off := startProxy(t, fenceMode(proxy.FenceOff))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// deparse's own marker in a literal beside an operator under an
	// operator: no faithful text of the served form exists
	const sql = "SELECT aid, 'pgshard_paren_0_x' FROM accounts WHERE (abalance > 1 OR abalance < 0) IS NULL"
	if _, err := off.connect(t).Exec(ctx, sql); err != nil {
		t.Fatalf("fence off: %v", err)
	}
	c := on.connect(t)
	_, err := c.Exec(ctx, sql)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "0A000" || !strings.Contains(pe.Message, "buckets it serves") {
		t.Fatalf("fence on: %v; want 0A000 naming the served buckets", err)
	}
	var one int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE aid + 0 < 0").Scan(&one); err != nil {
		t.Fatalf("the session after the refusal: %v", err)
	}
}
