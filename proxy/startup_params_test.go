package proxy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestStartupParametersAsPostgres: the settings a startup packet gives a
// session are what Postgres itself would make of them — compared, case by
// case, with a direct connection to a shard: a client that sets no
// application_name (or sets it empty) sees Postgres's default, not a
// name of pgshard's, and a parameter overrides the same setting given in
// "options" (Postgres applies the options first). Both through PgBouncer
// and straight to Postgres; through PgBouncer, which carries no empty
// application_name, such a client is told and reads "pgshard proxy" — the
// same on every connection, never another client's name.
func TestStartupParametersAsPostgres(t *testing.T) {
	cases := []struct {
		name   string
		params map[string]string
		noName bool // no application_name, or an empty one
	}{
		{"nothing", nil, true},
		{"empty-application-name", map[string]string{"application_name": ""}, true},
		{"application-name", map[string]string{"application_name": "mine"}, false},
		{"parameter-over-options", map[string]string{"options": "-c work_mem=5MB -c application_name=from-options", "work_mem": "7MB", "application_name": "from-parameter"}, false},
		{"options-only", map[string]string{"options": "-c work_mem=5MB --application_name=from-options"}, false},
	}
	forEachPath(t, func(t *testing.T, via string, e *proxyEnv) {
		ctx := ctxT(t, time.Minute)
		// seen is what a session of conn is told and reads.
		seen := func(t *testing.T, conn *pgx.Conn) [3]string {
			t.Helper()
			var app, mem string
			if err := conn.QueryRow(ctx, "SELECT current_setting('application_name'), current_setting('work_mem')").Scan(&app, &mem); err != nil {
				t.Fatal(err)
			}
			return [3]string{conn.PgConn().ParameterStatus("application_name"), app, mem}
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				set := func(cfg *pgx.ConnConfig) {
					for k, v := range c.params {
						cfg.RuntimeParams[k] = v
					}
				}
				cfg, err := pgx.ParseConfig(e.db.m.Shards[0].DSN)
				if err != nil {
					t.Fatal(err)
				}
				set(cfg)
				dc, err := pgx.ConnectConfig(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer dc.Close(ctx)
				want := seen(t, dc)
				if via == "pgbouncer" && c.noName {
					// PgBouncer 1.18 carries no empty name (dial.go):
					// told and read alike, another client's never.
					want[0], want[1] = "pgshard proxy", "pgshard proxy"
				}
				if got := seen(t, e.connect(t, set)); got != want {
					t.Fatalf("through pgshard: told application_name %q, current_setting %q, work_mem %q; directly: %q, %q, %q",
						got[0], got[1], got[2], want[0], want[1], want[2])
				}
			})
		}
	})
}

// TestStartupStatusesAsPostgres: the ParameterStatus values a client is
// told at startup for the parameters PgBouncer tracks are Postgres's
// canonical spellings of what it sent ("euc-jp" is EUC_JP, "iso, dmy" is
// "ISO, DMY"), as a direct connection reports them — PgBouncer echoes a
// client's own spelling, and drivers compare against these (psycopg's
// connection encoding).
func TestStartupStatusesAsPostgres(t *testing.T) {
	params := map[string]string{"client_encoding": "euc-jp", "DateStyle": "iso, dmy", "TimeZone": "utc", "standard_conforming_strings": "ON"}
	forEachPath(t, func(t *testing.T, via string, e *proxyEnv) {
		ctx := ctxT(t, time.Minute)
		told := func(dsn string) map[string]string {
			cfg, err := pgx.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range params {
				cfg.RuntimeParams[k] = v
			}
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			out := map[string]string{}
			for k := range params {
				out[k] = conn.PgConn().ParameterStatus(k)
			}
			return out
		}
		want, got := told(e.db.m.Shards[0].DSN), told(e.dsn)
		for k := range params {
			if got[k] != want[k] {
				t.Errorf("%s (%s): pgshard reports %q, Postgres %q", k, via, got[k], want[k])
			}
		}
	})
}

