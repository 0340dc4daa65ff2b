package migrations

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/shardmap"
)

// Adopting a database that another program created — the seed's Python
// store makes the six tables with CREATE TABLE IF NOT EXISTS and its own
// harel_commit_cas — is migration 0001 (and 0002) recorded instead of run,
// after checks, in the transaction that would have run 0001:
//
//	existing tables ──▶ exactly 0001's columns? (compared with 0001 run in a
//	                    throw-away schema, rolled back: names, order, types,
//	                    NOT NULL, serial, primary key)
//	                ──▶ every keyed row in this shard's buckets?
//	                ──▶ timers_fire_at_idx created; 0001 recorded
//	harel_commit_cas ─▶ same signature (text,text,text,integer,text → boolean)
//	                    and the same semantics (probed, rolled back)?
//	                ──▶ replaced by 0002's; 0002 recorded
//
// 0003.. then run as usual, and the identity step strides the sequences
// above the adopted rows, re-numbering those whose seq names another shard.

// storeTables are the six tables of ARCHITECTURE.md §1 that 0001 creates.
var storeTables = []string{"executions", "outbox", "processed_events", "timers", "spawns", "trace"}

// keyedColumns are the columns that carry an execution id (placement keys).
var keyedColumns = []struct{ table, column string }{
	{"executions", "id"}, {"processed_events", "execution_id"}, {"timers", "execution_id"},
	{"trace", "execution_id"}, {"spawns", "parent_id"},
}

// ForeignTablesError means the database has the store's tables although
// pgshard's ledger does not record creating them: another program (the
// seed's store) made them. pgshard migrate --adopt checks and takes them
// over.
type ForeignTablesError struct {
	Tables []string
}

func (e *ForeignTablesError) Error() string {
	return fmt.Sprintf("the database already has the store's tables %s, which pgshard did not create (the seed's store?): run pgshard migrate --adopt to check them and take them over",
		strings.Join(e.Tables, ", "))
}

// AdoptError lists why a database cannot be adopted; nothing was changed.
type AdoptError struct {
	Problems []string
}

func (e *AdoptError) Error() string {
	return "cannot adopt the database: " + strings.Join(e.Problems, "; ")
}

// adoption is what adopting needs to know: the shard the database becomes.
type adoption struct {
	shard shardmap.Shard
	m     *shardmap.Map
}

