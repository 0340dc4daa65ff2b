package proxy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/proxy"
)

// TestFanoutFetchedInParts: a read of every shard fetched in parts — an
// Execute with a row limit (JDBC's fetch size with autocommit off, its
// setMaxRows, postgres.js's cursors), or a Flush between the Bind and
// its Execute (node-postgres's pg-cursor) — gets exactly the replies one
// Postgres sends: at most the limit per Execute with PortalSuspended,
// the last fetch's CommandComplete counting its own rows (SELECT 0 after
// a limit met exactly), the portal's description, several Executes in
// one pipeline, Close, and the portal gone once its transaction ends
// (34000 for an Execute after it). In an implicit transaction and in a
// transaction block, named and unnamed portals, through PgBouncer and
// directly. It was refused (0A000) before.
func TestFanoutFetchedInParts(t *testing.T) {
	for i, tc := range wireSetups {
		t.Run(tc.name, func(t *testing.T) {
			base := 9_500_000 + int64(i)*10_000
			e, env, px, ref := startWirePair(t, tc, base)
			lo, hi := fmt.Append(nil, env.lo), fmt.Append(nil, env.hi)
			// A transaction that wrote on shard 0 reads keys of shard 1 in
			// that shard's reader.
			k0, k1 := e.db.keysOn(0, 1, base)[0], e.db.keysOn(1, 3, base)
			other := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT aid, note FROM accounts WHERE aid IN ($1, $2, $3) ORDER BY aid"},
				&pgproto3.Bind{DestinationPortal: "k", Parameters: [][]byte{fmt.Append(nil, k1[0]), fmt.Append(nil, k1[1]), fmt.Append(nil, k1[2])}}}
			const read = "SELECT aid, abalance, note FROM accounts WHERE aid BETWEEN $1 AND $2 ORDER BY aid"
			bind := func(portal string) []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: read}, &pgproto3.Bind{DestinationPortal: portal, Parameters: [][]byte{lo, hi}}}
			}
			exec := func(portal string, n int) []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: portal, MaxRows: uint32(n)}}
			}
			seq := func(parts ...[]pgproto3.FrontendMessage) []pgproto3.FrontendMessage { return slices.Concat(parts...) }
			sync := []pgproto3.FrontendMessage{&pgproto3.Sync{}}
			flush := []pgproto3.FrontendMessage{&pgproto3.Flush{}}
			descP := func(portal string) []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{&pgproto3.Describe{ObjectType: 'P', Name: portal}}
			}
			closeP := func(portal string) []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'P', Name: portal}}
			}
			q := simpleQuery
			extQ := func(sql string) []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{}}
			}
			failing := func(portal string) []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT aid, 1 / (abalance - abalance) AS z FROM accounts WHERE aid BETWEEN $1 AND $2 ORDER BY aid"},
					&pgproto3.Bind{DestinationPortal: portal, Parameters: [][]byte{lo, hi}}}
			}
			cases := []struct {
				name  string
				steps [][]pgproto3.FrontendMessage
			}{
				{"implicit transaction: the first rows, then the portal is gone", [][]pgproto3.FrontendMessage{
					seq(bind(""), descP(""), exec("", 2), sync), seq(exec("", 2), sync)}},
				{"setMaxRows: a limit above the rows", [][]pgproto3.FrontendMessage{
					seq(bind(""), exec("", env.n+5), sync)}},
				{"transaction block, named portal", [][]pgproto3.FrontendMessage{
					q("BEGIN"),
					seq(bind("c1"), descP("c1"), exec("c1", 2), sync),
					seq(exec("c1", 2), sync),
					seq(exec("c1", 1), exec("c1", 2), sync),
					seq(descP("c1"), exec("c1", 0), sync),
					seq(exec("c1", 3), sync),
					seq(closeP("c1"), sync),
					seq(exec("c1", 1), sync),
					q("ROLLBACK")}},
				{"a limit met exactly, then SELECT 0", [][]pgproto3.FrontendMessage{
					q("BEGIN"),
					seq(bind("c2"), exec("c2", env.n), sync),
					seq(exec("c2", env.n), sync),
					q("COMMIT"),
					seq(exec("c2", 1), sync)}},
				{"JDBC: BEGIN in the first fetch's pipeline, portal closed, COMMIT", [][]pgproto3.FrontendMessage{
					seq(extQ("BEGIN"), bind("C_1"), descP("C_1"), exec("C_1", 3), sync),
					seq(exec("C_1", 3), sync),
					seq(closeP("C_1"), extQ("COMMIT"), sync)}},
				{"pg-cursor: a Flush before the Execute, fetches ended by Flush", [][]pgproto3.FrontendMessage{
					seq(bind(""), descP(""), flush, exec("", 2), flush, exec("", 2), flush, exec("", 1000), flush, sync)}},
				{"a read that fails, described", [][]pgproto3.FrontendMessage{
					q("BEGIN"), seq(failing("f"), descP("f"), exec("f", 2), sync), q("ROLLBACK"),
					seq(bind(""), exec("", 1), sync)}},
				{"a read that fails, not described", [][]pgproto3.FrontendMessage{
					seq(failing(""), exec("", 2), sync), seq(bind(""), exec("", 1), sync)}},
				{"a keyed read of another shard than the transaction's, in its reader", [][]pgproto3.FrontendMessage{
					q("BEGIN"), q(fmt.Sprintf("UPDATE accounts SET note = note WHERE aid = %d", k0)),
					seq(other, descP("k"), exec("k", 2), sync), seq(exec("k", 2), sync), q("COMMIT")}},
				{"asyncpg: the portal bound in a pipeline of its own, fetched in later ones", [][]pgproto3.FrontendMessage{
					q("BEGIN"),
					seq([]pgproto3.FrontendMessage{&pgproto3.Parse{Name: "s1", Query: read}, &pgproto3.Describe{ObjectType: 'S', Name: "s1"}}, flush),
					seq([]pgproto3.FrontendMessage{&pgproto3.Bind{DestinationPortal: "p1", PreparedStatement: "s1", Parameters: [][]byte{lo, hi}}}, sync),
					seq(exec("p1", 2), sync),
					seq(exec("p1", 1), sync),
					seq(descP("p1"), exec("p1", 0), sync),
					q("COMMIT")}},
				{"a portal bound and synced outside a block is gone at its Sync", [][]pgproto3.FrontendMessage{
					seq(bind("p2"), sync),
					seq(exec("p2", 1), sync),
					seq(bind(""), exec("", 1), sync)}},
				{"a Bind of the portal's name replaces it", [][]pgproto3.FrontendMessage{
					q("BEGIN"),
					seq(bind(""), exec("", 2), sync),
					seq(bind(""), exec("", 1), sync),
					seq(exec("", 1), sync),
					q("COMMIT")}},
			}
			for _, c := range cases {
				got := sameReplies(t, px, ref, c.name, c.steps)
				if !slices.Contains(got, "PortalSuspended") && c.name != "setMaxRows: a limit above the rows" && !strings.HasPrefix(c.name, "a portal bound and synced") {
					t.Errorf("%s: no PortalSuspended in %q: the case does not fetch in parts", c.name, got)
				}
			}
		})
	}
}

