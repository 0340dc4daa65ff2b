package proxy_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// The seed store's reads through pgshard from real drivers with their
// default settings: psycopg 3 (autocommit off: every read runs in an
// implicit transaction the driver opens with BEGIN, then commit()) and
// pgJDBC with autocommit off (BEGIN in the read's own pipeline). Each
// program ports the seed PostgresStore's pending_outbox, due_timers,
// pending_spawns and list_executions (filters, limit+1 paging by id),
// runs every read more than prepareThreshold times (so the drivers
// switch to named server-side statements) and prints what it read; the
// test compares that with the rows the shards hold.

// seedStoreEnv is a migrated store over every shard of the cluster with
// the differential data set's store rows, and a proxy in front of it.
type seedStoreEnv struct {
	e     *proxyEnv
	rows  []diffRow
	execs []diffExec
}

func newSeedStoreEnv(t *testing.T, opts ...envOpt) *seedStoreEnv {
	t.Helper()
	c := clustertest.Get(t)
	m := clustertest.MigratedMap(t, c)
	ctx := ctxT(t, time.Minute)
	rows, execs := diffData(m)
	var conns []*pgx.Conn
	for _, s := range m.Shards {
		conn, err := pgx.Connect(ctx, s.DSN)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		conns = append(conns, conn)
	}
	var store []diffRow
	for _, r := range rows {
		if r.table != "vals" && r.table != "lookup" && r.table != "gdefs" {
			store = append(store, r)
		}
	}
	if err := loadDiffData(ctx, store, nil, conns); err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(mustURL(t, m.Shards[0].DSN).Path, "/")
	e := startProxyFor(t, &testDB{c: c, name: db, m: m}, append([]envOpt{withSchema(m, route.DefaultSchema())}, opts...)...)
	return &seedStoreEnv{e: e, rows: store, execs: execs}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// want is what the seed's reads return, in the programs' line format.
func (s *seedStoreEnv) want() string {
	var b strings.Builder
	var outbox, spawns [][]any
	var timers [][]any
	for _, r := range s.rows {
		switch r.table {
		case "outbox":
			outbox = append(outbox, r.vals)
		case "spawns":
			spawns = append(spawns, r.vals)
		case "timers":
			timers = append(timers, r.vals)
		}
	}
	sort.Slice(outbox, func(i, j int) bool { return outbox[i][0].(int64) < outbox[j][0].(int64) })
	sort.Slice(spawns, func(i, j int) bool { return spawns[i][0].(int64) < spawns[j][0].(int64) })
	for _, o := range outbox {
		target := "NULL"
		if o[1] != nil {
			target = "[" + o[1].(string) + "]"
		}
		fmt.Fprintf(&b, "outbox %d %s %s\n", o[0], target, o[2])
	}
	sort.Slice(timers, func(i, j int) bool {
		a, c := timers[i], timers[j]
		if a[2].(float64) != c[2].(float64) {
			return a[2].(float64) < c[2].(float64)
		}
		if a[0].(string) != c[0].(string) {
			return a[0].(string) < c[0].(string)
		}
		return a[1].(string) < c[1].(string)
	})
	for _, now := range []float64{1000, 1025.5, 1099.75} {
		for _, tm := range timers {
			if tm[2].(float64) <= now {
				fmt.Fprintf(&b, "timer %.2f %s %s %.2f\n", now, tm[0], tm[1], tm[2])
			}
		}
	}
	for _, sp := range spawns {
		fmt.Fprintf(&b, "spawn %d %s %s %s %s\n", sp[0], sp[1], sp[2], sp[3], sp[4])
	}
	for _, f := range seedListFilters {
		var ids []diffExec
		for _, e := range s.execs {
			if f.def != "" && e.def != f.def {
				continue
			}
			if len(f.statuses) > 0 && !slices.Contains(f.statuses, e.status) {
				continue
			}
			if f.roots && e.parent != "" {
				continue
			}
			ids = append(ids, e)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i].id < ids[j].id })
		for page := 0; ; page++ {
			lo := page * f.limit
			hi := min(lo+f.limit, len(ids))
			if lo > len(ids) {
				break
			}
			for _, e := range ids[lo:hi] {
				fmt.Fprintf(&b, "list %s %d %s %s\n", f.name, page, e.id, e.def)
			}
			if hi == len(ids) {
				break
			}
		}
	}
	return b.String()
}

// seedListFilters are the list_executions calls the programs make (each
// pages through every page).
var seedListFilters = []struct {
	name     string
	def      string
	statuses []string
	roots    bool
	limit    int
}{
	{name: "all", limit: 50},
	{name: "payment", def: "payment", limit: 7},
	{name: "running-failed", statuses: []string{"running", "failed"}, limit: 20},
	{name: "roots", roots: true, limit: 33},
	{name: "shipment-done-roots", def: "shipment", statuses: []string{"done"}, roots: true, limit: 3},
	{name: "unicode", def: "ärger", limit: 100},
}