// existingStoreTables returns the store tables already in the current
// schema.
func existingStoreTables(ctx context.Context, tx pgx.Tx) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relname = ANY ($1::text[]) ORDER BY 1`, storeTables)
	if err != nil {
		return nil, fmt.Errorf("look for existing store tables: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// adoptStore checks the existing tables and harel_commit_cas and records
// 0001 (and 0002 when it replaced harel_commit_cas) in tx, which holds the
// migrators' lock. ms[0] and ms[1] are 0001 and 0002. It returns the ids it
// recorded.
func adoptStore(ctx context.Context, tx pgx.Tx, ms []Migration, existing []string, ad *adoption) ([]string, error) {
	if len(ms) < 2 || ms[0].ID() != "0001_store_tables" || ms[1].ID() != "0002_commit_cas" {
		return nil, fmt.Errorf("adopt: this build's first migrations are not 0001_store_tables and 0002_commit_cas")
	}
	var problems []string
	if missing := slices.DeleteFunc(slices.Clone(storeTables), func(t string) bool { return slices.Contains(existing, t) }); len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("the database has the store tables %s but not %s (adopt takes over all six or none)",
			strings.Join(existing, ", "), strings.Join(missing, ", ")))
	} else {
		p, err := compareTables(ctx, tx, ms[0])
		if err != nil {
			return nil, err
		}
		problems = append(problems, p...)
	}
	if len(problems) == 0 {
		p, err := checkPlacement(ctx, tx, ad)
		if err != nil {
			return nil, err
		}
		problems = append(problems, p...)
	}
	cas, p, err := checkCAS(ctx, tx)
	if err != nil {
		return nil, err
	}
	problems = append(problems, p...)
	if len(problems) > 0 {
		return nil, &AdoptError{Problems: problems}
	}
	// What 0001 creates besides the tables.
	if _, err := tx.Exec(ctx, `CREATE INDEX IF NOT EXISTS timers_fire_at_idx ON timers (fire_at)`); err != nil {
		return nil, fmt.Errorf("adopt: index timers (fire_at): %w", err)
	}
	recorded := []Migration{ms[0]}
	if cas {
		if _, err := tx.Exec(ctx, `DROP FUNCTION harel_commit_cas(text, text, text, integer, text)`); err != nil {
			return nil, fmt.Errorf("adopt: replace harel_commit_cas: %w", err)
		}
		if err := tx.Conn().PgConn().Exec(ctx, ms[1].SQL).Close(); err != nil {
			return nil, fmt.Errorf("adopt: replace harel_commit_cas: %w", err)
		}
		recorded = append(recorded, ms[1])
	}
	var ids []string
	for _, mig := range recorded {
		if _, err := tx.Exec(ctx, `INSERT INTO pgshard_migrations (version, name, checksum) VALUES ($1, $2, $3)`,
			mig.Version, mig.Name, mig.Checksum); err != nil {
			return nil, fmt.Errorf("adopt: record %s: %w", mig.ID(), err)
		}
		ids = append(ids, mig.ID())
	}
	return ids, nil
}

// column is one column of a table as the catalog describes it.
type column struct {
	name, typ string
	notNull   bool
	serial    bool // has an owned sequence (BIGSERIAL)
	inPK      bool
	pkPos     int
	table     string
	position  int // 1-based, among the live columns
}

func (c column) describe() string {
	var attrs []string
	attrs = append(attrs, c.typ)
	if c.notNull {
		attrs = append(attrs, "NOT NULL")
	}
	if c.serial {
		attrs = append(attrs, "serial")
	}
	if c.inPK {
		attrs = append(attrs, "primary key")
	}
	return strings.Join(attrs, " ")
}

// columnsSQL describes the columns of the named tables of one schema.
const columnsSQL = `SELECT c.relname::text, a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       pg_get_serial_sequence(quote_ident(n.nspname) || '.' || quote_ident(c.relname), a.attname) IS NOT NULL,
       COALESCE(a.attnum = ANY (pk.indkey::int2[]), false), COALESCE(array_position(pk.indkey::int2[], a.attnum), -1)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_index pk ON pk.indrelid = c.oid AND pk.indisprimary
