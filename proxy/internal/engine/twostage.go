package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/pgshard/pgshard/proxy/internal/merge"
	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// A read in two stages (route.Stages; the rule is in package route's
// twostage.go), outside a transaction block — or inside one that reads
// what its stages read (stagesInBlock), the stages then outside it —
// each step on pooled connections taken and returned like a fan-out's:
//
//	describe: the client's statement is described on the default shard
//	  (Parse + Describe S): the types of all its parameters and its
//	  result columns (names, types, originating table columns)
//	stage 1: each inner statement runs with the client's parameters
//	  (declared with those types) where Route sends it — every shard,
//	  merged by internal/merge in binary, or its one shard — and its
//	  rows are collected, at most stageRowLimit rows and stageByteLimit
//	  bytes (54000 beyond)
//	stage 2: the outer statement, each inner replaced by
//	  (SELECT * FROM (VALUES ($n, ...), ...) AS pgshard_v(names)), runs on
//	  the default shard with the client's parameters and the rows as
//	  binary parameters of the rows' type OIDs; its answer streams to the
//	  client, with the columns' originating tables from the describe
//	  (after checking that its columns are the statement's: names, types,
//	  type modifiers)
//	  — or, for a spread plan (route.Stages.Spread), where Route sends
//	  the outer statement with the client's parameters: its one shard as
//	  above, or every shard as a fan-out of its own (stageFan: each
//	  shard's text, served form included, with the markers replaced,
//	  merged by internal/merge as the statement's read would be)
//	a subquery that refers to the row (the correlated plan:
//	  route.Stages.Correlated) runs in stage 2 once per row over its
//	  tables' rows: refused (54000) when those rows times the others
//	  exceed stageCorrBudget (correlatedBudget)
//	an inner statement that fails alone (42703, 42P01, 42809, 42883:
//	  failedAlone) after the statement described without error names a
//	  column of the statement around it: for 42703 the plan is learned
//	  again knowing that the column is the row's (stageInners,
//	  route.Stages.Learn) and stage 1 runs again; where nothing is
//	  learned, the plan that runs no subquery alone (route's RouteApart:
//	  its tables read first, the statement on the default shard), once;
//	  where there is none, refused as a correlated subquery
//	  (correlatedRefusal)
//	settings that lead the read in its implicit transaction (fanlead.go:
//	  SET LOCAL, set_config(..., true), a session SET of a query string)
//	  run ahead of every stage, each stage's own transaction: the
//	  describe's answers to them are the client's (its first stage),
//	  the later stages' are read and dropped (stageLeads). On one
//	  database they apply to the whole statement; so they apply to each
//	  of its stages (a statement_timeout, then, to each stage alone)
//
// The stages are separate transactions: like every read of several
// shards, it has no snapshot across them.

const (
	stageRowLimit   = route.PullLimit
	stageByteLimit  = 16 << 20
	stageMaxParams  = 65535
	stageCorrBudget = route.CorrelatedBudget
)

// errStageLimit stops a stage whose rows exceed the limits.
var errStageLimit = errors.New("the subquery's rows exceed the limit of a read in two stages")

// stageRows is one inner statement's merged rows (binary values).
type stageRows struct {
	fields []pgvalue.Field
	rows   [][][]byte
	bytes  int
}

