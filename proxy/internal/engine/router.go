package engine

import (
	"fmt"
	"strconv"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// router decides where a statement the analyzer routed (route.Dest)
// runs, given the transaction's routing state (routeIn): one shard, a
// fan-out of every shard, or a refusal. Its answer is a routePlan value
// the planner records and the executor (backendexec.go) carries out; the
// router itself acquires nothing, sends nothing and reads none of the
// session's buffers. It reads the generation's configuration (shard
// names, the default shard) and, for "any shard", the pools' health.
type router struct {
	gen *GenerationEnv
}

// routeIn is the routing state a decision reads: a snapshot of the
// simulated transaction (txnSim), of the backend the pipeline holds or
// runs on, of the session's pin and hint binding.
type routeIn struct {
	tx   txState
	hint int // the transaction's pgshard hint (-1: none)
	// strict: the transaction asks for REPEATABLE READ or SERIALIZABLE
	// (set when a backend runs the client's transaction block).
	strict bool
	// held: a backend runs the transaction since before the pipeline;
	// onBackend: the pipeline runs on it already; shard is its shard.
	held, onBackend bool
	shard           int
	explicit, soft  bool
	bstatus         byte // the held backend's last status ('E': aborted)
	hintBound       bool // a hint chose the transaction's backend
	mainWrote       bool // the transaction's backend ran a write
	setAhead        bool // a setting went ahead in the implicit transaction
	multi           bool // planning a query string of several statements
	pipeline        bool // planning an extended-protocol pipeline
	// pinned: the session is pinned to pinShard (pin.go); forward: the
	// statement goes to the pinned backend as it is (ownBackend.forwards).
	pinned, forward bool
	pinShard        int
	pinReasons      pinReason
	// leaseErr refuses a keyed statement while the catalog lease is not
	// held (GenerationOps.LeaseError).
	leaseErr *pgwire.Error
}

func (in *routeIn) onTxnBackend() bool { return in.onBackend || in.held }

// fanReadsInTxn reports whether a read of every shard planned now would
// read every shard inside the client's transaction (as router.all
// decides): a transaction block not bound to one shard by a hint,
// nothing of the pipeline sent to a backend yet, not aborted.
func (in *routeIn) fanReadsInTxn() bool {
	hinted := in.hint >= 0 || in.hintBound
	return !hinted && !in.onBackend && (in.tx == txDeferred || in.tx == txBound && in.explicit) && !(in.held && in.bstatus == 'E')
}

// fenceTarget is the key that routed a statement to its shard: the
// executor asserts it (fence.go) when it opens the transaction there.
type fenceTarget struct {
	key    string // a text key ("": none, unless isNum); may alias Bind bytes
	num    int64  // an integer key, when isNum (rendered only to assert it)
	isNum  bool
	bucket int
	shard  int
}

// set reports whether there is a key to assert.
func (f *fenceTarget) set() bool { return f.key != "" || f.isNum }

// clear drops the key (the bucket stays for the caller's bookkeeping).
func (f *fenceTarget) clear() { f.key, f.isNum = "", false }

// text is the key's text form, for fenceKeyFor.
func (f *fenceTarget) text() string {
	if f.isNum {
		return strconv.FormatInt(f.num, 10)
	}
	return f.key
}

// routePlan is a routing decision.
type routePlan struct {
	shard int
	fan   bool // a fan-out (DestAll): every shard, merged (fanout.go)
	err   *pgwire.Error
	// refusal is the metric label of a refusal (pgshard_proxy_refusals_total).
	refusal string
	// fanInTxn: the fan-out reads inside the client's transaction;
	// fanOnly (shard+1) reads one other shard, in its reader.
	fanInTxn bool
	fanOnly  int
	// swapMain: the write moves the transaction's backend (demoteToReader).
	swapMain bool
	// leadNext: the statement runs on every shard ahead of the
	// pipeline's fan-out read (fanlead.go).
	leadNext bool
	// anyShard: any shard would do (another may be tried);
	// softOn/softOff: the transaction binds softly / no longer softly.
	anyShard, softOn, softOff bool
	// needAhead: a key-less statement of a pipeline: the shard is the
	// pipeline's next keyed statement's (lookahead), decided by keyless.
	needAhead bool
	// hinted: the shard is the transaction's pgshard hint's (describer:
	// not any shard).
	hinted bool
	fence  fenceTarget
}

// decide is the routing decision for a statement a routed to d (already
// adjusted to the database's placement rules, adjustDest).
func (r router) decide(a *route.Statement, d route.Dest, in *routeIn) routePlan {
	var rp routePlan
	if d.Kind == route.DestShard && d.Bucket >= 0 {
		if in.leaseErr != nil {
			rp.err = in.leaseErr
			return rp
		}
		rp.fence = fenceTarget{key: d.Key, bucket: d.Bucket, shard: d.Shard}
		rp.fence.num, rp.fence.isNum = d.KeyInt()
	}
	if in.pinned {
		if ok := r.pinned(a, d, in, &rp); ok {
			return rp
		}
	}
	switch d.Kind {
	case route.DestRefuse:
		rp.refusal = "analyzer"
		if d.Refusal != nil {
			rp.err = refusalError(d.Refusal)
		} else {
			rp.err = pgwire.NewError(pgwire.CodeFeatureNotSupported, "pgshard cannot route this statement correctly: "+d.Why())
		}
		return rp
	case route.DestAll:
		r.all(a, d, in, &rp)
		return rp
	}
	want := -1
	if d.Kind == route.DestShard {
		want = d.Shard
	} else if d.Default {
		want = r.gen.DefaultShard // unsharded objects live there
	}
	switch {
	case in.held && in.tx == txBound && in.bstatus == 'E':
		// The transaction is aborted: the backend answers 25P02.
		rp.shard = in.shard
	case in.onTxnBackend():
		r.inTxn(a, d, in, want, &rp)
	case in.hint >= 0 && want >= 0 && want != in.hint:
		rp.err, rp.refusal = r.crossShard(in, want, in.hint, d.Why()), "cross_shard"
	case in.hint >= 0:
		rp.shard = in.hint
	case want >= 0:
		rp.shard = want
	case in.pipeline:
		rp.needAhead = true
	default:
		r.keyless(a, in, -1, &rp)
	}
	return rp
}

// all is decide's decision for a statement of every shard (DestAll): a
// fan-out, the one shard a hint or an aborted transaction gives, or a
// refusal.
func (r router) all(a *route.Statement, d route.Dest, in *routeIn, rp *routePlan) {
	switch {
	case !in.onTxnBackend() && in.tx == txIdle:
		rp.shard, rp.fan = -1, true
		return
	case in.pinned && !in.onBackend && !in.explicit && in.tx == txIdle:
		rp.shard, rp.fan = -1, true // a pinned session's read of every shard, on pooled connections
		return
	}
	if hinted := in.hint >= 0 || in.hintBound; hinted && d.Merge != nil && a.Kind != route.KindDDL && (in.tx == txDeferred || in.tx == txBound) {
		// SET LOCAL pgshard.shard/key chose the transaction's shard:
		// a key-less read reads that shard (an operator's view of it).
		rp.shard = in.shard
		if in.hint >= 0 && !in.onTxnBackend() {
			rp.shard = in.hint
		}
		return
	}
	if d.Merge != nil && fanRead(a) && !in.onBackend && (in.tx == txDeferred || in.tx == txBound && in.explicit) {
		// A read of every shard inside the client's transaction: each
		// shard reads in a backend transaction of its own (fanout.go).
		if in.held && in.bstatus == 'E' {
			rp.shard = in.shard // aborted: the backend answers 25P02
			return
		}
		rp.shard, rp.fan, rp.fanInTxn = -1, true, true
		return
	}
	rp.refusal = "fanout_in_transaction"
	switch {
	case in.setAhead && in.tx == txIdle && !in.held:
		rp.err = errSettingsAhead(d.Why())
	case a.Kind == route.KindDDL || d.Merge == nil:
		rp.err = &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: "a statement that must change every shard's schema cannot run inside a transaction block",
			Detail:  d.Why(),
			Hint:    "Run it outside a transaction block (pgshard then runs it on every shard)."}
	default:
		rp.err = &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: "a statement that must read every shard must be alone in its pipeline (or implicit transaction): earlier statements of it run on one shard",
			Detail:  d.Why(),
			Hint:    "Send a Sync before it (inside a transaction block the read then runs on every shard), or add a key."}
	}
}

