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
// has written nothing yet — its stages run outside the block, each
// setting first what the block set for itself (SET LOCAL,
// set_config(..., true)) — in both protocols, after a keyed read, and
// through a cursor; so do settings that lead it in its implicit
// transaction (a pipeline's or a query string's), and a failing one
// fails it as on one database; an error of the read fails the block
// (ReadyForQuery E, as on one database). It is refused with 0A000 (and
// the block fails) when the block wrote or runs under REPEATABLE READ —
// asked in its BEGIN or the session's default — where the stages would
// not read what the block reads.
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
			floats := fmt.Sprintf("SELECT aid, aid::float8 / 3 AS f, rank() OVER (ORDER BY abalance, aid) AS r FROM accounts WHERE aid BETWEEN %d AND %d ORDER BY aid", env.lo, env.hi)
			for _, c := range []struct {
				name  string
				steps [][]pgproto3.FrontendMessage
			}{
				{"simple", [][]pgproto3.FrontendMessage{q("BEGIN"), q(read), q(read), q("COMMIT")}},
				{"extended, after a keyed read", [][]pgproto3.FrontendMessage{q("BEGIN"), ext(keyed), ext(read), ext(keyed), q("COMMIT")}},
				{"BEGIN READ COMMITTED", [][]pgproto3.FrontendMessage{q("BEGIN ISOLATION LEVEL READ COMMITTED"), ext(read), q("COMMIT")}},
				{"through a cursor", [][]pgproto3.FrontendMessage{q("BEGIN"), q("DECLARE c CURSOR FOR " + read), q("FETCH 3 FROM c"), q("FETCH ALL FROM c"), q("COMMIT")}},
				// What the block set for itself, each stage sets first: the
				// floats print with 15 digits, not 17, on one database.
				{"after SET LOCAL", [][]pgproto3.FrontendMessage{q("BEGIN"), q("SET LOCAL extra_float_digits = 0"), q(floats), ext(floats), q("COMMIT")}},
				{"after SET LOCAL and set_config in a query string", [][]pgproto3.FrontendMessage{q("BEGIN"), q(keyed),
					q("SET LOCAL extra_float_digits = 0; SELECT set_config('work_mem', '9MB', true)"), ext(floats), q("COMMIT")}},
				// Settings that lead it in its implicit transaction run
				// ahead of each stage; a session SET is kept after it.
				{"behind SET LOCAL in its pipeline", [][]pgproto3.FrontendMessage{append([]pgproto3.FrontendMessage{
					&pgproto3.Parse{Query: "SET LOCAL extra_float_digits = 0"}, &pgproto3.Bind{}, &pgproto3.Execute{}}, ext(floats)...)}},
				{"behind SET LOCAL in its query string", [][]pgproto3.FrontendMessage{q("SET LOCAL extra_float_digits = 0; " + floats), q(floats)}},
				{"behind a session SET in its query string", [][]pgproto3.FrontendMessage{q("SET extra_float_digits = 0; " + floats), q(floats), q("RESET extra_float_digits")}},
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
			// A setting that fails ahead of it fails its implicit
			// transaction: the error in the setting's place, no stage run.
			sameReplies(t, px, ref, "behind a failing setting", [][]pgproto3.FrontendMessage{q("SET LOCAL extra_float_digits = 'x'; " + floats), q("SELECT 1")})
			for _, c := range []struct {
				name   string
				before []string
			}{
				{"after a write", []string{"BEGIN", fmt.Sprintf("UPDATE accounts SET note = note WHERE aid = %d", env.keyed)}},
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
