package backend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/shardmap"
)

// Pool holds the backend connections of one shard, keyed by their
// startup settings, bounded by Env.PoolSize in total.
type Pool struct {
	// envp is the environment of the newest generation that has this
	// pool: the pool follows its settings (a reload that keeps the shard
	// keeps the pool, with its connections and statistics). Use env().
	envp      atomic.Pointer[Env]
	Shard     shardmap.Shard
	ViaPooler bool
	DSN       string
	// addr is host:port, for messages.
	Addr string
	// dial makes the pool's connections (dial.go).
	dial dialer

	mu      sync.Mutex
	idle    map[string][]*Conn
	nidle   int
	open    int // open or being opened
	waiters []*poolWaiter
	closed  bool
	// statuses per startup key: what a connection with those settings
	// reports at connect (the client's ParameterStatus values).
	statuses map[string]map[string]string
	// verified is set once the shard's identity record matched the map.
	Verified atomic.Bool
	// down is the shard's health: nil while its Postgres accepts
	// connections, else the error of the last probe (see probe).
	Down atomic.Pointer[pgwire.Error]
	// pgAddr is the shard's Postgres (the direct DSN), which the health
	// probe checks even when clients go through PgBouncer.
	pgAddr string
	// conns are all open connections (idle or in use), so that a shard
	// found down can unblock the sessions waiting on one; changed only when
	// a connection opens or closes.
	conns map[*Conn]struct{}

	// stats are the shard's counters (stats.go).
	Stats *Stats
	// bouncer reads the shard's PgBouncer for the monitor (bouncer.go;
	// only the monitor uses it).
	bouncer bouncerWatch
	// Ops is the operator's state of the pool and its controls: PAUSE,
	// back-pressure, RECONNECT, KILL, retirement (ops.go).
	Ops poolOps
}

type poolWaiter struct {
	key   string
	ch    chan poolGrant
	since time.Time
}

// poolGrant hands a waiter either a connection or the right to open one.
type poolGrant struct {
	c    *Conn
	open bool
}

// NewPool makes the pool of shard s (through its pooler when
// usePooler and the shard has one) in environment env.
func NewPool(env *Env, s shardmap.Shard, usePooler bool) (*Pool, error) {
	dsn, via := s.DSN, false
	if usePooler && s.PoolerDSN != "" {
		dsn, via = s.PoolerDSN, true
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("shard %q: parse dsn: %w", s.Name, err)
	}
	cfg.ConnectTimeout = env.ConnectTimeout
	// One address, no TLS negotiation fallbacks: a shard is one server.
	cfg.Fallbacks = nil
	dcfg, err := pgconn.ParseConfig(s.DSN)
	if err != nil {
		return nil, fmt.Errorf("shard %q: parse dsn: %w", s.Name, err)
	}
	p := &Pool{
		Shard: s, ViaPooler: via, DSN: dsn,
		Addr:     net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))),
		pgAddr:   net.JoinHostPort(dcfg.Host, strconv.Itoa(int(dcfg.Port))),
		idle:     map[string][]*Conn{},
		statuses: map[string]map[string]string{},
		conns:    map[*Conn]struct{}{},
		Stats:    newShardStats(s.Name),
	}
	p.dial = dialer{shard: s, base: cfg, addr: p.Addr, viaPooler: via,
		env: &p.envp, verified: &p.Verified, down: &p.Down}
	p.bouncer = bouncerWatch{shard: s.Name, addr: p.Addr, base: cfg, viaPooler: via,
		env: &p.envp, ops: &p.Ops}
	p.envp.Store(env)
	p.Ops.init(p)
	return p, nil
}

// errPoolClosed is returned by acquire after the server shut down.
var errPoolClosed = errors.New("the proxy is shutting down")

