package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// waitMetric polls a metric until it equals want (or fails at the deadline).
func waitMetric(t *testing.T, srv *proxy.Server, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := metricSum(t, srv, name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want %v", name, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sessionMode() envOpt { return func(c *proxy.Config) { c.PoolMode = proxy.PoolSession } }

// TestPinTemporaryTable: in transaction pooling a temporary table pins the
// client to a direct backend of its own, on the default shard, until it
// is dropped; meanwhile a statement for another shard is refused, and
// the session's own transactions see the table.
func TestPinTemporaryTable(t *testing.T) {
	forEachPath(t, func(t *testing.T, via string, e *proxyEnv) {
		ctx := ctxT(t, time.Minute)
		conn := e.connect(t)
		pid := func() int {
			var p int
			if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&p); err != nil {
				t.Fatal(err)
			}
			return p
		}
		if _, err := conn.Exec(ctx, "CREATE TEMP TABLE pin_t (a int)"); err != nil {
			t.Fatal(err)
		}
		waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 1)
		p1 := pid()
		for i := 0; i < 3; i++ {
			if _, err := conn.Exec(ctx, "INSERT INTO pin_t VALUES ($1)", i); err != nil {
				t.Fatal(err)
			}
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM pin_t").Scan(&n); err != nil || n != 3 {
			t.Fatalf("count = %d, %v", n, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if p2 := pid(); p2 != p1 {
			t.Fatalf("backend changed while pinned: %d then %d", p1, p2)
		}
		// A keyed statement for the default shard runs; for another, refused.
		k0 := e.db.keysOn(0, 1, 9_100_000)[0]
		if _, err := conn.Exec(ctx, "SELECT abalance FROM accounts WHERE aid = $1", k0); err != nil {
			t.Fatalf("default shard's key: %v", err)
		}
		k1 := e.db.keysOn(1, 1, 9_100_000)[0]
		_, err = conn.Exec(ctx, "SELECT abalance FROM accounts WHERE aid = $1", k1)
		if pgCode(err) != "0A000" || !strings.Contains(err.Error(), "pinned") {
			t.Fatalf("other shard's key while pinned: %v", err)
		}
		// The temporary table is the session's, on its backend, not an
		// unsharded table of the default shard: a keyed read that also
		// reads it runs there (never in two stages, which would read it
		// on a pooled connection), and is refused for another shard.
		if err := conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM pin_t) + 0 * count(*) FROM accounts WHERE aid = $1", k0).Scan(&n); err != nil || n != 3 {
			t.Fatalf("default shard's key with the temporary table: %d, %v", n, err)
		}
		_, err = conn.Exec(ctx, "SELECT abalance FROM accounts WHERE aid = $1 AND aid IN (SELECT a FROM pin_t)", k1)
		if pgCode(err) != "0A000" || !strings.Contains(err.Error(), "pinned") {
			t.Fatalf("other shard's key with the temporary table while pinned: %v", err)
		}
		_, err = conn.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid IN (SELECT a FROM pin_t)")
		if pgCode(err) != "0A000" || !strings.Contains(err.Error(), "temporary table pin_t") {
			t.Fatalf("every shard's rows with the temporary table: %v", err)
		}
		if _, err := conn.Exec(ctx, "DROP TABLE pin_t"); err != nil {
			t.Fatal(err)
		}
		waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)
		if _, err := conn.Exec(ctx, "SELECT abalance FROM accounts WHERE aid = $1", k1); err != nil {
			t.Fatalf("other shard's key after the pin ended: %v", err)
		}
	})
}

// TestPinSessionState: the kinds of session state that pin, and what
// ends each pin.
func TestPinSessionState(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, 2*time.Minute)
	for _, tc := range []struct {
		name       string
		pin, unpin []string
		check      string // a query that must work while pinned
	}{
		{"WITH HOLD cursor", []string{"BEGIN", "DECLARE c CURSOR WITH HOLD FOR SELECT generate_series(1, 3)", "COMMIT"}, []string{"CLOSE ALL"}, "FETCH 1 FROM c"},
		{"session advisory lock", []string{"SELECT pg_advisory_lock(4242)"}, []string{"SELECT pg_advisory_unlock_all()"}, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"},
		// Alone and outside a transaction block it is a session setting
		// the proxy keeps (TestSetConfigSession); inside one it pins.
		{"set_config(false)", []string{"BEGIN", "SELECT set_config('application_name', 'pinned_app', false)", "COMMIT"}, []string{"DISCARD ALL"}, "SELECT 1 WHERE current_setting('application_name') = 'pinned_app'"},
		{"DISCARD TEMP ends a temp pin", []string{"CREATE TEMP TABLE pin_d (a int)"}, []string{"DISCARD TEMP"}, "SELECT count(*) FROM pin_d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := e.connect(t)
			for _, q := range tc.pin {
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 1)
			if _, err := conn.Exec(ctx, tc.check); err != nil {
				t.Fatalf("%s: %v", tc.check, err)
			}
			for _, q := range tc.unpin {
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)
		})
	}
}

// TestPinReasonsFollowState: a pin held for two reasons shows the one
// left once the other's state is gone (SHOW CLIENTS' pinned column,
// Server.PinnedSessions), and ends with it.
func TestPinReasonsFollowState(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t)
	reason := func() string {
		ps := e.srv.PinnedSessions()
		if len(ps) != 1 {
			t.Fatalf("pinned sessions: %+v, want 1", ps)
		}
		return ps[0].Reason
	}
	for _, q := range []string{"SELECT pg_advisory_lock(4244)", "CREATE TEMP TABLE pin_r (a int)"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if r := reason(); !strings.Contains(r, "advisory") || !strings.Contains(r, "temporary") {
		t.Fatalf("pinned for %q, want both the lock and the temporary table", r)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
		t.Fatal(err)
	}
	if r := reason(); r != "temporary objects" {
		t.Fatalf("after the lock was released: pinned for %q, want temporary objects", r)
	}
	if _, err := conn.Exec(ctx, "DROP TABLE pin_r"); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)
}

// TestPinNotEndedByText: what ends a pin is recognized from the parse
// tree — the name pg_advisory_unlock_all in a string or a comment, or
// UNLISTEN of one channel, leaves a session holding an advisory lock
// pinned to the backend that holds it.
func TestPinNotEndedByText(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, 2*time.Minute)
	conn := e.connect(t)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(4243)"); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 1)
	for _, q := range []string{"SELECT 'pg_advisory_unlock_all'", "SELECT 1 /* pg_advisory_unlock_all() */", "UNLISTEN some_channel", "CLOSE ALL"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var held int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND objid = 4243").Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 1 {
		t.Fatalf("the session's backend holds %d advisory locks 4243, want 1: it was unpinned while holding the lock", held)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)
}

