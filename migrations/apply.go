package migrations

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/internal/sqlver"
	"github.com/pgshard/pgshard/shardmap"
)

// lockKey is the pg_advisory_xact_lock key that serializes concurrent
// migrators on one database ("pgshard1" in ASCII).
const lockKey int64 = 0x7067736861726431

// ledgerDDL creates the ledger. It runs in its own transaction under the
// advisory lock, because concurrent CREATE TABLE IF NOT EXISTS can still
// collide on the catalog's unique indexes.
const ledgerDDL = `CREATE TABLE IF NOT EXISTS pgshard_migrations (
    version    INT PRIMARY KEY,
    name       TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)`

// Options tune Apply.
type Options struct {
	// ViaPooler migrates through each shard's PgBouncer DSN when it has one.
	// Migrations hold no session state, so this is safe in transaction mode.
	ViaPooler bool
	// Concurrency bounds how many shards are migrated at once (default 16).
	Concurrency int
	// ConnectTimeout bounds each connection attempt (default 10 s).
	ConnectTimeout time.Duration
	// LockTimeout bounds each wait for a lock (the migrators' advisory
	// lock, DDL's and the sequence stride's table locks); default
	// DefaultLockTimeout, negative: no bound. A wait that times out fails
	// with a *TimeoutError naming the backends it waited for.
	LockTimeout time.Duration
	// StatementTimeout bounds each statement; default
	// DefaultStatementTimeout, negative: no bound.
	StatementTimeout time.Duration
	// Adopt takes over a database whose store tables another program made
	// (the seed's Python store): if the tables have exactly 0001's columns
	// and types, every keyed row belongs to the shard's buckets and an
	// existing harel_commit_cas has the seed's signature and semantics,
	// 0001 (and 0002, replacing harel_commit_cas) are recorded as applied
	// instead of run, the later migrations run as usual, and the identity
	// step strides the sequences above the existing rows. Without Adopt
	// such a database is refused (*ForeignTablesError).
	Adopt bool
}

// ShardReport is what Apply did on one shard.
type ShardReport struct {
	Shard    string
	Ordinal  int
	Applied  []string // migrations this run applied
	Adopted  []string // migrations this run recorded for tables (and harel_commit_cas) another program made (Options.Adopt)
	Present  int      // migrations found already applied
	Identity string   // what happened to the identity record
	Fence    string   // the fence as set from the map (SetFence's summary)
	Duration time.Duration
	Err      error
}

// Report is Apply's per-shard result, in map order.
type Report struct {
	Shards []ShardReport
}

// Err joins the shard errors, each naming its shard.
func (r *Report) Err() error {
	var errs []error
	for _, s := range r.Shards {
		if s.Err != nil {
			errs = append(errs, s.Err)
		}
	}
	return errors.Join(errs...)
}

// WriteText prints the report as a table.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tORDINAL\tAPPLIED\tALREADY\tIDENTITY\tTIME\tRESULT")
	for _, s := range r.Shards {
		var ids []string
		for _, a := range s.Adopted {
			ids = append(ids, a+"(adopted)")
		}
		ids = append(ids, s.Applied...)
		applied := "-"
		if len(ids) > 0 {
			applied = strings.Join(ids, ",")
		}
		result := "ok"
		if s.Err != nil {
			result = "FAILED: " + s.Err.Error()
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\n", s.Shard, s.Ordinal, applied, s.Present,
			orDash(s.Identity), s.Duration.Round(time.Millisecond), result)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Apply migrates every shard of m concurrently and writes each shard's
// identity record. It returns the per-shard report and the joined shard
// errors; shards that succeed stay migrated when others fail.
func Apply(ctx context.Context, m *shardmap.Map, opts Options) (*Report, error) {
	return apply(ctx, m, opts, all)
}

func apply(ctx context.Context, m *shardmap.Map, opts Options, ms []Migration) (*Report, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 16
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 10 * time.Second
	}
	rep := &Report{Shards: make([]ShardReport, len(m.Shards))}
	ids := make([]Identity, len(m.Shards))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(opts.Concurrency)
	for i, s := range m.Shards {
		g.Go(func() error {
			start := time.Now()
			dsn := s.DSN
			if opts.ViaPooler && s.PoolerDSN != "" {
				dsn = s.PoolerDSN
			}
			r, id, err := migrateShard(gctx, dsn, opts, s, m, ms)
			r.Shard, r.Ordinal, r.Duration = s.Name, s.Ordinal, time.Since(start)
			if err != nil {
				r.Err = fmt.Errorf("shard %q: %w", s.Name, err)
			}
			rep.Shards[i], ids[i] = r, id
			return nil // one shard's failure does not stop the others
		})
	}
	_ = g.Wait()
	// Two map entries on one database: the identity step of the second
	// usually refuses already; this catches it whichever order they ran in.
	byName := map[string]Identity{}
	for i, r := range rep.Shards {
		if r.Err == nil {
			byName[r.Shard] = ids[i]
		}
	}
	if err := CheckDistinct(byName); err != nil {
		return rep, errors.Join(rep.Err(), err)
	}
	return rep, rep.Err()
}

