package engine

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/store"
)

// A read of every shard at a range move's flip (ARCHITECTURE.md §6).
// Each shard's part reads the served form of the statement, checked
// against the map the read was routed by (route.Table.ServedSQL, migration
// 0015): a shard whose served set, in the snapshot its part reads, is not
// the ranges that map gives it raises PS002 before the first row of the
// table leaves it. Parts that all pass cover every bucket exactly once;
// a read whose parts took their snapshots on either side of a flip's
// fence commits, or that was routed by a map behind the shards, fails
// instead of missing the moving range or reading it twice.
//
//	fanMerge: every part stands at its first row (a COPY: every part was
//	  │ read; a read in two stages: a stage failed), the first that failed
//	  │ failed with PS002, and the read may be run again: outside a
//	  │ transaction block or as its first read (every part opened by it),
//	  │ alone in its message (no settings ahead of it, nothing after it),
//	  │ every answer planned before it without an effect but an unnamed
//	  │ statement's Parse, nothing flushed to the client since the read
//	  │ began, the proxy follows a catalog, and the message's retry budget
//	  │ (fenceRetrier) is not spent
//	  ▼
//	run: the parts are drained and their connections released (rolled
//	  │ back first in a transaction block, whose BEGIN stays deferred),
//	  │ the client's output of the read dropped; wait: for the catalog's
//	  │ map to reach the shard's fence epoch when it is newer than the
//	  │ read's map (the flip is in the catalog and on that shard), else a
//	  │ short back-off (the catalog flipped, the shard's fence not yet);
//	  │ the session moves to the newest generation
//	  ▼
//	serve runs the client's message again (errFenceRetry).
//
// A BEGIN in the same message as the read (JDBC with autocommit off
// sends BEGIN, the read and one Sync) is answered again by the run
// again: the session's transaction is back to none first.
//
// Otherwise — a COPY whose first shards' rows were flushed already (64
// KiB of them), a read in a transaction block that ran something on a
// shard before it, or the budget spent — the client gets the shard's error as
// 40001 (serialization_failure: clients and their retry loops run the
// transaction again), its message naming the shard, the buckets it
// serves and the ones the map gives it.

// codeSerializationFailure is what the client gets for a part's
// store.ServedSQLState that was not retried.
const codeSerializationFailure = "40001"

// servedRetryMax bounds the runs again of one client message after a
// served-set mismatch (each after a wait), within Config.FenceRetryWait.
const servedRetryMax = 6

// errServedRetry tells run that fanMerge found a served-set mismatch it
// may retry: the parts are drained, nothing was answered.
var errServedRetry = errors.New("pgshard: a read of every shard met a range move's flip")

// servedEpoch returns the fence epoch a PS002 ErrorResponse names
// (store.AsServedMismatch), false when msg is not one.
func servedEpoch(msg []byte) (uint64, bool) {
	sm, ok := store.AsServedMismatch(&pgconn.PgError{Code: pgwire.ErrorField(msg, 'C'), Detail: pgwire.ErrorField(msg, 'D')})
	return sm.Epoch, ok
}

// partError is the shard's error of first, the part whose error is the
// answer: nil when none failed or its connection was lost.
func partError(first *fanStream) []byte {
	if first == nil || first.lost != nil {
		return nil
	}
	return first.errRaw
}

// servedRetryable reports whether the read may run again after errRaw,
// the error of the part whose error is the answer (partError), is a
// served-set mismatch (the diagram above); the session's budget is
// taken then, and x.retryEpoch set.
func (x *fanExec) servedRetryable(errRaw []byte) bool {
	f := x.f
	if errRaw == nil || f.inTxn && !openedAll(x.bc, x.streams) || f.continues || len(f.leads) > 0 || !x.pure || x.cc.flushes != x.flushes {
		return false
	}
	ep, ok := servedEpoch(errRaw)
	if !ok || !x.sess.servedRetryable() {
		return false
	}
	x.retryEpoch = ep
	return true
}

