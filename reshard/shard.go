package reshard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgshard/pgshard/shardmap"
)

// fenceLockClass is the class of the fence's range locks (migration 0008:
// pg_advisory_xact_lock(1885824627, lo), 'pgfs').
const fenceLockClass = 1885824627

// table is one keyed table of the store (ARCHITECTURE.md §1/§2): key is
// the SQL expression of its rows' key (the execution id whose bucket
// places the row); cols are the columns copied, types their SQL types
// (the catch-up moves them as text); pk is how many of cols, from the
// first, make the primary key. spawns and outbox leave out their seq: the
// destination numbers a copied row from its own sequence, so that the seq
// names the shard holding the row; their change records name the
// source's seq (pgshard_move_seqs maps it to the copy).
type table struct {
	name  string
	key   string
	cols  []string
	types []string
	pk    int
	seq   bool // numbered afresh on the destination (pgshard_move_seqs maps them)
}

var tables = []table{
	{"executions", "id", []string{"id", "definition_id", "data", "version"}, []string{"text", "text", "text", "int"}, 1, false},
	{"processed_events", "execution_id", []string{"execution_id", "event_id"}, []string{"text", "text"}, 2, false},
	{"timers", "execution_id", []string{"execution_id", "path", "fire_at"}, []string{"text", "text", "float8"}, 2, false},
	{"trace", "execution_id", []string{"execution_id", "idx", "entry"}, []string{"text", "int", "text"}, 2, false},
	{"spawns", "parent_id", []string{"parent_id", "child_id", "root_path", "context"}, []string{"text", "text", "text", "text"}, 0, true},
	{"outbox", "pgshard_move_outbox_from(event)", []string{"target_id", "event"}, []string{"text", "text"}, 0, true},
}

// shard is the mover's connection to one shard (its direct DSN).
type shard struct {
	name string
	pool *pgxpool.Pool
}

func openShard(ctx context.Context, s shardmap.Shard) (*shard, error) {
	cfg, err := pgxpool.ParseConfig(s.DSN)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", s.Name, err)
	}
	cfg.MaxConns = 6
	cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.ConnConfig.RuntimeParams["application_name"] = "pgshard reshard"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", s.Name, err)
	}
	return &shard{name: s.Name, pool: pool}, nil
}

// setFence sets buckets lo..hi of the shard's fence (pgshard_move_fence,
// migration 0009), provided they are in one of the states from.
func (s *shard) setFence(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, lo, hi int, state, owner string, epoch uint64, from []string, lock bool) error {
	if q == nil {
		q = s.pool
	}
	var summary string
	err := q.QueryRow(ctx, `SELECT pgshard_move_fence($1::int, $2::int, $3::text, $4::text, $5::bigint, $6::text[], $7::bool)`,
		lo, hi, state, owner, int64(epoch), from, lock).Scan(&summary)
	if err != nil {
		return fmt.Errorf("shard %s: fence %d-%d → %s: %w", s.name, lo, hi, state, err)
	}
	return nil
}

// fenceState returns the state of the fence row that holds bucket lo.
func (s *shard) fenceState(ctx context.Context, lo int) (string, error) {
	var st string
	err := s.pool.QueryRow(ctx, `SELECT state FROM pgshard_fence WHERE lo <= $1::int ORDER BY lo DESC LIMIT 1`, lo).Scan(&st)
	if err != nil {
		return "", fmt.Errorf("shard %s: read fence at bucket %d: %w", s.name, lo, err)
	}
	return st, nil
}

// inRange is the WHERE condition "t's key is in buckets $1..$2" ($3 is
// the bucket count).
func inRange(t table) string {
	return fmt.Sprintf("pgshard_fence_bucket(%s, $3::int) BETWEEN $1::int AND $2::int", t.key)
}

