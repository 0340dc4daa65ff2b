package verify

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Fence is a shard's fence as its tables hold it (migration 0008,
// ARCHITECTURE.md §6): the configuration row and every range row, read
// in the dump's snapshot. The fence check (check_fence.go) compares it
// with the final map.
type Fence struct {
	// NoTables: the shard has no fence tables (before migration 0008).
	NoTables bool `json:"no_tables,omitempty"`
	// NoConfig: the table pgshard_fence_config has no row.
	NoConfig bool `json:"no_config,omitempty"`
	// Enabled, Epoch and Buckets are the configuration row's (Buckets 0:
	// NULL, a fence never set).
	Enabled bool   `json:"enabled"`
	Epoch   uint64 `json:"epoch"`
	Buckets int    `json:"buckets"`
	// Rows are the rows of pgshard_fence ordered by lo.
	Rows []FenceRow `json:"rows"`
}

// FenceRow is one row of pgshard_fence: buckets Lo..Hi (inclusive) in
// State (owned, frozen, incoming, moved) as of the map at Epoch; Owner is
// the shard owning them as of Epoch ("" when NULL). Enabled mirrors the
// configuration row's.
type FenceRow struct {
	Lo      int    `json:"lo"`
	Hi      int    `json:"hi"`
	State   string `json:"state"`
	Epoch   uint64 `json:"epoch"`
	Owner   string `json:"owner,omitempty"`
	Enabled bool   `json:"enabled"`
}

// Fence row states.
const (
	FenceOwned    = "owned"
	FenceFrozen   = "frozen"
	FenceIncoming = "incoming"
	FenceMoved    = "moved"
)

// readFence reads the shard's fence with plain SELECTs (not the fence's
// functions, the code under test); NoTables when the shard has none. The
// tables are looked up first, so a shard without them does not
// abort the dump's transaction.
func readFence(ctx context.Context, tx pgx.Tx) (*Fence, error) {
	var has bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass('pgshard_fence_config') IS NOT NULL AND to_regclass('pgshard_fence') IS NOT NULL`).Scan(&has); err != nil {
		return nil, fmt.Errorf("read fence: %w", err)
	}
	if !has {
		return &Fence{NoTables: true}, nil
	}
	f := &Fence{Rows: []FenceRow{}}
	var epoch int64
	var buckets *int
	err := tx.QueryRow(ctx, `SELECT enabled, epoch, buckets FROM pgshard_fence_config`).Scan(&f.Enabled, &epoch, &buckets)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		f.NoConfig = true
	case err != nil:
		return nil, fmt.Errorf("read pgshard_fence_config: %w", err)
	default:
		f.Epoch = uint64(max(epoch, 0))
		if buckets != nil {
			f.Buckets = *buckets
		}
	}
	err = scan(ctx, tx, "pgshard_fence", `SELECT lo, hi, state, epoch, coalesce(owner, ''), enabled FROM pgshard_fence ORDER BY lo`, nil,
		func(r pgx.Rows) error {
			var x FenceRow
			var e int64
			if err := r.Scan(&x.Lo, &x.Hi, &x.State, &e, &x.Owner, &x.Enabled); err != nil {
				return err
			}
			x.Epoch = uint64(max(e, 0))
			f.Rows = append(f.Rows, x)
			return nil
		})
	if err != nil {
		return nil, err
	}
	return f, nil
}
