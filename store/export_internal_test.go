package store

import (
	"context"
	"net"
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
