package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// DefaultConnectTimeout bounds each new connection to a shard: an
// operation on a shard that cannot be reached fails within it.
const DefaultConnectTimeout = 2 * time.Second

// Options configure Open.
type Options struct {
	// Store configures each shard's store (pool size, connect retries,
	// statement timeout, trace ring cap). Its ConnectTimeout defaults to
	// DefaultConnectTimeout here; BehindPooler is set per shard.
	Store store.Options
	// UsePooler connects to each shard through its PgBouncer (the map's
	// pooler_dsn) when it has one, else directly.
	UsePooler bool
}

// Router is the execution store over all shards of a map. It is safe for
// concurrent use.
type Router struct {
	m      *shardmap.Map
	stores []*store.Store // by index in m.Shards
	byName map[string]int // shard name → index in m.Shards
	// outboxTurn and spawnTurn count the calls of PendingOutbox and
	// PendingSpawns: the shard their batch starts with.
	outboxTurn, spawnTurn atomic.Uint64
}

var _ store.ExecutionStore = (*Router)(nil)

// ShardError is an error of one shard's operation.
type ShardError struct {
	// Shard is the shard's name in the map.
	Shard string
	Err   error
}

// Error is `shard "NAME": <the shard's error>`.
func (e *ShardError) Error() string { return fmt.Sprintf("shard %q: %v", e.Shard, e.Err) }

// Unwrap returns the shard's error.
func (e *ShardError) Unwrap() error { return e.Err }

// FailedShards returns the names of the shards err reports failures of
// (each *ShardError in its tree), in order of appearance, without repeats.
func FailedShards(err error) []string {
	var out []string
	seen := map[string]bool{}
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
			return
		case *ShardError:
			if !seen[e.Shard] {
				seen[e.Shard] = true
				out = append(out, e.Shard)
			}
			return
		case interface{ Unwrap() []error }:
			for _, c := range e.Unwrap() {
				walk(c)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}

// Open opens one store per shard of m — concurrently, each retrying as
// opts.Store says — and checks every shard's identity record against m
// (migrations.VerifyCluster). It refuses to start if any shard cannot be
// opened or disagrees with the map, naming the shards.
func Open(ctx context.Context, m *shardmap.Map, opts Options) (*Router, error) {
	m = m.Clone()
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	if opts.Store.ConnectTimeout <= 0 {
		opts.Store.ConnectTimeout = DefaultConnectTimeout
	}
	r := &Router{m: m, stores: make([]*store.Store, len(m.Shards)), byName: make(map[string]int, len(m.Shards))}
	for i, sh := range m.Shards {
		r.byName[sh.Name] = i
	}
	errs := make([]error, len(m.Shards))
	var g errgroup.Group
	for i, sh := range m.Shards {
		g.Go(func() error {
			so := opts.Store
			dsn := sh.DSN
			if opts.UsePooler && sh.PoolerDSN != "" {
				dsn, so.BehindPooler = sh.PoolerDSN, true
			}
			if so.ApplicationName == "" {
				so.ApplicationName = "pgshard router"
			}
			s, err := store.Open(ctx, dsn, so)
			if err != nil {
				errs[i] = &ShardError{Shard: sh.Name, Err: err}
				return nil
			}
			r.stores[i] = s
			return nil
		})
	}
	_ = g.Wait() // every goroutine returns nil; failures are in errs
	if err := errors.Join(errs...); err != nil {
		r.Close()
		return nil, fmt.Errorf("router: open shards: %w", err)
	}
	err := migrations.VerifyCluster(ctx, m, func(sh shardmap.Shard) migrations.Querier {
		return r.stores[r.index(sh.Name)].Pool()
	})
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("router: the shards disagree with the map (epoch %d): %w", m.Epoch, err)
	}
	return r, nil
}

// index returns the index of a shard of the map (the caller found it there).
func (r *Router) index(name string) int { return r.byName[name] }

// Close closes every shard's pool.
func (r *Router) Close() {
	for _, s := range r.stores {
		if s != nil {
			s.Close()
		}
	}
}

// Map returns the router's shard map (do not modify it).
func (r *Router) Map() *shardmap.Map { return r.m }

// ShardOf returns the name of the shard that owns execution id.
func (r *Router) ShardOf(id string) string { return r.m.Lookup(id).Name }

// Shards returns the shards' names in map order.
func (r *Router) Shards() []string {
	out := make([]string, len(r.m.Shards))
	for i, s := range r.m.Shards {
		out[i] = s.Name
	}
	return out
}

