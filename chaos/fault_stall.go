package chaos

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

var stallInfo = kindInfo{
	needs:    NeedsShardRelay,
	resource: "relay",
	settle:   100 * time.Millisecond,
	new:      func() Fault { return &stall{} },
}

// stall is KindStall.
type stall struct {
	mu    sync.Mutex
	relay *Relay
}

func (*stall) Kind() Kind   { return KindStall }
func (*stall) Needs() Needs { return stallInfo.needs }

// Inject stops the relay's forwarding. Evidence: conns (open connections).
func (f *stall) Inject(_ context.Context, env *Env, shard int, _ Params, _ *rand.Rand) (Evidence, error) {
	r, err := env.relay(shard)
	if err != nil {
		return Evidence{}, err
	}
	f.mu.Lock()
	f.relay = r
	f.mu.Unlock()
	n := r.Stall()
	return Evidence{Landed: true, Fields: map[string]any{"conns": n}}, nil
}

// Heal resumes forwarding, delivering what was held. Evidence: stalled
// (connections that had data held), in_flight (connections with a
// request in flight when the stall began); landed when data was held.
func (f *stall) Heal(context.Context, *Env, int) (Evidence, error) {
	f.mu.Lock()
	r := f.relay
	f.mu.Unlock()
	if r == nil {
		return Evidence{}, nil
	}
	n := r.Unstall()
	return Evidence{Landed: n > 0, Fields: map[string]any{"stalled": n, "in_flight": r.StallInFlight()}}, nil
}