// runTwoStage answers a read in two stages (f.dest.Merge.Stages).
func (x *fanExec) runTwoStage() error {
	f := x.f
	if f.inTxn && (len(f.leads) > 0 || !stagesInBlock(x.txn, (*x.cur).Isolation())) {
		return x.fanFail(&pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: "cannot run across shards: a read answered in two stages (a subquery merged from every shard first) must run alone in its pipeline, outside a transaction block or in a READ COMMITTED one that has written nothing yet",
			Detail:  f.dest.Why(),
			Hint:    "Run it outside the transaction block, or before its writes, in a pipeline of its own."})
	}
	sg := f.dest.Merge.Stages
	var bv pgwire.BindView
	if !f.simple {
		if err := bv.Decode(f.bind); err != nil {
			return err
		}
	}
	restore := func() {}
	if co := f.dest.Merge.CopyOut; co != nil {
		// COPY (query) TO of a read in two stages: stage 2's answer is
		// written as the COPY (copyrows.go).
		if e := copyRowsCheck(f, *x.cur); e != nil {
			return x.fanFail(e)
		}
		if co.Format == route.CopyBinary {
			bv.ResultFmts = []int16{1} // a binary COPY's tuples are binary rows
		}
		var err error
		if restore, err = copyRowsSwap(x, co); err != nil {
			return err
		}
	}
	oids, orig, fail := x.stageDescribe(sg)
	if x.leadFailed {
		// A lead failed: its error is in the client's output, and the
		// implicit transaction skips the rest (fanLeads).
		restore()
		f.failed = true
		if !f.continues {
			x.cc.out = pgwire.AppendRFQ(x.cc.out, x.txn.status())
		}
		return nil
	}
	var sets []*stageRows
	if fail == nil {
		sg, sets, fail = stageInners(x, sg, &bv, oids)
	}
	if fail == nil {
		fail = correlatedBudget(sg, sets)
	}
	answered := false // stage 2's error, if any, is in the client's output
	if fail == nil {
		fail, answered = x.stageFinal(sg, &bv, oids, orig, sets)
	}
	restore()
	if (fail != nil || answered) && !f.inTxn && x.servedRetryable(x.servedFail) {
		return x.servedRetry()
	}
	if fail != nil || answered {
		x.cc.out = append(x.cc.out, fail...)
		f.failed = true
		if f.inTxn {
			x.failTxn(nil) // the block fails as on a shard's error
		}
	} else {
		keepSessionLeads(x)
	}
	if !f.continues {
		x.cc.out = pgwire.AppendRFQ(x.cc.out, x.txn.status())
	}
	return nil
}

// stagesInBlock reports whether a read in two stages may run inside the
// transaction block t. Its stages run outside the block, each a
// transaction of its own on connections of their own, which reads what
// a statement of the block would only when the block reads committed
// data statement by statement (READ COMMITTED: the BEGIN's level, else
// the session's default def here, and the server's default checked on
// the first stage's connection, stageIsoCheckSQL) and has written
// nothing its own statements would see. What the block set for itself
// (SET LOCAL, set_config(..., true)) each stage's transaction sets
// first (blockSets). A hint binding the block to a shard keeps its
// reads there.
func stagesInBlock(t *transaction, def string) bool {
	return !t.mainWrote && !t.hintBound && !strictIsolation(t.deferred, def)
}

// blockSets reports whether the stages of x's read, inside a transaction
// block, begin their transactions as the block's (fanPlan.blockSets):
// the block set something for itself.
func blockSets(x *fanExec) bool {
	if !x.f.inTxn || len(x.txn.deferred) == 0 {
		return false
	}
	for _, d := range x.txn.deferred {
		if d.setLocal {
			return true
		}
	}
	return false
}

// stageIsoCheckSQL fails (22P02, reported as the isolation refusal)
// unless a transaction the session begins without a level reads
// committed data: the first stage of a read in two stages inside a
// transaction block checks the session's default there (its settings
// are set in its own transaction already, so transaction_isolation
// would show the server's).
const stageIsoCheckSQL = "SELECT CASE WHEN pg_catalog.current_setting('default_transaction_isolation') IN ('read committed', 'read uncommitted') THEN NULL ELSE pg_catalog.current_setting('default_transaction_isolation')::pg_catalog.int4 END /* pgshard: a read in two stages in a transaction block needs READ COMMITTED */"

// stageErr is a refusal of the proxy's own, as the client's error message.
func stageErr(code, msg, hint string) []byte {
	return pgwire.AppendError(nil, &pgwire.Error{Code: code, Message: msg, Hint: hint})
}

// stageStart runs fp, a stage, as a fan-out of its own (x.stage): each
// participant is sent its request; the stage's streams stand at their
// first row (live). A nil stage comes with the error to answer.
//
// Every stage runs the client's leads first (fp.leads, stageLeads); when
// the first stage's lead fails, x.leadFailed is set, its error is in the
// client's output and no stream is live.
func (x *fanExec) stageStart(fp *fanPlan, bv *pgwire.BindView, formats []int16) (*fanExec, []bool, []byte) {
	fp.leads, fp.blockSets = x.f.leads, blockSets(x)
	sx := x.stage(fp)
	if e := sx.fanParts(); e != nil {
		x.gen.Metrics.Refusals.WithLabelValues("shard_unavailable").Inc()
		return nil, nil, pgwire.AppendError(nil, e)
	}
	streams := sx.streams
	for _, st := range streams {
		buf, err := sx.fanRequest(st, bv, formats)
		if err != nil {
			st.failRequest(err)
			continue
		}
		if err := st.bc.Write(buf); err != nil {
			st.loseConn(err)
		}
	}
	live := make([]bool, len(streams))
	if !stageLeads(x, sx) {
		return sx, live, nil
	}
	for i, st := range streams {
		if st.lost == nil && !st.failed() {
			live[i] = st.nextRow()
		}
	}
	return sx, live, nil
}

