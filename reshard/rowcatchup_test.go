package reshard_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/reshard"
	"github.com/pgshard/pgshard/shardmap"
)

// rowTables are the keyed tables and the SQL of a row as the comparison
// reads it (outbox and spawns without their seq: a copy is numbered on
// its own shard) and of its key.
var rowTables = []struct{ name, row, key string }{
	{"executions", "row(id, definition_id, data, version)::text", "id"},
	{"processed_events", "row(execution_id, event_id)::text", "execution_id"},
	{"timers", "row(execution_id, path, fire_at)::text", "execution_id"},
	{"trace", "row(execution_id, idx, entry)::text", "execution_id"},
	{"spawns", "row(parent_id, child_id, root_path, context)::text", "parent_id"},
	{"outbox", "row(target_id, event)::text", "pgshard_move_outbox_from(event)"},
}

// rowsOf reads every row of every keyed table on p whose key's bucket is
// (in) or is not (!in) in lo..hi, sorted, by table.
func rowsOf(t *testing.T, ctx context.Context, p *pgxpool.Pool, lo, hi int, in bool) map[string][]string {
	t.Helper()
	out, err := readRows(ctx, p, lo, hi, in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readRows(ctx context.Context, p *pgxpool.Pool, lo, hi int, in bool) (map[string][]string, error) {
	out := map[string][]string{}
	for _, tb := range rowTables {
		cond := "BETWEEN"
		if !in {
			cond = "NOT BETWEEN"
		}
		rows, err := p.Query(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE coalesce(pgshard_fence_bucket(%s, $3::int), -1) %s $1::int AND $2::int`,
			tb.row, tb.name, tb.key, cond), lo, hi, buckets)
		if err != nil {
			return nil, err
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		slices.Sort(got)
		out[tb.name] = got
	}
	return out, nil
}

// sameRows reports every difference between two rowsOf results.
func sameRows(t *testing.T, what string, want, got map[string][]string) {
	t.Helper()
	for _, tb := range rowTables {
		w, g := want[tb.name], got[tb.name]
		if slices.Equal(w, g) {
			continue
		}
		missing, extra := diff(w, g), diff(g, w)
		t.Errorf("%s: %s differs: %d rows want, %d got; missing %d %v, extra %d %v", what, tb.name, len(w), len(g),
			len(missing), head(missing), len(extra), head(extra))
	}
}

func diff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			out = append(out, x)
		}
	}
	return out
}

func head(s []string) []string { return s[:min(len(s), 3)] }

// mutateRows changes rows of execution id directly on p, round r: inserts,
// updates (including one of a primary key) and deletes on every keyed
// table, as commits, the trace ring's cap, dedupe expiry and the outbox's
// drain do; every third execution loses all its rows in round 2 (a
// deleted execution).
func mutateRows(ctx context.Context, p *pgxpool.Pool, id string, n, r int) error {
	type q struct {
		sql  string
		args []any
	}
	qs := []q{
		{`UPDATE executions SET data = data || $2::text, version = version + 1 WHERE id = $1::text`, []any{id, fmt.Sprintf("+m%d", r)}},
		{`INSERT INTO processed_events VALUES ($1::text, $2::text)`, []any{id, fmt.Sprintf("m-%d", r)}},
		{`DELETE FROM processed_events WHERE execution_id = $1::text AND event_id = (SELECT min(event_id) FROM processed_events WHERE execution_id = $1::text AND event_id LIKE 'ev-%')`, []any{id}},
		{`UPDATE processed_events SET event_id = event_id || '-renamed' WHERE execution_id = $1::text AND event_id = (SELECT max(event_id) FROM processed_events WHERE execution_id = $1::text AND event_id LIKE 'ev-%' AND event_id NOT LIKE '%renamed')`, []any{id}},
		{`INSERT INTO timers VALUES ($1::text, $2::text, $3::float8)`, []any{id, fmt.Sprintf("m-%d", r), float64(r) + 1.0/3}},
		{`UPDATE timers SET fire_at = fire_at + 0.1 WHERE execution_id = $1::text AND path = 't'`, []any{id}},
		{`DELETE FROM timers WHERE execution_id = $1::text AND path = $2::text`, []any{id, fmt.Sprintf("m-%d", r-1)}},
		{`INSERT INTO trace SELECT $1::text, coalesce(max(idx), 0) + 1, 'm' FROM trace WHERE execution_id = $1::text`, []any{id}},
		{`DELETE FROM trace WHERE execution_id = $1::text AND idx = (SELECT min(idx) FROM trace WHERE execution_id = $1::text)`, []any{id}},
		{`UPDATE trace SET entry = entry || '+' WHERE execution_id = $1::text AND idx = (SELECT max(idx) - 1 FROM trace WHERE execution_id = $1::text)`, []any{id}},
		{`INSERT INTO spawns (parent_id, child_id, root_path, context) VALUES ($1::text, $1::text || $2::text, 'root', '{}')`, []any{id, fmt.Sprintf("-m%d", r)}},
		{`DELETE FROM spawns WHERE seq = (SELECT min(seq) FROM spawns WHERE parent_id = $1::text)`, []any{id}},
		{`UPDATE spawns SET context = context || ' ' WHERE seq = (SELECT max(seq) FROM spawns WHERE parent_id = $1::text)`, []any{id}},
		{`INSERT INTO outbox (target_id, event) VALUES ($1::text, json_build_object('from', $1::text, 'm', $2::int)::text)`, []any{id, r}},
		{`DELETE FROM outbox WHERE seq = (SELECT min(seq) FROM outbox WHERE pgshard_move_outbox_from(event) = $1::text)`, []any{id}},
		{`UPDATE outbox SET target_id = 'elsewhere' WHERE seq = (SELECT max(seq) FROM outbox WHERE pgshard_move_outbox_from(event) = $1::text)`, []any{id}},
	}
	if r == 2 && n%3 == 0 {
		qs = nil
		for _, tb := range rowTables {
			qs = append(qs, q{fmt.Sprintf(`DELETE FROM %s WHERE %s = $1::text`, tb.name, tb.key), []any{id}})
		}
	}
	for _, x := range qs {
		if _, err := p.Exec(ctx, x.sql, x.args...); err != nil {
			return fmt.Errorf("round %d, %s: %s: %w", r, id, x.sql, err)
		}
	}
	return nil
}

// TestCatchUpReplaysRows moves a range while rows of every keyed table of
// it — and outside it — are inserted, updated and deleted on the source:
// during the copy (concurrently), after it (the catch-up rounds) and
// before the freeze (the last catch-up). At the flip the destination's
// range equals the source's row for row; after the move the destination
// holds that and nothing else, the source's rows outside the range are
// what they were, and no capture, record or trigger is left.
func TestCatchUpReplaysRows(t *testing.T) {
	e := newEnv(t, 60)
	const lo, hi = 0, 31
	src, dst := e.pools[e.shards[0].Name], e.pools[e.shards[1].Name]
	var in, out []string
	for _, id := range e.ids {
		if b := shardmap.BucketText(id, buckets); b >= lo && b <= hi {
			in = append(in, id)
		} else {
			out = append(out, id)
		}
	}
	if len(in) < 6 || len(out) < 6 {
		t.Fatalf("keys: %d in the range, %d outside", len(in), len(out))
	}
	// A few more versions per execution: trace rings fill, histories grow.
	for range 3 {
		for _, id := range e.ids {
			if err := e.commit(id); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A new execution of the range appears after the copy.
	fresh := ""
	for i := range 10000 {
		if id := fmt.Sprintf("fresh-%d", i); shardmap.BucketText(id, buckets) <= hi {
			fresh = id
			break
		}
	}
	round := func(ctx context.Context, r int) error {
		for i, id := range append(slices.Clone(in), out...) {
			if err := mutateRows(ctx, src, id, i, r); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := reshard.Plan(e.ctx, e.cat, reshard.Request{Lo: lo, Hi: hi, To: e.shards[1].Name}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var during error
	var atFlip, outsideAtFlip map[string][]string
	hook := func(ctx context.Context, step string, _ catalog.MoveRecord) error {
		switch step {
		case "copying":
			// Concurrent with the capture's start and the copy.
			wg.Add(1)
			go func() { defer wg.Done(); during = round(ctx, 1) }()
		case "copied":
			wg.Wait()
			if during != nil {
				return during
			}
			if err := round(ctx, 2); err != nil {
				return err
			}
			_, err := src.Exec(ctx, `INSERT INTO executions VALUES ($1::text, 'fresh', '{}', 1)`, fresh)
			return err
		case "caught-up":
			return round(ctx, 3)
		case "flip":
			// The range is frozen and caught up: the destination must
			// hold exactly the source's rows of it.
			var err error
			if atFlip, err = readRows(ctx, src, lo, hi, true); err != nil {
				return err
			}
			if outsideAtFlip, err = readRows(ctx, src, lo, hi, false); err != nil {
				return err
			}
			got, err := readRows(ctx, dst, lo, hi, true)
			if err != nil {
				return err
			}
			sameRows(t, "at the flip, destination vs source", atFlip, got)
		}
		return nil
	}
	defer wg.Wait()
	if _, err := reshard.Apply(e.ctx, e.cat, reshard.Options{FreezeBudget: 5 * time.Second, Hook: hook, Log: logf(t)}); err != nil {
		t.Fatal(err)
	}
	if atFlip == nil {
		t.Fatal("the move never reached its flip")
	}
	n := 0
	for _, rows := range atFlip {
		n += len(rows)
	}
	renamed := 0
	for _, r := range atFlip["processed_events"] {
		if strings.Contains(r, "renamed") {
			renamed++
		}
	}
	t.Logf("%d rows of the range at the flip (%d processed events whose key was updated)", n, renamed)
	if renamed == 0 {
		t.Error("no processed event of the range had its key updated")
	}
	if !slices.Contains(atFlip["executions"], fmt.Sprintf("(%s,fresh,{},1)", fresh)) {
		t.Errorf("the execution inserted after the copy is not in the range at the flip")
	}
	sameRows(t, "after the move, destination vs the source at the flip", atFlip, rowsOf(t, e.ctx, dst, lo, hi, true))
	sameRows(t, "after the move, the source outside the range", outsideAtFlip, rowsOf(t, e.ctx, src, lo, hi, false))
	sameRows(t, "after the move, the destination outside the range", map[string][]string{}, rowsOf(t, e.ctx, dst, lo, hi, false))
	sameRows(t, "after the move, the source in the range", map[string][]string{}, rowsOf(t, e.ctx, src, lo, hi, true))
	for _, p := range []*pgxpool.Pool{src, dst} {
		var left int
		if err := p.QueryRow(e.ctx, `SELECT (SELECT count(*) FROM pgshard_move_capture) + (SELECT count(*) FROM pgshard_move_rows)
			+ (SELECT count(*) FROM pgshard_move_seqs) + (SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'pgshard\_move\_capture%')`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left != 0 {
			t.Errorf("%d captures, change records, seq maps or capture triggers left", left)
		}
	}
	e.ownedOnce(0, buckets-1)
}

// TestCatchUpDoesNotCopyAgain: outbox rows are written once, so a copy the
// move made is right for good. A relay may read (PendingOutbox is not
// fenced) and ack a copy on the destination before the flip; a change
// record of its source row replayed afterwards must not make a second
// copy — that resurrected an acked event under a new seq, a second
// redelivery from one move (found by chaos: one event in three rows). A
// source row changed after the copy keeps its copy's seq, its content
// refreshed, and one the source deleted loses its copy.
func TestCatchUpDoesNotCopyAgain(t *testing.T) {
	e := newEnv(t, 20)
	const lo, hi = 0, buckets/2 - 1
	src, dst := e.pools[e.shards[0].Name], e.pools[e.shards[1].Name]
	var in []string
	for _, id := range e.ids {
		if b := shardmap.BucketText(id, buckets); b >= lo && b <= hi {
			in = append(in, id)
		}
	}
	if len(in) < 3 {
		t.Fatalf("%d executions in the range, want 3", len(in))
	}
	// acked: its copy is acked on dst; changed: its source row changes
	// after the copy; deleted: its source row is acked after the copy.
	seqOf := map[string]int64{}
	for i, name := range []string{"acked", "changed", "deleted"} {
		ev := fmt.Sprintf(`{"from": %q, "name": %q}`, in[i], name)
		var seq int64
		if err := src.QueryRow(e.ctx, `INSERT INTO outbox (target_id, event) VALUES ($1::text, $2::text) RETURNING seq`, in[i], ev).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		seqOf[name] = seq
	}
	copyOf := func(ctx context.Context, name string) (int64, error) {
		var s int64
		err := dst.QueryRow(ctx, `SELECT dst_seq FROM pgshard_move_seqs WHERE tbl = 'outbox' AND src_seq = $1::bigint`, seqOf[name]).Scan(&s)
		return s, err
	}
	if _, err := reshard.Plan(e.ctx, e.cat, reshard.Request{Lo: lo, Hi: hi, To: e.shards[1].Name}); err != nil {
		t.Fatal(err)
	}
	var changedCopy int64
	var atFlip map[string]int
	hook := func(ctx context.Context, step string, _ catalog.MoveRecord) error {
		switch step {
		case "copied":
			acked, err := copyOf(ctx, "acked")
			if err != nil {
				return fmt.Errorf("the copy of the acked row: %w", err)
			}
			if changedCopy, err = copyOf(ctx, "changed"); err != nil {
				return fmt.Errorf("the copy of the changed row: %w", err)
			}
			// A relay on dst delivers and acks the copy; then each
			// source row gets a change record (an update that changes
			// nothing, one that does, a delete).
			for _, q := range []struct {
				p   *pgxpool.Pool
				sql string
				arg int64
			}{
				{dst, `DELETE FROM outbox WHERE seq = $1::bigint`, acked},
				{src, `UPDATE outbox SET target_id = target_id WHERE seq = $1::bigint`, seqOf["acked"]},
				{src, `UPDATE outbox SET target_id = 'elsewhere' WHERE seq = $1::bigint`, seqOf["changed"]},
				{src, `DELETE FROM outbox WHERE seq = $1::bigint`, seqOf["deleted"]},
			} {
				if _, err := q.p.Exec(ctx, q.sql, q.arg); err != nil {
					return err
				}
			}
		case "flip":
			atFlip = map[string]int{}
			rows, err := dst.Query(ctx, `SELECT event::json->>'name', seq, target_id FROM outbox WHERE event::json->>'name' IS NOT NULL`)
			if err != nil {
				return err
			}
			for rows.Next() {
				var name, target string
				var seq int64
				if err := rows.Scan(&name, &seq, &target); err != nil {
					return err
				}
				atFlip[name]++
				if name == "changed" && (seq != changedCopy || target != "elsewhere") {
					t.Errorf("the changed row's copy is seq %d, target %q: want seq %d (its copy's, kept), target elsewhere", seq, target, changedCopy)
				}
			}
			return rows.Err()
		}
		return nil
	}
	if _, err := reshard.Apply(e.ctx, e.cat, reshard.Options{FreezeBudget: 5 * time.Second, Hook: hook, Log: logf(t)}); err != nil {
		t.Fatal(err)
	}
	if atFlip == nil {
		t.Fatal("the move never reached its flip")
	}
	want := map[string]int{"changed": 1}
	if atFlip["acked"] != 0 || atFlip["changed"] != 1 || atFlip["deleted"] != 0 {
		t.Errorf("rows on the destination at the flip, by name: %v; want %v (the acked copy not made again, the deleted one gone)", atFlip, want)
	}
}
