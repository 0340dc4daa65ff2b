package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the execution store on one Postgres database, over a pgxpool.
// It is safe for concurrent use. Every operation is one round trip and one
// transaction (see the package documentation).
type Store struct {
	pool       *pgxpool.Pool
	opts       Options
	dsn        string // redacted, for errors
	timeout    string // statement_timeout value for set_config, "" for none
	roundTrips atomic.Uint64
	pings      atomic.Uint64 // liveness pings of idle connections (in roundTrips too)
	// checkConfig connects the stall checks: no pool, no round-trip
	// counting.
	checkConfig *pgconn.Config
	// buckets is the shard's bucket count (its identity record's, which
	// never changes): the keyed reads compute a key's bucket here for the
	// fence's verdict (reads.go).
	buckets int
}

var _ ExecutionStore = (*Store)(nil)

// errNotMigrated is returned by the connection probe of a database without
// pgshard's schema.
var errNotMigrated = errors.New("the database lacks pgshard's schema (function pgshard_commit, migration 0005): run pgshard migrate")

// errNoIdentity is returned by the connection probe of a database with
// pgshard's schema but no identity record: its global sequences are not
// strided for a shard ordinal yet, so outbox and spawn seqs written now
// would name another shard.
var errNoIdentity = errors.New("the database has pgshard's schema but no identity record (pgshard_identity), so its sequences are not strided for a shard yet: run pgshard migrate with the shard map")

// Open connects to the database at dsn, retrying as opts say
// (ConnectAttempts tries, ConnectInterval apart, each bounded by
// ConnectTimeout) until the server answers and has pgshard's schema and
// identity record (written by pgshard migrate, which strides the outbox
// and spawn sequences for the shard's ordinal), or ctx ends. The error after the last attempt names the DSN (password redacted)
// and the last failure.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &Store{opts: opts, dsn: RedactDSN(dsn)}
	if opts.StatementTimeout > 0 {
		s.timeout = strconv.FormatInt(max(opts.StatementTimeout.Milliseconds(), 1), 10) + "ms"
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors do not quote the DSN's password.
		return nil, fmt.Errorf("open store %s: %w", s.dsn, err)
	}
	cfg.MaxConns = int32(opts.MaxConns)
	cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	cfg.ConnConfig.DefaultQueryExecMode = opts.ExecMode
	cfg.ConnConfig.RuntimeParams["application_name"] = opts.ApplicationName
	cfg.ConnConfig.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, c net.Conn) (net.Conn, error) {
		return newCountingConn(c, &s.roundTrips), nil
	}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		if cc, ok := c.PgConn().Conn().(*countingConn); ok {
			cc.start()
		}
		return nil
	}
	idle := opts.PingAfterIdle
	cfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
		if idle >= 0 && p.IdleDuration > idle {
			s.pings.Add(1)
			return true
		}
		return false
	}
	if s.checkConfig, err = pgconn.ParseConfig(dsn); err != nil {
		return nil, fmt.Errorf("open store %s: %w", s.dsn, err)
	}
	s.checkConfig.ConnectTimeout = opts.ConnectTimeout
	s.checkConfig.RuntimeParams["application_name"] = opts.ApplicationName + " (stall check)"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", s.dsn, err)
	}
	s.pool = pool
	if err := s.connect(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// connect probes the database until it answers or the attempts run out.
func (s *Store) connect(ctx context.Context) error {
	start := time.Now()
	var last error
	for attempt := 1; attempt <= s.opts.ConnectAttempts; attempt++ {
		if attempt > 1 {
			t := time.NewTimer(s.opts.ConnectInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("connect to %s: %w after %d attempts in %v (last error: %v)",
					s.dsn, ctx.Err(), attempt-1, time.Since(start).Round(time.Millisecond), last)
			case <-t.C:
			}
		}
		last = s.probe(ctx)
		if last == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("connect to %s: %w after %d attempts: %v", s.dsn, ctx.Err(), attempt, last)
		}
	}
	return fmt.Errorf("connect to %s: gave up after %d attempts in %v: %w",
		s.dsn, s.opts.ConnectAttempts, time.Since(start).Round(time.Millisecond), last)
}

