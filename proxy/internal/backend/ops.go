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

// poolOps is the operator's state of a pool and its controls. It acts on
// the pool it belongs to (pool), whose connections its controls close or
// interrupt; its own state is guarded by mu or atomic.
type poolOps struct {
	pool *Pool
	// paused holds new transactions (PAUSE); resumed is closed when the
	// pause ends (replaced at each PAUSE, under mu).
	Paused  atomic.Bool
	mu      sync.Mutex
	resumed chan struct{}
	// pauseWaiters counts sessions held by PAUSE, the oldest since
	// oldestPauseWaiter (guarded by mu; SHOW POOLS).
	pauseWaiters      int32
	oldestPauseWaiter time.Time
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

func (o *poolOps) init(p *Pool) {
	o.pool = p
	o.resumed = make(chan struct{})
	close(o.resumed)
}

// retire reports whether a connection must be closed when released.
func (o *poolOps) retire(c *Conn) bool {
	return o.Retired.Load() || c.gen < o.ReconnectGen.Load()
}

// refusal returns the error that fails a new transaction on the shard at
// once, nil when it may start: the shard is down, or its PgBouncer is
// overloaded (back-pressure), or the pool was retired by a reload.
func (o *poolOps) refusal() *pgwire.Error {
	if e := o.pool.Down.Load(); e != nil {
		return e
	}
	return o.Refuse.Load()
}

// waitResumed holds a new transaction while the pool is paused, until
// RESUME, ctx's end or Env.PauseTimeout (then 57P03).
func (o *poolOps) waitResumed(ctx context.Context) error {
	o.mu.Lock()
	ch := o.resumed
	o.mu.Unlock()
	select {
	case <-ch:
		return nil
	default:
	}
	o.mu.Lock()
	o.pauseWaiters++
	if o.oldestPauseWaiter.IsZero() {
		o.oldestPauseWaiter = time.Now()
	}
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.pauseWaiters--
		if o.pauseWaiters == 0 {
			o.oldestPauseWaiter = time.Time{}
		}
		o.mu.Unlock()
	}()
	timeout := o.pool.Env().PauseTimeout
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return &pgwire.Error{Code: pgwire.CodeCannotConnectNow,
			Message: fmt.Sprintf("shard %q is paused (PAUSE) and was not resumed within %s", o.pool.Shard.Name, timeout),
			Hint:    "An operator paused the shard for maintenance; retry later (RESUME ends the pause)."}
	}
}

// pauseWaiting returns how many sessions PAUSE holds and since when the
// oldest of them waits (zero when none).
func (o *poolOps) pauseWaiting() (int, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return int(o.pauseWaiters), o.oldestPauseWaiter
}

// Pause holds the pool's new transactions and waits (bounded by ctx) until
// none of its connections is in use any more.
func (o *poolOps) Pause(ctx context.Context) error {
	o.mu.Lock()
	if !o.Paused.Load() {
		o.resumed = make(chan struct{})
		o.Paused.Store(true)
	}
	o.mu.Unlock()
	return PollUntil(ctx, func() bool { return o.pool.InUse() == 0 })
}

// Resume ends a pause; held transactions go on.
func (o *poolOps) Resume() {
	o.mu.Lock()
	if o.Paused.Load() {
		o.Paused.Store(false)
		close(o.resumed)
	}
	o.mu.Unlock()
}

// Reconnect closes the idle connections now and those in use when they
// are released (RECONNECT; new ones are opened as needed).
func (o *poolOps) Reconnect() {
	o.ReconnectGen.Add(1)
	o.pool.CloseIdle()
}

// InterruptInUse makes every session reading one of the pool's
// connections in use fail now (KILL): the connection's reads and writes
// time out, the session reports the connection lost and discards it.
func (o *poolOps) InterruptInUse() {
	p := o.pool
	p.mu.Lock()
	for c := range p.conns {
		_ = c.NetConn.SetDeadline(time.Now())
	}
	p.mu.Unlock()
}

// State is the shard's state for SHOW SHARDS and metrics: up, down,
// paused, overloaded or removed.
func (o *poolOps) State() string {
	switch {
	case o.Retired.Load():
		return "removed"
	case o.pool.Down.Load() != nil:
		return "down"
	case o.Refuse.Load() != nil:
		return "overloaded"
	case o.Paused.Load():
		return "paused"
	}
	return "up"
}

// OldConns counts the pool's connections that are to be closed (opened
// before the last RECONNECT or KILL, or all of a retired pool).
func (o *poolOps) OldConns() int {
	gen := o.ReconnectGen.Load()
	retired := o.Retired.Load()
	p := o.pool
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
