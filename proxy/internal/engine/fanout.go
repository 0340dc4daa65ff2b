package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/merge"
	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// Fan-out: a statement the analyzer sends to every shard (DestAll) — DDL,
// or a key-less read merged per route.Merge (internal/merge) — runs on every
// shard at once: one write per shard, then the answers are read shard by
// shard (DDL) or merged row by row (reads): no goroutines, no buffering
// beyond one row per shard.
//
//	outside a transaction: every shard's connection is taken from its pool
//	  for the statement (wrapped in BEGIN/COMMIT when the client's settings
//	  need a preamble) and returned after it;
//	inside one (explicit BEGIN, or a driver's autocommit off): the shard of
//	  the transaction's backend runs the read there; every other shard runs
//	  it in a read-only backend transaction of its own (a "reader"), opened
//	  with the client's BEGIN, SET LOCALs and settings replayed and kept
//	  until the transaction ends. A read under REPEATABLE READ or
//	  SERIALIZABLE is refused (no snapshot spans shards): each participant
//	  checks its isolation in the same write, once per transaction. A
//	  transaction that read N shards holds N backends (PoolSize bounds
//	  them per shard);
//	settings ahead of the read in its implicit transaction (fanlead.go):
//	  every shard runs them first, in the same write;
//	a shard whose pool has the fence reads the served form of its text
//	  (shardText: each keyed table in the buckets the shard serves), so
//	  a range being moved is not read on both its shards.

// fanPlan is a fan-out statement of a pipeline or simple query.
type fanPlan struct {
	simple bool
	st     *route.Statement
	dest   route.Dest
	// query is the raw Query message (simple protocol).
	query string
	// others, when set, is the Query message the shards other than the
	// default one run instead of query: the statements of a DDL query
	// string that every shard needs, without those of unsharded tables.
	others []byte
	// Extended protocol: the statement, the client's Bind (copied), and
	// whether the client asked for a portal Describe.
	vs       *vstmt
	bind     []byte
	portal   string
	describe bool
	executed bool
	// inTxn: the read joins the client's transaction.
	inTxn bool
	// only, when set, is the one shard (+1) that reads: a keyed read of
	// another shard than the transaction's backend's, in its reader.
	only int
	// continues: more of the pipeline follows (no ReadyForQuery yet);
	// failed reports that the read failed the transaction.
	continues, failed bool
	// leads are the settings every shard runs first (fanlead.go).
	leads []fanLead
	// raw, when set, is the request sent in place of the statement (a
	// stage of a read in two stages: twostage.go).
	raw []byte
	// fetch, when not 0, is the row limit of the read's Execute, or
	// fetchApart: the client fetches the portal in parts (cursor.go);
	// or fetchDeclare: the read is a DECLAREd cursor's, named cursor
	// (sqlcursor.go).
	fetch  int32
	cursor string
	// isoCheck: the request begins with stageIsoCheckSQL (the first
	// stage of a read in two stages inside a transaction block).
	isoCheck bool
	// blockSets: a stage of a read in two stages inside a transaction
	// block that set transaction-local settings (SET LOCAL,
	// set_config(..., true)): its own transaction begins as the block's
	// (replaySQL: the BEGIN, the session's settings, the SET LOCALs) and
	// commits after the stage.
	blockSets bool
	// repl, when set, replaces each route.StageMarker in the text each
	// shard runs (stage 2 of a spread read in two stages: the
	// subqueries' rows, as parameters after the client's in bind).
	repl []string
	// want, when set, are the columns the client's statement describes
	// (stage 2 of a spread read in two stages): the merged answer must
	// describe them (sameColumns), else it is refused before any row.
	want []pgvalue.Field
}

// startFan records a DestAll Bind, routed by rp; the rest of the
// pipeline must be its Describe, Execute and Sync.
func (p pipePlanner) startFan(a *route.Statement, d route.Dest, vs *vstmt, idx int, rp routePlan) {
	s := p.planner.s
	p.planner.fan = &fanPlan{st: a, dest: d, vs: vs, bind: append([]byte(nil), s.grp[idx].raw...), portal: string(p.planner.bv.Portal), inTxn: rp.fanInTxn, only: rp.fanOnly, leads: p.planner.leads}
}

// fetchable reports whether f's portal may be fetched in parts
// (cursor.go): a merged read, or a keyed read in its shard's reader, not
// a COPY.
func (f *fanPlan) fetchable() bool {
	return (f.dest.Merge != nil || f.only > 0 && f.st.Select) && !f.st.Copy && !f.simple
}

