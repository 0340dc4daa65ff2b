package chaos

import (
	"context"
	"math/rand/v2"
	"time"
)

var resetInfo = kindInfo{
	needs:    NeedsShardRelay,
	instant:  true,
	resource: "relay",
	settle:   100 * time.Millisecond,
	new:      func() Fault { return &reset{} },
}

// reset is KindReset.
type reset struct{}

func (*reset) Kind() Kind   { return KindReset }
func (*reset) Needs() Needs { return resetInfo.needs }

// Inject resets every connection of the relay. Evidence: reset (how
// many), in_flight (how many of them had a request in flight); landed
// when a connection with a request in flight was cut (an idle pooled
// connection reset proves nothing).
func (*reset) Inject(_ context.Context, env *Env, shard int, _ Params, _ *rand.Rand) (Evidence, error) {
	r, err := env.relay(shard)
	if err != nil {
		return Evidence{}, err
	}
	n, busy := r.ResetInFlight()
	return Evidence{Landed: busy > 0, Fields: map[string]any{"reset": n, "in_flight": busy}}, nil
}

// Heal does nothing.
func (*reset) Heal(context.Context, *Env, int) (Evidence, error) { return Evidence{}, nil }