// copyTable deletes on dst the rows of t matching where and copies those
// of src (read in its snapshot) there. It returns the rows copied.
func copyTable(ctx context.Context, src, dst pgx.Tx, t table, p *pacer, where string, args ...any) (int64, error) {
	if _, err := dst.Exec(ctx, "DELETE FROM "+t.name+" WHERE "+where, args...); err != nil {
		return 0, fmt.Errorf("clear %s on the destination: %w", t.name, err)
	}
	rows, err := src.Query(ctx, "SELECT "+strings.Join(t.cols, ", ")+" FROM "+t.name+" WHERE "+where, args...)
	if err != nil {
		return 0, fmt.Errorf("read %s on the source: %w", t.name, err)
	}
	defer rows.Close()
	n, err := dst.CopyFrom(ctx, pgx.Identifier{t.name}, t.cols, pgx.CopyFromFunc(func() ([]any, error) {
		if !rows.Next() {
			return nil, rows.Err()
		}
		if err := p.tick(ctx); err != nil {
			return nil, err
		}
		return rows.Values()
	}))
	if err != nil {
		return 0, fmt.Errorf("copy %s: %w", t.name, err)
	}
	rows.Close()
	return n, rows.Err()
}

// copySeqTable brings dst's copies of t's source rows matching where (read
// in src's snapshot) to what the snapshot holds: a copy this move made
// already stays with its seq (its content refreshed), a row not copied
// yet gets a fresh copy numbered from dst's sequence and mapped in
// pgshard_move_seqs, and copies of rows the source no longer has go. A
// copy that a relay acked on dst meanwhile (delivered) is not made again:
// a copy run twice — a mover resumed at its copy — is once.
func copySeqTable(ctx context.Context, src, dst pgx.Tx, t table, move int64, p *pacer, where string, args ...any) (int64, error) {
	rows, err := src.Query(ctx, "SELECT seq, "+strings.Join(t.cols, ", ")+" FROM "+t.name+" WHERE "+where, args...)
	if err != nil {
		return 0, fmt.Errorf("read %s on the source: %w", t.name, err)
	}
	seqs := []int64{}
	cols := make([][]*string, len(t.cols))
	for rows.Next() {
		var seq int64
		vals := make([]*string, len(t.cols))
		dest := []any{&seq}
		for i := range vals {
			dest = append(dest, &vals[i])
		}
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return 0, fmt.Errorf("read %s on the source: %w", t.name, err)
		}
		seqs = append(seqs, seq)
		for i := range vals {
			cols[i] = append(cols[i], vals[i])
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read %s on the source: %w", t.name, err)
	}
	if _, err := dst.Exec(ctx, `WITH m AS (DELETE FROM pgshard_move_seqs WHERE move_id = $1::bigint AND tbl = $2::text AND NOT (src_seq = ANY($3::bigint[])) RETURNING dst_seq)
			DELETE FROM `+t.name+` WHERE seq IN (SELECT dst_seq FROM m)`, move, t.name, seqs); err != nil {
		return 0, fmt.Errorf("clear %s copies on the destination: %w", t.name, err)
	}
	// Written in chunks, so that the pacer can pause between them.
	for lo := 0; lo < len(seqs); lo += seqCopyChunk {
		hi := min(lo+seqCopyChunk, len(seqs))
		chunk := make([][]*string, len(cols))
		for i := range cols {
			chunk[i] = cols[i][lo:hi]
		}
		q, args2 := seqUpsertSQL(t, move, seqs[lo:hi], chunk)
		if _, err := dst.Exec(ctx, q, args2...); err != nil {
			return 0, fmt.Errorf("copy %s: %w", t.name, err)
		}
		if err := p.tick(ctx); err != nil {
			return 0, err
		}
	}
	return int64(len(seqs)), nil
}

// seqCopyChunk is the rows of outbox or spawns one statement of the copy
// inserts.
const seqCopyChunk = 1000

