package proxy_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestJDBCFeatures runs one pgJDBC program — metadata, savepoints and
// autosave, fetch sizes (suspended portals), scrollable and updatable
// result sets, generated keys, batches, a query timeout (a cancel
// request), read-only and serializable transactions, arrays, binary
// transfer, the simple query mode, COPY TO, large objects, LISTEN/NOTIFY,
// temporary tables, client info — through the proxy (through PgBouncer,
// and directly to Postgres) and directly against the shard that holds
// its keys, and requires the three transcripts to be the same line for
// line. One section differs by design and is checked on its own: a batch
// sent in autocommit whose statements name keys of two shards is one
// implicit transaction in Postgres; the proxy refuses it (0A000) before
// any of it runs (the transcript's later lines show that nothing of it
// was applied).
func TestJDBCFeatures(t *testing.T) {
	pooled := startProxy(t)
	directEnv := startProxy(t, direct())
	const shard = 2
	k := pooled.db.keysOn(shard, 3, 52_000_000)
	other := pooled.db.keysOn(0, 1, 52_000_000)[0]
	prog := compileJDBC(t, "Features", fmt.Sprintf(jdbcFeaturesSource, k[0], k[1], k[2], other))
	transcript := func(dsn string, xshard bool) []string {
		t.Helper()
		args := []string{jdbcURL(t, dsn)}
		if xshard {
			args = append(args, "xshard")
		}
		out, err := prog.run(t, args...)
		if err != nil || !strings.HasSuffix(strings.TrimSpace(out), "DONE") {
			t.Fatalf("java against %s: %v\n%s", args[0], err, out)
		}
		return strings.Split(strings.TrimSpace(out), "\n")
	}
	want := transcript(pooled.db.m.Shards[shard].DSN, false)
	// Every section reads something on the shard itself (expected
	// errors are printed as their SQLSTATE within the section's answer):
	// a program that fails everywhere alike would compare equal.
	for _, l := range want {
		if strings.Contains(l, "] ERROR ") || strings.Contains(l, "] EXCEPTION ") {
			t.Fatalf("on the shard itself: %s\n%s", l, strings.Join(want, "\n"))
		}
	}
	for _, e := range []struct {
		name string
		dsn  string
	}{{"through PgBouncer", pooled.dsn}, {"direct to Postgres", directEnv.dsn}} {
		got := transcript(e.dsn, true)
		if len(got) != len(want)+1 {
			t.Fatalf("%s: %d lines, the shard's own transcript has %d (+1 for the cross-shard batch)\nproxy:\n%s\nshard:\n%s",
				e.name, len(got), len(want), strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		for i, j := 0, 0; i < len(got); i++ {
			if strings.HasPrefix(got[i], "[batch-xshard] ") {
				if !strings.Contains(got[i], "0A000") {
					t.Errorf("%s: a batch over two shards in autocommit: %s; want it refused with 0A000", e.name, got[i])
				}
				continue
			}
			if got[i] != want[j] {
				t.Errorf("%s: %s\n  the shard itself: %s", e.name, got[i], want[j])
			}
			j++
		}
	}
}

// jdbcFeaturesSource prints one line per section: its name and what it
// read (or the error's SQLSTATE and message). The keys are three keys of
// one shard and, for the "xshard" section alone, one of another.
const jdbcFeaturesSource = `
import java.sql.*;
import java.util.*;
import org.postgresql.PGConnection;
import org.postgresql.copy.CopyManager;
import org.postgresql.largeobject.*;

public class Features {
    interface Body { String run(Connection c) throws Exception; }
    static String url;
    static final long k0 = %dL, k1 = %dL, k2 = %dL, other = %dL;
    static final String keys = k0 + "," + k1 + "," + k2;

    static void sec(String name, String props, Body b) {
        String out;
        try (Connection c = DriverManager.getConnection(url + props)) {
            out = b.run(c);
        } catch (SQLException e) {
            out = "ERROR " + e.getSQLState() + " " + e.getMessage().split("\n")[0];
        } catch (Exception e) {
            out = "EXCEPTION " + e;
        }
        System.out.println("[" + name + "] " + out);
    }
    static String rows(ResultSet rs) throws SQLException {
        StringBuilder sb = new StringBuilder();
        int n = rs.getMetaData().getColumnCount();
        while (rs.next()) {
            sb.append("(");
            for (int i = 1; i <= n; i++) { if (i > 1) sb.append(","); sb.append(rs.getString(i)); }
            sb.append(")");
        }
        return sb.toString();
    }
    static String q(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(sql)) { return rows(rs); }
    }
    static void x(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement()) { s.execute(sql); }
    }
    static String balances(Connection c) throws SQLException {
        return q(c, "SELECT aid - " + k0 + ", abalance, version, note FROM accounts WHERE aid IN (" + keys + ") ORDER BY aid");
    }

    public static void main(String[] a) throws Exception {
        url = a[0];
        boolean xshard = a.length > 1;
        sec("setup", "", c -> {
            for (long k : new long[]{k0, k1, k2}) x(c, "DELETE FROM accounts WHERE aid = " + k);
            try (PreparedStatement p = c.prepareStatement("INSERT INTO accounts (aid, abalance, note) VALUES (?, 0, ?)")) {
                for (long k : new long[]{k0, k1, k2}) { p.setLong(1, k); p.setString(2, "n" + (k - k0)); p.executeUpdate(); }
            }
            return balances(c);
        });
        sec("meta-tables", "", c -> {
            try (ResultSet rs = c.getMetaData().getTables(null, "public", "accounts", new String[]{"TABLE"})) { return rows(rs); }
        });
        sec("meta-columns", "", c -> {
            StringBuilder sb = new StringBuilder();
            try (ResultSet rs = c.getMetaData().getColumns(null, "public", "accounts", null)) {
                while (rs.next()) sb.append(rs.getString("COLUMN_NAME")).append(":").append(rs.getString("TYPE_NAME")).append(":").append(rs.getString("IS_NULLABLE")).append(" ");
            }
            return sb.toString();
        });
        sec("meta-pk", "", c -> { try (ResultSet rs = c.getMetaData().getPrimaryKeys(null, "public", "accounts")) { return rows(rs); } });
        sec("meta-version", "", c -> c.getMetaData().getDatabaseMajorVersion() + "." + c.getMetaData().getDatabaseMinorVersion());
        sec("savepoint", "", c -> {
            c.setAutoCommit(false);
            x(c, "UPDATE accounts SET abalance = 2 WHERE aid = " + k0);
            Savepoint sp = c.setSavepoint("s1");
            x(c, "UPDATE accounts SET abalance = 3 WHERE aid = " + k0);
            c.rollback(sp);
            x(c, "UPDATE accounts SET abalance = abalance + 10 WHERE aid = " + k1);
            c.commit();
            return balances(c);
        });
        sec("savepoint-after-error", "", c -> {
            c.setAutoCommit(false);
            Savepoint sp = c.setSavepoint();
            String e1 = "";
            try { x(c, "SELECT 1/0 FROM accounts WHERE aid = " + k0); } catch (SQLException e) { e1 = e.getSQLState(); c.rollback(sp); }
            String r = q(c, "SELECT abalance FROM accounts WHERE aid = " + k0);
            c.commit();
            return e1 + " " + r;
        });
        sec("autosave-always", "&autosave=always", c -> {
            c.setAutoCommit(false);
            x(c, "UPDATE accounts SET abalance = 20 WHERE aid = " + k2);
            String e1 = "";
            try { x(c, "SELECT 1/0 FROM accounts WHERE aid = " + k2); } catch (SQLException e) { e1 = e.getSQLState(); }
            String r = q(c, "SELECT abalance FROM accounts WHERE aid = " + k2);
            c.commit();
            return e1 + " " + r + " " + balances(c);
        });
        sec("autosave-never", "", c -> {
            c.setAutoCommit(false);
            x(c, "UPDATE accounts SET abalance = 21 WHERE aid = " + k2);
            String e1 = "";
            try { x(c, "SELECT 1/0 FROM accounts WHERE aid = " + k2); } catch (SQLException e) { e1 = e.getSQLState(); }
            String r;
            try { r = q(c, "SELECT abalance FROM accounts WHERE aid = " + k2); } catch (SQLException e) { r = e.getSQLState(); }
            c.rollback();
            return e1 + " " + r + " " + balances(c);
        });
        sec("fetch-size", "", c -> {
            c.setAutoCommit(false);
            try (PreparedStatement s = c.prepareStatement("SELECT aid - ?, note FROM accounts WHERE aid IN (" + keys + ") ORDER BY aid")) {
                s.setFetchSize(1);
                s.setLong(1, k0);
                String r;
                try (ResultSet rs = s.executeQuery()) { r = rows(rs); }
                c.commit();
                return r;
            }
        });
        sec("fetch-size-many", "", c -> {
            c.setAutoCommit(false);
            try (Statement s = c.createStatement()) {
                s.setFetchSize(7);
                String r;
                try (ResultSet rs = s.executeQuery("SELECT g, g * 2 FROM generate_series(1, 50) g")) {
                    long sum = 0; int n = 0;
                    while (rs.next()) { sum += rs.getLong(2); n++; }
                    r = n + " rows, sum " + sum;
                }
                c.commit();
                return r;
            }
        });
        sec("scrollable", "", c -> {
            try (Statement s = c.createStatement(ResultSet.TYPE_SCROLL_INSENSITIVE, ResultSet.CONCUR_READ_ONLY);
                 ResultSet rs = s.executeQuery("SELECT aid - " + k0 + " FROM accounts WHERE aid IN (" + keys + ") ORDER BY aid")) {
                rs.last(); String last = rs.getString(1); int n = rs.getRow();
                rs.first(); String first = rs.getString(1);
                rs.absolute(2);
                return last + " " + n + " " + first + " " + rs.getString(1);
            }
        });
        sec("updatable-result-set", "", c -> {
            try (Statement s = c.createStatement(ResultSet.TYPE_FORWARD_ONLY, ResultSet.CONCUR_UPDATABLE);
                 ResultSet rs = s.executeQuery("SELECT aid, abalance FROM accounts WHERE aid = " + k1)) {
                rs.next(); rs.updateInt(2, 77); rs.updateRow();
            }
            return balances(c);
        });
        sec("generated-keys", "", c -> {
            try (PreparedStatement p = c.prepareStatement("UPDATE accounts SET version = version + 1 WHERE aid = ?", new String[]{"version", "note"})) {
                p.setLong(1, k0);
                int n = p.executeUpdate();
                try (ResultSet rs = p.getGeneratedKeys()) { return n + " " + rows(rs); }
            }
        });
        sec("batch", "", c -> {
            try (PreparedStatement p = c.prepareStatement("UPDATE accounts SET version = version + 1 WHERE aid = ?")) {
                for (long k : new long[]{k0, k1, k2, k0}) { p.setLong(1, k); p.addBatch(); }
                return Arrays.toString(p.executeBatch()) + " " + balances(c);
            }
        });
        if (xshard) {
            sec("batch-xshard", "", c -> {
                try (PreparedStatement p = c.prepareStatement("UPDATE accounts SET version = version + 100 WHERE aid = ?")) {
                    for (long k : new long[]{k0, other}) { p.setLong(1, k); p.addBatch(); }
                    return Arrays.toString(p.executeBatch());
                }
            });
        }
        sec("batch-in-transaction", "", c -> {
            c.setAutoCommit(false);
            try (Statement s = c.createStatement()) {
                s.addBatch("UPDATE accounts SET note = 'b' WHERE aid = " + k1);
                s.addBatch("UPDATE accounts SET note = 'c' WHERE aid = " + k2);
                String r = Arrays.toString(s.executeBatch());
                c.commit();
                return r + " " + balances(c);
            }
        });
        sec("many-executions", "", c -> {
            // server-side prepared from the 5th (prepareThreshold), then reused
            try (PreparedStatement p = c.prepareStatement("SELECT abalance FROM accounts WHERE aid = ?")) {
                long sum = 0;
                for (int i = 0; i < 30; i++) { p.setLong(1, k1); try (ResultSet rs = p.executeQuery()) { rs.next(); sum += rs.getLong(1); } }
                return "" + sum;
            }
        });
        sec("callable", "", c -> {
            try (CallableStatement cs = c.prepareCall("{? = call upper(?)}")) {
                cs.registerOutParameter(1, Types.VARCHAR); cs.setString(2, "abc"); cs.execute(); return cs.getString(1);
            }
        });
        sec("query-timeout", "", c -> {
            try (Statement s = c.createStatement()) {
                s.setQueryTimeout(1);
                try { s.execute("SELECT pg_sleep(20) FROM accounts WHERE aid = " + k0); return "not cancelled"; }
                catch (SQLException e) { return e.getSQLState() + " then " + q(c, "SELECT abalance FROM accounts WHERE aid = " + k1); }
            }
        });
        sec("is-valid", "", c -> "" + c.isValid(5));
        sec("read-only", "", c -> {
            c.setReadOnly(true); c.setAutoCommit(false);
            String r;
            try { x(c, "UPDATE accounts SET abalance = 0 WHERE aid = " + k0); r = "not refused"; } catch (SQLException e) { r = e.getSQLState(); }
            c.rollback(); c.setReadOnly(false); c.setAutoCommit(true);
            return r + " " + q(c, "SHOW transaction_read_only") + " " + balances(c);
        });
        sec("serializable", "", c -> {
            c.setTransactionIsolation(Connection.TRANSACTION_SERIALIZABLE); c.setAutoCommit(false);
            String r = q(c, "SHOW transaction_isolation") + q(c, "SELECT abalance FROM accounts WHERE aid = " + k2);
            c.commit();
            return r + " " + c.getTransactionIsolation();
        });
        sec("array-param", "", c -> {
            try (PreparedStatement p = c.prepareStatement("SELECT aid - ? FROM accounts WHERE aid = ANY(?) ORDER BY aid")) {
                p.setLong(1, k0); p.setArray(2, c.createArrayOf("int8", new Long[]{k0, k2}));
                try (ResultSet rs = p.executeQuery()) { return rows(rs); }
            }
        });
        sec("types", "", c -> q(c, "SELECT 1::int2, 2::int8, 1.5::numeric, 'x'::varchar, '2020-01-02'::date, '12:00'::time, interval '1 day', '{1,2}'::int[], 'a'::bytea, true, 1.25::float4, '\"j\"'::jsonb"));
        sec("binary-transfer", "&prepareThreshold=-1", c -> {
            try (PreparedStatement p = c.prepareStatement("SELECT ?::int8, ?::timestamp, ?::numeric, ?::date, ?::bytea, abalance FROM accounts WHERE aid = ?")) {
                p.setLong(1, 5); p.setTimestamp(2, Timestamp.valueOf("2020-01-02 03:04:05.123456"));
                p.setBigDecimal(3, new java.math.BigDecimal("12.345")); p.setDate(4, java.sql.Date.valueOf("2021-02-03"));
                p.setBytes(5, new byte[]{1, 2, 3}); p.setLong(6, k1);
                try (ResultSet rs = p.executeQuery()) {
                    rs.next();
                    return rs.getLong(1) + " " + rs.getTimestamp(2) + " " + rs.getBigDecimal(3) + " " + rs.getDate(4) + " " + Arrays.toString(rs.getBytes(5)) + " " + rs.getInt(6);
                }
            }
        });
        sec("simple-query-mode", "&preferQueryMode=simple", c -> {
            try (PreparedStatement p = c.prepareStatement("SELECT note FROM accounts WHERE aid = ?")) {
                p.setLong(1, k2); try (ResultSet rs = p.executeQuery()) { return rows(rs); }
            }
        });
        sec("copy-out", "", c -> {
            CopyManager cm = ((PGConnection) c).getCopyAPI();
            java.io.StringWriter w = new java.io.StringWriter();
            long n = cm.copyOut("COPY (SELECT aid - " + k0 + ", note FROM accounts WHERE aid IN (" + keys + ") ORDER BY aid) TO STDOUT (FORMAT csv, HEADER)", w);
            return n + " " + w.toString().replace("\n", "|");
        });
        sec("large-object", "", c -> {
            c.setAutoCommit(false);
            LargeObjectManager lm = ((PGConnection) c).getLargeObjectAPI();
            long oid = lm.createLO();
            LargeObject lo = lm.open(oid, LargeObjectManager.WRITE); lo.write("hello".getBytes()); lo.close();
            lo = lm.open(oid, LargeObjectManager.READ); String r = new String(lo.read(5)); lo.close();
            lm.delete(oid); c.commit();
            return r;
        });
        sec("listen-notify", "", c -> {
            x(c, "LISTEN features_chan");
            try (Connection c2 = DriverManager.getConnection(url)) { x(c2, "NOTIFY features_chan, 'hi'"); }
            for (int i = 0; i < 100; i++) {
                org.postgresql.PGNotification[] ns = ((PGConnection) c).getNotifications(100);
                if (ns != null && ns.length > 0) return ns.length + " " + ns[0].getName() + " " + ns[0].getParameter();
            }
            return "no notification";
        });
        sec("temp-table", "", c -> {
            x(c, "CREATE TEMP TABLE features_tmp (a int)");
            x(c, "INSERT INTO features_tmp VALUES (1), (2)");
            return q(c, "SELECT sum(a) FROM features_tmp");
        });
        sec("read-only-always", "&readOnlyMode=always", c -> {
            // pgJDBC sends SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY
            c.setReadOnly(true);
            String r;
            try { x(c, "UPDATE accounts SET abalance = 0 WHERE aid = " + k0); r = "not refused"; } catch (SQLException e) { r = e.getSQLState(); }
            String b = balances(c);
            c.setReadOnly(false);
            x(c, "UPDATE accounts SET version = version + 1 WHERE aid = " + k2);
            return r + " " + b + " " + balances(c);
        });
        sec("client-info", "", c -> { c.setClientInfo("ApplicationName", "features"); return q(c, "SHOW application_name") + " " + balances(c); });
        sec("schema", "", c -> { c.setSchema("public"); return c.getSchema() + " " + balances(c); });
        sec("final", "", c -> balances(c));
        System.out.println("DONE");
    }
}
`