WHERE n.nspname = $1 AND c.relname = ANY ($2::text[]) AND c.relkind = 'r'
ORDER BY c.relname, a.attnum`

func columnsOf(ctx context.Context, tx pgx.Tx, schema string) (map[string][]column, error) {
	rows, err := tx.Query(ctx, columnsSQL, schema, storeTables)
	if err != nil {
		return nil, fmt.Errorf("describe the tables of schema %s: %w", schema, err)
	}
	out := map[string][]column{}
	var c column
	_, err = pgx.ForEachRow(rows, []any{&c.table, &c.name, &c.typ, &c.notNull, &c.serial, &c.inPK, &c.pkPos}, func() error {
		c.position = len(out[c.table]) + 1
		out[c.table] = append(out[c.table], c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("describe the tables of schema %s: %w", schema, err)
	}
	return out, nil
}

// compareTables describes the existing tables and the ones mig (0001)
// creates — run in a throw-away schema inside a savepoint that is rolled
// back — and returns every difference.
func compareTables(ctx context.Context, tx pgx.Tx, mig Migration) ([]string, error) {
	var schema string
	if err := tx.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return nil, fmt.Errorf("adopt: %w", err)
	}
	have, err := columnsOf(ctx, tx, schema)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `SAVEPOINT pgshard_adopt_reference`); err != nil {
		return nil, fmt.Errorf("adopt: %w", err)
	}
	want, err := func() (map[string][]column, error) {
		const ref = "pgshard_adopt_reference"
		if _, err := tx.Exec(ctx, `CREATE SCHEMA `+ref); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, ref); err != nil {
			return nil, err
		}
		if err := tx.Conn().PgConn().Exec(ctx, mig.SQL).Close(); err != nil {
			return nil, fmt.Errorf("run %s in a scratch schema: %w", mig.ID(), err)
		}
		return columnsOf(ctx, tx, ref)
	}()
	// Undoes the scratch schema and the search_path (set_config is
	// transactional, so a rolled-back savepoint takes it back).
	if _, rerr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT pgshard_adopt_reference`); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return nil, fmt.Errorf("adopt: the reference tables: %w", err)
	}
	var p []string
	for _, table := range storeTables {
		h, w := have[table], want[table]
		byName := map[string]column{}
		for _, c := range h {
			byName[c.name] = c
		}
		for _, wc := range w {
			hc, ok := byName[wc.name]
			switch {
			case !ok:
				p = append(p, fmt.Sprintf("%s.%s is missing (want %s)", table, wc.name, wc.describe()))
			case hc.describe() != wc.describe():
				p = append(p, fmt.Sprintf("%s.%s is %s, want %s", table, wc.name, hc.describe(), wc.describe()))
			case hc.position != wc.position:
				p = append(p, fmt.Sprintf("%s.%s is column %d, want %d", table, wc.name, hc.position, wc.position))
			case hc.inPK && hc.pkPos != wc.pkPos:
				p = append(p, fmt.Sprintf("%s.%s is in the primary key at another place than in (%s)", table, wc.name, pkCols(w)))
			}
			delete(byName, wc.name)
		}
		for _, hc := range h {
			if _, extra := byName[hc.name]; extra {
				p = append(p, fmt.Sprintf("%s.%s (%s) is not a column of the store's schema", table, hc.name, hc.describe()))
			}
		}
	}
	return p, nil
}

