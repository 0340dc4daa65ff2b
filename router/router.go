package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
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
	// Maps is where the router reloads its map when a shard's fence
	// refuses an operation (a *catalog.Catalog satisfies it). nil: the
	// router never reloads by itself and returns the refusal.
	Maps MapSource
	// Lease, when set, is asked before every keyed operation whether the
	// router may serve (a *catalog.Follower satisfies it: nil while its
	// catalog lease is live); an error refuses the operation, matching
	// ErrNotServing and the Lease's error. nil: always serve.
	Lease LeaseChecker
}

// LeaseChecker says whether a router may serve at local time now: nil, or
// why not (catalog.Follower.Check).
type LeaseChecker interface {
	Check(now time.Time) error
}

// ErrNotServing is matched (errors.Is) by the error of a keyed operation
// refused because Options.Lease said the router may not serve: its map
// cannot be proven current. Nothing was sent to a shard.
var ErrNotServing = errors.New("router is not serving")

// MapSource yields the shard map in force (catalog.Catalog.Load).
type MapSource interface {
	Load(ctx context.Context) (*shardmap.Map, error)
}

// Router is the execution store over all shards of a map. It is safe for
// concurrent use. Its map can be replaced while it runs (SetMap, Reload):
// each operation routes with the map it started with.
type Router struct {
	opts Options
	rt   atomic.Pointer[routing]
	// mu serializes map changes and guards open.
	mu sync.Mutex
	// open holds every store opened, by shard name and DSN, reused by
	// later maps and closed by Close (an operation of an earlier map may
	// still be using one).
	open map[string]*store.Store
	// verified holds the identity record read, by shard name and DSN (as
	// open), of every shard a map the router switched to had: a later
	// map checks it again (against its own epoch and shards) without
	// reading it, so a shard that is unreachable when the map changes
	// does not keep the router on its old map.
	verified map[string]migrations.Identity
	// outboxTurn and spawnTurn count the calls of PendingOutbox and
	// PendingSpawns: the shard their batch starts with.
	outboxTurn, spawnTurn atomic.Uint64
	// reloadHook, when set (tests of the retry policy), replaces Reload
	// in keyed.
	reloadHook func(context.Context) (bool, error)
	// reloading makes the keyed operations refused by one flip share one
	// catalog read (reloadAfter) instead of each reading the whole map.
	reloading reloadGate
}

