package route

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// cache maps a query text to a value: its analysis (statements.texts) or
// the analysis of a literal-normalized text (statements.shapes). It is
// bounded by entry count and evicts with CLOCK (second chance): a hit only sets an atomic
// "referenced" flag under a read lock, so hits neither allocate nor contend
// on a write lock; a miss inserts with the flag clear, so a text seen once
// (a query with inlined constants) is the first to go, while texts in use
// survive a sweep of the clock hand.
//
// The map is split into shards by a hash of the text so that concurrent
// misses and evictions do not all serialize on one lock.
type cache[V any] struct {
	shards []cacheShard[V]
	mask   uint64
	seed   maphash.Seed
}

type cacheShard[V any] struct {
	mu   sync.RWMutex
	m    map[string]*cacheEntry[V]
	ring []*cacheEntry[V]
	hand int
	cap  int
	_    [40]byte // keep neighbouring shards' locks on separate cache lines
}

type cacheEntry[V any] struct {
	sql  string
	val  V
	used atomic.Bool
}

const cacheShards = 16

func newCache[V any](size int) *cache[V] {
	if size <= 0 {
		return nil
	}
	n := cacheShards
	for n > 1 && size/n < 8 {
		n /= 2
	}
	c := &cache[V]{shards: make([]cacheShard[V], n), mask: uint64(n - 1), seed: maphash.MakeSeed()}
	for i := range c.shards {
		per := size / n
		if i < size%n {
			per++
		}
		c.shards[i] = cacheShard[V]{m: make(map[string]*cacheEntry[V], per), cap: per}
	}
	return c
}

func (c *cache[V]) shard(sql string) *cacheShard[V] {
	return &c.shards[maphash.String(c.seed, sql)&c.mask]
}

// get returns the value cached for sql (the zero V if none).
func (c *cache[V]) get(sql string) V {
	s := c.shard(sql)
	s.mu.RLock()
	e := s.m[sql]
	s.mu.RUnlock()
	return e.hit()
}

// getBytes is get for a key held in a byte slice; it does not allocate.
func (c *cache[V]) getBytes(key []byte) V {
	s := &c.shards[maphash.Bytes(c.seed, key)&c.mask]
	s.mu.RLock()
	e := s.m[string(key)]
	s.mu.RUnlock()
	return e.hit()
}

func (e *cacheEntry[V]) hit() V {
	if e == nil {
		var zero V
		return zero
	}
	if !e.used.Load() {
		e.used.Store(true)
	}
	return e.val
}

// put stores a and returns the value now cached for sql: a, or the value a
// concurrent caller stored first (so that every caller shares one analysis).
func (c *cache[V]) put(sql string, a V) V {
	s := c.shard(sql)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m[sql]; e != nil {
		e.used.Store(true)
		return e.val
	}
	e := &cacheEntry[V]{sql: sql, val: a}
	if len(s.ring) < s.cap {
		s.ring = append(s.ring, e)
		s.m[sql] = e
		return a
	}
	// Second chance: clear referenced entries until an unreferenced one
	// comes under the hand; it is replaced. Bounded by two turns.
	for {
		victim := s.ring[s.hand]
		if victim.used.Load() {
			victim.used.Store(false)
			s.hand = (s.hand + 1) % len(s.ring)
			continue
		}
		delete(s.m, victim.sql)
		s.ring[s.hand] = e
		s.m[sql] = e
		s.hand = (s.hand + 1) % len(s.ring)
		return a
	}
}

// len is the number of cached texts.
func (c *cache[V]) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}
