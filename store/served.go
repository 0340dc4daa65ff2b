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

// servedScanSQL wraps a scan (its data columns cols, its FROM and WHERE
// text, which may use fs.served and fs.buckets, and its ORDER BY) so that
// one statement — one snapshot — returns the fence's served set in its
// first row and the scan's rows, at most $limit of them, numbered in
// order. With no matching row it returns the served set alone (every data
// column NULL). Columns: buckets, fenced, los, his (his inclusive), n,
// then cols.
func servedScanSQL(cols, fromWhere, order, limit string) string {
	first := `CASE WHEN coalesce(t.n, 1) = 1 THEN `
	return `WITH fs AS MATERIALIZED (SELECT buckets, served FROM pgshard_fence_served())
SELECT ` + first + `fs.buckets END,
       ` + first + `fs.served IS NOT NULL END,
       ` + first + `(SELECT array_agg(lower(r) ORDER BY lower(r)) FROM unnest(fs.served) r) END,
       ` + first + `(SELECT array_agg(upper(r) - 1 ORDER BY lower(r)) FROM unnest(fs.served) r) END,
       t.*
FROM fs LEFT JOIN LATERAL (
    SELECT row_number() OVER (ORDER BY ` + order + `) AS n, ` + cols + `
    ` + fromWhere + `
    ORDER BY ` + order + `
    LIMIT ` + limit + `) t ON true
ORDER BY t.n`
}

// servedQuery runs a servedScanSQL statement: it fills the served set
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