// singleMerge is the merge of a read on one shard: its rows as they are.
var singleMerge = &route.Merge{Width: -1, Limit: -1, Offset: -1}

// fanAccepts reports whether m may follow a fan-out Bind.
func (p pipePlanner) fanAccepts(m cmsg) bool {
	f := p.planner.fan
	switch m.typ {
	case 'D':
		kind, name, err := pgwire.DecodeTarget(m.raw)
		if err != nil || kind != 'P' || string(name) != f.portal || f.executed {
			return false
		}
		f.describe = true
		return true
	case 'E':
		portal, maxRows, err := pgwire.DecodeExecute(m.raw)
		if err != nil || string(portal) != f.portal || f.executed {
			return false
		}
		f.executed = true
		if f.fetch != fetchDeclare && f.fetchable() {
			// A DECLARE answers only its tag, and a statement without
			// rows (DDL) runs whole, whatever the limit (as Postgres
			// ignores it for them).
			f.fetch = rowLimit(maxRows)
		}
		return true
	case 'S':
		return f.executed
	}
	return false
}

// isoCheckSQL fails (22P02) unless the transaction reads committed data
// statement by statement: a multi-shard read has no snapshot across shards.
const isoCheckSQL = "SELECT CASE WHEN pg_catalog.current_setting('transaction_isolation') IN ('read committed', 'read uncommitted') THEN NULL ELSE pg_catalog.current_setting('transaction_isolation')::pg_catalog.int4 END /* pgshard: a read of every shard needs READ COMMITTED */"

// params returns the client's Bind parameters of an extended fan-out.
func (f *fanPlan) params() ([][]byte, []int16, []uint32) {
	if f.simple {
		return nil, nil, nil
	}
	var bv pgwire.BindView
	if bv.Decode(f.bind) != nil {
		return nil, nil, nil
	}
	return bv.Params, bv.Formats, f.vs.oids
}

// fanExec carries out one fan-out: a fanPlan, on every participant's
// connection (its streams), answering the client. One is made per
// fan-out (newFanExec), and per stage of a read in two stages
// (twostage.go: stage). It sees of the session only what its fields hand
// it, the way an engine primitive of Vitess runs through its VCursor:
// the client's output, the planned answers around the read, the
// settings, the transaction with its backend and readers, and the
// session's own methods for the rest of what a read changes (fanSession).
type fanExec struct {
	ctx context.Context
	gen *GenerationEnv
	f   *fanPlan
	// streams are the participants, in shard order (fanParts).
	streams []*fanStream

	// cc is the client connection the answers are appended to (cc.out)
	// and flushed on (cc.flush).
	cc *clientConn
	// items and lbuf are the planned answers (exchange.go): those before
	// the read's first lead go first, those among its leads in order.
	items []item
	lbuf  []byte
	// cur points at the session's current settings (an answer applied
	// ahead of the read may change them).
	cur **backend.Settings
	// txn is the client's transaction (txnstate.go), bc its backend as
	// the fan-out starts (nil: none; only failTxn drops it),
	// readers its read-only backend transactions (readtxns.go).
	txn     *transaction
	bc      *backend.Conn
	readers *readerSet
	// fanning, under mu, are the connections being read (cancelBackend).
	mu      *sync.Mutex
	fanning *[]*backend.Conn
	sess    fanSession
	// fences and log are the server's (HostEnv; nil without one): a
	// participant whose pool has the fence reads in the served form
	// (shardText).
	fences *PoolFences
	log    *slog.Logger
	// outStart and flushes are the client's output and flush count when
	// the read began; pure: the answers planned before it have no effect
	// a run again would repeat; retryEpoch is the fence epoch of a
	// served-set mismatch being retried (servedretry.go).
	outStart   int
	flushes    uint64
	pure       bool
	retryEpoch uint64
	// idleStart: the message began outside a transaction block
	// (planner.idleStart): a BEGIN answered before the read is undone by
	// a run again, which answers it again.
	idleStart bool
	// servedFail is the error of a read in two stages' stage whose part
	// failed first (twostage.go), for servedretry.go.
	servedFail []byte
	// leadsRead: a read in two stages answered its leads (its first
	// stage); leadFailed: one failed there (twostage.go stageLeads).
	leadsRead, leadFailed bool
	// cursors are the session's cursors; capt, while a read fetched in
	// parts runs, is the client's output kept for its cursor (cursor.go).
	cursors *cursorSet
	capt    *cursorCapture
	// catalog is the shard whose catalog the client reads: the other
	// shards' descriptions are told in its numbers (relabel.go).
	catalog int
	// ps is the session's reported parameters; times, how the shards
	// write dates and times in this read (timestyle.go), set as it runs.
	ps    *paramStatus
	times *pgvalue.TimeStyle
}

