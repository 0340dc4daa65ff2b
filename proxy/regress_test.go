package proxy_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
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
