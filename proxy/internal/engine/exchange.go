package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// ---- the response engine ----

// itemKind says what a planned step is: a local answer, or one message
// sent to the backend whose responses the engine reads.
type itemKind uint8

const (
	itLocal      itemKind = iota // answer from lbuf[lo:hi], apply eff
	itParse                      // ParseComplete
	itBind                       // BindComplete
	itDescStmt                   // ParameterDescription + RowDescription/NoData
	itDescPortal                 // RowDescription/NoData
	itExecute                    // rows ... CommandComplete/EmptyQuery/PortalSuspended
	itClose                      // CloseComplete
	itFlush                      // nothing
	itSync                       // ReadyForQuery
	itQuery                      // everything up to ReadyForQuery
	itAbort                      // an injected failing Parse: its error is replaced by lbuf[lo:hi]
	itLead                       // a fan-out lead (fanlead.go): p.fan.leads[lo], answered by fanExec.run
	// itQueryHead: the fence's assert inlined first in the client's query
	// string (appendClientQuery): its answers up to its CommandComplete,
	// or its error (then the string's ReadyForQuery is the next item's).
	itQueryHead
)

// extended reports whether the backend skips this kind after an error
// until Sync.
func (k itemKind) extended() bool { return k >= itParse && k <= itFlush || k == itAbort }

type itemFlags uint8

const (
	fSwallow    itemFlags = 1 << iota // drop the non-error responses
	fRFQ                              // forward this item's ReadyForQuery (the client's)
	fReplay                           // the replay of a deferred transaction
	fClientPart                       // client's message after a replay: drop a 25P02 caused by a failed replay
	fReplaceErr                       // replace the backend error by lbuf[lo:hi]
	fDropNoData                       // drop a NoData answer (Describe sent for the proxy's own use)
	// fStale: a Bind of a statement the client prepared before a schema
	// change the proxy saw. The proxy parsed its text again, so Postgres
	// answers a changed column count with 08P01 "bind message has N result
	// formats but query has M columns" where, on the client's own
	// statement, it says 0A000 "cached plan must not change result type":
	// the client gets the latter, and prepares the statement again.
	fStale
	// fFence: the assert that opened the backend transaction; a PS001
	// answering it may be retried (fenceretry.go).
	fFence
)

// item is one planned step of an exchange.
type item struct {
	kind   itemKind
	flags  itemFlags
	lo, hi int32
	eff    *effect
	// cs is a statement-cache entry: confirmed by ParseComplete, dropped
	// when the statement fails in a way that needs re-preparing.
	cs *backend.CachedStmt
	// posShift: the length of an assert inlined ahead of the client's
	// query string; error and notice positions are moved back by it.
	posShift int32
	// vs, with itDescStmt, is the client's statement described: its
	// answer's result shape is kept in it (staledesc.go).
	vs *vstmt
	// rows, with itBind, is what the portal's rows will be when their
	// binary values may carry type OIDs (relabelvalues.go).
	rows *portalRows
}

// exchangeResult says how an exchange ended.
type exchangeResult struct {
	// status is the last backend ReadyForQuery status (0 if none was read).
	status byte
	// errored: an error response was sent to the client.
	errored bool
	// lost: the backend connection failed (it was discarded).
	lost bool
	// fence: the fence refused the assert that opened the transaction
	// and the exchange is retried: nothing of it is the client's
	// (fenceretry.go).
	fence bool
}

// runExchange runs the plan pl: sends pl.bw to bc and answers s's client
// item by item (pl.items): one exchange. explicit: the client's transaction is
// explicit (a lost backend fails it). It returns an error only when the
// client connection failed.
func runExchange(ctx context.Context, s *Session, pl *planned, bc *backend.Conn, explicit bool) (exchangeResult, error) {
	x := exchanger{s: s, pl: pl, bc: bc, explicit: explicit, rl: relabelFor(ctx, s, bc.Pool)}
	return x.run()
}

