package proxy

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// The operator's controls of one shard pool: PAUSE/RESUME, KILL,
// RECONNECT, back-pressure from the shard's PgBouncer (bouncer.go) and
// retirement by a reload that removed the shard (reload.go).
//
//	acquire ─▶ refusal()? ──yes──▶ fail at once (down 08006, overloaded 53300, removed)
//	            │ no
//	            ▼
//	          paused? ──yes──▶ wait for RESUME (≤ Config.PauseTimeout)
//	            │ no
//	            ▼
//	          acquire1 (idle connection, new one, or wait for one)
//
//	release ─▶ endUse (statistics) ─▶ broken, cancelled, retired or older
//	           than the last RECONNECT? ──yes──▶ closed   no ──▶ idle

// poolOps is the operator's state of a pool.
type poolOps struct {
	// paused holds new transactions (PAUSE); resumed is closed when the
	// pause ends (replaced at each PAUSE, under mu).
	paused  atomic.Bool
	mu      sync.Mutex
	resumed chan struct{}
	// refuse, when set, fails every new transaction at once: the shard's
	// PgBouncer is overloaded, or a reload removed the shard.
	refuse atomic.Pointer[pgwire.Error]
	// retired: a reload removed the shard; connections close when
	// released and the pool shuts down once none is in use.
	retired atomic.Bool
	// reconnectGen: connections opened before the last RECONNECT (or
	// KILL) are closed when released.
	reconnectGen atomic.Uint64
	// bouncer is the last reading of the shard's PgBouncer (nil if none).
	bouncer atomic.Pointer[bouncerFigures]
}

func (o *poolOps) init() {
	o.resumed = make(chan struct{})
	close(o.resumed)
}

// retire reports whether a connection must be closed when released.
func (o *poolOps) retire(c *bconn) bool {
	return o.retired.Load() || c.gen < o.reconnectGen.Load()
}

// endUse ends the current use of c (if any) in the shard's statistics.
func (p *shardPool) endUse(c *bconn) {
	since := c.usedSince.Swap(0)
	if since == 0 {
		return
	}
	d := time.Duration(time.Now().UnixNano() - since)
	st := p.stats
	st.xacts.Add(1)
	st.xactNanos.Add(uint64(d))
	st.xactHist.Observe(d.Seconds())
	if c.queries > 0 {
		st.queries.Add(c.queries)
		c.queries = 0
	}
	if c.sent > 0 {
		st.bytesOut.Add(c.sent)
		c.sent = 0
	}
	if in := c.rd.BytesRead() - c.recvMark; in > 0 {
		st.bytesIn.Add(in)
		c.recvMark = c.rd.BytesRead()
	}
}

// waitResumed holds a new transaction while the pool is paused, until
// RESUME, ctx's end or Config.PauseTimeout (then 57P03).
func (p *shardPool) waitResumed(ctx context.Context) error {
	p.ops.mu.Lock()
	ch := p.ops.resumed
	p.ops.mu.Unlock()
	select {
	case <-ch:
		return nil
	default:
	}
	p.mu.Lock()
	p.pauseWaiters++
	if p.oldestPauseWaiter.IsZero() {
		p.oldestPauseWaiter = time.Now()
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.pauseWaiters--
		if p.pauseWaiters == 0 {
			p.oldestPauseWaiter = time.Time{}
		}
		p.mu.Unlock()
	}()
	timeout := p.server().cfg.PauseTimeout
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return &pgwire.Error{Code: pgwire.CodeCannotConnectNow,
			Message: fmt.Sprintf("shard %q is paused (PAUSE) and was not resumed within %s", p.shard.Name, timeout),
			Hint:    "An operator paused the shard for maintenance; retry later (RESUME ends the pause)."}
	}
}

// pause holds the pool's new transactions and waits (bounded by ctx) until
// none of its connections is in use any more.
func (p *shardPool) pause(ctx context.Context) error {
	p.ops.mu.Lock()
	if !p.ops.paused.Load() {
		p.ops.resumed = make(chan struct{})
		p.ops.paused.Store(true)
	}
	p.ops.mu.Unlock()
	return pollUntil(ctx, func() bool { f := p.figures(); return f.active+f.login == 0 })
}

// resume ends a pause; held transactions go on.
func (p *shardPool) resume() {
	p.ops.mu.Lock()
	if p.ops.paused.Load() {
		p.ops.paused.Store(false)
		close(p.ops.resumed)
	}
	p.ops.mu.Unlock()
}

// reconnect closes the idle connections now and those in use when they
// are released (RECONNECT; new ones are opened as needed).
func (p *shardPool) reconnect() {
	p.ops.reconnectGen.Add(1)
	p.closeIdle()
}

// closeIdle closes every idle connection.
func (p *shardPool) closeIdle() {
	p.mu.Lock()
	var all []*bconn
	for _, l := range p.idle {
		all = append(all, l...)
	}
	p.idle = map[string][]*bconn{}
	p.nidle = 0
	p.mu.Unlock()
	for _, c := range all {
		p.discard(c)
	}
}

// interruptInUse makes every session reading one of the pool's
// connections in use fail now (KILL): the connection's reads and writes
// time out, the session reports the connection lost and discards it.
func (p *shardPool) interruptInUse() {
	p.mu.Lock()
	for c := range p.conns {
		_ = c.nc.SetDeadline(time.Now())
	}
	p.mu.Unlock()
}

// inUse reports how many connections are held or being opened.
func (p *shardPool) inUse() int {
	f := p.figures()
	return f.active + f.login
}

// state is the shard's state for SHOW SHARDS and metrics: up, down,
// paused, overloaded or removed.
func (p *shardPool) state() string {
	switch {
	case p.ops.retired.Load():
		return "removed"
	case p.down.Load() != nil:
		return "down"
	case p.ops.refuse.Load() != nil:
		return "overloaded"
	case p.ops.paused.Load():
		return "paused"
	}
	return "up"
}

// shardStates are the values of pool.state (metrics' state set).
var shardStates = []string{"up", "down", "paused", "overloaded", "removed"}

// pollUntil calls done every 10ms until it reports true or ctx ends.
func pollUntil(ctx context.Context, done func() bool) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