// inTxn is decide's decision while the transaction runs on a backend
// (in.onTxnBackend) for a statement of shard want (-1: any): that
// backend, a read in another shard's reader, a move of a soft transaction
// or of one that has only read, or a refusal.
func (r router) inTxn(a *route.Statement, d route.Dest, in *routeIn, want int, rp *routePlan) {
	// A transaction reads any shards and writes one (unless a pgshard
	// hint put it on its shard).
	inTxn := !in.onBackend && in.held && in.tx == txBound && in.explicit && !in.hintBound && !in.strict
	if want < 0 && a.ReadsObjects && a.ReadOnly && fanRead(a) && in.shard != r.gen.DefaultShard && inTxn && serving(r.gen.Pools[r.gen.DefaultShard]) {
		// A read of which objects exist (pg_class, information_schema,
		// to_regclass, ...) in a transaction on another shard: the default
		// shard's catalog alone has the unsharded ones. Read there, in its
		// reader, as a keyed read of another shard is.
		rp.shard, rp.fan, rp.fanInTxn, rp.fanOnly = -1, true, true, r.gen.DefaultShard+1
		return
	}
	if want < 0 || want == in.shard {
		rp.shard = in.shard
		rp.softOff = want >= 0
		return
	}
	if in.soft && !in.onBackend && in.held {
		rp.shard = want // ensureBackend moves the soft transaction
		return
	}
	switch {
	case inTxn && a.ReadOnly && fanRead(a):
		rp.shard, rp.fan, rp.fanInTxn, rp.fanOnly = -1, true, true, want+1 // a read there, in its reader
	case inTxn && !a.ReadOnly && !in.mainWrote:
		rp.shard, rp.swapMain = want, true
	default:
		rp.err, rp.refusal = r.crossShard(in, want, in.shard, d.Why()), "cross_shard"
	}
}