// fanSession is what a fan-out changes of its session through the
// session's own methods: the effects of the planned answers it sends
// (exchange.go), and the loss of the transaction's backend. *Session
// implements it.
type fanSession interface {
	apply(e *effect)
	dropBackend(clean bool)
	// servedRetryable and awaitServed: a run again after a served-set
	// mismatch (servedretry.go).
	servedRetryable() bool
	awaitServed(ctx context.Context, epoch uint64) bool
}

// newFanExec is the executor of the planner's fan-out, p.fan.
func newFanExec(p *planner) *fanExec {
	s := p.s
	x := &fanExec{ctx: p.ctx, gen: s.gen, f: p.fan, cc: &s.cc, items: p.plan.items, lbuf: p.plan.lbuf,
		cur: &s.cur, txn: &s.txn, bc: s.bc, readers: &s.readers, mu: &s.mu, fanning: &s.fanning, sess: s,
		outStart: len(s.cc.out), flushes: s.cc.flushes, cursors: &s.cursors, idleStart: p.idleStart,
		catalog: catalogShard(s), ps: &s.ps}
	if s.host != nil {
		x.fences, x.log = s.host.Fences, s.host.Log
	}
	return x
}

// shardText is the text participant st runs for the read, base: its
// served form (route.Analyzer.ServedSQL: each keyed table read only in
// the buckets the shard serves) when st's pool has the fence — asked on
// a connection of this fan-out's own, never inside the client's
// transaction — else base.
func (x *fanExec) shardText(st *fanStream, base string) (string, error) {
	if x.fences == nil || x.f.only > 0 || x.f.dest.Merge == nil {
		return base, nil // a keyed read in its shard's reader; DDL
	}
	on := false
	if st.role == partOwn || st.role == partNewReader {
		on = x.fences.fenced(x.ctx, x.gen, x.log, st.bc.Pool, st.bc)
	} else {
		on, _ = x.fences.decided(x.gen, st.bc.Pool)
	}
	if !on {
		return base, nil
	}
	sv, err := x.gen.Config.Analyzer.ServedSQL(x.f.st, base, x.fences.servedChecked(x.gen, st.bc.Pool))
	var r *route.Refusal
	switch {
	case errors.As(err, &r):
		x.gen.Metrics.Refusals.WithLabelValues("unsupported").Inc()
		return "", refusalError(r) // nothing sent: the stream answers it (fanStream.failRequest)
	case err != nil:
		return "", err
	case sv != "":
		return sv, nil
	}
	return base, nil
}

// stage is the executor of fp, a stage of x's read: a fan-out of its own
// on the same session.
func (x *fanExec) stage(fp *fanPlan) *fanExec {
	sx := *x
	sx.f, sx.streams = fp, nil
	return &sx
}