// run is the exchange (runExchange).
func (x *exchanger) run() (exchangeResult, error) {
	s, bc := x.s, x.bc
	// A COPY FROM STDIN the proxy wrapped (settings preamble): the COMMIT
	// after it may be sent only once the copy is done (the backend in
	// COPY mode takes nothing else): once the items before it are
	// answered (planner.holdCommit).
	var rest []byte
	restItem := -1
	out := x.pl.bw
	if h := x.pl.bwHold; h > 0 && h < len(x.pl.bw) {
		rest = append([]byte(nil), x.pl.bw[h:]...)
		out, restItem = x.pl.bw[:h], x.pl.bwHoldItem
	}
	x.pl.bwHold = 0
	x.rl.parseTypes(out)
	if rest != nil {
		x.rl.parseTypes(rest)
	}
	var err error
	if rest != nil {
		err = bc.Write(out)
	} else {
		err = bc.Send(out) // written by the first read: one syscall less
	}
	if err != nil {
		x.pl.bw = x.pl.bw[:0]
		return x.backendLost(err)
	}
	x.pl.bw = x.pl.bw[:0]
	for i := range x.pl.items {
		it := &x.pl.items[i]
		if rest != nil && i >= restItem && it.kind != itLocal {
			if err := bc.Write(rest); err != nil {
				return x.backendLost(err)
			}
			rest = nil
		}
		if it.kind == itLocal {
			if !x.errored && !x.res.fence {
				s.cc.out = append(s.cc.out, x.pl.lbuf[it.lo:it.hi]...)
				s.apply(it.eff)
			}
			continue
		}
		if x.errored && it.kind.extended() {
			continue
		}
		if it.kind == itFlush {
			continue
		}
		if it.kind == itExecute || it.kind == itQuery {
			bc.Queries++
		}
		if end, err := x.readItem(i); end {
			return x.res, err
		}
		if it.eff != nil && !x.errored && it.flags&fReplaceErr == 0 && !x.res.fence {
			s.apply(it.eff)
		}
	}
	if err := bc.FlushPending(); err != nil { // no item read an answer
		return x.backendLost(err)
	}
	if bc.Stmts != nil {
		bc.Stmts.DropUnconfirmed()
	}
	return x.res, nil
}

// exchanger is one exchange with one backend (runExchange): the session
// whose plan pl it runs (pl.items, their local answers in pl.lbuf, pl.bw
// the bytes sent), whose client it writes to and whose state the
// answers' effects and a lost backend change; the backend bc; and its
// progress through the items.
type exchanger struct {
	s        *Session
	pl       *planned
	bc       *backend.Conn
	explicit bool
	res      exchangeResult
	// errored: the backend is skipping to Sync.
	errored      bool
	replayFailed bool
	// flushed: part of the client's answer was written.
	flushed bool
	// rl tells the backend's descriptions in the default shard's OIDs.
	rl relabeler
	// vals: the rows of the description just forwarded carry the
	// backend's type OIDs in their values (relabelvalues.go).
	vals *rowValues
}

// stop ends the exchange with res (err only when the client connection
// failed): readItem's and itemError's end.
func (x *exchanger) stop(res exchangeResult, err error) (bool, error) {
	x.res = res
	return true, err
}

// readItem reads the backend's responses to item i up to its last,
// forwarding to the client what is the client's. end reports that the
// exchange is over (x.res is its result); err that the client connection
// failed.
func (x *exchanger) readItem(i int) (end bool, err error) {
	s, bc := x.s, x.bc
	it := &x.pl.items[i]
	for done := false; !done; {
		if len(s.cc.out) > 64*1024 && !x.res.fence {
			x.flushed = true
			if err := s.cc.flush(); err != nil {
				return true, err
			}
		}
		typ, msg, err := bc.Reader.Next()
		if err != nil {
			if it.cs != nil {
				bc.Stmts.Drop(it.cs)
			}
			return x.stop(x.backendLost(err))
		}
		switch typ {
		case 'S':
			s.ps.notePS(msg)
			continue
		case 'N':
			if it.flags&fSwallow == 0 {
				s.cc.out = shiftPosition(s.cc.out, msg, it.posShift)
			}
			continue
		case 'A':
			s.cc.out = append(s.cc.out, msg...)
			continue
		case 'E':
			var over bool
			x.vals = nil
			if done, over, err = x.itemError(i, msg); over {
				return true, err
			}
			continue
		case 'Z':
			if it.kind != itSync && it.kind != itQuery {
				return x.stop(x.desync(typ, it.kind))
			}
			x.itemReady(it, msg)
			done = true
			continue
		case 'G':
			x.flushed = true
			s.cc.out = append(s.cc.out, msg...)
			// The held bytes wait for their item: the statement may
			// go on (a query string after its COPY, another COPY).
			if err := x.copyIn(); err != nil {
				return true, err
			}
			continue
		case 'W':
			bc.Broken = true
			return x.stop(x.desync(typ, it.kind))
		}
		// Item-specific responses.
		var ok bool
		if ok, done = it.accept(typ); !ok {
			return x.stop(x.desync(typ, it.kind))
		}
		switch typ {
		case 'T', '2', 'C', 's', 'I', 'n':
			x.vals = nil // rows to come are another result's
			if typ == '2' && it.rows != nil {
				x.vals = x.rl.portalValues(it.rows) // a portal run without its description
			}
		}
		if it.flags&fSwallow == 0 && !(typ == 'n' && it.flags&fDropNoData != 0) {
			s.cc.out = append(s.cc.out, msg...)
			switch typ {
			case 'D':
				if x.vals != nil {
					x.rl.dataRow(x.vals, s.cc.out[len(s.cc.out)-len(msg):])
				}
			case 'T':
				msg = s.cc.out[len(s.cc.out)-len(msg):]
				x.vals = x.rl.rowDesc(msg)
			case 't':
				x.rl.paramDesc(s.cc.out[len(s.cc.out)-len(msg):])
			}
			if it.vs != nil && (typ == 'T' || typ == 'n') {
				if shape, ok := resultShape(msg); ok {
					it.vs.desc = shape
				}
			}
		}
	}
	return false, nil
}