// keyless is the decision for a statement of no shard in particular,
// outside a transaction's backend and hint: the shard of the pipeline's
// next keyed statement (ahead, lookahead's answer; -1 outside a
// pipeline), every shard for a setting ahead of a read of every shard,
// else the default shard (a read: any shard while it is down, pickHome).
func (r router) keyless(a *route.Statement, in *routeIn, ahead int, rp *routePlan) {
	rp.needAhead = false
	switch {
	case ahead >= 0:
		rp.shard = ahead
	case ahead == aheadFan && in.tx == txIdle:
		rp.shard, rp.leadNext = -1, true
	case a.ReadOnly:
		rp.softOn = in.tx == txDeferred
		rp.shard, rp.anyShard = r.gen.pickHome(), true
	default:
		rp.shard = r.gen.DefaultShard
	}
}

// describer is the shard that describes a prepared statement before the
// pipeline runs on a backend: the held backend's, else the shard of the
// pipeline's next keyed statement (ahead, -1: none), else the default
// shard when the statement's objects live there only (unsharded, asked
// only then), else the hint's, else the default shard or, while it is
// down, any (pickHome; a deferred transaction then binds only softly
// for it).
func (r router) describer(in *routeIn, ahead int, unsharded func() bool) routePlan {
	rp := routePlan{shard: in.shard}
	if !in.held {
		rp.shard = ahead
	}
	if rp.shard < 0 && unsharded() && len(r.gen.Pools) > 1 {
		rp.shard = r.gen.DefaultShard // its objects live there only
	}
	if rp.shard >= 0 {
		return rp
	}
	if in.hint >= 0 {
		rp.shard, rp.hinted = in.hint, true
		return rp
	}
	rp.shard, rp.anyShard = r.gen.pickHome(), true
	rp.softOn = in.tx == txDeferred
	return rp
}

