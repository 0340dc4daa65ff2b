package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/shardmap"
)

// bconn is one authenticated backend connection (to a shard's Postgres or
// its PgBouncer), taken over from pgconn with Hijack. It is used by one
// session at a time; between transactions it sits idle in its pool, clean:
// no open transaction, no session state the proxy did not put there at
// connect time (its startup settings, which are its pool key).
type bconn struct {
	pool *shardPool
	nc   net.Conn
	io   io.ReadWriter
	rd   *pgwire.MsgReader
	// key is the startup settings the connection was opened with.
	key *settings
	// statuses are the ParameterStatus values the backend reported at
	// connect time.
	statuses map[string]string
	pid      uint32
	secret   []byte
	// stmts caches server-side prepared statements (direct connections
	// only; nil through a pooler).
	stmts *stmtCache
	// idleSince is when the connection was last returned to its pool.
	idleSince time.Time
	// broken marks a connection that must not be reused.
	broken bool
	// downErr is set when the shard was found down while the connection
	// was in use (its reads are then interrupted).
	downErr atomic.Pointer[pgwire.Error]
	// peekFn, peekBuf, peekOK: idleHealthy's state.
	peekFn  func(fd uintptr) bool
	peekBuf [1]byte
	peekOK  bool
	// txnChecked: in the client transaction it serves, the isolation
	// check of fan-out reads passed (fanout.go); cleared when released.
	txnChecked bool
	// cancelled is set when a cancel request was sent for this connection;
	// the connection is then closed instead of being reused, so a late
	// cancel can never hit another client's query.
	cancelled atomic.Bool
	// usedSince is when the current use began (unix nanoseconds), 0 while
	// idle (stats.go).
	usedSince atomic.Int64
	// queries, sent and the reader's received bytes since the last
	// release (owned by the session using the connection).
	queries, sent, recvMark uint64
	// opened is when the connection was made; gen the pool's reconnect
	// generation then (RECONNECT closes older ones when released).
	opened time.Time
	gen    uint64
	// tls: the connection is encrypted.
	tls bool
}

// write sends b in one write.
func (c *bconn) write(b []byte) error {
	c.rd.Ready = 0 // until its ReadyForQuery is read
	c.sent += uint64(len(b))
	if _, err := c.io.Write(b); err != nil {
		c.broken = true
		return err
	}
	return nil
}

// close closes the network connection (politely: Terminate first).
func (c *bconn) close() {
	_ = c.nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.nc.Write([]byte{'X', 0, 0, 0, 4})
	_ = c.nc.Close()
}

// idleHealthy reports whether an idle connection is still usable: nothing
// may be waiting to be read (a terminated backend sends a FATAL error, a
// closed one EOF). One non-blocking peek.
func (c *bconn) idleHealthy() bool {
	if c.rd.Buffered() > 0 || c.downErr.Load() != nil {
		return false
	}
	if time.Since(c.idleSince) < peekAfter {
		// Just used: a peek would find nothing new (and it costs a system
		// call per transaction under load). A backend terminated in this
		// window is still reported to the client as an error, as it would
		// be if it died a moment after the peek.
		return true
	}
	r, ok := c.io.(*pgwire.RawIO)
	if !ok {
		return true
	}
	c.peekOK = true
	if err := r.RawConn().Read(c.peekFn); err != nil {
		return false
	}
	return c.peekOK
}

// readable reports, without blocking, whether the backend sent something
// not read yet (or closed the connection).
func (c *bconn) readable() bool {
	if c.rd.Buffered() > 0 {
		return true
	}
	r, ok := c.io.(*pgwire.RawIO)
	if !ok || c.peekFn == nil {
		return false
	}
	c.peekOK = true
	if err := r.RawConn().Read(c.peekFn); err != nil {
		return true // the next read reports it
	}
	return !c.peekOK
}

// peekAfter: connections idle for less are not peeked at.
const peekAfter = 20 * time.Millisecond