// TestFanoutCopyBoundThenSynced: a COPY of every shard whose Bind is
// followed by a Sync instead of its Execute cannot run in a later
// pipeline (a read can: TestFanoutFetchedInParts): it is refused with 0A000 — and the Sync is still answered
// (it used to get no ReadyForQuery, and the client waited forever) —
// and the session goes on after the block's ROLLBACK.
func TestFanoutCopyBoundThenSynced(t *testing.T) {
	_, _, px, _ := startWirePair(t, wireSetups[0], 7_700_000)
	// As asyncpg sends it: the statement parsed and described (Flush),
	// then bound in a pipeline of its own.
	replies(t, px, []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}})
	replies(t, px, []pgproto3.FrontendMessage{&pgproto3.Parse{Name: "w", Query: "COPY accounts (aid) TO STDOUT"},
		&pgproto3.Describe{ObjectType: 'S', Name: "w"}, &pgproto3.Flush{}})
	got := replies(t, px, []pgproto3.FrontendMessage{&pgproto3.Bind{DestinationPortal: "w", PreparedStatement: "w"}, &pgproto3.Sync{}})
	if len(got) < 2 || !strings.HasPrefix(got[len(got)-2], "Error ERROR 0A000") || got[len(got)-1] != "ReadyForQuery E" {
		t.Errorf("a COPY of every shard bound, then synced: pgshard answered\n %s\nwant 0A000, ReadyForQuery E", strings.Join(got, "\n "))
	}
	if got := replies(t, px, []pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK"}}); !slices.Equal(got, []string{"CommandComplete ROLLBACK", "ReadyForQuery I"}) {
		t.Errorf("ROLLBACK after it: %q", got)
	}
}

