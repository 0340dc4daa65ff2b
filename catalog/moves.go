package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/shardmap"
)

// Move phases, as the journal's moves.phase column holds them (see
// sql/0001_catalog.sql). A move goes planned → copying → catching_up →
// frozen → flipped → cleaning → done; a freeze abandoned goes back to
// catching_up; an abort goes aborting → aborted (only before flipped).
const (
	PhasePlanned    = "planned"
	PhaseCopying    = "copying"
	PhaseCatchingUp = "catching_up"
	PhaseFrozen     = "frozen"
	PhaseFlipped    = "flipped"
	PhaseCleaning   = "cleaning"
	PhaseDone       = "done"
	PhaseAborting   = "aborting"
	PhaseAborted    = "aborted"
	PhaseFailed     = "failed"
)

// Finished reports whether phase ends a move (done or aborted).
func Finished(phase string) bool { return phase == PhaseDone || phase == PhaseAborted }

// Flipped reports whether a move in phase has passed its commit point
// (the catalog names its destination as the owner): it can only be
// completed, never rolled back.
func Flipped(phase string) bool {
	return phase == PhaseFlipped || phase == PhaseCleaning || phase == PhaseDone
}

// MoveRecord is one row of the move journal.
type MoveRecord struct {
	ID         int64
	Lo, Hi     int
	From, To   string
	FromEpoch  uint64 // the generation the move was planned on
	ToEpoch    uint64 // the generation its flip wrote (0 before)
	Phase      string
	Owner      string
	Attempts   int   // freezes tried
	RowsCopied int64 // rows copied and replayed
	Detail     json.RawMessage
	Error      string // the last failure, "" when none
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt *time.Time
}

// Move returns the move as a shardmap.Move.
func (m MoveRecord) Move() shardmap.Move {
	return shardmap.Move{Lo: m.Lo, Hi: m.Hi, From: m.From, To: m.To}
}

// ErrMovesPending means a plan was refused because moves of an earlier
// plan are not finished (apply or abort them first).
var ErrMovesPending = errors.New("moves of an earlier plan are not finished: run `pgshard reshard apply` to finish them or `pgshard reshard abort` to roll them back")

// PlanMoves records moves, planned on the generation at epoch, as one new
// plan: it fails with ErrMovesPending when any move of the journal is
// unfinished, and with a *ConflictError when the catalog is no longer at
// epoch. It returns the recorded moves.
func (c *Catalog) PlanMoves(ctx context.Context, epoch uint64, moves []shardmap.Move) ([]MoveRecord, error) {
	var out []MoveRecord
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var cur int64
		if err := tx.QueryRow(ctx, `SELECT epoch FROM `+Schema+`.head FOR UPDATE`).Scan(&cur); err != nil {
			return err
		}
		if uint64(cur) != epoch {
			return &ConflictError{Expected: epoch, Found: uint64(cur), Pushed: epoch}
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+Schema+`.moves WHERE phase NOT IN ('done', 'aborted')`).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w (%d unfinished)", ErrMovesPending, n)
		}
		for _, mv := range moves {
			if _, err := tx.Exec(ctx, `INSERT INTO `+Schema+`.moves (lo, hi, from_shard, to_shard, from_epoch)
				VALUES ($1::int, $2::int, $3::text, $4::text, $5::bigint)`,
				mv.Lo, mv.Hi, mv.From, mv.To, int64(epoch)); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, movesSelect+` WHERE phase NOT IN ('done', 'aborted') ORDER BY id`)
		if err != nil {
			return err
		}
		out, err = scanMoves(rows)
		return err
	})
	if err != nil {
		return nil, c.wrap("plan moves", err)
	}
	return out, nil
}

const movesSelect = `SELECT id, lo, hi, from_shard, to_shard, from_epoch, coalesce(to_epoch, 0), phase, coalesce(owner, ''),
	attempts, rows_copied, detail::text, coalesce(error, ''), created_at, updated_at, finished_at FROM ` + Schema + `.moves`

func scanMoves(rows pgx.Rows) ([]MoveRecord, error) {
	var out []MoveRecord
	for rows.Next() {
		var m MoveRecord
		var fe, te int64
		var detail string
		if err := rows.Scan(&m.ID, &m.Lo, &m.Hi, &m.From, &m.To, &fe, &te, &m.Phase, &m.Owner,
			&m.Attempts, &m.RowsCopied, &detail, &m.Error, &m.CreatedAt, &m.UpdatedAt, &m.FinishedAt); err != nil {
			rows.Close()
			return nil, err
		}
		m.FromEpoch, m.ToEpoch, m.Detail = uint64(fe), uint64(te), json.RawMessage(detail)
		out = append(out, m)
	}
	return out, rows.Err()
}

// Moves lists the journal's moves by id; all of them, or only the
// unfinished ones.
func (c *Catalog) Moves(ctx context.Context, unfinishedOnly bool) ([]MoveRecord, error) {
	q := movesSelect
	if unfinishedOnly {
		q += ` WHERE phase NOT IN ('done', 'aborted')`
	}
	rows, err := c.pool.Query(ctx, q+` ORDER BY id`)
	if err != nil {
		return nil, c.wrap("list moves", err)
	}
	ms, err := scanMoves(rows)
	return ms, c.wrap("list moves", err)
}

// MoveUpdate is a journal step: the move's new phase and what else it
// records. Zero fields are left as they are, except Error, which is
// always written ("" clears it).
type MoveUpdate struct {
	Phase       string
	Owner       string
	AddAttempts int
	AddRows     int64
	Detail      json.RawMessage // merged into the move's detail (jsonb ||)
	Freezes     []FreezeRecord  // appended to the detail's "freezes", in the same statement
	Error       string
}