// Acquire returns a connection with startup settings key, opening one if
// needed and allowed, else waiting (bounded by PoolTimeout and ctx).
func (p *Pool) Acquire(ctx context.Context, key *Settings) (*Conn, error) {
	if e := p.Ops.refusal(); e != nil {
		p.Stats.NoteError(e.Code)
		return nil, e
	}
	if p.Ops.Paused.Load() {
		if err := p.Ops.waitResumed(ctx); err != nil {
			p.Stats.noteErr(err)
			return nil, err
		}
	}
	c, err := p.acquire1(ctx, key)
	if err != nil {
		p.Stats.noteErr(err)
		return nil, err
	}
	c.UsedSince.Store(time.Now().UnixNano())
	return c, nil
}

func (p *Pool) acquire1(ctx context.Context, key *Settings) (*Conn, error) {
	for attempt := 0; ; attempt++ {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, errPoolClosed
		}
		if l := p.idle[key.Key]; len(l) > 0 {
			c := l[len(l)-1]
			p.idle[key.Key] = l[:len(l)-1]
			p.nidle--
			p.mu.Unlock()
			if c.idleHealthy() {
				return c, nil
			}
			p.Discard(c)
			continue
		}
		if p.open < p.Env().PoolSize {
			p.open++
			p.mu.Unlock()
			return p.connect(ctx, key, "")
		}
		if victim := p.oldestIdleLocked(); victim != nil {
			// Full, but idle connections with other settings exist: replace one.
			p.mu.Unlock()
			p.forget(victim)
			return p.connect(ctx, key, "")
		}
		start := time.Now()
		w := &poolWaiter{key: key.Key, ch: make(chan poolGrant, 1), since: start}
		p.waiters = append(p.waiters, w)
		p.mu.Unlock()
		g, err := p.wait(ctx, w)
		waited := time.Since(start)
		p.Stats.Waits.Add(1)
		p.Stats.WaitNanos.Add(uint64(waited))
		p.Stats.WaitHist.Observe(waited.Seconds())
		if err != nil {
			return nil, err
		}
		if g.c != nil {
			if g.c.idleHealthy() {
				return g.c, nil
			}
			p.Discard(g.c)
			continue
		}
		if !g.open {
			return nil, errPoolClosed
		}
		return p.connect(ctx, key, "") // the grant carries the slot
	}
}

func (p *Pool) wait(ctx context.Context, w *poolWaiter) (poolGrant, error) {
	t := time.NewTimer(p.Env().PoolTimeout)
	defer t.Stop()
	select {
	case g := <-w.ch:
		return g, nil
	case <-ctx.Done():
	case <-t.C:
	}
	p.mu.Lock()
	for i, x := range p.waiters {
		if x == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			p.mu.Unlock()
			if ctx.Err() != nil {
				return poolGrant{}, ctx.Err()
			}
			return poolGrant{}, &pgwire.Error{Code: pgwire.CodeTooManyConnections,
				Message: fmt.Sprintf("timed out after %s waiting for a connection to shard %q (pool size %d)", p.Env().PoolTimeout, p.Shard.Name, p.Env().PoolSize),
				Hint:    "Raise proxy.pool_size (and the shard's max_connections) or shorten transactions."}
		}
	}
	p.mu.Unlock()
	// Granted concurrently with the timeout: give the grant back.
	g := <-w.ch
	if g.c != nil {
		p.Release(g.c)
	} else if g.open {
		p.slotFreed()
	}
	if ctx.Err() != nil {
		return poolGrant{}, ctx.Err()
	}
	return poolGrant{}, &pgwire.Error{Code: pgwire.CodeTooManyConnections, Message: fmt.Sprintf("timed out waiting for a connection to shard %q", p.Shard.Name)}
}

func (p *Pool) oldestIdleLocked() *Conn {
	var victim *Conn
	var vk string
	for k, l := range p.idle {
		if len(l) > 0 && (victim == nil || l[0].idleSince.Before(victim.idleSince)) {
			victim, vk = l[0], k
		}
	}
	if victim != nil {
		p.idle[vk] = p.idle[vk][1:]
		if len(p.idle[vk]) == 0 {
			delete(p.idle, vk)
		}
		p.nidle--
	}
	return victim
}

