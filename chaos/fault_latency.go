package chaos

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

var latencyInfo = kindInfo{
	needs:    NeedsShardRelay,
	resource: "relay",
	settle:   100 * time.Millisecond,
	params: map[string]paramCheck{
		"delay":  durationParam(0, 10*time.Second),
		"jitter": durationParam(0, 10*time.Second),
	},
	new: func() Fault { return &latency{} },
}

// latency is KindLatency.
type latency struct {
	mu     sync.Mutex
	relay  *Relay
	before int64
	delay  time.Duration
}

func (*latency) Kind() Kind   { return KindLatency }
func (*latency) Needs() Needs { return latencyInfo.needs }

// Inject sets the relay's latency: param delay (default 20ms) plus a
// jitter in [0, param jitter) drawn from rng. Evidence: delay_ms,
// jitter_ms, conns (open connections).
func (f *latency) Inject(_ context.Context, env *Env, shard int, p Params, rng *rand.Rand) (Evidence, error) {
	r, err := env.relay(shard)
	if err != nil {
		return Evidence{}, err
	}
	delay, err := p.duration("delay", 20*time.Millisecond)
	if err != nil {
		return Evidence{}, err
	}
	jitter, err := p.duration("jitter", 0)
	if err != nil {
		return Evidence{}, err
	}
	st := r.Stats()
	f.mu.Lock()
	f.relay, f.before, f.delay = r, st.Delayed, delay
	f.mu.Unlock()
	r.SetLatency(delay, jitter, rng)
	return Evidence{Landed: true, Fields: map[string]any{
		"delay_ms": delay.Milliseconds(), "jitter_ms": jitter.Milliseconds(), "conns": st.Active,
	}}, nil
}

// Heal turns latency off. Evidence: delay_ms, delayed (chunks delayed
// meanwhile); landed when some were.
func (f *latency) Heal(context.Context, *Env, int) (Evidence, error) {
	f.mu.Lock()
	r, before, delay := f.relay, f.before, f.delay
	f.mu.Unlock()
	if r == nil {
		return Evidence{}, nil
	}
	r.SetLatency(0, 0, nil)
	n := r.Stats().Delayed - before
	return Evidence{Landed: n > 0, Fields: map[string]any{"delay_ms": delay.Milliseconds(), "delayed": n}}, nil
}
