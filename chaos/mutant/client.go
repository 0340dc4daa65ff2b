package mutant

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/store"
)

// Wrap applies a LevelClient mutant to t, normally the production target
// (storetarget over a router): the returned target passes every call to t
// except the broken one, and Close closes t. Kind "" returns t itself (no
// bug); any other level's kind is an error.
//
//   - RelayAcksBeforeDelivering: PendingOutbox acks each row it returns
//     before returning it.
//   - RetryUnknownWithNewEvent: Commit, on an error matching
//     loadgen.ErrOutcomeUnknown, reloads the execution and commits the same
//     step once more at the reloaded version with the event id
//     ProcessedEventID + "-retry" (an empty one stays empty), and returns
//     that attempt's result.
//   - ProxyIgnoresFence: a fence refusal (an error matching
//     store.ErrFenced) is taken for success — LoadForEvent answers that
//     the execution does not exist, Commit that it committed, DeleteTimer
//     that the timer was not deleted; other errors are returned as they
//     are.
//
// Where the chaos recorder sits decides what the history shows: wrapped
// inside the recorder, the retry is invisible to it (one commit op, two
// versions written); wrapping the recorder, it is a second commit op with
// the same input and a new event id. Either way the data shows it.
func Wrap(t loadgen.Target, k Kind) (loadgen.Target, error) {
	if k == "" {
		return t, nil
	}
	if _, err := lookupLevel(k, LevelClient, "Wrap"); err != nil {
		return nil, err
	}
	switch k {
	case RelayAcksBeforeDelivering:
		return &acksFirst{Target: t}, nil
	case RetryUnknownWithNewEvent:
		return &retryUnknown{Target: t}, nil
	case ProxyIgnoresFence:
		return &ignoresFence{Target: t}, nil
	}
	return nil, fmt.Errorf("mutant Wrap: %q has no client implementation", k) // unreachable: every client kind has one
}

// acksFirst is RelayAcksBeforeDelivering.
type acksFirst struct{ loadgen.Target }

// PendingOutbox returns the pending rows, each already acked: a row whose
// ack failed is left out, and the first ack error is returned with the
// rows acked before it.
func (a *acksFirst) PendingOutbox(ctx context.Context, limit int) ([]loadgen.OutboxEntry, error) {
	rows, err := a.Target.PendingOutbox(ctx, limit)
	if err != nil {
		return rows, err
	}
	acked := rows[:0:0]
	for _, r := range rows {
		if err := a.Target.AckOutbox(ctx, r.Seq); err != nil {
			return acked, fmt.Errorf("mutant %s: ack seq %d before delivering it: %w", RelayAcksBeforeDelivering, r.Seq, err)
		}
		acked = append(acked, r)
	}
	return acked, nil
}

// retryUnknown is RetryUnknownWithNewEvent.
type retryUnknown struct{ loadgen.Target }

// Commit commits c; after an unknown outcome it retries once as Wrap
// says. c itself is not modified.
func (r *retryUnknown) Commit(ctx context.Context, c *loadgen.Commit) error {
	err := r.Target.Commit(ctx, c)
	if !errors.Is(err, loadgen.ErrOutcomeUnknown) {
		return err
	}
	retry := *c
	if retry.ProcessedEventID != "" {
		retry.ProcessedEventID += "-retry"
	}
	exe, _, lerr := r.Target.LoadForEvent(ctx, c.Exe.ID, retry.ProcessedEventID)
	if lerr != nil {
		return fmt.Errorf("mutant %s: reload after %w: %w", RetryUnknownWithNewEvent, err, lerr)
	}
	retry.Exe.Version = 0 // absent: the first save again
	if exe != nil {
		retry.Exe.Version = exe.Version
	}
	return r.Target.Commit(ctx, &retry)
}

// ignoresFence is ProxyIgnoresFence.
type ignoresFence struct{ loadgen.Target }

func fenced(err error) bool { return errors.Is(err, store.ErrFenced) }

// LoadForEvent answers a refused load with "no such execution".
func (f *ignoresFence) LoadForEvent(ctx context.Context, id, eventID string) (*loadgen.Execution, bool, error) {
	exe, processed, err := f.Target.LoadForEvent(ctx, id, eventID)
	if fenced(err) {
		return nil, false, nil
	}
	return exe, processed, err
}

// Commit acknowledges a refused commit.
func (f *ignoresFence) Commit(ctx context.Context, c *loadgen.Commit) error {
	if err := f.Target.Commit(ctx, c); !fenced(err) {
		return err
	}
	return nil
}

// DeleteTimer answers a refused delete with "not deleted".
func (f *ignoresFence) DeleteTimer(ctx context.Context, id, path string, fireAt float64) (bool, error) {
	ok, err := f.Target.DeleteTimer(ctx, id, path, fireAt)
	if fenced(err) {
		return false, nil
	}
	return ok, err
}