func migrateShard(ctx context.Context, dsn string, opts Options, s shardmap.Shard, m *shardmap.Map, ms []Migration) (ShardReport, Identity, error) {
	var r ShardReport
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return r, Identity{}, fmt.Errorf("parse dsn: %w", err)
	}
	cfg.ConnectTimeout = opts.ConnectTimeout
	// Unnamed statements only: safe through a transaction pooler.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.RuntimeParams["application_name"] = "pgshard migrate"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return r, Identity{}, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	lim := opts.limits()
	var ad *adoption
	if opts.Adopt {
		ad = &adoption{shard: s, m: m}
	}
	applied, present, adopted, err := migrate(ctx, conn, ms, lim, ad)
	r.Applied, r.Present, r.Adopted = applied, present, adopted
	if err != nil {
		return r, Identity{}, err
	}
	id, action, err := ensureIdentity(ctx, conn, s, m, lim)
	r.Identity = action
	if err != nil {
		return r, id, err
	}
	if !hasFence(ms) { // a test simulating an earlier build
		return r, id, nil
	}
	// The fence follows the map being migrated to, under the migrators'
	// lock (its range locks wait for writers, bounded by LockTimeout).
	err = inLockedTx(ctx, conn, lim, func(tx pgx.Tx) error {
		r.Fence, err = SetFence(ctx, tx, m)
		return err
	})
	return r, id, err
}

// UnknownMigrationsError means the ledger holds migrations this build does
// not know: a newer pgshard migrated the database, and this one must not
// touch it.
type UnknownMigrationsError struct {
	Entries []string // "0007_name" as recorded
}

func (e *UnknownMigrationsError) Error() string {
	return fmt.Sprintf("the database has migrations this build does not know: %s (upgrade pgshard)", strings.Join(e.Entries, ", "))
}

// ChecksumMismatchError means a released migration was edited.
type ChecksumMismatchError struct {
	Migration string
	Ledger    string
	Build     string
}

func (e *ChecksumMismatchError) Error() string {
	return fmt.Sprintf("migration %s was applied with checksum %.12s but this build has %.12s: released migrations must never be edited",
		e.Migration, e.Ledger, e.Build)
}

type ledgerRow struct {
	name, checksum string
}

// Migrate applies the migrations ms that the database's ledger lacks, each
// in its own transaction holding pg_advisory_xact_lock, and records each in
// the ledger. It is idempotent and safe against concurrent migrators and
// through a transaction pooler. Its waits are bounded by
// DefaultLockTimeout and DefaultStatementTimeout. It returns the ids it
// applied and how many were present already.
//
// A database that already has the store's tables without pgshard's ledger
// recording them (another program created them) is refused with a
// *ForeignTablesError; Apply with Options.Adopt takes such a database over.
func Migrate(ctx context.Context, conn *pgx.Conn, ms []Migration) (applied []string, present int, err error) {
	applied, present, _, err = migrate(ctx, conn, ms, Options{}.limits(), nil)
	return applied, present, err
}