// seqUpsertSQL is the statement that brings to dst t's source rows (their
// seqs, and their columns as text): a source seq the move has mapped
// (pgshard_move_seqs) keeps its copy, whose columns it sets in place — or,
// if that copy is gone (a relay acked it on dst: delivered), stays
// without one; an unmapped seq gets a copy numbered from dst's sequence,
// and its mapping. Outbox and spawn rows are written once and never
// updated by the store, so a copy made is right for good; an event is
// never copied twice by one move (at most one redelivery per move).
func seqUpsertSQL(t table, move int64, seqs []int64, cols [][]*string) (string, []any) {
	params := []string{"$3::bigint[]"}
	names := []string{"src_seq"}
	args := []any{move, t.name, seqs}
	set := make([]string, len(t.cols))
	dcols, scols := make([]string, len(t.cols)), make([]string, len(t.cols))
	for i, c := range t.cols {
		params = append(params, fmt.Sprintf("$%d::text[]", i+4))
		names = append(names, c)
		args = append(args, cols[i])
		set[i] = fmt.Sprintf("%s = s.%s", c, c)
		dcols[i], scols[i] = "d."+c, fmt.Sprintf("s.%s::%s", c, t.types[i])
	}
	cl := strings.Join(t.cols, ", ")
	// A copy already equal to its source row is not written again: the
	// usual replay (the record of a row inserted before the copy) is
	// one, and the last catch-up runs under the range's lock.
	return `WITH s AS (SELECT u.*, ms.dst_seq FROM unnest(` + strings.Join(params, ", ") + `) AS u(` + strings.Join(names, ", ") + `)
			LEFT JOIN pgshard_move_seqs ms ON ms.move_id = $1::bigint AND ms.tbl = $2::text AND ms.src_seq = u.src_seq),
		upd AS (UPDATE ` + t.name + ` d SET ` + strings.Join(set, ", ") + ` FROM s WHERE s.dst_seq IS NOT NULL AND d.seq = s.dst_seq
			AND (` + strings.Join(dcols, ", ") + `) IS DISTINCT FROM (` + strings.Join(scols, ", ") + `)),
		n AS MATERIALIZED (SELECT s.*, nextval(pg_get_serial_sequence('` + t.name + `', 'seq')) AS new_seq FROM s WHERE s.dst_seq IS NULL),
		ins AS (INSERT INTO ` + t.name + ` (seq, ` + cl + `) SELECT new_seq, ` + cl + ` FROM n)
		INSERT INTO pgshard_move_seqs (move_id, tbl, src_seq, dst_seq) SELECT $1::bigint, $2::text, src_seq, new_seq FROM n`, args
}

// pair runs f with a REPEATABLE READ read-only transaction on src (one
// snapshot for every table) and a transaction on dst, committing dst if
// f succeeds.
func pair(ctx context.Context, src, dst *shard, f func(stx, dtx pgx.Tx) error) error {
	stx, err := src.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("shard %s: %w", src.name, err)
	}
	defer func() { _ = stx.Rollback(context.WithoutCancel(ctx)) }()
	dtx, err := dst.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("shard %s: %w", dst.name, err)
	}
	defer func() { _ = dtx.Rollback(context.WithoutCancel(ctx)) }()
	if err := f(stx, dtx); err != nil {
		return err
	}
	if err := dtx.Commit(ctx); err != nil {
		return fmt.Errorf("shard %s: commit the copy: %w", dst.name, err)
	}
	return nil
}

// copyRange copies every row of buckets lo..hi from src to dst, from one
// snapshot of src, replacing what dst held of them (for outbox and
// spawns: the copies move made). It returns the rows copied.
func copyRange(ctx context.Context, src, dst *shard, move int64, lo, hi, buckets int, p *pacer) (int64, error) {
	var total int64
	err := pair(ctx, src, dst, func(stx, dtx pgx.Tx) error {
		p.begin()
		for _, t := range tables {
			var n int64
			var err error
			if t.seq {
				n, err = copySeqTable(ctx, stx, dtx, t, move, p, inRange(t), lo, hi, buckets)
			} else {
				n, err = copyTable(ctx, stx, dtx, t, p, inRange(t), lo, hi, buckets)
			}
			if err != nil {
				return err
			}
			total += n
		}
		return nil
	})
	return total, err
}