// TestSetReportsAsPostgres: after each session SET of a parameter Postgres
// reports (GUC_REPORT), the client holds the value a direct connection
// holds after the same SETs — also when a SET returns a parameter to a
// value the pooled backend that checked it already had (the backend then
// reports nothing: the proxy reports the change itself). SET SESSION
// CHARACTERISTICS AS TRANSACTION is default_transaction_<mode>.
func TestSetReportsAsPostgres(t *testing.T) {
	steps := []string{
		"SET default_transaction_read_only = on",
		"SET default_transaction_read_only = off",
		"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
		"SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE",
		"SET TimeZone = 'Europe/Paris'",
		"SET TimeZone = 'UTC'",
		"SET DateStyle = 'German'",
		"SET DateStyle = 'ISO, MDY'",
		"SET IntervalStyle = 'iso_8601'",
		"SET IntervalStyle = 'postgres'",
		"SET application_name = 'set-reports'",
		"SET application_name = 'setrep'",
	}
	watched := []string{"default_transaction_read_only", "TimeZone", "DateStyle", "IntervalStyle", "application_name"}
	forEachPath(t, func(t *testing.T, via string, e *proxyEnv) {
		ctx := ctxT(t, time.Minute)
		told := func(dsn string) []string {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var out []string
			for _, s := range steps {
				if _, err := conn.Exec(ctx, s); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
				var vals []string
				for _, k := range watched {
					vals = append(vals, k+"="+conn.PgConn().ParameterStatus(k))
				}
				out = append(out, strings.Join(vals, " "))
			}
			return out
		}
		dsn := func(base string) string { return base + "&application_name=setrep" }
		want, got := told(dsn(e.db.m.Shards[0].DSN)), told(dsn(e.dsn))
		for i, s := range steps {
			if got[i] != want[i] {
				t.Errorf("%s (%s): pgshard reports %s\n  Postgres: %s", s, via, got[i], want[i])
			}
		}
	})
}

// TestSetsInOneQueryStringAsPostgres: several session SETs, RESETs and
// set_config calls in one query string (or one pipeline) each apply on
// top of the one before, as on one server — the settings every later statement runs
// with, what SHOW says and what the client was told (ParameterStatus)
// are what a direct connection has after the same strings (each SET was
// applied alone over the session's settings before the string: only the
// last one stayed).
func TestSetsInOneQueryStringAsPostgres(t *testing.T) {
	steps := []string{
		"SET DateStyle = 'German'; SET TimeZone = 'Asia/Kathmandu'; SET IntervalStyle = 'sql_standard'",
		"SET extra_float_digits = 0; RESET TimeZone; SELECT set_config('statement_timeout', '9s', false)",
		"SET TimeZone = 'America/St_Johns'; SET DateStyle = 'SQL, DMY'; RESET ALL; SET IntervalStyle = 'iso_8601'",
		"SET application_name = 'a1'; SET TimeZone = 'Europe/Paris'; SET application_name = 'a2'",
		// one pipeline (extended protocol, one Sync)
		"pipe:SET DateStyle = 'Postgres, DMY'; SET TimeZone = 'Pacific/Chatham'; SET IntervalStyle = 'postgres_verbose'",
	}
	watched := []string{"TimeZone", "DateStyle", "IntervalStyle", "application_name"}
	const probe = "SELECT current_setting('DateStyle'), current_setting('TimeZone'), current_setting('IntervalStyle'), " +
		"current_setting('extra_float_digits'), current_setting('statement_timeout'), " +
		"TIMESTAMPTZ '2024-03-01 12:00:00+00', DATE '2024-03-09', INTERVAL '1 day 2 hours', 1::float8 / 3"
	forEachPath(t, func(t *testing.T, via string, e *proxyEnv) {
		ctx := ctxT(t, time.Minute)
		states := func(dsn string) []string {
			conn, err := pgconn.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var out []string
			for _, s := range steps {
				if pipe, ok := strings.CutPrefix(s, "pipe:"); ok {
					b := &pgconn.Batch{}
					for _, q := range strings.Split(pipe, "; ") {
						b.ExecParams(q, nil, nil, nil, nil)
					}
					if _, err := conn.ExecBatch(ctx, b).ReadAll(); err != nil {
						t.Fatalf("%s: %v", s, err)
					}
				} else if _, err := conn.Exec(ctx, s).ReadAll(); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
				var vals []string
				for _, k := range watched {
					vals = append(vals, k+"="+conn.ParameterStatus(k))
				}
				rs, err := conn.Exec(ctx, probe).ReadAll()
				if err != nil {
					t.Fatalf("%s: %v", probe, err)
				}
				for _, v := range rs[0].Rows[0] {
					vals = append(vals, string(v))
				}
				out = append(out, strings.Join(vals, " | "))
			}
			return out
		}
		// an application_name of its own: through PgBouncer a client
		// without one reads "pgshard proxy" (TestStartupParametersAsPostgres)
		dsn := func(base string) string { return base + "&application_name=one" }
		want, got := states(dsn(e.db.m.Shards[0].DSN)), states(dsn(e.dsn))
		for i, s := range steps {
			if got[i] != want[i] {
				t.Errorf("after %q (%s):\n  pgshard:  %s\n  Postgres: %s", s, via, got[i], want[i])
			}
		}
	})
}
