package proxy_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/proxy"
)

// TestDefaultTransactionModes: a session's default isolation level and
// deferrable (SET default_transaction_isolation / _deferrable, or startup
// parameters) are the level and deferrable of its transactions, as on
// one database — in an implicit transaction, in a BEGIN that names none,
// and not where the BEGIN or a SET TRANSACTION names its own. Through
// PgBouncer the proxy carries them per transaction (a BEGIN or SET
// TRANSACTION naming them: the preamble is a query, too late for a
// level), so a serializable session never runs READ COMMITTED; every
// case is compared with a direct connection to a shard.
func TestDefaultTransactionModes(t *testing.T) {
	// Each step one statement, as psql sends them; a SHOW's value is
	// recorded.
	steps := []string{
		"SHOW transaction_isolation",
		"SHOW transaction_deferrable",
		"BEGIN", "SHOW transaction_isolation", "SHOW transaction_deferrable", "COMMIT",
		"BEGIN ISOLATION LEVEL READ COMMITTED", "SHOW transaction_isolation", "SHOW transaction_deferrable", "COMMIT",
		"START TRANSACTION NOT DEFERRABLE", "SHOW transaction_deferrable", "SHOW transaction_isolation", "COMMIT",
		"BEGIN", "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", "SHOW transaction_isolation", "COMMIT",
		"BEGIN", "SET LOCAL work_mem = '6MB'", "SHOW transaction_isolation", "ROLLBACK",
	}
	sessions := []struct {
		name  string
		setup []string
		param map[string]string
	}{
		{"set-serializable", []string{"SET default_transaction_isolation = 'serializable'", "SET default_transaction_read_only = on", "SET default_transaction_deferrable = on"}, nil},
		{"set-repeatable-read", []string{"SET default_transaction_isolation TO \"repeatable read\"", "SET work_mem = '5MB'"}, nil},
		{"startup-serializable", nil, map[string]string{"default_transaction_isolation": "serializable"}},
		{"reset", []string{"SET default_transaction_isolation = 'serializable'", "RESET default_transaction_isolation"}, nil},
	}
	forEachPath(t, func(t *testing.T, via string, e *proxyEnv) {
		ctx := ctxT(t, 2*time.Minute)
		// run runs the steps on conn: each SHOW's value, or the error.
		run := func(t *testing.T, conn *pgx.Conn) []string {
			var out []string
			for _, st := range steps {
				res, err := conn.PgConn().Exec(ctx, st).ReadAll()
				switch {
				case err != nil:
					out = append(out, st+": "+err.Error())
				case len(res) == 1 && len(res[0].Rows) == 1:
					out = append(out, st+": "+string(res[0].Rows[0][0]))
				}
			}
			return out
		}
		for _, sess := range sessions {
			t.Run(sess.name, func(t *testing.T) {
				open := func(dsn string) *pgx.Conn {
					cfg, err := pgx.ParseConfig(dsn)
					if err != nil {
						t.Fatal(err)
					}
					for k, v := range sess.param {
						cfg.RuntimeParams[k] = v
					}
					conn, err := pgx.ConnectConfig(ctx, cfg)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { conn.Close(ctx) })
					for _, q := range sess.setup {
						if _, err := conn.Exec(ctx, q); err != nil {
							t.Fatalf("%s: %v", q, err)
						}
					}
					return conn
				}
				want := run(t, open(e.db.m.Shards[0].DSN))
				got := run(t, open(e.dsn))
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("through pgshard (%s):\n got %v\nwant %v (directly)", via, got, want)
				}
			})
		}
	})
}

// TestUnknownDatabaseRefused: a dbname the proxy does not serve is
// refused after login with Postgres's own error (FATAL 3D000), so a
// mistyped name is never silently the sharded store; the shards' own
// name is served by default, and "*" accepts any name.
func TestUnknownDatabaseRefused(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	e := startProxy(t)
	connectTo := func(e *proxyEnv, dbname string) error {
		cfg, err := pgx.ParseConfig(e.dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Database = dbname
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			var one int
			err = conn.QueryRow(ctx, "SELECT 1").Scan(&one)
			conn.Close(ctx)
		}
		return err
	}
	if err := connectTo(e, e.db.name); err != nil {
		t.Fatalf("the shards' own database: %v", err)
	}
	err := connectTo(e, "no_such_database_here")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "3D000" || pe.Severity != "FATAL" || pe.Message != `database "no_such_database_here" does not exist` {
		t.Fatalf("an unknown database: got %v, want FATAL 3D000 as Postgres's", err)
	}
	if n := metricSum(t, e.srv, "pgshard_proxy_client_refused_total", "reason", "no_database"); n != 1 {
		t.Errorf("refusals counted as no_database: %v, want 1", n)
	}
	// A wrong password is refused before the name is looked at: a client
	// that may not log in learns nothing of the names served.
	pw := startProxy(t, func(c *proxy.Config) { c.Users = []proxy.User{{Name: "postgres", Password: "right"}} })
	pw.dsn = strings.Replace(pw.dsn, "postgres@", "postgres:wrong@", 1)
	err = connectTo(pw, "no_such_database_here")
	if !errors.As(err, &pe) || pe.Code != "28P01" {
		t.Fatalf("an unknown database with a wrong password: got %v, want 28P01 first", err)
	}
	any := startProxy(t, func(c *proxy.Config) { c.Databases = []string{"*"} })
	if err := connectTo(any, "any_name_at_all"); err != nil {
		t.Fatalf(`with "*", any name: %v`, err)
	}
}
