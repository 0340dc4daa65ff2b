package store

// A scan's served set: what a shard's fence served in the scan's own
// snapshot (ARCHITECTURE.md §6). A scan over all rows (due timers,
// pending spawns) reads each shard in its own snapshot, filtered to the
// buckets the shard serves; a range move flips the range on the source
// and on the destination in two transactions, so a fan-out that read the
// destination before its flip and the source after it would miss the
// range (the other order would read it twice). The store's *Served scans
// return the served set they filtered by, from the same statement, so
// that the router can check that the shards' sets cover every bucket
// exactly once and read again when they do not.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// BucketRange is the buckets Lo..Hi, both included.
type BucketRange struct{ Lo, Hi int }

// Served is the set of buckets a shard's scan was filtered by.
type Served struct {
	// Fenced is false when the shard's fence is off: the scan returned
	// every row of the shard, and Buckets and Ranges are empty.
	Fenced bool
	// Buckets is the bucket count of the shard's fence.
	Buckets int
	// Ranges are the served buckets, ascending and disjoint.
	Ranges []BucketRange
}

// scanSQL is a scan over all rows of a shard in two forms, both filtered
// to the buckets the fence serves: plain, the scan alone (the form a
// client of the proxy can send: the proxy fans it out and merges it), and
// served, which also returns the served set (see newScan).
type scanSQL struct{ plain, served string }

// newScan builds a scan of the data columns cols from from (whose where
// may use fs.served and fs.buckets), ordered by order, at most limit rows.
// Its served form returns, in one statement — one snapshot — the fence's
// served set in its first row and the scan's rows numbered in order; with
// no matching row it returns the served set alone (every data column
// NULL). Its columns: buckets, fenced, los, his (his inclusive), n, then
// cols.
func newScan(cols, from, where, order, limit string) scanSQL {
	first := `CASE WHEN coalesce(t.n, 1) = 1 THEN `
	return scanSQL{
		plain: `SELECT ` + cols + `
FROM ` + from + `
CROSS JOIN pgshard_fence_served() fs
WHERE ` + where + `
ORDER BY ` + order + `
LIMIT ` + limit,
		served: `WITH fs AS MATERIALIZED (SELECT buckets, served FROM pgshard_fence_served())
SELECT ` + first + `fs.buckets END,
       ` + first + `fs.served IS NOT NULL END,
       ` + first + `(SELECT array_agg(lower(r) ORDER BY lower(r)) FROM unnest(fs.served) r) END,
       ` + first + `(SELECT array_agg(upper(r) - 1 ORDER BY lower(r)) FROM unnest(fs.served) r) END,
       t.*
FROM fs LEFT JOIN LATERAL (
    SELECT row_number() OVER (ORDER BY ` + order + `) AS n, ` + cols + `
    FROM ` + from + `
    WHERE ` + where + `
    ORDER BY ` + order + `
    LIMIT ` + limit + `) t ON true
ORDER BY t.n`,
	}
}

// scan runs q — its served form when served is set, else its plain form
// (and returns no served set) — calling row for every row with dest, the
// data columns' destinations (pointers to pointers or to slices: the
// served form's served-only row has NULLs), filled.
func (s *Store) scan(ctx context.Context, q scanSQL, served bool, args []any, dest []any, row func() error) (Served, error) {
	if served {
		return s.servedQuery(ctx, q.served, args, dest, row)
	}
	return Served{}, s.query(ctx, q.plain, args, func(r pgx.Rows) error {
		if err := r.Scan(dest...); err != nil {
			return err
		}
		return row()
	})
}

// servedQuery runs a scan's served form: it fills the served set
// from the first row and calls row with the data columns' destinations
// filled for every row that has one. dest are the data columns'
// destinations (pointers to pointers: the served-only row has NULLs).
func (s *Store) servedQuery(ctx context.Context, sql string, args []any, dest []any, row func() error) (Served, error) {
	var sv Served
	var buckets *int32
	var fenced *bool
	var los, his []int32
	var n *int64
	all := append([]any{&buckets, &fenced, &los, &his, &n}, dest...)
	first := true
	err := s.query(ctx, sql, args, func(r pgx.Rows) error {
		if err := r.Scan(all...); err != nil {
			return err
		}
		if first {
			first = false
			if fenced == nil {
				return fmt.Errorf("the scan's first row has no served set")
			}
			sv = Served{Fenced: *fenced}
			if buckets != nil {
				sv.Buckets = int(*buckets)
			}
			if len(los) != len(his) {
				return fmt.Errorf("the served set has %d lower and %d upper bounds", len(los), len(his))
			}
			for i := range los {
				sv.Ranges = append(sv.Ranges, BucketRange{Lo: int(los[i]), Hi: int(his[i])})
			}
		}
		if n == nil {
			return nil
		}
		return row()
	})
	if err != nil {
		return Served{}, err
	}
	if first {
		return Served{}, fmt.Errorf("the scan returned no row (not even its served set)")
	}
	return sv, nil
}