// migrate is Migrate; with ad it adopts foreign store tables (see
// adoptStore) and returns the migrations it recorded that way.
func migrate(ctx context.Context, conn *pgx.Conn, ms []Migration, lim limits, ad *adoption) (applied []string, present int, adopted []string, err error) {
	if err := inLockedTx(ctx, conn, lim, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, ledgerDDL)
		return err
	}); err != nil {
		return nil, 0, nil, fmt.Errorf("create ledger: %w", err)
	}
	var ledger map[int]ledgerRow
	if err := inTx(ctx, conn, lim, func(tx pgx.Tx) error {
		var err error
		ledger, err = readLedger(ctx, tx)
		return err
	}); err != nil {
		return nil, 0, nil, err
	}
	if err := checkLedger(ledger, ms); err != nil {
		return nil, 0, nil, err
	}
	for _, mig := range ms {
		if _, ok := ledger[mig.Version]; ok {
			present++
			continue
		}
		if slices.Contains(adopted, mig.ID()) {
			continue
		}
		done := false
		err := inLockedTx(ctx, conn, lim, func(tx pgx.Tx) error {
			// Another migrator may have applied it while we waited.
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM pgshard_migrations WHERE version = $1`, mig.Version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				done = true
				return nil
			}
			if mig.Version == 1 {
				existing, err := existingStoreTables(ctx, tx)
				if err != nil {
					return err
				}
				if len(existing) > 0 {
					if ad == nil {
						return &ForeignTablesError{Tables: existing}
					}
					adopted, err = adoptStore(ctx, tx, ms, existing, ad)
					return err
				}
			}
			// The simple protocol runs the file's statements in one message.
			if err := tx.Conn().PgConn().Exec(ctx, mig.SQL).Close(); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO pgshard_migrations (version, name, checksum) VALUES ($1, $2, $3)`,
				mig.Version, mig.Name, mig.Checksum)
			return err
		})
		if err != nil {
			return applied, present, nil, fmt.Errorf("migration %s: %w", mig.ID(), err)
		}
		switch {
		case done:
			present++
		case !slices.Contains(adopted, mig.ID()):
			applied = append(applied, mig.ID())
		}
	}
	return applied, present, adopted, nil
}

