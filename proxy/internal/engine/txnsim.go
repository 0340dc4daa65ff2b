package engine

import (
	"fmt"
	"slices"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// txnSim is the transaction state a plan simulates while no backend runs
// the transaction (or before its statements reach one): idle, deferred
// (BEGIN held back until a statement picks the shard), bound, failed;
// the deferred statements to replay, and the pgshard hint's shard. Its
// answers to transaction control are pure: they change only the
// simulation and return the effect that changes the session once the
// client is answered (item effects, exchange.go).
type txnSim struct {
	tx       txState
	deferred []deferredStmt // shared with the session until modified
	cow      bool           // deferred is a private copy
	hint     int
}

// simStatus is the ReadyForQuery status of the simulated state; bstatus
// is the bound backend's last status.
func (t *txnSim) simStatus(bstatus byte) byte { return t.tx.status(bstatus) }

// setDeferred replaces the simulated deferred list (copy on write).
func (t *txnSim) setDeferred(d []deferredStmt) {
	t.deferred = d
	t.cow = true
}

func (t *txnSim) addDeferred(d deferredStmt) {
	if !t.cow {
		t.deferred = slices.Clone(t.deferred)
		t.cow = true
	}
	t.deferred = append(t.deferred, d)
}

// txEffect is an effect switching the session to the simulated state.
func (t *txnSim) txEffect() *effect {
	return &effect{kind: effTx, tx: &txSnap{tx: t.tx, deferred: slices.Clone(t.deferred), hint: t.hint}}
}

// txEffectKeep is txEffect for a bound (soft) transaction: it only updates
// the deferred list.
func (t *txnSim) txEffectKeep() *effect {
	e := t.txEffect()
	e.tx.tx = txBound
	return e
}

// failAt is a local error; a deferred transaction no backend runs yet
// (onBackend false) fails with it.
func (t *txnSim) failAt(e *pgwire.Error, onBackend bool) action {
	if t.tx == txDeferred && !onBackend {
		t.tx = txFailed
		return action{err: e, eff: t.txEffect()}
	}
	return action{err: e}
}

// beginAction answers BEGIN: the transaction is deferred until a
// statement picks its shard.
func (t *txnSim) beginAction(a *route.Statement) action {
	if t.tx == txDeferred {
		return action{notice: &pgwire.Error{Severity: "WARNING", Code: pgwire.CodeActiveTransaction, Message: "there is already a transaction in progress"}, tag: "BEGIN"}
	}
	t.tx = txDeferred
	t.hint = -1
	t.setDeferred([]deferredStmt{{sql: a.SQL, iso: a.Isolation}})
	return action{tag: "BEGIN", eff: t.txEffect()}
}

// endTxAction answers COMMIT or ROLLBACK [AND CHAIN] of a transaction no
// backend runs.
func (t *txnSim) endTxAction(a *route.Statement) action {
	tag := "COMMIT"
	if a.Kind == route.KindRollback {
		tag = "ROLLBACK"
	}
	if t.tx == txIdle {
		return action{notice: &pgwire.Error{Severity: "WARNING", Code: pgwire.CodeNoActiveTransaction, Message: "there is no transaction in progress"}, tag: tag}
	}
	if a.Chain && len(t.deferred) > 0 {
		t.setDeferred([]deferredStmt{t.deferred[0]})
		t.hint = -1
		return action{tag: tag, eff: t.txEffect()}
	}
	t.tx = txIdle
	t.hint = -1
	t.setDeferred(nil)
	return action{tag: tag, eff: t.txEffect()}
}

// savepointAction answers SAVEPOINT, RELEASE and ROLLBACK TO of a
// deferred transaction: kept to be replayed. onBackend: a backend runs
// the transaction (failAt).
func (t *txnSim) savepointAction(a *route.Statement, onBackend bool) action {
	verb := a.SavepointVerb
	if t.tx == txIdle {
		what := map[string]string{"SAVEPOINT": "SAVEPOINT", "RELEASE": "RELEASE SAVEPOINT", "ROLLBACK": "ROLLBACK TO SAVEPOINT"}[verb]
		return action{err: pgwire.NewError(pgwire.CodeNoActiveTransaction, what+" can only be used in transaction blocks")}
	}
	name := a.SavepointName
	if verb == "SAVEPOINT" {
		t.addDeferred(deferredStmt{sql: a.SQL, savepoint: name})
		return action{tag: "SAVEPOINT", eff: t.txEffect()}
	}
	if !t.hasSavepoint(name) {
		return t.failAt(pgwire.NewError(pgwire.CodeInvalidSavepoint, fmt.Sprintf("savepoint %q does not exist", name)), onBackend)
	}
	t.addDeferred(deferredStmt{sql: a.SQL})
	return action{tag: verb, eff: t.txEffect()}
}

// setLocalAction answers SET LOCAL of a setting (not a pgshard hint) of
// a deferred transaction: kept to be replayed.
func (t *txnSim) setLocalAction(a *route.Statement) action {
	if t.tx == txIdle {
		return action{notice: &pgwire.Error{Severity: "WARNING", Code: pgwire.CodeNoActiveTransaction, Message: "SET LOCAL can only be used in transaction blocks"}, tag: "SET"}
	}
	t.addDeferred(deferredStmt{sql: a.SQL, setLocal: true, setTxn: a.SetName == "transaction", iso: a.Isolation})
	return action{tag: "SET", eff: t.txEffect()}
}

// failedTxAction answers a statement in a failed deferred transaction.
func (t *txnSim) failedTxAction(a *route.Statement) action {
	switch {
	case a.Kind == route.KindRollback || a.Kind == route.KindCommit:
		t.tx = txIdle
		t.hint = -1
		t.setDeferred(nil)
		return action{tag: "ROLLBACK", eff: t.txEffect()}
	case a.Kind == route.KindSavepoint && a.SavepointVerb == "ROLLBACK":
		name := a.SavepointName
		for i := len(t.deferred) - 1; i >= 0; i-- {
			if t.deferred[i].savepoint == name {
				t.setDeferred(slices.Clone(t.deferred[:i+1]))
				t.tx = txDeferred
				return action{tag: "ROLLBACK", eff: t.txEffect()}
			}
		}
		return action{err: pgwire.NewError(pgwire.CodeInvalidSavepoint, fmt.Sprintf("savepoint %q does not exist", name))}
	case a.Kind == route.KindEmpty:
		return action{empty: true}
	}
	return action{err: errInFailedTx()}
}

func (t *txnSim) hasSavepoint(name string) bool {
	for _, d := range t.deferred {
		if d.savepoint == name {
			return true
		}
	}
	return false
}
