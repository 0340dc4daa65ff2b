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
// many); landed when at least one.
func (*reset) Inject(_ context.Context, env *Env, shard int, _ Params, _ *rand.Rand) (Evidence, error) {
	r, err := env.relay(shard)
	if err != nil {
		return Evidence{}, err
	}
	n := r.Reset()
	return Evidence{Landed: n > 0, Fields: map[string]any{"reset": n}}, nil
}

// Heal does nothing.
func (*reset) Heal(context.Context, *Env, int) (Evidence, error) { return Evidence{}, nil }
