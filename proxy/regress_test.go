package proxy_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/proxy"
)

// TestDescribeFlushThenBind: a statement described (Parse, Describe,
// Flush) before its key is known must not tie the implicit transaction to
// the shard that described it: the Bind/Execute/Sync that follows runs on
// its key's shard, as Postgres would run it (found by TestStress: 0A000
// "earlier statements of the same pipeline ran on shard ...").
func TestDescribeFlushThenBind(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []envOpt
		set  string
	}{
		{"pgbouncer", nil, ""},
		{"pgbouncer with a setting", nil, "SET statement_timeout = '55s'"},
		{"direct", []envOpt{direct()}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startProxy(t, tc.opts...)
			c := dialRaw(t, e.addr)
			c.startup(e.db.name)
			if tc.set != "" {
				c.fe.Send(&pgproto3.Query{String: tc.set})
				c.flush()
				c.until('Z', "")
			}
			for round := 0; round < 2; round++ {
				for s := range e.db.m.Shards {
					k := e.db.keysOn(s, 1, 8_500_000)[0]
					what := fmt.Sprintf("round %d, key %d on shard %d", round, k, s)
					c.fe.Send(&pgproto3.Parse{Query: "SELECT abalance FROM accounts WHERE aid = $1", ParameterOIDs: []uint32{20}})
					c.fe.Send(&pgproto3.Describe{ObjectType: 'S'})
					c.fe.Send(&pgproto3.Flush{})
					c.flush()
					c.until('T', what+": Parse, Describe, Flush")
					c.fe.Send(&pgproto3.Bind{Parameters: [][]byte{fmt.Append(nil, k)}})
					c.fe.Send(&pgproto3.Execute{})
					c.fe.Send(&pgproto3.Sync{})
					c.flush()
					c.until('C', what+": Bind, Execute")
					if st := c.until('Z', what+": Sync").(*pgproto3.ReadyForQuery).TxStatus; st != 'I' {
						t.Fatalf("%s: ReadyForQuery %c", what, st)
					}
				}
			}
		})
	}
}

