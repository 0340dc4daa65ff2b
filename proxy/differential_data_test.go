package proxy_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/shardmap"
)

// The differential suite's data: the same rows in one plain database and
// spread over the shards (each row on the shard of its key, outbox and
// spawns rows on the shard their seq names). Values are chosen so that
// every aggregate has one right answer whatever the order the rows are
// added in (float sums of values exact in the type), with NULLs, empty
// strings, ties, NaN, negative numbers, numerics of several scales,
// int8 sums beyond 64 bits, float sums that print in scientific notation.

// diffValsDDL is the table of typed values the corpus reads (keyed by id).
const diffValsDDL = `CREATE TABLE vals (
	id text PRIMARY KEY, g text, i2 int2, i4 int4, i8 int8, n numeric,
	f4 real, f8 float8, fbig float8, ftiny float8, f4big real,
	t text, b bool, d date, ts timestamptz, u uuid)`

// diffLookupDDL is a table outside the sharding schema (unsharded): its
// rows live on the default shard (index 0) alone. Every shard has the
// table, the others empty, so a read of it anywhere else answers wrong
// rather than failing.
const diffLookupDDL = `CREATE TABLE lookup (k text, v text, n numeric, w int4,
	vc varchar(12), nm numeric(8,2), tsp timestamp(3), ch char(3))`

// diffGlobalDDL is a global table (route.Schema.Global): the same rows
// on every shard, so a read that takes them from more than one shard
// answers them twice.
const diffGlobalDDL = `CREATE TABLE gdefs (name text PRIMARY KEY, owner text, rank int4)`

// allShards is the diffRow.shard of a global table's rows: every shard.
const allShards = -1

// diffRow is one row of one table: its shard and its values.
type diffRow struct {
	table string
	shard int
	vals  []any
}

var diffColumns = map[string][]string{
	"executions":       {"id", "definition_id", "data", "version"},
	"outbox":           {"seq", "target_id", "event"},
	"timers":           {"execution_id", "path", "fire_at"},
	"spawns":           {"seq", "parent_id", "child_id", "root_path", "context"},
	"trace":            {"execution_id", "idx", "entry"},
	"processed_events": {"execution_id", "event_id"},
	"lookup":           {"k", "v", "n", "w", "vc", "nm", "tsp", "ch"},
	"gdefs":            {"name", "owner", "rank"},
	"vals":             {"id", "g", "i2", "i4", "i8", "n", "f4", "f8", "fbig", "ftiny", "f4big", "t", "b", "d", "ts", "u"},
}

// diffExec is an execution of the data set (the corpus names some).
type diffExec struct {
	id, def, status, parent string
	version                 int
}

