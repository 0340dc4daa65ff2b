package proxy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/cluster/clustertest"
)

// TestJDBC compiles and runs a small Java program with Debian's pgJDBC
// (default settings: extended protocol, server-side prepare after 5 uses,
// startup parameters extra_float_digits, DateStyle, TimeZone, ...), which
// PgBouncer 1.18 alone refuses at startup.
func TestJDBC(t *testing.T) {
	e := startProxy(t)
	k := e.db.keysOn(3, 3, 6_000_000)
	other := e.db.keysOn(0, 1, 6_000_000)[0]
	prog := compileJDBC(t, "ProxyTest", fmt.Sprintf(jdbcSource, k[0], k[1], k[2], other))
	out, err := prog.run(t, jdbcURL(t, e.dsn))
	if err != nil || !strings.HasSuffix(strings.TrimSpace(out), "OK") {
		t.Fatalf("java: %v\n%s", err, out)
	}
}

// jdbcProgram is a compiled Java program using pgJDBC.
type jdbcProgram struct {
	java, jar, dir, class string
}

// compileJDBC compiles the Java source of class with Debian's pgJDBC
// (libpostgresql-jdbc-java) on the class path.
func compileJDBC(t *testing.T, class, src string) jdbcProgram {
	t.Helper()
	javac := needBinary(t, "javac", "/usr/bin/javac")
	p := jdbcProgram{java: needBinary(t, "java", "/usr/bin/java"), dir: t.TempDir(), class: class}
	for _, jar := range []string{"/usr/share/java/postgresql.jar", "/usr/share/java/postgresql-jdbc4.jar"} {
		if _, err := os.Stat(jar); err == nil {
			p.jar = jar
			break
		}
	}
	if p.jar == "" {
		clustertest.SkipOrFail(t, fmt.Errorf("pgJDBC is not installed (Debian libpostgresql-jdbc-java)"))
	}
	if err := os.WriteFile(filepath.Join(p.dir, class+".java"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, 2*time.Minute, p.dir, javac, "-cp", p.jar, class+".java"); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	return p
}

// jdbcURL is the JDBC URL of a postgres:// DSN (its host, port and
// database; user postgres, no TLS).
func jdbcURL(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("jdbc:postgresql://%s%s?user=postgres&sslmode=disable", u.Host, u.Path)
}

// run runs the program with args (bounded: 3 minutes).
func (p jdbcProgram) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, 3*time.Minute, p.dir, p.java, append([]string{"-cp", p.jar + ":.", p.class}, args...)...)
}

const jdbcSource = `
import java.sql.*;

public class ProxyTest {
    static void check(boolean ok, String what) { if (!ok) throw new RuntimeException("check failed: " + what); }

    public static void main(String[] args) throws Exception {
        long k0 = %dL, k1 = %dL, k2 = %dL, other = %dL;
        try (Connection c = DriverManager.getConnection(args[0])) {
            c.setAutoCommit(true);
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO accounts (aid, abalance, note) VALUES (?, 0, 'jdbc')")) {
                for (long k : new long[]{k0, k1, k2, other}) { ps.setLong(1, k); check(ps.executeUpdate() == 1, "insert"); }
            }
            // 10 executions: server-side prepare kicks in at the 5th (prepareThreshold).
            try (PreparedStatement sel = c.prepareStatement("SELECT abalance, note FROM accounts WHERE aid = ?");
                 PreparedStatement upd = c.prepareStatement("UPDATE accounts SET abalance = abalance + 1 WHERE aid = ? AND abalance = ?")) {
                for (int i = 0; i < 10; i++) {
                    for (long k : new long[]{k0, k1, k2, other}) {
                        upd.setLong(1, k); upd.setInt(2, i);
                        check(upd.executeUpdate() == 1, "update " + k + " at " + i);
                        sel.setLong(1, k);
                        try (ResultSet rs = sel.executeQuery()) {
                            check(rs.next(), "row");
                            check(rs.getInt(1) == i + 1, "balance " + rs.getInt(1));
                            check("jdbc".equals(rs.getString(2)), "note");
                        }
                    }
                }
            }
            // Transactions: commit, rollback, cross-shard refusal.
            c.setAutoCommit(false);
            try (PreparedStatement upd = c.prepareStatement("UPDATE accounts SET note = ? WHERE aid = ?")) {
                for (int i = 0; i < 7; i++) {
                    upd.setString(1, "tx" + i); upd.setLong(2, k0); upd.executeUpdate();
                    upd.setString(1, "tx" + i); upd.setLong(2, k1); upd.executeUpdate();
                    c.commit();
                }
                upd.setString(1, "rolled back"); upd.setLong(2, k0); upd.executeUpdate();
                c.rollback();
                upd.setString(1, "a"); upd.setLong(2, k2); upd.executeUpdate();
                try {
                    upd.setString(1, "b"); upd.setLong(2, other); upd.executeUpdate();
                    throw new RuntimeException("cross-shard statement was not refused");
                } catch (SQLException e) {
                    check("0A000".equals(e.getSQLState()), "sqlstate " + e.getSQLState() + ": " + e.getMessage());
                }
                c.rollback();
            }
            // Batches inside a transaction.
            try (PreparedStatement ins = c.prepareStatement("UPDATE accounts SET abalance = abalance + 100 WHERE aid = ?")) {
                for (long k : new long[]{k0, k1, k2}) { ins.setLong(1, k); ins.addBatch(); }
                int[] n = ins.executeBatch();
                check(n.length == 3 && n[0] == 1 && n[1] == 1 && n[2] == 1, "batch");
            }
            c.commit();
            c.setAutoCommit(true);
            try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery(
                    "SELECT note, abalance FROM accounts WHERE aid = " + k0)) {
                check(rs.next(), "row k0");
                check("tx6".equals(rs.getString(1)), "note " + rs.getString(1));
                check(rs.getInt(2) == 110, "balance k0 " + rs.getInt(2));
            }
            try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SHOW extra_float_digits")) {
                check(rs.next() && "3".equals(rs.getString(1)), "extra_float_digits from JDBC's startup packet");
            }
        }
        System.out.println("OK");
    }
}
`