// run executes x.f on every shard and answers the client.
func (x *fanExec) run() error {
	f := x.f
	if f.fetch != 0 && x.capt == nil {
		return x.runCursor() // cursor.go: this, into the portal's cursor
	}
	srv := x.gen
	srv.Metrics.Fanouts.Inc()
	if f.inTxn {
		srv.Metrics.TxnReads.Inc()
	}
	// Answers planned before the fan-out statement (ParseComplete, BEGIN,
	// ...), up to its first lead, which needs the shards' answers.
	first := len(x.items)
	if len(f.leads) > 0 {
		first = firstLead(x.items)
	}
	x.pure = pureItems(x.items[:first], x.idleStart)
	for i := range x.items[:first] {
		it := &x.items[i]
		x.cc.out = append(x.cc.out, x.lbuf[it.lo:it.hi]...)
		x.sess.apply(it.eff)
	}
	mplan := f.dest.Merge
	x.times = timeStyleOf(x)
	if mplan != nil && mplan.Stages != nil && f.only == 0 {
		return x.runTwoStage() // twostage.go
	}
	if f.only > 0 {
		mplan = singleMerge
	}
	copyRows := f.st.Copy && mplan != nil && mplan.CopyOut != nil && mplan.CopyOut.Rows
	if copyRows {
		if e := copyRowsCheck(f, *x.cur); e != nil {
			pass := mplan.CopyOut.Passthrough
			if pass == nil || f.only > 0 {
				return x.fanFail(e)
			}
			// each shard's own binary COPY output, as it is
			mplan, copyRows, f.dest.Merge = pass, false, pass
		}
	}
	bytewise := mplan != nil && f.only == 0 && (!f.st.Copy || copyRows) && x.gen.textBytewise(x.ctx)
	if e := x.fanParts(); e != nil {
		return x.fanFail(e)
	}
	streams := x.streams
	x.setFanning(streams)
	defer x.setFanning(nil)
	var bv pgwire.BindView
	if !f.simple {
		if err := bv.Decode(f.bind); err != nil {
			return err
		}
		if f.fetch == fetchDeclare {
			bv.ResultFmts = nil // a cursor's rows are text, whatever the DECLARE's Bind asked
		}
	}
	if copyRows && mplan.CopyOut.Format == route.CopyBinary {
		bv.ResultFmts = []int16{1} // a binary COPY's tuples are binary rows
	}
	var formats []int16
	if mplan != nil && (!f.st.Copy || copyRows) {
		formats = merge.ShardFormats(mplan, bv.ResultFmts)
	}
	for _, st := range streams {
		buf, err := x.fanRequest(st, &bv, formats)
		if err != nil {
			st.failRequest(err)
			continue
		}
		if err := st.bc.Write(buf); err != nil {
			st.loseConn(err)
		}
	}
	if first < len(x.items) && !x.fanLeads(x.items[first:], f.simple) {
		x.fanEnd()
		return nil
	}
	bindAt := -1
	if !f.simple {
		bindAt = len(x.cc.out)
		x.cc.out = pgwire.AppendEmpty(x.cc.out, '2') // BindComplete
	}
	var runErr error
	switch {
	case copyRows:
		runErr = runCopyRows(x, mplan, &bv, bytewise) // copyrows.go
	case f.st.Copy:
		runErr = x.fanCopy(bindAt) // copyout.go
		if runErr == nil && x.servedRetryable(partError(firstFailed(x.streams))) {
			runErr = errServedRetry
		}
	case mplan == nil:
		x.fanCollect()
	default:
		runErr = x.fanMerge(mplan, &bv, bytewise, bindAt)
	}
	return fanRunEnd(x, runErr)
}

// fanRunEnd ends x's run: the read again after a served-set refusal
// (servedretry.go), or the session SETs that led it kept (fanlead.go);
// the participants given back.
func fanRunEnd(x *fanExec, runErr error) error {
	if runErr == errServedRetry {
		if !x.f.inTxn {
			x.fanEnd()
		}
		return x.servedRetry()
	}
	if runErr == nil {
		keepSessionLeads(x)
	}
	x.fanEnd()
	return runErr
}

// fanParts takes every shard's participant into x.streams, in shard order
// (two fan-outs never wait for each other's connections in a cycle).
func (x *fanExec) fanParts() *pgwire.Error {
	f, srv := x.f, x.gen
	streams := make([]*fanStream, 0, len(srv.Pools))
	fail := func(e *pgwire.Error) *pgwire.Error {
		for _, st := range streams {
			if st.role == partOwn || st.role == partNewReader {
				st.bc.Pool.Release(st.bc) // nothing was sent on it
			}
		}
		return e
	}
	for i, pool := range srv.Pools {
		if f.only > 0 && i != f.only-1 {
			continue
		}
		st := &fanStream{shard: i, name: x.gen.shardName(i)}
		switch {
		case f.inTxn && x.bc != nil && x.txn.shard == i:
			st.bc, st.role = x.bc, partMain
		case f.inTxn && x.readers.get(i) != nil:
			st.bc, st.role = x.readers.get(i), partReader
		default:
			key, _ := (*x.cur).Split(pool.ViaPooler)
			bc, err := pool.Acquire(x.ctx, key)
			if err != nil {
				e := pgwire.AsError(err, pgwire.NewError(pgwire.CodeCannotConnect, err.Error()))
				if be, ok := err.(*backend.PgError); ok {
					e = pgErrorToError(be.PgErr, "ERROR")
				}
				e2 := *e
				e2.Message = fmt.Sprintf("cannot run the statement on every shard: %s", e.Message)
				e2.Raw = nil
				return fail(&e2)
			}
			st.bc, st.role = bc, partOwn
			if f.inTxn {
				st.role = partNewReader
			}
		}
		st.rl = relabelPool(x.ctx, x.gen, pool, x.catalog)
		streams = append(streams, st)
	}
	x.streams = streams
	return nil
}