// TestFanoutFetchedInPartsBound: the rows a read of every shard fetched
// in parts keeps in the proxy are bounded (proxy.cursor_buffer_bytes):
// beyond it the read fails with 54000 naming the setting, no row is
// sent, the transaction block fails as on a shard's error, and the
// session goes on (the same read fetched whole works after a ROLLBACK).
func TestFanoutFetchedInPartsBound(t *testing.T) {
	ws := wireSetup{name: "bounded", opts: []envOpt{func(c *proxy.Config) { c.CursorBufferBytes = 40 }}}
	_, env, px, _ := startWirePair(t, ws, 9_600_000)
	lo, hi := fmt.Append(nil, env.lo), fmt.Append(nil, env.hi)
	read := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT aid, note FROM accounts WHERE aid BETWEEN $1 AND $2 ORDER BY aid"},
		&pgproto3.Bind{DestinationPortal: "c", Parameters: [][]byte{lo, hi}}}
	replies(t, px, []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}})
	got := replies(t, px, slices.Concat(read, []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "c", MaxRows: 1}, &pgproto3.Sync{}}))
	if slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, "DataRow") }) ||
		!slices.ContainsFunc(got, func(m string) bool {
			return strings.HasPrefix(m, "Error ERROR 54000") && strings.Contains(m, "proxy.cursor_buffer_bytes")
		}) || got[len(got)-1] != "ReadyForQuery E" {
		t.Errorf("a read fetched in parts over the bound: pgshard answered\n %s\nwant 54000, no rows, ReadyForQuery E", strings.Join(got, "\n "))
	}
	replies(t, px, []pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK"}})
	whole := replies(t, px, slices.Concat(read, []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "c"}, &pgproto3.Sync{}}))
	if n := len(whole); n < 2 || whole[n-2] != fmt.Sprintf("CommandComplete SELECT %d", env.n) {
		t.Errorf("the read fetched whole after it: %s", strings.Join(whole, "\n "))
	}
}

