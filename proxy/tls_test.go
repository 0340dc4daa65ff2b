package proxy_test

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// tlsFiles makes a CA and a server certificate for 127.0.0.1/localhost.
func tlsFiles(t *testing.T) cluster.TLSFiles {
	t.Helper()
	f, err := cluster.WriteTLSFiles(clustertest.Dir(t))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func withTLS(mode proxy.TLSMode, f cluster.TLSFiles) envOpt {
	return func(c *proxy.Config) { c.TLS = proxy.TLSConfig{Mode: mode, CertFile: f.Cert, KeyFile: f.Key} }
}

// dsnWith returns dsn with its query parameters replaced by kv pairs.
func dsnWith(t *testing.T, dsn string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// TestTLSClients: with proxy.tls.mode require, psql (sslmode=verify-full),
// psycopg 3 and pgx connect over TLS 1.2+ verified against the CA and run
// keyed statements; a plain-text client is refused with 28000; a client
// trusting another CA refuses the proxy; allow admits both.
func TestTLSClients(t *testing.T) {
	f := tlsFiles(t)
	e := startProxy(t, withTLS(proxy.TLSRequire, f))
	ctx := ctxT(t, 2*time.Minute)
	k := e.db.keysOn(1, 1, 34_000_000)[0]
	verify := dsnWith(t, e.dsn, "sslmode", "verify-full", "sslrootcert", f.CA)

	t.Run("pgx", func(t *testing.T) {
		conn, err := pgx.Connect(ctx, verify)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		tc, ok := conn.PgConn().Conn().(*tls.Conn)
		if !ok {
			t.Fatalf("pgx connection is a %T, not TLS", conn.PgConn().Conn())
		}
		if v := tc.ConnectionState().Version; v < tls.VersionTLS12 {
			t.Fatalf("TLS version %x", v)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO accounts (aid) VALUES ($1) ON CONFLICT DO NOTHING", k); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k).Scan(&n); err != nil || n != 1 {
			t.Fatalf("keyed read over TLS: %d %v", n, err)
		}
	})
	t.Run("psql verify-full", func(t *testing.T) {
		psql := needBinary(t, "psql", "/usr/bin/psql")
		for _, host := range []string{"127.0.0.1", "localhost"} {
			u, _ := url.Parse(verify)
			u.Host = strings.Replace(u.Host, "127.0.0.1", host, 1)
			out, err := run(t, time.Minute, "", psql, "-X", "-A", "-t", u.String(), "-c", `\conninfo`,
				"-c", fmt.Sprintf("SELECT count(*) FROM accounts WHERE aid = %d", k))
			if err != nil {
				t.Fatalf("psql over TLS to %s: %v\n%s", host, err, out)
			}
			if !strings.Contains(out, "SSL connection (protocol: TLSv1.") || !strings.Contains(out, "\n1\n") && !strings.HasSuffix(strings.TrimSpace(out), "1") {
				t.Fatalf("psql to %s:\n%s", host, out)
			}
		}
	})
	t.Run("psycopg", func(t *testing.T) {
		py := needBinary(t, "python3", "/usr/bin/python3")
		if out, err := run(t, time.Minute, "", py, "-c", "import psycopg"); err != nil {
			clustertest.SkipOrFail(t, fmt.Errorf("python3-psycopg is not installed: %s", out))
		}
		script := fmt.Sprintf(`
import psycopg, sys
with psycopg.connect(%q) as conn:
    assert conn.pgconn.ssl_in_use, "not TLS"
    n = conn.execute("SELECT count(*) FROM accounts WHERE aid = %%s", (%d,)).fetchone()[0]
    assert n == 1, n
    print("ok")
`, verify, k)
		out, err := run(t, time.Minute, "", py, "-c", script)
		if err != nil || !strings.Contains(out, "ok") {
			t.Fatalf("psycopg over TLS: %v\n%s\n%s", err, out, script)
		}
	})
	t.Run("plain text refused", func(t *testing.T) {
		_, err := pgx.Connect(ctx, e.dsn) // sslmode=disable
		if pgCode(err) != "28000" {
			t.Fatalf("plain text with tls.mode require: %v, want 28000", err)
		}
	})
	t.Run("another CA", func(t *testing.T) {
		other := tlsFiles(t)
		_, err := pgx.Connect(ctx, dsnWith(t, e.dsn, "sslmode", "verify-full", "sslrootcert", other.CA))
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("a client trusting another CA connected: %v", err)
		}
	})
	t.Run("allow", func(t *testing.T) {
		ea := startProxy(t, withTLS(proxy.TLSAllow, f))
		for _, dsn := range []string{ea.dsn, dsnWith(t, ea.dsn, "sslmode", "verify-full", "sslrootcert", f.CA)} {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatalf("%s: %v", dsn, err)
			}
			_, isTLS := conn.PgConn().Conn().(*tls.Conn)
			if isTLS != strings.Contains(dsn, "verify-full") {
				t.Fatalf("%s: TLS %v", dsn, isTLS)
			}
			conn.Close(ctx)
		}
	})
	t.Run("disable", func(t *testing.T) {
		ed := startProxy(t)
		_, err := pgx.Connect(ctx, dsnWith(t, ed.dsn, "sslmode", "require"))
		if err == nil || !strings.Contains(err.Error(), "refused TLS") && !strings.Contains(err.Error(), "server refused") {
			t.Fatalf("sslmode=require against tls.mode disable: %v", err)
		}
	})
}