// TestSettingsInTransactionsAndQueryStrings: a session SET inside a
// transaction that rolls back is undone; one in a query string with other
// statements applies in order (both pin the session).
func TestSettingsInTransactionsAndQueryStrings(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t, func(c *pgx.ConnConfig) { c.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol })
	show := func(name string) string {
		var v string
		if err := conn.QueryRow(ctx, "SHOW "+name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := show("work_mem")
	for _, q := range []string{"BEGIN", "SET work_mem = '9MB'", "ROLLBACK"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if got := show("work_mem"); got != before {
		t.Fatalf("work_mem after a rolled-back SET = %s, want %s", got, before)
	}
	res, err := conn.PgConn().Exec(ctx, "SET work_mem = '11MB'; SELECT current_setting('work_mem')").ReadAll()
	if err != nil || len(res) != 2 || len(res[1].Rows) != 1 || string(res[1].Rows[0][0]) != "11MB" {
		t.Fatalf("SET then SELECT in one query string: %+v, %v", res, err)
	}
	if got := show("work_mem"); got != "11MB" {
		t.Fatalf("work_mem after it = %s", got)
	}
	if _, err := conn.Exec(ctx, "RESET work_mem"); err != nil {
		t.Fatal(err)
	}
	if got := show("work_mem"); got != before {
		t.Fatalf("work_mem after RESET = %s, want %s", got, before)
	}
}

// TestQueryStringEndingWithSettings: session settings after the other
// statements of a query string take effect with the string, and the
// session is not left pinned — asyncpg's pool resets every connection it
// takes back with "SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN
// *; RESET ALL;", which used to pin each of them for good (to the shard
// of its first statement: every later key of another shard was refused).
// A string whose SET fails changes nothing; a PREPARE in a query string
// is kept for later EXECUTEs (its pin lasts).
func TestQueryStringEndingWithSettings(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t, func(c *pgx.ConnConfig) { c.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol })
	show := func() string {
		var v string
		if err := conn.QueryRow(ctx, "SHOW work_mem").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	// Keys of two shards: a pinned session would refuse one of them.
	keys := []int64{e.db.keysOn(0, 1, 7_800_000)[0], e.db.keysOn(1, 1, 7_800_000)[0]}
	unpinned := func(after string) {
		t.Helper()
		waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)
		for _, k := range keys {
			if _, err := conn.Exec(ctx, "SELECT abalance FROM accounts WHERE aid = $1", k); err != nil {
				t.Fatalf("after %q, key %d: %v", after, k, err)
			}
		}
	}
	before := show()
	q := "SELECT 1; SET work_mem = '13MB'"
	if _, err := conn.Exec(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if got := show(); got != "13MB" {
		t.Fatalf("work_mem after %q = %s, want 13MB", q, got)
	}
	unpinned(q)
	q = "SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL;"
	if _, err := conn.Exec(ctx, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if got := show(); got != before {
		t.Fatalf("work_mem after asyncpg's reset = %s, want %s", got, before)
	}
	unpinned(q)
	// The same reset inside a transaction, after its ROLLBACK (asyncpg
	// gives a connection back so when its transaction was left open):
	// the transaction ends (its write undone), then the reset runs.
	fresh := e.db.keysOn(1, 1, 5_170_000)[0] // a range no other test writes
	for _, failed := range []bool{false, true} {
		for _, q := range []string{"BEGIN", "SET LOCAL work_mem = '14MB'", fmt.Sprintf("INSERT INTO accounts (aid, abalance, note) VALUES (%d, 1, 'reset')", fresh)} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		if _, err := conn.Exec(ctx, "SELECT 1/0"); failed && pgCode(err) != "22012" {
			t.Fatalf("failing the transaction: %v", err)
		}
		q = "ROLLBACK;\nSELECT pg_advisory_unlock_all();\nCLOSE ALL;\nUNLISTEN *;\nRESET ALL;"
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s (transaction failed: %v): %v", q, failed, err)
		}
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", fresh).Scan(&n); err != nil || n != 0 {
			t.Fatalf("rows after the reset's ROLLBACK: %d, %v; want 0", n, err)
		}
		if got := show(); got != before {
			t.Fatalf("work_mem after the reset in a transaction = %s, want %s", got, before)
		}
		unpinned(q)
	}
	q = "SELECT 1; SET work_mem = 'lots'"
	if _, err := conn.Exec(ctx, q); pgCode(err) != "22023" {
		t.Fatalf("%s: %v, want 22023", q, err)
	}
	if got := show(); got != before {
		t.Fatalf("work_mem after a string whose SET failed = %s, want %s", got, before)
	}
	unpinned(q)
	for _, q := range []string{"SELECT 2; PREPARE ends_with_prepare AS SELECT 42", "PREPARE starts_with_prepare AS SELECT 43; SELECT 3"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for name, want := range map[string]int{"ends_with_prepare": 42, "starts_with_prepare": 43} {
		var got int
		if err := conn.QueryRow(ctx, "EXECUTE "+name).Scan(&got); err != nil || got != want {
			t.Fatalf("EXECUTE %s: %d, %v; want %d", name, got, err, want)
		}
	}
}

// TestSessionPoolMode: every client has a backend of its own for its
// session: the same backend PID in every transaction, session state of any
// kind, RESET to the startup value, LISTEN/NOTIFY delivered while idle.
func TestSessionPoolMode(t *testing.T) {
	e := startProxy(t, sessionMode())
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t, func(c *pgx.ConnConfig) { c.RuntimeParams["work_mem"] = "5MB" })
	var p1, p2 int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&p1); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"SET work_mem = '6MB'", "CREATE TEMP TABLE s_t AS SELECT 1 AS a", "PREPARE s_p AS SELECT a FROM s_t", "LISTEN s_chan"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var a int
	if err := conn.QueryRow(ctx, "EXECUTE s_p").Scan(&a); err != nil || a != 1 {
		t.Fatalf("EXECUTE: %d, %v", a, err)
	}
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&p2); err != nil || p1 != p2 {
		t.Fatalf("backend PID %d then %d (%v)", p1, p2, err)
	}
	var wm string
	if _, err := conn.Exec(ctx, "RESET work_mem"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SHOW work_mem").Scan(&wm); err != nil || wm != "5MB" {
		t.Fatalf("RESET work_mem gives %q (%v), want the startup value 5MB", wm, err)
	}
	other := e.connect(t)
	var sender int
	if err := other.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&sender); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, "NOTIFY s_chan, 'hello'"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(wctx)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	if n.Channel != "s_chan" || n.Payload != "hello" || int(n.PID) != sender {
		t.Fatalf("notification %+v, want s_chan/hello from %d", n, sender)
	}
	if got := metricSum(t, e.srv, "pgshard_proxy_pinned_sessions"); got != 2 {
		t.Fatalf("pinned sessions = %v, want 2", got)
	}
	if ps := e.srv.PinnedSessions(); len(ps) != 2 || !strings.Contains(ps[0].Reason, "session mode") {
		t.Fatalf("PinnedSessions = %+v", ps)
	}
}

