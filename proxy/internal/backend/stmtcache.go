package backend

import "strconv"

// StmtCache maps statement texts to server-side prepared statements on one
// direct connection, least recently used first out.
type StmtCache struct {
	max     int
	seq     uint64
	byKey   map[string]*CachedStmt
	head    CachedStmt // sentinel of the LRU list; head.next is the newest
	Evicted []string   // names to Close before the next use of the cache
	// Epoch is the value of Env.StmtEpoch the entries were prepared under.
	Epoch uint64
}

// CachedStmt is one prepared statement of a StmtCache.
type CachedStmt struct {
	key, Name  string
	Confirmed  bool // ParseComplete seen
	prev, next *CachedStmt
}

func NewStmtCache(max int) *StmtCache {
	c := &StmtCache{max: max, byKey: map[string]*CachedStmt{}}
	c.head.next, c.head.prev = &c.head, &c.head
	return c
}

func (c *StmtCache) unlink(e *CachedStmt) { e.prev.next, e.next.prev = e.next, e.prev }

func (c *StmtCache) pushFront(e *CachedStmt) {
	e.next, e.prev = c.head.next, &c.head
	c.head.next.prev = e
	c.head.next = e
}

// Get returns the cached statement for key and marks it recently used.
func (c *StmtCache) Get(key string) *CachedStmt {
	e := c.byKey[key]
	if e != nil && e != c.head.next {
		c.unlink(e)
		c.pushFront(e)
	}
	return e
}

// Add registers a new statement (to be parsed now) and returns it; the
// least recently used one is evicted when the cache is full.
func (c *StmtCache) Add(key string) *CachedStmt {
	if len(c.byKey) >= c.max {
		old := c.head.prev
		c.unlink(old)
		delete(c.byKey, old.key)
		if old.Confirmed {
			c.Evicted = append(c.Evicted, old.Name)
		}
	}
	c.seq++
	e := &CachedStmt{key: key, Name: "pgshard_" + strconv.FormatUint(c.seq, 10)}
	c.byKey[key] = e
	c.pushFront(e)
	return e
}

// Drop forgets an entry (its Parse failed, or it must be re-prepared).
func (c *StmtCache) Drop(e *CachedStmt) {
	if c.byKey[e.key] != e {
		return
	}
	c.unlink(e)
	delete(c.byKey, e.key)
	if e.Confirmed {
		c.Evicted = append(c.Evicted, e.Name)
	}
}

// Reset forgets every entry (closing the prepared ones before the next
// use) and moves the cache to epoch.
func (c *StmtCache) Reset(epoch uint64) {
	for e := c.head.next; e != &c.head; e = e.next {
		if e.Confirmed {
			c.Evicted = append(c.Evicted, e.Name)
		}
	}
	clear(c.byKey)
	c.head.next, c.head.prev = &c.head, &c.head
	c.Epoch = epoch
}

// DropUnconfirmed forgets entries whose Parse never completed.
func (c *StmtCache) DropUnconfirmed() {
	for e := c.head.next; e != &c.head; {
		n := e.next
		if !e.Confirmed {
			c.unlink(e)
			delete(c.byKey, e.key)
		}
		e = n
	}
}
