package route

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// cache maps a query text to its analysis. It is bounded by entry count
// and evicts with CLOCK (second chance): a hit only sets an atomic
// "referenced" flag under a read lock, so hits neither allocate nor contend
// on a write lock; a miss inserts with the flag clear, so a text seen once
// (a query with inlined constants) is the first to go, while texts in use
// survive a sweep of the clock hand.
//
// The map is split into shards by a hash of the text so that concurrent
// misses and evictions do not all serialize on one lock.
type cache struct {
	shards []cacheShard
	mask   uint64
	seed   maphash.Seed
}

type cacheShard struct {
	mu   sync.RWMutex
	m    map[string]*cacheEntry
	ring []*cacheEntry
	hand int
	cap  int
	_    [40]byte // keep neighbouring shards' locks on separate cache lines
}

type cacheEntry struct {
	sql  string
	val  *analysis
	used atomic.Bool
}

// analysis is what the cache holds for one text: the statements Split
// returns and the statement Analyze returns.
type analysis struct {
	list []*Statement
	one  *Statement
}

const cacheShards = 16

func newCache(size int) *cache {
	if size <= 0 {
		return nil
	}
	n := cacheShards
	for n > 1 && size/n < 8 {
		n /= 2
	}
	c := &cache{shards: make([]cacheShard, n), mask: uint64(n - 1), seed: maphash.MakeSeed()}
	for i := range c.shards {
		per := size / n
		if i < size%n {
			per++
		}
		c.shards[i] = cacheShard{m: make(map[string]*cacheEntry, per), cap: per}
	}
	return c
}

func (c *cache) shard(sql string) *cacheShard {
	return &c.shards[maphash.String(c.seed, sql)&c.mask]
}

func (c *cache) get(sql string) *analysis {
	s := c.shard(sql)
	s.mu.RLock()
	e := s.m[sql]
	s.mu.RUnlock()
	if e == nil {
		return nil
	}
	if !e.used.Load() {
		e.used.Store(true)
	}
	return e.val
}

// put stores a and returns the value now cached for sql: a, or the value a
// concurrent caller stored first (so that every caller shares one analysis).
func (c *cache) put(sql string, a *analysis) *analysis {
	s := c.shard(sql)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m[sql]; e != nil {
		e.used.Store(true)
		return e.val
	}
	e := &cacheEntry{sql: sql, val: a}
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
func (c *cache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}