// peek is idleHealthy's non-blocking MSG_PEEK (made once per connection,
// so a check allocates nothing).
func (c *bconn) peek(fd uintptr) bool {
	n, _, err := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&c.peekBuf[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	switch {
	case err == syscall.EAGAIN:
	case err != 0:
		c.peekOK = false
	case n > 0:
		c.peekOK = false // unsolicited data: an error or a notice before closing
	default:
		c.peekOK = false // EOF
	}
	return true
}

// shardPool holds the backend connections of one shard, keyed by their
// startup settings, bounded by Config.PoolSize in total.
type shardPool struct {
	// srvp is the newest generation that has this pool: the pool follows
	// its Config (a reload that keeps the shard keeps the pool, with its
	// connections and statistics). Use server().
	srvp      atomic.Pointer[Server]
	core      *core
	shard     shardmap.Shard
	viaPooler bool
	base      *pgconn.Config
	dsn       string
	// addr is host:port, for messages.
	addr string

	mu      sync.Mutex
	idle    map[string][]*bconn
	nidle   int
	open    int // open or being opened
	waiters []*poolWaiter
	closed  bool
	// statuses per startup key: what a connection with those settings
	// reports at connect (the client's ParameterStatus values).
	statuses map[string]map[string]string
	// verified is set once the shard's identity record matched the map.
	verified atomic.Bool
	// down is the shard's health: nil while its Postgres accepts
	// connections, else the error of the last probe (see probe).
	down atomic.Pointer[pgwire.Error]
	// pgAddr is the shard's Postgres (the direct DSN), which the health
	// probe checks even when clients go through PgBouncer.
	pgAddr string
	// conns are all open connections (idle or in use), so that a shard
	// found down can unblock the sessions waiting on one; changed only when
	// a connection opens or closes.
	conns map[*bconn]struct{}

	// stats are the shard's counters (stats.go).
	stats *shardStats
	// bouncer is the monitor's connection to the shard's PgBouncer admin
	// console (bouncer.go; only the monitor uses it).
	bouncer bouncerConn
	// ops is the operator's state of the pool: paused, back-pressure,
	// reconnect, retirement (pool_ops.go).
	ops poolOps
	// pauseWaiters counts sessions held by PAUSE, the oldest since
	// oldestPauseWaiter (guarded by mu; SHOW POOLS).
	pauseWaiters      int32
	oldestPauseWaiter time.Time
	// SHOW STATS's averages (stats.go).
	avgMu    sync.Mutex
	lastSnap statsSnap
	avg      atomic.Pointer[statsAvg]
}

type poolWaiter struct {
	key   string
	ch    chan poolGrant
	since time.Time
}

// poolGrant hands a waiter either a connection or the right to open one.
type poolGrant struct {
	c    *bconn
	open bool
}

func newShardPool(srv *Server, idx int, s shardmap.Shard, usePooler bool) (*shardPool, error) {
	dsn, via := s.DSN, false
	if usePooler && s.PoolerDSN != "" {
		dsn, via = s.PoolerDSN, true
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("shard %q: parse dsn: %w", s.Name, err)
	}
	cfg.ConnectTimeout = srv.cfg.ConnectTimeout
	// One address, no TLS negotiation fallbacks: a shard is one server.
	cfg.Fallbacks = nil
	dcfg, err := pgconn.ParseConfig(s.DSN)
	if err != nil {
		return nil, fmt.Errorf("shard %q: parse dsn: %w", s.Name, err)
	}
	p := &shardPool{
		core: srv.core, shard: s, viaPooler: via, base: cfg, dsn: dsn,
		addr:     net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))),
		pgAddr:   net.JoinHostPort(dcfg.Host, strconv.Itoa(int(dcfg.Port))),
		idle:     map[string][]*bconn{},
		statuses: map[string]map[string]string{},
		conns:    map[*bconn]struct{}{},
		stats:    newShardStats(s.Name),
	}
	p.srvp.Store(srv)
	p.ops.init()
	return p, nil
}

// server returns the generation whose Config the pool follows.
func (p *shardPool) server() *Server { return p.srvp.Load() }

// errPoolClosed is returned by acquire after the server shut down.
var errPoolClosed = errors.New("the proxy is shutting down")

// acquire returns a connection with startup settings key, opening one if
// needed and allowed, else waiting (bounded by PoolTimeout and ctx).
func (p *shardPool) acquire(ctx context.Context, key *settings) (*bconn, error) {
	if e := p.refusal(); e != nil {
		p.stats.noteError(e.Code)
		return nil, e
	}
	if p.ops.paused.Load() {
		if err := p.waitResumed(ctx); err != nil {
			p.stats.noteErr(err)
			return nil, err
		}
	}
	c, err := p.acquire1(ctx, key)
	if err != nil {
		p.stats.noteErr(err)
		return nil, err
	}
	c.usedSince.Store(time.Now().UnixNano())
	return c, nil
}