// TestTLSBackends: per-shard sslmode in the map's DSNs — the proxy reaches
// shards whose PostgreSQL has TLS on with sslmode=verify-full against the
// CA (pg_stat_ssl says so), and a DSN trusting another CA cannot connect.
func TestTLSBackends(t *testing.T) {
	f := tlsFiles(t)
	c := clustertest.Private(t, cluster.Spec{Shards: 2, PgBouncer: true, Settings: f.PostgresSettings()})
	d, err := newTestDB(c, "tlsbackend")
	if err != nil {
		t.Fatal(err)
	}
	secure := func(ca string) *testDB {
		m := d.m.Clone()
		for i := range m.Shards {
			m.Shards[i].DSN = dsnWith(t, m.Shards[i].DSN, "sslmode", "verify-full", "sslrootcert", ca)
		}
		if err := m.Validate(); err != nil {
			t.Fatal(err)
		}
		return &testDB{c: c, name: d.name, m: m}
	}
	sd := secure(f.CA)
	e := startProxyFor(t, sd, direct())
	ctx := ctxT(t, 2*time.Minute)
	conn := e.connect(t)
	for _, sh := range sd.m.Shards {
		var ssl bool
		var version string
		q := fmt.Sprintf("/* pgshard:shard=%s */ SELECT ssl, coalesce(version, '') FROM pg_stat_ssl WHERE pid = pg_backend_pid()", sh.Name)
		if err := conn.QueryRow(ctx, q).Scan(&ssl, &version); err != nil || !ssl || !strings.HasPrefix(version, "TLSv1.") {
			t.Fatalf("%s: the proxy's backend connection: ssl %v %q %v", sh.Name, ssl, version, err)
		}
	}
	// A map whose DSNs trust another CA: the shards are unreachable.
	bad := secure(tlsFiles(t).CA)
	an, err := newRouter(bad.m)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := proxy.New(proxy.Config{Map: bad.m, Analyzer: an, Users: []proxy.User{{Name: "postgres", Trust: true}}, VerifyIdentity: true, ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	down, err := srv.Verify(ctx)
	if err != nil || len(down) != 2 {
		t.Fatalf("Verify with an untrusted server certificate: down %v, %v (want both shards unreachable)", down, err)
	}
}

func newRouter(m *shardmap.Map) (*route.Table, error) {
	return route.New(m, testSchema(), route.Options{})
}
