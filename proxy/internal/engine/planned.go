package engine

// planned is what planning a Query message or a pipeline produces: the
// value the executor runs (runExchange, fanExec, the local answers of
// Session.finish). The planner writes it and nothing else of the
// session's: the bytes of the one backend write (bw), the items that
// say how each answer reaches the client (items) with the proxy's own
// answers (lbuf[item.lo:item.hi]), and the portals the pipeline bound.
// Its buffers are kept from one plan to the next (no allocation on the
// hot path): a plan is read before the session plans again.
type planned struct {
	bw      []byte
	items   []item
	lbuf    []byte
	portals []portalInfo
	// bwHold, when set, is where bw's bytes that must wait for a COPY
	// FROM STDIN to finish begin, and bwHoldItem the first item they
	// answer (planner.holdCommit, exchange.go).
	bwHold, bwHoldItem int
	// acquire, when on, is the backend the executor acquires before it
	// runs the plan (acquirestep.go): planning did not.
	acquire acquireStep
	// cursors are where the pipeline's Executes of the session's
	// cursors leave them (cursor.go).
	cursors []cursorAt
}

// reset empties the plan, keeping its buffers.
func (o planned) reset() planned {
	return planned{bw: o.bw[:0], items: o.items[:0], lbuf: o.lbuf[:0], portals: o.portals[:0],
		acquire: acquireStep{snap: o.acquire.snap}, cursors: o.cursors[:0]}
}

// addLocal appends a local item answering with the bytes appended to
// lbuf since lo.
func (o *planned) addLocal(lo int, eff *effect) {
	o.items = append(o.items, item{kind: itLocal, lo: int32(lo), hi: int32(len(o.lbuf)), eff: eff})
}