// TestPinnedPingSeesItsBackend: a ping (an empty query: pgx's "-- ping",
// lib/pq's ";") of a pinned session is its own backend's to answer, so a
// backend terminated since the session's last statement ends the session
// at the ping, as on a direct connection.
func TestPinnedPingSeesItsBackend(t *testing.T) {
	e := startProxy(t, sessionMode())
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t)
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if err := conn.Ping(ctx); err != nil {
		t.Fatalf("ping of a live pinned session: %v", err)
	}
	var ok bool
	if err := e.db.shardConn(t, 0).QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminating the session's backend %d: %v, %v", pid, ok, err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("the ping succeeded after the session's own backend was terminated")
	}
}

// TestListenInTransactionMode: LISTEN pins the session; a NOTIFY from
// another client reaches it while it is idle, in order.
func TestListenInTransactionMode(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	listener := e.connect(t)
	if _, err := listener.Exec(ctx, "LISTEN t_chan"); err != nil {
		t.Fatal(err)
	}
	sender := e.connect(t)
	for i := 0; i < 3; i++ {
		if _, err := sender.Exec(ctx, "SELECT pg_notify('t_chan', $1)", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := listener.WaitForNotification(wctx)
		cancel()
		if err != nil || n.Payload != fmt.Sprint(i) {
			t.Fatalf("notification %d: %+v, %v", i, n, err)
		}
	}
	if _, err := listener.Exec(ctx, "UNLISTEN *"); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)
}

// TestMaxPinned: beyond Config.MaxPinned a statement that would pin is
// refused with 53300.
func TestMaxPinned(t *testing.T) {
	e := startProxy(t, func(c *proxy.Config) { c.MaxPinned = 1 })
	ctx := ctxT(t, time.Minute)
	a, b := e.connect(t), e.connect(t)
	if _, err := a.Exec(ctx, "CREATE TEMP TABLE mp_a (x int)"); err != nil {
		t.Fatal(err)
	}
	_, err := b.Exec(ctx, "CREATE TEMP TABLE mp_b (x int)")
	if pgCode(err) != "53300" {
		t.Fatalf("second pin: %v, want 53300", err)
	}
	if _, err := a.Exec(ctx, "DISCARD ALL"); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)
	if _, err := b.Exec(ctx, "CREATE TEMP TABLE mp_b (x int)"); err != nil {
		t.Fatalf("after the first pin ended: %v", err)
	}
}

// TestUnshardedTables: a table outside the sharding schema lives on the
// default shard: its DDL, writes and reads run there only; a read joining
// it with rows of another shard reads it there first, or is refused.
func TestUnshardedTables(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t)
	for _, q := range []string{
		"DROP TABLE IF EXISTS unsh_settings",
		"CREATE TABLE unsh_settings (k text PRIMARY KEY, v text)",
		"INSERT INTO unsh_settings VALUES ('a', '1'), ('b', '2')",
		"DO $$BEGIN UPDATE unsh_settings SET v = '3' WHERE k = 'b'; END$$",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM unsh_settings WHERE v IN ('1', '3')").Scan(&n); err != nil || n != 2 {
		t.Fatalf("count = %d, %v", n, err)
	}
	for i := range e.db.m.Shards {
		var exists bool
		if err := e.db.shardConn(t, i).QueryRow(ctx, "SELECT to_regclass('unsh_settings') IS NOT NULL").Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists != (i == 0) {
			t.Errorf("shard %d: table exists = %v", i, exists)
		}
	}
	// Joined with a keyed read of another shard, it is read on the default
	// shard first and joined there as a list of its rows (two stages); a
	// subquery tied to that shard's row by an inequality is answered by
	// reading the keyed row first (its key pushed into it: its shard
	// only) and running the statement on the default shard.
	k1 := e.db.keysOn(1, 1, 9_200_000)[0]
	if _, err := conn.Exec(ctx, "INSERT INTO accounts (aid, abalance) VALUES ($1, 2) ON CONFLICT (aid) DO UPDATE SET abalance = 2", k1); err != nil {
		t.Fatal(err)
	}
	var joined int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts a, unsh_settings s WHERE a.aid = $1", k1).Scan(&joined); err != nil || joined != 2 {
		t.Fatalf("join with another shard's rows: %d rows (want 2), %v", joined, err)
	}
	for _, c := range []struct {
		add  int
		want int
	}{{0, 1}, {5, 0}} { // '3' > '2'; neither '1' nor '3' > '7'
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts a WHERE a.aid = $1 AND EXISTS (SELECT 1 FROM unsh_settings s WHERE s.v > (a.abalance + $2)::text)", k1, c.add).Scan(&n)
		if err != nil || n != c.want {
			t.Fatalf("a subquery tied to another shard's row (+%d): %d rows (want %d), %v", c.add, n, c.want, err)
		}
	}
	if _, err := conn.Exec(ctx, "DROP TABLE unsh_settings"); err != nil {
		t.Fatal(err)
	}
	// One query string with DDL every shard needs and an unsharded table:
	// the type is on every shard, the table on the default one.
	if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS unsh_mix; DROP TYPE IF EXISTS unsh_mix_t"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TYPE unsh_mix_t AS ENUM ('a', 'b'); CREATE TABLE unsh_mix (x unsh_mix_t)"); err != nil {
		t.Fatal(err)
	}
	for i := range e.db.m.Shards {
		var typ, tab bool
		if err := e.db.shardConn(t, i).QueryRow(ctx, "SELECT to_regtype('unsh_mix_t') IS NOT NULL, to_regclass('unsh_mix') IS NOT NULL").Scan(&typ, &tab); err != nil {
			t.Fatal(err)
		}
		if !typ || tab != (i == 0) {
			t.Errorf("shard %d: type %v, table %v", i, typ, tab)
		}
	}
}