// openedAll reports whether a read in a transaction block opened every
// participant's backend transaction, streams (the block's first read: no
// transaction backend bc, every part partNewReader, the client's BEGIN
// deferred): a run again after rolling them back starts the block
// afresh.
func openedAll(bc *backend.Conn, streams []*fanStream) bool {
	if bc != nil {
		return false
	}
	for _, st := range streams {
		if st.role != partNewReader {
			return false
		}
	}
	return true
}

// servedRetry drops the client's output of the read, waits (awaitServed)
// and returns errFenceRetry, for serve to run the message again. The
// participants' connections were released (fanEnd) or, opened by a read
// in a transaction block, are rolled back and released first (the
// block's BEGIN stays deferred: nothing of it ran).
func (x *fanExec) servedRetry() error {
	if x.f.inTxn {
		for _, st := range x.streams {
			st.drain()
			if st.lost == nil && !st.bc.Broken {
				if _, err := st.bc.RunSimple(x.ctx, x.gen.Config.PoolTimeout, "ROLLBACK"); err == nil {
					st.bc.Pool.Release(st.bc)
					continue
				}
			}
			st.bc.Pool.Discard(st.bc)
		}
	}
	if x.idleStart {
		// Its BEGIN came in the same message: answered again by the run
		// again.
		x.txn.reset()
	}
	x.cc.out = x.cc.out[:x.outStart]
	if !x.sess.awaitServed(x.ctx, x.retryEpoch) {
		return x.ctx.Err()
	}
	return errFenceRetry
}

// servedRetryable takes a run again of the client's message from its
// retry budget (fenceRetrier, shared with the fence's refusals), false
// when there is none: no catalog to reload, a pinned or handed-over
// session, a transaction's backend or readers held, the budget or its
// time spent.
func (s *Session) servedRetryable() bool {
	r := &s.fretry
	if s.host == nil || !s.gen.Config.Follows || s.gen.Home != s.host || s.own != nil || s.bc != nil || s.readers.any() {
		return false
	}
	if !r.inTime(s.gen.Config.FenceRetryWait) || r.served >= servedRetryMax {
		return false
	}
	r.served++
	r.tries++
	return true
}

// awaitServed waits before a read's run again: for the newest generation's
// map to reach epoch, the fence epoch of the shard that refused, when it is
// newer than the session's map; else a back-off of 5, 10, 20, ... ms (the
// shard's fence is behind the catalog: its flip is being committed). Then
// the session moves to the newest generation. False when ctx ended.
func (s *Session) awaitServed(ctx context.Context, epoch uint64) bool {
	r := &s.fretry
	s.host.Metrics.FenceRetries.WithLabelValues("served").Inc()
	s.log.Debug("a read of every shard met a range move's flip before anything reached the client: retrying", "fence_epoch", epoch, "map_epoch", s.gen.Config.Map.Epoch, "try", r.served)
	var backoff time.Duration
	if epoch <= s.gen.Config.Map.Epoch {
		backoff = 5 * time.Millisecond << (r.served - 1)
	}
	return r.pause(ctx, s, epoch, backoff)
}

// pureItems reports whether running the answers items again changes
// nothing: none has an effect but an unnamed statement's Parse (which
// the run again parses the same) or, when the message began outside a
// transaction block (idleStart), the transaction state's (a BEGIN in
// the same message, as JDBC sends it: the run again starts from no
// transaction, servedRetry).
func pureItems(items []item, idleStart bool) bool {
	for _, it := range items {
		if e := it.eff; e != nil && (e.kind != effStmtPut || e.name != "") && !(idleStart && e.kind == effTx) {
			return false
		}
	}
	return true
}

// clientServedError is a part's PS002 as the client gets it: 40001.
func clientServedError(raw []byte) []byte {
	if pgwire.ErrorField(raw, 'C') != store.ServedSQLState {
		return raw
	}
	return pgwire.AppendErrorCode(nil, raw, codeSerializationFailure)
}
