package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

var lostAckInfo = kindInfo{
	settle: 100 * time.Millisecond,
	params: map[string]paramCheck{
		"count": intParam(1, 1000),
		"via":   enumParam("shard", "proxy"),
	},
	byParams: func(p Params) (Needs, bool, string) {
		if p.str("via", "shard") == "proxy" {
			return NeedsProxyRelay, true, "proxy-relay"
		}
		return NeedsShardRelay, false, "relay"
	},
	new: func() Fault { return &lostAck{} },
}

// lostAck is KindLostAck.
type lostAck struct {
	mu     sync.Mutex
	relay  *Relay
	before int   // DroppedReplies already logged at inject
	passed int64 // PassedReplies at inject
	count  int
	via    string
}

func (*lostAck) Kind() Kind   { return KindLostAck }
func (*lostAck) Needs() Needs { return NeedsShardRelay }

func (f *lostAck) pick(env *Env, shard int, via string) (*Relay, error) {
	if via == "proxy" {
		if env.ProxyRelay == nil {
			return nil, errors.New("lost-ack via=proxy: the env has no relay in front of the proxy")
		}
		return env.ProxyRelay, nil
	}
	return env.relay(shard)
}

// Inject arms the relay for param count (default 1) commit replies.
// Evidence: via, armed.
func (f *lostAck) Inject(_ context.Context, env *Env, shard int, p Params, _ *rand.Rand) (Evidence, error) {
	n, err := p.int("count", 1)
	if err != nil {
		return Evidence{}, err
	}
	via := p.str("via", "shard")
	r, err := f.pick(env, shard, via)
	if err != nil {
		return Evidence{}, err
	}
	f.mu.Lock()
	f.relay, f.before, f.passed, f.count, f.via = r, len(r.DroppedReplies()), r.Stats().PassedReplies, n, via
	f.mu.Unlock()
	r.DropCommitReplies(n)
	return Evidence{Fields: map[string]any{"via": via, "armed": n}}, nil
}

// Heal disarms what is left and reports the replies dropped since
// Inject — only replies of commits that committed are dropped (see
// DroppedReply). Evidence: dropped (count), replies (per dropped reply:
// conn, sent, at, bytes, committed, status), passed (held replies passed
// on: errors, lost compare-and-swaps), disarmed. Landed: a committed
// commit's reply was dropped.
func (f *lostAck) Heal(context.Context, *Env, int) (Evidence, error) {
	f.mu.Lock()
	r, before, passedBefore, via := f.relay, f.before, f.passed, f.via
	f.mu.Unlock()
	if r == nil {
		return Evidence{}, nil
	}
	left := r.Disarm()
	all := r.DroppedReplies()
	var drops []DroppedReply
	if before <= len(all) {
		drops = all[before:]
	}
	if drops == nil {
		drops = []DroppedReply{}
	}
	return Evidence{Landed: len(drops) > 0, Fields: map[string]any{
		"via": via, "dropped": len(drops), "replies": drops, "disarmed": left,
		"passed": r.Stats().PassedReplies - passedBefore,
	}}, nil
}
