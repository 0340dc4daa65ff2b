package backend

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
// retirement by a reload that removed the shard (the proxy's reload.go).
//
//	acquire ─▶ refusal()? ──yes──▶ fail at once (down 08006, overloaded 53300, removed)
//	            │ no
//	            ▼
//	          paused? ──yes──▶ wait for RESUME (≤ Env.PauseTimeout)
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
	Paused  atomic.Bool
	mu      sync.Mutex
	resumed chan struct{}
	// refuse, when set, fails every new transaction at once: the shard's
	// PgBouncer is overloaded, or a reload removed the shard.
	Refuse atomic.Pointer[pgwire.Error]
	// retired: a reload removed the shard; connections close when
	// released and the pool shuts down once none is in use.
	Retired atomic.Bool
	// reconnectGen: connections opened before the last RECONNECT (or
	// KILL) are closed when released.
	ReconnectGen atomic.Uint64
	// bouncer is the last reading of the shard's PgBouncer (nil if none).
	Bouncer atomic.Pointer[BouncerFigures]
}

func (o *poolOps) init() {
	o.resumed = make(chan struct{})
	close(o.resumed)
}

// retire reports whether a connection must be closed when released.
func (o *poolOps) retire(c *Conn) bool {
	return o.Retired.Load() || c.gen < o.ReconnectGen.Load()
}

// endUse ends the current use of c (if any) in the shard's statistics.
func (p *Pool) endUse(c *Conn) {
	since := c.UsedSince.Swap(0)
	if since == 0 {
		return
	}
	d := time.Duration(time.Now().UnixNano() - since)
	st := p.Stats
	st.Xacts.Add(1)
	st.XactNanos.Add(uint64(d))
	st.XactHist.Observe(d.Seconds())
	if c.Queries > 0 {
		st.Queries.Add(c.Queries)
		c.Queries = 0
	}
	if c.sent > 0 {
		st.BytesOut.Add(c.sent)
		c.sent = 0
	}
	if in := c.Reader.BytesRead() - c.recvMark; in > 0 {
		st.BytesIn.Add(in)
		c.recvMark = c.Reader.BytesRead()
	}
}

// waitResumed holds a new transaction while the pool is paused, until
// RESUME, ctx's end or Env.PauseTimeout (then 57P03).
func (p *Pool) waitResumed(ctx context.Context) error {
	p.Ops.mu.Lock()
	ch := p.Ops.resumed
	p.Ops.mu.Unlock()
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
	timeout := p.Env().PauseTimeout
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return &pgwire.Error{Code: pgwire.CodeCannotConnectNow,
			Message: fmt.Sprintf("shard %q is paused (PAUSE) and was not resumed within %s", p.Shard.Name, timeout),
			Hint:    "An operator paused the shard for maintenance; retry later (RESUME ends the pause)."}
	}
}

// Pause holds the pool's new transactions and waits (bounded by ctx) until
// none of its connections is in use any more.
func (p *Pool) Pause(ctx context.Context) error {
	p.Ops.mu.Lock()
	if !p.Ops.Paused.Load() {
		p.Ops.resumed = make(chan struct{})
		p.Ops.Paused.Store(true)
	}
	p.Ops.mu.Unlock()
	return PollUntil(ctx, func() bool { f := p.Figures(); return f.Active+f.Login == 0 })
}

// Resume ends a pause; held transactions go on.
func (p *Pool) Resume() {
	p.Ops.mu.Lock()
	if p.Ops.Paused.Load() {
		p.Ops.Paused.Store(false)
		close(p.Ops.resumed)
	}
	p.Ops.mu.Unlock()
}

// Reconnect closes the idle connections now and those in use when they
// are released (RECONNECT; new ones are opened as needed).
func (p *Pool) Reconnect() {
	p.Ops.ReconnectGen.Add(1)
	p.CloseIdle()
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

// InterruptInUse makes every session reading one of the pool's
// connections in use fail now (KILL): the connection's reads and writes
// time out, the session reports the connection lost and discards it.
func (p *Pool) InterruptInUse() {
	p.mu.Lock()
	for c := range p.conns {
		_ = c.NetConn.SetDeadline(time.Now())
	}
	p.mu.Unlock()
}

// InUse reports how many connections are held or being opened.
func (p *Pool) InUse() int {
	f := p.Figures()
	return f.Active + f.Login
}

// State is the shard's state for SHOW SHARDS and metrics: up, down,
// paused, overloaded or removed.
func (p *Pool) State() string {
	switch {
	case p.Ops.Retired.Load():
		return "removed"
	case p.Down.Load() != nil:
		return "down"
	case p.Ops.Refuse.Load() != nil:
		return "overloaded"
	case p.Ops.Paused.Load():
		return "paused"
	}
	return "up"
}

// shardStates are the values of pool.state (metrics' state set).
var ShardStates = []string{"up", "down", "paused", "overloaded", "removed"}

// PollUntil calls done every 10ms until it reports true or ctx ends.
func PollUntil(ctx context.Context, done func() bool) error {
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

// OldConns counts the pool's connections that are to be closed (opened
// before the last RECONNECT or KILL, or all of a retired pool).
func (p *Pool) OldConns() int {
	gen := p.Ops.ReconnectGen.Load()
	retired := p.Ops.Retired.Load()
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if retired || c.gen < gen {
			n++
		}
	}
	return n
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
