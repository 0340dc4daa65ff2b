package mutant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// defaultConnectTimeout bounds each new connection, as the router's
// default does.
const defaultConnectTimeout = 2 * time.Second

// errNotSupported is returned by the ExecutionStore methods the chaos
// workload does not use.
var errNotSupported = errors.New("not supported by the mutant reference store")

// shard is one shard's pool.
type shard struct {
	name    string
	ordinal int
	pool    *pgxpool.Pool
	check   *pgconn.Config // the stall check's connections
}

// refStore is the reference store: the store's semantics as plain
// multi-statement transactions over one pgxpool per shard, with bug built
// in ("" for none).
type refStore struct {
	m        *shardmap.Map
	shards   []*shard // by index in m.Shards
	bug      Kind
	traceMax int
	timeout  string // statement_timeout for set_config, "" for none
	// stallCheck is how long an operation runs before its shard's
	// reachability is checked (0: never); see stall.go.
	stallCheck, connectTimeout time.Duration
	// outboxTurn and spawnTurn move the shard a relay read starts at.
	outboxTurn, spawnTurn atomic.Uint64
}

var _ store.ExecutionStore = (*refStore)(nil)

// OpenStore opens the reference SQL store over every shard of m (pooler
// DSNs when pooler and the shard has one) with bug built in; "" opens it
// with no bug, the control, which behaves like the production store (a
// router over m) for every operation the chaos workload uses. Only
// LevelStore kinds and "" are accepted; a bug that could not manifest with
// these arguments (TraceTrimOffByOne without o.TraceMax, WrongShard on one
// shard) is refused.
//
// Of o it uses ConnectAttempts, ConnectInterval, ConnectTimeout (default
// 2 s, the router's), MaxConns, StatementTimeout, TraceMax and
// ApplicationName (default "pgshard mutant") and StallCheck (default
// ConnectTimeout, negative for none; see stall.go), like the router;
// statements are always unnamed (pgx.QueryExecModeExec) and no session
// state is set, so it works behind PgBouncer in transaction mode.
// Every shard's identity record must name the map's shard and ordinal.
func OpenStore(ctx context.Context, m *shardmap.Map, pooler bool, bug Kind, o store.Options) (store.ExecutionStore, error) {
	if bug != "" {
		if _, err := lookupLevel(bug, LevelStore, "OpenStore"); err != nil {
			return nil, err
		}
	}
	m = m.Clone()
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("mutant store: %w", err)
	}
	switch {
	case bug == TraceTrimOffByOne && o.TraceMax <= 0:
		return nil, fmt.Errorf("mutant store %s: needs a trace ring cap (store.Options.TraceMax > 0), without one there is nothing to cut", bug)
	case bug == WrongShard && len(m.Shards) < 2:
		return nil, fmt.Errorf("mutant store %s: needs a map of at least 2 shards", bug)
	case o.TraceMax < 0 || o.StatementTimeout < 0:
		return nil, fmt.Errorf("mutant store: TraceMax and StatementTimeout must not be negative")
	}
	o = withDefaults(o)
	s := &refStore{m: m, shards: make([]*shard, len(m.Shards)), bug: bug, traceMax: o.TraceMax,
		stallCheck: max(o.StallCheck, 0), connectTimeout: o.ConnectTimeout}
	if o.StatementTimeout > 0 {
		s.timeout = strconv.FormatInt(max(o.StatementTimeout.Milliseconds(), 1), 10) + "ms"
	}
	var g errgroup.Group
	for i, sh := range m.Shards {
		g.Go(func() error {
			dsn := sh.DSN
			if pooler && sh.PoolerDSN != "" {
				dsn = sh.PoolerDSN
			}
			check, err := pgconn.ParseConfig(dsn)
			if err != nil {
				return fmt.Errorf("shard %q (%s): %w", sh.Name, store.RedactDSN(dsn), err)
			}
			check.ConnectTimeout = o.ConnectTimeout
			check.RuntimeParams["application_name"] = o.ApplicationName + " (stall check)"
			p, err := openPool(ctx, sh, dsn, o)
			if err != nil {
				return fmt.Errorf("shard %q (%s): %w", sh.Name, store.RedactDSN(dsn), err)
			}
			s.shards[i] = &shard{name: sh.Name, ordinal: sh.Ordinal, pool: p, check: check}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		s.Close()
		return nil, fmt.Errorf("mutant store: open shards: %w", err)
	}
	return s, nil
}

func withDefaults(o store.Options) store.Options {
	if o.ConnectAttempts <= 0 {
		o.ConnectAttempts = store.DefaultConnectAttempts
	}
	if o.ConnectInterval <= 0 {
		o.ConnectInterval = store.DefaultConnectInterval
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = defaultConnectTimeout
	}
	if o.MaxConns <= 0 {
		o.MaxConns = store.DefaultMaxConns
	}
	if o.ApplicationName == "" {
		o.ApplicationName = "pgshard mutant"
	}
	if o.StallCheck == 0 {
		o.StallCheck = o.ConnectTimeout
	}
	return o
}

// openPool opens sh's pool and retries, as o says, until the shard answers
// with an identity record matching sh.
func openPool(ctx context.Context, sh shardmap.Shard, dsn string, o store.Options) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(o.MaxConns)
	cfg.ConnConfig.ConnectTimeout = o.ConnectTimeout
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.ConnConfig.RuntimeParams["application_name"] = o.ApplicationName
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	var last error
	for attempt := 1; attempt <= o.ConnectAttempts; attempt++ {
		if attempt > 1 {
			t := time.NewTimer(o.ConnectInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				p.Close()
				return nil, fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			case <-t.C:
			}
		}
		if last = checkIdentity(ctx, p, sh, o.ConnectTimeout); last == nil {
			return p, nil
		}
		var mismatch *identityError
		if errors.As(last, &mismatch) {
			break // a wrong database does not become right by waiting
		}
	}
	p.Close()
	return nil, last
}