// TestExtraDatabase: a passthrough database served on the same listener:
// its dbname reaches its own backend database, with every statement
// routable there (one shard).
func TestExtraDatabase(t *testing.T) {
	d := db(t)
	sh := d.m.Shards[1]
	m := &shardmap.Map{Epoch: 1, Buckets: d.m.Buckets, Shards: []shardmap.Shard{{Name: "db", DSN: sh.DSN, PoolerDSN: sh.PoolerDSN}},
		Ranges: []shardmap.Range{{Lo: 0, Hi: d.m.Buckets - 1, Shard: "db"}}}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	an, err := route.New(m, testSchema(), route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := startProxy(t, func(c *proxy.Config) {
		c.ExtraDatabases = []proxy.Database{{Name: "passthru", Config: proxy.Config{Map: m, Analyzer: an, UsePooler: true}}}
	})
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t, func(c *pgx.ConnConfig) { c.Database = "passthru" })
	// Key-less DDL inside a transaction and an unknown function: on one
	// shard both are routable.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"CREATE TABLE IF NOT EXISTS xdb_t (a int)", "INSERT INTO xdb_t VALUES (1)", "SELECT count(*) FROM accounts"} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var port string
	if err := conn.QueryRow(ctx, "SELECT current_setting('port')").Scan(&port); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sh.DSN, ":"+port+"/") {
		t.Fatalf("passthrough database runs on port %s, want shard1's (%s)", port, sh.DSN)
	}
}

// TestSessionModeNamedStatements: in session pooling a client's named
// statements are the server's own, as on a direct connection: they are in
// pg_prepared_statements, and a schema change under one gives Postgres's
// own "cached plan must not change result type".
func TestSessionModeNamedStatements(t *testing.T) {
	e := startProxy(t, sessionMode())
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t)
	pc := conn.PgConn()
	if _, err := conn.Exec(ctx, "CREATE TEMP TABLE sn_t (a int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Prepare(ctx, "sn_ps", "SELECT * FROM sn_t", nil); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE name = 'sn_ps'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("pg_prepared_statements has sn_ps %d times (%v)", n, err)
	}
	if _, err := conn.Exec(ctx, "ALTER TABLE sn_t ADD COLUMN b int"); err != nil {
		t.Fatal(err)
	}
	res := pc.ExecPrepared(ctx, "sn_ps", nil, nil, nil).Read()
	if pgCode(res.Err) != "0A000" || !strings.Contains(res.Err.Error(), "cached plan must not change result type") {
		t.Fatalf("after the schema change: %v", res.Err)
	}
	if err := pc.Deallocate(ctx, "sn_ps"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE name = 'sn_ps'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("after Close, pg_prepared_statements has sn_ps %d times (%v)", n, err)
	}
}

// TestDeferredErrorAtSync: an error raised when a pipeline's implicit
// transaction commits (a deferred unique constraint) comes after the
// statement's CommandComplete, at Sync: the client gets it and then
// ReadyForQuery, and the connection stays usable (it used to lose the
// ReadyForQuery and hang).
func TestDeferredErrorAtSync(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []envOpt
	}{{"transaction", nil}, {"session", []envOpt{sessionMode()}}} {
		t.Run(tc.name, func(t *testing.T) {
			e := startProxy(t, tc.opts...)
			ctx := ctxT(t, time.Minute)
			conn := e.connect(t)
			if _, err := conn.Exec(ctx, `CREATE TEMP TABLE de_t (id text PRIMARY KEY, n int NOT NULL, UNIQUE (n) DEFERRABLE INITIALLY DEFERRED);
INSERT INTO de_t VALUES ('a', 1), ('b', 2), ('c', 3)`); err != nil {
				t.Fatal(err)
			}
			rows, err := conn.Query(ctx, "UPDATE de_t SET n = n + 1 WHERE id = 'b' RETURNING *")
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
			}
			if pgCode(rows.Err()) != "23505" {
				t.Fatalf("want 23505 at commit, got %v", rows.Err())
			}
			var one int
			if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
				t.Fatalf("after it: %v", err)
			}
		})
	}
}

// TestSessionModeOneShardRelay: a session-pooling client of a database of
// one shard is pinned at startup and relayed unchanged: BackendKeyData
// carries the backend's real PID (pg_backend_pid() agrees), a cancel
// reaches its query, a terminated backend ends the client's session.
func TestSessionModeOneShardRelay(t *testing.T) {
	d := db(t)
	sh := d.m.Shards[0]
	m := &shardmap.Map{Epoch: 1, Buckets: d.m.Buckets, Shards: []shardmap.Shard{{Name: "db", DSN: sh.DSN, PoolerDSN: sh.PoolerDSN}},
		Ranges: []shardmap.Range{{Lo: 0, Hi: d.m.Buckets - 1, Shard: "db"}}}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	an, err := route.New(m, testSchema(), route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := startProxy(t, func(c *proxy.Config) {
		c.ExtraDatabases = []proxy.Database{{Name: "one", Config: proxy.Config{Map: m, Analyzer: an, UsePooler: true, PoolMode: proxy.PoolSession}}}
	})
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t, func(c *pgx.ConnConfig) { c.Database = "one" })
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if pid != conn.PgConn().PID() {
		t.Fatalf("BackendKeyData PID %d, pg_backend_pid() %d", conn.PgConn().PID(), pid)
	}
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = conn.Exec(cctx, "SELECT pg_sleep(20)")
	cancel()
	if err == nil {
		t.Fatal("pg_sleep(20) was not cancelled")
	}
	// pgx closes the connection after a cancelled query; a new one works.
	conn = e.connect(t, func(c *pgx.ConnConfig) { c.Database = "one" })
	if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())"); err == nil || pgCode(err) != "57P01" {
		t.Fatalf("terminating its own backend: %v, want 57P01", err)
	}
	if !conn.IsClosed() {
		if err := conn.Ping(ctx); err == nil {
			t.Fatal("the session outlived its backend")
		}
	}
}

// TestWildcardUserAsItself: a client admitted through the "*" login
// reaches the shards as its own role, in both pool modes; a listed user
// shares the shard DSN's. (Directly: the test cluster's PgBouncers admit
// only the roles of their auth_file.)
func TestWildcardUserAsItself(t *testing.T) {
	for _, mode := range []proxy.PoolMode{proxy.PoolTransaction, proxy.PoolSession} {
		t.Run(mode.String(), func(t *testing.T) {
			e := startProxy(t, direct(), withUsers(proxy.User{Name: "*", Trust: true}), func(c *proxy.Config) { c.PoolMode = mode })
			ctx := ctxT(t, time.Minute)
			admin := e.connect(t)
			for i := range e.db.m.Shards {
				if _, err := e.db.shardConn(t, i).Exec(ctx, "DO $$BEGIN CREATE ROLE pin_self LOGIN; EXCEPTION WHEN duplicate_object THEN END$$"); err != nil {
					t.Fatal(err)
				}
			}
			var who string
			if err := admin.QueryRow(ctx, "SELECT current_user").Scan(&who); err != nil || who != "postgres" {
				t.Fatalf("listed user: current_user %q (%v)", who, err)
			}
			conn := e.connect(t, func(c *pgx.ConnConfig) { c.User = "pin_self" })
			for i := 0; i < 2; i++ {
				if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&who); err != nil || who != "pin_self" {
					t.Fatalf("wildcard user: current_user %q (%v)", who, err)
				}
			}
		})
	}
}