// itemError answers an ErrorResponse to item i: the client gets it (or
// the error that replaces it), the statement cache forgets the failed
// statement, and a FATAL ends the exchange (end; x.res its result, err
// only when the client connection failed). done reports that the item
// has no further responses (the backend skips to Sync).
func (x *exchanger) itemError(i int, msg []byte) (done, end bool, err error) {
	s, bc := x.s, x.bc
	it := &x.pl.items[i]
	x.res.errored = true
	code := pgwire.ErrorField(msg, 'C')
	bc.Pool.Stats.NoteError(code)
	fatalErr := pgwire.ErrorField(msg, 'S') == "FATAL"
	if it.flags&fFence != 0 && !x.res.fence && !x.flushed && code == CodeFenceRefused && s.fretry.retryable(s, x.pl.items[:i], msg) {
		// Read the rest (the transaction is aborted), forward
		// nothing of it, and run the client's message again.
		x.res.fence = true
	}
	x.forwardError(it, msg, code, fatalErr)
	if it.flags&fReplay != 0 {
		x.replayFailed = true
	}
	if it.cs != nil && bc.Stmts != nil {
		bc.Stmts.Drop(it.cs)
		if pgwire.IsResultTypeChanged(msg) {
			// The schema changed under the cached statements
			// of every connection, not only this one.
			s.gen.StmtEpoch.Add(1)
		}
	}
	if fatalErr {
		bc.Broken = true
		s.gen.Metrics.BackendErrors.WithLabelValues(bc.Pool.Shard.Name, "lost").Inc()
		end, err = x.stop(x.afterLoss())
		return false, end, err
	}
	if it.kind == itQuery || it.kind == itSync {
		// The query goes on to ReadyForQuery; so does a Sync
		// whose implicit COMMIT failed (a deferred constraint).
		return false, false, nil
	}
	if it.kind == itQueryHead {
		// The string ends here; its ReadyForQuery is the client's
		// item's.
		return true, false, nil
	}
	x.errored = true
	return true, false, nil
}

// forwardError gives the client the backend's ErrorResponse msg (its
// SQLSTATE code) to item it as the client should see it.
func (x *exchanger) forwardError(it *item, msg []byte, code string, fatalErr bool) {
	s := x.s
	switch {
	case it.flags&fReplaceErr != 0:
		s.cc.out = append(s.cc.out, x.pl.lbuf[it.lo:it.hi]...)
	case it.flags&fStale != 0 && pgwire.IsFormatCountMismatch(msg):
		s.cc.out = pgwire.AppendError(s.cc.out, pgwire.ResultTypeChanged())
	case x.replayFailed && it.flags&fClientPart != 0 && code == pgwire.CodeInFailedTransaction:
		// consequence of the replay's error, already reported
	case fatalErr && s.own != nil:
		// A pinned backend is the client's own session: it ends
		// with it, as on a direct connection.
		s.cc.out = append(s.cc.out, msg...)
		s.pinFatal = true
	case fatalErr:
		// The backend is going away; the client's session is
		// not: report the same error, as ERROR.
		s.cc.out = pgwire.AppendShardFatal(s.cc.out, msg, x.bc.Pool.Shard.Name)
	default:
		s.cc.out = shiftPosition(s.cc.out, msg, it.posShift)
	}
}

