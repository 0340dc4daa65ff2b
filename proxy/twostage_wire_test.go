package proxy_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestTwoStageErrorReplies: a read answered in two stages that fails on
// a shard while it runs (a division by zero in the window's ORDER BY,
// evaluated in stage 2) answers a Query with the error and no
// BindComplete — the stage's own Bind is the proxy's, not the client's —
// and an extended pipeline exactly as one database (ParseComplete,
// BindComplete, the error). It answered a simple Query with a
// BindComplete, a message of the extended protocol.
func TestTwoStageErrorReplies(t *testing.T) {
	_, env, px, ref := startWirePair(t, wireSetups[0], 9_900_000)
	failing := fmt.Sprintf("SELECT aid, rank() OVER (ORDER BY abalance / (abalance - abalance)) FROM accounts WHERE aid BETWEEN %d AND %d", env.lo, env.hi)
	got := replies(t, px, []pgproto3.FrontendMessage{&pgproto3.Query{String: failing}})
	want := `Error ERROR 22012 "division by zero" detail="" hint=""`
	if slices.Contains(got, "BindComplete") || !slices.Contains(got, want) || got[len(got)-1] != "ReadyForQuery I" {
		t.Errorf("a simple Query: %q, want %s and ReadyForQuery I, no BindComplete", got, want)
	}
	sameReplies(t, px, ref, "extended", [][]pgproto3.FrontendMessage{{&pgproto3.Parse{Query: failing}, &pgproto3.Bind{},
		&pgproto3.Execute{}, &pgproto3.Sync{}}})
}