// fanRequest is what one participant is sent.
func (x *fanExec) fanRequest(st *fanStream, bv *pgwire.BindView, formats []int16) ([]byte, error) {
	f := x.f
	var buf []byte
	_, pre := (*x.cur).Split(st.bc.Pool.ViaPooler)
	wrap := false
	switch st.role {
	case partOwn:
		if f.blockSets {
			buf = pgwire.AppendQuery(buf, replaySQL(x.txn.deferred, pre))
			st.lead = append(st.lead, leadSetup)
			wrap = true
		} else if len(pre.KV) > 0 && !f.st.NoTxnBlock {
			buf = pgwire.AppendQuery(buf, pre.BeginSQL()+";\n"+pre.PreambleSQL())
			st.lead = append(st.lead, leadSetup)
			wrap = true
		}
	case partNewReader:
		buf = pgwire.AppendQuery(buf, replaySQL(x.txn.deferred, pre))
		st.lead = append(st.lead, leadSetup)
	}
	switch {
	case f.isoCheck:
		buf = pgwire.AppendQuery(buf, stageIsoCheckSQL)
		st.lead = append(st.lead, leadCheck)
	case f.inTxn && !st.bc.TxnChecked:
		buf = pgwire.AppendQuery(buf, isoCheckSQL)
		st.lead = append(st.lead, leadCheck)
	}
	for i := range f.leads {
		buf = appendLead(buf, &f.leads[i])
	}
	merge := f.dest.Merge
	if f.only > 0 {
		merge = singleMerge
	}
	switch {
	case f.raw != nil:
		buf = append(buf, f.raw...) // a stage of a read in two stages
	case merge == nil && f.simple && f.others != nil && st.shard != x.gen.DefaultShard:
		buf = append(buf, f.others...) // DDL every shard needs
	case merge == nil && f.simple:
		buf = append(buf, f.query...) // DDL: the client's query string
	case f.simple && f.repl == nil:
		sql := f.st.SQL
		if merge.SQL != "" {
			sql = merge.SQL
		}
		if st.shard < len(merge.ShardSQL) {
			sql = merge.ShardSQL[st.shard]
		}
		sql, err := x.shardText(st, sql)
		if err != nil {
			return nil, err
		}
		buf = pgwire.AppendParseMsg(buf, "", sql, nil)
		buf = pgwire.AppendBindNoParams(buf, formats)
		buf = pgwire.AppendDescribe(buf, 'P', "")
		buf = pgwire.AppendExecute(buf, "", 0)
		buf = pgwire.AppendEmpty(buf, 'S')
	default:
		sql := f.st.SQL
		if merge != nil && merge.SQL != "" {
			sql = merge.SQL
		}
		if merge != nil && st.shard < len(merge.ShardSQL) {
			sql = merge.ShardSQL[st.shard]
		}
		sql, err := x.shardText(st, sql)
		if err != nil {
			return nil, err
		}
		if f.repl != nil {
			if sql = stageText(sql, f.repl); sql == "" {
				return nil, errors.New("pgshard: a stage's marker is not in the text a shard runs")
			}
		}
		buf = pgwire.AppendParseMsg(buf, "", sql, f.vs.oids)
		if merge != nil {
			buf = pgwire.AppendBindFormats(buf, f.bind, bv, formats)
		} else {
			buf = pgwire.AppendBindAs(buf, f.bind, bv, "")
		}
		buf = pgwire.AppendDescribe(buf, 'P', "")
		buf = pgwire.AppendExecute(buf, "", 0)
		buf = pgwire.AppendEmpty(buf, 'S')
	}
	st.rfqLeft = len(st.lead) + 1
	if wrap {
		buf = pgwire.AppendQuery(buf, "COMMIT")
		st.rfqLeft++
	}
	st.rl.parseTypes(buf)
	return buf, nil
}

// fanFail answers the client with an error after a failed fan-out start.
func (x *fanExec) fanFail(e *pgwire.Error) error {
	f := x.f
	x.gen.Metrics.Refusals.WithLabelValues("shard_unavailable").Inc()
	x.cc.out = pgwire.AppendError(x.cc.out, e)
	if f.inTxn {
		x.failTxn(nil)
	}
	f.failed = true
	if !f.continues {
		x.cc.out = pgwire.AppendRFQ(x.cc.out, x.txn.status())
	}
	return nil
}

