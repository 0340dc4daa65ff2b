package chaos

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/pgshard/pgshard/internal/ctxtime"
)

var resetInfo = kindInfo{
	needs:    NeedsShardRelay,
	instant:  true,
	resource: "relay",
	settle:   100 * time.Millisecond,
	params:   map[string]paramCheck{"wait": durationParam(0, time.Minute)},
	new:      func() Fault { return &reset{} },
}

// reset is KindReset.
type reset struct{}

func (*reset) Kind() Kind   { return KindReset }
func (*reset) Needs() Needs { return resetInfo.needs }

// Inject waits up to param wait (default 2s) until a connection of the
// relay has a request in flight, then resets every connection. Evidence:
// reset (how many), in_flight (how many of them had a request in
// flight); landed when a connection with a request in flight was cut (an
// idle pooled connection reset proves nothing).
func (*reset) Inject(ctx context.Context, env *Env, shard int, p Params, _ *rand.Rand) (Evidence, error) {
	r, err := env.relay(shard)
	if err != nil {
		return Evidence{}, err
	}
	wait, err := p.duration("wait", 2*time.Second)
	if err != nil {
		return Evidence{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	for r.InFlight() == 0 {
		if ctxtime.Sleep(wctx, 5*time.Millisecond) != nil {
			break // none came: reset anyway (and say it did not land)
		}
	}
	cancel()
	n, busy := r.ResetInFlight()
	return Evidence{Landed: busy > 0, Fields: map[string]any{"reset": n, "in_flight": busy}}, nil
}

// Heal does nothing.
func (*reset) Heal(context.Context, *Env, int) (Evidence, error) { return Evidence{}, nil }