// itemReady takes the ReadyForQuery msg ending item it (a Sync or a
// Query): the client gets it if it is the client's.
func (x *exchanger) itemReady(it *item, msg []byte) {
	s := x.s
	st := pgwire.ReadyStatus(msg)
	x.res.status = st
	if it.flags&fRFQ != 0 && !x.res.fence {
		s.cc.out = s.ps.reconcilePS(st, s.own != nil, s.cc.out)
		s.cc.out = pgwire.AppendRFQ(s.cc.out, st)
	}
	x.errored = false
}

// accept reports whether a response of type typ (other than those every
// item may get: ParameterStatus, notices, notifications, errors,
// ReadyForQuery, COPY) answers the item, and whether it is the item's
// last. A ParseComplete confirms the item's cached statement.
func (it *item) accept(typ byte) (ok, done bool) {
	switch it.kind {
	case itParse:
		ok, done = typ == '1', true
		if ok && it.cs != nil {
			it.cs.Confirmed = true
		}
		return ok, done
	case itBind:
		return typ == '2', true
	case itDescStmt:
		switch typ {
		case 't':
			return true, false
		case 'T', 'n':
			return true, true
		}
		return false, false
	case itDescPortal:
		return typ == 'T' || typ == 'n', true
	case itExecute:
		switch typ {
		case 'D', 'H', 'd', 'c':
			return true, false
		case 'C', 'I', 's':
			return true, true
		}
		return false, false
	case itClose:
		return typ == '3', true
	case itQuery:
		return true, false
	case itQueryHead:
		switch typ {
		case 'T', 'D':
			return true, false
		case 'C':
			return true, true
		}
		return false, false
	}
	return false, false
}

// desync handles a response of type typ to an item of kind k the engine
// did not expect: the connection's state is unknown, so it is discarded
// and the client told.
func (x *exchanger) desync(typ byte, k itemKind) (exchangeResult, error) {
	s, bc := x.s, x.bc
	s.log.Error("unexpected message from a shard; discarding the connection", "shard", bc.Pool.Shard.Name, "type", string(rune(typ)), "step", int(k))
	bc.Broken = true
	return x.backendLost(fmt.Errorf("unexpected message type %q from the server", typ))
}

// backendLost reports a failed backend connection to the client and
// discards it: the client gets 08006 naming the shard; a transaction it
// had open is failed (it must roll back), an implicit one is gone. The
// result is x.res, updated.
func (x *exchanger) backendLost(cause error) (exchangeResult, error) {
	s, bc := x.s, x.bc
	bc.Broken = true
	if e := bc.DownErr.Load(); e != nil {
		bc.Pool.Stats.NoteError(e.Code)
		s.cc.out = pgwire.AppendError(s.cc.out, e)
		x.res.errored = true
		return x.afterLoss()
	}
	s.gen.Metrics.BackendErrors.WithLabelValues(bc.Pool.Shard.Name, "lost").Inc()
	bc.Pool.Stats.NoteError(pgwire.CodeConnectionFailure)
	s.log.Warn("lost a backend connection", "shard", bc.Pool.Shard.Name, "err", backend.ShortErr(cause))
	s.cc.out = pgwire.AppendError(s.cc.out, &pgwire.Error{Code: pgwire.CodeConnectionFailure,
		Message: fmt.Sprintf("lost the connection to shard %q: %s", bc.Pool.Shard.Name, backend.ShortErr(cause)),
		Detail:  "If a COMMIT was in flight, the transaction may or may not have committed.",
		Hint:    "Roll back and retry the transaction."})
	x.res.errored = true
	return x.afterLoss()
}

// afterLoss ends the exchange after the backend went away (x.res,
// updated, is its result).
func (x *exchanger) afterLoss() (exchangeResult, error) {
	s := x.s
	x.res.lost = true
	s.dropBackend(false)
	if x.res.fence {
		// Retried: the transaction was aborted by the fence before the
		// loss, and the session's state is as before the exchange.
		return x.res, nil
	}
	s.readers.end()
	s.txn.mainWrote, s.txn.hintBound = false, false
	s.txn.pipelineHeld = false
	s.txn.wrapped = false
	s.txn.soft = false
	if x.explicit {
		s.txn.tx = txFailed
		s.txn.deferred = s.txn.deferred[:0]
	} else {
		s.txn.tx = txIdle
	}
	return x.res, nil
}