// TestSessionSetAfterRoutedStatement: a session SET after a routed
// statement of the same pipeline is checked on the backend that statement
// took, never by waiting for another connection while holding one (with
// pool_size 1 the probe waited for its own session's connection, or for
// connections held by other transactions, PoolTimeout per shard, then
// failed with 53300; found by TestStress).
func TestSessionSetAfterRoutedStatement(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []envOpt
	}{{"pgbouncer", nil}, {"direct", []envOpt{direct()}}} {
		t.Run(tc.name, func(t *testing.T) {
			e := startProxy(t, append(tc.opts, poolSize(1), func(c *proxy.Config) { c.PoolTimeout = time.Second })...)
			ctx := ctxT(t, time.Minute)
			pc := e.connect(t).PgConn()
			n := len(e.db.m.Shards)
			keys := make([]int64, n)
			others := make([]*pgconn.PgConn, n)
			for s := range keys {
				keys[s] = e.db.keysOn(s, 1, 8_600_000)[0]
				others[s] = e.connect(t).PgConn()
			}
			for s := range keys {
				// Every other shard's only connection is in a transaction.
				for j, o := range others {
					if j != s {
						q := fmt.Sprintf("BEGIN; UPDATE accounts SET note = note WHERE aid = %d", keys[j])
						if _, err := o.Exec(ctx, q).ReadAll(); err != nil {
							t.Fatal(err)
						}
					}
				}
				set := fmt.Sprintf("SET statement_timeout = '%ds'", 30+s)
				p := pc.StartPipeline(ctx)
				p.SendQueryParams(updSQL, textArgs([]any{keys[s], 1}), nil, nil, nil)
				p.SendQueryParams(set, nil, nil, nil, nil)
				p.SendPipelineSync()
				if err := p.Flush(); err != nil {
					t.Fatal(err)
				}
				for j := 0; j < 3; j++ {
					res, err := p.GetResults()
					if rr, ok := res.(*pgconn.ResultReader); ok {
						_, err = rr.Close()
					}
					if err != nil {
						t.Fatalf("pipeline UPDATE on shard %d, %s: %v", s, set, err)
					}
				}
				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
				for j, o := range others {
					if j != s {
						if _, err := o.Exec(ctx, "ROLLBACK").ReadAll(); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			if w := metricSum(t, e.srv, "pgshard_proxy_pool_waits_total"); w != 0 {
				t.Fatalf("%v waits for a backend connection", w)
			}
			res, err := pc.Exec(ctx, "SHOW statement_timeout").ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := string(res[0].Rows[0][0]), fmt.Sprintf("%ds", 30+n-1); got != want {
				t.Fatalf("statement_timeout %s, want %s (the last SET)", got, want)
			}
		})
	}
}

// TestQueryAfterFailedExtendedMessages: a Query that follows failed
// extended-protocol messages without a Sync is ignored, as Postgres
// ignores every message up to Sync: the client gets the error and, at
// its Sync, ReadyForQuery. The proxy used to send the Query to the
// backend, which ignored it, and then waited for its answer forever,
// holding the backend connection, without reading the client's Sync.
func TestQueryAfterFailedExtendedMessages(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []envOpt
	}{{"pgbouncer", nil}, {"direct", []envOpt{direct()}}} {
		t.Run(tc.name, func(t *testing.T) {
			e := startProxy(t, tc.opts...)
			c := dialRaw(t, e.addr)
			c.startup(e.db.name)
			k := e.db.keysOn(0, 1, 8_800_000)[0]
			c.fe.Send(&pgproto3.Query{String: fmt.Sprintf("INSERT INTO accounts (aid) VALUES (%d) ON CONFLICT DO NOTHING", k)})
			c.flush()
			c.until('Z', "INSERT")
			c.fe.Send(&pgproto3.Parse{Query: "SELECT 1 / (aid - aid) FROM accounts WHERE aid = $1", ParameterOIDs: []uint32{20}})
			c.fe.Send(&pgproto3.Bind{Parameters: [][]byte{fmt.Append(nil, k)}})
			c.fe.Send(&pgproto3.Execute{})
			c.fe.Send(&pgproto3.Query{String: "SELECT 2"})
			c.fe.Send(&pgproto3.Sync{})
			c.flush()
			var got []string
			for done := false; !done; {
				m, err := c.fe.Receive()
				if err != nil {
					t.Fatalf("after %q: %v", got, err)
				}
				switch m := m.(type) {
				case *pgproto3.ErrorResponse:
					got = append(got, "E"+m.Code)
				case *pgproto3.ReadyForQuery:
					got = append(got, "Z"+string(m.TxStatus))
					done = true
				default:
					got = append(got, fmt.Sprintf("%T", m)[len("*pgproto3."):])
				}
			}
			if want := []string{"ParseComplete", "BindComplete", "E22012", "ZI"}; !slices.Equal(got, want) {
				t.Fatalf("replies %q, want %q", got, want)
			}
			c.fe.Send(&pgproto3.Query{String: "SELECT 3"})
			c.flush()
			c.until('C', "SELECT 3")
			c.until('Z', "SELECT 3")
		})
	}
}

func (c *rawClient) flush() {
	c.t.Helper()
	if err := c.fe.Flush(); err != nil {
		c.t.Fatal(err)
	}
}

// until reads up to a message of type typ ('T' RowDescription, 'C'
// CommandComplete, 'Z' ReadyForQuery); an ErrorResponse fails the test.
func (c *rawClient) until(typ byte, what string) pgproto3.BackendMessage {
	c.t.Helper()
	for {
		m, err := c.fe.Receive()
		if err != nil {
			c.t.Fatalf("%s: %v", what, err)
		}
		switch m := m.(type) {
		case *pgproto3.ErrorResponse:
			c.t.Fatalf("%s: error %s: %s", what, m.Code, m.Message)
		case *pgproto3.RowDescription:
			if typ == 'T' {
				return m
			}
		case *pgproto3.CommandComplete:
			if typ == 'C' {
				return m
			}
		case *pgproto3.ReadyForQuery:
			if typ == 'Z' {
				return m
			}
		}
	}
}

// TestKeylessStatementBeforeKeyedInPipeline: a key-less statement ahead of
// a keyed one in the same pipeline (the store's set_config(…, true) before
// its commit, in one pgx batch) runs on the keyed statement's shard, so the
// implicit transaction stays on one shard and the setting applies to the
// keyed statement; it was sent to the default shard and the keyed
// statement refused as cross-shard for keys of every other shard.
func TestKeylessStatementBeforeKeyedInPipeline(t *testing.T) {
	t.Parallel()
	e := startProxy(t, direct())
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := ctxT(t, time.Minute)
			conn := e.connect(t, func(c *pgx.ConnConfig) { c.DefaultQueryExecMode = mode })
			for s := range e.db.m.Shards {
				key := e.db.keysOn(s, 1, 8_700_000)[0]
				if _, err := conn.Exec(ctx, "INSERT INTO accounts (aid) VALUES ($1) ON CONFLICT DO NOTHING", key); err != nil {
					t.Fatal(err)
				}
				b := &pgx.Batch{}
				b.Queue("SELECT set_config('statement_timeout', $1::text, true)", "1ms")
				b.Queue("SELECT pg_sleep(0.2) FROM accounts WHERE aid = $1", key)
				br := conn.SendBatch(ctx, b)
				var got string
				if err := br.QueryRow().Scan(&got); err != nil {
					t.Fatalf("shard %d: set_config: %v", s, err)
				}
				_, err := br.Exec()
				if code := pgCode(err); code != "57014" {
					t.Fatalf("shard %d: the keyed statement after set_config: %v (%s), want 57014: the timeout applies on its shard", s, err, code)
				}
				if err := br.Close(); err != nil && pgCode(err) != "57014" {
					t.Fatal(err)
				}
				// The setting was transaction-local: gone now.
				var st string
				if err := conn.QueryRow(ctx, "SELECT current_setting('statement_timeout') FROM accounts WHERE aid = $1", key).Scan(&st); err != nil || st == "1ms" {
					t.Fatalf("shard %d: statement_timeout after the batch: %q, %v", s, st, err)
				}
			}
		})
	}
}

