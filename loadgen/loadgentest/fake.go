// Package loadgentest provides an in-memory loadgen.Target with a
// configurable service model (fixed service time, bounded capacity,
// injected delays and errors), so the load generator's engine can be
// tested for honesty without a database.
package loadgentest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/pgshard/pgshard/loadgen"
)

// Options shape the fake's service model.
type Options struct {
	// Shards is how many shards the fake's Locator reports (default 1).
	Shards int
	// Capacity is how many calls are served at once (0 = unbounded); the
	// others queue, as on a server with that many backends.
	Capacity int
	// Service is how long every call holds its slot.
	Service time.Duration
	// Extra, when set, adds a delay to a call (op is "load", "commit", ...).
	Extra func(op string) time.Duration
	// Err, when set, may fail a call before it does anything.
	Err func(op string) error
}

// Target is an in-memory execution store that implements loadgen.Target
// and loadgen.Locator with the store's semantics: CAS on version (0 =
// first save), dedupe ledger, outbox, spawns, timers (upsert / cancel /
// delete-if-fire_at-matches) and trace, all applied atomically.
type Target struct {
	o     Options
	slots chan struct{}

	mu        sync.Mutex
	exes      map[string]loadgen.Execution
	processed map[string]map[string]bool
	outbox    []loadgen.OutboxEntry
	spawns    []loadgen.SpawnEntry
	timers    map[[2]string]float64
	trace     map[string]int
	seq       int64
	stats     Stats
}

// Stats counts what the fake saw.
type Stats struct {
	Commits, FastCommits, Conflicts, Loads int64
	Emits, Acks, TimerDeletes, SpawnAcks   int64
}

var (
	_ loadgen.Target  = (*Target)(nil)
	_ loadgen.Locator = (*Target)(nil)
)

// New returns an empty fake.
func New(o Options) *Target {
	if o.Shards < 1 {
		o.Shards = 1
	}
	t := &Target{o: o, exes: map[string]loadgen.Execution{}, processed: map[string]map[string]bool{},
		timers: map[[2]string]float64{}, trace: map[string]int{}}
	if o.Capacity > 0 {
		t.slots = make(chan struct{}, o.Capacity)
	}
	return t
}