// refusal returns the error that fails a new transaction on the shard at
// once, nil when it may start: the shard is down, or its PgBouncer is
// overloaded (back-pressure), or the pool was retired by a reload.
func (p *shardPool) refusal() *pgwire.Error {
	if e := p.down.Load(); e != nil {
		return e
	}
	return p.ops.refuse.Load()
}

func (p *shardPool) acquire1(ctx context.Context, key *settings) (*bconn, error) {
	for attempt := 0; ; attempt++ {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, errPoolClosed
		}
		if l := p.idle[key.key]; len(l) > 0 {
			c := l[len(l)-1]
			p.idle[key.key] = l[:len(l)-1]
			p.nidle--
			p.mu.Unlock()
			if c.idleHealthy() {
				return c, nil
			}
			p.discard(c)
			continue
		}
		if p.open < p.server().cfg.PoolSize {
			p.open++
			p.mu.Unlock()
			return p.connect(ctx, key)
		}
		if victim := p.oldestIdleLocked(); victim != nil {
			// Full, but idle connections with other settings exist: replace one.
			p.mu.Unlock()
			p.forget(victim)
			return p.connect(ctx, key)
		}
		start := time.Now()
		w := &poolWaiter{key: key.key, ch: make(chan poolGrant, 1), since: start}
		p.waiters = append(p.waiters, w)
		p.mu.Unlock()
		g, err := p.wait(ctx, w)
		waited := time.Since(start)
		p.stats.waits.Add(1)
		p.stats.waitNanos.Add(uint64(waited))
		p.stats.waitHist.Observe(waited.Seconds())
		if err != nil {
			return nil, err
		}
		if g.c != nil {
			if g.c.idleHealthy() {
				return g.c, nil
			}
			p.discard(g.c)
			continue
		}
		if !g.open {
			return nil, errPoolClosed
		}
		return p.connect(ctx, key) // the grant carries the slot
	}
}

func (p *shardPool) wait(ctx context.Context, w *poolWaiter) (poolGrant, error) {
	t := time.NewTimer(p.server().cfg.PoolTimeout)
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
				Message: fmt.Sprintf("timed out after %s waiting for a connection to shard %q (pool size %d)", p.server().cfg.PoolTimeout, p.shard.Name, p.server().cfg.PoolSize),
				Hint:    "Raise proxy.pool_size (and the shard's max_connections) or shorten transactions."}
		}
	}
	p.mu.Unlock()
	// Granted concurrently with the timeout: give the grant back.
	g := <-w.ch
	if g.c != nil {
		p.release(g.c)
	} else if g.open {
		p.slotFreed()
	}
	if ctx.Err() != nil {
		return poolGrant{}, ctx.Err()
	}
	return poolGrant{}, &pgwire.Error{Code: pgwire.CodeTooManyConnections, Message: fmt.Sprintf("timed out waiting for a connection to shard %q", p.shard.Name)}
}

func (p *shardPool) oldestIdleLocked() *bconn {
	var victim *bconn
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

// release returns a clean connection (no transaction open).
func (p *shardPool) release(c *bconn) {
	p.endUse(c)
	if c.broken || c.cancelled.Load() || p.ops.retire(c) {
		p.discard(c)
		return
	}
	if c.rd.Ready != 'I' {
		// A bug's safety net: a connection with a transaction open (or
		// replies not read) would hold its locks for nobody and answer the
		// next client with someone else's replies. Close it instead.
		p.server().metrics.backendErrors.WithLabelValues(p.shard.Name, "unclean").Inc()
		p.server().log.Error("a backend connection was returned not idle; closed instead", "shard", p.shard.Name, "status", string(rune(c.rd.Ready)))
		p.discard(c)
		return
	}
	c.rd.MaybeShrink()
	c.txnChecked = false
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.discard(c)
		return
	}
	if len(p.waiters) > 0 {
		w := p.waiters[0]
		p.waiters = p.waiters[1:]
		p.mu.Unlock()
		if w.key == c.key.key {
			w.ch <- poolGrant{c: c}
			return
		}
		p.forget(c) // the slot passes to the waiter, who opens its own kind
		w.ch <- poolGrant{open: true}
		return
	}
	c.idleSince = time.Now()
	p.idle[c.key.key] = append(p.idle[c.key.key], c)
	p.nidle++
	p.mu.Unlock()
}