// fanResultError picks the error to report: an isolation refusal, or the
// first shard's error in map order, with the shard named in its Detail and
// where the statement did succeed (DDL is not atomic across shards) —
// unless every shard failed with the same error, which then goes as is.
func (g *GenerationEnv) fanResultError(streams []*fanStream) []byte {
	for _, st := range streams {
		if st.leadErr == int(leadCheck)+1 {
			iso := "REPEATABLE READ or SERIALIZABLE"
			if e := pgwire.DecodeError(st.errRaw); e != nil {
				if i := strings.IndexByte(e.Message, '"'); i >= 0 {
					if j := strings.LastIndexByte(e.Message, '"'); j > i {
						iso = strings.ToUpper(e.Message[i+1 : j])
					}
				}
			}
			g.Metrics.Refusals.WithLabelValues("isolation").Inc()
			return pgwire.AppendError(nil, isolationRefusal(iso, "a read of more than one shard"))
		}
	}
	var failed, ok []string
	var first []byte
	firstShard := ""
	same := true // every shard failed with one error (code and message)
	for _, st := range streams {
		name := g.shardName(st.shard)
		switch {
		case st.lost != nil:
			failed, same = append(failed, name), false
			if first == nil {
				first = pgwire.AppendError(nil, &pgwire.Error{Code: pgwire.CodeConnectionFailure, Message: fmt.Sprintf("lost the connection to shard %q: %s", name, backend.ShortErr(st.lost))})
				firstShard = name
			}
		case st.errRaw != nil:
			failed = append(failed, name)
			if first == nil {
				first, firstShard = clientServedError(st.errRaw), name
			} else if same {
				same = pgwire.ErrorField(st.errRaw, 'C') == pgwire.ErrorField(first, 'C') &&
					pgwire.ErrorField(st.errRaw, 'M') == pgwire.ErrorField(first, 'M')
			}
		default:
			ok = append(ok, name)
		}
	}
	if first == nil {
		return nil
	}
	if same && len(ok) == 0 {
		// One Postgres would have said just this, and nothing changed
		// anywhere: the error goes as it is (its Detail is the client's
		// to read, as directly).
		return first
	}
	d := fmt.Sprintf("pgshard ran the statement on every shard: it failed on %s", strings.Join(failed, ", "))
	if len(ok) > 0 {
		d += fmt.Sprintf(" and succeeded on %s", strings.Join(ok, ", "))
	}
	d += fmt.Sprintf("; this error is shard %q's.", firstShard)
	return pgwire.AppendErrorDetail(nil, first, d)
}

// isolationRefusal is the error for a transaction that would touch
// several shards under an isolation level that needs one snapshot.
func isolationRefusal(iso, what string) *pgwire.Error {
	return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: fmt.Sprintf("%s cannot run in a %s transaction: no snapshot spans shards, so the shards' answers would not be one consistent snapshot", what, iso),
		Detail:  "pgshard runs each shard's part of a transaction in a backend transaction of its own.",
		Hint:    "Use READ COMMITTED for transactions that read several shards, or keep the transaction on one shard (a key, or /* pgshard:shard=NAME */)."}
}

// fanCollect answers a fan-out without a merge plan (DDL): every shard's
// answer is read; on success the first shard's answer stands for all,
// with row counts summed.
func (x *fanExec) fanCollect() {
	f, streams := x.f, x.streams
	var total int64
	var tag []byte
	countable := true
	for _, st := range streams {
		if st.lost == nil {
			more := st.nextRow()
			if st.shard == 0 {
				switch {
				case f.simple && st.rowDesc != nil:
					x.cc.out = append(x.cc.out, st.rowDesc...)
				case !f.simple && f.describe && st.rowDesc != nil:
					x.cc.out = append(x.cc.out, st.rowDesc...)
				case !f.simple && f.describe:
					x.cc.out = pgwire.AppendEmpty(x.cc.out, 'n')
				}
			}
			for ; more; more = st.nextRow() {
				x.cc.out = append(x.cc.out, st.row...) // RETURNING rows: concatenated
			}
			st.drain()
		}
		if st.tag != nil {
			if tag == nil {
				tag = st.tag
			}
			if n, ok := tagCount(st.tag); ok {
				total += n
			} else {
				countable = false
			}
		}
	}
	if e := x.gen.fanResultError(streams); e != nil {
		x.cc.out = append(x.cc.out, e...)
		return
	}
	for _, n := range streams[0].notices {
		x.cc.out = append(x.cc.out, n...)
	}
	if tag != nil {
		if countable {
			tag = replaceTagCount(tag, total)
		}
		x.cc.out = pgwire.AppendCommandComplete(x.cc.out, string(tag))
	} else {
		x.cc.out = pgwire.AppendEmpty(x.cc.out, 'I')
	}
}

// tagCount returns the row count at the end of a command tag.
func tagCount(tag []byte) (int64, bool) {
	i := strings.LastIndexByte(string(tag), ' ')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(tag[i+1:]), 10, 64)
	return n, err == nil
}