// diffData generates the rows for map m (deterministic).
func diffData(m *shardmap.Map) ([]diffRow, []diffExec) {
	rng := rand.New(rand.NewPCG(7, 11))
	shardOf := func(key string) int { return m.ShardIndexForBucket(m.Bucket(key)) }
	var rows []diffRow
	add := func(table string, shard int, vals ...any) {
		rows = append(rows, diffRow{table: table, shard: shard, vals: vals})
	}
	// seqs: each shard's stride (ordinal k: k+1, k+1+1024, ...).
	next := map[string][]int64{"outbox": make([]int64, len(m.Shards)), "spawns": make([]int64, len(m.Shards))}
	seq := func(table string, shard int) int64 {
		n := next[table][shard]
		next[table][shard]++
		return int64(m.Shards[shard].Ordinal) + 1 + shardmap.SeqStride*n
	}
	defs := []string{"order", "payment", "shipment", "Refund", "ärger"}
	statuses := []string{"running", "done", "failed", "waiting"}
	var execs []diffExec
	for i := 0; i < 240; i++ {
		h := sha256.Sum256([]byte(fmt.Sprintf("exec-%d", i)))
		e := diffExec{id: hex.EncodeToString(h[:16]), def: defs[rng.IntN(len(defs))], version: 1 + rng.IntN(12)}
		e.status = statuses[rng.IntN(len(statuses))]
		if i%7 == 3 {
			e.status = "" // no status field in the document
		}
		if i > 10 && i%3 == 0 {
			e.parent = execs[rng.IntN(len(execs))].id
		}
		execs = append(execs, e)
		var doc strings.Builder
		fmt.Fprintf(&doc, `{"id": %q, "version": %d, "definition_id": %q`, e.id, e.version, e.def)
		if e.status != "" {
			fmt.Fprintf(&doc, `, "status": %q`, e.status)
		}
		if e.parent != "" {
			fmt.Fprintf(&doc, `, "parent_id": %q`, e.parent)
		} else if i%5 == 0 {
			doc.WriteString(`, "parent_id": null`)
		}
		switch i % 4 {
		case 0:
			fmt.Fprintf(&doc, `, "outcome": {"n": %d}`, i)
		case 1:
			doc.WriteString(`, "outcome": null`)
		}
		fmt.Fprintf(&doc, `, "active_path": ["root", "s%d"], "context": {"k": %d}}`, i%6, i)
		add("executions", shardOf(e.id), e.id, e.def, doc.String(), int32(e.version))
	}
	for i := 0; i < 180; i++ {
		e := execs[rng.IntN(len(execs))]
		sh := shardOf(e.id)
		var target any
		switch rng.IntN(10) {
		case 0, 1:
			target = nil
		case 2:
			target = ""
		default:
			target = execs[rng.IntN(len(execs))].id
		}
		add("outbox", sh, seq("outbox", sh), target, fmt.Sprintf(`{"type": "ev%d", "n": %d}`, i%9, i))
	}
	seen := map[string]bool{}
	for i := 0; i < 300; i++ {
		e := execs[rng.IntN(len(execs))]
		path := fmt.Sprintf("root/t%d", i%13)
		if seen[e.id+path] {
			continue
		}
		seen[e.id+path] = true
		add("timers", shardOf(e.id), e.id, path, 1000+float64(rng.IntN(400))*0.25)
	}
	for i := 0; i < 90; i++ {
		e := execs[rng.IntN(len(execs))]
		sh := shardOf(e.id)
		add("spawns", sh, seq("spawns", sh), e.id, execs[rng.IntN(len(execs))].id, fmt.Sprintf("root/r%d", i%4), fmt.Sprintf(`{"i": %d}`, i))
	}
	for _, e := range execs[:120] {
		for idx := 0; idx < rng.IntN(6); idx++ {
			add("trace", shardOf(e.id), e.id, int32(idx), fmt.Sprintf(`{"step": %d}`, idx))
		}
	}
	for i := 0; i < 200; i++ {
		e := execs[rng.IntN(len(execs))]
		add("processed_events", shardOf(e.id), e.id, fmt.Sprintf("ev-%d", i))
	}
	texts := []any{"abc", "Abc", "abd", "", "a b", "ä", "z", "Z", "0", "é", nil}
	groups := []any{"a", "b", "c", "d", "e", nil}
	base := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := 0; i < 200; i++ {
		id := fmt.Sprintf("v%03d", i)
		nul := func(v any) any {
			if rng.IntN(9) == 0 {
				return nil
			}
			return v
		}
		num := fmt.Sprintf("%d.%0*d", rng.IntN(20000)-10000, 1+i%4, rng.IntN(int(math.Pow10(1+i%4))))
		if i%11 == 0 {
			num = fmt.Sprintf("%d", rng.IntN(1000)-500)
		}
		f8 := float64(rng.IntN(1<<20)-(1<<19)) * 0.25
		if i%10 == 0 {
			f8 = float64(rng.IntN(1<<30)) * 512.25 // large values, exact sums (~2^51)
		}
		var f8v any = f8
		if i == 77 {
			f8v = math.NaN() // in group "e" only
		}
		g := groups[i%len(groups)]
		if i == 77 {
			g = "e"
		}
		var f4v any = float32(rng.IntN(16000)-8000) * 0.5
		if i == 78 {
			f4v = float32(math.NaN())
			g = "e"
		}
		add("vals", shardOf(id), id, g,
			nul(int16(rng.IntN(601)-300)),
			nul(int32(rng.IntN(4_000_000_000)-2_000_000_000)),
			nul(rng.Int64N(8_000_000_000_000_000_000)-4_000_000_000_000_000_000),
			nul(num),
			nul(f4v),
			nul(f8v),
			nul(float64(rng.IntN(1000)-500)*math.Pow(2, 70)),
			nul(float64(rng.IntN(1000)+1)*math.Pow(2, -30)),
			nul(float32(rng.IntN(100)+1)*float32(1<<20)),
			texts[rng.IntN(len(texts))],
			nul(rng.IntN(2) == 0),
			nul(base.AddDate(0, 0, rng.IntN(400)-200)),
			nul(base.Add(time.Duration(rng.IntN(1_000_000))*time.Second)),
			nul(fmt.Sprintf("%08x-0000-4000-8000-%012x", rng.Uint32(), i)),
		)
	}
	// lookup (unsharded, on the default shard): 60 rows keyed by an
	// execution's id (every fourth) or by no execution's, with a
	// definition name or NULL, numerics, small ints, columns with type
	// modifiers (varchar(12), numeric(8,2), timestamp(3), char(3)) and
	// NULLs.
	lr := rand.New(rand.NewPCG(13, 17))
	lnul := func(v any) any {
		if lr.IntN(8) == 0 {
			return nil
		}
		return v
	}
	for i := 0; i < 60; i++ {
		k := "none-" + fmt.Sprint(i)
		if i%5 != 4 {
			k = execs[(i*4)%len(execs)].id
		}
		var v any = defs[lr.IntN(len(defs))]
		if i%7 == 6 {
			v = nil
		}
		add("lookup", 0, k, v, lnul(fmt.Sprintf("%d.%02d", lr.IntN(200)-50, lr.IntN(100))), lnul(int32(1+lr.IntN(12))),
			lnul(k[:min(len(k), 12)]), lnul(fmt.Sprintf("%d.%d", lr.IntN(2000)-1000, lr.IntN(100))),
			lnul(time.Date(2026, 1, 1+lr.IntN(300), lr.IntN(24), 0, 0, lr.IntN(1000)*1_000_000, time.UTC)), lnul(fmt.Sprint(lr.IntN(100))))
	}
	// gdefs (global): the definition names and two that no execution
	// has, with owners (some NULL) and ranks.
	for i, name := range append(slices.Clone(defs), "archive", "none") {
		var owner any = []string{"team-a", "team-b", "team-c"}[i%3]
		if i == 2 || i == 6 {
			owner = nil
		}
		add("gdefs", allShards, name, owner, int32(7-i))
	}
	return rows, execs
}

