package chaos

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

var partitionInfo = kindInfo{
	needs:    NeedsShardRelay,
	resource: "relay",
	settle:   100 * time.Millisecond,
	new:      func() Fault { return &partition{} },
}

// partition is KindPartition.
type partition struct {
	mu    sync.Mutex
	relay *Relay
}

func (*partition) Kind() Kind   { return KindPartition }
func (*partition) Needs() Needs { return partitionInfo.needs }

// Inject blackholes the relay. Evidence: held (connections blackholed
// now).
func (f *partition) Inject(_ context.Context, env *Env, shard int, _ Params, _ *rand.Rand) (Evidence, error) {
	r, err := env.relay(shard)
	if err != nil {
		return Evidence{}, err
	}
	f.mu.Lock()
	f.relay = r
	f.mu.Unlock()
	n := r.Partition()
	return Evidence{Landed: n > 0, Fields: map[string]any{"held": n}}, nil
}

// Heal ends the partition, resetting the connections it held. Evidence:
// held (blackholed), refused (new connections held unconnected),
// in_flight (connections with a request in flight when it began),
// requests (client chunks it swallowed); landed when it held a request:
// in_flight or requests positive.
func (f *partition) Heal(context.Context, *Env, int) (Evidence, error) {
	f.mu.Lock()
	r := f.relay
	f.mu.Unlock()
	if r == nil {
		return Evidence{}, nil
	}
	held, refused := r.Unpartition()
	busy, reqs := r.PartitionLoad()
	return Evidence{Landed: busy+reqs > 0, Fields: map[string]any{"held": held, "refused": refused, "in_flight": busy, "requests": reqs}}, nil
}
