package migrations

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Defaults of the waits a migration may do.
const (
	// DefaultLockTimeout bounds each wait for a lock: the migrators'
	// advisory lock, and the table locks of DDL and of the sequence
	// stride. Short, because a lock request that waits also makes every
	// later writer of the table wait behind it.
	DefaultLockTimeout = 10 * time.Second
	// DefaultStatementTimeout bounds each statement of a migration
	// (CREATE INDEX on an adopted table with many rows takes a while).
	DefaultStatementTimeout = 10 * time.Minute
)

// limits are the lock_timeout and statement_timeout of every migration
// transaction (0: none).
type limits struct {
	lock, statement time.Duration
}

func (o Options) limits() limits {
	l := limits{lock: o.LockTimeout, statement: o.StatementTimeout}
	if l.lock == 0 {
		l.lock = DefaultLockTimeout
	}
	if l.statement == 0 {
		l.statement = DefaultStatementTimeout
	}
	return l
}

// setting renders a timeout for set_config ("0" turns it off).
func setting(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10) + "ms"
}

// Blocker is a backend that held a lock a migration waited for, as
// pg_stat_activity showed it while the migration waited.
type Blocker struct {
	PID             int
	ApplicationName string
	User            string
	State           string        // "idle in transaction", "active", ...
	InTransaction   time.Duration // since its transaction started
	Query           string        // its current or last statement (first 200 characters)
}

func (b Blocker) String() string {
	return fmt.Sprintf("backend pid %d (application_name %q, user %q, state %q, in its transaction for %v, last query %q)",
		b.PID, b.ApplicationName, b.User, b.State, b.InTransaction.Round(100*time.Millisecond), b.Query)
}

// TimeoutError is a migration statement cancelled by its lock_timeout or
// statement_timeout, with the backends that blocked it (pg_blocking_pids)
// when they could be seen.
type TimeoutError struct {
	// Which is "lock timeout" or "statement timeout".
	Which string
	// After is the timeout that expired.
	After time.Duration
	// Blockers are the backends the statement waited for (none if it did
	// not wait for a lock, or they finished before they were seen).
	Blockers []Blocker
	Err      error
}

func (e *TimeoutError) Error() string {
	msg := fmt.Sprintf("%v: %s after %v", e.Err, e.Which, e.After)
	switch {
	case len(e.Blockers) > 0:
		var bs []string
		var pids []string
		for _, b := range e.Blockers {
			bs = append(bs, b.String())
			pids = append(pids, strconv.Itoa(b.PID))
		}
		msg += ", blocked by " + strings.Join(bs, " and ") +
			fmt.Sprintf("; end its transaction (SELECT pg_terminate_backend(%s)) or wait and migrate again", strings.Join(pids, "), pg_terminate_backend("))
	case e.Which == "lock timeout":
		msg += " (the backend holding the lock was not seen: it may have finished; migrate again)"
	}
	if e.Which == "lock timeout" {
		msg += "; --lock-timeout sets the bound"
	} else {
		msg += "; --statement-timeout sets the bound"
	}
	return msg
}

func (e *TimeoutError) Unwrap() error { return e.Err }

// blockersSQL lists the backends a backend waits for.
const blockersSQL = `SELECT a.pid, COALESCE(a.application_name, ''), COALESCE(a.usename::text, ''), COALESCE(a.state, ''),
       COALESCE(EXTRACT(EPOCH FROM now() - a.xact_start), 0)::float8, left(COALESCE(a.query, ''), 200)
FROM pg_stat_activity a WHERE a.pid = ANY (pg_blocking_pids($1)) ORDER BY a.pid`

// blockWatch watches, from a connection of its own, which backends block
// one migration transaction while it waits.
type blockWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	seen   []Blocker // the last non-empty answer
}

// watchBlockers starts watching the backend pid: every interval it asks
// pg_blocking_pids over a connection it opens with cfg (only once the
// transaction has lasted one interval, so that quick migrations open no
// second connection). stop ends it and waits for it.
func watchBlockers(ctx context.Context, cfg *pgx.ConnConfig, pid int, every time.Duration) *blockWatch {
	wctx, cancel := context.WithCancel(ctx)
	w := &blockWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTimer(every)
		defer t.Stop()
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.WithoutCancel(ctx))
			}
		}()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			t.Reset(every)
			if conn == nil {
				c := cfg.Copy()
				c.RuntimeParams["application_name"] = "pgshard migrate (lock watch)"
				var err error
				if conn, err = pgx.ConnectConfig(wctx, c); err != nil {
					conn = nil
					continue
				}
			}
			rows, err := conn.Query(wctx, blockersSQL, pid)
			if err != nil {
				continue
			}
			var bs []Blocker
			var b Blocker
			var secs float64
			_, err = pgx.ForEachRow(rows, []any{&b.PID, &b.ApplicationName, &b.User, &b.State, &secs, &b.Query}, func() error {
				b.InTransaction = time.Duration(secs * float64(time.Second))
				bs = append(bs, b)
				return nil
			})
			if err == nil && len(bs) > 0 {
				w.mu.Lock()
				w.seen = bs
				w.mu.Unlock()
			}
		}
	}()
	return w
}

// stop ends the watch, waits for it, and returns what it saw.
func (w *blockWatch) stop() []Blocker {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}

// inLockedTx runs fn in a transaction that first bounds its waits
// (lock_timeout, statement_timeout; SET LOCAL's function form, so nothing
// outlives the transaction on a pooled server connection) and takes the
// migrators' transaction-level advisory lock (released by COMMIT/ROLLBACK).
// A statement cancelled by either timeout fails with a *TimeoutError that
// names the backends it waited for.
func inLockedTx(ctx context.Context, conn *pgx.Conn, lim limits, fn func(pgx.Tx) error) error {
	return inTx(ctx, conn, lim, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey); err != nil {
			return fmt.Errorf("advisory lock (pg_advisory_xact_lock, which every migrator takes): %w", err)
		}
		return fn(tx)
	})
}

// inTx runs fn in a transaction with bounded waits (see inLockedTx).
func inTx(ctx context.Context, conn *pgx.Conn, lim limits, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var pid int
		var lt, st string
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid(), set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)`,
			setting(lim.lock), setting(lim.statement)).Scan(&pid, &lt, &st); err != nil {
			return fmt.Errorf("bound the migration's waits: %w", err)
		}
		// The watch must see the blocker before the lock timeout expires,
		// connection included, also on a loaded machine: it looks
		// five times within the lock timeout (at most once a second).
		every := time.Second
		if lim.lock > 0 {
			every = min(every, max(lim.lock/5, 50*time.Millisecond))
		}
		w := watchBlockers(ctx, conn.Config(), pid, every)
		err := fn(tx)
		seen := w.stop()
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			switch {
			case pe.Code == "55P03" && strings.Contains(pe.Message, "lock timeout"):
				return &TimeoutError{Which: "lock timeout", After: lim.lock, Blockers: seen, Err: err}
			case pe.Code == "57014" && strings.Contains(pe.Message, "statement timeout"):
				return &TimeoutError{Which: "statement timeout", After: lim.statement, Blockers: seen, Err: err}
			}
		}
		return err
	})
}