// stageLeads reads every participant's answers to the leads of x's stage sx
// (sent ahead of its statement: fanRequest). The first stage's are the
// client's (fanLeads: the items from the first lead on, in order); it
// returns false when one failed there (x.leadFailed: the error is
// written in the lead's place). A later stage's answers are dropped; a
// lead failing there fails its participant, as the stage's error.
func stageLeads(x, sx *fanExec) bool {
	leads := sx.f.leads
	if len(leads) == 0 {
		return true
	}
	if !x.leadsRead {
		x.leadsRead = true
		first := firstLead(x.items)
		if first >= 0 && !sx.fanLeads(x.items[first:], x.f.simple) {
			x.leadFailed = true
			return false
		}
		return true
	}
	var scratch []byte
	for _, st := range sx.streams {
		for i := range leads {
			scratch = st.readLead(scratch[:0], &leads[i], x.f.simple)
		}
	}
	return true
}

// stageEnd reads the rest of every participant's answer and returns its
// connection to its pool.
func stageEnd(streams []*fanStream) {
	for _, st := range streams {
		st.drain()
		if st.lost != nil || st.bc.Broken {
			st.bc.Pool.Discard(st.bc)
		} else {
			st.bc.Pool.Release(st.bc)
		}
	}
}

// stageDescribe describes the client's statement (a COPY's query) on the
// default shard: the types of its parameters (the client's where
// declared) and its result columns.
func (x *fanExec) stageDescribe(sg *route.Stages) ([]uint32, []pgvalue.Field, []byte) {
	f := x.f
	var declared []uint32
	if !f.simple {
		declared = f.vs.oids
	}
	raw := pgwire.AppendParseMsg(nil, "", sg.Query(), declared)
	raw = pgwire.AppendDescribe(raw, 'S', "")
	raw = pgwire.AppendEmpty(raw, 'S')
	fp := &fanPlan{st: f.st, dest: f.dest, only: x.gen.DefaultShard + 1, raw: raw, isoCheck: f.inTxn}
	sx, _, fail := x.stageStart(fp, nil, nil)
	if fail != nil {
		return nil, nil, fail
	}
	streams := sx.streams
	defer stageEnd(streams)
	if x.leadFailed {
		return nil, nil, nil
	}
	st := streams[0]
	st.drain()
	if st.failed() {
		return nil, nil, x.gen.fanResultError(streams)
	}
	fields, err := pgvalue.ParseRowDesc(st.rowDesc)
	oids, err2 := parseParamDesc(st.paramDesc)
	if err != nil || err2 != nil || len(fields) == 0 {
		return nil, nil, stageErr(pgwire.CodeProtocolViolation, "pgshard: the default shard described the statement unexpectedly", "")
	}
	return oids, fields, nil
}

// parseParamDesc decodes a ParameterDescription (nil: no parameters).
func parseParamDesc(msg []byte) ([]uint32, error) {
	if msg == nil {
		return nil, nil
	}
	b := pgwire.Body(msg)
	if len(b) < 2 || len(b) != 2+4*int(binary.BigEndian.Uint16(b)) {
		return nil, pgwire.ProtoErrorf("malformed ParameterDescription")
	}
	oids := make([]uint32, binary.BigEndian.Uint16(b))
	for i := range oids {
		oids[i] = binary.BigEndian.Uint32(b[2+4*i:])
	}
	return oids, nil
}