// serve models one call: wait for a slot, hold it for the service time.
func (t *Target) serve(ctx context.Context, op string) error {
	if t.o.Err != nil {
		if err := t.o.Err(op); err != nil {
			return err
		}
	}
	if t.slots != nil {
		select {
		case t.slots <- struct{}{}:
			defer func() { <-t.slots }()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	d := t.o.Service
	if t.o.Extra != nil {
		d += t.o.Extra(op)
	}
	if d > 0 {
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// LoadForEvent implements loadgen.Target.
func (t *Target) LoadForEvent(ctx context.Context, id, eventID string) (*loadgen.Execution, bool, error) {
	if err := t.serve(ctx, "load"); err != nil {
		return nil, false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stats.Loads++
	e, ok := t.exes[id]
	if !ok {
		return nil, false, nil
	}
	return &e, eventID != "" && t.processed[id][eventID], nil
}

// Commit implements loadgen.Target.
func (t *Target) Commit(ctx context.Context, c *loadgen.Commit) error {
	if err := t.serve(ctx, "commit"); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, ok := t.exes[c.Exe.ID]
	switch {
	case !ok && c.Exe.Version != 0, ok && cur.Version != c.Exe.Version:
		t.stats.Conflicts++
		return fmt.Errorf("%w: %s expected version %d, found %d", loadgen.ErrConflict, c.Exe.ID, c.Exe.Version, cur.Version)
	}
	e := c.Exe
	e.Version++
	t.exes[e.ID] = e
	t.stats.Commits++
	if c.Fast() {
		t.stats.FastCommits++
	}
	if c.ProcessedEventID != "" {
		if t.processed[e.ID] == nil {
			t.processed[e.ID] = map[string]bool{}
		}
		t.processed[e.ID][c.ProcessedEventID] = true
	}
	for _, em := range c.Emits {
		t.seq++
		t.outbox = append(t.outbox, loadgen.OutboxEntry{Seq: t.seq, TargetID: em.TargetID, Event: em.Event})
		t.stats.Emits++
	}
	for _, s := range c.Spawns {
		t.seq++
		t.spawns = append(t.spawns, loadgen.SpawnEntry{Seq: t.seq, ParentID: e.ID, ChildID: s.ChildID})
	}
	for _, tm := range c.Timers {
		k := [2]string{e.ID, tm.Path}
		if tm.Cancel {
			delete(t.timers, k)
		} else {
			t.timers[k] = tm.FireAt
		}
	}
	if c.Trace != "" {
		t.trace[e.ID]++
	}
	return nil
}

// PendingOutbox implements loadgen.Target.
func (t *Target) PendingOutbox(ctx context.Context, limit int) ([]loadgen.OutboxEntry, error) {
	if err := t.serve(ctx, "pending_outbox"); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]loadgen.OutboxEntry(nil), t.outbox[:limited(len(t.outbox), limit)]...), nil
}

// AckOutbox implements loadgen.Target.
func (t *Target) AckOutbox(ctx context.Context, seq int64) error {
	if err := t.serve(ctx, "ack_outbox"); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, o := range t.outbox {
		if o.Seq == seq {
			t.outbox = append(t.outbox[:i], t.outbox[i+1:]...)
			t.stats.Acks++
			break
		}
	}
	return nil
}

// PendingSpawns implements loadgen.Target.
func (t *Target) PendingSpawns(ctx context.Context, limit int) ([]loadgen.SpawnEntry, error) {
	if err := t.serve(ctx, "pending_spawns"); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]loadgen.SpawnEntry(nil), t.spawns[:limited(len(t.spawns), limit)]...), nil
}

// AckSpawn implements loadgen.Target.
func (t *Target) AckSpawn(ctx context.Context, seq int64) error {
	if err := t.serve(ctx, "ack_spawn"); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, s := range t.spawns {
		if s.Seq == seq {
			t.spawns = append(t.spawns[:i], t.spawns[i+1:]...)
			t.stats.SpawnAcks++
			break
		}
	}
	return nil
}

// DueTimers implements loadgen.Target.
func (t *Target) DueTimers(ctx context.Context, now float64, limit int) ([]loadgen.TimerEntry, error) {
	if err := t.serve(ctx, "due_timers"); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var due []loadgen.TimerEntry
	for k, at := range t.timers {
		if at <= now {
			due = append(due, loadgen.TimerEntry{ExecutionID: k[0], Path: k[1], FireAt: at})
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].FireAt < due[j].FireAt })
	return due[:limited(len(due), limit)], nil
}

// DeleteTimer implements loadgen.Target.
func (t *Target) DeleteTimer(ctx context.Context, id, path string, fireAt float64) (bool, error) {
	if err := t.serve(ctx, "delete_timer"); err != nil {
		return false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	k := [2]string{id, path}
	if at, ok := t.timers[k]; ok && at == fireAt {
		delete(t.timers, k)
		t.stats.TimerDeletes++
		return true, nil
	}
	return false, nil
}

// limited returns min(n, limit), or n when limit <= 0.
func limited(n, limit int) int {
	if limit > 0 && limit < n {
		return limit
	}
	return n
}

// Close implements loadgen.Target.
func (t *Target) Close() {}

// Shards implements loadgen.Locator: "fake0", "fake1", ...
func (t *Target) Shards() []string {
	names := make([]string, t.o.Shards)
	for i := range names {
		names[i] = fmt.Sprintf("fake%d", i)
	}
	return names
}

// ShardOf implements loadgen.Locator (FNV-1a of the id, modulo Shards).
func (t *Target) ShardOf(id string) int {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return int(h % uint32(t.o.Shards))
}

// Stats returns what the fake has seen so far.
func (t *Target) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// Executions returns how many executions exist.
func (t *Target) Executions() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.exes)
}

// Version returns id's stored version (0 if absent).
func (t *Target) Version(id string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exes[id].Version
}
