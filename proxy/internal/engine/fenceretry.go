package engine

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/internal/ctxtime"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/store"
)

// Transparent reload-and-retry of a statement refused by the fence it
// opened (ARCHITECTURE.md §6, issue 20 item 4):
//
//	ensureBackend opens the transaction with the assert (fFence on its item
//	  │ only when: following a catalog, the planner started with no backend,
//	  │ no reader, no pin and no pgshard hint, and no soft move or swap)
//	  ▼
//	exchange: the fFence item answers PS001, every item before it is a
//	  │ local answer with no effect (or, in a pipeline that began outside
//	  │ a transaction block, one that only opened it: a BEGIN in the same
//	  │ pipeline, as JDBC sends it with autocommit off), nothing was
//	  │ flushed, the pipeline ends
//	  │ with Sync (or is a Query), retries are left, and the error names a
//	  │ newer epoch than the session's map or a frozen/incoming range
//	  │    ─▶ discard: the rest of the exchange is read (the backend's
//	  │       transaction is aborted: nothing of it can commit), nothing of
//	  │       it reaches the client, no effect is applied
//	  ▼
//	finish ─▶ fenceRetrier.retry: the client's output of this exchange
//	  │       dropped, the backend rolled back and released, the session's
//	  │       transaction state as the pipeline found it; wait (bounded
//	  │       by fenceRetryWait per client message) for the catalog's map to
//	  │       reach the error's epoch, the follower asked to poll now (or,
//	  │       for a frozen range, a short back-off); the session moves to
//	  │       the newest generation
//	  ▼
//	serve runs the same Query / pipeline again (errFenceRetry, through
//	fenceRetrier.run), at most fenceRetryMax times; then the shard's
//	PS001 goes to the client as is.
//
// What is never retried: anything after the first response of the
// client's statement was produced (the assert is the first thing the
// backend answers), a transaction that already ran a statement on a
// backend (fenceHeld's asserts), a COMMIT, a Flush-terminated pipeline,
// a pipeline whose earlier messages changed session state (a named
// Parse, a SET, a SET LOCAL or SAVEPOINT in a transaction block begun
// before it), pinned sessions and proxies with no catalog (nothing to
// reload).

// fenceRetryMax bounds the retries of one client message refused by the
// fence; Config.FenceRetryWait bounds the time it waits for a newer map
// or a frozen range, in all.
const (
	fenceRetryMax = 3
	// fenceFrozenRetryMax bounds the retries of a frozen range (each
	// after a back-off of 10, 20, 40, ... ms), within fenceRetryWait.
	fenceFrozenRetryMax = 8
)

// errFenceRetry tells serve to run the client's message again: the
// previous attempt was refused by the fence and nothing of it reached
// the client.
var errFenceRetry = errors.New("pgshard: retry after a fence refusal")

// fenceRetrier is a session's retry of the client message being run
// after a fence refusal (Session.fretry; reset by run for each message):
// its budget, its deadline, where the client's output of the armed
// exchange began (dropped on a retry) and the refusal being retried.
// Its methods are given the session they act on.
type fenceRetrier struct {
	tries    int       // retries made
	frozen   int       // of which for a frozen or incoming range
	served   int       // of which of a read of every shard (servedretry.go)
	deadline time.Time // end of the waits (zero until the first)
	// armed: finish runs an exchange whose fence refusal may be retried
	// (a Query, or a pipeline ending with Sync).
	armed bool
	// outStart is len(s.out) when the armed exchange began.
	outStart int
	// idleStart: the armed exchange's pipeline began outside a
	// transaction block (planner.idleStart): local answers that only
	// change the transaction's state are undone by a retry.
	idleStart bool
	// err is the refusal being retried.
	err *store.FenceError
}

// run runs one client message (attempt) again while its attempt was
// refused by the fence and retried (errFenceRetry); bounded by the
// retry budget, reset here.
func (r *fenceRetrier) run(attempt func() error) error {
	*r = fenceRetrier{}
	for {
		err := attempt()
		if err != errFenceRetry {
			return err
		}
	}
}

// fenceRetryFlag is fFence for the assert of the statement being
// planned when a refusal of it may be retried: the proxy follows a
// catalog and the pipeline started with no transaction under way
// (planner.fresh), no pgshard hint chose the shard, and no swap to a
// write's shard happened.
func (p backendExec) fenceRetryFlag(fence bool) itemFlags {
	if fence && p.planner.fresh && !p.planner.swapMain && p.planner.sim.hint < 0 && p.planner.s.gen.Config.Follows {
		return fFence
	}
	return 0
}