// stageInners runs stage 1: each inner statement of sg (stageCollect).
// When one fails for a column its subquery does not have (42703), sg is
// planned again knowing it (route.Stages.Learn: the column is the
// statement's row's) and stage 1 runs again — as many times as Learn
// finds a new plan, a few at most. A learned plan that routes the
// statement as it is (no stage 1: the column qualified ties the
// subquery to the row) may be a read in two stages itself (a subquery
// tied to the row by a column that is no sharding key, decorrelated):
// its stages are run then, once; where Route refuses it, its
// alternative (Stages.Alt) is run. It returns the plan whose stage 1 ran.
func stageInners(x *fanExec, sg *route.Stages, bv *pgwire.BindView, oids []uint32) (*route.Stages, []*stageRows, []byte) {
	var first []byte // the refusal of the client's own subquery
	nested, apart := false, sg.Apart()
	for {
		var sets []*stageRows
		var fail []byte
		missing, failed, alone := "", -1, false
		for i, in := range sg.Inner {
			var rs *stageRows
			if rs, fail, missing, alone = x.stageCollect(in, bv, oids); fail != nil {
				failed = i
				break
			}
			sets = append(sets, rs)
		}
		if first == nil {
			first = fail
		}
		if fail == nil || !alone {
			return sg, sets, fail
		}
		next := sg.Learn(failed, missing)
		if next == nil {
			if apart {
				return sg, sets, first
			}
			// Nothing learned: the plan that runs no subquery alone (its
			// tables read first, the statement on the default shard),
			// once.
			apart = true
			d := x.gen.Config.Analyzer.RouteApart(x.f.st, bv.Params, bv.Formats, oids)
			if d.Kind != route.DestAll || d.Merge == nil || d.Merge.Stages == nil {
				return sg, sets, first
			}
			sg = d.Merge.Stages
			continue
		}
		sg = next
		if len(sg.Inner) == 0 && !nested {
			d := x.gen.Config.Analyzer.Route(sg.OuterStatement(), bv.Params, bv.Formats, oids)
			switch {
			case d.Kind == route.DestAll && d.Merge != nil && d.Merge.Stages != nil:
				sg, nested = d.Merge.Stages, true
			case d.Kind == route.DestRefuse && sg.Alt() != nil:
				sg = sg.Alt() // the plan that decorrelates the subquery instead
			}
		}
	}
}

// correlatedBudget refuses a plan whose stage 2 would run subqueries
// that refer to the row (route.Stages.Correlated) over more rows than
// stageCorrBudget allows: Postgres runs such a subquery once per row
// of the statement, and the rows stage 1 read for it are a VALUES list
// there, with no index, so it reads them all each time. The rows of
// the statement are estimated by the other stage-1 rows, + 1: rows it
// reads elsewhere (an unsharded table, a VALUES list of its own, a
// join that multiplies them) are not counted — an estimate that stops
// the reads that would surely be slow, not a proof of the others.
func correlatedBudget(sg *route.Stages, sets []*stageRows) []byte {
	var outer, corr int64
	for i, rs := range sets {
		if sg.Correlated(i) {
			corr += int64(len(rs.rows))
		} else {
			outer += int64(len(rs.rows))
		}
	}
	if cost := (outer + 1) * corr; cost > stageCorrBudget {
		return stageErr(pgwire.CodeProgramLimitExceeded,
			fmt.Sprintf("cannot run across shards: a subquery that refers to the row around it would read its %d rows once for each of %d rows on the default shard (%d rows compared, at most %d)", corr, outer, cost, stageCorrBudget),
			"Tie the subquery to the row by the sharding key, narrow its tables and the statement's with WHERE terms of their own, or write it as a join with what it computes grouped by the column it is tied to (LEFT JOIN (SELECT target_id, count(*) AS n FROM outbox GROUP BY 1) o ON o.target_id = e.id).")
	}
	return nil
}