func pkCols(cs []column) string {
	var pk []column
	for _, c := range cs {
		if c.inPK {
			pk = append(pk, c)
		}
	}
	slices.SortFunc(pk, func(a, b column) int { return a.pkPos - b.pkPos })
	names := make([]string, len(pk))
	for i, c := range pk {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}

// bucketSQL is the bucket of the text expression %s among %d buckets, in
// plain SQL (pgshard_bucket does not exist yet when adopting): the value
// shardmap.BucketText computes, Postgres's PARTITION BY HASH for text.
const bucketSQL = `(((hashtextextended(%s, %d)::numeric + 18446744073709551616) %% 18446744073709551616 + %d) %% 18446744073709551616 %% %d)`

// checkPlacement returns a problem for each keyed table holding rows whose
// execution id belongs to another shard's buckets than ad.shard's.
func checkPlacement(ctx context.Context, tx pgx.Tx, ad *adoption) ([]string, error) {
	var ranges []string
	for _, r := range ad.m.Ranges {
		if r.Shard == ad.shard.Name {
			ranges = append(ranges, fmt.Sprintf("b BETWEEN %d AND %d", r.Lo, r.Hi))
		}
	}
	owns := "false"
	if len(ranges) > 0 {
		owns = strings.Join(ranges, " OR ")
	}
	var p []string
	for _, k := range keyedColumns {
		b := fmt.Sprintf(bucketSQL, pgx.Identifier{k.column}.Sanitize(), int64(shardmap.HashPartitionSeed), int64(shardmap.HashCombineConst), ad.m.Buckets)
		var n int64
		if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM (SELECT %s AS b FROM %s) x WHERE NOT (%s)`,
			b, pgx.Identifier{k.table}.Sanitize(), owns)).Scan(&n); err != nil {
			return nil, fmt.Errorf("adopt: check the placement of %s: %w", k.table, err)
		}
		if n > 0 {
			p = append(p, fmt.Sprintf("%d rows of %s have a %s in buckets that map epoch %d gives to other shards than %q (adopt a database as the one shard of a map, then move buckets)",
				n, k.table, k.column, ad.m.Epoch, ad.shard.Name))
		}
	}
	return p, nil
}

// checkCAS looks at an existing harel_commit_cas: it reports whether there
// is one, and the problems that forbid replacing it — pgshard replaces it
// only if it has the seed's signature and behaves as the seed's CAS, so
// that the seed's clients keep working on the adopted database.
func checkCAS(ctx context.Context, tx pgx.Tx) (bool, []string, error) {
	rows, err := tx.Query(ctx, `SELECT oidvectortypes(p.proargtypes), pg_get_function_result(p.oid), p.prokind::text
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE p.proname = 'harel_commit_cas' AND n.nspname = current_schema()`)
	if err != nil {
		return false, nil, fmt.Errorf("adopt: look for harel_commit_cas: %w", err)
	}
	type sig struct{ args, result, kind string }
	var sigs []sig
	var s sig
	if _, err := pgx.ForEachRow(rows, []any{&s.args, &s.result, &s.kind}, func() error { sigs = append(sigs, s); return nil }); err != nil {
		return false, nil, fmt.Errorf("adopt: look for harel_commit_cas: %w", err)
	}
	const wantArgs, wantResult = "text, text, text, integer, text", "boolean"
	switch {
	case len(sigs) == 0:
		return false, nil, nil
	case len(sigs) > 1:
		var all []string
		for _, s := range sigs {
			all = append(all, "harel_commit_cas("+s.args+")")
		}
		return true, []string{"there are several functions named harel_commit_cas: " + strings.Join(all, ", ") + fmt.Sprintf("; pgshard replaces only one harel_commit_cas(%s) → %s", wantArgs, wantResult)}, nil
	case sigs[0].args != wantArgs || sigs[0].result != wantResult || sigs[0].kind != "f":
		return true, []string{fmt.Sprintf("harel_commit_cas(%s) → %s is not the seed's function harel_commit_cas(%s) → %s; pgshard replaces only a function of that signature",
			sigs[0].args, sigs[0].result, wantArgs, wantResult)}, nil
	}
	if p := probeCAS(ctx, tx); p != "" {
		return true, []string{"harel_commit_cas does not behave like the seed's CAS, so pgshard will not replace it: " + p}, nil
	}
	return true, nil, nil
}

// probeCAS calls harel_commit_cas on a fresh id inside a savepoint that is
// rolled back, and returns how it deviates from the seed's CAS ("" if it
// does not): first save inserts version 1; a second first save and a
// stale version return false; the right version updates and records the
// event id.
func probeCAS(ctx context.Context, tx pgx.Tx) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "pgshard-adopt-probe-" + hex.EncodeToString(b[:])
	if _, err := tx.Exec(ctx, `SAVEPOINT pgshard_adopt_probe`); err != nil {
		return err.Error()
	}
	defer func() { _, _ = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT pgshard_adopt_probe`) }()
	steps := []struct {
		old     int
		event   string
		want    bool
		version int // stored afterwards
	}{
		{0, "", true, 1},
		{0, "", false, 1},
		{1, "pgshard-adopt-probe-event", true, 2},
		{1, "", false, 2},
	}
	for i, st := range steps {
		var ok bool
		if err := tx.QueryRow(ctx, `SELECT harel_commit_cas($1, 'pgshard-adopt-probe', $2, $3, $4)`,
			id, fmt.Sprintf(`{"probe":%d}`, i), st.old, st.event).Scan(&ok); err != nil {
			return fmt.Sprintf("call %d (old version %d): %v", i+1, st.old, err)
		}
		var version int
		if err := tx.QueryRow(ctx, `SELECT COALESCE((SELECT version FROM executions WHERE id = $1), 0)`, id).Scan(&version); err != nil {
			return err.Error()
		}
		if ok != st.want || version != st.version {
			return fmt.Sprintf("call %d (old version %d) returned %v and left version %d, want %v and version %d", i+1, st.old, ok, version, st.want, st.version)
		}
	}
	var recorded bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM processed_events WHERE execution_id = $1 AND event_id = 'pgshard-adopt-probe-event')`, id).Scan(&recorded); err != nil {
		return err.Error()
	}
	if !recorded {
		return "a commit with an event id did not record it in processed_events"
	}
	return ""
}
