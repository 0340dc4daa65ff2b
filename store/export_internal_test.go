package store

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Hooks for the external tests (compiled only with them).

// CommitSQL returns the statement and arguments Commit sends for a commit
// (without the statement-timeout prefix), for golden tests.
func CommitSQL(id, definitionID, data string, old int, eventID string, emits []Emit, timers []TimerOp,
	spawns []Spawn, trace []byte, traceMax int) (string, []any) {
	c := commitArgs{id: id, definitionID: definitionID, data: data, old: old, eventID: eventID,
		emits: emits, timers: timers, spawns: spawns, trace: trace, traceMax: traceMax}
	if c.stateOnly() {
		return fastSQL, c.casArgs()
	}
	return commitSQL, c.args()
}

// CollapseTimers exposes collapseTimers.
var CollapseTimers = collapseTimers

// ClassifyCommitError exposes classifyCommitError.
var ClassifyCommitError = classifyCommitError

// CountRoundTrips wraps c like the store's connections (counting from the
// start) and returns the wrapper and its round-trip count.
func CountRoundTrips(c net.Conn) (net.Conn, func() uint64) {
	var n atomic.Uint64
	cc := newCountingConn(c, &n)
	cc.start()
	return cc, n.Load
}

// LoadUnfenced is Load as it was before the fence (migration 0008): the
// same path (batch, timeout, one round trip), the plain point SELECT. For
// BenchmarkFence's baseline.
func LoadUnfenced(ctx context.Context, s *Store, id string) (bool, error) {
	found := false
	err := s.query(ctx, `SELECT definition_id, version, data FROM executions WHERE id = $1::text`, []any{id},
		func(r pgx.Rows) error {
			var def string
			var version int
			var data []byte
			found = true
			return r.Scan(&def, &version, &data)
		})
	return found, err
}

// LoadVariant is Load with one of the fence's alternative read checks, for
// BenchmarkFence: "check-fn" is Load's checked form alone
// (pgshard_fence_check in the WHERE, a One-Time Filter), "exists" puts a
// plain-SQL EXISTS over pgshard_fence in the WHERE (bucket from the
// store; no row sends it to the checked form), "sql-bucket" is Load's
// statement with the bucket computed in SQL (pgshard_fence_bucket)
// instead of by the store. It reports whether the row was found; a
// refusal is an error.
func LoadVariant(ctx context.Context, s *Store, id, variant string) (bool, error) {
	found := false
	scan := func(served **bool) func(pgx.Rows) error {
		return func(r pgx.Rows) error {
			var def *string
			var version *int
			var data []byte
			dest := []any{&def, &version, &data}
			if served != nil {
				dest = append([]any{served}, dest...)
			}
			if err := r.Scan(dest...); err != nil {
				return err
			}
			found = def != nil
			return nil
		}
	}
	checked := func() error { found = false; return s.query(ctx, loadCheckedSQL, []any{id}, scan(nil)) }
	switch variant {
	case "check-fn":
		return found, checked()
	case "exists":
		err := s.fencedRead(ctx, func(served **bool) error {
			err := s.query(ctx, `SELECT definition_id, version, data FROM executions
WHERE id = $1::text AND EXISTS (SELECT 1 FROM pgshard_fence x
    WHERE x.lo <= $2::int AND x.hi >= $2::int AND (NOT x.enabled OR x.state IN ('owned', 'frozen')))`,
				[]any{id, s.bucket(id)}, scan(nil))
			t := true
			if found {
				*served = &t
			}
			return err
		}, checked)
		return found, err
	case "sql-bucket":
		q := strings.ReplaceAll(loadSQL, "$2::int", "pgshard_fence_bucket($1::text, pgshard_fence_nb())")
		err := s.fencedRead(ctx, func(served **bool) error { return s.query(ctx, q, []any{id}, scan(served)) }, checked)
		return found, err
	}
	return false, fmt.Errorf("no read variant %q", variant)
}