// round is where one catch-up round runs: a connection to the source and
// one to the destination — the pools' (acquired for the round), or those
// a freeze acquired before it requested the range's lock, so that no
// connection is dialled (or pinged) while writers wait. Under a freeze
// (keep) the records a round replays stay on the source: the next round
// reads past them (after), the clean-up drops them with the capture, and
// an abandoned freeze's next catch-up replays them again (a replay
// replaces rows, so twice is once) — one round trip fewer in the freeze.
type round struct {
	src, dst *shard
	sc, dc   *pgxpool.Conn // nil: acquired from the pools for the round
	keep     bool
	after    int64 // under keep: the last record replayed so far
	paced    bool  // the rounds pause as Options.DutyCycle says (see catchUpUntil)
}

// conns returns the round's connections (acquiring those not given) and
// their release.
func (r *round) conns(ctx context.Context) (sc, dc *pgxpool.Conn, release func(), err error) {
	sc, dc = r.sc, r.dc
	var own []*pgxpool.Conn
	release = func() {
		for _, c := range own {
			c.Release()
		}
	}
	if sc == nil {
		if sc, err = r.src.pool.Acquire(ctx); err != nil {
			return nil, nil, release, fmt.Errorf("shard %s: %w", r.src.name, err)
		}
		own = append(own, sc)
	}
	if dc == nil {
		if dc, err = r.dst.pool.Acquire(ctx); err != nil {
			return nil, nil, release, fmt.Errorf("shard %s: %w", r.dst.name, err)
		}
		own = append(own, dc)
	}
	return sc, dc, release, nil
}

// catchUp replays up to batch change records of move (migration 0010:
// each names one row of one table by its primary key). In one snapshot of
// the source it reads the records and the current rows they name — one
// query per table for all of the round's rows (an index probe each: the
// replay costs what changed, not the keys' history); then on the
// destination, one statement per table, it upserts the rows the source
// has and deletes those it has not (for outbox and spawns: replaces or
// deletes the copies mapped to the recorded source seqs); then, unless
// r.keep, it deletes the records it replayed. Round trips: the source's
// snapshot opened with the records' read, then the rows' reads with its
// end (two, pipelined); the destination's writes in one pipelined batch,
// which Postgres runs as one implicit transaction (all or nothing); the
// records' delete. It returns the records replayed (0: none were left)
// and the rows written on the destination.
func catchUp(ctx context.Context, r *round, move int64, lo, hi, buckets, batch int) (int, int64, error) {
	src, dst := r.src, r.dst
	sc, dc, release, err := r.conns(ctx)
	defer release()
	if err != nil {
		return 0, 0, err
	}
	ids, changed, found, order, err := readRound(ctx, sc, src.name, move, r.after, lo, hi, buckets, batch)
	if err != nil || len(ids) == 0 {
		return 0, 0, err
	}
	// The planner's choice for a few hundred keys of a small table can be
	// a sequential scan (or a hash join over one); an index probe per
	// changed row is the plan whatever the table's size, so each side's
	// replay statements run without sequential scans (set_config local:
	// the round's transactions only).
	writes := &pgx.Batch{}
	writes.Queue(noSeqScan)
	for i, t := range order {
		for _, w := range replaySQL(t, move, changed[t.name], found[i]) {
			writes.Queue(w.sql, w.args...)
		}
	}
	var written int64
	bw := dc.SendBatch(ctx, writes)
	for i := range writes.Len() {
		tag, err := bw.Exec()
		if err != nil {
			_ = bw.Close()
			return 0, 0, fmt.Errorf("replay on %s: %w", dst.name, err)
		}
		if i > 0 {
			written += tag.RowsAffected()
		}
	}
	if err := bw.Close(); err != nil {
		return 0, 0, fmt.Errorf("replay on %s: %w", dst.name, err)
	}
	if r.keep {
		r.after = ids[len(ids)-1]
		return len(ids), written, nil
	}
	if _, err := sc.Exec(ctx, `DELETE FROM pgshard_move_rows WHERE id = ANY($1::bigint[])`, ids); err != nil {
		return 0, written, fmt.Errorf("shard %s: drop the changes replayed: %w", src.name, err)
	}
	return len(ids), written, nil
}

