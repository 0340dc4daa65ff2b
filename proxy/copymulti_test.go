package proxy_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestCopyInQueryString: a COPY FROM STDIN inside a query string of several
// statements runs as on one database: the copy, then the string's other
// statements in the same implicit transaction, one ReadyForQuery — through
// PgBouncer (with and without the per-transaction settings preamble),
// directly, pinned and in session pooling. It used to fail with Postgres's
// "unexpected message type 0x51 during COPY from stdin" (the preamble's
// COMMIT was sent during the copy).
func TestCopyInQueryString(t *testing.T) {
	withSettings := func(c *pgx.ConnConfig) { c.RuntimeParams["work_mem"] = "7MB" }
	cases := []struct {
		name string
		opts []envOpt
		mut  []func(*pgx.ConnConfig)
		pin  bool // pin the session first (a temp table)
	}{
		{name: "pooler"},
		{name: "pooler-settings", mut: []func(*pgx.ConnConfig){withSettings}},
		{name: "direct", opts: []envOpt{direct()}, mut: []func(*pgx.ConnConfig){withSettings}},
		{name: "pinned", mut: []func(*pgx.ConnConfig){withSettings}, pin: true},
		{name: "session", opts: []envOpt{sessionMode()}, mut: []func(*pgx.ConnConfig){withSettings}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := startProxy(t, c.opts...)
			ctx := ctxT(t, time.Minute)
			conn := e.connect(t, c.mut...)
			tbl := "copy_multi_" + strings.ReplaceAll(c.name, "-", "_")
			if _, err := conn.Exec(ctx, fmt.Sprintf("DROP TABLE IF EXISTS %[1]s; CREATE TABLE %[1]s (a int)", tbl)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = execDirect(context.Background(), e.db.m.Shards[0].DSN, "DROP TABLE IF EXISTS "+tbl) })
			if c.pin {
				if _, err := conn.Exec(ctx, "CREATE TEMP TABLE copy_pin (a int)"); err != nil {
					t.Fatal(err)
				}
			}
			count := func(want int) {
				t.Helper()
				var n int
				if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil || n != want {
					t.Fatalf("count = %d, %v; want %d", n, err, want)
				}
			}
			steps := []struct {
				sql, tag, code string
				rows           int // rows the table has afterwards
			}{
				{sql: "COPY %s (a) FROM STDIN; INSERT INTO %[1]s VALUES (100)", tag: "INSERT 0 1", rows: 4},
				{sql: "INSERT INTO %s VALUES (200); COPY %[1]s (a) FROM STDIN; SELECT current_setting('work_mem')", tag: "SELECT 1", rows: 8},
				// One implicit transaction: the error rolls the copy back.
				{sql: "COPY %s (a) FROM STDIN; SELECT 1/0", code: "22012", rows: 8},
				{sql: "COPY %s (a) FROM STDIN; SELECT 1; SELECT 2", tag: "SELECT 1", rows: 11},
			}
			for _, st := range steps {
				q := fmt.Sprintf(st.sql, tbl)
				tag, err := conn.PgConn().CopyFrom(ctx, strings.NewReader("1\n2\n3\n"), q)
				if st.code != "" {
					if pgCode(err) != st.code {
						t.Fatalf("%s: %v, want %s", q, err, st.code)
					}
				} else if err != nil || tag.String() != st.tag {
					t.Fatalf("%s: tag %q, %v; want %q", q, tag.String(), err, st.tag)
				}
				count(st.rows)
			}
			var one int
			if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
				t.Fatalf("after the copies: %d, %v", one, err)
			}
		})
	}
	t.Run("psql", func(t *testing.T) {
		psql := needBinary(t, "psql", "/usr/bin/psql")
		e := startProxy(t)
		ctx := ctxT(t, time.Minute)
		conn := e.connect(t)
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS copy_multi_psql; CREATE TABLE copy_multi_psql (a int)"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = execDirect(context.Background(), e.db.m.Shards[0].DSN, "DROP TABLE IF EXISTS copy_multi_psql")
		})
		cmd := exec.CommandContext(ctx, psql, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", e.dsn+"&options=-c%20work_mem%3D7MB", "-c",
			"COPY copy_multi_psql (a) FROM STDIN; SELECT count(*) FROM copy_multi_psql")
		cmd.Stdin = strings.NewReader("1\n2\n")
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "2" {
			t.Fatalf("psql: %v %q; want 2", err, out)
		}
	})
	// Two COPYs and a read in one string, with the preamble through
	// PgBouncer: each copy is fed in turn, one ReadyForQuery at the end.
	t.Run("two-copies", func(t *testing.T) {
		e := startProxy(t)
		ctx := ctxT(t, time.Minute)
		cfg, err := pgconn.ParseConfig(e.dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeParams["work_mem"] = "7MB"
		pc, err := pgconn.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := pc.Exec(ctx, "DROP TABLE IF EXISTS copy_multi_two; CREATE TABLE copy_multi_two (a int)").Close(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = execDirect(context.Background(), e.dsn, "DROP TABLE IF EXISTS copy_multi_two") })
		hc, err := pc.Hijack()
		if err != nil {
			t.Fatal(err)
		}
		defer hc.Conn.Close()
		_ = hc.Conn.SetDeadline(time.Now().Add(30 * time.Second))
		fe := hc.Frontend
		fe.Send(&pgproto3.Query{String: "COPY copy_multi_two (a) FROM STDIN; COPY copy_multi_two (a) FROM STDIN; SELECT count(*) FROM copy_multi_two"})
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
		var copies int
		var got []string
		for done := false; !done; {
			msg, err := fe.Receive()
			if err != nil {
				t.Fatalf("after %v: %v", got, err)
			}
			switch m := msg.(type) {
			case *pgproto3.CopyInResponse:
				copies++
				fe.Send(&pgproto3.CopyData{Data: []byte(fmt.Sprintf("%d\n%d\n", copies, copies))})
				fe.Send(&pgproto3.CopyDone{})
				if err := fe.Flush(); err != nil {
					t.Fatal(err)
				}
			case *pgproto3.CommandComplete:
				got = append(got, string(m.CommandTag))
			case *pgproto3.DataRow:
				got = append(got, string(m.Values[0]))
			case *pgproto3.ErrorResponse:
				t.Fatalf("error after %v: %s %s", got, m.Code, m.Message)
			case *pgproto3.ReadyForQuery:
				if m.TxStatus != 'I' {
					t.Errorf("ReadyForQuery %c, want I", m.TxStatus)
				}
				done = true
			}
		}
		if want := "COPY 2,COPY 2,4,SELECT 1"; copies != 2 || strings.Join(got, ",") != want {
			t.Fatalf("copies %d, answers %v; want 2, %s", copies, got, want)
		}
		fe.Send(&pgproto3.Terminate{})
		_ = fe.Flush()
	})
}
