package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/shardmap"
)

// Range states, as the catalog's ranges.state column holds them (see
// sql/0001_catalog.sql). Push writes every range Owned; the other states
// are for the mover.
const (
	Owned    = "owned"    // the shard owns and serves the range
	Frozen   = "frozen"   // the shard still owns it; writes wait for a move's cut-over
	Incoming = "incoming" // a move is bringing it to the shard, which does not own it yet
	Moved    = "moved"    // the shard owned it until a move's flip
)

// owning reports whether a range in state s belongs to its shard in the
// map (exactly one owning range covers each bucket).
func owning(s string) bool { return s == Owned || s == Frozen }

// ErrConflict is matched (errors.Is) by a *ConflictError.
var ErrConflict = errors.New("catalog epoch conflict")

// ConflictError means a Push lost the compare-and-swap: the catalog's
// epoch was not the one the push expected (another writer pushed first).
// Nothing was written.
type ConflictError struct {
	Expected uint64 // the epoch the push expected to replace
	Found    uint64 // the catalog's epoch
	Pushed   uint64 // the epoch of the map that lost
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("catalog epoch conflict: the catalog is at epoch %d, not %d as this push of epoch %d expected (another writer pushed first); load the catalog's map and retry",
		e.Found, e.Expected, e.Pushed)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// ErrEpochNotGrowing is matched (errors.Is) by an *EpochError.
var ErrEpochNotGrowing = errors.New("the map's epoch does not grow")

// EpochError means a pushed map's epoch is not greater than the epoch it
// would replace: epochs only grow.
type EpochError struct {
	Current uint64 // the epoch the push would replace
	Pushed  uint64
}

func (e *EpochError) Error() string {
	return fmt.Sprintf("the map's epoch must grow: the catalog is at epoch %d and the pushed map has epoch %d (give the map an epoch above %d)",
		e.Current, e.Pushed, e.Current)
}

// Is makes errors.Is(err, ErrEpochNotGrowing) true.
func (e *EpochError) Is(target error) bool { return target == ErrEpochNotGrowing }

// SuccessorError lists why a map cannot follow another: the bucket count
// changed, or a shard kept its name but not its ordinal.
type SuccessorError struct {
	From, To uint64 // epochs
	Problems []string
}

func (e *SuccessorError) Error() string {
	return fmt.Sprintf("map epoch %d cannot follow epoch %d: %s", e.To, e.From, strings.Join(e.Problems, "; "))
}

// CheckSuccessor reports whether next may replace prev in a catalog: its
// epoch is greater, its bucket count is the same (B never changes), and a
// shard present in both has the same ordinal (an ordinal names the shard's
// global sequence values). Both maps must be valid.
func CheckSuccessor(prev, next *shardmap.Map) error {
	if next.Epoch <= prev.Epoch {
		return &EpochError{Current: prev.Epoch, Pushed: next.Epoch}
	}
	var p []string
	if next.Buckets != prev.Buckets {
		p = append(p, fmt.Sprintf("buckets: %d, but the cluster has %d (the bucket count never changes)", next.Buckets, prev.Buckets))
	}
	ord := make(map[string]int, len(prev.Shards))
	for _, s := range prev.Shards {
		ord[s.Name] = s.Ordinal
	}
	for _, s := range next.Shards {
		if o, ok := ord[s.Name]; ok && o != s.Ordinal {
			p = append(p, fmt.Sprintf("shard %q: ordinal %d, but it has ordinal %d (a shard's ordinal never changes)", s.Name, s.Ordinal, o))
		}
	}
	if len(p) > 0 {
		return &SuccessorError{From: prev.Epoch, To: next.Epoch, Problems: p}
	}
	return nil
}

// prepare validates a copy of m for a push replacing epoch expect.
func prepare(m *shardmap.Map, expect uint64) (*shardmap.Map, error) {
	if m == nil {
		return nil, errors.New("push: no map")
	}
	c := m.Clone()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("push: %w", err)
	}
	if c.Epoch > math.MaxInt64 {
		return nil, fmt.Errorf("push: epoch %d does not fit the catalog's BIGINT", c.Epoch)
	}
	if c.Epoch <= expect {
		return nil, fmt.Errorf("push: %w", &EpochError{Current: expect, Pushed: c.Epoch})
	}
	return c, nil
}