// TestFanoutSQLCursor: DECLARE ... CURSOR FOR a read of every shard
// (psql's FETCH_COUNT, psycopg 2's named cursors in the simple protocol,
// psycopg 3's in the extended one: DECLARE with Bind parameters, a
// Describe of the cursor's portal, FETCH through Parse/Bind/Execute)
// gets exactly the replies one Postgres sends for FETCH FORWARD n, NEXT,
// ALL, MOVE, past the end, CLOSE, the cursor gone at COMMIT (34000 from
// the shard after it), and DECLARE outside a transaction block (25P01).
// A fetch backwards is refused with 0A000 saying forward only. Through
// PgBouncer and directly. DECLARE was refused (0A000) before.
func TestFanoutSQLCursor(t *testing.T) {
	for i, tc := range wireSetups {
		t.Run(tc.name, func(t *testing.T) {
			_, env, px, ref := startWirePair(t, tc, 9_700_000+int64(i)*10_000)
			read := fmt.Sprintf("SELECT aid, abalance, note FROM accounts WHERE aid BETWEEN %d AND %d ORDER BY aid", env.lo, env.hi)
			q := simpleQuery
			ext := func(sql string, params ...[]byte) []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{Parameters: params},
					&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}}
			}
			cases := []struct {
				name  string
				steps [][]pgproto3.FrontendMessage
			}{
				{"psql's FETCH_COUNT", [][]pgproto3.FrontendMessage{
					q("BEGIN"), q("DECLARE _psql_cursor NO SCROLL CURSOR FOR\n" + read),
					q("FETCH FORWARD 2 FROM _psql_cursor"), q("FETCH FORWARD 2 FROM _psql_cursor"),
					q("FETCH NEXT FROM _psql_cursor"), q("MOVE FORWARD 1 IN _psql_cursor"), q("FETCH _psql_cursor"),
					q("FETCH ALL FROM _psql_cursor"), q("FETCH FORWARD 5 FROM _psql_cursor"), q("MOVE ALL IN _psql_cursor"),
					q("CLOSE _psql_cursor"), q("COMMIT")}},
				{"gone with its transaction", [][]pgproto3.FrontendMessage{
					q("BEGIN"), q(`DECLARE "c" CURSOR WITHOUT HOLD FOR ` + read), q(`FETCH FORWARD 3 FROM "c"`), q("COMMIT"),
					q(`FETCH FORWARD 3 FROM "c"`)}},
				{"outside a transaction block", [][]pgproto3.FrontendMessage{q("DECLARE c CURSOR FOR " + read)}},
				{"declared twice", [][]pgproto3.FrontendMessage{
					q("BEGIN"), q("DECLARE d CURSOR FOR " + read), q("DECLARE d CURSOR FOR " + read), q("ROLLBACK")}},
				{"psycopg 3: DECLARE with parameters, Describe of the cursor, FETCH and CLOSE extended", [][]pgproto3.FrontendMessage{
					q("BEGIN"),
					ext(`DECLARE "srv" CURSOR FOR SELECT aid, note FROM accounts WHERE aid BETWEEN $1 AND $2 ORDER BY aid`, fmt.Append(nil, env.lo), fmt.Append(nil, env.hi)),
					{&pgproto3.Describe{ObjectType: 'P', Name: "srv"}, &pgproto3.Sync{}},
					ext(`FETCH FORWARD 2 FROM "srv"`), ext(`FETCH FORWARD 100 FROM "srv"`), ext(`MOVE 1 FROM "srv"`),
					ext(`CLOSE "srv"`), q("COMMIT")}},
			}
			for _, c := range cases {
				sameReplies(t, px, ref, c.name, c.steps)
			}
			replies(t, px, []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}})
			replies(t, px, []pgproto3.FrontendMessage{&pgproto3.Query{String: "DECLARE b CURSOR FOR " + read}})
			back := replies(t, px, []pgproto3.FrontendMessage{&pgproto3.Query{String: "FETCH BACKWARD 1 FROM b"}})
			if !slices.ContainsFunc(back, func(m string) bool {
				return strings.HasPrefix(m, "Error ERROR 0A000") && strings.Contains(m, "forward only")
			}) {
				t.Errorf("FETCH BACKWARD of a cursor over every shard: %q, want 0A000 forward only", back)
			}
			replies(t, px, []pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK"}})
		})
	}
}

// TestCursorMetrics: the reads fetched in parts whose rows the proxy
// keeps are counted (pgshard_proxy_cursors, pgshard_proxy_cursor_bytes)
// while kept: none after the transaction ends, none after a client that
// went away with one.
func TestCursorMetrics(t *testing.T) {
	e, env, px, _ := startWirePair(t, wireSetups[0], 7_900_000)
	lo, hi := fmt.Append(nil, env.lo), fmt.Append(nil, env.hi)
	fetch := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT aid, note FROM accounts WHERE aid BETWEEN $1 AND $2 ORDER BY aid"},
		&pgproto3.Bind{DestinationPortal: "c", Parameters: [][]byte{lo, hi}}, &pgproto3.Execute{Portal: "c", MaxRows: 1}, &pgproto3.Sync{}}
	kept := func(c *rawClient) {
		t.Helper()
		replies(t, c, []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}})
		if got := replies(t, c, fetch); !slices.Contains(got, "PortalSuspended") {
			t.Fatalf("the fetch in parts: %q", got)
		}
		waitMetric(t, e.srv, "pgshard_proxy_cursors", 1)
		if b := metricSum(t, e.srv, "pgshard_proxy_cursor_bytes"); b < float64(env.n-1)*10 {
			t.Fatalf("pgshard_proxy_cursor_bytes = %v with %d rows kept", b, env.n-1)
		}
	}
	kept(px)
	replies(t, px, []pgproto3.FrontendMessage{&pgproto3.Query{String: "COMMIT"}})
	waitMetric(t, e.srv, "pgshard_proxy_cursors", 0)
	waitMetric(t, e.srv, "pgshard_proxy_cursor_bytes", 0)
	other := dialRaw(t, e.addr)
	other.startup(e.db.name)
	kept(other)
	_ = other.conn.Close()
	waitMetric(t, e.srv, "pgshard_proxy_cursors", 0)
	waitMetric(t, e.srv, "pgshard_proxy_cursor_bytes", 0)
}