// identityError is a shard whose identity record disagrees with the map.
type identityError struct{ msg string }

func (e *identityError) Error() string { return e.msg }

// checkIdentity checks, bounded by timeout, that the shard answers and its
// identity record names sh (AckOutbox routes by the ordinal).
func checkIdentity(ctx context.Context, p *pgxpool.Pool, sh shardmap.Shard, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var name string
	var ordinal int
	err := p.QueryRow(ctx, `SELECT shard_name, ordinal FROM pgshard_identity`).Scan(&name, &ordinal)
	if errors.Is(err, pgx.ErrNoRows) {
		return &identityError{"the database has no pgshard identity record: run pgshard migrate"}
	}
	if err != nil {
		return err
	}
	if name != sh.Name || ordinal != sh.Ordinal {
		return &identityError{fmt.Sprintf("the database is shard %q (ordinal %d), the map says %q (ordinal %d)", name, ordinal, sh.Name, sh.Ordinal)}
	}
	return nil
}

// Close closes every shard's pool.
func (s *refStore) Close() {
	for _, sh := range s.shards {
		if sh != nil {
			sh.pool.Close()
		}
	}
}

// wrongShardBucket selects WrongShard's executions: bucket % 8 == 3.
func wrongShardBucket(bucket int) bool { return bucket%8 == 3 }

// forKey returns the shard execution id lives on: its bucket's owner, or
// with WrongShard, for a selected bucket, the next shard of the map.
func (s *refStore) forKey(id string) *shard {
	b := s.m.Bucket(id)
	i := s.m.ShardIndexForBucket(b)
	if s.bug == WrongShard && wrongShardBucket(b) {
		i = (i + 1) % len(s.shards)
	}
	return s.shards[i]
}

// forSeq returns the shard that generated seq (its ordinal's stride).
func (s *refStore) forSeq(seq int64) (*shard, error) {
	sh, err := s.m.ShardForSeq(seq)
	if err != nil {
		return nil, err
	}
	for _, x := range s.shards {
		if x.name == sh.Name {
			return x, nil
		}
	}
	return nil, fmt.Errorf("shard %q is not open", sh.Name) // unreachable: every map shard is
}

// onShard names the shard in err.
func onShard(sh *shard, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("shard %q: %w", sh.name, err)
}

// AppendTrace is not supported (the workload appends trace in commits).
func (s *refStore) AppendTrace(context.Context, string, json.RawMessage) error {
	return fmt.Errorf("append trace: %w", errNotSupported)
}

// ListExecutions is not supported.
func (s *refStore) ListExecutions(context.Context, store.ListOptions) (store.Page, error) {
	return store.Page{}, fmt.Errorf("list executions: %w", errNotSupported)
}