func readLedger(ctx context.Context, tx pgx.Tx) (map[int]ledgerRow, error) {
	rows, err := tx.Query(ctx, `SELECT version, name, checksum FROM pgshard_migrations ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	ledger := map[int]ledgerRow{}
	var v int
	var r ledgerRow
	_, err = pgx.ForEachRow(rows, []any{&v, &r.name, &r.checksum}, func() error {
		ledger[v] = r
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	return ledger, nil
}

func checkLedger(ledger map[int]ledgerRow, ms []Migration) error {
	rows := make(map[int]sqlver.Recorded, len(ledger))
	for v, r := range ledger {
		rows[v] = sqlver.Recorded{Name: r.name, Checksum: r.checksum}
	}
	files := make([]sqlver.File, len(ms))
	for i, m := range ms {
		files[i] = sqlver.File{Number: m.Version, Name: m.Name, SQL: m.SQL, Checksum: m.Checksum}
	}
	unknown, edited := sqlver.Check(rows, files)
	if edited != nil {
		return &ChecksumMismatchError{Migration: edited.File.ID(), Ledger: edited.Ledger, Build: edited.File.Checksum}
	}
	if len(unknown) > 0 {
		return &UnknownMigrationsError{Entries: unknown}
	}
	return nil
}

// globalSequences are the sequences strided by shard ordinal.
var globalSequences = []struct{ table, column string }{{"outbox", "seq"}, {"spawns", "seq"}}

// ensureIdentity writes the shard's identity record on first migrate and
// strides the global sequences for its ordinal, or checks an existing
// record against the map and advances its map epoch.
//
// Striding happens in the transaction that writes the record, with outbox
// and spawns locked against writers (LOCK TABLE ... IN EXCLUSIVE MODE:
// reads go on, inserts wait), so no row can take an un-strided value
// between reading the tables and altering their sequences. Rows written
// before — after migration 0001 created the tables, by any client, or
// under an earlier build whose stride was set unlocked — whose seq names
// another ordinal are re-numbered to strided values above every existing
// seq (never reusing a value a relay may still ack); each shard's later
// migrates re-check and repair such rows the same way.
func ensureIdentity(ctx context.Context, conn *pgx.Conn, s shardmap.Shard, m *shardmap.Map, lim limits) (Identity, string, error) {
	var id Identity
	var action string
	err := inLockedTx(ctx, conn, lim, func(tx pgx.Tx) error {
		var err error
		id, err = ReadIdentity(ctx, tx)
		switch {
		case errors.Is(err, ErrNoIdentity):
			if _, err := tx.Exec(ctx, `LOCK TABLE outbox, spawns IN EXCLUSIVE MODE`); err != nil {
				return fmt.Errorf("LOCK TABLE outbox, spawns IN EXCLUSIVE MODE (to stride their sequences): %w", err)
			}
			moved, err := strideAll(ctx, tx, s.Ordinal)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO pgshard_identity (shard_name, ordinal, buckets, map_epoch) VALUES ($1, $2, $3, $4)`,
				s.Name, s.Ordinal, m.Buckets, int64(m.Epoch)); err != nil {
				return fmt.Errorf("write identity: %w", err)
			}
			action = "created" + moved
			id, err = ReadIdentity(ctx, tx)
			return err
		case err != nil:
			return err
		}
		if err := id.Check(s, m); err != nil {
			return err
		}
		action = "verified"
		if id.MapEpoch < m.Epoch {
			action = fmt.Sprintf("epoch %d→%d", id.MapEpoch, m.Epoch)
		}
		stray, err := strayRows(ctx, tx, s.Ordinal)
		if err != nil {
			return err
		}
		if stray {
			if _, err := tx.Exec(ctx, `LOCK TABLE outbox, spawns IN EXCLUSIVE MODE`); err != nil {
				return fmt.Errorf("LOCK TABLE outbox, spawns IN EXCLUSIVE MODE (to re-stride rows): %w", err)
			}
			moved, err := strideAll(ctx, tx, s.Ordinal)
			if err != nil {
				return err
			}
			action += moved
		}
		for _, g := range globalSequences {
			if err := checkStride(ctx, tx, g.table, g.column, s.Ordinal); err != nil {
				return err
			}
		}
		if id.MapEpoch < m.Epoch {
			if _, err := tx.Exec(ctx, `UPDATE pgshard_identity SET map_epoch = $1, updated_at = now()`, int64(m.Epoch)); err != nil {
				return fmt.Errorf("advance map epoch: %w", err)
			}
			id.MapEpoch = m.Epoch
		}
		return nil
	})
	return id, action, err
}

// namesOtherOrdinal is the SQL condition of a seq that does not name
// ordinal $1 (a seq names (seq-1) mod SeqStride).
var namesOtherOrdinal = fmt.Sprintf(`(seq - 1) %% %d <> $1::int OR seq < 1`, shardmap.SeqStride)