// TestWildcardUserPoolerRefusal: a role the shards' PgBouncer does not
// admit, logging in through the "*" login, is refused with Postgres's
// SQLSTATE for it (28000), not PgBouncer's 08P01, and the shard named.
func TestWildcardUserPoolerRefusal(t *testing.T) {
	e := startProxy(t, withUsers(proxy.User{Name: "*", Trust: true}))
	ctx := ctxT(t, time.Minute)
	cfg, err := pgx.ParseConfig(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = "no_such_role_anywhere"
	_, err = pgx.ConnectConfig(ctx, cfg)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "28000" || !strings.Contains(pe.Message, "PgBouncer of shard") {
		t.Fatalf("login of a role PgBouncer does not know: %v, want 28000 naming the shard's PgBouncer", err)
	}
}

// TestTerminateSessionByPID: pg_terminate_backend / pg_cancel_backend of a
// client session's BackendKeyData PID act on that session (its PID is the
// proxy's, no backend's), in the forms drivers and tools use; SELECT
// pg_backend_pid() answers that PID.
func TestTerminateSessionByPID(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	ctl := e.connect(t)
	for _, tc := range []struct {
		name string
		sql  func(pid uint32) (string, []any)
	}{
		{"literal, simple protocol", func(pid uint32) (string, []any) { return fmt.Sprintf("select pg_terminate_backend(%d)", pid), nil }},
		{"parameter", func(pid uint32) (string, []any) { return "select pg_terminate_backend($1)", []any{pid} }},
		{"unnest of an array", func(pid uint32) (string, []any) {
			return "select pg_terminate_backend(n) from unnest($1::int[]) n", []any{[]int32{int32(pid)}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			victim := e.connect(t)
			q, args := tc.sql(victim.PgConn().PID())
			var ok bool
			if err := ctl.QueryRow(ctx, q, args...).Scan(&ok); err != nil || !ok {
				t.Fatalf("%s: %v, %v", q, ok, err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				err := victim.Ping(ctx)
				if err != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the terminated session still answers")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	t.Run("its own session, pg_backend_pid()", func(t *testing.T) {
		// As on a direct connection the caller's session ends with FATAL
		// 57P01 (the pooled backend it ran on is not the session).
		self := e.connect(t)
		var ok bool
		err := self.QueryRow(ctx, "select pg_terminate_backend(pg_backend_pid())").Scan(&ok)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "57P01" || pe.SeverityUnlocalized != "FATAL" {
			t.Fatalf("self-termination: %v, want FATAL 57P01", err)
		}
		if !self.IsClosed() {
			t.Fatal("the session survived its own pg_terminate_backend(pg_backend_pid())")
		}
	})
	t.Run("its own session, by its PID", func(t *testing.T) {
		// The caller's own PID as a number (psycopg's test_broken passes
		// its BackendKeyData PID as a parameter), in a transaction block
		// or not, in the extended or the simple protocol: the statement
		// is interrupted by the FATAL, as on a direct connection, whose
		// backend signals itself — no row before it.
		for _, form := range []string{"param", "literal", "param-in-block", "literal-simple"} {
			self := e.connect(t)
			pid := self.PgConn().PID()
			if strings.HasSuffix(form, "in-block") {
				if _, err := self.Exec(ctx, "BEGIN"); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			switch form {
			case "param", "param-in-block":
				var ok bool
				err = self.QueryRow(ctx, "select pg_terminate_backend($1)", pid).Scan(&ok)
			case "literal":
				var ok bool
				err = self.QueryRow(ctx, fmt.Sprintf("select pg_terminate_backend(%d)", pid)).Scan(&ok)
			case "literal-simple":
				_, err = self.PgConn().Exec(ctx, fmt.Sprintf("select pg_terminate_backend(%d)", pid)).ReadAll()
			}
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "57P01" || pe.SeverityUnlocalized != "FATAL" {
				t.Fatalf("%s: self-termination by PID: %v, want FATAL 57P01", form, err)
			}
			if _, err := self.Exec(ctx, "SELECT 1"); err == nil {
				t.Fatalf("%s: the session survived pg_terminate_backend of its own PID", form)
			}
		}
		// On the wire: the FATAL and then the end of the connection, no
		// ReadyForQuery for the pipeline's Sync (libpq would take one as
		// the connection living on: psycopg's test_broken).
		c := dialRaw(t, e.addr)
		c.fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "postgres", "database": e.db.name}})
		c.flush()
		var pid uint32
		for pid == 0 {
			m, err := c.fe.Receive()
			if err != nil {
				t.Fatal(err)
			}
			if k, ok := m.(*pgproto3.BackendKeyData); ok {
				pid = k.ProcessID
			}
		}
		c.until('Z', "startup")
		c.sendAll([]pgproto3.FrontendMessage{
			&pgproto3.Parse{Query: "select pg_terminate_backend($1)", ParameterOIDs: []uint32{23}},
			&pgproto3.Bind{Parameters: [][]byte{[]byte(strconv.FormatUint(uint64(pid), 10))}},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}})
		var seen []string
		for {
			m, err := c.fe.Receive()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("after %v: %v, want the connection closed", seen, err)
				}
				break
			}
			seen = append(seen, fmt.Sprintf("%T", m))
			if e, ok := m.(*pgproto3.ErrorResponse); ok && (e.Code != "57P01" || e.Severity != "FATAL") {
				t.Fatalf("error %s %s %q, want FATAL 57P01", e.Severity, e.Code, e.Message)
			}
		}
		// (Postgres answers the Bind and the Describe before its Execute
		// fails; pgshard carries the call out at the Bind, whose answer
		// the FATAL then is.)
		if want := []string{"*pgproto3.ParseComplete", "*pgproto3.ErrorResponse"}; !slices.Equal(seen, want) {
			t.Errorf("on the wire: %v, want %v then the connection's end", seen, want)
		}
	})
	t.Run("pg_backend_pid() is the session's", func(t *testing.T) {
		// The PID the calls above take, in every protocol form, alone or
		// inside a transaction on a pooled backend; its row is Postgres's
		// (int4, named after the function or its alias).
		conn := e.connect(t)
		want := conn.PgConn().PID()
		k := e.db.keysOn(1, 1, 9_500_000)[0]
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
			for _, q := range []string{"SELECT pg_backend_pid()", "select pg_catalog.pg_backend_pid() AS pid"} {
				var pid uint32
				if err := conn.QueryRow(ctx, q, mode).Scan(&pid); err != nil || pid != want {
					t.Fatalf("%s (%v): %d (%v), want the session's %d", q, mode, pid, err, want)
				}
			}
		}
		rows, err := conn.Query(ctx, "SELECT pg_backend_pid() AS mine")
		if err != nil {
			t.Fatal(err)
		}
		fd := rows.FieldDescriptions()
		rows.Close()
		if len(fd) != 1 || fd[0].Name != "mine" || fd[0].DataTypeOID != 23 {
			t.Fatalf("row description %+v, want one int4 column \"mine\"", fd)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var pid uint32
		if _, err := tx.Exec(ctx, "SELECT 1 FROM accounts WHERE aid = $1", k); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil || pid != want {
			t.Fatalf("in a transaction: %d (%v), want %d", pid, err, want)
		}
		var backend uint32
		if err := tx.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&backend); err != nil || backend == want {
			t.Fatalf("inside a larger statement pg_backend_pid() is the backend's: %d (%v)", backend, err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		victim := e.connect(t)
		errc := make(chan error, 1)
		sh := e.db.m.Shards[0].Name
		go func() { _, err := victim.Exec(ctx, "/* pgshard:shard="+sh+" */ SELECT pg_sleep(20)"); errc <- err }()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var n int
			if err := ctl.QueryRow(ctx, "/* pgshard:shard="+sh+" */ SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%SELECT pg_sleep(20)' AND state = 'active' AND pid <> pg_backend_pid()").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the query never started")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := ctl.Exec(ctx, fmt.Sprintf("select pg_cancel_backend(%d)", victim.PgConn().PID())); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; pgCode(err) != "57014" {
			t.Fatalf("cancelled query: %v, want 57014", err)
		}
	})
}

