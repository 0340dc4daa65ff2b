package store

import (
	"net"
	"sync/atomic"
)

// Hooks for the external tests (compiled only with them).

// PlanSQL returns the statements (SQL and arguments) of a complex commit,
// as Commit would send them, for golden tests.
func PlanSQL(id, definitionID, data string, old int, eventID string, emits []Emit, timers []TimerOp,
	spawns []Spawn, trace []byte, traceMax int) (sqls []string, args [][]any) {
	c := commitArgs{id: id, definitionID: definitionID, data: data, old: old, eventID: eventID,
		emits: emits, timers: timers, spawns: spawns, trace: trace, traceMax: traceMax}
	for _, st := range c.plan() {
		sqls = append(sqls, st.sql)
		args = append(args, st.args)
	}
	return sqls, args
}

// CollapseTimers exposes collapseTimers.
var CollapseTimers = collapseTimers

// ParseFoundVersion exposes parseFoundVersion.
var ParseFoundVersion = parseFoundVersion

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
