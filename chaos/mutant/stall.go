package mutant

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/store"
)

// Stall checks, as the production store has them (store.Options.StallCheck):
// behind PgBouncer a query to a shard whose Postgres is down waits in the
// pooler's queue, and a blackholed connection waits forever. So when an
// operation has run for stallCheck, a fresh connection to the shard is
// tried; if the shard definitely does not answer (connect or login fails,
// or SELECT 1 gets a FATAL or a class 08/57P error) the operation is
// cancelled with an error matching store.ErrUnreachable. A slow answer
// proves nothing: the check repeats every stallCheck.

// watch arms the stall check for one operation on sh. It returns the
// operation's context and done, which disarms the check and, when the
// check cancelled the operation, adds its verdict to err.
func (s *refStore) watch(ctx context.Context, sh *shard) (context.Context, func(err error) error) {
	if s.stallCheck <= 0 {
		return ctx, func(err error) error { return err }
	}
	opCtx, cancel := context.WithCancelCause(ctx)
	start := time.Now()
	checked := make(chan struct{})
	t := time.AfterFunc(s.stallCheck, func() {
		defer close(checked)
		for {
			if err := s.reachable(opCtx, sh); err != nil {
				cancel(fmt.Errorf("%w: shard %q did not answer a fresh connection after the operation stalled for %v: %w",
					store.ErrUnreachable, sh.name, time.Since(start).Round(time.Millisecond), err))
				return
			}
			select {
			case <-opCtx.Done():
				return
			case <-time.After(s.stallCheck):
			}
		}
	})
	return opCtx, func(err error) error {
		if cause := context.Cause(opCtx); err != nil && errors.Is(cause, store.ErrUnreachable) {
			err = fmt.Errorf("%w; the operation: %w", cause, err)
		}
		cancel(nil)
		if !t.Stop() {
			<-checked
		}
		return err
	}
}

// reachable returns an error only when sh definitely does not answer; nil
// when it answered, was merely slow, or ctx ended.
func (s *refStore) reachable(ctx context.Context, sh *shard) error {
	cctx, cancel := context.WithTimeout(ctx, s.connectTimeout)
	defer cancel()
	conn, err := pgconn.ConnectConfig(cctx, sh.check)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = conn.Exec(cctx, "SELECT 1").Close()
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Severity == "FATAL" || pe.Severity == "PANIC" ||
		strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P")) {
		return err
	}
	return nil
}
