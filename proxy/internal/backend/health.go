package backend

import (
	"context"
	"time"
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
