package proxy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestTwoStageInTransaction: a read answered in two stages (a window over
// every shard's rows) inside a transaction block gets one database's
// replies when the block reads committed data statement by statement and
// has written and set nothing yet — its stages run outside the block —
// in both protocols, after a keyed read, and through a cursor; an error
// of the read fails the block (ReadyForQuery E, as on one database). It
// is refused with 0A000 (and the block fails) when the block wrote, set
// something with SET LOCAL, or runs under REPEATABLE READ — asked in its
// BEGIN or the session's default — where the stages would not read what
// the block reads.
func TestTwoStageInTransaction(t *testing.T) {
	for i, tc := range wireSetups {
		t.Run(tc.name, func(t *testing.T) {
			_, env, px, ref := startWirePair(t, tc, 8_400_000+int64(i)*10_000)
			read := fmt.Sprintf("SELECT aid, rank() OVER (ORDER BY abalance, aid) AS r FROM accounts WHERE aid BETWEEN %d AND %d ORDER BY aid", env.lo, env.hi)
			failing := fmt.Sprintf("SELECT aid, rank() OVER (ORDER BY abalance / (abalance - abalance)) FROM accounts WHERE aid BETWEEN %d AND %d", env.lo, env.hi)
			q := simpleQuery
			ext := func(sql string) []pgproto3.FrontendMessage {
				return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}}
			}
			keyed := fmt.Sprintf("SELECT note FROM accounts WHERE aid = %d", env.keyed)
			for _, c := range []struct {
				name  string
				steps [][]pgproto3.FrontendMessage
			}{
				{"simple", [][]pgproto3.FrontendMessage{q("BEGIN"), q(read), q(read), q("COMMIT")}},
				{"extended, after a keyed read", [][]pgproto3.FrontendMessage{q("BEGIN"), ext(keyed), ext(read), ext(keyed), q("COMMIT")}},
				{"BEGIN READ COMMITTED", [][]pgproto3.FrontendMessage{q("BEGIN ISOLATION LEVEL READ COMMITTED"), ext(read), q("COMMIT")}},
				{"through a cursor", [][]pgproto3.FrontendMessage{q("BEGIN"), q("DECLARE c CURSOR FOR " + read), q("FETCH 3 FROM c"), q("FETCH ALL FROM c"), q("COMMIT")}},
			} {
				got := sameReplies(t, px, ref, c.name, c.steps)
				if !slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, "RowDescription aid") }) {
					t.Errorf("%s: no rows described in %q", c.name, got)
				}
			}
			// An error of the read fails the block (one database describes
			// the columns before it; the proxy's answer is the error alone).
			replies(t, px, q("BEGIN"))
			if got := replies(t, px, q(failing)); !slices.Contains(got, `Error ERROR 22012 "division by zero" detail="" hint=""`) || got[len(got)-1] != "ReadyForQuery E" {
				t.Errorf("a read in two stages that fails in a block: %q, want 22012 and ReadyForQuery E", got)
			}
			if got := replies(t, px, q(keyed)); !slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, "Error ERROR 25P02") }) {
				t.Errorf("a statement after it: %q, want 25P02", got)
			}
			replies(t, px, q("ROLLBACK"))
			for _, c := range []struct {
				name   string
				before []string
			}{
				{"after a write", []string{"BEGIN", fmt.Sprintf("UPDATE accounts SET note = note WHERE aid = %d", env.keyed)}},
				{"after SET LOCAL", []string{"BEGIN", "SET LOCAL work_mem = '9MB'"}},
				{"REPEATABLE READ", []string{"BEGIN ISOLATION LEVEL REPEATABLE READ"}},
				{"the session's default REPEATABLE READ", []string{"SET default_transaction_isolation = 'repeatable read'", "BEGIN"}},
			} {
				for _, sql := range c.before {
					replies(t, px, q(sql))
				}
				got := replies(t, px, q(read))
				if !slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, "Error ERROR 0A000") }) || got[len(got)-1] != "ReadyForQuery E" {
					t.Errorf("%s: %q, want 0A000 and the block failed", c.name, got)
				}
				replies(t, px, q("ROLLBACK"))
				replies(t, px, q("RESET default_transaction_isolation"))
			}
		})
	}
}
