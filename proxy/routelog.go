package proxy

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// SHOW ROUTES's log of recent routing decisions, and their counts per
// shard (the counters live in the pool's statistics, internal/backend).

// routeLogSize is how many recent decisions SHOW ROUTES keeps.
const routeLogSize = 128

// keyedSample: one keyed decision in keyedSample is recorded in the log
// (they are the common case, and the log is for seeing what else
// happens); every other kind is recorded.
const keyedSample = 64

// routeEntry is one recorded decision.
type routeEntry struct {
	at     time.Time
	kind   backend.RouteKind
	shard  string // "" for fan-outs and refusals without a shard
	sql    string
	reason string
}

// routeLog is a ring of recent routing decisions, plus counts of the
// decisions that name no shard (refusals before a shard was known).
type routeLog struct {
	noShard    [backend.NumRouteKinds]atomic.Uint64
	mu         sync.Mutex
	ring       [routeLogSize]routeEntry
	next, size int
}

// record adds a decision to the ring.
func (l *routeLog) record(kind backend.RouteKind, shard, sql, reason string) {
	if len(sql) > 200 {
		sql = sql[:200] + "…"
	}
	l.mu.Lock()
	l.ring[l.next] = routeEntry{at: time.Now(), kind: kind, shard: shard, sql: sql, reason: reason}
	l.next = (l.next + 1) % routeLogSize
	if l.size < routeLogSize {
		l.size++
	}
	l.mu.Unlock()
}

// recent returns the recorded decisions, newest first.
func (l *routeLog) recent() []routeEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]routeEntry, 0, l.size)
	for i := 1; i <= l.size; i++ {
		out = append(out, l.ring[(l.next-i+routeLogSize)%routeLogSize])
	}
	return out
}

// noteRoute counts and records a routing decision: shard is the chosen
// shard's index in srv (-1 for none), fan a fan-out, refused an error.
// The reason is msg, or d's (built only when the decision is recorded:
// keyed ones are sampled).
func (g *generation) noteRoute(kind backend.RouteKind, shard int, sql, msg string, d *route.Dest) {
	name := ""
	if shard >= 0 && shard < len(g.pools) {
		n := g.pools[shard].Stats.Routes[kind].Add(1)
		if kind == backend.RouteKeyed && n%keyedSample != 1 {
			return // keyed decisions are sampled into the log
		}
		name = g.pools[shard].Shard.Name
	} else if kind == backend.RouteFanout {
		for _, p := range g.pools {
			p.Stats.Routes[backend.RouteFanout].Add(1)
			p.Stats.Queries.Add(1)
		}
	} else {
		g.srv.routes.noShard[kind].Add(1)
	}
	reason := msg
	if d != nil {
		reason = d.Why()
	}
	g.srv.routes.record(kind, name, sql, reason)
}

// NoteDecision classifies and records one routing decision of the
// planner (target): the statement's text, the analyzer's destination and
// what the planner made of it.
func (g *generation) NoteDecision(sql string, d route.Dest, shard int, fan bool, e *pgwire.Error, setLocalHint bool) {
	kind := backend.RouteAny
	switch {
	case e != nil:
		kind, shard = backend.RouteRefused, -1
		if d.Kind == route.DestShard {
			shard = d.Shard
		}
		g.noteRoute(kind, shard, sql, e.Message, nil)
		return
	case fan:
		kind, shard = backend.RouteFanout, -1
	case setLocalHint || strings.HasPrefix(d.Reason, "hint pgshard:"):
		kind = backend.RouteHinted
	case d.Kind == route.DestShard:
		kind = backend.RouteKeyed
	}
	g.noteRoute(kind, shard, sql, "", &d)
}
