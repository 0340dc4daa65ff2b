package proxy_test

import (
	"strings"
	"testing"
	"time"
)

// TestTwoStageCorrelated: a subquery that refers to the row off the keys
// is answered by reading its tables first, each with the WHERE terms that
// name it alone (here the test's own key range), and running it per row
// on the default shard — and refused with 54000, naming the rows it would
// compare, once those rows times the statement's exceed the budget
// (route.CorrelatedBudget: 2,100 × 2,101 rows does, 300 × 301 does not).
func TestTwoStageCorrelated(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, 2*time.Minute)
	const lo, n = int64(14_000_000), 2100
	for i := range e.db.m.Shards {
		var keys []int64
		for k := lo; k < lo+n; k++ {
			if e.db.m.ShardIndexForBucket(e.db.m.BucketInt8(k)) == i {
				keys = append(keys, k)
			}
		}
		sc := e.db.shardConn(t, i)
		if _, err := sc.Exec(ctx, "DELETE FROM accounts WHERE aid BETWEEN $1 AND $2", lo, lo+n-1); err != nil {
			t.Fatal(err)
		}
		if _, err := sc.Exec(ctx, "INSERT INTO accounts (aid, abalance) SELECT k, (k % 7)::int FROM unnest($1::int8[]) k", keys); err != nil {
			t.Fatal(err)
		}
	}
	conn := e.connect(t)
	// Rows whose balance no other row of the range exceeds by more than
	// 4: the rows of balance 3..6 (balances are k % 7).
	q := "SELECT count(*) FROM accounts a WHERE a.aid BETWEEN $1 AND $2 AND NOT EXISTS (SELECT 1 FROM accounts b WHERE b.aid BETWEEN $1 AND $2 AND b.abalance > a.abalance + 3)"
	hi := lo + 299
	want := 0
	for k := lo; k <= hi; k++ {
		if k%7 >= 3 {
			want++
		}
	}
	var got int
	if err := conn.QueryRow(ctx, q, lo, hi).Scan(&got); err != nil || got != want {
		t.Fatalf("300 rows: count %d (want %d), %v", got, want, err)
	}
	_, err := conn.Exec(ctx, q, lo, lo+n-1)
	if pgCode(err) != "54000" || !strings.Contains(err.Error(), "refers to the row") || !strings.Contains(err.Error(), "2100 rows once for each of 2100 rows") {
		t.Fatalf("2,100 rows: %v, want 54000 naming the rows compared", err)
	}
	// The session goes on.
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE aid BETWEEN $1 AND $2", lo, hi).Scan(&got); err != nil || got != 300 {
		t.Fatalf("after the refusal: %d, %v", got, err)
	}
	for i := range e.db.m.Shards {
		if _, err := e.db.shardConn(t, i).Exec(ctx, "DELETE FROM accounts WHERE aid BETWEEN $1 AND $2", lo, lo+n-1); err != nil {
			t.Fatal(err)
		}
	}
}
