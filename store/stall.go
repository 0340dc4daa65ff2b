package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnreachable is matched (errors.Is) by the error of an operation that
// was cancelled because, while it stalled, a check over a fresh connection
// found the server unreachable.
var ErrUnreachable = errors.New("server unreachable")

// unreachableError is the cancellation cause set by a failed stall check.
type unreachableError struct {
	after time.Duration // how long the operation had stalled
	check error         // why the check failed
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("server unreachable (checked after the operation stalled for %v: %v)", e.after.Round(time.Millisecond), e.check)
}
func (e *unreachableError) Unwrap() []error { return []error{ErrUnreachable, e.check} }

// Stall checks: a connection already in the pool cannot tell a server that
// is down behind PgBouncer from a slow statement. PgBouncer accepts the
// query and queues it until a server connection is available — for
// query_wait_timeout, 120 s by default — while Postgres may be down; a lock
// wait or a long statement sends nothing for as long either. So when an
// operation has not finished after StallCheck, the store asks a fresh
// connection (bounded by ConnectTimeout) whether the server answers. A
// definite no — the connection or login fails (PgBouncer refuses logins
// with "server login has been failing" once its server connect failed), or
// the check's SELECT 1 gets a FATAL or a connection-class error — cancels
// the operation with an error matching ErrUnreachable. A check that is
// merely slow (a busy server or pool) proves nothing: the operation goes
// on and is checked again after another StallCheck.
//
// No goroutine runs unless an operation stalls: the check is a timer's
// function, and the operation waits for it before returning.

// watchStall arms the stall check for one operation on ctx and returns the
// operation's context (cancelled with an *unreachableError cause when the
// check fails) and stop, which disarms the check and waits for a running
// one. With stall checks off it returns ctx and a no-op.
func (s *Store) watchStall(ctx context.Context) (context.Context, func()) {
	if s.opts.StallCheck <= 0 {
		return ctx, func() {}
	}
	opCtx, cancel := context.WithCancelCause(ctx)
	start := time.Now()
	checked := make(chan struct{})
	t := time.AfterFunc(s.opts.StallCheck, func() {
		defer close(checked)
		for {
			err := s.checkReachable(opCtx)
			if err != nil {
				cancel(&unreachableError{after: time.Since(start), check: err})
				return
			}
			wait := time.NewTimer(s.opts.StallCheck)
			select {
			case <-opCtx.Done():
				wait.Stop()
				return
			case <-wait.C:
			}
		}
	})
	return opCtx, func() {
		cancel(nil) // ends a check in flight
		if !t.Stop() {
			<-checked
		}
	}
}

// unreachableCause returns the stall check's verdict on ctx, if any.
func unreachableCause(ctx context.Context) error {
	var ue *unreachableError
	if cause := context.Cause(ctx); errors.As(cause, &ue) {
		return ue
	}
	return nil
}

// checkReachable connects afresh and runs SELECT 1, each bounded by
// ConnectTimeout. It returns an error only when the server is definitely
// unreachable (see above), nil when it answered or was merely slow, or
// when ctx ended (the operation finished).
func (s *Store) checkReachable(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, s.opts.ConnectTimeout)
	defer cancel()
	conn, err := pgconn.ConnectConfig(cctx, s.checkConfig)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err // refused, timed out or rejected at login
	}
	defer conn.Close(context.WithoutCancel(ctx))
	qctx, qcancel := context.WithTimeout(ctx, s.opts.ConnectTimeout)
	defer qcancel()
	err = conn.Exec(qctx, "SELECT 1").Close()
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Severity == "FATAL" || pe.Severity == "PANIC" ||
		strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P")) {
		return err
	}
	return nil // answered, or only slow: no verdict
}
