package proxy_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/proxy/route"
)

// copyEnv is a sharded table of its own (copy_rows_N, keyed by id) with
// rows on every shard, and the same rows in one reference database.
type copyEnv struct {
	table      string
	px, ref    *rawClient
	keys       []int64 // by shard: keys[i] is on shard i
	pxC, refC  *pgx.Conn
	shardCount int
}

// newCopyEnv starts ws's proxy with copy_rows_<n> in its sharding
// schema, the table on every shard and in a fresh reference database,
// and rows whose text needs COPY's escaping on every shard.
func newCopyEnv(t *testing.T, ws wireSetup, n int) *copyEnv {
	t.Helper()
	d := db(t)
	table := fmt.Sprintf("copy_rows_%d", n)
	ddl := fmt.Sprintf("DROP TABLE IF EXISTS %[1]s; CREATE TABLE %[1]s (id int8 PRIMARY KEY, n int NOT NULL, note text, at timestamptz)", table)
	ctx := ctxT(t, time.Minute)
	for _, s := range d.m.Shards {
		if err := execDirect(ctx, s.DSN, ddl); err != nil {
			t.Fatal(err)
		}
	}
	schema := testSchema()
	schema.Tables = append(schema.Tables, route.TableKey{Table: table, Column: "id", Type: route.KeyInt8, Position: 1})
	e := startProxy(t, append(slices.Clone(ws.opts), withSchema(d.m, schema))...)
	c := clustertest.Get(t)
	refDB := clustertest.FreshDatabase(t, c)
	ref, err := pgx.Connect(ctx, c.Shards[0].DSN(refDB, c.Spec.User))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close(context.Background()) })
	if _, err := ref.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	pxC := e.connect(t)
	env := &copyEnv{table: table, pxC: pxC, refC: ref, shardCount: len(d.m.Shards)}
	notes := []string{"plain", "tab\there", "new\nline", `back\slash`, `"quoted", with comma`, "ünïcødé", ""}
	for s := range d.m.Shards {
		keys := d.keysOn(s, 4, 8_000_000+int64(n)*100_000)
		env.keys = append(env.keys, keys[0])
		for j, k := range keys {
			var note any = notes[(int(k)+j)%len(notes)]
			if j == 3 {
				note = nil
			}
			for _, q := range []*pgx.Conn{pxC, ref} {
				if _, err := q.Exec(ctx, fmt.Sprintf("INSERT INTO %s (id, n, note, at) VALUES ($1, $2, $3, '2026-12-05 10:00:00+00'::timestamptz + $2::int * interval '1 minute')", table),
					k, int32(j+1), note); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	env.px = dialRaw(t, e.addr)
	env.px.startup(e.db.name)
	env.ref = dialRaw(t, net.JoinHostPort(c.Shards[0].Host, strconv.Itoa(c.Shards[0].Port)))
	env.ref.startup(refDB)
	if ws.set != "" {
		for _, rc := range []*rawClient{env.px, env.ref} {
			replies(t, rc, []pgproto3.FrontendMessage{&pgproto3.Query{String: ws.set}})
		}
	}
	return env
}

// copyReplies is replies for exchanges that may COPY out: a run of
// CopyData is shown as one line holding its rows sorted (the shards'
// outputs come one after the other, one database's in its own order), a
// binary output's rows decoded past its file header up to its trailer,
// which must end it.
func copyReplies(t *testing.T, c *rawClient, msgs []pgproto3.FrontendMessage) []string {
	t.Helper()
	return copyRepliesAs(t, false, c, msgs)
}

// copyRepliesAs is copyReplies, or with exact every CopyData's bytes as
// they came (a merged COPY's rows are in its order).
func copyRepliesAs(t *testing.T, exact bool, c *rawClient, msgs []pgproto3.FrontendMessage) []string {
	t.Helper()
	rfq := c.sendAll(msgs)
	var out []string
	var data []byte
	inData, bin := false, false
	for rfq > 0 {
		m, err := c.fe.Receive()
		if err != nil {
			t.Fatalf("after %q: %v", out, err)
		}
		switch m := m.(type) {
		case *pgproto3.CopyOutResponse:
			bin = m.OverallFormat == 1
			out = append(out, fmt.Sprintf("CopyOutResponse format=%d columns=%v", m.OverallFormat, m.ColumnFormatCodes))
			continue
		case *pgproto3.CopyData:
			if exact {
				out = append(out, "CopyData "+strconv.Quote(string(m.Data)))
			} else {
				data, inData = append(data, m.Data...), true
			}
			continue
		}
		if inData {
			out = append(out, "CopyData "+copyRows(t, data, bin))
			data, inData = data[:0], false
		}
		switch m := m.(type) {
		case *pgproto3.CopyDone:
			out = append(out, "CopyDone")
		case *pgproto3.ReadyForQuery:
			rfq--
			out = append(out, replyText(m))
		default:
			if r := replyText(m); r != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// copyRows is a COPY output's rows, sorted: text lines, or a binary
// output's rows in hex.
func copyRows(t *testing.T, data []byte, bin bool) string {
	t.Helper()
	if !bin {
		lines := strings.SplitAfter(string(data), "\n")
		if lines[len(lines)-1] != "" {
			t.Fatalf("a text COPY output does not end with a newline: %q", data)
		}
		lines = lines[:len(lines)-1]
		slices.Sort(lines)
		return fmt.Sprintf("%q", lines)
	}
	const header = "PGCOPY\n\xff\r\n\x00"
	if len(data) < 19 || string(data[:11]) != header || binary.BigEndian.Uint32(data[15:19]) != 0 {
		t.Fatalf("a binary COPY output without its file header: %x", data)
	}
	rest := data[19:]
	var rows []string
	for {
		if len(rest) < 2 {
			t.Fatalf("a binary COPY output cut short: %x", data)
		}
		n := int16(binary.BigEndian.Uint16(rest))
		if n == -1 {
			if len(rest) != 2 {
				t.Fatalf("a binary COPY output goes on after its trailer (%d bytes more)", len(rest)-2)
			}
			break
		}
		row := rest[:2]
		p := 2
		for range n {
			l := int32(binary.BigEndian.Uint32(rest[p:]))
			p += 4
			if l > 0 {
				p += int(l)
			}
		}
		row, rest = rest[:p], rest[p:]
		rows = append(rows, hex.EncodeToString(row))
	}
	slices.Sort(rows)
	return fmt.Sprint(rows)
}

// TestCopyOutEveryShard: COPY ... TO STDOUT of a sharded table, and of a
// key-less query whose rows need no merge, answers what one Postgres
// holding every row answers — every message, in order; the rows as a
// multiset, since the shards' outputs come one after the other — in text,
// CSV with a header (both syntaxes) and binary (one file header, one
// trailer), by the simple and the extended protocol (with a Describe of
// the portal), inside a transaction block (its own rows included), a
// keyed COPY of another shard than the transaction's, an output with no
// rows, and a column that does not exist. A shard that fails after
// others sent rows ends the COPY with its error (no CopyDone), as one
// database ends a COPY that fails; the connection goes on. Through
// PgBouncer (with and without a client setting, which wraps each shard's
// part in BEGIN/COMMIT) and directly.
func TestCopyOutEveryShard(t *testing.T) {
	for i, ws := range wireSetups {
		t.Run(ws.name, func(t *testing.T) {
			env := newCopyEnv(t, ws, i)
			tb := env.table
			q := simpleQuery
			ext := func(sql string) []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'},
					&pgproto3.Execute{}, &pgproto3.Sync{}}
			}
			other := env.keys[len(env.keys)-1]
			cases := []wireCase{
				{"text", q("COPY " + tb + " TO STDOUT")},
				{"csv with a header", q("COPY " + tb + " (id, note) TO STDOUT (FORMAT csv, HEADER)")},
				{"csv header, psql's \\copy syntax", q("COPY " + tb + " (note, id) TO STDOUT csv header")},
				{"binary", q("COPY " + tb + " TO STDOUT (FORMAT binary)")},
				{"a key-less query", q("COPY (SELECT id, n * 2, note FROM " + tb + " WHERE n > 1) TO STDOUT")},
				{"no rows, binary", q("COPY (SELECT * FROM " + tb + " WHERE n < 0) TO STDOUT (FORMAT binary)")},
				{"no rows, csv header", q("COPY (SELECT * FROM " + tb + " WHERE n < 0) TO STDOUT (FORMAT csv, HEADER)")},
				{"extended protocol", ext("COPY " + tb + " TO STDOUT (FORMAT csv)")},
				{"extended protocol, binary", ext("COPY " + tb + " (at, id) TO STDOUT (FORMAT binary)")},
				{"a Describe of the statement first", []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "COPY " + tb + " TO STDOUT"}, &pgproto3.Describe{ObjectType: 'S'},
					&pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
				{"after a keyed read in one pipeline", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: fmt.Sprintf("SELECT note FROM %s WHERE id = %d", tb, env.keys[0])}, &pgproto3.Bind{}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: "COPY " + tb + " (id) TO STDOUT"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
				{"before a keyed read in one pipeline", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: "COPY " + tb + " (id) TO STDOUT"}, &pgproto3.Bind{}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: fmt.Sprintf("SELECT note FROM %s WHERE id = %d", tb, env.keys[1])}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
				{"keyed, after a keyed read of another shard in one pipeline", []pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: fmt.Sprintf("SELECT note FROM %s WHERE id = %d", tb, env.keys[1])}, &pgproto3.Bind{}, &pgproto3.Execute{},
					&pgproto3.Parse{Query: fmt.Sprintf("COPY (SELECT * FROM %s WHERE id = %d) TO STDOUT", tb, other)}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
				{"a column that does not exist", q("COPY " + tb + " (nope) TO STDOUT")},
				{"begin", q("BEGIN")},
				{"a row of the transaction's own", q(fmt.Sprintf("INSERT INTO %s (id, n, note) VALUES (%d, 9, 'mine')", tb, env.keys[0]+1_000_000_000))},
				{"in the transaction", q("COPY " + tb + " TO STDOUT (FORMAT csv, HEADER)")},
				{"keyed, of another shard than the transaction's", q(fmt.Sprintf("COPY (SELECT * FROM %s WHERE id = %d) TO STDOUT", tb, other))},
				{"rollback", q("ROLLBACK")},
				{"afterwards", q("COPY " + tb + " TO STDOUT (FORMAT binary)")},
			}
			for _, c := range cases {
				want := copyReplies(t, env.ref, c.msgs)
				got := copyReplies(t, env.px, c.msgs)
				if !slices.Equal(got, want) {
					t.Errorf("%s:\n pgshard:      %s\n one database: %s", c.name, strings.Join(got, "\n               "), strings.Join(want, "\n               "))
				}
			}

			// A shard fails after the first shard's rows went out: the
			// COPY ends with its error, no CopyDone; the session goes on.
			fail := fmt.Sprintf("COPY (SELECT id, 1 / (id - %d) FROM %s) TO STDOUT", other, tb)
			got := copyReplies(t, env.px, q(fail))
			if len(got) != 4 || !strings.HasPrefix(got[0], "CopyOutResponse") || !strings.HasPrefix(got[1], "CopyData") ||
				!strings.HasPrefix(got[2], "Error ERROR 22012") || got[3] != "ReadyForQuery I" {
				t.Errorf("a shard failing after another's rows: %q", got)
			}
			if want, got := copyReplies(t, env.ref, q("COPY "+tb+" TO STDOUT")), copyReplies(t, env.px, q("COPY "+tb+" TO STDOUT")); !slices.Equal(got, want) {
				t.Errorf("after a failed COPY:\n pgshard:      %q\n one database: %q", got, want)
			}

			// A transaction at REPEATABLE READ cannot read every shard
			// (no snapshot spans them): refused, as for a SELECT.
			copyReplies(t, env.px, q("BEGIN ISOLATION LEVEL REPEATABLE READ"))
			got = copyReplies(t, env.px, q("COPY "+tb+" TO STDOUT"))
			if len(got) != 2 || !strings.HasPrefix(got[0], "Error ERROR 0A000") || got[1] != "ReadyForQuery E" {
				t.Errorf("COPY of every shard at REPEATABLE READ: %q", got)
			}
			copyReplies(t, env.px, q("ROLLBACK"))

			// The data set spreads over every shard (or the test proves
			// nothing about concatenation).
			if len(env.keys) != env.shardCount || env.shardCount < 2 {
				t.Fatalf("rows on %d of %d shards", len(env.keys), env.shardCount)
			}
		})
	}
}

// TestCopyOutPgx: pgx's CopyTo (what its users call) gets every shard's
// rows and their count through the proxy.
func TestCopyOutPgx(t *testing.T) {
	env := newCopyEnv(t, wireSetups[0], len(wireSetups))
	ctx := ctxT(t, time.Minute)
	var want, got bytes.Buffer
	wt, err := env.refC.PgConn().CopyTo(ctx, &want, "COPY "+env.table+" TO STDOUT (FORMAT csv, HEADER)")
	if err != nil {
		t.Fatal(err)
	}
	gt, err := env.pxC.PgConn().CopyTo(ctx, &got, "COPY "+env.table+" TO STDOUT (FORMAT csv, HEADER)")
	if err != nil {
		t.Fatal(err)
	}
	if gt.String() != wt.String() || gt.RowsAffected() != int64(4*env.shardCount) {
		t.Errorf("tags: pgshard %q, one database %q", gt, wt)
	}
	if g, w := copyRows(t, got.Bytes(), false), copyRows(t, want.Bytes(), false); g != w {
		t.Errorf("rows:\n pgshard:      %s\n one database: %s", g, w)
	}
	if !strings.HasPrefix(got.String(), "id,n,note,at\n") || strings.Count(got.String(), "id,n,note,at\n") != 1 {
		t.Errorf("want exactly one header line, first: %q", got.String())
	}
}

// TestCopyOutMerged: COPY (query) TO STDOUT of a query whose rows need
// merging across shards (ORDER BY, LIMIT, aggregates, GROUP BY) gets the
// bytes one database sends, message by message: text, CSV and binary;
// HEADER, DELIMITER, NULL, QUOTE, ESCAPE, FORCE_QUOTE; values that need
// COPY's escaping and quoting (tab, newline, backslash, quote and comma,
// non-ASCII, empty, NULL, a lone \. in one column); no rows; a shard's
// error (before any row); inside a transaction block. It was refused
// (0A000) before.
func TestCopyOutMerged(t *testing.T) {
	for i, ws := range wireSetups {
		t.Run(ws.name, func(t *testing.T) {
			env := newCopyEnv(t, ws, 10+i)
			tb := env.table
			q := simpleQuery
			other := env.keys[len(env.keys)-1]
			all := "SELECT id, n, note, at FROM " + tb
			cases := []wireCase{
				{"text", q("COPY (" + all + " ORDER BY id) TO STDOUT")},
				{"text, DELIMITER, NULL, HEADER", q("COPY (SELECT note, id FROM " + tb + " ORDER BY id DESC) TO STDOUT (DELIMITER '|', NULL 'NULL', HEADER)")},
				{"text, a delimiter inside the values", q("COPY (SELECT note, id FROM " + tb + " ORDER BY id) TO STDOUT (DELIMITER ',')")},
				{"csv, HEADER, ordered by text", q("COPY (SELECT id, note FROM " + tb + " ORDER BY note, id) TO STDOUT (FORMAT csv, HEADER)")},
				{"csv, psql's \\copy syntax", q("COPY (" + all + " ORDER BY id LIMIT 6) TO STDOUT csv header")},
				{"csv, FORCE_QUOTE *, QUOTE, ESCAPE", q("COPY (" + all + " ORDER BY id) TO STDOUT (FORMAT csv, FORCE_QUOTE *, QUOTE '''', ESCAPE '\\')")},
				{"csv, FORCE_QUOTE a column, NULL", q("COPY (SELECT id, note FROM " + tb + " ORDER BY id) TO STDOUT (FORMAT csv, FORCE_QUOTE (note), NULL 'NA', DELIMITER ';')")},
				{"csv, one column, a lone \\.", q("COPY (SELECT CASE WHEN n = 1 THEN '\\.' ELSE note END FROM " + tb + " ORDER BY id) TO STDOUT (FORMAT csv)")},
				{"binary", q("COPY (" + all + " ORDER BY id LIMIT 5) TO STDOUT (FORMAT binary)")},
				{"binary, no rows", q("COPY (SELECT id FROM " + tb + " WHERE n < 0 ORDER BY id) TO STDOUT BINARY")},
				{"csv, no rows, HEADER", q("COPY (SELECT id, note FROM " + tb + " WHERE n < 0 ORDER BY id) TO STDOUT (FORMAT csv, HEADER)")},
				{"aggregates", q("COPY (SELECT count(*), sum(n), max(note), min(at) FROM " + tb + ") TO STDOUT")},
				{"GROUP BY", q("COPY (SELECT n, count(*), max(note) FROM " + tb + " GROUP BY n ORDER BY n) TO STDOUT (FORMAT csv)")},
				{"LIMIT and OFFSET", q("COPY (SELECT id FROM " + tb + " ORDER BY id LIMIT 3 OFFSET 2) TO STDOUT")},
				{"a FORCE_QUOTE column the query does not have", q("COPY (SELECT id FROM " + tb + " ORDER BY id) TO STDOUT (FORMAT csv, FORCE_QUOTE (nope))")},
				// A query answered in two stages (its subquery merged
				// first): stage 2's rows are written as the COPY.
				{"in two stages: a WHERE subquery, csv", q("COPY (SELECT id, note FROM " + tb + " WHERE n > (SELECT avg(n) FROM " + tb + ") ORDER BY id) TO STDOUT (FORMAT csv, HEADER)")},
				{"in two stages: an IN subquery with LIMIT, binary", q("COPY (SELECT id, at FROM " + tb + " WHERE id IN (SELECT id FROM " + tb + " ORDER BY n DESC, id LIMIT 3) ORDER BY id) TO STDOUT (FORMAT binary)")},
				{"in two stages: INTERSECT, text", q("COPY (SELECT n FROM " + tb + " INTERSECT SELECT n + 1 FROM " + tb + " ORDER BY 1) TO STDOUT")},
				{"in two stages: no FROM", q("COPY (SELECT EXISTS (SELECT 1 FROM " + tb + " WHERE n = 2), (SELECT count(*) FROM " + tb + ")) TO STDOUT (FORMAT csv)")},
				{"afterwards", q("COPY (SELECT id FROM " + tb + " ORDER BY id LIMIT 2) TO STDOUT")},
				{"begin", q("BEGIN")},
				{"in a transaction block", q("COPY (" + all + " ORDER BY n, id) TO STDOUT (FORMAT csv)")},
				{"in two stages in a transaction block", q("COPY (SELECT count(*), max(d.n) FROM (SELECT n FROM " + tb + " ORDER BY id LIMIT 4) d) TO STDOUT")},
				{"commit", q("COMMIT")},
			}
			for _, c := range cases {
				want := copyRepliesAs(t, true, env.ref, c.msgs)
				got := copyRepliesAs(t, true, env.px, c.msgs)
				if !slices.Equal(got, want) {
					t.Errorf("%s:\n pgshard:      %s\n one database: %s", c.name, strings.Join(got, "\n               "), strings.Join(want, "\n               "))
				}
			}
			// A shard fails: the merge answers its error before any row
			// (one database sends the rows before the failing one first),
			// after the CopyOutResponse as Postgres does; the session goes on.
			got := copyRepliesAs(t, true, env.px, q(fmt.Sprintf("COPY (SELECT id, 1 / (id - %d) FROM %s ORDER BY id) TO STDOUT", other, tb)))
			if !slices.Equal(got, []string{"CopyOutResponse format=0 columns=[0 0]", `Error ERROR 22012 "division by zero" detail="" hint=""`, "ReadyForQuery I"}) {
				t.Errorf("a merged COPY whose shard fails: %q", got)
			}
			// The extended protocol: refused with a hint, the session goes on.
			got = copyRepliesAs(t, true, env.px, []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "COPY (SELECT id FROM " + tb + " ORDER BY id) TO STDOUT"},
				&pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}})
			if n := len(got); n < 2 || !strings.HasPrefix(got[n-2], "Error ERROR 0A000") || got[n-1] != "ReadyForQuery I" {
				t.Errorf("a merged COPY in the extended protocol: %q", got)
			}
		})
	}
}