// readRound reads on the source, in one REPEATABLE READ snapshot, up to
// batch change records of move after record after (oldest first) and the
// current rows they name, per table (in order), as readRowsSQL reads them.
// Two round trips: BEGIN with the records' read, then the rows' reads with
// the snapshot's end.
func readRound(ctx context.Context, sc *pgxpool.Conn, name string, move, after int64, lo, hi, buckets, batch int) (
	ids []int64, changed map[string][][]string, found [][][]*string, order []table, err error) {
	open := false
	defer func() {
		if open {
			// Best effort: a connection released inside a transaction is
			// closed by its pool.
			_, _ = sc.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	first := &pgx.Batch{}
	first.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	first.Queue(`SELECT id, tbl, pk FROM pgshard_move_rows WHERE move_id = $1::bigint AND id > $2::bigint ORDER BY id LIMIT $3::int`, move, after, batch)
	br := sc.SendBatch(ctx, first)
	open = true
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, nil, nil, nil, fmt.Errorf("shard %s: %w", name, err)
	}
	rows, err := br.Query()
	if err == nil {
		ids, changed, err = readChanges(rows)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("read the changes on %s: %w", name, err)
	}
	reads := &pgx.Batch{}
	reads.Queue(noSeqScan)
	for _, t := range tables {
		if pks := changed[t.name]; len(pks) > 0 {
			q, args := readRowsSQL(t, pks, lo, hi, buckets)
			reads.Queue(q, args...)
			order = append(order, t)
		}
	}
	reads.Queue("COMMIT")
	found = make([][][]*string, len(order))
	br = sc.SendBatch(ctx, reads)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, nil, nil, nil, fmt.Errorf("shard %s: %w", name, err)
	}
	for i, t := range order {
		rows, err := br.Query()
		if err == nil {
			found[i], err = scanText(rows, len(t.cols)+b2i(t.seq))
		}
		if err != nil {
			_ = br.Close()
			return nil, nil, nil, nil, fmt.Errorf("read %s on %s: %w", t.name, name, err)
		}
	}
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, nil, nil, nil, fmt.Errorf("shard %s: end the snapshot: %w", name, err)
	}
	if err := br.Close(); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("read the changed rows on %s: %w", name, err)
	}
	open = false
	return ids, changed, found, order, nil
}

// noSeqScan turns sequential scans off for the rest of a transaction.
const noSeqScan = `SELECT set_config('enable_seqscan', 'off', true)`

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// readChanges reads change records (id, tbl, pk): their ids and, per
// table, the distinct primary keys they name.
func readChanges(rows pgx.Rows) ([]int64, map[string][][]string, error) {
	defer rows.Close()
	var ids []int64
	changed := map[string][][]string{}
	seen := map[string]bool{}
	for rows.Next() {
		var id int64
		var tbl string
		var pk []string
		if err := rows.Scan(&id, &tbl, &pk); err != nil {
			return nil, nil, err
		}
		ids = append(ids, id)
		if k := tbl + "\x00" + strings.Join(pk, "\x00"); !seen[k] {
			seen[k] = true
			changed[tbl] = append(changed[tbl], pk)
		}
	}
	return ids, changed, rows.Err()
}

// scanText reads rows of n text columns (NULL: nil).
func scanText(rows pgx.Rows, n int) ([][]*string, error) {
	defer rows.Close()
	var out [][]*string
	for rows.Next() {
		vals := make([]*string, n)
		dest := make([]any, n)
		for i := range vals {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, vals)
	}
	return out, rows.Err()
}