func replaceTagCount(tag []byte, n int64) []byte {
	i := strings.LastIndexByte(string(tag), ' ')
	if i < 0 {
		return tag
	}
	return append(append([]byte(nil), tag[:i+1]...), strconv.FormatInt(n, 10)...)
}

// fanMerge answers a merged fan-out read. It returns an error only when
// the client connection failed.
func (x *fanExec) fanMerge(m *route.Merge, bv *pgwire.BindView, bytewise bool, bindAt int) error {
	f, streams := x.f, x.streams
	live := make([]bool, len(streams))
	for i, st := range streams {
		if st.lost == nil {
			live[i] = st.nextRow()
		}
	}
	var rd []byte
	for _, st := range streams {
		if st.rowDesc != nil {
			rd = st.rowDesc
			break
		}
	}
	sources := make([]merge.Source, len(streams))
	for i, st := range streams {
		sources[i] = st
	}
	r := &merge.Run{Plan: m, Sources: sources, Live: live, RawDesc: rd, ClientFormats: bv.ResultFmts,
		Describe: f.simple || f.describe, Bytewise: bytewise, Times: x.times, GroupLimit: x.gen.Config.MergeGroupLimit,
		Out: &x.cc.out, Flush: x.cc.flush}
	if !f.simple {
		r.Params, r.Formats, r.OIDs = bv.Params, bv.Formats, f.vs.oids
	}
	if x.servedRetryable(partError(firstFailed(streams))) {
		for _, st := range streams {
			st.drain()
		}
		return errServedRetry
	}
	if x.fanErrorsSoFar(r, bindAt) {
		return nil
	}
	if f.want != nil && !mergeDescribes(x, r, f.want, bindAt) {
		return nil
	}
	lo := len(x.cc.out)
	e := r.Answer()
	if e == merge.ErrStop {
		return r.IOErr
	}
	for _, st := range streams {
		st.drain()
	}
	if err := x.gen.fanResultError(streams); err != nil {
		x.cc.out = append(x.cc.out[:lo], err...)
		return nil
	}
	if e == nil && x.capt != nil {
		// Fetched in parts: beyond the capture's bound the error follows
		// the rows flushed to it (runCursor leaves them out).
		e, lo = x.capt.tooBig(x.cc), 0
	}
	if e != nil {
		x.cc.out = pgwire.AppendError(x.cc.out[:lo], e)
		for _, st := range streams {
			st.errRaw = pgwire.AppendError(nil, e) // the transaction fails as on a shard's error
		}
		return nil
	}
	for _, n := range streams[0].notices {
		x.cc.out = append(x.cc.out, n...)
	}
	if f.only > 0 && streams[0].tag != nil {
		x.cc.out = pgwire.AppendCommandComplete(x.cc.out, string(streams[0].tag)) // the one shard's own tag
		return nil
	}
	x.cc.out = pgwire.AppendCommandComplete(x.cc.out, "SELECT "+strconv.FormatInt(r.Emitted, 10))
	return nil
}

// fanErrorsSoFar writes the error once any shard failed before its rows.
// The replies before it are one database's: where the shard whose error
// is reported failed at Bind (BindComplete at bindAt, >= 0, is taken
// back) or after describing the result (its merged description goes
// first, if the client asked for it); a lost connection or an error of a
// query of the proxy's own comes after BindComplete.
func (x *fanExec) fanErrorsSoFar(r *merge.Run, bindAt int) bool {
	streams := x.streams
	first := firstFailed(streams)
	if first == nil {
		return false
	}
	for _, x := range streams {
		x.drain()
	}
	switch {
	case x.failedAtBind(first, bindAt):
		x.cc.out = x.cc.out[:bindAt]
	case first.lost == nil && first.leadErr == 0 && first.rowDesc != nil && r.Describe:
		r.RawDesc = first.rowDesc
		if d, e := r.Description(); e == nil {
			x.cc.out = append(x.cc.out, d...)
		}
	}
	x.cc.out = append(x.cc.out, x.gen.fanResultError(streams)...)
	return true
}

// mergeDescribes reports whether r's answer describes the columns want
// (names, types, type modifiers); when not, it refuses the read in their
// place (the BindComplete at bindAt taken back, f failed): a rewritten
// statement must never answer under other columns than the client's.
func mergeDescribes(x *fanExec, r *merge.Run, want []pgvalue.Field, bindAt int) bool {
	if d, e := r.Description(); e == nil {
		if fs, err := pgvalue.ParseRowDesc(d); err == nil && sameColumns(fs, want) {
			// The columns' originating tables are the statement's (a
			// column read from a table stage 1 read whole comes from a
			// VALUES list on the shards), as stage 2 on one shard answers
			// them.
			r.Origins = want
			return true
		}
	}
	for _, st := range x.streams {
		st.drain()
	}
	if bindAt >= 0 {
		x.cc.out = x.cc.out[:bindAt]
	}
	x.cc.out = append(x.cc.out, stageColumnsRefusal()...)
	x.f.failed = true
	return false
}