// crossShard is the error for a statement whose shard is not the
// transaction's (the caller counts the refusal).
func (r router) crossShard(in *routeIn, want, have int, reason string) *pgwire.Error {
	name := r.gen.shardName
	e := &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: fmt.Sprintf("statement touches shard %q but the transaction is on shard %q", name(want), name(have)),
		Hint:    "A transaction runs on one shard: roll it back, then run the statement in its own transaction."}
	switch {
	case in.multi:
		e.Message = fmt.Sprintf("statement touches shard %q but other statements of the same query string run on shard %q", name(want), name(have))
		e.Hint = "A query string runs on one shard: send statements for different shards as separate queries (and transactions)."
	case in.tx == txIdle && !in.explicit:
		e.Message = fmt.Sprintf("statement touches shard %q but earlier statements of the same pipeline (one implicit transaction) ran on shard %q", name(want), name(have))
		e.Hint = "Send a Sync between statements for different shards."
	}
	if reason != "" {
		e.Detail = "Routing: " + reason
	}
	return e
}

// pinned decides where a statement of a pinned session runs: its
// backend's shard, or an error when it needs another one. false: the
// ordinary rules apply (a read of every shard outside a transaction
// block, on pooled connections).
func (r router) pinned(a *route.Statement, d route.Dest, in *routeIn, rp *routePlan) bool {
	rp.shard = in.pinShard
	if in.forward {
		return true
	}
	switch d.Kind {
	case route.DestRefuse:
		rp.shard = 0
		return false
	case route.DestShard:
		if d.Shard != in.pinShard {
			rp.shard, rp.err, rp.refusal = 0, r.pinnedElsewhere(in, d.Shard, d.Why()), "pinned"
		}
		return true
	case route.DestAll:
		if (a.Kind == route.KindDDL || d.Merge != nil) && in.tx == txIdle && !in.onBackend && !in.explicit {
			rp.shard = 0
			return false // fans out on pooled connections
		}
		note := ""
		if in.tx != txIdle || in.explicit {
			note = " inside a transaction block"
		}
		rp.shard, rp.refusal = 0, "pinned"
		rp.err = &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: fmt.Sprintf("a statement for every shard cannot run in this pinned session (%s on shard %q)%s", in.pinReasons, r.gen.shardName(in.pinShard), note),
			Detail:  d.Why(),
			Hint:    pinnedHint(in, "Run it outside a transaction block, from a session without session state, or add a key.")}
		return true
	}
	if d.Default && in.pinShard != r.gen.DefaultShard {
		rp.shard, rp.err, rp.refusal = 0, r.pinnedElsewhere(in, r.gen.DefaultShard, d.Why()), "pinned"
	}
	return true
}

// pinnedHint is a pinned session's refusal hint: def, unless the pin is
// only the one exchange's (a session SET ahead of other statements in a
// query string or pipeline), which ends by itself — sent first, on its
// own, the setting is kept for the session and nothing pins.
func pinnedHint(in *routeIn, def string) string {
	if in.pinReasons == pinSetsOnce {
		return "Send the session SET (or set_config(..., false)) as a query or batch of its own first: pgshard keeps it for the session, and the statements after it then run wherever they need to."
	}
	return def
}

// pinnedElsewhere is the refusal of a statement for another shard than
// the pinned session's.
func (r router) pinnedElsewhere(in *routeIn, want int, reason string) *pgwire.Error {
	e := &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: fmt.Sprintf("statement touches shard %q but this session is pinned to shard %q (%s)", r.gen.shardName(want), r.gen.shardName(in.pinShard), in.pinReasons),
		Hint:    pinnedHint(in, "A pinned session runs on one shard: use another connection for other shards, or end the session state (DISCARD ALL).")}
	if reason != "" {
		e.Detail = "Routing: " + reason
	}
	return e
}