// stageCollect runs one inner statement where Route sends it and
// collects its merged rows in binary. When it fails alone for a column
// or relation it does not have (failedAlone: it names the row's), alone
// is set, and for a column missing is the shard's 42703 message.
func (x *fanExec) stageCollect(in *route.Statement, bv *pgwire.BindView, oids []uint32) (rows *stageRows, fail []byte, missing string, alone bool) {
	f := x.f
	d := x.gen.Config.Analyzer.Route(in, bv.Params, bv.Formats, oids)
	m, only := d.Merge, 0
	switch {
	case d.Kind == route.DestShard:
		only = d.Shard + 1
	case d.Kind == route.DestAny:
		only = x.gen.DefaultShard + 1
	case d.Kind != route.DestAll || m == nil || m.Stages != nil:
		return nil, stageErr(pgwire.CodeFeatureNotSupported, "cannot run across shards: a subquery of a read in two stages cannot run alone ("+d.Why()+")", ""), "", false
	}
	if only > 0 {
		m = singleMerge
	}
	fp := &fanPlan{simple: f.simple, st: in, dest: d, vs: &vstmt{st: in, oids: oids}, bind: f.bind, only: only}
	sx, live, fail := x.stageStart(fp, bv, merge.ShardFormats(m, []int16{1}))
	if fail != nil {
		return nil, fail, "", false
	}
	streams := sx.streams
	defer stageEnd(streams)
	if first := firstFailed(streams); first != nil {
		first.drain()
		if c := pgwire.ErrorField(partError(first), 'C'); failedAlone(c) {
			missing := ""
			if c == "42703" {
				missing = pgwire.ErrorField(partError(first), 'M')
			}
			return nil, correlatedRefusal(in.SQL), missing, true
		}
		x.servedFail = partError(first) // a read run again after PS002 (servedretry.go)
		return nil, sx.stageError(x.f.simple), "", false
	}
	var out []byte
	rs := &stageRows{}
	r := &merge.Run{Plan: m, Sources: make([]merge.Source, len(streams)), Live: live, ClientFormats: []int16{1},
		Describe: true, Bytewise: only == 0 && x.gen.textBytewise(x.ctx), Times: x.times, GroupLimit: x.gen.Config.MergeGroupLimit,
		Params: bv.Params, Formats: bv.Formats, OIDs: oids, Out: &out, Flush: func() error { return rs.take(&out) }}
	for i, st := range streams {
		r.Sources[i] = st
		if r.RawDesc == nil {
			r.RawDesc = st.rowDesc
		}
	}
	e := r.Answer()
	if e == nil {
		if err := rs.take(&out); err != nil {
			e, r.IOErr = merge.ErrStop, err
		}
	}
	limit := e == merge.ErrStop && r.IOErr == errStageLimit
	for _, st := range streams {
		if limit {
			st.loseConn(errStageLimit) // rows beyond the limit are not read
		}
		st.drain()
	}
	switch {
	case limit:
		return nil, stageErr(pgwire.CodeProgramLimitExceeded,
			fmt.Sprintf("cannot run across shards: a subquery of a read in two stages returned more than %d rows or %d MiB (%s)", stageRowLimit, stageByteLimit>>20, in.SQL),
			"Narrow the subquery (a key, a filter, a LIMIT), or run it as a statement of its own."), "", false
	case x.gen.fanResultError(streams) != nil:
		return nil, sx.stageError(x.f.simple), "", false
	case e != nil:
		return nil, pgwire.AppendError(nil, e), "", false
	}
	return rs, nil, "", false
}

// failedAlone reports whether SQLSTATE c, an inner statement's error
// where the whole statement was described without one, says that the
// subquery names what only the statement around it has: a column
// (42703), a relation (42P01), or a column a learned plan qualified by
// the subquery's own relation, which Postgres then reads as a function
// of its row (b.rank as rank(b): 42809 for an aggregate, 42883 for no
// such function).
func failedAlone(c string) bool {
	return c == "42703" || c == "42P01" || c == "42809" || c == "42883"
}

// correlatedRefusal answers a read in two stages whose subquery sql
// failed alone for a column or relation it does not have (42703, 42P01)
// after the whole statement was described without error: it names a
// column of the statement around it without a qualifier — a correlated
// subquery, which runs only where its rows and the statement's are on
// one shard.
func correlatedRefusal(sql string) []byte {
	return pgwire.AppendError(nil, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: "cannot run across shards: a subquery refers to the rows of the statement around it (a correlated subquery), and they are not joined on their keys",
		Detail:  "The subquery " + sql + " does not run alone: it names a column of the statement around it. Each shard would see only its own rows of both, so a per-shard answer would be wrong.",
		Hint:    "Join the subquery's table to the statement's on their key (b.key = a.key), or write the subquery so that it does not depend on the statement's row."})
}

// stageError is the error of a failed stage, after a BindComplete when a
// shard failed after binding the client's parameters (as one database
// fails at Execute) and the client's statement is extended (simple is
// the client's protocol: a Query is answered without BindComplete,
// whatever protocol the stage itself ran in).
func (x *fanExec) stageError(simple bool) []byte {
	streams := x.streams
	var out []byte
	for _, st := range streams {
		if !simple && st.failed() && st.bound && st.lost == nil {
			out = pgwire.AppendEmpty(out, '2')
			break
		}
	}
	return append(out, x.gen.fanResultError(streams)...)
}