// discard closes a connection and frees its slot.
func (p *shardPool) discard(c *bconn) {
	p.endUse(c)
	p.forget(c)
	p.slotFreed()
}

// forget closes a connection whose slot the caller hands on.
func (p *shardPool) forget(c *bconn) {
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// isDown returns the shard's last health-probe error, nil if it is up.
func (p *shardPool) isDown() *pgwire.Error { return p.down.Load() }

// probe checks that the shard's Postgres accepts TCP connections (a
// connection, closed at once, costs the server one short-lived process).
// Through PgBouncer this is what lets a transaction fail fast while the
// shard is down: PgBouncer itself would keep the client waiting until its
// query_wait_timeout. When the shard goes down, sessions waiting on one of
// its pooler connections are unblocked with an error.
func (p *shardPool) probe(ctx context.Context) {
	d := net.Dialer{Timeout: p.server().cfg.ConnectTimeout}
	conn, err := d.DialContext(ctx, "tcp", p.pgAddr)
	if err == nil {
		_ = conn.Close()
		if p.down.Swap(nil) != nil {
			p.server().log.Info("shard is reachable again", "shard", p.shard.Name)
		}
		return
	}
	if ctx.Err() != nil {
		return
	}
	e := &pgwire.Error{Code: pgwire.CodeConnectionFailure,
		Message: fmt.Sprintf("shard %q is down: its server at %s does not accept connections (%s)", p.shard.Name, p.pgAddr, shortErr(err)),
		Hint:    "Transactions for other shards still work; retry when the shard is back."}
	if p.down.Swap(e) == nil {
		p.server().log.Warn("shard is down", "shard", p.shard.Name, "addr", p.pgAddr, "err", shortErr(err))
		p.server().metrics.backendErrors.WithLabelValues(p.shard.Name, "down").Inc()
		if p.viaPooler {
			p.mu.Lock()
			for c := range p.conns {
				// Idle ones are discarded by their next health check.
				c.downErr.Store(e)
				_ = c.nc.SetReadDeadline(time.Now())
			}
			p.mu.Unlock()
		}
	}
}

// slotFreed gives a freed slot to a waiter or returns it.
func (p *shardPool) slotFreed() {
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

// connect opens a connection; the caller holds a slot, which is freed on
// failure.
func (p *shardPool) connect(ctx context.Context, key *settings) (*bconn, error) {
	c, err := p.dial(ctx, key)
	if err != nil {
		p.slotFreed()
		p.server().metrics.backendErrors.WithLabelValues(p.shard.Name, "connect").Inc()
		return nil, err
	}
	return c, nil
}

func (p *shardPool) dial(ctx context.Context, key *settings) (*bconn, error) {
	return p.dialAs(ctx, key, "")
}

// dialAs is dial connecting as user ("" = the DSN's).
func (p *shardPool) dialAs(ctx context.Context, key *settings, user string) (*bconn, error) {
	cfg := p.base.Copy()
	if user == "" {
		user = key.user
	}
	if user != "" {
		cfg.User = user
	}
	for k, v := range key.runtimeParams(p.viaPooler) {
		cfg.RuntimeParams[k] = v
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "pgshard proxy"
	}
	ctx, cancel := context.WithTimeout(ctx, p.server().cfg.ConnectTimeout)
	defer cancel()
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, p.connectError(err)
	}
	if p.server().cfg.VerifyIdentity && !p.verified.Load() {
		if err := p.verify(ctx, pc); err != nil {
			_ = pc.Close(context.Background())
			return nil, err
		}
	}
	// pgconn may still be reading in the background (its reader starts
	// when a write takes over 15ms, as on a loaded machine, and stops only
	// after its read in progress returns) or hold buffered bytes: taken
	// over like that, its reader would steal the backend's next reply and
	// the proxy would wait for it forever. SyncConn stops it (pgconn's
	// documented step before Hijack).
	if err := pc.SyncConn(ctx); err != nil {
		_ = pc.Close(context.Background())
		return nil, p.connectError(err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		_ = pc.Close(context.Background())
		return nil, p.connectError(err)
	}
	cio := pgwire.ConnIO(hc.Conn)
	c := &bconn{
		pool:     p,
		nc:       hc.Conn,
		io:       cio,
		rd:       pgwire.NewMsgReader(cio, nil),
		key:      key,
		statuses: hc.ParameterStatuses,
		pid:      hc.PID,
		secret:   hc.SecretKey,
		opened:   time.Now(),
		gen:      p.ops.reconnectGen.Load(),
	}
	_, c.tls = hc.Conn.(*tls.Conn)
	c.rd.Ready = hc.TxStatus
	c.peekFn = c.peek
	if !p.viaPooler && p.server().cfg.StatementCacheSize > 0 {
		c.stmts = newStmtCache(p.server().cfg.StatementCacheSize)
		c.stmts.epoch = p.server().stmtEpoch.Load()
	}
	p.mu.Lock()
	if _, ok := p.statuses[key.key]; !ok {
		p.statuses[key.key] = hc.ParameterStatuses
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	return c, nil
}

// connectError turns a connect failure into the client's error: a
// Postgres error (bad setting, authentication) keeps its fields; anything
// else names the shard.
func (p *shardPool) connectError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return &backendPgError{pe: pe, shard: p.shard.Name}
	}
	e := &pgwire.Error{Code: pgwire.CodeConnectionFailure,
		Message: fmt.Sprintf("cannot connect to shard %q at %s: %v", p.shard.Name, p.addr, shortErr(err)),
		Hint:    "The shard's server is down or unreachable; transactions for other shards still work."}
	if p.server().cfg.HealthInterval > 0 && !p.viaPooler {
		// Until the next probe says otherwise, fail fast.
		if p.down.Swap(e) == nil {
			p.server().log.Warn("shard is down", "shard", p.shard.Name, "addr", p.addr, "err", shortErr(err))
		}
	}
	return e
}

// backendPgError is a Postgres error returned while connecting.
type backendPgError struct {
	pe    *pgconn.PgError
	shard string
}

func (e *backendPgError) Error() string { return "shard " + e.shard + ": " + e.pe.Error() }
func (e *backendPgError) Unwrap() error { return e.pe }

// verify checks the shard's identity record on a fresh connection.
func (p *shardPool) verify(ctx context.Context, pc *pgconn.PgConn) error {
	rr := pc.ExecParams(ctx, "SELECT shard_name, ordinal, buckets, map_epoch, database_id::text FROM pgshard_identity", nil, nil, nil, nil).Read()
	if rr.Err != nil && unreachable(rr.Err) {
		// Through PgBouncer: the login worked, the shard behind it is down.
		return &pgwire.Error{Code: pgwire.CodeConnectionFailure,
			Message: fmt.Sprintf("cannot reach shard %q through %s: %s", p.shard.Name, p.addr, shortErr(rr.Err)),
			Hint:    "The shard's server is down or unreachable; transactions for other shards still work."}
	}
	if rr.Err != nil || len(rr.Rows) != 1 || len(rr.Rows[0]) != 5 {
		reason := "no identity record (run pgshard migrate)"
		if rr.Err != nil {
			reason = shortErr(rr.Err)
		}
		return &pgwire.Error{Code: pgwire.CodeCannotConnect, Message: fmt.Sprintf("shard %q failed its identity check: %s", p.shard.Name, reason)}
	}
	row := rr.Rows[0]
	ord, _ := strconv.Atoi(string(row[1]))
	buckets, _ := strconv.Atoi(string(row[2]))
	epoch, _ := strconv.ParseUint(string(row[3]), 10, 64)
	id := migrations.Identity{ShardName: string(row[0]), Ordinal: ord, Buckets: buckets, MapEpoch: epoch, DatabaseID: string(row[4])}
	if err := id.Check(p.shard, p.server().cfg.Map); err != nil {
		return &pgwire.Error{Code: pgwire.CodeCannotConnect, Message: fmt.Sprintf("shard %q failed its identity check: %v", p.shard.Name, err)}
	}
	if err := p.server().registerDatabaseID(p.shard.Name, id.DatabaseID); err != nil {
		return &pgwire.Error{Code: pgwire.CodeCannotConnect, Message: err.Error()}
	}
	p.verified.Store(true)
	return nil
}

// startupStatuses returns the ParameterStatus values of a connection with
// startup settings key, connecting once if no connection was made yet.
func (p *shardPool) startupStatuses(ctx context.Context, key *settings) (map[string]string, error) {
	p.mu.Lock()
	st, ok := p.statuses[key.key]
	p.mu.Unlock()
	if ok {
		return st, nil
	}
	c, err := p.acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	st = c.statuses
	p.release(c)
	return st, nil
}

// reapIdle closes connections idle for longer than IdleTimeout.
func (p *shardPool) reapIdle(now time.Time) {
	var old []*bconn
	p.mu.Lock()
	for k, l := range p.idle {
		keep := l[:0]
		for _, c := range l {
			if now.Sub(c.idleSince) > p.server().cfg.IdleTimeout {
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
		p.discard(c)
	}
}

// shutdown closes the idle connections and refuses new acquisitions;
// connections in use are closed when their sessions return them.
func (p *shardPool) shutdown() {
	p.mu.Lock()
	p.closed = true
	var all []*bconn
	for _, l := range p.idle {
		all = append(all, l...)
	}
	p.idle = map[string][]*bconn{}
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

// sendCancel sends a CancelRequest for c's backend process to the address c
// is connected to (Postgres, or PgBouncer which forwards it).
func sendCancel(ctx context.Context, addr net.Addr, pid uint32, secret []byte, timeout time.Duration) error {
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

func shortErr(err error) string {
	var ne *net.OpError
	if errors.As(err, &ne) && ne.Err != nil {
		return ne.Op + ": " + ne.Err.Error()
	}
	return err.Error()
}

// stmtCache maps statement texts to server-side prepared statements on one
// direct connection, least recently used first out.
type stmtCache struct {
	max     int
	seq     uint64
	byKey   map[string]*cachedStmt
	head    cachedStmt // sentinel of the LRU list; head.next is the newest
	evicted []string   // names to Close before the next use of the cache
	// epoch is the Server.stmtEpoch the entries were prepared under.
	epoch uint64
}

type cachedStmt struct {
	key, name  string
	confirmed  bool // ParseComplete seen
	prev, next *cachedStmt
}

func newStmtCache(max int) *stmtCache {
	c := &stmtCache{max: max, byKey: map[string]*cachedStmt{}}
	c.head.next, c.head.prev = &c.head, &c.head
	return c
}

func (c *stmtCache) unlink(e *cachedStmt) { e.prev.next, e.next.prev = e.next, e.prev }

func (c *stmtCache) pushFront(e *cachedStmt) {
	e.next, e.prev = c.head.next, &c.head
	c.head.next.prev = e
	c.head.next = e
}

// get returns the cached statement for key and marks it recently used.
func (c *stmtCache) get(key string) *cachedStmt {
	e := c.byKey[key]
	if e != nil && e != c.head.next {
		c.unlink(e)
		c.pushFront(e)
	}
	return e
}

// add registers a new statement (to be parsed now) and returns it; the
// least recently used one is evicted when the cache is full.
func (c *stmtCache) add(key string) *cachedStmt {
	if len(c.byKey) >= c.max {
		old := c.head.prev
		c.unlink(old)
		delete(c.byKey, old.key)
		if old.confirmed {
			c.evicted = append(c.evicted, old.name)
		}
	}
	c.seq++
	e := &cachedStmt{key: key, name: "pgshard_" + strconv.FormatUint(c.seq, 10)}
	c.byKey[key] = e
	c.pushFront(e)
	return e
}

// drop forgets an entry (its Parse failed, or it must be re-prepared).
func (c *stmtCache) drop(e *cachedStmt) {
	if c.byKey[e.key] != e {
		return
	}
	c.unlink(e)
	delete(c.byKey, e.key)
	if e.confirmed {
		c.evicted = append(c.evicted, e.name)
	}
}

// reset forgets every entry (closing the prepared ones before the next
// use) and moves the cache to epoch.
func (c *stmtCache) reset(epoch uint64) {
	for e := c.head.next; e != &c.head; e = e.next {
		if e.confirmed {
			c.evicted = append(c.evicted, e.name)
		}
	}
	clear(c.byKey)
	c.head.next, c.head.prev = &c.head, &c.head
	c.epoch = epoch
}

// dropUnconfirmed forgets entries whose Parse never completed.
func (c *stmtCache) dropUnconfirmed() {
	for e := c.head.next; e != &c.head; {
		n := e.next
		if !e.confirmed {
			c.unlink(e)
			delete(c.byKey, e.key)
		}
		e = n
	}
}