// TestReadOnlyStartupThroughPooler: a client that connects with
// default_transaction_read_only=on gets read-only transactions through
// PgBouncer too (the preamble's transaction had begun read-write).
func TestReadOnlyStartupThroughPooler(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t, func(c *pgx.ConnConfig) { c.RuntimeParams["default_transaction_read_only"] = "on" })
	var ro string
	if err := conn.QueryRow(ctx, "SHOW transaction_read_only").Scan(&ro); err != nil || ro != "on" {
		t.Fatalf("transaction_read_only = %q (%v), want on", ro, err)
	}
	k := e.db.keysOn(1, 1, 9_300_000)[0]
	if _, err := conn.Exec(ctx, "INSERT INTO accounts (aid) VALUES ($1)", k); pgCode(err) != "25006" {
		t.Fatalf("a write in a read-only session: %v, want 25006", err)
	}
}

// TestCopyFromWithSettingsThroughPooler: a COPY FROM STDIN of a client
// whose settings the proxy applies per transaction (BEGIN, preamble, COPY,
// COMMIT) sends the COMMIT only after the copy (it used to arrive during
// it: "unexpected message type 0x51 during COPY from stdin").
func TestCopyFromWithSettingsThroughPooler(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t, func(c *pgx.ConnConfig) { c.RuntimeParams["work_mem"] = "7MB" })
	if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS copy_w; CREATE TABLE copy_w (a int, wm text)"); err != nil {
		t.Fatal(err)
	}
	n, err := conn.CopyFrom(ctx, pgx.Identifier{"copy_w"}, []string{"a"}, pgx.CopyFromRows([][]any{{1}, {2}, {3}}))
	if err != nil || n != 3 {
		t.Fatalf("CopyFrom: %d, %v", n, err)
	}
	var got int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM copy_w").Scan(&got); err != nil || got != 3 {
		t.Fatalf("count %d, %v", got, err)
	}
	if _, err := conn.Exec(ctx, "DROP TABLE copy_w"); err != nil {
		t.Fatal(err)
	}
}

// TestPreparePinsOnOneShard: on a database of one shard an SQL-level
// PREPARE pins the session (the server's own statement: EXPLAIN EXECUTE,
// pg_prepared_statements), until DEALLOCATE; on several shards it stays
// virtual (each EXECUTE routed by its arguments: TestSessionFeatures).
func TestPreparePinsOnOneShard(t *testing.T) {
	d := db(t)
	sh := d.m.Shards[2]
	m := &shardmap.Map{Epoch: 1, Buckets: d.m.Buckets, Shards: []shardmap.Shard{{Name: "db", DSN: sh.DSN, PoolerDSN: sh.PoolerDSN}},
		Ranges: []shardmap.Range{{Lo: 0, Hi: d.m.Buckets - 1, Shard: "db"}}}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	an, err := route.New(m, testSchema(), route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := startProxy(t, func(c *proxy.Config) {
		c.ExtraDatabases = []proxy.Database{{Name: "one", Config: proxy.Config{Map: m, Analyzer: an, UsePooler: true}}}
	})
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t, func(c *pgx.ConnConfig) {
		c.Database = "one"
		c.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	})
	if _, err := conn.Exec(ctx, "PREPARE pp1(int) AS SELECT $1 + 1"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE name = 'pp1'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("pg_prepared_statements: %d, %v", n, err)
	}
	if _, err := conn.Exec(ctx, "EXPLAIN EXECUTE pp1(1)"); err != nil {
		t.Fatalf("EXPLAIN EXECUTE: %v", err)
	}
	if _, err := conn.Exec(ctx, "DEALLOCATE pp1"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements").Scan(&n); err != nil || n != 0 {
		t.Fatalf("after DEALLOCATE, pg_prepared_statements: %d, %v", n, err)
	}
}

