package proxy_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestSetConfigSession: SELECT set_config(name, value, false) sent alone
// — pg_dump's first line, an application setting its tenant for row-level
// security with a parameter — is a session setting the proxy keeps, as it
// keeps SET: the client gets Postgres's own answer (the row, its column
// and type, in text and binary, the ParameterStatus of a reported
// setting, Postgres's error for a bad value), the setting holds in every
// later transaction, and the session is not pinned: a statement for a
// key of another shard than the default one still runs (it pinned the
// session to the default shard before). Constant ones in a query string
// with other statements run with them on a server session of that
// query's, and are kept after it. A NULL (a reset to the session's
// start) and one inside a transaction block pin, as a SET there does,
// with Postgres's meaning (rolled back with the transaction), until
// DISCARD ALL. The
// transcript through the proxy (pooled and direct) must equal the one of
// the shard that holds the keys.
func TestSetConfigSession(t *testing.T) {
	const shard = 2 // not the default shard
	forEachPath(t, func(t *testing.T, via string, e *proxyEnv) {
		ctx := ctxT(t, 2*time.Minute)
		keys := e.db.keysOn(shard, 2, 53_000_000)
		setup := e.connect(t)
		for i, k := range keys {
			if _, err := setup.Exec(ctx, "INSERT INTO accounts (aid, abalance, note) VALUES ($1, $2, 'setcfg') ON CONFLICT (aid) DO UPDATE SET abalance = EXCLUDED.abalance, note = EXCLUDED.note", k, 10+i); err != nil {
				t.Fatal(err)
			}
		}
		transcript := func(dsn string, proxied bool) []string {
			conn, err := pgx.Connect(ctx, dsn+"&application_name=setcfg")
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var out []string
			add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
			result := func(what string, rr *pgconn.ResultReader) {
				r := rr.Read()
				var cols []string
				for _, f := range r.FieldDescriptions {
					cols = append(cols, fmt.Sprintf("%s:%d:%d", f.Name, f.DataTypeOID, f.Format))
				}
				var pe *pgconn.PgError
				if errors.As(r.Err, &pe) {
					add("%s: ERROR %s %s", what, pe.Code, pe.Message)
					return
				} else if r.Err != nil {
					t.Fatalf("%s: %v", what, r.Err)
				}
				add("%s: %v %q %s", what, cols, r.Rows, r.CommandTag)
			}
			simple := func(q string) {
				rs, err := conn.PgConn().Exec(ctx, q).ReadAll()
				var pe *pgconn.PgError
				switch {
				case errors.As(err, &pe):
					add("%s: ERROR %s %s", q, pe.Code, pe.Message)
				case err != nil:
					t.Fatalf("%s: %v", q, err)
				default:
					for _, r := range rs {
						add("%s: %q %s", q, r.Rows, r.CommandTag)
					}
				}
			}
			params := func(q string, args []string, oids []uint32, resultFormat int16) {
				var vals [][]byte
				for _, a := range args {
					if a == "NULL" {
						vals = append(vals, nil)
					} else {
						vals = append(vals, []byte(a))
					}
				}
				result(fmt.Sprintf("%s %q", q, args), conn.PgConn().ExecParams(ctx, q, vals, oids, nil, []int16{resultFormat}))
			}
			balance := func(what string) {
				for _, k := range keys {
					var v int
					err := conn.QueryRow(ctx, "SELECT abalance FROM accounts WHERE aid = $1", k).Scan(&v)
					add("%s: balance %d %s", what, v, pgCode(err)) // pgx words an error at Parse and at Describe apart
				}
			}
			batch := func(what string, qs ...[]any) {
				b := &pgx.Batch{}
				for _, q := range qs {
					b.Queue(q[0].(string), q[1:]...)
				}
				br := conn.SendBatch(ctx, b)
				for range qs {
					var v string
					err := br.QueryRow().Scan(&v)
					add("%s: %s %s", what, v, pgCode(err))
				}
				add("%s: close %s", what, pgCode(br.Close()))
			}
			report := func(name string) { add("ParameterStatus %s=%s", name, conn.PgConn().ParameterStatus(name)) }

			simple("SELECT pg_catalog.set_config('search_path', '', false)")
			simple("SHOW search_path")
			balance("search_path ''") // accounts is then not found: Postgres's own error
			simple("SELECT set_config('search_path', 'public', false)")
			balance("search_path public")
			params("SELECT set_config('app.tenant', $1, false) AS tenant", []string{"acme"}, nil, 0)
			params("SELECT current_setting('app.tenant')", nil, nil, 0)
			params("SELECT set_config('statement_timeout', $1::text, false)", []string{"4000"}, nil, 1)
			simple("SHOW statement_timeout")
			balance("after set_config in extended")
			params("SELECT set_config('application_name', $1, false)", []string{"setcfg-two"}, nil, 0)
			report("application_name")
			simple("SELECT set_config('work_mem', 'bogus', false)")
			simple("SELECT set_config('app.tenant', $1, false)") // a query string has no $1
			params("SELECT set_config('work_mem', $1, false)", []string{"bogus"}, nil, 0)
			simple("SELECT set_config('DateStyle', 'German', 'off') AS ds")
			report("DateStyle")
			simple("SELECT DATE '2026-12-06'")
			simple("SELECT set_config('app.a', 'x', false); SELECT set_config('app.b', 'y', false); SELECT current_setting('app.a') || current_setting('app.b')")
			simple("SELECT set_config('app.c', 'z', false); SELECT set_config('work_mem', 'bogus', false)")
			simple("SELECT current_setting('app.c', true) IS NULL")
			sd, err := conn.Prepare(ctx, "sc", "SELECT set_config('app.prepared', $1, false)")
			if err != nil {
				t.Fatal(err)
			}
			add("prepared: params %v, field %s:%d", sd.ParamOIDs, sd.Fields[0].Name, sd.Fields[0].DataTypeOID)
			for _, v := range []string{"one", "two"} {
				var got string
				err := conn.QueryRow(ctx, "sc", v).Scan(&got)
				add("prepared %s: %s %v", v, got, err)
			}
			// In one pipeline with other statements, before or after them.
			read := "SELECT abalance::text FROM accounts WHERE aid = $1"
			batch("batch set first", []any{"SELECT set_config('app.batch', $1, false)", "one"}, []any{read, keys[0]},
				[]any{"SELECT current_setting('app.batch')"})
			batch("batch set last", []any{read, keys[1]}, []any{"SELECT set_config('app.batch', $1, false)", "two"})
			batch("batch bad value", []any{"SELECT set_config('work_mem', $1, false)", "bogus"}, []any{read, keys[0]})
			simple("SELECT current_setting('app.batch')")
			// Ahead of a read of every shard, in a query string or a
			// pipeline, as a session SET there (its rows are all on the
			// keys' shard, so one Postgres counts the same).
			count := "SELECT count(*)::text FROM accounts WHERE note = 'setcfg'"
			batch("batch set_config, read every shard", []any{"SELECT set_config('app.fan', 'f0', false)"}, []any{count})
			batch("batch set_config $1, read every shard", []any{"SELECT set_config('app.fan', $1, false)", "f1"}, []any{count})
			batch("batch SET, read every shard", []any{"SET work_mem = '5MB'"}, []any{count})
			batch("batch bad set_config, read every shard", []any{"SELECT set_config('work_mem', 'bogus', false)"}, []any{count})
			simple("SELECT current_setting('app.fan') || ' ' || current_setting('work_mem')")
			simple("SELECT set_config('app.fan', 'f2', false) AS \"a col\"; " + count)
			simple("SELECT set_config('work_mem', 'bogus', false); " + count)
			simple("SELECT current_setting('app.fan')")
			balance("after the session settings")
			if proxied {
				if p := e.srv.PinnedSessions(); len(p) != 0 {
					t.Errorf("%s: the session is pinned after set_config(..., false) alone: %+v", via, p)
				}
			}
			// A NULL resets the setting to the session's start (pins
			// through the proxy: only the client's own server session
			// knows that value).
			params("SELECT set_config('application_name', $1, false)", []string{"NULL"}, nil, 0)
			report("application_name")
			params("SELECT set_config('statement_timeout', $1, false)", []string{"NULL"}, []uint32{25}, 0)
			simple("SHOW statement_timeout")
			// Inside a transaction block (pins through the proxy):
			// rolled back with it, as in Postgres.
			simple("BEGIN")
			simple("SELECT set_config('app.txn', 'rolled back', false)")
			simple("ROLLBACK")
			simple("SELECT current_setting('app.txn', true)")
			simple("BEGIN")
			simple("SELECT set_config('app.txn', 'committed', false)")
			simple("COMMIT")
			simple("SELECT current_setting('app.txn', true)")
			simple("DISCARD ALL") // ends the pin
			balance("after DISCARD ALL")
			return out
		}
		want := transcript(e.db.m.Shards[shard].DSN, false)
		got := transcript(e.dsn, true)
		for _, d := range differingLines(got, want) {
			t.Errorf("through pgshard (%s): %s\n  Postgres: %s", via, d.got, d.want)
		}
	})
}
