package proxy_test

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestStalledPipeline: a client that sends part of a pipeline and no
// Sync or Flush, then waits, gets what Postgres sends it: the answers up
// to the first error (Postgres sends them at the error without waiting
// for Sync — libpq's pipeline mode relies on it, psycopg's
// test_pipeline_communicate_uniqviol hung through pgshard), and a later
// Sync ends the pipeline as directly; with no error, the answers (which
// Postgres would hold until Sync) are the same in the same order. Each
// case is compared with a direct connection to a shard, through PgBouncer
// and straight to Postgres.
func TestStalledPipeline(t *testing.T) {
	key := "stall-1"
	ins := func(v string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{
			&pgproto3.Bind{PreparedStatement: "ins", Parameters: [][]byte{[]byte(key), []byte(v)}},
			&pgproto3.Execute{},
		}
	}
	prep := []pgproto3.FrontendMessage{
		&pgproto3.Query{String: "DROP TABLE IF EXISTS stall_uniq; CREATE TABLE stall_uniq (k text, v int PRIMARY KEY)"},
		&pgproto3.Close{ObjectType: 'S', Name: "ins"},
		&pgproto3.Parse{Name: "ins", Query: "INSERT INTO stall_uniq VALUES ($1, $2) RETURNING v"},
		&pgproto3.Sync{},
	}
	cases := []struct {
		name    string
		begin   bool
		stalled []pgproto3.FrontendMessage // sent without Sync or Flush
		failing bool                       // read up to its ErrorResponse
	}{
		{"error", false, slices.Concat(ins("1"), ins("2"), ins("1"), ins("3")), true},
		{"error-in-block", true, slices.Concat(ins("4"), ins("4"), ins("5")), true},
		{"no-error", false, slices.Concat(ins("6"), ins("7")), false},
		{"no-error-in-block", true, slices.Concat(ins("8"), ins("9")), false},
	}
	forEachPath(t, func(t *testing.T, via string, e *proxyEnv) {
		cfg, err := pgconn.ParseConfig(e.db.m.Shards[0].DSN)
		if err != nil {
			t.Fatal(err)
		}
		px, ref := dialRaw(t, e.addr), dialRaw(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
		px.startup(e.db.name)
		ref.startup(e.db.name)
		// run plays one case on c: the stalled part, what comes before its
		// Sync, then Sync (and COMMIT in a block), as text.
		run := func(c *rawClient, tc int) []string {
			k := cases[tc]
			replies(t, c, prep) // a NOTICE on one side: the other's table
			var out []string
			if k.begin {
				out = append(out, replies(t, c, simpleQuery("BEGIN"))...)
			}
			c.sendAll(k.stalled)
			if k.failing {
				for {
					m, err := c.fe.Receive()
					if err != nil {
						t.Fatalf("%s: waiting for the stalled pipeline's error: %v", k.name, err)
					}
					out = append(out, replyText(m))
					if _, ok := m.(*pgproto3.ErrorResponse); ok {
						break
					}
				}
			} else {
				time.Sleep(200 * time.Millisecond) // a client that pauses before its Sync
			}
			out = append(out, replies(t, c, []pgproto3.FrontendMessage{&pgproto3.Sync{}})...)
			if k.begin {
				out = append(out, replies(t, c, simpleQuery("COMMIT"))...)
			}
			return append(out, replies(t, c, simpleQuery("SELECT string_agg(v::text, ',' ORDER BY v) FROM stall_uniq"))...)
		}
		for i, k := range cases {
			t.Run(k.name, func(t *testing.T) {
				want, got := run(ref, i), run(px, i)
				if !slices.Equal(got, want) {
					t.Errorf("through pgshard (%s):\n got %s\nwant %s (directly)", via, strings.Join(got, " | "), strings.Join(want, " | "))
				}
			})
		}
	})
}