// Release returns a clean connection (no transaction open).
func (p *Pool) Release(c *Conn) {
	p.Stats.endUse(c)
	if c.Broken || c.Cancelled.Load() || p.Ops.retire(c) {
		p.Discard(c)
		return
	}
	if c.Reader.Ready != 'I' {
		// A bug's safety net: a connection with a transaction open (or
		// replies not read) would hold its locks for nobody and answer the
		// next client with someone else's replies. Close it instead.
		p.Env().BackendErrors.WithLabelValues(p.Shard.Name, "unclean").Inc()
		p.Env().Log.Error("a backend connection was returned not idle; closed instead", "shard", p.Shard.Name, "status", string(rune(c.Reader.Ready)))
		p.Discard(c)
		return
	}
	c.Reader.MaybeShrink()
	c.TxnChecked = false
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.Discard(c)
		return
	}
	if len(p.waiters) > 0 {
		w := p.waiters[0]
		p.waiters = p.waiters[1:]
		p.mu.Unlock()
		if w.key == c.key.Key {
			w.ch <- poolGrant{c: c}
			return
		}
		p.forget(c) // the slot passes to the waiter, who opens its own kind
		w.ch <- poolGrant{open: true}
		return
	}
	c.idleSince = time.Now()
	p.idle[c.key.Key] = append(p.idle[c.key.Key], c)
	p.nidle++
	p.mu.Unlock()
}

// Discard closes a connection and frees its slot.
func (p *Pool) Discard(c *Conn) {
	p.Stats.endUse(c)
	p.forget(c)
	p.slotFreed()
}

// CloseIdle closes every idle connection.
func (p *Pool) CloseIdle() {
	p.mu.Lock()
	var all []*Conn
	for _, l := range p.idle {
		all = append(all, l...)
	}
	p.idle = map[string][]*Conn{}
	p.nidle = 0
	p.mu.Unlock()
	for _, c := range all {
		p.Discard(c)
	}
}