// ErrMovePhase is matched (errors.Is) when a journal step finds the move
// in another phase than the one it expects (another mover moved it on).
var ErrMovePhase = errors.New("the move is not in the expected phase")

// UpdateMove records a journal step of move id, provided the move is in
// one of the phases from (none: any unfinished and unflipped phase). A
// flipped move can only go on to cleaning and done; a finished one never
// changes.
func (c *Catalog) UpdateMove(ctx context.Context, id int64, from []string, u MoveUpdate) error {
	if u.Phase == "" {
		return errors.New("update move: no phase")
	}
	if u.Detail == nil {
		u.Detail = json.RawMessage(`{}`)
	}
	if len(from) == 0 {
		from = []string{PhasePlanned, PhaseCopying, PhaseCatchingUp, PhaseFrozen, PhaseAborting, PhaseFailed}
	}
	var errText *string
	if u.Error != "" {
		errText = &u.Error
	}
	freezes, err := freezesParam(u.Freezes)
	if err != nil {
		return fmt.Errorf("journal move %d → %s: %w", id, u.Phase, err)
	}
	tag, err := c.pool.Exec(ctx, `UPDATE `+Schema+`.moves SET phase = $2::text,
		    owner = coalesce(nullif($3::text, ''), owner), attempts = attempts + $4::int,
		    rows_copied = rows_copied + $5::bigint, detail = detail || $6::jsonb || `+appendFreezes(`$9`)+`, error = $7::text,
		    updated_at = now(), finished_at = CASE WHEN $2::text IN ('done', 'aborted') THEN now() END
		WHERE id = $1::bigint AND phase = ANY($8::text[])`,
		id, u.Phase, u.Owner, u.AddAttempts, u.AddRows, string(u.Detail), errText, from, freezes)
	if err != nil {
		return c.wrap(fmt.Sprintf("journal move %d → %s", id, u.Phase), err)
	}
	if tag.RowsAffected() == 0 {
		var phase string
		err := c.pool.QueryRow(ctx, `SELECT phase FROM `+Schema+`.moves WHERE id = $1::bigint`, id).Scan(&phase)
		if err != nil {
			return c.wrap(fmt.Sprintf("journal move %d → %s", id, u.Phase), err)
		}
		return fmt.Errorf("journal move %d → %s: it is %s, not one of %v: %w", id, u.Phase, phase, from, ErrMovePhase)
	}
	return nil
}

// appendFreezes is the jsonb (an object to merge into the old detail)
// that appends the freezes of parameter p, a JSON array, to the detail's
// "freezes"; '{}' when p is empty.
func appendFreezes(p string) string {
	return `CASE WHEN jsonb_array_length(` + p + `::jsonb) = 0 THEN '{}'::jsonb
		ELSE jsonb_build_object('freezes', CASE WHEN jsonb_typeof(detail->'freezes') = 'array' THEN detail->'freezes' ELSE '[]'::jsonb END || ` + p + `::jsonb) END`
}

// RecordFreezes appends freezes to move id's detail without a journal
// step (its phase, error and times unchanged): for a freeze that ended in
// an error with no step to journal it with. A finished move is left as
// it is.
func (c *Catalog) RecordFreezes(ctx context.Context, id int64, fs []FreezeRecord) error {
	if len(fs) == 0 {
		return nil
	}
	freezes, err := freezesParam(fs)
	if err != nil {
		return fmt.Errorf("record the freezes of move %d: %w", id, err)
	}
	_, err = c.pool.Exec(ctx, `UPDATE `+Schema+`.moves SET detail = detail || `+appendFreezes(`$2`)+`
		WHERE id = $1::bigint AND phase NOT IN ('done', 'aborted')`, id, freezes)
	return c.wrap(fmt.Sprintf("record the freezes of move %d", id), err)
}

// Reassign returns m's successor (epoch + 1) in which buckets lo..hi,
// all owned by from in m, belong to to; adjacent ranges of one shard are
// merged, and each shard's Empty mark follows from its ranges.
func Reassign(m *shardmap.Map, lo, hi int, from, to string) (*shardmap.Map, error) {
	if lo < 0 || hi < lo || hi >= m.Buckets {
		return nil, fmt.Errorf("buckets %d-%d are not in 0-%d", lo, hi, m.Buckets-1)
	}
	if _, err := m.ShardByName(to); err != nil {
		return nil, err
	}
	owner := make([]string, m.Buckets)
	for _, r := range m.Ranges {
		for b := r.Lo; b <= r.Hi; b++ {
			owner[b] = r.Shard
		}
	}
	for b := lo; b <= hi; b++ {
		if owner[b] != from {
			return nil, fmt.Errorf("bucket %d belongs to %q, not to %q", b, owner[b], from)
		}
		owner[b] = to
	}
	out := m.Clone()
	out.Epoch = m.Epoch + 1
	out.Ranges = nil
	owns := map[string]bool{}
	for b, s := range owner {
		owns[s] = true
		if k := len(out.Ranges); k > 0 && out.Ranges[k-1].Shard == s {
			out.Ranges[k-1].Hi = b
			continue
		}
		out.Ranges = append(out.Ranges, shardmap.Range{Lo: b, Hi: b, Shard: s})
	}
	for i := range out.Shards {
		out.Shards[i].Empty = !owns[out.Shards[i].Name]
	}
	// Validate rebuilds the lookup tables Clone copied from m.
	if err := out.Validate(); err != nil {
		return nil, err
	}
	return out, nil
}