// TestPreparedAcrossPin: SQL-level prepared statements behave as on one
// Postgres when the session is pinned after, and unpinned between, their
// PREPARE and EXECUTE: one namespace for the statements the proxy keeps
// and those of the pinned backend (a statement made before a pin runs on
// it, one made while pinned outlives the pin, a name is never prepared
// twice), reply by reply against one database, through PgBouncer, with a
// setting and directly.
func TestPreparedAcrossPin(t *testing.T) {
	for i, ws := range wireSetups {
		t.Run(ws.name, func(t *testing.T) {
			e, _, px, ref := startWirePair(t, ws, 7_500_000+int64(i)*10_000)
			q := simpleQuery
			bindPy := func(v string) []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: "py", Parameters: [][]byte{[]byte(v)}},
					&pgproto3.Execute{}, &pgproto3.Sync{}}
			}
			steps := func(sqls ...string) [][]pgproto3.FrontendMessage {
				var out [][]pgproto3.FrontendMessage
				for _, s := range sqls {
					out = append(out, q(s))
				}
				return out
			}
			sameReplies(t, px, ref, "before the pin", steps(
				"PREPARE px AS SELECT 7 AS seven",
				"EXECUTE px",
				"PREPARE py(int) AS SELECT $1 + 1 AS next",
				"PREPARE pe AS SELECT 'e' AS e",
			))
			executePe := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "EXECUTE pe"}, &pgproto3.Bind{},
				&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}}
			sameReplies(t, px, ref, "pinned by a temporary table", append(steps(
				"CREATE TEMP TABLE tt (a int)",
				"EXECUTE px",
				"PREPARE px AS SELECT 8",
				"EXECUTE py(3)",
				"INSERT INTO tt VALUES (5)",
				"PREPARE pz AS SELECT a FROM tt",
				"EXECUTE pz",
				"BEGIN",
				"EXECUTE px",
				"PREPARE pw AS SELECT 'w' AS w",
				"COMMIT",
			), bindPy("10"), executePe))
			if got := metricSum(t, e.srv, "pgshard_proxy_pinned_sessions"); got != 1 {
				t.Fatalf("pinned sessions with a temporary table = %v, want 1", got)
			}
			sameReplies(t, px, ref, "the pin ended", append(steps(
				"DROP TABLE tt",
				"EXECUTE py(4)",
				"EXECUTE px",
				"EXECUTE pw",
				"EXECUTE pz",
				"PREPARE pw AS SELECT 1",
				"DEALLOCATE py",
				"EXECUTE py(1)",
			), bindPy("11")))
			waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)
			sameReplies(t, px, ref, "in a query string", steps(
				"SELECT 1; EXECUTE px",
				"CREATE TEMP TABLE t2 (a int); EXECUTE pw",
				"EXECUTE px; DEALLOCATE px; EXECUTE px",
				"DEALLOCATE ALL",
				"EXECUTE pw",
			))
		})
	}
}

// TestPinnedExecuteRoutes: a pinned session's EXECUTE goes by the
// statement it runs, as an unpinned session's does: a key of the pinned
// shard is answered, a key of another shard is refused as a statement
// for another shard is (its backend would have answered no row), and so
// is a statement of every shard; in a query string too.
func TestPinnedExecuteRoutes(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t, func(c *pgx.ConnConfig) { c.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol })
	exec := func(q string) {
		t.Helper()
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("PREPARE before_pin(int) AS SELECT abalance FROM accounts WHERE aid = $1")
	exec("PREPARE every_shard AS SELECT count(*) FROM accounts")
	exec("CREATE TEMP TABLE pinning (a int)")
	pinned := e.srv.PinnedSessions()
	if len(pinned) != 1 {
		t.Fatalf("pinned sessions after CREATE TEMP TABLE: %v, want 1", pinned)
	}
	exec("PREPARE while_pinned(int) AS SELECT abalance FROM accounts WHERE aid = $1")
	var here, there int64
	for i, sh := range e.db.m.Shards {
		k := e.db.keysOn(i, 1, 7_400_000)[0]
		if _, err := e.db.shardConn(t, i).Exec(ctx, "INSERT INTO accounts (aid, abalance) VALUES ($1, 74) ON CONFLICT (aid) DO UPDATE SET abalance = 74", k); err != nil {
			t.Fatal(err)
		}
		if sh.Name == pinned[0].Shard {
			here = k
		} else {
			there = k
		}
	}
	for _, name := range []string{"before_pin", "while_pinned"} {
		for _, q := range []string{"EXECUTE %s(%d)", "EXECUTE %s(%d); SELECT 1"} {
			var got int
			if err := conn.QueryRow(ctx, fmt.Sprintf(q, name, here)).Scan(&got); err != nil || got != 74 {
				t.Fatalf("%s, a key of the pinned shard: %d, %v; want 74", fmt.Sprintf(q, name, here), got, err)
			}
			err := conn.QueryRow(ctx, fmt.Sprintf(q, name, there)).Scan(&got)
			if pgCode(err) != "0A000" || !strings.Contains(err.Error(), "pinned") {
				t.Fatalf("%s, a key of another shard: %d, %v; want 0A000 naming the pin", fmt.Sprintf(q, name, there), got, err)
			}
		}
	}
	var n int
	if err := conn.QueryRow(ctx, "EXECUTE every_shard").Scan(&n); pgCode(err) != "0A000" {
		t.Fatalf("EXECUTE of a read of every shard, pinned: %d, %v; want 0A000", n, err)
	}
	exec("DROP TABLE pinning")
	waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)
	for _, name := range []string{"before_pin", "while_pinned"} {
		var got int
		if err := conn.QueryRow(ctx, fmt.Sprintf("EXECUTE %s(%d)", name, there)).Scan(&got); err != nil || got != 74 {
			t.Fatalf("EXECUTE %s(%d) after the pin: %d, %v; want 74", name, there, got, err)
		}
	}
}