// column is column i of pks (each a primary key as text).
func column(pks [][]string, i int) []string {
	c := make([]string, len(pks))
	for j, pk := range pks {
		c[j] = pk[i]
	}
	return c
}

// textColumn is column i of rows, for a text[] parameter.
func textColumn(rows [][]*string, i int) []*string {
	c := make([]*string, len(rows))
	for j, r := range rows {
		c[j] = r[i]
	}
	return c
}

// readRowsSQL is the query that reads on the source the current rows of t
// named by pks, every column as text (for outbox and spawns: seq first,
// and only rows still in buckets lo..hi).
func readRowsSQL(t table, pks [][]string, lo, hi, buckets int) (string, []any) {
	sel := make([]string, len(t.cols))
	for i, c := range t.cols {
		sel[i] = c + "::text"
	}
	if t.seq {
		seqs := seqsOf(pks)
		return fmt.Sprintf("SELECT seq::text, %s FROM %s WHERE seq = ANY($1::bigint[]) AND pgshard_fence_bucket(%s, $4::int) BETWEEN $2::int AND $3::int",
			strings.Join(sel, ", "), t.name, t.key), []any{seqs, lo, hi, buckets}
	}
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s", strings.Join(sel, ", "), t.name, pkIn(t, 1)), pkArgs(t, pks)
}

// pkIn is the condition "t's primary key is one of the keys given as
// text[] parameters $first, $first+1, …" (one per key column).
func pkIn(t table, first int) string {
	if t.pk == 1 {
		return fmt.Sprintf("%s = ANY($%d::text[]::%s[])", t.cols[0], first, t.types[0])
	}
	params, cast := make([]string, t.pk), make([]string, t.pk)
	for i := range t.pk {
		params[i] = fmt.Sprintf("$%d::text[]", first+i)
		cast[i] = fmt.Sprintf("k%d::%s", i, t.types[i])
	}
	names := make([]string, t.pk)
	for i := range names {
		names[i] = fmt.Sprintf("k%d", i)
	}
	return fmt.Sprintf("(%s) IN (SELECT %s FROM unnest(%s) AS k(%s))", strings.Join(t.cols[:t.pk], ", "),
		strings.Join(cast, ", "), strings.Join(params, ", "), strings.Join(names, ", "))
}

// pkArgs are pks as pkIn's parameters.
func pkArgs(t table, pks [][]string) []any {
	args := make([]any, t.pk)
	for i := range t.pk {
		args[i] = column(pks, i)
	}
	return args
}

type stmt struct {
	sql  string
	args []any
}

