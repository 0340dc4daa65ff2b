package engine

// The transaction state machine of a client session: where its
// transaction is (idle, deferred, bound to a backend, failed before it
// reached one), what a deferred one replays, and the flags that say how
// bound it is. The session's exchanges (exchange.go, extended.go) and
// its planner (plan.go) move it; the backend it is bound to is
// Session.bc, its read-only transactions on other shards Session.readers.

// txState is where a session's transaction is.
type txState uint8

const (
	// txIdle: no transaction; no backend held.
	txIdle txState = iota
	// txDeferred: BEGIN seen but nothing sent; BEGIN, SET LOCAL and
	// SAVEPOINT are recorded in deferred and replayed on the shard the
	// first routed statement picks.
	txDeferred
	// txBound: the transaction runs on bc (shard bound); the backend's
	// ReadyForQuery status (bstatus, 'T' or 'E') is authoritative.
	txBound
	// txFailed: a deferred (never sent) transaction failed; everything
	// but ROLLBACK / ROLLBACK TO SAVEPOINT is refused with 25P02.
	txFailed
)

// transaction is a session's transaction: where it is (tx) and what
// goes with it.
type transaction struct {
	tx txState
	// deferred holds the statements to replay (BEGIN ..., SET LOCAL ...,
	// SAVEPOINT ...) in txDeferred and txFailed.
	deferred []deferredStmt
	// hint is a shard chosen by SET LOCAL pgshard.key in a deferred
	// transaction (-1 = none).
	hint int
	// shard is the shard of bc.
	shard int
	// soft: the transaction is bound only because of read-only, table-less
	// statements; a keyed statement for another shard may move it.
	soft bool
	// bstatus is the backend's last ReadyForQuery status while bound.
	bstatus byte
	// hintBound: the transaction runs where SET LOCAL pgshard.key/shard
	// put it: its reads stay there too, nothing moves it.
	hintBound bool
	// mainWrote: a statement that may write (or lock) ran on the
	// transaction's backend; until then a write for another shard moves
	// the transaction there (the backend becomes a reader).
	mainWrote bool
	// pipelineHeld: bc is held outside a transaction block because the
	// client is mid-pipeline (Flush without Sync). Not a pin (own).
	pipelineHeld bool
	// wrapped: the pinned pipeline runs in a BEGIN the proxy added for the
	// preamble; the Sync that ends it gets the matching COMMIT.
	wrapped bool
	// skipUntilSync: an error occurred in an extended-protocol pipeline;
	// messages are discarded until Sync, as Postgres does.
	skipUntilSync bool
}

// deferredStmt is a statement recorded in a deferred transaction.
type deferredStmt struct {
	sql string
	// setLocal: a SET LOCAL; setTxn: SET TRANSACTION (must precede any
	// query of the transaction).
	setLocal, setTxn bool
	// savepoint names the savepoint a SAVEPOINT statement created ("" for
	// other statements), for ROLLBACK TO in a failed deferred transaction.
	savepoint string
	// iso is the isolation level it names (a BEGIN's or a SET
	// TRANSACTION's), "" if none.
	iso string
}

// strictIsolation reports whether a transaction runs at an isolation
// level that needs one snapshot (it then stays on one shard): one its
// start names, else the session's default (def, its
// default_transaction_isolation: backend.Settings.Isolation).
func strictIsolation(ds []deferredStmt, def string) bool {
	named := false
	for _, d := range ds {
		if isStrict(d.iso) {
			return true
		}
		named = named || d.iso != ""
	}
	return !named && isStrict(def)
}

func isStrict(iso string) bool { return iso == "repeatable read" || iso == "serializable" }

// status is the ReadyForQuery status the client should see now.
func (t *transaction) status() byte { return t.tx.status(t.bstatus) }

// reset makes t no transaction, as after its end: nothing deferred, no
// hint, none of a bound transaction's flags.
func (t *transaction) reset() {
	t.tx, t.bstatus, t.deferred, t.hint = txIdle, 0, t.deferred[:0], -1
	t.soft, t.mainWrote, t.hintBound = false, false, false
}

// status is the ReadyForQuery status of state x; bstatus is the bound
// backend's last status.
func (x txState) status(bstatus byte) byte {
	switch x {
	case txDeferred:
		return 'T'
	case txFailed:
		return 'E'
	case txBound:
		return bstatus
	}
	return 'I'
}