// retryable reports whether the PS001 msg answering a fence item of the
// plan, after its items before, is retried: see the diagram above.
func (r *fenceRetrier) retryable(s *Session, before []item, msg []byte) bool {
	if !r.armed || !s.gen.Config.Follows || s.gen.Home != s.host || s.own != nil {
		return false
	}
	for _, it := range before {
		if it.flags&fFence != 0 || it.kind == itLocal && (it.eff == nil || r.idleStart && it.eff.kind == effTx) {
			continue
		}
		return false // a local answer with another effect, or another statement sent first
	}
	fe, ok := store.AsFenceError(&pgconn.PgError{Code: pgwire.ErrorField(msg, 'C'), Detail: pgwire.ErrorField(msg, 'D')})
	if !ok {
		return false
	}
	if !r.inTime(s.gen.Config.FenceRetryWait) {
		return false
	}
	switch {
	case fe.State == "frozen" || fe.State == "incoming":
		if r.frozen >= fenceFrozenRetryMax {
			return false
		}
	case fe.Epoch > s.gen.Config.Map.Epoch || s.host.Ops.CurrentEnv().Config.Map.Epoch > s.gen.Config.Map.Epoch:
		if r.tries-r.frozen-r.served >= fenceRetryMax {
			return false
		}
	default:
		return false // the map in use is as new as the shard's verdict: nothing to reload
	}
	r.err = fe
	return true
}

// retry ends an exchange of s whose fence refusal is retried: the
// client's output of it is dropped, the backend's (aborted)
// transaction rolled back and the backend released, the map made
// current (bounded wait), and errFenceRetry returned.
func (r *fenceRetrier) retry(ctx context.Context, s *Session, res exchangeResult) error {
	s.cc.out = s.cc.out[:r.outStart]
	if !res.lost && s.bc != nil {
		if res.status == 'I' {
			s.dropBackend(true)
		} else {
			_, err := s.bc.RunSimple(ctx, s.gen.Config.PoolTimeout, "ROLLBACK")
			s.dropBackend(err == nil)
		}
	}
	s.txn.pipelineHeld, s.txn.wrapped, s.txn.soft, s.txn.hintBound, s.txn.mainWrote = false, false, false, false, false
	if r.idleStart {
		// The pipeline began outside a transaction block: a BEGIN in it
		// runs again with it.
		s.txn.reset()
	} else if s.txn.tx == txBound {
		// A soft transaction (only table-less reads): its start is
		// replayed on the new owner, as moveSoft does.
		s.txn.tx, s.txn.bstatus = txDeferred, 0
	}
	s.ps.pendingPS = s.ps.pendingPS[:0]
	fe := r.err
	r.err = nil
	r.tries++
	frozen := fe.State == "frozen" || fe.State == "incoming"
	if frozen {
		r.frozen++
	}
	state := "moved"
	if frozen {
		state = "frozen"
	}
	s.host.Metrics.FenceRetries.WithLabelValues(state).Inc()
	s.log.Debug("fence refused a statement before anything reached the client: retrying", "range_lo", fe.Lo, "range_hi", fe.Hi, "state", fe.State, "epoch", fe.Epoch, "try", r.tries)
	// A frozen range flips (or thaws) within the move's freeze budget:
	// back off, then look for a newer map as well.
	var backoff time.Duration
	if frozen {
		backoff = 10 * time.Millisecond << (r.frozen - 1)
	}
	if !r.pause(ctx, s, fe.Epoch, backoff) {
		return ctx.Err()
	}
	return errFenceRetry
}

// inTime reports whether the message's retries may go on: its clock,
// wait long (Config.FenceRetryWait), starts at its first retry.
func (r *fenceRetrier) inTime(wait time.Duration) bool {
	now := time.Now()
	if r.deadline.IsZero() {
		r.deadline = now.Add(wait)
		return true
	}
	return !now.After(r.deadline)
}

// pause waits before a retry, at most until the deadline: backoff when
// set, else until the newest generation's map has epoch (awaitEpoch);
// then s moves to the newest generation. False when ctx ended.
func (r *fenceRetrier) pause(ctx context.Context, s *Session, epoch uint64, backoff time.Duration) bool {
	if backoff > 0 {
		if ctxtime.Sleep(ctx, min(backoff, time.Until(r.deadline))) != nil {
			return false
		}
	} else {
		s.host.awaitEpoch(ctx, epoch, r.deadline)
	}
	r.switchGeneration(s)
	return ctx.Err() == nil
}

// awaitEpoch waits until the newest generation's map has at least epoch
// (the catalog follower applies it), at most until deadline or ctx ends.
// The follower is asked to poll the catalog now (HostOps.NudgeCatalog):
// its interval (1 s by default) is as long as the whole wait, so a
// refusal met just after a poll would otherwise wait out the next one
// and give up.
func (h *HostEnv) awaitEpoch(ctx context.Context, epoch uint64, deadline time.Time) {
	if h.Ops.CurrentEnv().Config.Map.Epoch < epoch {
		h.Ops.NudgeCatalog()
	}
	for h.Ops.CurrentEnv().Config.Map.Epoch < epoch {
		left := time.Until(deadline)
		if left <= 0 || ctxtime.Sleep(ctx, min(5*time.Millisecond, left)) != nil {
			return
		}
	}
}

// switchGeneration moves s to the newest generation between the
// attempts of a retried message: its transaction, if any, is deferred
// (never sent), so no backend and no reader holds it.
func (r *fenceRetrier) switchGeneration(s *Session) {
	if s.gen.Home != s.host || s.own != nil || s.txn.pipelineHeld || s.bc != nil || s.readers.any() || s.txn.skipUntilSync {
		return
	}
	if g := s.host.Ops.CurrentEnv(); g != s.gen {
		s.switchGeneration(g)
	}
}