// replaySQL is what replays on the destination the rows of t named by
// pks, given found, the rows the source holds of them (as readRowsSQL
// reads them): those found upserted, the others deleted.
func replaySQL(t table, move int64, pks [][]string, found [][]*string) []stmt {
	if t.seq {
		// The rows the source no longer has lose their copies; those it
		// has are upserted by their mapping (seqUpsertSQL: a copy made
		// stays, one a relay acked on dst is not made again).
		srcSeqs := make([]int64, len(found))
		has := make(map[int64]bool, len(found))
		cols := make([][]*string, len(t.cols))
		for j, r := range found {
			if r[0] != nil {
				srcSeqs[j], _ = strconv.ParseInt(*r[0], 10, 64)
				has[srcSeqs[j]] = true
			}
			for i := range t.cols {
				cols[i] = append(cols[i], r[i+1])
			}
		}
		var gone []int64
		for _, seq := range seqsOf(pks) {
			if !has[seq] {
				gone = append(gone, seq)
			}
		}
		var out []stmt
		if len(gone) > 0 {
			out = append(out, stmt{`WITH m AS (DELETE FROM pgshard_move_seqs WHERE move_id = $1::bigint AND tbl = $2::text AND src_seq = ANY($3::bigint[]) RETURNING dst_seq)
			DELETE FROM ` + t.name + ` WHERE seq IN (SELECT dst_seq FROM m)`, []any{move, t.name, gone}})
		}
		if len(found) > 0 {
			q, args := seqUpsertSQL(t, move, srcSeqs, cols)
			out = append(out, stmt{q, args})
		}
		return out
	}
	present := map[string]bool{}
	for _, r := range found {
		present[pkText(r[:t.pk])] = true
	}
	var absent [][]string
	for _, pk := range pks {
		if !present[strings.Join(pk, "\x00")] {
			absent = append(absent, pk)
		}
	}
	args := pkArgs(t, absent)
	if len(absent) == 0 {
		args = pkArgs(t, [][]string{})
	}
	n := len(args)
	vals := make([]string, len(t.cols))
	names := make([]string, len(t.cols))
	for i, c := range t.cols {
		args = append(args, textColumn(found, i))
		vals[i] = fmt.Sprintf("$%d::text[]", n+i+1)
		names[i] = fmt.Sprintf("%s::%s", c, t.types[i])
	}
	conflict := "DO NOTHING"
	if len(t.cols) > t.pk {
		set := make([]string, 0, len(t.cols)-t.pk)
		for _, c := range t.cols[t.pk:] {
			set = append(set, c+" = EXCLUDED."+c)
		}
		conflict = "DO UPDATE SET " + strings.Join(set, ", ")
	}
	q := fmt.Sprintf(`WITH gone AS (DELETE FROM %s WHERE %s)
		INSERT INTO %s (%s) SELECT %s FROM unnest(%s) AS s(%s) ON CONFLICT (%s) %s`,
		t.name, pkIn(t, 1), t.name, strings.Join(t.cols, ", "), strings.Join(names, ", "),
		strings.Join(vals, ", "), strings.Join(t.cols, ", "), strings.Join(t.cols[:t.pk], ", "), conflict)
	return []stmt{{q, args}}
}

// seqsOf reads the seqs that outbox and spawns change records name.
func seqsOf(pks [][]string) []int64 {
	seqs := make([]int64, 0, len(pks))
	for _, pk := range pks {
		if n, err := strconv.ParseInt(pk[0], 10, 64); err == nil {
			seqs = append(seqs, n)
		}
	}
	return seqs
}

// pkText joins a row's primary key columns as readChanges keys them.
func pkText(cols []*string) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		if c != nil {
			parts[i] = *c
		}
	}
	return strings.Join(parts, "\x00")
}

// dropSeqMap deletes move's seq map on dst (its copies stay).
func dropSeqMap(ctx context.Context, dst *shard, move int64) error {
	if _, err := dst.pool.Exec(ctx, `DELETE FROM pgshard_move_seqs WHERE move_id = $1::bigint`, move); err != nil {
		return fmt.Errorf("shard %s: drop the seq map of move %d: %w", dst.name, move, err)
	}
	return nil
}

// pending counts the change records of move not replayed yet.
func pending(ctx context.Context, src *shard, move int64) (int64, error) {
	var n int64
	err := src.pool.QueryRow(ctx, `SELECT count(*) FROM pgshard_move_rows WHERE move_id = $1::bigint`, move).Scan(&n)
	return n, err
}

// cleanup is what a deleteRange did: rows deleted, in batches.
type cleanup struct {
	rows    int64
	batches int
}

// deleteRange deletes every row of buckets lo..hi on s, table by table, in
// committed batches of at most batch rows (deleteBatches), paced by p
// (nil: not paced) between batches: no transaction holds the range's row
// locks, or its WAL, for more than one batch, and the shard keeps
// serving its other buckets meanwhile. The deletes are idempotent: a
// deleteRange cut off (its mover died) and run again finishes the job.
func deleteRange(ctx context.Context, s *shard, lo, hi, buckets, batch int, p *pacer) (cleanup, error) {
	var c cleanup
	p.begin()
	for _, t := range tables {
		if err := deleteBatches(ctx, s, t, lo, hi, buckets, batch, p, &c); err != nil {
			return c, fmt.Errorf("shard %s: delete buckets %d-%d: %w", s.name, lo, hi, err)
		}
	}
	return c, nil
}

