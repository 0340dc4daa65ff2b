package proxy_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/cluster/clustertest"

	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// Transaction-local settings ahead of a read of every shard, in one
// implicit transaction (a pipeline up to its Sync, or a query string of
// several statements): the store's own shape with Options.StatementTimeout
// (SELECT set_config('statement_timeout', $1::text, true), then the read,
// one Sync) must reach every shard the read runs on.

// TestStoreStatementTimeoutThroughProxy: pgshard's store, opened on the
// proxy with a statement timeout, reads the relay's batches (pending
// outbox, spawns, due timers) and lists executions over every shard —
// the same answers as the router over the shards themselves — and the
// timeout is in force on every shard, inside the read's implicit
// transaction only. Every relay read used to be refused with 0A000 ("a
// statement that must read every shard must be alone in its pipeline").
func TestStoreStatementTimeoutThroughProxy(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []envOpt
	}{{"pgbouncer", nil}, {"direct", []envOpt{direct()}}} {
		t.Run(tc.name, func(t *testing.T) {
			env := newSeedStoreEnv(t, tc.opts...)
			e := env.e
			m := e.db.m
			ctx := ctxT(t, 2*time.Minute)
			for i := range m.Shards {
				var n int
				if err := e.db.shardConn(t, i).QueryRow(ctx, "SELECT (SELECT count(*) FROM outbox) + (SELECT count(*) FROM spawns) + (SELECT count(*) FROM timers) + (SELECT count(*) FROM executions)").Scan(&n); err != nil || n == 0 {
					t.Fatalf("shard %d holds %d store rows (%v): the test needs rows on every shard", i, n, err)
				}
			}
			ref, err := router.Open(ctx, m, router.Options{Store: store.Options{ConnectAttempts: 1}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ref.Close)
			px, err := store.Open(ctx, e.dsn, store.Options{StatementTimeout: 5 * time.Second, ConnectAttempts: 1, MaxConns: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(px.Close)

			allOutbox, err := ref.PendingOutbox(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(allOutbox, func(a, b store.OutboxRow) int { return int(a.Seq - b.Seq) })
			allSpawns, err := ref.PendingSpawns(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(allSpawns, func(a, b store.SpawnRow) int { return int(a.Seq - b.Seq) })
			if len(allOutbox) == 0 || len(allSpawns) == 0 {
				t.Fatalf("%d outbox rows, %d spawns: the data set is empty", len(allOutbox), len(allSpawns))
			}
			// One database orders every pending row by seq; the router shares
			// a limited batch among the shards instead, so a limited batch is
			// compared with the first rows of the full, sorted set.
			for _, limit := range []int{0, 1, 7, 1000} {
				got, err := px.PendingOutbox(ctx, limit)
				if err != nil {
					t.Fatalf("PendingOutbox(%d) through the proxy: %v", limit, err)
				}
				want := allOutbox
				if limit > 0 && limit < len(want) {
					want = want[:limit]
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("PendingOutbox(%d): %d rows %v…, the shards hold %d: %v…", limit, len(got), head(got), len(want), head(want))
				}
				gotS, err := px.PendingSpawns(ctx, limit)
				if err != nil {
					t.Fatalf("PendingSpawns(%d) through the proxy: %v", limit, err)
				}
				wantS := allSpawns
				if limit > 0 && limit < len(wantS) {
					wantS = wantS[:limit]
				}
				if !reflect.DeepEqual(gotS, wantS) {
					t.Fatalf("PendingSpawns(%d): %d rows %v…, the shards hold %d: %v…", limit, len(gotS), head(gotS), len(wantS), head(wantS))
				}
			}
			for _, now := range []float64{999, 1020.5, 1050, 1e9} {
				for _, limit := range []int{0, 3, 50} {
					got, err := px.DueTimers(ctx, now, limit)
					if err != nil {
						t.Fatalf("DueTimers(%v, %d) through the proxy: %v", now, limit, err)
					}
					want, err := ref.DueTimers(ctx, now, limit)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
						t.Fatalf("DueTimers(%v, %d): %d timers %v…, the router %d: %v…", now, limit, len(got), head(got), len(want), head(want))
					}
				}
			}
			for _, f := range seedListFilters {
				o := store.ListOptions{DefinitionID: f.def, Statuses: f.statuses, RootsOnly: f.roots, Limit: f.limit}
				for page := 0; ; page++ {
					got, err := px.ListExecutions(ctx, o)
					if err != nil {
						t.Fatalf("ListExecutions %s page %d through the proxy: %v", f.name, page, err)
					}
					want, err := ref.ListExecutions(ctx, o)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got, want) && !(len(got.Items) == 0 && len(want.Items) == 0 && got.NextCursor == want.NextCursor) {
						t.Fatalf("ListExecutions %s page %d: %d items (next %q), the router %d (next %q)", f.name, page, len(got.Items), got.NextCursor, len(want.Items), want.NextCursor)
					}
					if got.NextCursor == "" {
						break
					}
					o.Cursor = got.NextCursor
				}
			}
			// Keyed operations after the same set_config still work.
			if _, err := px.Load(ctx, env.execs[0].id); err != nil {
				t.Fatalf("Load through the proxy: %v", err)
			}

			conn := e.connect(t)
			checkTimeoutOnEveryShard(t, ctx, conn, m)
		})
	}
}

// checkTimeoutOnEveryShard sends the store's shape in one pgx batch
// (set_config, then a read of every shard, one Sync) with a read that
// reports the setting each shard runs it with, and one that each shard's
// timeout cancels.
func checkTimeoutOnEveryShard(t *testing.T, ctx context.Context, conn *pgx.Conn, m *shardmap.Map) {
	t.Helper()
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('statement_timeout', $1::text, true)`, "4500ms")
	b.Queue(`SELECT seq, current_setting('statement_timeout') FROM outbox ORDER BY seq`)
	br := conn.SendBatch(ctx, b)
	var set string
	if err := br.QueryRow().Scan(&set); err != nil || set != "4500ms" {
		t.Fatalf("set_config through the proxy: %q, %v", set, err)
	}
	rows, err := br.Query()
	if err != nil {
		t.Fatal(err)
	}
	ordinals := map[int]bool{}
	n := 0
	for rows.Next() {
		var seq int64
		var st string
		if err := rows.Scan(&seq, &st); err != nil {
			t.Fatal(err)
		}
		ord, err := shardmap.OrdinalForSeq(seq)
		if err != nil {
			t.Fatal(err)
		}
		if st != "4500ms" {
			t.Fatalf("outbox seq %d (shard ordinal %d) was read with statement_timeout %q, want 4500ms", seq, ord, st)
		}
		ordinals[ord] = true
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	if len(ordinals) != len(m.Shards) {
		t.Fatalf("the read returned rows of %d shards (%v), want all %d", len(ordinals), ordinals, len(m.Shards))
	}
	// The setting was the implicit transaction's: gone with it.
	var after string
	if err := conn.QueryRow(ctx, `SELECT current_setting('statement_timeout') FROM outbox ORDER BY seq LIMIT 1`).Scan(&after); err != nil || after == "4500ms" {
		t.Fatalf("statement_timeout after the batch: %q, %v", after, err)
	}
	// And it is enforced: every shard cancels a read that runs longer
	// (without the timeout on some shard this read takes many seconds).
	b = &pgx.Batch{}
	b.Queue(`SELECT set_config('statement_timeout', $1::text, true)`, "50ms")
	b.Queue(`SELECT count(*) FROM outbox CROSS JOIN generate_series(1, 3000000) AS g`)
	start := time.Now()
	br = conn.SendBatch(ctx, b)
	if err := br.QueryRow().Scan(&set); err != nil || set != "50ms" {
		t.Fatalf("set_config 50ms through the proxy: %q, %v", set, err)
	}
	var cnt int64
	err = br.QueryRow().Scan(&cnt)
	if code := pgCode(err); code != "57014" {
		t.Fatalf("a long read after set_config('statement_timeout', '50ms'): %d, %v (%s), want 57014", cnt, err, code)
	}
	_ = br.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the timed-out read took %v: some shard ran it without the timeout", d)
	}
}

// head is the start of a list, for messages.
func head[T any](s []T) []T { return s[:min(len(s), 3)] }

// settingsEnv holds rows of accounts on every shard of the shared test
// database and the same rows in one plain database (the reference), for
// comparing pgshard's replies with one Postgres's message by message.
type settingsEnv struct {
	refAddr, refDB string
	lo, hi         int64 // the rows' keys: aid BETWEEN lo AND hi
	keyed          int64 // one of them
	n              int
}

func newSettingsEnv(t *testing.T, e *proxyEnv, base int64) *settingsEnv {
	t.Helper()
	c := clustertest.Get(t)
	ctx := ctxT(t, time.Minute)
	refDB := clustertest.FreshDatabase(t, c)
	ref, err := pgx.Connect(ctx, c.Shards[0].DSN(refDB, c.Spec.User))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close(context.Background())
	if _, err := ref.Exec(ctx, testTables); err != nil {
		t.Fatal(err)
	}
	var keys []int64
	for s := range e.db.m.Shards {
		keys = append(keys, e.db.keysOn(s, 3, base)...)
	}
	slices.Sort(keys)
	conn := e.connect(t)
	for _, k := range keys {
		for _, q := range []interface {
			Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
		}{conn, ref} {
			if _, err := q.Exec(ctx, "INSERT INTO accounts (aid, abalance, note) VALUES ($1, $2, $3) ON CONFLICT (aid) DO UPDATE SET abalance = EXCLUDED.abalance, note = EXCLUDED.note",
				k, int32(k%997), fmt.Sprintf("n%d", k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return &settingsEnv{refAddr: net.JoinHostPort(c.Shards[0].Host, strconv.Itoa(c.Shards[0].Port)), refDB: refDB,
		lo: keys[0], hi: keys[len(keys)-1], keyed: keys[len(keys)/2], n: len(keys)}
}

// replies sends msgs and returns the replies up to the ReadyForQuery of
// each Sync and Query, as text (ParameterStatus left out; the Detail
// pgshard adds to an error of a read of every shard left out too).
func replies(t *testing.T, c *rawClient, msgs []pgproto3.FrontendMessage) []string {
	t.Helper()
	rfq := c.sendAll(msgs)
	var out []string
	for rfq > 0 {
		m, err := c.fe.Receive()
		if err != nil {
			t.Fatalf("after %q: %v", out, err)
		}
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			rfq--
		}
		if r := replyText(m); r != "" {
			out = append(out, r)
		}
	}
	return out
}

// sendAll sends msgs and returns how many ReadyForQuery they get (one
// per Sync and Query).
func (c *rawClient) sendAll(msgs []pgproto3.FrontendMessage) (rfq int) {
	c.t.Helper()
	for _, m := range msgs {
		c.fe.Send(m)
		switch m.(type) {
		case *pgproto3.Sync, *pgproto3.Query:
			rfq++
		}
	}
	c.flush()
	return rfq
}

// sameReplies sends each of steps to the proxy's client px and to the
// reference database's ref, fails the test (naming the case) unless both
// answer the same, and returns the proxy's replies.
func sameReplies(t *testing.T, px, ref *rawClient, name string, steps [][]pgproto3.FrontendMessage) []string {
	t.Helper()
	var got, want []string
	for _, st := range steps {
		want = append(want, replies(t, ref, st)...)
		got = append(got, replies(t, px, st)...)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n pgshard:      %s\n one database: %s", name, strings.Join(got, "\n               "), strings.Join(want, "\n               "))
	}
	return got
}

// simpleQuery is a simple Query of sql, as a step of replies.
func simpleQuery(sql string) []pgproto3.FrontendMessage {
	return []pgproto3.FrontendMessage{&pgproto3.Query{String: sql}}
}

// replyText is a reply as replies shows it ("" for a ParameterStatus).
func replyText(m pgproto3.BackendMessage) string {
	switch m := m.(type) {
	case *pgproto3.ParseComplete:
		return "ParseComplete"
	case *pgproto3.BindComplete:
		return "BindComplete"
	case *pgproto3.NoData:
		return "NoData"
	case *pgproto3.CloseComplete:
		return "CloseComplete"
	case *pgproto3.EmptyQueryResponse:
		return "EmptyQuery"
	case *pgproto3.PortalSuspended:
		return "PortalSuspended"
	case *pgproto3.ParameterStatus:
	case *pgproto3.RowDescription:
		var b strings.Builder
		b.WriteString("RowDescription")
		for _, f := range m.Fields {
			fmt.Fprintf(&b, " %s:%d:%d:%d:%d", f.Name, f.DataTypeOID, f.TypeModifier, f.Format, f.TableAttributeNumber)
		}
		return b.String()
	case *pgproto3.DataRow:
		var vs []string
		for _, v := range m.Values {
			if v == nil {
				vs = append(vs, "NULL")
			} else {
				vs = append(vs, strconv.Quote(string(v)))
			}
		}
		return "DataRow " + strings.Join(vs, " ")
	case *pgproto3.CommandComplete:
		return "CommandComplete " + string(m.CommandTag)
	case *pgproto3.ErrorResponse:
		detail := m.Detail
		if i := strings.Index(detail, "pgshard ran the statement on every shard"); i >= 0 {
			detail = strings.TrimSuffix(detail[:i], "\n")
		}
		return fmt.Sprintf("Error %s %s %q detail=%q hint=%q", m.Severity, m.Code, m.Message, detail, m.Hint)
	case *pgproto3.NoticeResponse:
		return fmt.Sprintf("Notice %s %s %q", m.Severity, m.Code, m.Message)
	case *pgproto3.ReadyForQuery:
		return "ReadyForQuery " + string(m.TxStatus)
	case *pgproto3.ParameterDescription:
		return fmt.Sprint("ParameterDescription ", m.ParameterOIDs)
	default:
		return fmt.Sprintf("%T", m)
	}
	return ""
}

// wireCase is a named pipeline of messages a wire-exact test sends.
type wireCase struct {
	name string
	msgs []pgproto3.FrontendMessage
}

// expectSameReplies sends each case to the reference database and to the
// proxy, and fails on any difference in their replies.
func expectSameReplies(t *testing.T, px, ref *rawClient, cases []wireCase) {
	t.Helper()
	for _, c := range cases {
		want := replies(t, ref, c.msgs)
		got := replies(t, px, c.msgs)
		if !slices.Equal(got, want) {
			t.Errorf("%s:\n pgshard:      %s\n one database: %s", c.name, strings.Join(got, "\n               "), strings.Join(want, "\n               "))
		}
	}
}

// wireSetup is a proxy set-up the wire-exact tests run in: its name,
// its options, and a session setting sent first (to the proxy and to the
// reference database alike).
type wireSetup struct {
	name string
	opts []envOpt
	set  string
}

// wireSetups: through PgBouncer, with and without a client setting
// (which wraps each shard's part in BEGIN/COMMIT), and directly.
var wireSetups = []wireSetup{
	{"pgbouncer", nil, ""},
	{"pgbouncer with a setting", nil, "SET work_mem = '7MB'"},
	{"direct", []envOpt{direct()}, ""},
}

// startWirePair starts ws's proxy over newSettingsEnv's rows (keys from
// base) and returns it with a raw client of it and one of the reference
// database, each after ws's setting.
func startWirePair(t *testing.T, ws wireSetup, base int64) (*proxyEnv, *settingsEnv, *rawClient, *rawClient) {
	t.Helper()
	e := startProxy(t, ws.opts...)
	env := newSettingsEnv(t, e, base)
	px := dialRaw(t, e.addr)
	px.startup(e.db.name)
	ref := dialRaw(t, env.refAddr)
	ref.startup(env.refDB)
	if ws.set != "" {
		for _, c := range []*rawClient{px, ref} {
			replies(t, c, []pgproto3.FrontendMessage{&pgproto3.Query{String: ws.set}})
		}
	}
	return e, env, px, ref
}

// TestSettingsAheadOfFanoutWire: settings ahead of a read of every shard
// in one implicit transaction get exactly the replies one Postgres sends
// — every message, in order — in the extended protocol (the store's
// shape, binary parameters and results, several settings, SET LOCAL with
// its warning, named statements, no Describe) and in a query string; a
// setting that fails fails the implicit transaction; the settings are gone
// after it. Through PgBouncer (with and without a client setting, which
// wraps each shard's part in BEGIN/COMMIT) and directly.
func TestSettingsAheadOfFanoutWire(t *testing.T) {
	for i, tc := range wireSetups {
		t.Run(tc.name, func(t *testing.T) {
			_, env, px, ref := startWirePair(t, tc, 9_100_000+int64(i)*10_000)
			lo, hi := fmt.Append(nil, env.lo), fmt.Append(nil, env.hi)
			read := "SELECT aid, abalance, current_setting('statement_timeout') AS st, current_setting('lock_timeout') AS lt FROM accounts WHERE aid BETWEEN $1 AND $2 ORDER BY aid"
			readSQL := fmt.Sprintf("SELECT aid, abalance, current_setting('statement_timeout') AS st, current_setting('lock_timeout') AS lt FROM accounts WHERE aid BETWEEN %d AND %d ORDER BY aid", env.lo, env.hi)
			setTimeout := "SELECT set_config('statement_timeout', $1::text, true)"
			bin := func(b ...[]byte) [][]byte { return b }
			cases := []wireCase{
				{"the store's shape", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: setTimeout}, &pgproto3.Bind{Parameters: bin([]byte("4s"))}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: read}, &pgproto3.Bind{Parameters: bin(lo, hi)}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Sync{}}},
				{"binary parameters and results", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: setTimeout, ParameterOIDs: []uint32{25}},
					&pgproto3.Bind{ParameterFormatCodes: []int16{1}, Parameters: bin([]byte("4500ms")), ResultFormatCodes: []int16{1}},
					&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: read, ParameterOIDs: []uint32{20, 20}},
					&pgproto3.Bind{ParameterFormatCodes: []int16{1}, Parameters: bin(binary.BigEndian.AppendUint64(nil, uint64(env.lo)), binary.BigEndian.AppendUint64(nil, uint64(env.hi))), ResultFormatCodes: []int16{1}},
					&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Sync{}}},
				{"several settings, SET LOCAL, no Describe", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: "SELECT set_config('lock_timeout', $1, true), pg_catalog.set_config('application_name', 'x''y', 'on') AS app"},
					&pgproto3.Bind{Parameters: bin([]byte("3s"))}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: "SET LOCAL statement_timeout = '7s'"}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: read}, &pgproto3.Bind{Parameters: bin(lo, hi)}, &pgproto3.Execute{},
					&pgproto3.Sync{}}},
				{"a setting that fails", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: setTimeout}, &pgproto3.Bind{Parameters: bin([]byte("soon"))}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: read}, &pgproto3.Bind{Parameters: bin(lo, hi)}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Sync{}}},
				{"the second setting fails", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: setTimeout}, &pgproto3.Bind{Parameters: bin([]byte("4s"))}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: "SET LOCAL lock_timeout = 'never'"}, &pgproto3.Bind{}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: read}, &pgproto3.Bind{Parameters: bin(lo, hi)}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Sync{}}},
				{"the read fails", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: setTimeout}, &pgproto3.Bind{Parameters: bin([]byte("4s"))}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: "SELECT aid / (aid - aid) FROM accounts WHERE aid BETWEEN $1 AND $2 ORDER BY aid"},
					&pgproto3.Bind{Parameters: bin(lo, hi)}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Sync{}}},
				{"the settings were the implicit transaction's", []pgproto3.FrontendMessage{
					&pgproto3.Query{String: readSQL}}},
				{"named statements", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Name: "set1", Query: setTimeout}, &pgproto3.Parse{Name: "read1", Query: read},
					&pgproto3.Describe{ObjectType: 'S', Name: "read1"}, &pgproto3.Sync{},
					&pgproto3.Bind{PreparedStatement: "set1", Parameters: bin([]byte("6s"))}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Bind{PreparedStatement: "read1", Parameters: bin(lo, hi)}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Sync{},
					&pgproto3.Close{ObjectType: 'S', Name: "set1"}, &pgproto3.Close{ObjectType: 'S', Name: "read1"}, &pgproto3.Sync{}}},
				{"a query string", []pgproto3.FrontendMessage{
					&pgproto3.Query{String: "SET LOCAL statement_timeout = '3s'; SELECT set_config('lock_timeout', '2s', true); " + readSQL}}},
				{"a query string whose setting fails", []pgproto3.FrontendMessage{
					&pgproto3.Query{String: "SELECT set_config('lock_timeout', '2s', true); SET LOCAL statement_timeout = 'x'; " + readSQL}}},
				{"SET LOCAL ahead of a keyed statement", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: "SET LOCAL statement_timeout = '8s'"}, &pgproto3.Bind{}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: "SELECT aid, current_setting('statement_timeout') FROM accounts WHERE aid = $1"},
					&pgproto3.Bind{Parameters: bin(fmt.Append(nil, env.keyed))}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Sync{}}},
				{"a read that fails at Bind", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: setTimeout}, &pgproto3.Bind{Parameters: bin([]byte("4s"))}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: read, ParameterOIDs: []uint32{20, 20}}, &pgproto3.Bind{Parameters: bin(lo, []byte("many"))}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
					&pgproto3.Sync{}}},
				{"a read of groups that fails, alone", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: "SELECT note, sum(aid / (aid - aid)) AS s, count(*) FROM accounts WHERE aid BETWEEN $1 AND $2 GROUP BY note ORDER BY note"},
					&pgproto3.Bind{Parameters: bin(lo, hi)}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
				{"a read with a hidden sort column that fails, in a query string", []pgproto3.FrontendMessage{
					&pgproto3.Query{String: fmt.Sprintf("SELECT aid / (aid - aid) AS q FROM accounts WHERE aid BETWEEN %d AND %d ORDER BY abalance, aid", env.lo, env.hi)}}},
				{"a read that fails in a query string after a setting", []pgproto3.FrontendMessage{
					&pgproto3.Query{String: fmt.Sprintf("SET LOCAL statement_timeout = '3s'; SELECT aid / (aid - aid) AS q FROM accounts WHERE aid BETWEEN %d AND %d ORDER BY aid", env.lo, env.hi)}}},
				// A plain read ahead of the read of every shard, or a setting
				// after it: each runs as an implicit transaction of its own
				// (internal/engine/pipecut.go), with one database's answers.
				{"a read that is not a setting ahead", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: read}, &pgproto3.Bind{Parameters: bin(lo, hi)}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
				{"a setting after the read", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: read}, &pgproto3.Bind{Parameters: bin(lo, hi)}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: setTimeout}, &pgproto3.Bind{Parameters: bin([]byte("4s"))}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
				{"SET LOCAL alone", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: "SET LOCAL statement_timeout = '8s'"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
				{"afterwards", []pgproto3.FrontendMessage{
					&pgproto3.Query{String: readSQL}}},
			}
			expectSameReplies(t, px, ref, cases)
			// What is not provably transaction-local state, or not in the
			// shape pgshard runs, ahead of a read of every shard is refused
			// as before (one database would answer; pgshard says 0A000).
			refused := []wireCase{
				{"a setting computed by an expression", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: "SELECT set_config('statement_timeout', $1 || 's', true)"}, &pgproto3.Bind{Parameters: bin([]byte("4"))}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: read}, &pgproto3.Bind{Parameters: bin(lo, hi)}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
				{"a setting whose Execute fetches one row at a time", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: setTimeout}, &pgproto3.Bind{Parameters: bin([]byte("4s"))}, &pgproto3.Execute{MaxRows: 1},
					&pgproto3.Parse{Query: read}, &pgproto3.Bind{Parameters: bin(lo, hi)}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
				{"a Flush between the setting and the read", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: setTimeout}, &pgproto3.Bind{Parameters: bin([]byte("4s"))}, &pgproto3.Execute{}, &pgproto3.Flush{},
					&pgproto3.Parse{Query: read}, &pgproto3.Bind{Parameters: bin(lo, hi)}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
				{"two reads after the setting", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: setTimeout}, &pgproto3.Bind{Parameters: bin([]byte("4s"))}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: read}, &pgproto3.Bind{Parameters: bin(lo, hi)}, &pgproto3.Execute{},
					&pgproto3.Bind{Parameters: bin(lo, hi)}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
				{"SET TRANSACTION ahead of the read", []pgproto3.FrontendMessage{
					&pgproto3.Query{String: "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE; " + readSQL}}},
				{"a query string with another statement", []pgproto3.FrontendMessage{
					&pgproto3.Query{String: "SELECT set_config('lock_timeout', '2s', true); SELECT 1; " + readSQL}}},
			}
			for _, c := range refused {
				got := replies(t, px, c.msgs)
				if !slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, "Error ERROR 0A000") }) || got[len(got)-1] != "ReadyForQuery I" {
					t.Errorf("%s: pgshard answered\n %s\nwant a refusal (0A000) and ReadyForQuery I", c.name, strings.Join(got, "\n "))
				}
			}
			// Nothing stayed behind: the next read sees no setting.
			after := replies(t, px, []pgproto3.FrontendMessage{&pgproto3.Query{String: readSQL}})
			if want := replies(t, ref, []pgproto3.FrontendMessage{&pgproto3.Query{String: readSQL}}); !slices.Equal(after, want) {
				t.Errorf("after the refusals:\n pgshard:      %s\n one database: %s", strings.Join(after, "\n               "), strings.Join(want, "\n               "))
			}
		})
	}
}

// TestSettingsAheadOfFanoutPgxModes: a pgx batch of set_config(..., true)
// and a read of every shard works in every QueryExecMode (named
// statements, described statements, unnamed ones, the simple protocol's
// query string), and every row was read with the setting.
func TestSettingsAheadOfFanoutPgxModes(t *testing.T) {
	for vi, via := range []string{"pgbouncer", "direct"} {
		t.Run(via, func(t *testing.T) {
			var opts []envOpt
			if via == "direct" {
				opts = append(opts, direct())
			}
			e := startProxy(t, opts...)
			env := newSettingsEnv(t, e, 9_200_000+int64(vi)*10_000)
			for mi, mode := range execModes {
				t.Run(mode.String(), func(t *testing.T) {
					ctx := ctxT(t, time.Minute)
					conn := e.connect(t, func(c *pgx.ConnConfig) { c.DefaultQueryExecMode = mode })
					for round := 0; round < 3; round++ { // statement caches kick in
						want := fmt.Sprintf("%dms", 4001+100*mi+round) // not whole seconds: set_config answers the canonical form
						b := &pgx.Batch{}
						b.Queue("SELECT set_config('statement_timeout', $1::text, true)", want)
						b.Queue("SELECT aid, current_setting('statement_timeout') FROM accounts WHERE aid BETWEEN $1 AND $2 ORDER BY aid", env.lo, env.hi)
						br := conn.SendBatch(ctx, b)
						var set string
						if err := br.QueryRow().Scan(&set); err != nil || set != want {
							t.Fatalf("round %d: set_config: %q, %v", round, set, err)
						}
						rows, err := br.Query()
						if err != nil {
							t.Fatal(err)
						}
						n := 0
						for rows.Next() {
							var aid int64
							var st string
							if err := rows.Scan(&aid, &st); err != nil {
								t.Fatal(err)
							}
							if st != want {
								t.Fatalf("round %d: aid %d read with statement_timeout %q, want %q", round, aid, st, want)
							}
							n++
						}
						if err := rows.Err(); err != nil {
							t.Fatalf("round %d: %v", round, err)
						}
						if err := br.Close(); err != nil {
							t.Fatal(err)
						}
						if n != env.n {
							t.Fatalf("round %d: %d rows, want %d", round, n, env.n)
						}
					}
				})
			}
		})
	}
}

// TestSettingsInTransactionWire: inside a transaction block,
// set_config(..., true) holds for the rest of the transaction on every
// shard it reads — in the pipeline of the read (every shard runs it
// first) or before it (the readers the transaction opens repeat it) —
// and it neither ties the transaction to a shard nor counts as a write
// (a write on any shard may follow); the replies are one Postgres's,
// message by message.
func TestSettingsInTransactionWire(t *testing.T) {
	for i, tc := range []struct {
		name string
		opts []envOpt
	}{{"pgbouncer", nil}, {"direct", []envOpt{direct()}}} {
		t.Run(tc.name, func(t *testing.T) {
			e := startProxy(t, tc.opts...)
			env := newSettingsEnv(t, e, 9_300_000+int64(i)*10_000)
			px := dialRaw(t, e.addr)
			px.startup(e.db.name)
			ref := dialRaw(t, env.refAddr)
			ref.startup(env.refDB)
			lo, hi := fmt.Append(nil, env.lo), fmt.Append(nil, env.hi)
			bin := func(b ...[]byte) [][]byte { return b }
			read := "SELECT aid, current_setting('statement_timeout') AS st, current_setting('lock_timeout') AS lt FROM accounts WHERE aid BETWEEN $1 AND $2 ORDER BY aid"
			readSQL := fmt.Sprintf("SELECT aid, current_setting('statement_timeout') AS st, current_setting('lock_timeout') AS lt FROM accounts WHERE aid BETWEEN %d AND %d ORDER BY aid", env.lo, env.hi)
			ext := func(sql string, params ...[]byte) []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{Parameters: params}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}}
			}
			seq := func(parts ...[]pgproto3.FrontendMessage) []pgproto3.FrontendMessage { return slices.Concat(parts...) }
			q := simpleQuery
			sync := []pgproto3.FrontendMessage{&pgproto3.Sync{}}
			setTimeout := "SELECT set_config('statement_timeout', $1::text, true)"
			type step = []pgproto3.FrontendMessage
			cases := []struct {
				name  string
				steps []step
			}{
				{"BEGIN and the setting in one pipeline, the read in the next (JDBC)", []step{
					seq(ext("BEGIN"), ext(setTimeout, []byte("6s")), sync),
					seq(ext(read, lo, hi), sync),
					q("COMMIT"), q(readSQL)}},
				{"BEGIN, the setting, the read and COMMIT in one pipeline", []step{
					seq(ext("BEGIN"), ext(setTimeout, []byte("6500ms")), ext("SELECT set_config('lock_timeout', '2s', true)"), ext(read, lo, hi), ext("COMMIT"), sync),
					q(readSQL)}},
				{"a bound transaction: the setting ahead of the read in one pipeline", []step{
					q("BEGIN"), q(fmt.Sprintf("SELECT abalance FROM accounts WHERE aid = %d", env.keyed)),
					seq(ext(setTimeout, []byte("7s")), ext(read, lo, hi), sync),
					seq(ext(read, lo, hi), sync),
					q("COMMIT")}},
				{"a setting after a read of every shard: the readers repeat it", []step{
					q("BEGIN"), q(fmt.Sprintf("SELECT abalance FROM accounts WHERE aid = %d", env.keyed)), q(readSQL),
					q("SELECT set_config('statement_timeout', '9s', true)"), q(readSQL),
					seq(ext(setTimeout, []byte("11s")), sync), seq(ext(read, lo, hi), sync),
					q("COMMIT")}},
				{"a setting that fails in a transaction", []step{
					q("BEGIN"), seq(ext(setTimeout, []byte("later")), sync), q(readSQL), q("ROLLBACK"), q(readSQL)}},
				{"a setting then a savepoint rolled back", []step{
					q("BEGIN"), q("SAVEPOINT a"), q("SELECT set_config('lock_timeout', '3s', true)"), q(readSQL),
					q("ROLLBACK TO SAVEPOINT a"), q(readSQL), q("COMMIT")}},
			}
			// A setting and then a statement of each shard: the setting binds
			// no shard (the transaction moves to the statement's) and is no
			// write (a write of any shard may follow).
			for s := range e.db.m.Shards {
				k := e.db.keysOn(s, 1, env.lo)[0]
				cases = append(cases, struct {
					name  string
					steps []step
				}{fmt.Sprintf("a setting, then a write on shard %d", s), []step{
					q("BEGIN"), seq(ext(setTimeout, []byte("5s")), sync),
					q(fmt.Sprintf("UPDATE accounts SET note = note WHERE aid = %d RETURNING aid, current_setting('statement_timeout')", k)),
					q(readSQL), q("COMMIT")}})
			}
			for _, c := range cases {
				sameReplies(t, px, ref, c.name, c.steps)
			}
			// A value pgshard cannot repeat as the server reads it is refused.
			got := replies(t, px, seq(q("BEGIN"), []pgproto3.FrontendMessage{
				&pgproto3.Parse{Query: setTimeout, ParameterOIDs: []uint32{23}},
				&pgproto3.Bind{ParameterFormatCodes: []int16{1}, Parameters: bin(binary.BigEndian.AppendUint32(nil, 5000))},
				&pgproto3.Execute{}, &pgproto3.Sync{}}, q("ROLLBACK")))
			if !slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, "Error ERROR 0A000") }) {
				t.Errorf("set_config with an int4 parameter in a transaction: %q, want a refusal", got)
			}
		})
	}
}

// TestFanoutDescribeStatementFirst: a read of every shard whose statement
// is described in its own pipeline before its Bind — Parse, Describe
// (statement), Bind, Execute, Sync: JDBC for parameters of unknown type,
// postgres.js for cursors — gets exactly the replies one Postgres sends,
// in an implicit transaction and in a transaction block, named and
// unnamed, with a session setting (the describe then runs in a
// transaction that carries it), and with a statement that fails on the
// shard (its error in place of the ParseComplete). Through PgBouncer and
// directly. It was refused (0A000): the Describe took a backend of one
// shard, which the read then followed.
func TestFanoutDescribeStatementFirst(t *testing.T) {
	for i, tc := range wireSetups {
		t.Run(tc.name, func(t *testing.T) {
			_, env, px, ref := startWirePair(t, tc, 9_300_000+int64(i)*10_000)
			lo, hi := fmt.Append(nil, env.lo), fmt.Append(nil, env.hi)
			read := "SELECT aid, abalance, current_setting('work_mem') AS wm FROM accounts WHERE aid BETWEEN $1 AND $2 ORDER BY aid"
			describedRead := func(name string) []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{&pgproto3.Parse{Name: name, Query: read}, &pgproto3.Describe{ObjectType: 'S', Name: name},
					&pgproto3.Bind{PreparedStatement: name, Parameters: [][]byte{lo, hi}}, &pgproto3.Execute{}, &pgproto3.Sync{}}
			}
			begin := []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}}
			commit := []pgproto3.FrontendMessage{&pgproto3.Query{String: "COMMIT"}}
			cases := []wireCase{
				{"unnamed", describedRead("")},
				{"named", describedRead("described_read")},
				{"with a Describe of the portal too", []pgproto3.FrontendMessage{&pgproto3.Parse{Query: read}, &pgproto3.Describe{ObjectType: 'S'},
					&pgproto3.Bind{Parameters: [][]byte{lo, hi}}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
				{"begin", begin},
				{"in a transaction block", describedRead("")},
				{"commit", commit},
				{"a statement the shard refuses", []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT nope FROM accounts WHERE aid BETWEEN $1 AND $2"},
					&pgproto3.Describe{ObjectType: 'S'}, &pgproto3.Bind{Parameters: [][]byte{lo, hi}}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
				{"afterwards", describedRead("")},
			}
			expectSameReplies(t, px, ref, cases)
			if n := len(replies(t, ref, describedRead(""))); n < 4+env.n {
				t.Fatalf("the read answers %d messages: the data set is too small to test it", n)
			}
		})
	}
}