// take moves the merge's answer in out (RowDescription, DataRows) into rs.
func (rs *stageRows) take(out *[]byte) error {
	for msg := range pgwire.Msgs(*out) {
		switch msg[0] {
		case 'T':
			fs, err := pgvalue.ParseRowDesc(msg)
			if err != nil {
				return err
			}
			rs.fields = fs
		case 'D':
			cols, err := pgwire.DataRowCols(nil, msg)
			if err != nil {
				return err
			}
			row := make([][]byte, len(cols))
			for i, c := range cols {
				if c != nil {
					row[i] = append([]byte{}, c...)
				}
			}
			rs.rows = append(rs.rows, row)
			rs.bytes += len(msg)
		}
	}
	*out = (*out)[:0]
	if len(rs.rows) > stageRowLimit || rs.bytes > stageByteLimit {
		return errStageLimit
	}
	return nil
}

// stageValues is what stands for each inner statement's rows in stage
// 2's statement (repl[i] for StageMarker(i)): a VALUES list of parameters
// numbered after the client's; with the parameters' types and values.
func stageValues(oids []uint32, sets []*stageRows) ([]string, []uint32, [][]byte, []byte) {
	types := append([]uint32(nil), oids...)
	var vals [][]byte
	var repl []string
	for _, rs := range sets {
		if len(rs.fields) == 0 {
			return nil, nil, nil, stageErr(pgwire.CodeFeatureNotSupported, "cannot run across shards: a subquery of a read in two stages returns no columns", "")
		}
		names, proj, fail := stageColumns(rs.fields)
		if fail != nil {
			return nil, nil, nil, fail
		}
		rows, where := rs.rows, ""
		if len(rows) == 0 {
			rows, where = [][][]byte{make([][]byte, len(rs.fields))}, " WHERE false" // a typed empty relation
		}
		var b strings.Builder
		b.WriteString("SELECT " + proj + " FROM (VALUES ")
		for k, row := range rows {
			if k > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('(')
			for c, v := range row {
				if c > 0 {
					b.WriteString(", ")
				}
				types, vals = append(types, rs.fields[c].OID), append(vals, v)
				b.WriteString("$" + strconv.Itoa(len(types)))
			}
			b.WriteByte(')')
		}
		b.WriteString(") AS pgshard_v(" + names + ")" + where)
		repl = append(repl, b.String())
	}
	if len(types) > stageMaxParams {
		return nil, nil, nil, stageErr(pgwire.CodeProgramLimitExceeded,
			fmt.Sprintf("cannot run across shards: the subqueries of a read in two stages return more than %d values in all", stageMaxParams-len(oids)),
			"Narrow the subqueries (a key, a filter, a LIMIT), or run them as statements of their own.")
	}
	return repl, types, vals, nil
}

// stageColumns are the column names of an inner statement's VALUES list
// (pgshard_v(names)) and the select list over it (proj): * when no
// column has a type modifier; else each column by its position, those
// with a modifier cast back to it (varchar(7), numeric(10,2):
// pgvalue.TypeName; a value of that column is unchanged by the cast),
// named as the inner statement names it — so stage 2 sees its rows as
// the subquery's, modifiers included. A modifier TypeName cannot write
// is refused (fail).
func stageColumns(fields []pgvalue.Field) (names, proj string, fail []byte) {
	quote := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	var named, pos, ps []string
	cast := false
	for i, f := range fields {
		col := "c" + strconv.Itoa(i+1)
		named, pos = append(named, quote(f.Name)), append(pos, col)
		if f.Typmod != -1 {
			t, ok := pgvalue.TypeName(f.OID, f.Typmod)
			if !ok {
				return "", "", stageErr(pgwire.CodeFeatureNotSupported,
					fmt.Sprintf("cannot run across shards: column %q of a subquery of a read in two stages has a type modifier pgshard cannot restore, which its rows would lose", f.Name),
					"Cast the column to its type without a modifier (x::interval) in the subquery.")
			}
			col, cast = col+"::"+t, true
		}
		ps = append(ps, col+" AS "+quote(f.Name))
	}
	if !cast {
		return strings.Join(named, ", "), "*", nil
	}
	return strings.Join(pos, ", "), strings.Join(ps, ", "), nil
}