// Push writes m as the catalog's map, replacing the generation at epoch
// expect (0: the catalog is empty, and m bootstraps it). It is a
// compare-and-swap: in one transaction it updates the head row WHERE epoch
// = expect, checks m against the generation it replaces (CheckSuccessor),
// and writes m's generation with every range Owned. A push that finds
// another epoch fails with a *ConflictError naming both epochs and writes
// nothing; of two pushers expecting the same epoch exactly one wins. m is
// validated (shardmap's validation) before anything is sent, and its epoch
// must be greater than expect (*EpochError). m itself is not modified.
func (c *Catalog) Push(ctx context.Context, m *shardmap.Map, expect uint64) error {
	next, err := prepare(m, expect)
	if err != nil {
		return err
	}
	if expect > math.MaxInt64 {
		return fmt.Errorf("push: expected epoch %d does not fit the catalog's BIGINT", expect)
	}
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE `+Schema+`.head SET epoch = $1::bigint, updated_at = now() WHERE epoch = $2::bigint`,
			int64(next.Epoch), int64(expect))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			var found int64
			if err := tx.QueryRow(ctx, `SELECT epoch FROM `+Schema+`.head`).Scan(&found); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return errNoHead
				}
				return err
			}
			return &ConflictError{Expected: expect, Found: uint64(found), Pushed: next.Epoch}
		}
		if expect > 0 {
			prev, err := loadGeneration(ctx, tx, `$1::bigint`, int64(expect))
			if err != nil {
				return fmt.Errorf("read the generation at epoch %d: %w", expect, err)
			}
			if err := CheckSuccessor(prev.Map, next); err != nil {
				return err
			}
		}
		return writeGeneration(ctx, tx, next, c.opts.ApplicationName)
	})
	return c.wrap(fmt.Sprintf("push map epoch %d", next.Epoch), err)
}

// writeGeneration inserts m's generation, shards and ranges (all Owned),
// one statement after the other.
func writeGeneration(ctx context.Context, tx pgx.Tx, m *shardmap.Map, by string) error {
	for _, st := range generationStatements(m, by) {
		if _, err := tx.Exec(ctx, st.sql, st.args...); err != nil {
			return err
		}
	}
	return nil
}

// statement is one SQL statement with its arguments.
type statement struct {
	sql  string
	args []any
}

// generationStatements are the statements that write m's generation,
// shards and ranges (all Owned): run one by one (writeGeneration) or
// queued in a pipelined batch (Flip), they write the same rows.
func generationStatements(m *shardmap.Map, by string) []statement {
	n := len(m.Shards)
	names, dsns, poolers := make([]string, n), make([]string, n), make([]string, n)
	ords, pos := make([]int32, n), make([]int32, n)
	for i, s := range m.Shards {
		names[i], dsns[i], poolers[i], ords[i], pos[i] = s.Name, s.DSN, s.PoolerDSN, int32(s.Ordinal), int32(i)
	}
	k := len(m.Ranges)
	shards, los, his := make([]string, k), make([]int32, k), make([]int32, k)
	for i, r := range m.Ranges {
		shards[i], los[i], his[i] = r.Shard, int32(r.Lo), int32(r.Hi)
	}
	return []statement{
		{`INSERT INTO ` + Schema + `.generations (epoch, buckets, pushed_by) VALUES ($1::bigint, $2::int, $3::text)`,
			[]any{int64(m.Epoch), m.Buckets, by}},
		{`INSERT INTO ` + Schema + `.shards (epoch, name, ordinal, dsn, pooler_dsn, position)
		SELECT $1::bigint, * FROM unnest($2::text[], $3::int[], $4::text[], $5::text[], $6::int[])`,
			[]any{int64(m.Epoch), names, ords, dsns, poolers, pos}},
		{`INSERT INTO ` + Schema + `.ranges (epoch, shard, lo, hi, state)
		SELECT $1::bigint, s, lo, hi, 'owned' FROM unnest($2::text[], $3::int[], $4::int[]) AS r(s, lo, hi)`,
			[]any{int64(m.Epoch), shards, los, his}},
	}
}

// RangeState is one range of a generation with its state.
type RangeState struct {
	shardmap.Range
	State string `json:"state"` // Owned, Frozen, Incoming or Moved
}

// Generation is one version of the catalog's map.
type Generation struct {
	// Map holds the owning ranges (Owned and Frozen), validated.
	Map *shardmap.Map
	// Ranges are all the generation's ranges with their states, by Lo.
	Ranges []RangeState
	// PushedAt is when it was written (the catalog server's clock);
	// PushedBy is the writer's application name.
	PushedAt time.Time
	PushedBy string
}

// Load returns the catalog's current map (its Epoch is the catalog's
// epoch), validated. It is one statement, so it reads one consistent
// snapshot. An installed catalog without a map yields ErrEmpty.
func (c *Catalog) Load(ctx context.Context) (*shardmap.Map, error) {
	g, err := c.LoadGeneration(ctx)
	if err != nil {
		return nil, err
	}
	return g.Map, nil
}

// LoadGeneration is Load with the ranges' states and who pushed the map.
func (c *Catalog) LoadGeneration(ctx context.Context) (*Generation, error) {
	g, err := loadGeneration(ctx, c.pool, `(SELECT epoch FROM `+Schema+`.head)`)
	return g, c.wrap("load map", err)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// loadGeneration reads the generation whose epoch the SQL expression
// epochExpr yields, in one statement.
func loadGeneration(ctx context.Context, q querier, epochExpr string, args ...any) (*Generation, error) {
	var (
		epoch          int64
		buckets        *int32
		pushedAt       *time.Time
		pushedBy       *string
		shardsJ, rngsJ []byte
	)
	err := q.QueryRow(ctx, `SELECT e.epoch, g.buckets, g.pushed_at, g.pushed_by,
		    COALESCE((SELECT json_agg(json_build_object('name', s.name, 'ordinal', s.ordinal, 'dsn', s.dsn, 'pooler_dsn', s.pooler_dsn) ORDER BY s.position)
		              FROM `+Schema+`.shards s WHERE s.epoch = e.epoch), '[]')::text,
		    COALESCE((SELECT json_agg(json_build_object('lo', r.lo, 'hi', r.hi, 'shard', r.shard, 'state', r.state) ORDER BY r.lo, r.shard)
		              FROM `+Schema+`.ranges r WHERE r.epoch = e.epoch), '[]')::text
		FROM (SELECT `+epochExpr+` AS epoch) e
		LEFT JOIN `+Schema+`.generations g ON g.epoch = e.epoch`, args...).
		Scan(&epoch, &buckets, &pushedAt, &pushedBy, &shardsJ, &rngsJ)
	if err != nil {
		return nil, err
	}
	switch {
	case epoch == 0:
		return nil, ErrEmpty
	case buckets == nil:
		return nil, fmt.Errorf("the catalog's epoch is %d but it has no generation %d (damaged by hand?)", epoch, epoch)
	}
	g := &Generation{PushedAt: *pushedAt, PushedBy: *pushedBy}
	m := &shardmap.Map{Epoch: uint64(epoch), Buckets: int(*buckets)}
	if err := json.Unmarshal(shardsJ, &m.Shards); err != nil {
		return nil, fmt.Errorf("decode the shards of generation %d: %w", epoch, err)
	}
	if err := json.Unmarshal(rngsJ, &g.Ranges); err != nil {
		return nil, fmt.Errorf("decode the ranges of generation %d: %w", epoch, err)
	}
	owns := make(map[string]bool, len(m.Shards))
	for _, r := range g.Ranges {
		if owning(r.State) {
			m.Ranges = append(m.Ranges, r.Range)
			owns[r.Shard] = true
		}
	}
	// A shard that owns no range (just added, or drained) is Empty: the
	// mark is not stored, it follows from the ranges.
	for i := range m.Shards {
		m.Shards[i].Empty = !owns[m.Shards[i].Name]
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("generation %d: %w", epoch, err)
	}
	g.Map = m
	return g, nil
}

// Epoch returns the catalog's current epoch (0: no map yet), one cheap
// statement.
func (c *Catalog) Epoch(ctx context.Context) (uint64, error) {
	var e int64
	err := c.pool.QueryRow(ctx, `SELECT epoch FROM `+Schema+`.head`).Scan(&e)
	if errors.Is(err, pgx.ErrNoRows) {
		err = errNoHead
	}
	if err != nil {
		return 0, c.wrap("read epoch", err)
	}
	return uint64(e), nil
}
