package engine

import (
	"strings"
	"testing"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// TestRouterDecide: the router's plan for the keyed single-shard path and
// the fan-out path, from routing state alone (no session, no backend).
func TestRouterDecide(t *testing.T) {
	gen := &GenerationEnv{Config: &SessionConfig{Map: &shardmap.Map{Shards: []shardmap.Shard{{Name: "s0"}, {Name: "s1"}}}}}
	r := router{gen: gen}
	keyed := func(shard int) route.Dest {
		return route.Dest{Kind: route.DestShard, Shard: shard, Key: "k", Bucket: 7, Reason: "key k"}
	}
	every := route.Dest{Kind: route.DestAll, Merge: &route.Merge{Width: -1, Limit: -1, Offset: -1}, Reason: "no key"}
	read := &route.Statement{Kind: route.KindOther, Select: true, ReadOnly: true}
	write := &route.Statement{Kind: route.KindOther}
	idle := routeIn{tx: txIdle, hint: -1, shard: -1}
	bound := routeIn{tx: txBound, hint: -1, held: true, explicit: true, shard: 0, bstatus: 'T'}
	for _, c := range []struct {
		name    string
		a       *route.Statement
		d       route.Dest
		in      routeIn
		check   func(routePlan) bool
		refusal string
	}{
		{"keyed, idle", write, keyed(1), idle,
			func(rp routePlan) bool {
				return rp.shard == 1 && !rp.fan && rp.fence == fenceTarget{key: "k", bucket: 7, shard: 1}
			}, ""},
		{"keyed, lease lost", write, keyed(1), routeIn{tx: txIdle, hint: -1, leaseErr: pgwire.NewError(pgwire.CodeInternalError, "lease")},
			func(rp routePlan) bool { return rp.err != nil && rp.err.Message == "lease" }, ""},
		{"keyed, hint of another shard", write, keyed(1), routeIn{tx: txDeferred, hint: 0},
			func(rp routePlan) bool { return rp.err != nil && strings.Contains(rp.err.Message, `shard "s1"`) }, "cross_shard"},
		{"keyed, the transaction's shard", write, keyed(0), bound,
			func(rp routePlan) bool { return rp.shard == 0 && rp.softOff }, ""},
		{"keyed write, another shard after reads", write, keyed(1), bound,
			func(rp routePlan) bool { return rp.shard == 1 && rp.swapMain }, ""},
		{"keyed write, another shard after a write", write, keyed(1), routeIn{tx: txBound, hint: -1, held: true, explicit: true, shard: 0, bstatus: 'T', mainWrote: true},
			func(rp routePlan) bool { return rp.err != nil }, "cross_shard"},
		{"keyed read, another shard in a transaction", read, keyed(1), bound,
			func(rp routePlan) bool { return rp.fan && rp.fanInTxn && rp.fanOnly == 2 }, ""},
		{"every shard, idle", read, every, idle,
			func(rp routePlan) bool { return rp.fan && !rp.fanInTxn && rp.shard == -1 }, ""},
		{"every shard, in a transaction", read, every, routeIn{tx: txDeferred, hint: -1, shard: -1},
			func(rp routePlan) bool { return rp.fan && rp.fanInTxn }, ""},
		{"every shard, after a statement of the pipeline", read, every, routeIn{tx: txIdle, hint: -1, onBackend: true, shard: 0},
			func(rp routePlan) bool { return !rp.fan && rp.err != nil }, "fanout_in_transaction"},
		{"every shard, hinted", read, every, routeIn{tx: txDeferred, hint: 1, shard: -1},
			func(rp routePlan) bool { return !rp.fan && rp.shard == 1 }, ""},
		{"pinned elsewhere", write, keyed(1), routeIn{tx: txIdle, hint: -1, pinned: true, pinShard: 0},
			func(rp routePlan) bool { return rp.err != nil && strings.Contains(rp.err.Message, "pinned") }, "pinned"},
		{"key-less in a pipeline", write, route.Dest{Kind: route.DestAny, Bucket: -1}, routeIn{tx: txIdle, hint: -1, pipeline: true},
			func(rp routePlan) bool { return rp.needAhead }, ""},
		{"default shard", write, route.Dest{Kind: route.DestAny, Default: true, Bucket: -1}, idle,
			func(rp routePlan) bool { return rp.shard == 0 && !rp.fan }, ""},
	} {
		in := c.in
		rp := r.decide(c.a, c.d, &in)
		if !c.check(rp) || rp.refusal != c.refusal {
			t.Errorf("%s: plan %+v (err %v)", c.name, rp, rp.err)
		}
	}
}

// TestRouterObjectReads: a read of which schema objects exist, in a
// transaction on another shard than the default, reads the default
// shard's catalog in its reader (the unsharded objects live there
// alone); on the default shard's transaction, under a hint, in a
// REPEATABLE READ transaction, or while the default shard is paused, it
// stays on the transaction's backend, as does a table-less read of
// nothing of the kind.
func TestRouterObjectReads(t *testing.T) {
	pools := []*backend.Pool{{}, {}}
	gen := &GenerationEnv{DefaultShard: 1, Pools: pools,
		Config: &SessionConfig{Map: &shardmap.Map{Shards: []shardmap.Shard{{Name: "s0"}, {Name: "s1"}}}}}
	r := router{gen: gen}
	any := route.Dest{Kind: route.DestAny, Bucket: -1}
	objects := &route.Statement{Kind: route.KindOther, Select: true, ReadOnly: true, ReadsObjects: true}
	plain := &route.Statement{Kind: route.KindOther, Select: true, ReadOnly: true}
	on := func(shard int) routeIn {
		return routeIn{tx: txBound, hint: -1, held: true, explicit: true, shard: shard, bstatus: 'T'}
	}
	reader := func(rp routePlan) bool { return rp.fan && rp.fanInTxn && rp.fanOnly == 2 && rp.err == nil }
	backendOf := func(shard int) func(routePlan) bool {
		return func(rp routePlan) bool { return !rp.fan && rp.shard == shard && rp.err == nil }
	}
	strict, hinted := on(0), on(0)
	strict.strict, hinted.hintBound = true, true
	for _, c := range []struct {
		name  string
		a     *route.Statement
		in    routeIn
		pause bool
		check func(routePlan) bool
	}{
		{"objects, another shard's transaction", objects, on(0), false, reader},
		{"objects, the default shard's transaction", objects, on(1), false, backendOf(1)},
		{"objects, REPEATABLE READ", objects, strict, false, backendOf(0)},
		{"objects, hinted", objects, hinted, false, backendOf(0)},
		{"objects, the default shard paused", objects, on(0), true, backendOf(0)},
		{"no objects", plain, on(0), false, backendOf(0)},
	} {
		pools[1].Ops.Paused.Store(c.pause)
		in := c.in
		if rp := r.decide(c.a, any, &in); !c.check(rp) {
			t.Errorf("%s: plan %+v (err %v)", c.name, rp, rp.err)
		}
	}
}

// TestRouterKeyless: a key-less statement of a pipeline follows the
// pipeline's next keyed statement, or leads its read of every shard.
func TestRouterKeyless(t *testing.T) {
	gen := &GenerationEnv{DefaultShard: 1, Config: &SessionConfig{Map: &shardmap.Map{Shards: []shardmap.Shard{{Name: "s0"}, {Name: "s1"}}}}}
	r := router{gen: gen}
	a := &route.Statement{Kind: route.KindOther}
	in := routeIn{tx: txIdle, hint: -1, pipeline: true}
	for _, c := range []struct {
		ahead, shard int
		lead         bool
	}{{0, 0, false}, {aheadFan, -1, true}, {aheadAny, 1, false}, {-1, 1, false}} {
		var rp routePlan
		r.keyless(a, &in, c.ahead, &rp)
		if rp.shard != c.shard || rp.leadNext != c.lead || rp.needAhead {
			t.Errorf("ahead %d: plan %+v", c.ahead, rp)
		}
	}
}

// TestRouterDescriber: the shard that describes a statement before the
// pipeline has a backend.
func TestRouterDescriber(t *testing.T) {
	gen := &GenerationEnv{DefaultShard: 1, Pools: make([]*backend.Pool, 2),
		Config: &SessionConfig{Map: &shardmap.Map{Shards: []shardmap.Shard{{Name: "s0"}, {Name: "s1"}}}}}
	r := router{gen: gen}
	yes := func() bool { return true }
	no := func() bool { return false }
	for _, c := range []struct {
		name      string
		in        routeIn
		ahead     int
		unsharded func() bool
		shard     int
		hinted    bool
	}{
		{"held", routeIn{held: true, shard: 0, hint: -1}, 1, no, 0, false},
		{"ahead", routeIn{shard: -1, hint: -1}, 1, no, 1, false},
		{"unsharded", routeIn{shard: -1, hint: -1}, -1, yes, 1, false},
		{"hint", routeIn{shard: -1, hint: 0, tx: txDeferred}, -1, no, 0, true},
	} {
		rp := r.describer(&c.in, c.ahead, c.unsharded)
		if rp.shard != c.shard || rp.hinted != c.hinted || rp.anyShard || rp.softOn {
			t.Errorf("%s: plan %+v", c.name, rp)
		}
	}
}