// TestFunctionCallAfterExtendedMessages: a FunctionCall (refused by the
// proxy) after extended-protocol messages without a Sync is answered after
// their replies, in order, as Postgres would (it used to be answered at
// once, ahead of them), and is ignored when they failed.
func TestFunctionCallAfterExtendedMessages(t *testing.T) {
	e := startProxy(t, direct())
	c := dialRaw(t, e.addr)
	c.startup(e.db.name)
	k := e.db.keysOn(1, 1, 8_900_000)[0]
	c.fe.Send(&pgproto3.Query{String: fmt.Sprintf("INSERT INTO accounts (aid) VALUES (%d) ON CONFLICT DO NOTHING", k)})
	c.flush()
	c.until('Z', "INSERT")
	// replies reads up to the n-th ReadyForQuery.
	replies := func(n int) []string {
		var got []string
		for n > 0 {
			m, err := c.fe.Receive()
			if err != nil {
				t.Fatalf("after %q: %v", got, err)
			}
			switch m := m.(type) {
			case *pgproto3.ErrorResponse:
				got = append(got, "E"+m.Code)
			case *pgproto3.ReadyForQuery:
				got = append(got, "Z"+string(m.TxStatus))
				n--
			default:
				got = append(got, fmt.Sprintf("%T", m)[len("*pgproto3."):])
			}
		}
		return got
	}
	send := func(divisor string) {
		c.fe.Send(&pgproto3.Parse{Query: "SELECT 1 / " + divisor + " FROM accounts WHERE aid = $1", ParameterOIDs: []uint32{20}})
		c.fe.Send(&pgproto3.Bind{Parameters: [][]byte{fmt.Append(nil, k)}})
		c.fe.Send(&pgproto3.Execute{})
		c.fe.Send(&pgproto3.FunctionCall{Function: 1598}) // random()
		c.fe.Send(&pgproto3.Sync{})
		c.fe.Send(&pgproto3.Query{String: "SELECT 3"})
		c.flush()
	}
	send("1")
	if got, want := replies(3), []string{"ParseComplete", "BindComplete", "DataRow", "CommandComplete", "E0A000", "ZI", "ZI",
		"RowDescription", "DataRow", "CommandComplete", "ZI"}; !slices.Equal(got, want) {
		t.Fatalf("replies %q, want %q", got, want)
	}
	send("(aid - aid)")
	if got, want := replies(2), []string{"ParseComplete", "BindComplete", "E22012", "ZI",
		"RowDescription", "DataRow", "CommandComplete", "ZI"}; !slices.Equal(got, want) {
		t.Fatalf("after a failure: replies %q, want %q", got, want)
	}
}