// copyIn relays a COPY FROM STDIN: client CopyData goes to the backend until
// CopyDone or CopyFail.
func (x *exchanger) copyIn() error {
	s, bc := x.s, x.bc
	if err := s.cc.flush(); err != nil {
		return err
	}
	s.cc.rd.Release()
	for {
		typ, msg, err := s.cc.rd.Next()
		if err != nil {
			bc.Broken = true
			return err
		}
		if typ == 'X' {
			bc.Broken = true
			return errClientTerminated
		}
		x.pl.bw = append(x.pl.bw, msg...)
		if typ == 'c' || typ == 'f' || len(x.pl.bw) > 256*1024 {
			if err := bc.Write(x.pl.bw); err != nil {
				x.pl.bw = x.pl.bw[:0]
				return nil // the read side reports the loss
			}
			x.pl.bw = x.pl.bw[:0]
			if typ != 'c' && typ != 'f' {
				if cut, err := x.copyFailed(); err != nil || cut {
					return err
				}
			}
		}
		if typ == 'c' || typ == 'f' {
			return nil
		}
	}
}

// copyFailed reports, without waiting, whether the backend failed the
// COPY FROM STDIN being relayed (checked after each write to it): its
// ErrorResponse is left for the exchange to read and forward, so the
// client hears of it at once and stops sending, as on a direct connection
// (Postgres discards the rest of the copy; the proxy ignores the CopyData,
// CopyDone or CopyFail that still come, as Postgres does). Notices and
// notifications the backend sent meanwhile are forwarded.
func (x *exchanger) copyFailed() (bool, error) {
	s, bc := x.s, x.bc
	for bc.Readable() {
		typ, err := bc.Reader.PeekType()
		if err != nil {
			return true, nil // the exchange's read reports the loss
		}
		switch typ {
		case 'E':
			return true, nil
		case 'N', 'A':
			_, msg, err := bc.Reader.Next()
			if err != nil {
				return true, nil
			}
			s.cc.out = append(s.cc.out, msg...)
			if err := s.cc.flush(); err != nil {
				return false, err
			}
		default:
			return false, nil // read after the copy, as before
		}
	}
	return false, nil
}

var errClientTerminated = errors.New("client terminated during COPY")

// ---- local effects ----

type effKind uint8

const (
	effStmtPut effKind = iota
	effStmtDel
	effStmtClear
	effTx
	effSettings
	effCursor // cursor.go
)

// effect is a change of session state that an answer implies; it is
// applied when the answer is sent (so a pipeline that fails earlier leaves
// the state unchanged, as in Postgres).
type effect struct {
	kind effKind
	name string
	vs   *vstmt
	tx   *txSnap
	set  *backend.Settings
	rep  map[string]string
	// real, with effStmtPut, is the pinned backend the statement was
	// parsed on under its own name.
	real *backend.Conn
	// cur, with effCursor, is where a cursor's fetch left it.
	cur cursorAt
}

// txSnap is a transaction state to switch to.
type txSnap struct {
	tx       txState
	deferred []deferredStmt
	hint     int
}

func (s *Session) apply(e *effect) {
	if e == nil {
		return
	}
	switch e.kind {
	case effStmtPut:
		if e.real != nil {
			e.vs.realOn = e.real
		}
		s.stmts[e.name] = e.vs
	case effStmtDel:
		delete(s.stmts, e.name)
	case effStmtClear:
		clear(s.stmts)
	case effCursor:
		s.cursors.apply(e.cur)
	case effTx:
		if s.readers.any() && (e.tx.tx == txIdle || e.tx.tx == txFailed || !slices.Equal(s.txn.deferred, e.tx.deferred)) {
			// The transaction ended, failed, or its start changed (a SET
			// LOCAL or savepoint command): the readers are no longer its.
			s.readers.end()
		}
		s.txn.tx = e.tx.tx
		s.txn.deferred = append(s.txn.deferred[:0], e.tx.deferred...)
		s.txn.hint = e.tx.hint
	case effSettings:
		for n, v := range e.rep {
			if s.ps.reported[n] != v {
				s.ps.seen[n] = v
			}
		}
		s.cur = e.set
		s.ps.reported = e.rep
		if e.name == "discard" {
			clear(s.stmts)
			s.unnamed = nil
		}
	}
}