// forget closes a connection whose slot the caller hands on.
func (p *Pool) forget(c *Conn) {
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// IsDown returns the shard's last health-probe error, nil if it is up.
func (p *Pool) IsDown() *pgwire.Error { return p.Down.Load() }

// slotFreed gives a freed slot to a waiter or returns it.
func (p *Pool) slotFreed() {
	p.mu.Lock()
	if len(p.waiters) > 0 {
		w := p.waiters[0]
		p.waiters = p.waiters[1:]
		p.mu.Unlock()
		w.ch <- poolGrant{open: true}
		return
	}
	p.open--
	p.mu.Unlock()
}

// connect opens a connection with startup settings key as user ("" =
// the key's or the DSN's) and makes it the pool's; the caller holds a
// slot, which is freed on failure.
func (p *Pool) connect(ctx context.Context, key *Settings, user string) (*Conn, error) {
	c, err := p.dial.open(ctx, key, user)
	if err != nil {
		p.slotFreed()
		p.Env().BackendErrors.WithLabelValues(p.Shard.Name, "connect").Inc()
		return nil, err
	}
	c.Pool = p
	c.gen = p.Ops.ReconnectGen.Load()
	p.mu.Lock()
	if _, ok := p.statuses[key.Key]; !ok {
		p.statuses[key.Key] = c.Statuses
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	return c, nil
}

// StartupStatuses returns the ParameterStatus values of a connection with
// startup settings key, connecting once if no connection was made yet.
func (p *Pool) StartupStatuses(ctx context.Context, key *Settings) (map[string]string, error) {
	p.mu.Lock()
	st, ok := p.statuses[key.Key]
	p.mu.Unlock()
	if ok {
		return st, nil
	}
	c, err := p.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	st = c.Statuses
	p.Release(c)
	return st, nil
}

// ReapIdle closes connections idle for longer than IdleTimeout.
func (p *Pool) ReapIdle(now time.Time) {
	var old []*Conn
	p.mu.Lock()
	for k, l := range p.idle {
		keep := l[:0]
		for _, c := range l {
			if now.Sub(c.idleSince) > p.Env().IdleTimeout {
				old = append(old, c)
			} else {
				keep = append(keep, c)
			}
		}
		if len(keep) == 0 {
			delete(p.idle, k)
		} else {
			p.idle[k] = keep
		}
	}
	p.nidle -= len(old)
	p.mu.Unlock()
	for _, c := range old {
		p.Discard(c)
	}
}

// Shutdown closes the idle connections and refuses new acquisitions;
// connections in use are closed when their sessions return them.
func (p *Pool) Shutdown() {
	p.mu.Lock()
	p.closed = true
	var all []*Conn
	for _, l := range p.idle {
		all = append(all, l...)
	}
	p.idle = map[string][]*Conn{}
	p.nidle = 0
	p.open -= len(all)
	waiters := p.waiters
	p.waiters = nil
	p.mu.Unlock()
	for _, c := range all {
		p.forget(c)
	}
	for _, w := range waiters {
		w.ch <- poolGrant{} // neither a connection nor a slot: closed
	}
}

// SendCancel sends a CancelRequest for c's backend process to the address c
// is connected to (Postgres, or PgBouncer which forwards it).
func SendCancel(ctx context.Context, addr net.Addr, pid uint32, secret []byte, timeout time.Duration) error {
	d := net.Dialer{Timeout: timeout}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := d.DialContext(ctx, addr.Network(), addr.String())
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	buf := make([]byte, 0, 16+len(secret))
	buf = pgwire.AppendU32(buf, uint32(12+len(secret)))
	buf = pgwire.AppendU32(buf, pgwire.CancelCode)
	buf = pgwire.AppendU32(buf, pid)
	buf = append(buf, secret...)
	if _, err := conn.Write(buf); err != nil {
		return err
	}
	// Postgres closes the connection without replying; wait for that so
	// the request has been read before we report it sent.
	var b [1]byte
	_, _ = conn.Read(b[:])
	return nil
}

func ShortErr(err error) string {
	var ne *net.OpError
	if errors.As(err, &ne) && ne.Err != nil {
		return ne.Op + ": " + ne.Err.Error()
	}
	return err.Error()
}

// AcquireAs is acquire for a pinned backend connecting as user ("" or
// the DSN's user: an ordinary acquire). Such a connection is never
// shared (pins are closed when they end), so it always opens a new one,
// waiting for a slot like acquire.
func (p *Pool) AcquireAs(ctx context.Context, key *Settings, user string) (*Conn, error) {
	if user == "" || user == p.dial.base.User {
		return p.Acquire(ctx, key)
	}
	if e := p.IsDown(); e != nil {
		return nil, e
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, errPoolClosed
		}
		if p.open < p.Env().PoolSize {
			p.open++
			p.mu.Unlock()
			return p.connect(ctx, key, user)
		}
		if victim := p.oldestIdleLocked(); victim != nil {
			p.mu.Unlock()
			p.forget(victim)
			return p.connect(ctx, key, user)
		}
		// A key no connection has: a release hands over its slot.
		w := &poolWaiter{key: "\x00user\x00" + user, ch: make(chan poolGrant, 1)}
		p.waiters = append(p.waiters, w)
		p.mu.Unlock()
		g, err := p.wait(ctx, w)
		if err != nil {
			return nil, err
		}
		if g.c != nil {
			p.Discard(g.c)
			continue
		}
		if !g.open {
			return nil, errPoolClosed
		}
		return p.connect(ctx, key, user)
	}
}

// OpenOutside opens a connection to p's server that is none of the
// pool's slots (no key's settings): for the proxy's own short reads that
// must not wait behind sessions holding every slot (the engine's catalog
// lookups, relabel.go). The caller ends it with Close.
func OpenOutside(ctx context.Context, p *Pool) (*Conn, error) {
	if e := p.IsDown(); e != nil {
		return nil, e
	}
	return p.dial.open(ctx, NoSettings, "")
}

// BackendUser is the user the pool's connections log in as.
func (p *Pool) BackendUser() string { return p.dial.base.User }

// Database is the database the pool's connections open.
func (p *Pool) Database() string { return p.dial.base.Database }

// ServerVersion is the server_version a connection of the pool reported
// at connect time ("" before the first connection).
func (p *Pool) ServerVersion() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := ""
	for _, st := range p.statuses {
		if sv := st["server_version"]; sv != "" {
			v = sv
		}
	}
	return v
}