// stageText is sql, a text of stage 2's statement (as written, or the
// form a shard runs), with each marker replaced by repl's — every time
// it occurs: a merge's text may repeat an expression (an ORDER BY term as
// a hidden column), and the parameters it names may be read twice; ""
// when a marker is not in it.
func stageText(sql string, repl []string) string {
	for i, r := range repl {
		mk := route.StageMarker(i)
		if !strings.Contains(sql, mk) {
			return ""
		}
		sql = strings.ReplaceAll(sql, mk, r)
	}
	return sql
}

// stageFinal runs stage 2 — on the default shard, or where Route sends
// a spread plan's outer statement — and streams its answer to the
// client. It returns the error to answer instead, if any; answered
// reports that stage 2 failed with its error already in the client's
// output (a merge of every shard's answers: stageFan).
func (x *fanExec) stageFinal(sg *route.Stages, bv *pgwire.BindView, oids []uint32, orig []pgvalue.Field, sets []*stageRows) (fail []byte, answered bool) {
	f := x.f
	if len(bv.Params) != len(oids) {
		return stageErr(pgwire.CodeProtocolViolation, fmt.Sprintf("bind message supplies %d parameters, but prepared statement \"\" requires %d", len(bv.Params), len(oids)), ""), false
	}
	repl, types, vals, fail := stageValues(oids, sets)
	if fail != nil {
		return fail, false
	}
	only := x.gen.DefaultShard + 1
	if sg.Spread {
		d := x.gen.Config.Analyzer.Route(sg.OuterStatement(), bv.Params, bv.Formats, oids)
		switch {
		case d.Kind == route.DestShard:
			only = d.Shard + 1
		case d.Kind == route.DestAll && d.Merge != nil && d.Merge.Stages == nil:
			return stageFan(x, sg.OuterStatement(), d, bv, repl, types, vals, orig)
		case d.Kind != route.DestAny:
			return stageErr(pgwire.CodeFeatureNotSupported, "cannot run across shards: the statement over its subqueries' rows cannot run ("+d.Why()+")", ""), false
		}
	}
	sql := stageText(sg.Outer, repl)
	raw := pgwire.AppendParseMsg(nil, "", sql, types)
	raw = appendStageBind(raw, bv, vals)
	raw = pgwire.AppendDescribe(raw, 'P', "")
	raw = pgwire.AppendExecute(raw, "", 0)
	raw = pgwire.AppendEmpty(raw, 'S')
	fp := &fanPlan{st: f.st, dest: f.dest, only: only, raw: raw}
	sx, live, fail := x.stageStart(fp, nil, nil)
	if fail != nil {
		return fail, false
	}
	streams := sx.streams
	defer stageEnd(streams)
	st := streams[0]
	if st.failed() {
		st.drain()
		x.servedFail = partError(st)
		return sx.stageError(x.f.simple), false
	}
	fs, err := pgvalue.ParseRowDesc(st.rowDesc)
	if err != nil || !sameColumns(fs, orig) {
		st.drain()
		return stageColumnsRefusal(), false
	}
	if !f.simple {
		x.cc.out = pgwire.AppendEmpty(x.cc.out, '2') // BindComplete
	}
	if f.simple || f.describe {
		for i := range fs {
			fs[i].Table, fs[i].Attnum = orig[i].Table, orig[i].Attnum
		}
		x.cc.out = pgvalue.AppendRowDesc(x.cc.out, fs)
	}
	for ok := live[0]; ok; ok = st.nextRow() {
		x.cc.out = append(x.cc.out, st.row...)
		if len(x.cc.out) > 64*1024 {
			if err := x.cc.flush(); err != nil {
				return nil, false
			}
		}
	}
	st.drain()
	if st.failed() {
		return x.gen.fanResultError(streams), false
	}
	if e := x.capt.tooBig(x.cc); e != nil {
		return pgwire.AppendError(nil, e), false // fetched in parts, beyond the bound (cursor.go)
	}
	for _, n := range st.notices {
		x.cc.out = append(x.cc.out, n...)
	}
	x.cc.out = pgwire.AppendCommandComplete(x.cc.out, string(st.tag))
	return nil, false
}