// Store returns the store of the shard named name, for administrative
// queries and tests.
func (r *Router) Store(name string) (*store.Store, error) {
	sh, err := r.m.ShardByName(name)
	if err != nil {
		return nil, err
	}
	return r.stores[r.index(sh.Name)], nil
}

// Stats are a router's counters.
type Stats struct {
	// RoundTrips sums the shards' round trips.
	RoundTrips uint64
	// Shards are the shards' own counters, by name.
	Shards map[string]store.Stats
}

// Stats returns the router's counters.
func (r *Router) Stats() Stats {
	st := Stats{Shards: make(map[string]store.Stats, len(r.stores))}
	for i, s := range r.stores {
		ss := s.Stats()
		st.RoundTrips += ss.RoundTrips
		st.Shards[r.m.Shards[i].Name] = ss
	}
	return st
}

// forKey returns the store owning execution id and its shard's name.
func (r *Router) forKey(id string) (*store.Store, string) {
	i := r.m.ShardIndexForBucket(r.m.Bucket(id))
	return r.stores[i], r.m.Shards[i].Name
}

// forSeq returns the store that generated seq.
func (r *Router) forSeq(seq int64) (*store.Store, string, error) {
	sh, err := r.m.ShardForSeq(seq)
	if err != nil {
		return nil, "", err
	}
	return r.stores[r.index(sh.Name)], sh.Name, nil
}

func wrap(shard string, err error) error {
	if err == nil {
		return nil
	}
	return &ShardError{Shard: shard, Err: err}
}

// Commit commits exe on the shard owning exe.ID; see store.Store.Commit.
// Outbox rows, spawn intents, timers and trace go to the same shard.
func (r *Router) Commit(ctx context.Context, exe *store.Execution, emits []store.Emit, processedEventID string,
	timers []store.TimerOp, spawns []store.Spawn, trace json.RawMessage) error {
	if exe == nil {
		return errors.New("commit: nil execution")
	}
	s, name := r.forKey(exe.ID)
	return wrap(name, s.Commit(ctx, exe, emits, processedEventID, timers, spawns, trace))
}

// Save saves exe on its shard.
func (r *Router) Save(ctx context.Context, exe *store.Execution) error {
	return r.Commit(ctx, exe, nil, "", nil, nil, nil)
}

// Load loads execution id from its shard.
func (r *Router) Load(ctx context.Context, id string) (*store.Execution, error) {
	s, name := r.forKey(id)
	e, err := s.Load(ctx, id)
	return e, wrap(name, err)
}

// LoadForEvent loads execution id and its dedupe flag from its shard.
func (r *Router) LoadForEvent(ctx context.Context, id, eventID string) (*store.Execution, bool, error) {
	s, name := r.forKey(id)
	e, ok, err := s.LoadForEvent(ctx, id, eventID)
	return e, ok, wrap(name, err)
}

// IsProcessed asks execution id's shard.
func (r *Router) IsProcessed(ctx context.Context, id, eventID string) (bool, error) {
	s, name := r.forKey(id)
	ok, err := s.IsProcessed(ctx, id, eventID)
	return ok, wrap(name, err)
}

// AckOutbox deletes outbox row seq on the shard whose ordinal seq names.
func (r *Router) AckOutbox(ctx context.Context, seq int64) error {
	s, name, err := r.forSeq(seq)
	if err != nil {
		return fmt.Errorf("ack outbox seq %d: %w", seq, err)
	}
	return wrap(name, s.AckOutbox(ctx, seq))
}

// AckSpawn deletes spawn intent seq on the shard whose ordinal seq names.
func (r *Router) AckSpawn(ctx context.Context, seq int64) error {
	s, name, err := r.forSeq(seq)
	if err != nil {
		return fmt.Errorf("ack spawn seq %d: %w", seq, err)
	}
	return wrap(name, s.AckSpawn(ctx, seq))
}

// DeleteTimer deletes a timer on execution id's shard if it still fires at
// fireAt.
func (r *Router) DeleteTimer(ctx context.Context, id, path string, fireAt float64) (bool, error) {
	s, name := r.forKey(id)
	ok, err := s.DeleteTimer(ctx, id, path, fireAt)
	return ok, wrap(name, err)
}

// AppendTrace appends to execution id's trace ring on its shard.
func (r *Router) AppendTrace(ctx context.Context, id string, entry json.RawMessage) error {
	s, name := r.forKey(id)
	return wrap(name, s.AppendTrace(ctx, id, entry))
}

// ReadTrace reads execution id's trace ring from its shard.
func (r *Router) ReadTrace(ctx context.Context, id string) ([]store.TraceEntry, error) {
	s, name := r.forKey(id)
	t, err := s.ReadTrace(ctx, id)
	return t, wrap(name, err)
}