// filtersPy renders the filters as Python tuples.
func filtersPy() string {
	var parts []string
	for _, f := range seedListFilters {
		st := "None"
		if len(f.statuses) > 0 {
			st = "[" + `"` + strings.Join(f.statuses, `", "`) + `"` + "]"
		}
		def := "None"
		if f.def != "" {
			def = `"` + f.def + `"`
		}
		roots := "False"
		if f.roots {
			roots = "True"
		}
		parts = append(parts, fmt.Sprintf(`("%s", %s, %s, %s, %d)`, f.name, def, st, roots, f.limit))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// TestSeedStoreReadsPsycopg: the seed store's reads from psycopg 3 with
// its default settings (autocommit off).
func TestSeedStoreReadsPsycopg(t *testing.T) {
	py := needBinary(t, "python3", "/usr/bin/python3")
	if out, err := run(t, time.Minute, "", py, "-c", "import psycopg"); err != nil {
		clustertest.SkipOrFail(t, fmt.Errorf("python3-psycopg is not installed: %s", out))
	}
	env := newSeedStoreEnv(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "seed.py"), []byte(strings.Replace(seedPsycopg, "FILTERS", filtersPy(), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dsn := range []string{env.e.dsn} {
		out, err := run(t, 3*time.Minute, dir, py, "seed.py", dsn)
		if err != nil {
			t.Fatalf("psycopg: %v\n%s", err, lastLines(out, 30))
		}
		checkSeedOutput(t, "psycopg", out, env.want())
	}
	checkTxnReads(t, env.e)
	waitIdle(t, env.e)
}

// TestSeedStoreReadsJDBC: the seed store's reads from pgJDBC with
// autocommit off.
func TestSeedStoreReadsJDBC(t *testing.T) {
	javac := needBinary(t, "javac", "/usr/bin/javac")
	java := needBinary(t, "java", "/usr/bin/java")
	jar := ""
	for _, p := range []string{"/usr/share/java/postgresql.jar", "/usr/share/java/postgresql-jdbc4.jar"} {
		if _, err := os.Stat(p); err == nil {
			jar = p
			break
		}
	}
	if jar == "" {
		clustertest.SkipOrFail(t, fmt.Errorf("pgJDBC is not installed (Debian libpostgresql-jdbc-java)"))
	}
	env := newSeedStoreEnv(t)
	dir := t.TempDir()
	var calls []string
	for _, f := range seedListFilters {
		st := "null"
		if len(f.statuses) > 0 {
			st = `new String[]{"` + strings.Join(f.statuses, `", "`) + `"}`
		}
		def := "null"
		if f.def != "" {
			def = `"` + f.def + `"`
		}
		calls = append(calls, fmt.Sprintf(`listAll(c, "%s", %s, %s, %v, %d);`, f.name, def, st, f.roots, f.limit))
	}
	src := strings.Replace(seedJDBC, "LISTCALLS", strings.Join(calls, "\n            "), 1)
	if err := os.WriteFile(filepath.Join(dir, "SeedStore.java"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, 2*time.Minute, dir, javac, "-cp", jar, "SeedStore.java"); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	u := mustURL(t, env.e.dsn)
	jdbcURL := fmt.Sprintf("jdbc:postgresql://%s%s?user=postgres&sslmode=disable", u.Host, u.Path)
	out, err := run(t, 3*time.Minute, dir, java, "-cp", jar+":.", "SeedStore", jdbcURL)
	if err != nil {
		t.Fatalf("java: %v\n%s", err, lastLines(out, 30))
	}
	checkSeedOutput(t, "JDBC", out, env.want())
	checkTxnReads(t, env.e)
	waitIdle(t, env.e)
}

// checkSeedOutput compares a program's lines with the expected ones. Due
// timers of equal fire_at may come in any order (the seed orders by
// fire_at only): each run's rows are sorted before comparing, and the
// program checks the order of fire_at itself.
func checkSeedOutput(t *testing.T, who, out, want string) {
	t.Helper()
	var got []string
	done := false
	for _, l := range strings.Split(out, "\n") {
		switch {
		case l == "OK":
			done = true
		case strings.HasPrefix(l, "outbox ") || strings.HasPrefix(l, "timer ") || strings.HasPrefix(l, "spawn ") || strings.HasPrefix(l, "list "):
			got = append(got, l)
		}
	}
	if !done {
		t.Fatalf("%s: the program did not finish:\n%s", who, lastLines(out, 30))
	}
	wantLines := strings.Split(strings.TrimSpace(want), "\n")
	sortTimers := func(ls []string) []string {
		out := slices.Clone(ls)
		sort.SliceStable(out, func(i, j int) bool {
			if strings.HasPrefix(out[i], "timer ") && strings.HasPrefix(out[j], "timer ") {
				return out[i] < out[j]
			}
			return false
		})
		return out
	}
	g, w := sortTimers(got), sortTimers(wantLines)
	if !slices.Equal(g, w) {
		for i := 0; i < max(len(g), len(w)); i++ {
			var a, b string
			if i < len(g) {
				a = g[i]
			}
			if i < len(w) {
				b = w[i]
			}
			if a != b {
				t.Fatalf("%s: line %d: got %q, want %q (%d lines, want %d)", who, i+1, a, b, len(g), len(w))
			}
		}
	}
	t.Logf("%s: %d rows read through pgshard, as the shards hold them", who, len(g))
}

// checkTxnReads checks that the reads ran inside the driver's
// transactions (read of every shard in readers), and nothing was refused.
func checkTxnReads(t *testing.T, e *proxyEnv) {
	t.Helper()
	n := metricSum(t, e.srv, "pgshard_proxy_transaction_reads_total")
	// 7 rounds × (outbox, 3 due_timers, spawns, and the list pages).
	if n < 7*5 {
		t.Fatalf("%v reads ran inside transactions, want at least 35 (the driver's implicit transactions)", n)
	}
	if r := metricSum(t, e.srv, "pgshard_proxy_refusals_total"); r != 0 {
		t.Fatalf("%v statements were refused", r)
	}
	t.Logf("%v reads of every shard inside the driver's transactions", n)
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

var _ = shardmap.DefaultBuckets

// seedPsycopg is the seed PostgresStore's reads, ported to psycopg 3 as
// the seed wrote them (psycopg's defaults: not autocommit, so each read
// runs in a transaction the driver opens, then commit()).
const seedPsycopg = `
import sys
import psycopg

class SeedStore:
    def __init__(self, dsn):
        self.conn = psycopg.connect(dsn)
        assert not self.conn.autocommit and self.conn.prepare_threshold == 5

    def pending_outbox(self):
        with self.conn.cursor() as cur:
            cur.execute("SELECT seq, target_id, event FROM outbox ORDER BY seq")
            rows = cur.fetchall()
        self.conn.commit()
        return rows

    def due_timers(self, now):
        with self.conn.cursor() as cur:
            cur.execute("SELECT execution_id, path, fire_at FROM timers WHERE fire_at <= %s ORDER BY fire_at", (now,))
            rows = cur.fetchall()
        self.conn.commit()
        return rows

    def pending_spawns(self):
        with self.conn.cursor() as cur:
            cur.execute("SELECT seq, parent_id, child_id, root_path, context FROM spawns ORDER BY seq")
            rows = cur.fetchall()
        self.conn.commit()
        return rows

    def list_executions(self, definition_id=None, status=None, roots_only=False, limit=50, cursor=None):
        clauses, params = [], []
        if definition_id is not None:
            clauses.append("definition_id = %s")
            params.append(definition_id)
        if status:
            clauses.append("data::jsonb->>'status' = ANY(%s)")
            params.append(list(status))
        if roots_only:
            clauses.append("data::jsonb->>'parent_id' IS NULL")
        if cursor:
            clauses.append("id > %s")
            params.append(cursor)
        where = ("WHERE " + " AND ".join(clauses)) if clauses else ""
        with self.conn.cursor() as cur:
            cur.execute("SELECT id, definition_id, data FROM executions " + where + " ORDER BY id LIMIT %s", params + [limit + 1])
            rows = cur.fetchall()
        self.conn.commit()
        items = rows[:limit]
        nxt = items[-1][0] if len(rows) > limit else None
        return items, nxt

store = SeedStore(sys.argv[1])
for rnd in range(7):  # past prepare_threshold: named statements from the 6th run
    out = []
    for (seq, target, event) in store.pending_outbox():
        out.append("outbox %d %s %s" % (seq, "NULL" if target is None else "[" + target + "]", event))
    for now in (1000, 1025.5, 1099.75):
        last = None
        rows = store.due_timers(now)
        for (eid, path, fire_at) in rows:
            assert last is None or fire_at >= last, "due_timers not ordered by fire_at"
            last = fire_at
        for (eid, path, fire_at) in sorted(rows, key=lambda r: (r[2], r[0], r[1])):
            out.append("timer %.2f %s %s %.2f" % (now, eid, path, fire_at))
    for (seq, parent, child, root, ctx) in store.pending_spawns():
        out.append("spawn %d %s %s %s %s" % (seq, parent, child, root, ctx))
    for (name, definition_id, status, roots, limit) in FILTERS:
        cursor, page = None, 0
        while True:
            items, cursor = store.list_executions(definition_id, status, roots, limit, cursor)
            for (eid, d, data) in items:
                out.append("list %s %d %s %s" % (name, page, eid, d))
            if cursor is None:
                break
            page += 1
    if rnd == 0:
        first = out
    assert out == first, "round %d read something else" % rnd
print("\n".join(first))
store.conn.close()
print("OK")
`

// seedJDBC is the same port for pgJDBC with autocommit off.
const seedJDBC = `
import java.sql.*;
import java.util.*;

public class SeedStore {
    static List<String> out = new ArrayList<>();

    static void pendingOutbox(Connection c) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement("SELECT seq, target_id, event FROM outbox ORDER BY seq");
             ResultSet rs = ps.executeQuery()) {
            while (rs.next()) {
                String t = rs.getString(2);
                out.add("outbox " + rs.getLong(1) + " " + (t == null ? "NULL" : "[" + t + "]") + " " + rs.getString(3));
            }
        }
        c.commit();
    }

    static void dueTimers(Connection c, double now) throws SQLException {
        List<String[]> rows = new ArrayList<>();
        try (PreparedStatement ps = c.prepareStatement("SELECT execution_id, path, fire_at FROM timers WHERE fire_at <= ? ORDER BY fire_at")) {
            ps.setDouble(1, now);
            try (ResultSet rs = ps.executeQuery()) {
                double last = -1;
                while (rs.next()) {
                    double f = rs.getDouble(3);
                    if (f < last) throw new RuntimeException("due_timers not ordered by fire_at");
                    last = f;
                    rows.add(new String[]{String.format(Locale.ROOT, "%.2f", f), rs.getString(1), rs.getString(2)});
                }
            }
        }
        c.commit();
        rows.sort((a, b) -> {
            int x = Double.compare(Double.parseDouble(a[0]), Double.parseDouble(b[0]));
            if (x != 0) return x;
            x = a[1].compareTo(b[1]);
            return x != 0 ? x : a[2].compareTo(b[2]);
        });
        for (String[] r : rows) out.add(String.format(Locale.ROOT, "timer %.2f %s %s %s", now, r[1], r[2], r[0]));
    }

    static void pendingSpawns(Connection c) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement("SELECT seq, parent_id, child_id, root_path, context FROM spawns ORDER BY seq");
             ResultSet rs = ps.executeQuery()) {
            while (rs.next()) {
                out.add("spawn " + rs.getLong(1) + " " + rs.getString(2) + " " + rs.getString(3) + " " + rs.getString(4) + " " + rs.getString(5));
            }
        }
        c.commit();
    }

    // listExecutions returns the next cursor (null: no next page).
    static String listExecutions(Connection c, String name, int page, String def, String[] status, boolean roots, int limit, String cursor) throws SQLException {
        List<String> clauses = new ArrayList<>();
        if (def != null) clauses.add("definition_id = ?");
        if (status != null) clauses.add("data::jsonb->>'status' = ANY(?)");
        if (roots) clauses.add("data::jsonb->>'parent_id' IS NULL");
        if (cursor != null) clauses.add("id > ?");
        String where = clauses.isEmpty() ? "" : "WHERE " + String.join(" AND ", clauses);
        String next = null;
        try (PreparedStatement ps = c.prepareStatement("SELECT id, definition_id, data FROM executions " + where + " ORDER BY id LIMIT ?")) {
            int i = 1;
            if (def != null) ps.setString(i++, def);
            if (status != null) ps.setArray(i++, c.createArrayOf("text", status));
            if (cursor != null) ps.setString(i++, cursor);
            ps.setLong(i, limit + 1);
            try (ResultSet rs = ps.executeQuery()) {
                int n = 0;
                String last = null;
                while (rs.next()) {
                    n++;
                    if (n > limit) { next = last; break; }
                    last = rs.getString(1);
                    out.add("list " + name + " " + page + " " + last + " " + rs.getString(2));
                }
            }
        }
        c.commit();
        return next;
    }

    static void listAll(Connection c, String name, String def, String[] status, boolean roots, int limit) throws SQLException {
        String cursor = null;
        int page = 0;
        do {
            cursor = listExecutions(c, name, page++, def, status, roots, limit, cursor);
        } while (cursor != null);
    }

    public static void main(String[] args) throws Exception {
        List<String> first = null;
        try (Connection c = DriverManager.getConnection(args[0])) {
            c.setAutoCommit(false);
            for (int round = 0; round < 7; round++) { // past prepareThreshold (5): named statements
                out = new ArrayList<>();
                pendingOutbox(c);
                for (double now : new double[]{1000, 1025.5, 1099.75}) dueTimers(c, now);
                pendingSpawns(c);
            LISTCALLS
                if (first == null) first = out;
                else if (!first.equals(out)) throw new RuntimeException("round " + round + " read something else");
            }
        }
        for (String l : first) System.out.println(l);
        System.out.println("OK");
    }
}
`
