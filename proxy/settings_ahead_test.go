package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestSettingsAheadOfEveryDestination: a transaction-local setting
// (set_config(..., true) or SET LOCAL) ahead of another statement in the
// same implicit transaction — one pipeline before its Sync, or one query
// string — holds for that statement whatever it routes to (a key, every
// shard's read, an unsharded table, any shard, DDL on every shard, a DO
// block, a function the proxy cannot analyze), or is refused with 0A000;
// it is never silently dropped, and it does not reach the next
// transaction. Each statement fails unless it sees the setting.
func TestSettingsAheadOfEveryDestination(t *testing.T) {
	const chk = `1/(coalesce(current_setting('myapp.tag', true), '') = 'v')::int`
	type dest struct {
		name, stmt   string
		setting, val string
		refused      bool // refused with 0A000: the setting cannot be carried
	}
	tag := func(name, stmt string) dest { return dest{name: name, stmt: stmt, setting: "myapp.tag", val: "v"} }
	setup := func(t *testing.T, e *proxyEnv) []dest {
		ctx := ctxT(t, time.Minute)
		for i, sh := range e.db.m.Shards {
			k := e.db.keysOn(i, 1, 9_400_000)[0]
			if err := execDirect(ctx, sh.DSN, fmt.Sprintf(`INSERT INTO accounts (aid) VALUES (%d) ON CONFLICT DO NOTHING;
				CREATE OR REPLACE FUNCTION settings_chk() RETURNS int LANGUAGE sql VOLATILE AS $$SELECT %s$$`, k, chk)); err != nil {
				t.Fatal(err)
			}
		}
		// An unsharded table: the proxy creates it on the default shard.
		if err := execDirect(ctx, e.dsn, "DROP TABLE IF EXISTS settings_u; CREATE TABLE settings_u (a int); INSERT INTO settings_u VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		k := e.db.keysOn(1, 1, 9_400_000)[0]
		return []dest{
			tag("keyed", fmt.Sprintf("SELECT %s FROM accounts WHERE aid = %d", chk, k)),
			tag("keyed-write", fmt.Sprintf("UPDATE accounts SET abalance = %s WHERE aid = %d", chk, k)),
			tag("fanout-read", fmt.Sprintf("SELECT count(*) FROM accounts WHERE %s = 1", chk)),
			tag("unsharded-read", "SELECT "+chk+" FROM settings_u LIMIT 1"),
			tag("unsharded-write", "INSERT INTO settings_u VALUES ("+chk+")"),
			tag("any-shard", "SELECT "+chk),
			tag("current-setting", "SELECT current_setting('myapp.tag')"),
			tag("do-block", "DO $$BEGIN PERFORM "+chk+"; END$$"),
			tag("function", "SELECT settings_chk()"),
			// Each shard runs the DDL in an implicit transaction of its own.
			{name: "ddl-every-shard", setting: "check_function_bodies", val: "off", refused: true,
				stmt: "CREATE OR REPLACE FUNCTION settings_ddl_f() RETURNS int LANGUAGE sql AS 'SELECT count(*)::int FROM settings_no_such_table'"},
		}
	}
	// In session pooling on several shards the session is pinned to the
	// default shard: statements of other shards (the key is on shard1) and
	// of every shard are refused there, settings or not.
	pinnedRefuses := map[string]bool{"keyed": true, "keyed-write": true, "fanout-read": true, "ddl-every-shard": true}
	modes := []struct {
		name    string
		opts    []envOpt
		refuses map[string]bool
		wrap    bool // a startup setting: each transaction is wrapped in BEGIN, preamble, COMMIT through PgBouncer
	}{
		{"pooler", []envOpt{poolSize(1)}, nil, false},
		{"pooler-preamble", []envOpt{poolSize(1)}, nil, true},
		{"direct", []envOpt{direct(), poolSize(1)}, nil, false},
		{"session", []envOpt{sessionMode()}, pinnedRefuses, true},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := startProxy(t, m.opts...)
			dests := setup(t, e)
			conn := e.connect(t, func(c *pgx.ConnConfig) {
				if m.wrap {
					c.RuntimeParams["work_mem"] = "7MB"
				}
			})
			for _, d := range dests {
				sets := map[string]string{
					"set_config": fmt.Sprintf("SELECT set_config('%s', '%s', true)", d.setting, d.val),
					"set-local":  fmt.Sprintf("SET LOCAL %s = '%s'", d.setting, d.val),
				}
				for _, sn := range []string{"set_config", "set-local"} {
					for _, how := range []string{"pipeline", "string"} {
						name := d.name + "/" + sn + "/" + how
						t.Run(name, func(t *testing.T) {
							ctx := ctxT(t, time.Minute)
							set := sets[sn]
							var err error
							if how == "pipeline" {
								b := &pgx.Batch{}
								b.Queue(set)
								b.Queue(d.stmt)
								err = conn.SendBatch(ctx, b).Close()
							} else {
								_, err = conn.PgConn().Exec(ctx, set+"; "+d.stmt).ReadAll()
							}
							switch {
							case m.refuses[d.name]:
								if pgCode(err) != "0A000" {
									t.Errorf("%s; %s: %v, want 0A000 (another shard than the pinned one)", set, d.stmt, err)
								}
							case d.refused:
								if pgCode(err) != "0A000" || !strings.Contains(err.Error(), "transaction-local settings") {
									t.Errorf("%s; %s: %v, want the 0A000 refusal of settings ahead of it", set, d.stmt, err)
								}
							case err != nil:
								t.Errorf("%s; %s: %v (the setting did not hold)", set, d.stmt, err)
							}
							var v string
							if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT coalesce(current_setting('%s', true), '')", d.setting)).Scan(&v); err != nil || v == d.val {
								t.Errorf("the next transaction sees %s = %q (%v): the setting leaked", d.setting, v, err)
							}
						})
					}
				}
			}
			// The refusal's hint: a session SET holds for DDL on every shard.
			ctx := ctxT(t, time.Minute)
			ddl := dests[len(dests)-1]
			if _, err := conn.Exec(ctx, "SET check_function_bodies = off"); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, ddl.stmt); err != nil {
				t.Errorf("%s after a session SET: %v", ddl.stmt, err)
			}
			for _, q := range []string{"RESET check_function_bodies", "DROP FUNCTION IF EXISTS settings_ddl_f()"} {
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Error(err)
				}
			}
			_ = execDirect(context.Background(), e.dsn, "DROP TABLE IF EXISTS settings_u")
		})
	}
}

