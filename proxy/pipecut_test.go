package proxy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/proxy"
)

// TestPipelineReadsSeveralShards: a pipeline of reads of different shards
// with one Sync (pgx's Batch, psycopg's pipeline mode) gets exactly the
// replies one Postgres sends — keyed reads of every shard in turn, named
// and unnamed statements, a read of every shard among them, an error in
// the middle (the rest skipped up to the Sync) — through PgBouncer with
// and without a session setting, directly, and with the fence on (the
// internal/engine/pipecut.go cut); in a transaction block too, with a
// write of one shard among them. A write after reads of another shard
// outside a block is still refused, and so are writes of two shards and
// reads of two shards under REPEATABLE READ.
func TestPipelineReadsSeveralShards(t *testing.T) {
	for i, tc := range append(slices.Clone(wireSetups), wireSetup{"fence on", []envOpt{fenceMode(proxy.FenceOn)}, ""}) {
		t.Run(tc.name, func(t *testing.T) {
			e, env, px, ref := startWirePair(t, tc, 9_500_000+int64(i)*10_000)
			var keys []int64
			for s := range e.db.m.Shards {
				keys = append(keys, e.db.keysOn(s, 1, env.lo)[0])
			}
			keys = append(keys, keys[0]) // back to the first shard
			const read = "SELECT aid, abalance, note, current_setting('work_mem') AS wm FROM accounts WHERE aid = $1"
			reads := func(name string, ks []int64) []pgproto3.FrontendMessage {
				msgs := []pgproto3.FrontendMessage{&pgproto3.Parse{Name: name, Query: read}}
				for _, k := range ks {
					msgs = append(msgs, &pgproto3.Bind{PreparedStatement: name, Parameters: [][]byte{fmt.Append(nil, k)}},
						&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{})
				}
				return msgs
			}
			sync := &pgproto3.Sync{}
			all := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT count(*) FROM accounts WHERE aid BETWEEN $1 AND $2"},
				&pgproto3.Bind{Parameters: [][]byte{fmt.Append(nil, env.lo), fmt.Append(nil, env.hi)}}, &pgproto3.Execute{}}
			failing := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT 1 / (aid - aid) FROM accounts WHERE aid = $1"},
				&pgproto3.Bind{Parameters: [][]byte{fmt.Append(nil, keys[1])}}, &pgproto3.Execute{}}
			cases := []wireCase{
				{"unnamed reads of every shard in turn", append(reads("", keys), sync)},
				{"named", append(reads("cut_read", keys), sync)},
				{"a read of every shard among them", append(append(reads("", keys[:2]), all...), sync)},
				{"a read of every shard, then keyed reads", append(append(slices.Clone(all), reads("", keys[1:3])...), sync)},
				{"an error in the middle", append(append(append(reads("", keys[:1]), failing...), reads("", keys[2:])...), sync)},
				{"a failing read of every shard, then keyed reads", append(append([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT 1 / (aid - aid) FROM accounts WHERE aid BETWEEN $1 AND $2"},
					&pgproto3.Bind{Parameters: [][]byte{fmt.Append(nil, env.lo), fmt.Append(nil, env.hi)}}, &pgproto3.Execute{}}, reads("", keys[1:3])...), sync)},
				{"begin", []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}}},
				{"in a transaction block", append(append(reads("", keys), all...), sync)},
				{"a write, then reads of other shards", append(append([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "UPDATE accounts SET note = note WHERE aid = $1"},
					&pgproto3.Bind{Parameters: [][]byte{fmt.Append(nil, keys[0])}}, &pgproto3.Execute{}}, reads("", keys[1:])...), sync)},
				{"an error in the middle of the block", append(append(append(reads("", keys[:1]), failing...), reads("", keys[2:])...), sync)},
				{"rollback", []pgproto3.FrontendMessage{&pgproto3.Query{String: "ROLLBACK"}}},
				{"begin and the reads in one pipeline", append(append([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "BEGIN"}, &pgproto3.Bind{}, &pgproto3.Execute{}},
					reads("", keys)...), &pgproto3.Parse{Query: "COMMIT"}, &pgproto3.Bind{}, &pgproto3.Execute{}, sync)},
				{"two pipelines", append(append(reads("", keys[:2]), sync), append(reads("", keys[2:]), sync)...)},
			}
			expectSameReplies(t, px, ref, cases)
			refused := []wireCase{
				{"a write after a read of another shard", append(append(reads("", keys[:1]), &pgproto3.Parse{Query: "UPDATE accounts SET note = note WHERE aid = $1"},
					&pgproto3.Bind{Parameters: [][]byte{fmt.Append(nil, keys[1])}}, &pgproto3.Execute{}), sync)},
				{"reads of two shards in a REPEATABLE READ block", append(append([]pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN ISOLATION LEVEL REPEATABLE READ"}}, reads("", keys[:2])...), sync, &pgproto3.Query{String: "ROLLBACK"})},
				{"writes of two shards in a transaction block", []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"},
					&pgproto3.Parse{Query: "UPDATE accounts SET note = note WHERE aid = $1"}, &pgproto3.Bind{Parameters: [][]byte{fmt.Append(nil, keys[0])}}, &pgproto3.Execute{},
					&pgproto3.Bind{Parameters: [][]byte{fmt.Append(nil, keys[1])}}, &pgproto3.Execute{}, sync, &pgproto3.Query{String: "ROLLBACK"}}},
			}
			for _, c := range refused {
				got := replies(t, px, c.msgs)
				if !slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, "Error ERROR 0A000") }) || got[len(got)-1] != "ReadyForQuery I" {
					t.Errorf("%s: pgshard answered\n %s\nwant a refusal (0A000)", c.name, strings.Join(got, "\n "))
				}
			}

			// pgx's Batch: one Sync for all of it.
			ctx := ctxT(t, time.Minute)
			conn := e.connect(t)
			b := &pgx.Batch{}
			for _, k := range keys {
				b.Queue("SELECT abalance FROM accounts WHERE aid = $1", k)
			}
			br := conn.SendBatch(ctx, b)
			for _, k := range keys {
				var bal int32
				if err := br.QueryRow().Scan(&bal); err != nil || bal != int32(k%997) {
					t.Errorf("batch read of %d: %d, %v", k, bal, err)
				}
			}
			if err := br.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