// loadDiffData inserts the rows of every table: into ref (all of them;
// nil: no reference) and into shards[shard] (each row on its shard).
func loadDiffData(ctx context.Context, rows []diffRow, ref *pgx.Conn, shards []*pgx.Conn) error {
	byTable := map[string][]diffRow{}
	var order []string
	for _, r := range rows {
		if _, ok := byTable[r.table]; !ok {
			order = append(order, r.table)
		}
		byTable[r.table] = append(byTable[r.table], r)
	}
	for _, table := range order {
		cols := diffColumns[table]
		var all [][]any
		per := make([][][]any, len(shards))
		for _, r := range byTable[table] {
			all = append(all, r.vals)
			if r.shard == allShards {
				for i := range per {
					per[i] = append(per[i], r.vals)
				}
				continue
			}
			per[r.shard] = append(per[r.shard], r.vals)
		}
		if ref != nil {
			if _, err := ref.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(all)); err != nil {
				return fmt.Errorf("load %s into the reference: %w", table, err)
			}
		}
		for i, c := range shards {
			if _, err := c.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(per[i])); err != nil {
				return fmt.Errorf("load %s into shard %d: %w", table, i, err)
			}
		}
	}
	all := shards
	if ref != nil {
		all = append([]*pgx.Conn{ref}, shards...)
	}
	for _, c := range all {
		if _, err := c.Exec(ctx, "ANALYZE"); err != nil {
			return err
		}
	}
	return nil
}