// strayRows reports whether outbox or spawns hold a seq that names another
// ordinal than k.
func strayRows(ctx context.Context, tx pgx.Tx, k int) (bool, error) {
	for _, g := range globalSequences {
		var stray bool
		if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE %s)`,
			pgx.Identifier{g.table}.Sanitize(), namesOtherOrdinal), k).Scan(&stray); err != nil {
			return false, fmt.Errorf("check the stride of %s rows: %w", g.table, err)
		}
		if stray {
			return true, nil
		}
	}
	return false, nil
}

// strideAll strides both global sequences and their tables' rows for
// ordinal k (the tables are locked by the caller) and describes what it
// re-numbered ("" for nothing, else "; re-strided 3 outbox rows, ...").
func strideAll(ctx context.Context, tx pgx.Tx, k int) (string, error) {
	var moved []string
	for _, g := range globalSequences {
		n, err := strideSequence(ctx, tx, g.table, g.column, k)
		if err != nil {
			return "", err
		}
		if n > 0 {
			moved = append(moved, fmt.Sprintf("%d %s %s", n, g.table, plural(n, "row", "rows")))
		}
	}
	if len(moved) == 0 {
		return "", nil
	}
	return "; re-strided " + strings.Join(moved, ", "), nil
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// strideSequence makes table.column's sequence yield k+1, k+1+1024, ...
// above every value in the table and every value it handed out before,
// after moving the rows whose value names another ordinal to strided
// values above those. To keep the
// rows' order (a relay drains a shard oldest first), every row from the
// first such one on moves, in order (a moved row that a relay had already
// read is delivered again under its new seq: at least once, deduplicated
// by its event id). The caller holds a lock that keeps writers out. It
// returns how many rows it moved.
func strideSequence(ctx context.Context, tx pgx.Tx, table, column string, k int) (int64, error) {
	seq, err := sequenceOf(ctx, tx, table, column)
	if err != nil {
		return 0, err
	}
	tbl, col := pgx.Identifier{table}.Sanitize(), pgx.Identifier{column}.Sanitize()
	// Above every row and every value the sequence handed out: a row may
	// be gone (delivered, acked) while a relay still holds its seq.
	var maxVal int64
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT GREATEST((SELECT COALESCE(max(%s), 0) FROM %s),
       (SELECT COALESCE(last_value, 0) FROM pg_sequences WHERE format('%%I.%%I', schemaname, sequencename)::regclass = $1::regclass))`,
		col, tbl), seq).Scan(&maxVal); err != nil {
		return 0, fmt.Errorf("stride %s: %w", seq, err)
	}
	next := int64(k) + 1
	if maxVal >= next {
		next += ((maxVal-next)/shardmap.SeqStride + 1) * shardmap.SeqStride
	}
	// New values are above every existing one, so no move collides with
	// a row (the primary key is checked row by row) and no value a relay
	// may still hold is ever handed out again.
	tag, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %[1]s t SET %[2]s = $2::bigint + (s.n - 1) * %[3]d
FROM (SELECT %[2]s AS old, row_number() OVER (ORDER BY %[2]s) AS n FROM %[1]s
      WHERE %[2]s >= (SELECT min(%[2]s) FROM %[1]s WHERE %[4]s)) s
WHERE t.%[2]s = s.old`, tbl, col, shardmap.SeqStride, strings.ReplaceAll(namesOtherOrdinal, "seq", col)), k, next)
	if err != nil {
		return 0, fmt.Errorf("re-stride the rows of %s: %w", table, err)
	}
	moved := tag.RowsAffected()
	next += moved * shardmap.SeqStride
	_, err = tx.Exec(ctx, fmt.Sprintf(`ALTER SEQUENCE %s INCREMENT BY %d MINVALUE 1 START WITH %d RESTART WITH %d`,
		seq, shardmap.SeqStride, next, next))
	if err != nil {
		return 0, fmt.Errorf("stride %s: %w", seq, err)
	}
	return moved, nil
}

func checkStride(ctx context.Context, tx pgx.Tx, table, column string, k int) error {
	seq, err := sequenceOf(ctx, tx, table, column)
	if err != nil {
		return err
	}
	var inc, start int64
	var last *int64
	err = tx.QueryRow(ctx, `SELECT increment_by, start_value, last_value FROM pg_sequences
		WHERE format('%I.%I', schemaname, sequencename)::regclass = $1::regclass`, seq).Scan(&inc, &start, &last)
	if err != nil {
		return fmt.Errorf("check stride of %s: %w", seq, err)
	}
	if inc != shardmap.SeqStride || (start-1)%shardmap.SeqStride != int64(k) || (last != nil && (*last-1)%shardmap.SeqStride != int64(k)) {
		return fmt.Errorf("sequence %s is not strided for ordinal %d (increment %d, start %d): it would hand out values that name another shard", seq, k, inc, start)
	}
	return nil
}

func sequenceOf(ctx context.Context, tx pgx.Tx, table, column string) (string, error) {
	var seq *string
	if err := tx.QueryRow(ctx, `SELECT pg_get_serial_sequence($1, $2)`, table, column).Scan(&seq); err != nil {
		return "", fmt.Errorf("find sequence of %s.%s: %w", table, column, err)
	}
	if seq == nil {
		return "", fmt.Errorf("%s.%s has no sequence", table, column)
	}
	return *seq, nil
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