// stageFan runs a spread plan's stage 2 that reads every shard: outer,
// with the subqueries' rows as parameters (repl, types, vals:
// stageValues), as a fan-out of its own whose merge answers the client
// as the statement's would — under the columns it describes (orig),
// checked as on the default shard (fanPlan.want). Its participants are connections of its own
// (outside a transaction block, as every stage).
func stageFan(x *fanExec, outer *route.Statement, d route.Dest, bv *pgwire.BindView, repl []string, types []uint32, vals [][]byte, orig []pgvalue.Field) ([]byte, bool) {
	f := x.f
	fp := &fanPlan{simple: f.simple, st: outer, dest: d, vs: &vstmt{st: outer, oids: types}, describe: f.describe,
		continues: true, repl: repl, want: orig, leads: f.leads, blockSets: blockSets(x)}
	fp.bind = appendStageBind(nil, bv, vals)
	var sbv pgwire.BindView
	if err := sbv.Decode(fp.bind); err != nil {
		return stageErr(pgwire.CodeProgramLimitExceeded, "cannot run across shards: the subqueries' rows do not fit one Bind message", ""), false
	}
	sx := x.stage(fp)
	if e := sx.fanParts(); e != nil {
		x.gen.Metrics.Refusals.WithLabelValues("shard_unavailable").Inc()
		return pgwire.AppendError(nil, e), false
	}
	sx.setFanning(sx.streams)
	defer sx.setFanning(nil)
	formats := merge.ShardFormats(d.Merge, sbv.ResultFmts)
	for _, st := range sx.streams {
		buf, err := sx.fanRequest(st, &sbv, formats)
		if err != nil {
			st.failRequest(err)
			continue
		}
		if err := st.bc.Write(buf); err != nil {
			st.loseConn(err)
		}
	}
	stageLeads(x, sx) // a later stage: the answers are dropped
	bindAt := -1
	if !f.simple {
		bindAt = len(x.cc.out)
		x.cc.out = pgwire.AppendEmpty(x.cc.out, '2') // BindComplete
	}
	err := sx.fanMerge(d.Merge, &sbv, x.gen.textBytewise(x.ctx), bindAt)
	x.servedFail = partError(firstFailed(sx.streams))
	sx.fanEnd()
	if err != nil {
		return nil, false // the client's connection failed
	}
	return nil, fp.failed
}

// stageColumnsRefusal refuses a stage 2 whose columns are not the ones
// the client's statement describes (sameColumns).
func stageColumnsRefusal() []byte {
	return stageErr(pgwire.CodeFeatureNotSupported, "cannot run across shards: the read in two stages would not describe its columns as the statement does", "Run the subqueries as statements of their own.")
}

// sameColumns reports whether stage 2's columns are the statement's:
// names, types, type modifiers.
func sameColumns(a, b []pgvalue.Field) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].OID != b[i].OID || a[i].Typmod != b[i].Typmod || a[i].Typlen != b[i].Typlen {
			return false
		}
	}
	return true
}

// appendStageBind appends stage 2's Bind: the client's parameters in
// their formats, then vals in binary, with the client's result formats.
func appendStageBind(dst []byte, bv *pgwire.BindView, vals [][]byte) []byte {
	dst, sp := pgwire.BeginMsg(dst, 'B')
	dst = pgwire.AppendCStr(dst, "")
	dst = pgwire.AppendCStr(dst, "")
	n := len(bv.Params) + len(vals)
	dst = pgwire.AppendU16(dst, uint16(n))
	for i := range bv.Params {
		dst = pgwire.AppendU16(dst, uint16(pgwire.FormatAt(bv.Formats, i)))
	}
	for range vals {
		dst = pgwire.AppendU16(dst, 1)
	}
	dst = pgwire.AppendU16(dst, uint16(n))
	for _, v := range append(append([][]byte(nil), bv.Params...), vals...) {
		if v == nil {
			dst = pgwire.AppendU32(dst, 0xFFFFFFFF)
			continue
		}
		dst = pgwire.AppendU32(dst, uint32(len(v)))
		dst = append(dst, v...)
	}
	dst = pgwire.AppendU16(dst, uint16(len(bv.ResultFmts)))
	for _, fm := range bv.ResultFmts {
		dst = pgwire.AppendU16(dst, uint16(fm))
	}
	return pgwire.FinishMsg(dst, sp)
}