// deleteBatchSQL deletes, in one statement (its own transaction), the
// rows of t in buckets $1..$2 among the first $5 whose ctid is past $4,
// and returns how many it selected, how many it deleted (fewer when a
// relay's ack deleted some meanwhile) and the highest ctid selected ($4
// if none).
//
// No table has an index on its key's bucket (migrations: the keys'
// indexes are on the key itself, or none for outbox's emitter), so the
// range's predicate filters a scan. The ctid cursor makes each batch a
// TID range scan from where the last one stopped, so a sweep reads each
// table about once; without it every batch would rescan from the first
// page, past the dead rows of the batches before (a quadratic sweep).
func deleteBatchSQL(t table) string {
	return "WITH s AS (SELECT ARRAY(SELECT ctid FROM " + t.name + " WHERE ctid > $4::tid AND " + inRange(t) + " LIMIT $5::int) AS a)," +
		" d AS (DELETE FROM " + t.name + " WHERE ctid = ANY((SELECT a FROM s)::tid[]) RETURNING ctid)" +
		" SELECT cardinality(a), (SELECT count(*) FROM d), coalesce((SELECT max(x) FROM unnest(a) AS x), $4::tid)::text FROM s"
}

// firstTID is below every row's ctid (line pointers start at 1).
const firstTID = "(0,0)"

// deleteBatches deletes t's rows of buckets lo..hi on s in batches (c
// counts them), in sweeps of the heap: a sweep starts at the first page,
// each batch goes on from the ctid the one before reached, and a batch
// that selects less than a full batch ends the sweep. A sweep whose first
// batch ends it saw every row of the range left, whatever order the scan
// returned them in, and deleted them all: it is the last. The scan
// returns rows in ctid order, so the second sweep is normally the last,
// one batch that deletes nothing. The batches are bounded by the rows of
// the range counted at the start (the source's fence refuses new ones):
// a sweep that is not the last begins with a full batch, so there are at
// most count/batch full batches and one partial batch per sweep.
func deleteBatches(ctx context.Context, s *shard, t table, lo, hi, buckets, batch int, p *pacer, c *cleanup) error {
	var count int64
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+t.name+" WHERE "+inRange(t), lo, hi, buckets).Scan(&count); err != nil {
		return fmt.Errorf("count %s: %w", t.name, err)
	}
	if count == 0 {
		return nil
	}
	full := int(count / int64(batch))
	limit := 2*full + 3
	q := deleteBatchSQL(t)
	cursor := firstTID
	for range limit {
		if err := p.tick(ctx); err != nil {
			return err
		}
		var n, deleted int64
		var last string
		if err := s.pool.QueryRow(ctx, q, lo, hi, buckets, cursor, batch).Scan(&n, &deleted, &last); err != nil {
			return fmt.Errorf("delete %s: %w", t.name, err)
		}
		// n, the rows selected, decides (a full selection may hide more
		// rows past it even when an ack deleted some of it meanwhile).
		c.rows += deleted
		c.batches++
		switch {
		case n >= int64(batch):
			cursor = last
		case cursor == firstTID:
			return nil
		default:
			cursor = firstTID
		}
	}
	return fmt.Errorf("delete %s: %d rows of the range were counted, and %d batches of at most %d did not delete them all (rows keep appearing in a moved range?)",
		t.name, count, limit, batch)
}

// withLockTimeout runs f in a transaction on s with lock_timeout d (SET
// LOCAL: nothing outlives the transaction).
func withLockTimeout(ctx context.Context, s *shard, d time.Duration, f func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1::text, true)`, fmt.Sprintf("%dms", max(1, d.Milliseconds()))); err != nil {
			return err
		}
		return f(tx)
	})
}

// isLockTimeout reports whether err is Postgres's lock_not_available
// (55P03), which lock_timeout raises.
func isLockTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}
