package proxy

import (
	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/prometheus/client_golang/prometheus"
)

// Pinning, the server's side (internal/engine/pin.go is the session's): the direct pools
// pinned sessions' backends come from, handed from generation to
// generation, and the pin metrics and listing.

// DirectPool returns the pool of direct connections of shard i (the
// shard's own pool when it is direct).
func (g *generation) DirectPool(i int) *backend.Pool {
	if !g.pools[i].ViaPooler {
		return g.pools[i]
	}
	g.directMu.Lock()
	defer g.directMu.Unlock()
	if g.direct == nil {
		g.direct = make([]*backend.Pool, len(g.pools))
	}
	if g.direct[i] == nil {
		p, err := backend.NewPool(g.backendEnv(), g.cfg.Map.Shards[i], false)
		if err != nil {
			return g.pools[i] // the DSN parsed once already; not reached
		}
		p.Verified.Store(true) // the same database as the pooler's
		g.direct[i] = p
	}
	return g.direct[i]
}

// directPools returns the direct pools made so far (nil entries skipped).
func (g *generation) directPools() []*backend.Pool {
	g.directMu.Lock()
	defer g.directMu.Unlock()
	var out []*backend.Pool
	for _, p := range g.direct {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// inheritDirect gives gen (a reload's next generation) the direct pools
// of s whose shard gen keeps (kept: old pool → its index in gen) and
// returns the others, which retire: their pinned sessions stay on s (a
// session never changes generation while pinned) and each connection
// closes when its pin ends.
func (g *generation) inheritDirect(gen *generation, kept map[*backend.Pool]int) (retire []*backend.Pool) {
	g.directMu.Lock()
	defer g.directMu.Unlock()
	for i, dp := range g.direct {
		if dp == nil {
			continue
		}
		if j, ok := kept[g.pools[i]]; ok {
			if gen.direct == nil {
				gen.direct = make([]*backend.Pool, len(gen.pools))
			}
			gen.direct[j] = dp
			dp.SetEnv(gen.backendEnv())
			continue
		}
		retire = append(retire, dp)
	}
	return retire
}

// pinMetrics registers the pinned-session gauge and counter.
func (s *Server) pinMetrics() {
	s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pgshard_proxy_pinned_sessions", Help: "Client sessions pinned to a backend of their own (session pooling, or session state in transaction pooling)."},
		func() float64 { return float64(s.npinned.Load()) }))
	s.pinsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgshard_proxy_pins_total", Help: "Sessions pinned, by the reason that pinned them."}, []string{"reason"})
	s.reg.MustRegister(s.pinsTotal)
}

// PinnedSessions lists the sessions pinned right now.
func (s *Server) PinnedSessions() []PinnedSession { return s.clients.Pinned() }