// TestSessionSetAheadOfFanRead: a session SET ahead of a read of every
// shard in one query string ("SET statement_timeout = 5000; SELECT
// count(*) FROM ...", as scripts send with psql -c) holds for the read on
// every shard and for the session afterwards — not if the string failed
// (its SET's value or its read), as on one database; replies compared
// with one Postgres, through PgBouncer and directly. It was refused
// (0A000) before.
func TestSessionSetAheadOfFanRead(t *testing.T) {
	for i, ws := range wireSetups {
		t.Run(ws.name, func(t *testing.T) {
			_, env, px, ref := startWirePair(t, ws, 7_600_000+int64(i)*10_000)
			where := fmt.Sprintf(" FROM accounts WHERE aid BETWEEN %d AND %d", env.lo, env.hi)
			q := simpleQuery
			steps := [][]pgproto3.FrontendMessage{
				q("SET work_mem = '9MB'; SELECT count(*), current_setting('work_mem')" + where),
				q("SHOW work_mem"),
				q("SET statement_timeout = 5000; SET work_mem = 'bogus'; SELECT count(*)" + where),
				q("SHOW statement_timeout"), q("SHOW work_mem"),
				q("SET search_path = public, pg_catalog; SET enable_seqscan TO off; SELECT count(*), current_setting('search_path'), current_setting('enable_seqscan')" + where),
				q("SHOW search_path"), q("SHOW enable_seqscan"),
				q("SET work_mem = '11MB'; SELECT aid, 1 / (abalance - abalance)" + where + " ORDER BY aid"),
				q("SHOW work_mem"),
				q("SET LOCAL work_mem = '12MB'; SET statement_timeout = '7s'; SELECT max(aid), current_setting('work_mem')" + where),
				q("SHOW statement_timeout"), q("SHOW work_mem"),
			}
			sameReplies(t, px, ref, "session SETs ahead of reads of every shard", steps)
		})
	}
}

// TestSettingsAheadOfFanAndKeyedHint: a batch of a session SET, a read of
// every shard and a keyed statement cannot run (the SET pins the batch to
// one server session, where the read of every shard cannot run); the
// refusal's hint says how to send it, and sent that way — the SET first,
// on its own — the rest runs with the setting.
func TestSettingsAheadOfFanAndKeyedHint(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t)
	k1 := e.db.keysOn(1, 1, 54_000_000)[0]
	b := &pgx.Batch{}
	b.Queue("SET work_mem = '6MB'")
	b.Queue("SELECT count(*) FROM accounts")
	b.Queue("SELECT abalance FROM accounts WHERE aid = $1", k1)
	err := conn.SendBatch(ctx, b).Close()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "0A000" || !strings.Contains(pe.Hint, "of its own first") {
		t.Fatalf("batch of SET, a read of every shard and a keyed read: %v (%+v), want 0A000 with the hint to send the SET first", err, pe)
	}
	if _, err := conn.Exec(ctx, "SET work_mem = '6MB'"); err != nil {
		t.Fatal(err)
	}
	b = &pgx.Batch{}
	b.Queue("SELECT count(*), current_setting('work_mem') FROM accounts")
	b.Queue("SELECT current_setting('work_mem'), abalance FROM accounts WHERE aid = $1", k1)
	br := conn.SendBatch(ctx, b)
	var n int64
	var wm string
	if err := br.QueryRow().Scan(&n, &wm); err != nil || wm != "6MB" {
		t.Fatalf("read of every shard after the SET: %v, work_mem %q", err, wm)
	}
	var bal *int32
	if err := br.QueryRow().Scan(&wm, &bal); err != nil && !errors.Is(err, pgx.ErrNoRows) || err == nil && wm != "6MB" {
		t.Fatalf("keyed read after the SET: %v, work_mem %q", err, wm)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
}
