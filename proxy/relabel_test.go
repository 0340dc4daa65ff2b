package proxy_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/proxy"
)

// catalogIDs are what one shard's catalog numbers: a table's OID, its
// columns' attnums by name, a type's OID.
type catalogIDs struct {
	table uint32
	cols  map[string]uint16
	typ   uint32
}

// readCatalogIDs reads table's and typ's numbers on conn (a shard).
func readCatalogIDs(ctx context.Context, t *testing.T, conn *pgx.Conn, table, typ string) catalogIDs {
	t.Helper()
	ids := catalogIDs{cols: map[string]uint16{}}
	if err := conn.QueryRow(ctx, "SELECT $1::regclass::oid, $2::regtype::oid", table, typ).Scan(&ids.table, &ids.typ); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, "SELECT attname, attnum FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped", table)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		var a int16
		if err := rows.Scan(&n, &a); err != nil {
			t.Fatal(err)
		}
		ids.cols[n] = uint16(a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// startLastDefault starts a proxy whose default shard is the test
// database's last one (so that a merged read's first shard, whose
// description the merge answers with, is another), and returns a client
// of it and exec, which runs a statement through it or fails the test.
func startLastDefault(t *testing.T) (*testDB, *proxyEnv, context.Context, *pgx.Conn, func(string)) {
	t.Helper()
	d := db(t)
	env := startProxyFor(t, d, func(c *proxy.Config) { c.DefaultShard = d.m.Shards[len(d.m.Shards)-1].Name })
	ctx := ctxT(t, 2*time.Minute)
	conn := env.connect(t)
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	return d, env, ctx, conn, exec
}

// TestDescriptionsInDefaultShardOIDs: the shards number their tables,
// columns and types each in its own way (the test database makes them
// differ: oidDivergence, and a column dropped on one shard here); a
// client reads the catalog on the default shard, so every description
// it gets — of a keyed read of another shard (simple and extended
// protocol), of a read merged from shards the default one is not among,
// a statement's parameter types — names the default shard's table OID,
// attnums and type OIDs, and a Parse naming the default shard's type
// reaches each shard in its own number, also after schema changes (a column added, the
// table made again), or nothing (0) where the default shard has no such
// column.
//
// The default shard is the last one here, so that a merged read's first
// shard, whose description the merge answers with, is another one.
func TestDescriptionsInDefaultShardOIDs(t *testing.T) {
	d, env, ctx, conn, exec := startLastDefault(t)
	last := len(d.m.Shards) - 1
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = conn.Exec(ctx, "DROP TABLE IF EXISTS relabel_t")
		_, _ = conn.Exec(ctx, "DROP TYPE IF EXISTS relabel_mood")
	})
	shard1 := env.db.shardConn(t, 1)
	def := env.db.shardConn(t, last)
	var keys []int64
	for i := range last {
		keys = append(keys, env.db.keysOn(i, 1, 53_000_000)[0])
	}
	// made makes the type (when it is to be made) and the table through
	// the proxy, its rows on every shard but the default one. Shard 1
	// alone gets a column dropped before w: w's attnum differs there.
	// Whether shard 1 numbers the table and the type as the default shard
	// does depends on what the package's other tests made on each before:
	// until it does not, the default shard spends OIDs of its own and
	// they are made again.
	made := func(typ bool, v string) {
		t.Helper()
		for attempt := 0; ; attempt++ {
			exec("DROP TABLE IF EXISTS relabel_t")
			if typ {
				exec("DROP TYPE IF EXISTS relabel_mood")
				exec("CREATE TYPE relabel_mood AS ENUM ('calm', 'busy')")
			}
			exec("CREATE TABLE relabel_t (id int8 PRIMARY KEY, gone int, v text, m relabel_mood)")
			other := readCatalogIDs(ctx, t, shard1, "relabel_t", "relabel_mood")
			want := readCatalogIDs(ctx, t, def, "relabel_t", "relabel_mood")
			if other.table != want.table && other.typ != want.typ {
				break
			}
			if attempt == 3 {
				t.Fatalf("shard 1 numbers relabel_t %d and relabel_mood %d as the default shard does, after 3 tries", other.table, other.typ)
			}
			if _, err := def.Exec(ctx, "CREATE TABLE relabel_pad (); DROP TABLE relabel_pad"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := shard1.Exec(ctx, "ALTER TABLE relabel_t ADD COLUMN pad int; ALTER TABLE relabel_t DROP COLUMN pad"); err != nil {
			t.Fatal(err)
		}
		exec("ALTER TABLE relabel_t DROP COLUMN gone")
		for _, k := range keys {
			exec(fmt.Sprintf("INSERT INTO relabel_t (id, v, m) VALUES (%d, '%s', 'busy')", k, v))
		}
	}
	made(true, "x")

	check := func(when string, added ...string) {
		t.Helper()
		want := readCatalogIDs(ctx, t, def, "relabel_t", "relabel_mood")
		// The premise: another shard numbers them otherwise.
		other := readCatalogIDs(ctx, t, shard1, "relabel_t", "relabel_mood")
		if other.table == want.table || other.typ == want.typ {
			t.Fatalf("%s: shard 1 numbers relabel_t %d and relabel_mood %d as the default shard does: the test proves nothing", when, other.table, other.typ)
		}
		cols := "id, v, m, "
		for _, c := range added {
			if other.cols[c] == want.cols[c] {
				t.Fatalf("%s: shard 1 numbers column %s %d as the default shard does: the test proves nothing", when, c, want.cols[c])
			}
			cols += c + ", "
		}
		cols += "1 AS one"
		checkFields := func(what string, fds []pgconn.FieldDescription) {
			t.Helper()
			for _, fd := range fds {
				wantTable, wantAtt := want.table, want.cols[fd.Name]
				if fd.Name == "one" {
					wantTable, wantAtt = 0, 0
				}
				if fd.TableOID != wantTable || fd.TableAttributeNumber != wantAtt {
					t.Errorf("%s: %s: column %s is table %d attnum %d; the default shard's catalog says %d, %d",
						when, what, fd.Name, fd.TableOID, fd.TableAttributeNumber, wantTable, wantAtt)
				}
				if fd.Name == "m" && fd.DataTypeOID != want.typ {
					t.Errorf("%s: %s: column m has type %d; the default shard's relabel_mood is %d", when, what, fd.DataTypeOID, want.typ)
				}
			}
		}
		for _, k := range keys {
			sql := fmt.Sprintf("SELECT %s FROM relabel_t WHERE id = %d", cols, k)
			res, err := conn.PgConn().Exec(ctx, sql).ReadAll()
			if err != nil || len(res) != 1 || res[0].Err != nil || len(res[0].Rows) != 1 {
				t.Fatalf("%s: %s: %v %v", when, sql, err, res)
			}
			checkFields("simple "+sql, res[0].FieldDescriptions)
			rr := conn.PgConn().ExecParams(ctx, fmt.Sprintf("SELECT %s FROM relabel_t WHERE id = $1", cols), [][]byte{fmt.Appendf(nil, "%d", k)}, nil, nil, nil)
			fds := append([]pgconn.FieldDescription(nil), rr.FieldDescriptions()...)
			if r := rr.Read(); r.Err != nil || len(r.Rows) != 1 {
				t.Fatalf("%s: extended read of key %d: %v (%d rows)", when, k, r.Err, len(r.Rows))
			}
			checkFields(fmt.Sprintf("extended, key %d", k), fds)
		}
		// A Parse that names the type by the OID the client read in the
		// catalog (psycopg, Npgsql, pgJDBC do): each shard gets its own.
		for _, k := range keys {
			r := conn.PgConn().ExecParams(ctx, "SELECT id FROM relabel_t WHERE id = $1 AND m <> $2", [][]byte{fmt.Appendf(nil, "%d", k), []byte("calm")}, []uint32{pgtype.Int8OID, want.typ}, nil, nil).Read()
			if r.Err != nil || len(r.Rows) != 1 {
				t.Errorf("%s: a Parse naming relabel_mood as %d, key %d: %v (%d rows)", when, want.typ, k, r.Err, len(r.Rows))
			}
		}
		r := conn.PgConn().ExecParams(ctx, "SELECT count(*) FROM relabel_t WHERE m <> $1", [][]byte{[]byte("calm")}, []uint32{want.typ}, nil, nil).Read()
		if r.Err != nil || len(r.Rows) != 1 || string(r.Rows[0][0]) != fmt.Sprint(len(keys)) {
			t.Errorf("%s: a read of every shard whose Parse names relabel_mood as %d: %v %q", when, want.typ, r.Err, r.Rows)
		}
		// Merged from shards 0 and 2 (the default shard is not among them).
		sql := fmt.Sprintf("SELECT %s FROM relabel_t WHERE id IN (%d, %d) ORDER BY id", cols, keys[0], keys[len(keys)-1])
		res, err := conn.PgConn().Exec(ctx, sql).ReadAll()
		if err != nil || len(res) != 1 || res[0].Err != nil || len(res[0].Rows) != 2 {
			t.Fatalf("%s: %s: %v %v", when, sql, err, res)
		}
		checkFields("merged "+sql, res[0].FieldDescriptions)
		// A statement's parameter types, described on its key's shard
		// (in the pipeline that runs it there).
		pl := conn.PgConn().StartPipeline(ctx)
		pl.SendPrepare("relabel_s", fmt.Sprintf("SELECT id FROM relabel_t WHERE id = %d AND m = $1", keys[0]), nil)
		pl.SendQueryPrepared("relabel_s", [][]byte{[]byte("calm")}, nil, nil)
		pl.SendDeallocate("relabel_s")
		if err := pl.Sync(); err != nil {
			t.Fatal(err)
		}
		for done := false; !done; {
			r, err := pl.GetResults()
			if err != nil {
				t.Fatalf("%s: the pipeline: %v", when, err)
			}
			switch r := r.(type) {
			case *pgconn.StatementDescription:
				if len(r.ParamOIDs) != 1 || r.ParamOIDs[0] != want.typ {
					t.Errorf("%s: the parameter types are %v; the default shard's relabel_mood is %d", when, r.ParamOIDs, want.typ)
				}
				checkFields("a statement described", r.Fields)
			case *pgconn.ResultReader:
				_, _ = r.Close()
			case *pgconn.PipelineSync:
				done = true
			}
		}
		if err := pl.Close(); err != nil {
			t.Fatal(err)
		}
	}
	check("as made")
	exec("ALTER TABLE relabel_t ADD COLUMN w text")
	check("after a column was added", "w")
	// Made again: every shard numbers it anew.
	made(false, "y")
	exec("ALTER TABLE relabel_t ADD COLUMN w text")
	check("made again", "w")
	// A column added on every shard without the proxy: no schema change
	// it saw, the column it has not read is read.
	for i := range d.m.Shards {
		if _, err := env.db.shardConn(t, i).Exec(ctx, "ALTER TABLE relabel_t ADD COLUMN z text"); err != nil {
			t.Fatal(err)
		}
	}
	check("a column added behind the proxy's back", "w", "z")

	// A session pinned to a backend of its own (here by a cursor WITH
	// HOLD over shard 1's rows) reads the catalog on that backend: a read
	// of every shard is described in its shard's numbers, whichever shard
	// the merge's description came from.
	pinned := env.connect(t)
	if _, err := pinned.Exec(ctx, fmt.Sprintf("DECLARE relabel_c CURSOR WITH HOLD FOR SELECT v FROM relabel_t WHERE id = %d", keys[1])); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, env.srv, "pgshard_proxy_pinned_sessions", 1)
	var table uint32
	var wAt, zAt int16
	if err := pinned.QueryRow(ctx, `SELECT 'relabel_t'::regclass::oid,
		(SELECT attnum FROM pg_attribute WHERE attrelid = 'relabel_t'::regclass AND attname = 'w'),
		(SELECT attnum FROM pg_attribute WHERE attrelid = 'relabel_t'::regclass AND attname = 'z')`).Scan(&table, &wAt, &zAt); err != nil {
		t.Fatal(err)
	}
	res, err := pinned.PgConn().Exec(ctx, "SELECT id, w, z FROM relabel_t ORDER BY id").ReadAll()
	if err != nil || len(res) != 1 || res[0].Err != nil || len(res[0].Rows) != len(keys) {
		t.Fatalf("a read of every shard in a session of its own: %v %v", err, res)
	}
	if o := readCatalogIDs(ctx, t, shard1, "relabel_t", "relabel_mood"); o.table != table || uint16(wAt) != o.cols["w"] {
		t.Fatalf("the pinned session reads a catalog that is not shard 1's (relabel_t %d, w %d; shard 1: %d, %d)", table, wAt, o.table, o.cols["w"])
	}
	for _, fd := range res[0].FieldDescriptions {
		want := map[string]uint16{"id": 1, "w": uint16(wAt), "z": uint16(zAt)}[fd.Name]
		if fd.TableOID != table || fd.TableAttributeNumber != want {
			t.Errorf("a pinned session: column %s is table %d attnum %d; its catalog says %d, %d", fd.Name, fd.TableOID, fd.TableAttributeNumber, table, want)
		}
	}
	if _, err := pinned.Exec(ctx, "CLOSE relabel_c"); err != nil {
		t.Fatal(err)
	}
}