// TestNodePostgres runs node-postgres (pg@8) with named prepared
// statements ({name: ...}), which PgBouncer 1.18 alone breaks.
func TestNodePostgres(t *testing.T) {
	node := needBinary(t, "node", "/usr/bin/node")
	npm := needBinary(t, "npm", "/usr/bin/npm")
	// Install pg@8 once per machine into a cache directory.
	h := sha256.Sum256([]byte("pg@8"))
	modDir := filepath.Join(os.TempDir(), "pgshard-node-pg-"+hex.EncodeToString(h[:4]))
	if _, err := os.Stat(filepath.Join(modDir, "node_modules", "pg", "package.json")); err != nil {
		tmp, err := os.MkdirTemp(os.TempDir(), "pgshard-node-pg-tmp-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		out, err := run(t, 3*time.Minute, tmp, npm, "install", "--no-audit", "--no-fund", "--no-save", "pg@8")
		if err != nil {
			clustertest.SkipOrFail(t, fmt.Errorf("npm install pg@8: %v\n%s", err, out))
		}
		if err := os.Rename(tmp, modDir); err != nil && !os.IsExist(err) {
			if _, serr := os.Stat(filepath.Join(modDir, "node_modules", "pg")); serr != nil {
				t.Fatal(err)
			}
		}
	}
	e := startProxy(t)
	k := e.db.keysOn(1, 2, 6_500_000)
	other := e.db.keysOn(2, 1, 6_500_000)[0]
	script := filepath.Join(modDir, fmt.Sprintf("t%d.js", time.Now().UnixNano()))
	if err := os.WriteFile(script, []byte(fmt.Sprintf(nodeSource, k[0], k[1], other)), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(script)
	out, err := run(t, 2*time.Minute, modDir, node, script, e.dsn)
	if err != nil || !strings.HasSuffix(strings.TrimSpace(out), "OK") {
		t.Fatalf("node: %v\n%s", err, out)
	}
}

const nodeSource = `
const { Client } = require('pg');
const [k0, k1, other] = [%d, %d, %d];
function check(ok, what) { if (!ok) throw new Error('check failed: ' + what); }
(async () => {
  const c = new Client({ connectionString: process.argv[2] });
  await c.connect();
  for (const k of [k0, k1, other]) {
    await c.query({ name: 'ins', text: "INSERT INTO accounts (aid, abalance, note) VALUES ($1, 0, 'node')", values: [k] });
  }
  for (let i = 0; i < 10; i++) {
    for (const k of [k0, k1, other]) {
      const u = await c.query({ name: 'upd', text: 'UPDATE accounts SET abalance = abalance + 1 WHERE aid = $1', values: [k] });
      check(u.rowCount === 1, 'update');
      const r = await c.query({ name: 'ver', text: 'SELECT abalance, note FROM accounts WHERE aid = $1', values: [k] });
      check(r.rows.length === 1 && r.rows[0].abalance === i + 1 && r.rows[0].note === 'node', JSON.stringify(r.rows));
    }
  }
  await c.query('BEGIN');
  await c.query({ name: 'upd', text: 'UPDATE accounts SET abalance = abalance + 1 WHERE aid = $1', values: [k0] });
  await c.query({ name: 'upd', text: 'UPDATE accounts SET abalance = abalance + 1 WHERE aid = $1', values: [k1] });
  await c.query('COMMIT');
  await c.query('BEGIN');
  await c.query({ name: 'upd', text: 'UPDATE accounts SET abalance = abalance + 1 WHERE aid = $1', values: [k0] });
  try {
    await c.query({ name: 'upd', text: 'UPDATE accounts SET abalance = abalance + 1 WHERE aid = $1', values: [other] });
    throw new Error('cross-shard statement was not refused');
  } catch (e) {
    check(e.code === '0A000', 'code ' + e.code + ' ' + e.message);
  }
  await c.query('ROLLBACK');
  const r = await c.query({ name: 'ver', text: 'SELECT abalance, note FROM accounts WHERE aid = $1', values: [k0] });
  check(r.rows[0].abalance === 11, 'after commit/rollback: ' + r.rows[0].abalance);
  await c.end();
  console.log('OK');
})().catch((e) => { console.error(e); process.exit(1); });
`