// TestSessionStateStatementsRoute: a statement that keeps session state
// (and so pins the session) and reads sharded rows runs where the rows
// are, not on the pin's usual shard: CREATE TEMP TABLE ... AS of a key of
// another shard holds that key's row (the session is pinned there, its
// temporary table is found there), a temporary view of it reads it, a
// session advisory lock or setting taken in a keyed read and a cursor
// WITH HOLD over one return the row — in the simple protocol and in
// pgx's extended modes (Parse, Bind and Execute in one pipeline; a
// statement described first and bound in a later pipeline, which pins
// at its Bind); one whose rows are every shard's is refused (it read
// only the default shard's before), and once pinned a key of another
// shard is refused.
func TestSessionStateStatementsRoute(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, 2*time.Minute)
	def := -1
	keys := make([]int64, len(e.db.m.Shards))
	for i := range e.db.m.Shards {
		keys[i] = e.db.keysOn(i, 1, 7_300_000)[0]
		if _, err := e.db.shardConn(t, i).Exec(ctx, "INSERT INTO accounts (aid, abalance) VALUES ($1, 73) ON CONFLICT (aid) DO UPDATE SET abalance = 73", keys[i]); err != nil {
			t.Fatal(err)
		}
	}
	// The default shard pins a CREATE TEMP TABLE of no rows: find it.
	probe := e.connect(t)
	if _, err := probe.Exec(ctx, "CREATE TEMP TABLE default_probe (a int)"); err != nil {
		t.Fatal(err)
	}
	for i, sh := range e.db.m.Shards {
		if p := e.srv.PinnedSessions(); len(p) == 1 && p[0].Shard == sh.Name {
			def = i
		}
	}
	probe.Close(ctx)
	waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)
	if def < 0 {
		t.Fatal("no session pinned by CREATE TEMP TABLE")
	}
	there := keys[(def+1)%len(keys)]
	here := keys[def]
	pinnedOn := func(want int) {
		t.Helper()
		p := e.srv.PinnedSessions()
		if len(p) != 1 || p[0].Shard != e.db.m.Shards[want].Name {
			t.Fatalf("pinned sessions %v, want one on %s", p, e.db.m.Shards[want].Name)
		}
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			conn := e.connect(t, func(c *pgx.ConnConfig) { c.DefaultQueryExecMode = mode })
			one := func(q string, args ...any) (int, error) {
				var v int
				err := conn.QueryRow(ctx, q, args...).Scan(&v)
				return v, err
			}
			want73 := func(what string, v int, err error) {
				t.Helper()
				if err != nil || v != 73 {
					t.Fatalf("%s: %d, %v; want 73", what, v, err)
				}
			}
			exec := func(q string, args ...any) {
				t.Helper()
				if _, err := conn.Exec(ctx, q, args...); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			discardAll := func() {
				t.Helper()
				exec("DISCARD ALL")
				// Its prepared statements are gone too, as on one
				// Postgres: pgx's statement cache must forget them.
				if err := conn.DeallocateAll(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := conn.Exec(ctx, "CREATE TEMP TABLE all_rows AS SELECT * FROM accounts"); pgCode(err) != "0A000" {
				t.Fatalf("CREATE TEMP TABLE AS of every shard's rows: %v; want 0A000", err)
			}
			exec("CREATE TEMP TABLE one_row AS SELECT aid, abalance FROM accounts WHERE aid = $1", there)
			pinnedOn(e.db.m.ShardIndexForBucket(e.db.m.BucketInt8(there)))
			v, err := one("SELECT abalance FROM one_row")
			want73("the temporary table made of another shard's key", v, err)
			v, err = one("SELECT a.abalance FROM one_row o JOIN accounts a ON a.aid = o.aid WHERE a.aid = $1", there)
			want73("the temporary table joined with its key's row", v, err)
			if _, err := one("SELECT abalance FROM accounts WHERE aid = $1", here); pgCode(err) != "0A000" {
				t.Fatalf("a key of another shard than the pin's: %v; want 0A000", err)
			}
			exec("DROP TABLE one_row")
			waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)

			var locked bool
			if err := conn.QueryRow(ctx, "SELECT pg_advisory_lock(73) IS NULL, abalance FROM accounts WHERE aid = $1", there).Scan(&locked, &v); err != nil || v != 73 {
				t.Fatalf("a session lock taken in a keyed read of another shard: %d, %v; want 73", v, err)
			}
			exec("SELECT pg_advisory_unlock_all()")
			waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)

			var setting string
			if err := conn.QueryRow(ctx, "SELECT set_config('work_mem', '6MB', false), abalance FROM accounts WHERE aid = $1", there).Scan(&setting, &v); err != nil || v != 73 {
				t.Fatalf("set_config(..., false) in a keyed read of another shard: %d, %v; want 73", v, err)
			}
			discardAll()
			waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)

			if _, err := conn.Exec(ctx, "CREATE TEMP VIEW all_rows AS SELECT * FROM accounts"); pgCode(err) != "0A000" {
				t.Fatalf("CREATE TEMP VIEW of every shard's rows: %v; want 0A000", err)
			}
			exec(fmt.Sprintf("CREATE TEMP VIEW one_row AS SELECT abalance FROM accounts WHERE aid = %d", there))
			v, err = one("SELECT abalance FROM one_row")
			want73("a temporary view of another shard's key", v, err)
			discardAll()
			waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)

			exec("BEGIN")
			exec(fmt.Sprintf("DECLARE held CURSOR WITH HOLD FOR SELECT abalance FROM accounts WHERE aid = %d", there))
			exec("COMMIT")
			v, err = one("FETCH NEXT FROM held")
			want73("a cursor WITH HOLD over another shard's key", v, err)
			exec("CLOSE ALL")
			waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)
		})
	}
}

// TestPinnedDDLString: a query string of DDL statements that change
// every shard's schema (a migration file; pgx's tests send `DROP TYPE IF
// EXISTS t; CREATE TYPE t ...`) runs on every shard from a pinned session
// too — pinned by a temporary table, and by session pooling — as from a
// session without state; with a statement for the pinned backend, or
// inside a transaction block, it stays refused.
func TestPinnedDDLString(t *testing.T) {
	for _, mode := range []string{"temp", "session"} {
		t.Run(mode, func(t *testing.T) {
			var opts []envOpt
			if mode == "session" {
				opts = append(opts, sessionMode())
			}
			e := startProxy(t, opts...)
			ctx := ctxT(t, time.Minute)
			conn := e.connect(t)
			if _, err := conn.Exec(ctx, "CREATE TEMP TABLE pin_ddl_tmp (a int)"); err != nil {
				t.Fatal(err)
			}
			typ := "pin_ddl_" + mode
			q := fmt.Sprintf("DROP TYPE IF EXISTS %[1]s; CREATE TYPE %[1]s AS (a text, b int4); COMMENT ON TYPE %[1]s IS 'x'", typ)
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("DDL string in a pinned session: %v", err)
			}
			for i := range e.db.m.Shards {
				var c *string
				if err := e.db.shardConn(t, i).QueryRow(ctx, "SELECT obj_description(to_regtype($1), 'pg_type')", typ).Scan(&c); err != nil {
					t.Fatal(err)
				}
				if c == nil || *c != "x" {
					t.Errorf("shard %d: type %s's comment = %v, want x on every shard", i, typ, c)
				}
			}
			// The pinned backend still holds the session's state.
			var n int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM pin_ddl_tmp").Scan(&n); err != nil {
				t.Fatalf("temporary table after the DDL string: %v", err)
			}
			for _, bad := range []string{
				"CREATE INDEX ON pin_ddl_tmp (a); DROP TYPE " + typ, // one statement needs the pinned backend
				"BEGIN; DROP TYPE " + typ + "; COMMIT",
			} {
				if _, err := conn.Exec(ctx, bad); pgCode(err) != "0A000" {
					t.Errorf("%s: err = %v, want 0A000", bad, err)
				}
			}
			if _, err := conn.Exec(ctx, "DROP TYPE "+typ+"; DROP TYPE IF EXISTS "+typ); err != nil {
				t.Fatal(err)
			}
			for i := range e.db.m.Shards {
				var exists bool
				if err := e.db.shardConn(t, i).QueryRow(ctx, "SELECT to_regtype($1) IS NOT NULL", typ).Scan(&exists); err != nil || exists {
					t.Errorf("shard %d: type still there (%v, %v)", i, exists, err)
				}
			}
		})
	}
}
