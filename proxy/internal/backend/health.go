package backend

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// The shard's health: its monitor probes the shard's Postgres and reads
// its PgBouncer (bouncer.go); the proxy's core starts one per pool.

// downProbeInterval is how often a shard marked down is probed (when
// Env.HealthInterval is longer): transactions for it fail fast until a
// probe finds it back, so a restarted shard is served again within this,
// not within a whole health interval.
const downProbeInterval = 100 * time.Millisecond

// Monitor probes the shard's health every Env.HealthInterval (every
// downProbeInterval while it is marked down) and reads its PgBouncer's
// figures every Env.PgBouncer.PollInterval, until ctx ends.
func (p *Pool) Monitor(ctx context.Context) {
	defer p.bouncer.close()
	var lastProbe, lastPoll time.Time
	for {
		cfg := p.Env()
		now := time.Now()
		every := cfg.HealthInterval
		if p.Down.Load() != nil {
			every = min(every, downProbeInterval)
		}
		if every > 0 && now.Sub(lastProbe) >= every {
			lastProbe = now
			p.probe(ctx)
		}
		bouncer := p.bouncer.enabled()
		if bouncer && now.Sub(lastPoll) >= cfg.PgBouncer.PollInterval {
			lastPoll = now
			p.bouncer.poll(ctx)
		}
		// Sleep until the next of the two is due.
		next := time.Second
		if every > 0 {
			if p.Down.Load() != nil {
				every = min(every, downProbeInterval) // marked down by this probe
			}
			next = min(next, time.Until(lastProbe.Add(every)))
		}
		if bouncer {
			next = min(next, time.Until(lastPoll.Add(cfg.PgBouncer.PollInterval)))
		}
		next = max(next, time.Millisecond)
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// probe checks that the shard's Postgres accepts TCP connections (a
// connection, closed at once, costs the server one short-lived process).
// Through PgBouncer this is what lets a transaction fail fast while the
// shard is down: PgBouncer itself would keep the client waiting until its
// query_wait_timeout. When the shard goes down, sessions waiting on one of
// its pooler connections are unblocked with an error.
func (p *Pool) probe(ctx context.Context) {
	d := net.Dialer{Timeout: p.Env().ConnectTimeout}
	conn, err := d.DialContext(ctx, "tcp", p.pgAddr)
	if err == nil {
		_ = conn.Close()
		if p.Down.Swap(nil) != nil {
			p.Env().Log.Info("shard is reachable again", "shard", p.Shard.Name)
		}
		return
	}
	if ctx.Err() != nil {
		return
	}
	e := &pgwire.Error{Code: pgwire.CodeConnectionFailure,
		Message: fmt.Sprintf("shard %q is down: its server at %s does not accept connections (%s)", p.Shard.Name, p.pgAddr, ShortErr(err)),
		Hint:    "Transactions for other shards still work; retry when the shard is back."}
	if p.Down.Swap(e) == nil {
		p.Env().Log.Warn("shard is down", "shard", p.Shard.Name, "addr", p.pgAddr, "err", ShortErr(err))
		p.Env().BackendErrors.WithLabelValues(p.Shard.Name, "down").Inc()
		if p.ViaPooler {
			p.mu.Lock()
			for c := range p.conns {
				// Idle ones are discarded by their next health check.
				c.DownErr.Store(e)
				_ = c.NetConn.SetReadDeadline(time.Now())
			}
			p.mu.Unlock()
		}
	}
}