// routing is one map with a store per shard; never changed once built.
type routing struct {
	m      *shardmap.Map
	stores []*store.Store // by index in m.Shards
	byName map[string]int // shard name → index in m.Shards
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
	if opts.Store.ConnectTimeout <= 0 {
		opts.Store.ConnectTimeout = DefaultConnectTimeout
	}
	r := &Router{opts: opts, open: map[string]*store.Store{}, verified: map[string]migrations.Identity{}}
	if err := r.SetMap(ctx, m); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// SetMap makes m the router's map: it opens a store for each shard it has
// no store for yet and checks every shard's identity against m, then
// switches; operations already under way finish with the map they
// started with. A shard (name and DSN) an earlier map of this router had
// is checked by the identity read then, not read again: one that cannot
// be reached now does not hold the router on its old map (a follower
// whose lease lapsed must switch before it serves again), and its
// operations fail as they would under the old map. A map whose epoch is not newer than the current one is
// ignored (nil error), so a router never goes back to an older map. On
// error the router keeps its map.
func (r *Router) SetMap(ctx context.Context, m *shardmap.Map) error {
	m = m.Clone()
	if err := m.Validate(); err != nil {
		return fmt.Errorf("router: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.rt.Load(); cur != nil && m.Epoch <= cur.m.Epoch {
		return nil
	}
	rt := &routing{m: m, stores: make([]*store.Store, len(m.Shards)), byName: make(map[string]int, len(m.Shards))}
	errs := make([]error, len(m.Shards))
	var g errgroup.Group
	for i, sh := range m.Shards {
		rt.byName[sh.Name] = i
		so := r.opts.Store
		dsn := sh.DSN
		if r.opts.UsePooler && sh.PoolerDSN != "" {
			dsn, so.BehindPooler = sh.PoolerDSN, true
		}
		if s, ok := r.open[r.shardKey(sh)]; ok {
			rt.stores[i] = s
			continue
		}
		g.Go(func() error {
			if so.ApplicationName == "" {
				so.ApplicationName = "pgshard router"
			}
			s, err := store.Open(ctx, dsn, so)
			if err != nil {
				errs[i] = &ShardError{Shard: sh.Name, Err: err}
				return nil
			}
			rt.stores[i] = s
			return nil
		})
	}
	_ = g.Wait() // every goroutine returns nil; failures are in errs
	// Keep what opened (a later map may reuse it; Close closes it).
	for i, sh := range m.Shards {
		if s := rt.stores[i]; s != nil {
			r.open[r.shardKey(sh)] = s
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("router: open shards: %w", err)
	}
	if err := r.verify(ctx, rt); err != nil {
		return fmt.Errorf("router: the shards disagree with the map (epoch %d): %w", m.Epoch, err)
	}
	r.rt.Store(rt)
	return nil
}

// shardKey names a shard's store in open and verified: its name and the
// DSN the router reaches it by.
func (r *Router) shardKey(sh shardmap.Shard) string {
	dsn := sh.DSN
	if r.opts.UsePooler && sh.PoolerDSN != "" {
		dsn = sh.PoolerDSN
	}
	return sh.Name + "\x00" + dsn
}

// verify checks every shard's identity record against rt's map, as
// migrations.VerifyCluster does (each record matches its entry, no two
// entries share a database), reading only the records of shards not
// verified before (r.verified, which it completes); r.mu must be held.
func (r *Router) verify(ctx context.Context, rt *routing) error {
	m := rt.m
	ids := make(map[string]migrations.Identity, len(m.Shards))
	var errs []error
	for i, sh := range m.Shards {
		key := r.shardKey(sh)
		id, ok := r.verified[key]
		if !ok {
			var err error
			if id, err = migrations.ReadIdentity(ctx, rt.stores[i].Pool()); err != nil {
				errs = append(errs, fmt.Errorf("shard %q: %w", sh.Name, err))
				continue
			}
		}
		if err := id.Check(sh, m); err != nil {
			errs = append(errs, fmt.Errorf("shard %q: %w", sh.Name, err))
			continue
		}
		ids[key] = id
	}
	byName := make(map[string]migrations.Identity, len(ids))
	for _, sh := range m.Shards {
		if id, ok := ids[r.shardKey(sh)]; ok {
			byName[sh.Name] = id
		}
	}
	if err := migrations.CheckDistinct(byName); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	maps.Copy(r.verified, ids)
	return nil
}

// Reload loads the map from Options.Maps and switches to it if it is
// newer (SetMap). It reports whether the router's map changed; without
// Options.Maps it does nothing.
func (r *Router) Reload(ctx context.Context) (bool, error) {
	if r.opts.Maps == nil {
		return false, nil
	}
	before := r.rt.Load()
	m, err := r.opts.Maps.Load(ctx)
	if err != nil {
		return false, fmt.Errorf("router: reload the shard map: %w", err)
	}
	if err := r.SetMap(ctx, m); err != nil {
		return false, err
	}
	return r.rt.Load() != before, nil
}

// Close closes every shard's pool.
func (r *Router) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.open {
		s.Close()
	}
	r.open = map[string]*store.Store{}
}

// Epoch returns the epoch of the router's map (for a catalog follower's
// lease: catalog.Follower.Run(ctx, r.Epoch, r.SetMap)).
func (r *Router) Epoch() uint64 { return r.rt.Load().m.Epoch }

// Map returns the router's shard map (do not modify it).
func (r *Router) Map() *shardmap.Map { return r.rt.Load().m }

// ShardOf returns the name of the shard that owns execution id.
func (r *Router) ShardOf(id string) string { return r.rt.Load().m.Lookup(id).Name }

// Shards returns the shards' names in map order.
func (r *Router) Shards() []string {
	m := r.rt.Load().m
	out := make([]string, len(m.Shards))
	for i, s := range m.Shards {
		out[i] = s.Name
	}
	return out
}

// Store returns the store of the shard named name, for administrative
// queries and tests.
func (r *Router) Store(name string) (*store.Store, error) {
	rt := r.rt.Load()
	sh, err := rt.m.ShardByName(name)
	if err != nil {
		return nil, err
	}
	return rt.stores[rt.byName[sh.Name]], nil
}

// Stats are a router's counters.
type Stats struct {
	// RoundTrips sums the shards' round trips.
	RoundTrips uint64
	// Shards are the shards' own counters, by name.
	Shards map[string]store.Stats
}

// Stats returns the router's counters (of the shards of its map).
func (r *Router) Stats() Stats {
	rt := r.rt.Load()
	st := Stats{Shards: make(map[string]store.Stats, len(rt.stores))}
	for i, s := range rt.stores {
		ss := s.Stats()
		st.RoundTrips += ss.RoundTrips
		st.Shards[rt.m.Shards[i].Name] = ss
	}
	return st
}

// forKey returns the store owning execution id and its shard's name.
func (rt *routing) forKey(id string) (*store.Store, string) {
	i := rt.m.ShardIndexForBucket(rt.m.Bucket(id))
	return rt.stores[i], rt.m.Shards[i].Name
}

// forSeq returns the store that generated seq.
func (rt *routing) forSeq(seq int64) (*store.Store, string, error) {
	sh, err := rt.m.ShardForSeq(seq)
	if err != nil {
		return nil, "", err
	}
	return rt.stores[rt.byName[sh.Name]], sh.Name, nil
}

func wrap(shard string, err error) error {
	if err == nil {
		return nil
	}
	return &ShardError{Shard: shard, Err: err}
}

// keyed runs op on the shard owning id. When that shard's fence refuses
// it — which the shard does before doing anything, in op's one
// transaction, so nothing was applied — the router reloads its map
// (Options.Maps) and, if the map changed meanwhile (by this reload or
// another), runs op once more on the owner the new map names. With
// Options.Lease, an operation the lease does not cover is refused before
// anything is sent (ErrNotServing). Any other
// error, a commit whose outcome is unknown above all, is returned as it
// is: never retried.
func keyed[T any](ctx context.Context, r *Router, id string, op func(*store.Store) (T, error)) (T, error) {
	if r.opts.Lease != nil {
		if err := r.opts.Lease.Check(time.Now()); err != nil {
			var zero T
			return zero, fmt.Errorf("router: execution %s: %w: %w", id, ErrNotServing, err)
		}
	}
	rt := r.rt.Load()
	s, name := rt.forKey(id)
	v, err := untilFlipped(ctx, rt, s, op)
	if err == nil || !errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrOutcomeUnknown) || r.opts.Maps == nil {
		return v, wrap(name, err)
	}
	if rerr := reloadAfter(ctx, r, rt, err); rerr != nil {
		return v, errors.Join(wrap(name, err), rerr)
	}
	if r.rt.Load() == rt { // the map in force is the one refused
		return v, wrap(name, err)
	}
	rt = r.rt.Load()
	s, name = rt.forKey(id)
	v, err = untilFlipped(ctx, rt, s, op)
	return v, wrap(name, err)
}

// reloadAfter reloads the map after a keyed operation routed by rt was
// refused by a fence (refusal), unless a map that already answers the
// refusal is in force: one installed since rt at an epoch no older than
// the refusing fence's. The operations one flip refuses at once (every
// client of the range in flight) wait for one another's reload instead of
// each reading the catalog: the first reads it, the others find its map.
func reloadAfter(ctx context.Context, r *Router, rt *routing, refusal error) error {
	answered := func() bool {
		cur := r.rt.Load()
		var fe *store.FenceError
		return cur != rt && errors.As(refusal, &fe) && cur.m.Epoch >= fe.Epoch
	}
	if answered() {
		return nil
	}
	if err := r.reloading.enter(ctx); err != nil {
		return err
	}
	defer r.reloading.leave()
	if answered() {
		return nil
	}
	reload := r.Reload
	if r.reloadHook != nil {
		reload = r.reloadHook
	}
	_, err := reload(ctx)
	return err
}

// reloadGate lets one reload run at a time; waiting for it honours ctx
// (a channel, not a mutex). Its zero value is ready to use.
type reloadGate struct {
	once sync.Once
	ch   chan struct{}
}

func (g *reloadGate) enter(ctx context.Context) error {
	g.once.Do(func() { g.ch = make(chan struct{}, 1) })
	select {
	case g.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *reloadGate) leave() { <-g.ch }

// flipWait bounds how long an operation waits for a destination shard
// that has not yet taken a flip its map already shows.
const flipWait = 2 * time.Second

// untilFlipped runs op on s, the owner rt's map names. A move's flip is
// recorded in the catalog first, then on the source's fence, then on the
// destination's: a router that already holds the new map may reach the
// destination while its fence still says "incoming" at an older epoch
// than the map's. That refusal (nothing was done) means "not yet", not
// "elsewhere": op runs again after a short pause, for at most flipWait,
// after which the refusal is returned (a mover that died in between
// leaves the range unavailable until apply or abort runs again).
func untilFlipped[T any](ctx context.Context, rt *routing, s *store.Store, op func(*store.Store) (T, error)) (T, error) {
	v, err := op(s)
	if !notYetFlipped(err, rt.m.Epoch) {
		return v, err
	}
	pause := 2 * time.Millisecond
	deadline := time.Now().Add(flipWait)
	for notYetFlipped(err, rt.m.Epoch) && time.Now().Before(deadline) {
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
		v, err = op(s)
	}
	return v, err
}

// notYetFlipped reports whether err is a fence refusal of a range still
// incoming at an epoch older than epoch, the map's that routed there.
func notYetFlipped(err error, epoch uint64) bool {
	var fe *store.FenceError
	return errors.As(err, &fe) && !errors.Is(err, store.ErrOutcomeUnknown) && fe.State == "incoming" && fe.Epoch < epoch
}

// Commit commits exe on the shard owning exe.ID; see store.Store.Commit.
// Outbox rows, spawn intents, timers and trace go to the same shard.
func (r *Router) Commit(ctx context.Context, exe *store.Execution, emits []store.Emit, processedEventID string,
	timers []store.TimerOp, spawns []store.Spawn, trace json.RawMessage) error {
	if exe == nil {
		return errors.New("commit: nil execution")
	}
	_, err := keyed(ctx, r, exe.ID, func(s *store.Store) (struct{}, error) {
		return struct{}{}, s.Commit(ctx, exe, emits, processedEventID, timers, spawns, trace)
	})
	return err
}

// Save saves exe on its shard.
func (r *Router) Save(ctx context.Context, exe *store.Execution) error {
	return r.Commit(ctx, exe, nil, "", nil, nil, nil)
}

// Load loads execution id from its shard.
func (r *Router) Load(ctx context.Context, id string) (*store.Execution, error) {
	return keyed(ctx, r, id, func(s *store.Store) (*store.Execution, error) { return s.Load(ctx, id) })
}

// LoadForEvent loads execution id and its dedupe flag from its shard.
func (r *Router) LoadForEvent(ctx context.Context, id, eventID string) (*store.Execution, bool, error) {
	type loaded struct {
		e  *store.Execution
		ok bool
	}
	l, err := keyed(ctx, r, id, func(s *store.Store) (loaded, error) {
		e, ok, err := s.LoadForEvent(ctx, id, eventID)
		return loaded{e, ok}, err
	})
	return l.e, l.ok, err
}

// IsProcessed asks execution id's shard.
func (r *Router) IsProcessed(ctx context.Context, id, eventID string) (bool, error) {
	return keyed(ctx, r, id, func(s *store.Store) (bool, error) { return s.IsProcessed(ctx, id, eventID) })
}

// AckOutbox deletes outbox row seq on the shard whose ordinal seq names.
func (r *Router) AckOutbox(ctx context.Context, seq int64) error {
	s, name, err := r.rt.Load().forSeq(seq)
	if err != nil {
		return fmt.Errorf("ack outbox seq %d: %w", seq, err)
	}
	return wrap(name, s.AckOutbox(ctx, seq))
}

// AckSpawn deletes spawn intent seq on the shard whose ordinal seq names.
func (r *Router) AckSpawn(ctx context.Context, seq int64) error {
	s, name, err := r.rt.Load().forSeq(seq)
	if err != nil {
		return fmt.Errorf("ack spawn seq %d: %w", seq, err)
	}
	return wrap(name, s.AckSpawn(ctx, seq))
}

// DeleteTimer deletes a timer on execution id's shard if it still fires at
// fireAt.
func (r *Router) DeleteTimer(ctx context.Context, id, path string, fireAt float64) (bool, error) {
	return keyed(ctx, r, id, func(s *store.Store) (bool, error) { return s.DeleteTimer(ctx, id, path, fireAt) })
}

// AppendTrace appends to execution id's trace ring on its shard.
func (r *Router) AppendTrace(ctx context.Context, id string, entry json.RawMessage) error {
	_, err := keyed(ctx, r, id, func(s *store.Store) (struct{}, error) { return struct{}{}, s.AppendTrace(ctx, id, entry) })
	return err
}

// ReadTrace reads execution id's trace ring from its shard.
func (r *Router) ReadTrace(ctx context.Context, id string) ([]store.TraceEntry, error) {
	return keyed(ctx, r, id, func(s *store.Store) ([]store.TraceEntry, error) { return s.ReadTrace(ctx, id) })
}