// probe checks, bounded by ConnectTimeout, that the server answers, has
// the schema and the identity record that pgshard migrate writes when it
// strides the global sequences.
func (s *Store) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ConnectTimeout)
	defer cancel()
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regproc('pgshard_commit') IS NOT NULL`).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return errNotMigrated
	}
	// pgshard_identity exists wherever pgshard_commit does (0003 < 0005);
	// it holds one row at most.
	var buckets *int32
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT buckets FROM pgshard_identity)`).Scan(&buckets); err != nil {
		return err
	}
	if buckets == nil {
		return errNoIdentity
	}
	s.buckets = int(*buckets)
	return nil
}

// Close closes the pool, waiting for connections in use to be released.
func (s *Store) Close() { s.pool.Close() }

// Pool returns the store's pool, for administrative queries and tests.
// Statements sent through it bypass the store's statement timeout.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// DSN returns the DSN the store connects to, password redacted.
func (s *Store) DSN() string { return s.dsn }

// Stats are counters of a Store.
type Stats struct {
	// RoundTrips counts client→server round trips on the store's
	// connections since Open, measured on the wire (connection setup
	// excluded). Every connection of Pool counts, also for statements
	// sent through Pool directly.
	RoundTrips uint64
	// Pings counts the pool's liveness pings of connections that sat idle
	// longer than Options.PingAfterIdle; each is one of RoundTrips, not
	// part of any operation (a loaded machine leaves connections idle
	// longer, so it pings more).
	Pings uint64
	// TotalConns and IdleConns describe the pool now.
	TotalConns int
	IdleConns  int
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	ps := s.pool.Stat()
	return Stats{RoundTrips: s.roundTrips.Load(), Pings: s.pings.Load(), TotalConns: int(ps.TotalConns()), IdleConns: int(ps.IdleConns())}
}

// setTimeoutSQL is SET LOCAL statement_timeout as a function call: it takes
// a parameter and, unlike SET LOCAL outside BEGIN, does not warn in the
// implicit transaction of a pipeline. Its effect ends with the transaction.
const setTimeoutSQL = `SELECT set_config('statement_timeout', $1::text, true)`

// newBatch starts a batch, with the statement timeout when one is set.
func (s *Store) newBatch() *pgx.Batch {
	b := &pgx.Batch{}
	if s.timeout != "" {
		b.Queue(setTimeoutSQL, s.timeout)
	}
	return b
}

// run sends b — every statement, then one Sync — in one write and hands
// the results to read, after the statement-timeout result. The statements
// form one implicit transaction, which the server commits at the Sync if
// all succeeded and rolls back otherwise, in the same round trip. sent
// reports whether any byte of the batch may have reached the server.
// An operation that stalls is checked as watchStall says; one cancelled
// because its server is unreachable returns an error matching
// ErrUnreachable.
func (s *Store) run(ctx context.Context, b *pgx.Batch, read func(pgx.BatchResults) error) (sent bool, err error) {
	ctx, stop := s.watchStall(ctx)
	defer stop()
	defer func() {
		if err != nil {
			if ue := unreachableCause(ctx); ue != nil {
				err = fmt.Errorf("%w; the operation: %w", ue, err)
			}
		}
	}()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	cc, _ := conn.Conn().PgConn().Conn().(*countingConn)
	var before uint64
	if cc != nil {
		before = cc.writes.Load()
	}
	br := conn.SendBatch(ctx, b)
	if s.timeout != "" {
		_, err = br.Exec()
	}
	if err == nil && read != nil {
		err = read(br)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	err = fenced(err)
	sent = cc == nil || cc.writes.Load() != before
	return sent, err
}

// query runs one statement in its own transaction and calls scan for each
// row.
func (s *Store) query(ctx context.Context, sql string, args []any, scan func(pgx.Rows) error) error {
	b := s.newBatch()
	b.Queue(sql, args...)
	_, err := s.run(ctx, b, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	return err
}

// exec runs one statement in its own transaction and returns the rows it
// affected.
func (s *Store) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	b := s.newBatch()
	b.Queue(sql, args...)
	var n int64
	_, err := s.run(ctx, b, func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// execFenced runs one keyed write in its own transaction after the fence's
// assert for key (the batch's first statement, in the same round trip), and
// returns the rows the write affected.
func (s *Store) execFenced(ctx context.Context, key, sql string, args ...any) (int64, error) {
	b := s.newBatch()
	b.Queue(fenceAssertSQL, key)
	b.Queue(sql, args...)
	var n int64
	_, err := s.run(ctx, b, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		tag, err := br.Exec()
		n = tag.RowsAffected()
		return err
	})
	return n, err
}