// TestBinaryValuesInDefaultShardOIDs: a value in binary format names
// types itself (an array its element type, a record or composite each
// field's), in the numbers of the shard that sends it; psycopg decodes
// them by those numbers. Through the proxy, a row read from any shard —
// a keyed read, a read of every shard merged — is byte for byte what the
// default shard sends for the same values: arrays of a user enum, a
// composite holding one and an array of it, a domain over the array, an
// array of composites and an anonymous record — by key, merged from
// every shard, by a prepared statement run without a Describe and by a
// binary cursor.
func TestBinaryValuesInDefaultShardOIDs(t *testing.T) {
	d, env, ctx, conn, exec := startLastDefault(t)
	last := len(d.m.Shards) - 1
	drop := func() {
		for _, sql := range []string{"DROP TABLE IF EXISTS relabel_v", "DROP DOMAIN IF EXISTS relabel_vlist", "DROP TYPE IF EXISTS relabel_vpair", "DROP TYPE IF EXISTS relabel_vmood"} {
			_, _ = conn.Exec(ctx, sql)
		}
	}
	t.Cleanup(drop)
	shard1 := env.db.shardConn(t, 1)
	def := env.db.shardConn(t, last)
	typeOID := func(c *pgx.Conn, name string) uint32 {
		t.Helper()
		var o uint32
		if err := c.QueryRow(ctx, "SELECT $1::regtype::oid", name).Scan(&o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	for attempt := 0; ; attempt++ {
		drop()
		exec("CREATE TYPE relabel_vmood AS ENUM ('calm', 'busy')")
		exec("CREATE TYPE relabel_vpair AS (m relabel_vmood, n int, ms relabel_vmood[])")
		exec("CREATE DOMAIN relabel_vlist AS relabel_vmood[]")
		if typeOID(shard1, "relabel_vmood") != typeOID(def, "relabel_vmood") && typeOID(shard1, "relabel_vpair") != typeOID(def, "relabel_vpair") {
			break
		}
		if attempt == 3 {
			t.Fatal("shard 1 numbers the types as the default shard does, after 3 tries")
		}
		if _, err := def.Exec(ctx, "CREATE TABLE relabel_pad (); DROP TABLE relabel_pad"); err != nil {
			t.Fatal(err)
		}
	}
	exec("CREATE TABLE relabel_v (id int8 PRIMARY KEY, m relabel_vmood[], p relabel_vpair, d relabel_vlist, pa relabel_vpair[])")
	var keys []int64 // one on each shard; the default shard's last
	for i := range d.m.Shards {
		k := env.db.keysOn(i, 1, 54_000_000)[0]
		keys = append(keys, k)
		exec(fmt.Sprintf(`INSERT INTO relabel_v VALUES (%d, '{calm,busy}', ROW('busy', 7, '{calm,NULL}'), '{busy}',
			ARRAY[ROW('calm', 1, '{busy}')::relabel_vpair, NULL, ROW(NULL, 2, '{}')::relabel_vpair])`, k))
	}
	const cols = "m, p, d, pa, ROW(m[1], 5, p), ARRAY[ROW(m)]"
	binary := []int16{1}
	read := func(c *pgconn.PgConn, sql string, args ...[]byte) [][][]byte {
		t.Helper()
		r := c.ExecParams(ctx, sql, args, nil, nil, binary).Read()
		if r.Err != nil {
			t.Fatalf("%s: %v", sql, r.Err)
		}
		return r.Rows
	}
	byKey := "SELECT " + cols + " FROM relabel_v WHERE id = $1"
	want := read(def.PgConn(), byKey, fmt.Appendf(nil, "%d", keys[last]))
	if len(want) != 1 {
		t.Fatalf("the default shard has %d rows of key %d", len(want), keys[last])
	}
	// The premise: shard 1 itself sends other numbers in the same values.
	if got := read(shard1.PgConn(), byKey, fmt.Appendf(nil, "%d", keys[1])); fmt.Sprint(got) == fmt.Sprint(want) {
		t.Fatal("shard 1 sends the same bytes as the default shard: the test proves nothing")
	}
	same := func(what string, row [][]byte) {
		t.Helper()
		for i := range want[0] {
			if i >= len(row) || string(row[i]) != string(want[0][i]) {
				t.Errorf("%s: column %d is %x; the default shard sends %x", what, i, row[i], want[0][i])
			}
		}
	}
	for _, k := range keys {
		rows := read(conn.PgConn(), byKey, fmt.Appendf(nil, "%d", k))
		if len(rows) != 1 {
			t.Fatalf("key %d: %d rows", k, len(rows))
		}
		same(fmt.Sprintf("key %d", k), rows[0])
	}
	rows := read(conn.PgConn(), "SELECT "+cols+" FROM relabel_v ORDER BY id")
	if len(rows) != len(keys) {
		t.Fatalf("a read of every shard: %d rows, want %d", len(rows), len(keys))
	}
	for i, row := range rows {
		same(fmt.Sprintf("a read of every shard, row %d", i), row)
	}
	// A prepared statement described once, then run without a Describe
	// (Npgsql's way): Bind, Execute, Sync.
	pc := conn.PgConn()
	if _, err := pc.Prepare(ctx, "relabel_vs", byKey, nil); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		fe := pc.Frontend()
		fe.Send(&pgproto3.Bind{PreparedStatement: "relabel_vs", Parameters: [][]byte{fmt.Appendf(nil, "%d", k)}, ResultFormatCodes: binary})
		fe.Send(&pgproto3.Execute{})
		fe.Send(&pgproto3.Sync{})
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		var row [][]byte
		for done := false; !done; {
			m, err := pc.ReceiveMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			switch m := m.(type) {
			case *pgproto3.DataRow:
				for _, v := range m.Values {
					row = append(row, append([]byte(nil), v...))
				}
			case *pgproto3.ErrorResponse:
				t.Fatalf("key %d run without a Describe: %s", k, m.Message)
			case *pgproto3.ReadyForQuery:
				done = true
			}
		}
		same(fmt.Sprintf("key %d run without a Describe", k), row)
	}
	// A binary cursor in a transaction, fetched by simple queries: its
	// FETCH answers in binary.
	for _, k := range keys {
		res, err := pc.Exec(ctx, fmt.Sprintf("BEGIN; DECLARE relabel_c BINARY CURSOR FOR SELECT %s FROM relabel_v WHERE id = %d; FETCH ALL relabel_c; COMMIT", cols, k)).ReadAll()
		if err != nil || len(res) != 4 || len(res[2].Rows) != 1 {
			t.Fatalf("key %d by a binary cursor: %v %v", k, err, res)
		}
		same(fmt.Sprintf("key %d by a binary cursor", k), res[2].Rows[0])
	}
	// A binary COPY of a query and of a table's listed columns: its
	// tuples' values, byte for byte.
	for _, sql := range []string{
		"COPY (SELECT " + cols + " FROM relabel_v) TO STDOUT (FORMAT binary)",
		"COPY relabel_v (m, p, d, pa) TO STDOUT (FORMAT binary)",
	} {
		var buf bytes.Buffer
		if _, err := pc.CopyTo(ctx, &buf, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		tuples := copyTuples(t, buf.Bytes())
		if len(tuples) != len(keys) {
			t.Fatalf("%s: %d tuples, want %d", sql, len(tuples), len(keys))
		}
		for i, tu := range tuples {
			for j, v := range tu {
				if string(v) != string(want[0][j]) {
					t.Errorf("%s, tuple %d: field %d is %x; the default shard sends %x", sql, i, j, v, want[0][j])
				}
			}
		}
	}
}

// copyTuples reads a binary COPY file: its tuples' field values.
func copyTuples(t *testing.T, b []byte) [][][]byte {
	t.Helper()
	const sig = "PGCOPY\n\xff\r\n\x00"
	if len(b) < len(sig)+8 || string(b[:len(sig)]) != sig {
		t.Fatalf("not a binary COPY file: %x", b[:min(len(b), 19)])
	}
	b = b[len(sig)+8+int(binary.BigEndian.Uint32(b[len(sig)+4:])):]
	var out [][][]byte
	for {
		n := int16(binary.BigEndian.Uint16(b))
		b = b[2:]
		if n == -1 {
			return out
		}
		var tu [][]byte
		for range n {
			l := int32(binary.BigEndian.Uint32(b))
			b = b[4:]
			if l < 0 {
				tu = append(tu, nil)
				continue
			}
			tu, b = append(tu, b[:l]), b[l:]
		}
		out = append(out, tu)
	}
}