// firstFailed is the first participant that failed — the one whose error
// fanResultError reports — nil if none did.
func firstFailed(streams []*fanStream) *fanStream {
	for _, st := range streams {
		if st.failed() {
			return st
		}
	}
	return nil
}

// failedAtBind reports whether first, the participant whose error is
// reported, failed at its Bind (its own statement's error, before its
// BindComplete) while the client's BindComplete at bindAt (>= 0) is the
// last thing written for it: one database would not have sent it.
func (x *fanExec) failedAtBind(first *fanStream, bindAt int) bool {
	return first.lost == nil && first.leadErr == 0 && !first.bound && bindAt >= 0 && bindAt+5 == len(x.cc.out)
}

// fanEnd returns or keeps every participant's connection and answers the
// client's ReadyForQuery. Outside a transaction the connections go back to
// their pools. Inside one, new readers join the transaction and the
// transaction backend's status is taken; after an error the client's
// transaction is failed on every participant, as on one database.
func (x *fanExec) fanEnd() {
	f, streams := x.f, x.streams
	failed := false
	for _, st := range streams {
		st.drain()
		failed = failed || st.failed()
	}
	f.failed = failed
	if !f.inTxn {
		for _, st := range streams {
			if st.lost != nil || st.bc.Broken {
				st.bc.Pool.Discard(st.bc)
			} else {
				st.bc.Pool.Release(st.bc)
			}
		}
		if !f.continues {
			x.cc.out = pgwire.AppendRFQ(x.cc.out, 'I')
		}
		return
	}
	if !f.continues {
		defer func() { x.cc.out = pgwire.AppendRFQ(x.cc.out, x.txn.status()) }()
	}
	if !failed {
		for _, st := range streams {
			st.bc.TxnChecked = true
			switch st.role {
			case partMain:
				x.txn.bstatus = st.status
				x.txn.soft = false // it read a table
			case partNewReader:
				x.readers.add(st.shard, st.bc, len(x.gen.Pools))
			}
		}
		// Every participant ran the leads: backends the transaction uses
		// later repeat them.
		for _, l := range f.leads {
			if l.replay != "" {
				x.txn.deferred = append(x.txn.deferred, deferredStmt{sql: l.replay, setLocal: true})
			}
		}
		return
	}
	var main *fanStream
	for _, st := range streams {
		switch st.role {
		case partMain:
			main = st
		case partNewReader:
			x.readers.add(st.shard, st.bc, len(x.gen.Pools)) // ended with the others below
		}
	}
	x.failTxn(main)
}

// failTxn fails the client's transaction after a fan-out read failed:
// readers are ended; the transaction backend is aborted at this point (a
// failing statement) unless its own answer already was the error; without
// one, the deferred transaction is failed.
func (x *fanExec) failTxn(main *fanStream) {
	x.readers.end()
	switch {
	case x.bc == nil:
		if x.txn.tx == txDeferred {
			x.txn.tx = txFailed
		}
	case main != nil && main.lost != nil:
		x.sess.dropBackend(false)
		x.txn.tx, x.txn.soft, x.txn.mainWrote = txFailed, false, false
		x.txn.deferred = x.txn.deferred[:0]
	case main != nil && main.errRaw != nil:
		x.txn.bstatus = 'E'
		if main.status != 0 {
			x.txn.bstatus = main.status
		}
	default:
		// The proxy's own statement, outside the client's exchange.
		res, err := x.bc.RunSimple(context.Background(), x.gen.Config.PoolTimeout, abortSQL)
		if err != nil || len(res) != 1 {
			x.sess.dropBackend(false)
			x.txn.tx, x.txn.soft, x.txn.mainWrote = txFailed, false, false
			x.txn.deferred = x.txn.deferred[:0]
			return
		}
		x.txn.bstatus = res[0].Status
	}
}

// setFanning records the connections a fan-out is using (for cancel).
func (x *fanExec) setFanning(streams []*fanStream) {
	x.mu.Lock()
	*x.fanning = (*x.fanning)[:0]
	for _, st := range streams {
		*x.fanning = append(*x.fanning, st.bc)
	}
	x.mu.Unlock()
}
