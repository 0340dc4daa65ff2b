package route

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// cursorOptHold is CURSOR_OPT_HOLD (parsenodes.h): DECLARE ... WITH HOLD;
// cursorOptBinary CURSOR_OPT_BINARY: DECLARE BINARY.
const (
	cursorOptHold   = 0x0020
	cursorOptBinary = 0x0001
)

// fetchAll is FETCH_ALL (parsenodes.h): LONG_MAX rows.
const fetchAll = math.MaxInt64

// cursorOf is the Cursor of a FETCH, MOVE or CLOSE node.
func cursorOf(node *pg.Node) *Cursor {
	if cp := node.GetClosePortalStmt(); cp != nil {
		return &Cursor{Verb: CursorClose, Name: cp.Portalname}
	}
	fs := node.GetFetchStmt()
	cur := &Cursor{Verb: CursorFetch, Name: fs.Portalname, Count: fs.HowMany}
	if fs.Ismove {
		cur.Verb = CursorMove
	}
	cur.Forward = fs.Direction == pg.FetchDirection_FETCH_FORWARD && fs.HowMany > 0
	if fs.HowMany == fetchAll {
		cur.Count = -1
	}
	return cur
}

// analyzeStmt classifies one parsed statement and builds its plan. text is
// the statement's own text (hints are read from its comments).
func (s *statements) analyzeStmt(text string, node *pg.Node) *Statement {
	return s.analyzeStmtLit(text, node, nil)
}

// analyzeStmtLit is analyzeStmt for a normalized text when lc is set: the
// $n that lc names are literal slots.
func (s *statements) analyzeStmtLit(text string, node *pg.Node, lc *litCtx) *Statement {
	return s.analyzeWith(text, node, lc, false)
}

// analyzeWith is analyzeStmtLit; own analyzes the statement as a server
// session of its own runs it (Table.OnOwnSession): the session state it
// keeps is that session's, so what it reads and writes routes it.
func (s *statements) analyzeWith(text string, node *pg.Node, lc *litCtx, own bool) *Statement {
	st := &Statement{SQL: text, Kind: KindOther}
	lr := lex(text, false, 0)
	st.NumParams = lr.maxParam
	if lc != nil {
		st.NumParams = maxParamUpTo(text, lc.base)
		if !literalStatement(node) && lc.has(node) {
			lc.taintf("literals in a statement other than SELECT/INSERT/UPDATE/DELETE/CALL")
		}
	}
	h, hintErr := parseHints(lr.comments)

	a := newAnalyzer(s.sc, s.pl.m)
	a.rd.lit = lc
	c := &classifying{s: s, st: st, a: a, p: &plan{anyReason: "touches no sharded table"}, own: own}
	query := c.classify(node)
	c.noteDDL(node)
	c.noteFacts(text, node)
	if query {
		c.noteReadOnly(node)
	}
	if st.Kind == KindDDL {
		st.ReadOnly = false
	}
	if st.Kind == KindOther || st.Kind == KindUnsupported {
		st.Releases = releases(node)
	}
	if st.Terminate != nil && st.Terminate.Own && (h.present() || hintErr != nil) {
		// Routed to a shard by hand: that shard's backend answers.
		st.Terminate = nil
	}
	c.finish(h, hintErr)
	return st
}

// classifying is one statement being classified: what it is (st), what
// its queries read (a), and what its plan starts from (p).
type classifying struct {
	s  *statements
	st *Statement
	a  *analyzer
	p  *plan
	// own: the statement runs on a server session of its own (analyzeWith):
	// session state is no reason to refuse it.
	own bool
}

// unsupported makes the statement KindUnsupported: it keeps session
// state (named by state) that a transaction pooler cannot keep.
func (c *classifying) unsupported(state, why string) {
	c.st.Kind, c.st.Reason, c.st.SessionState = KindUnsupported, why, state
}

// classify decides the statement's kind from its parse tree and walks the
// queries it holds. It reports whether the statement is a query whose
// reads, writes and keys decide its route.
func (c *classifying) classify(node *pg.Node) (query bool) {
	st, a, p := c.st, c.a, c.p
	switch x := node.GetNode().(type) {
	case *pg.Node_SelectStmt, *pg.Node_InsertStmt, *pg.Node_UpdateStmt, *pg.Node_DeleteStmt, *pg.Node_MergeStmt:
		a.query(node, nil, true)
		return true
	case *pg.Node_TransactionStmt:
		c.transaction(x.TransactionStmt)
	case *pg.Node_VariableSetStmt, *pg.Node_VariableShowStmt, *pg.Node_DeallocateStmt, *pg.Node_DiscardStmt,
		*pg.Node_PrepareStmt, *pg.Node_ExecuteStmt:
		c.session(node)
	case *pg.Node_ListenStmt:
		c.unsupported("listen", "LISTEN is not supported through pgshard: notifications are delivered to a server session, which a transaction pooler shares between clients")
	case *pg.Node_UnlistenStmt:
		st.ReadOnly = true
		p.anyReason = "UNLISTEN: nothing to undo (LISTEN is not supported): any shard"
	case *pg.Node_NotifyStmt:
		p.anyReason = "NOTIFY is delivered at commit to listeners on the shard the transaction runs on"
	case *pg.Node_DeclareCursorStmt:
		return c.declareCursor(x.DeclareCursorStmt)
	case *pg.Node_ClosePortalStmt, *pg.Node_FetchStmt:
		st.ReadOnly = true
		p.anyReason = "a cursor lives on the shard of its transaction"
		st.Cursor = cursorOf(node)
	case *pg.Node_ExplainStmt:
		c.explain(x.ExplainStmt)
		return true
	case *pg.Node_CopyStmt:
		c.copy(x.CopyStmt)
		return true
	case *pg.Node_CallStmt:
		c.call(x.CallStmt)
		return true
	case *pg.Node_DoStmt:
		a.setWrite("DO")
		p.defaultWhy = "a DO block (pgshard cannot see which keys the code touches)"
		return true
	case *pg.Node_LockStmt:
		c.lock(x.LockStmt)
		return true
	case *pg.Node_CreateStmt, *pg.Node_CreateTableAsStmt, *pg.Node_ViewStmt, *pg.Node_CreateSeqStmt:
		return c.create(node)
	case *pg.Node_LoadStmt:
		c.unsupported("load", "LOAD loads a library into one server session")
	case *pg.Node_ConstraintsSetStmt:
		st.Kind, st.SetName, st.ReadOnly = KindSetLocal, "constraints", true
	default:
		// Any other utility statement (CREATE/ALTER/DROP/GRANT/TRUNCATE/
		// VACUUM/ANALYZE/COMMENT/REINDEX/CHECKPOINT/...) has no key: it is
		// applied to every shard.
		st.Kind, p.ddl = KindDDL, true
	}
	return false
}

// transaction classifies BEGIN, COMMIT, ROLLBACK, savepoints and (refused)
// two-phase commit.
func (c *classifying) transaction(t *pg.TransactionStmt) {
	st := c.st
	st.ReadOnly = true
	switch t.Kind {
	case pg.TransactionStmtKind_TRANS_STMT_BEGIN, pg.TransactionStmtKind_TRANS_STMT_START:
		st.Kind = KindBegin
		st.Isolation = isolationOf(t.Options)
	case pg.TransactionStmtKind_TRANS_STMT_COMMIT:
		st.Kind, st.Chain = KindCommit, t.Chain
	case pg.TransactionStmtKind_TRANS_STMT_ROLLBACK:
		st.Kind, st.Chain = KindRollback, t.Chain
	case pg.TransactionStmtKind_TRANS_STMT_SAVEPOINT:
		st.Kind, st.SavepointVerb, st.SavepointName = KindSavepoint, "SAVEPOINT", t.SavepointName
	case pg.TransactionStmtKind_TRANS_STMT_RELEASE:
		st.Kind, st.SavepointVerb, st.SavepointName = KindSavepoint, "RELEASE", t.SavepointName
	case pg.TransactionStmtKind_TRANS_STMT_ROLLBACK_TO:
		st.Kind, st.SavepointVerb, st.SavepointName = KindSavepoint, "ROLLBACK", t.SavepointName
	default:
		c.unsupported("two-phase", "two-phase commit (PREPARE TRANSACTION / COMMIT PREPARED / ROLLBACK PREPARED) is not supported through pgshard: the prepared transaction must be finished on the shard that holds it")
	}
}

// session classifies the statements that read or change a session's
// state, which the engine keeps per client: SET, SHOW, DEALLOCATE,
// DISCARD, PREPARE and EXECUTE.
func (c *classifying) session(node *pg.Node) {
	st := c.st
	switch x := node.GetNode().(type) {
	case *pg.Node_VariableSetStmt:
		c.set(x.VariableSetStmt)
	case *pg.Node_VariableShowStmt:
		st.Kind, st.SetName, st.ReadOnly = KindShow, strings.ToLower(x.VariableShowStmt.Name), true
	case *pg.Node_DeallocateStmt:
		st.Kind, st.ReadOnly = KindDeallocate, true
		if !x.DeallocateStmt.Isall {
			st.PrepareName = x.DeallocateStmt.Name
		}
	case *pg.Node_DiscardStmt:
		st.Kind, st.ReadOnly = KindDiscard, true
		st.SetName = map[pg.DiscardMode]string{pg.DiscardMode_DISCARD_ALL: "all", pg.DiscardMode_DISCARD_PLANS: "plans",
			pg.DiscardMode_DISCARD_SEQUENCES: "sequences", pg.DiscardMode_DISCARD_TEMP: "temp"}[x.DiscardStmt.Target]
	case *pg.Node_PrepareStmt:
		ps := x.PrepareStmt
		st.Kind, st.PrepareName, st.ReadOnly = KindPrepare, ps.Name, true
		for _, t := range ps.Argtypes {
			st.PrepareTypes = append(st.PrepareTypes, typeNameOID(t.GetTypeName()))
		}
		inner := "SELECT 1"
		if out, err := deparse(ps.Query); err == nil {
			inner = out
		}
		st.Prepared = c.s.analyzeStmt(inner, ps.Query)
	case *pg.Node_ExecuteStmt:
		es := x.ExecuteStmt
		st.Kind, st.PrepareName = KindExecute, es.Name
		args := make([][]byte, 0, len(es.Params))
		for i, prm := range es.Params {
			v, ok := constText(prm)
			if !ok {
				st.Reason = fmt.Sprintf("EXECUTE argument %d is not a constant (%s): pgshard cannot route it", i+1, exprText(prm))
				args = nil
				break
			}
			args = append(args, v)
		}
		st.ExecuteArgs = args
	}
}

// declareCursor: a cursor WITH HOLD is session state (refused); another
// is its query, never merged across shards.
func (c *classifying) declareCursor(dc *pg.DeclareCursorStmt) (query bool) {
	inner := "SELECT 1"
	if out, err := deparse(dc.Query); err == nil {
		inner = out
	}
	c.st.Cursor = &Cursor{Verb: CursorDeclare, Name: dc.Portalname, Query: c.s.analyzeStmt(inner, dc.Query),
		Binary: dc.Options&cursorOptBinary != 0, Hold: dc.Options&cursorOptHold != 0}
	if dc.Options&cursorOptHold != 0 && !c.own {
		c.unsupported("hold-cursor", "DECLARE ... WITH HOLD creates a cursor that outlives the transaction on one server session; declare it WITHOUT HOLD inside a transaction")
		return false
	}
	c.a.query(dc.Query, nil, false)
	c.a.top = nil // a cursor cannot be merged across shards
	c.p.mergeWhy = "a cursor over a key-less query would need one cursor per shard"
	return true
}

// explain: EXPLAIN routes as its query does; EXPLAIN ANALYZE runs it.
func (c *classifying) explain(ex *pg.ExplainStmt) {
	c.p.explain = true
	for _, o := range ex.Options {
		if d := o.GetDefElem(); d != nil && d.Defname == "analyze" && (d.Arg == nil || isTrue(d.Arg)) {
			c.p.analyze = true
		}
	}
	c.a.query(ex.Query, nil, false)
}

// copy: COPY of a keyed query runs on its shard. COPY ... TO STDOUT of a
// sharded table, or of a key-less query whose rows merge as they come,
// reads every shard: the answer is each shard's COPY output in shard
// order (copyPlan). COPY FROM into a sharded table is refused; of another
// table it runs where the table lives; server files and programs are
// refused.
func (c *classifying) copy(cp *pg.CopyStmt) {
	a := c.a
	switch {
	case cp.Query != nil:
		a.query(cp.Query, nil, true)
		c.p.copyOut = &CopyOut{Header: copyHeader(cp.Options)}
		a.copyQuery, a.copyOpts = cp.Query, cp.Options
	case cp.Relation != nil:
		a.addTable(cp.Relation.Relname)
		if t := c.s.sc.tables[cp.Relation.Relname]; t != nil {
			if cp.IsFrom {
				a.setWrite("COPY into " + cp.Relation.Relname)
				a.refuse("0A000", "COPY "+cp.Relation.Relname+" FROM would need each row routed by its key",
					"Use INSERT (one shard per statement), or route the COPY to one shard with /* pgshard:shard=NAME */.")
			} else {
				// Analysed as the read it is: SELECT * FROM the table.
				a.query(selectAll(cp.Relation), nil, true)
				c.p.copyOut = &CopyOut{Header: copyHeader(cp.Options)}
				if len(cp.Attlist) > 0 && copyBinary(cp.Options) {
					// Written by pgshard from the rows of SELECT cols
					// (copyPlan): a binary value's type numbers told.
					a.copyQuery, a.copyOpts = selectCols(cp.Relation, cp.Attlist), cp.Options
				}
			}
		} else if cp.IsFrom {
			a.setWrite("COPY into " + cp.Relation.Relname)
		}
	}
	if cp.Filename != "" || cp.IsProgram {
		a.refuse("0A000", "COPY to or from a server file or program is not routed by pgshard", "Use COPY ... STDIN/STDOUT.")
	}
}

// selectCols is SELECT cols FROM rel (SELECT * without cols).
func selectCols(rel *pg.RangeVar, cols []*pg.Node) *pg.Node {
	q := selectAll(rel)
	if len(cols) == 0 {
		return q
	}
	sel := q.GetSelectStmt()
	sel.TargetList = nil
	for _, c := range cols {
		col := &pg.Node{Node: &pg.Node_ColumnRef{ColumnRef: &pg.ColumnRef{Fields: []*pg.Node{c}}}}
		sel.TargetList = append(sel.TargetList, &pg.Node{Node: &pg.Node_ResTarget{ResTarget: &pg.ResTarget{Val: col}}})
	}
	return q
}

// copyBinary reports whether a COPY's options name the binary format.
func copyBinary(opts []*pg.Node) bool {
	for _, o := range opts {
		if d := o.GetDefElem(); d != nil && d.Defname == "format" && strings.EqualFold(d.Arg.GetString_().GetSval(), "binary") {
			return true
		}
	}
	return false
}

// selectAll is SELECT * FROM rel.
func selectAll(rel *pg.RangeVar) *pg.Node {
	return &pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: &pg.SelectStmt{
		TargetList: []*pg.Node{starTarget()},
		FromClause: []*pg.Node{{Node: &pg.Node_RangeVar{RangeVar: rel}}},
	}}}
}

// copyHeader reports whether COPY's options ask for a header line.
func copyHeader(opts []*pg.Node) bool {
	h := false
	for _, o := range opts {
		d := o.GetDefElem()
		if d == nil || d.Defname != "header" {
			continue
		}
		// HEADER alone; the old syntax's HEADER (a Boolean); HEADER
		// true/on/1/match (a String or an Integer).
		switch {
		case d.Arg == nil:
			h = true
		case d.Arg.GetBoolean() != nil:
			h = d.Arg.GetBoolean().Boolval
		case d.Arg.GetString_() != nil:
			v := d.Arg.GetString_().Sval
			h = truthy(v) || strings.EqualFold(v, "match")
		case d.Arg.GetInteger() != nil:
			h = d.Arg.GetInteger().Ival != 0
		default:
			h = isTrue(d.Arg)
		}
	}
	return h
}

// call: CALL is a write routed by its keyed arguments; a procedure the
// schema does not know runs on the default shard.
func (c *classifying) call(cs *pg.CallStmt) {
	fc := cs.Funccall
	c.a.setWrite("CALL")
	if fc != nil {
		c.a.walk(&pg.Node{Node: &pg.Node_FuncCall{FuncCall: fc}}, nil)
		_, name := funcName(fc)
		if _, keyed := c.s.sc.funcs[name]; !keyed {
			c.p.defaultWhy = fmt.Sprintf("CALL %s(): a procedure without a key in the sharding schema", name)
		}
	}
}

// lock: LOCK TABLE of a sharded table is refused (it would lock every
// shard); of another table it runs on the transaction's shard.
func (c *classifying) lock(ls *pg.LockStmt) {
	a := c.a
	c.st.Kind = KindOther
	for _, rel := range ls.Relations {
		if rv := rel.GetRangeVar(); rv != nil {
			a.addTable(rv.Relname)
			if c.s.sc.tables[rv.Relname] != nil {
				a.setWrite("LOCK TABLE " + rv.Relname)
				a.refuse("0A000", "LOCK TABLE "+rv.Relname+" would lock the table on every shard inside one transaction",
					"Lock rows by key (SELECT ... WHERE key = $1 FOR UPDATE), or route it with /* pgshard:shard=NAME */.")
			}
		}
	}
	c.p.anyReason = "LOCK of a table that is not sharded: on the transaction's shard"
}

// create classifies CREATE TABLE, TABLE AS, VIEW and SEQUENCE: temporary
// ones that outlive the transaction are session state (refused), the
// others DDL, except CREATE TABLE ... AS, a query (reported).
func (c *classifying) create(node *pg.Node) (query bool) {
	st, p := c.st, c.p
	var tempRel *pg.RangeVar
	var tempWhy string
	switch x := node.GetNode().(type) {
	case *pg.Node_CreateStmt:
		if temp(x.CreateStmt.Relation) {
			if x.CreateStmt.Oncommit != pg.OnCommitAction_ONCOMMIT_DROP {
				st.TempTables = []string{x.CreateStmt.Relation.Relname}
				c.unsupported("temp", "CREATE TEMP TABLE creates a table that outlives the transaction in one server session, which a transaction pooler shares; add ON COMMIT DROP to use it inside one transaction")
			} else {
				p.anyReason = "a temporary table dropped at commit lives on the transaction's shard"
			}
			return false
		}
	case *pg.Node_CreateTableAsStmt:
		return c.createTableAs(x.CreateTableAsStmt)
	case *pg.Node_ViewStmt:
		tempRel, tempWhy = x.ViewStmt.View, "CREATE TEMP VIEW creates a view that outlives the transaction in one server session"
	case *pg.Node_CreateSeqStmt:
		tempRel, tempWhy = x.CreateSeqStmt.Sequence, "CREATE TEMP SEQUENCE creates a sequence that outlives the transaction in one server session"
	}
	if tempRel != nil && temp(tempRel) {
		st.TempTables = []string{tempRel.Relname}
		if v := node.GetViewStmt(); v != nil && c.own {
			// The view is the session's: the rows its query reads, which
			// its later reads read on the pinned backend, route it.
			c.a.query(v.Query, nil, false)
			return true
		}
		c.unsupported("temp", tempWhy)
		return false
	}
	st.Kind, p.ddl = KindDDL, true
	return false
}

// createTableAs: a temporary table that outlives the transaction is
// refused, a materialized view is DDL; otherwise the query is read, and
// rows of sharded tables are refused, of unsharded data go to the default
// shard.
func (c *classifying) createTableAs(ct *pg.CreateTableAsStmt) (query bool) {
	st, a, p := c.st, c.a, c.p
	if ct.Into != nil && temp(ct.Into.Rel) && ct.Into.OnCommit != pg.OnCommitAction_ONCOMMIT_DROP {
		st.TempTables = []string{ct.Into.Rel.Relname}
		if c.own {
			// The table is the session's: the rows it reads route it.
			a.query(ct.Query, nil, false)
			return true
		}
		c.unsupported("temp", "CREATE TEMP TABLE ... AS creates a table that outlives the transaction in one server session; add ON COMMIT DROP")
		return false
	}
	if ct.Objtype == pg.ObjectType_OBJECT_MATVIEW {
		st.Kind, p.ddl = KindDDL, true
		return false
	}
	a.query(ct.Query, nil, false)
	a.setWrite("CREATE TABLE AS")
	if ct.Into != nil && ct.Into.Rel != nil {
		a.addTable(ct.Into.Rel.Relname)
	}
	if a.g.hasKeyedRef() {
		a.refuse("0A000", "CREATE TABLE ... AS copies rows of sharded tables into a new table: pgshard does not route it",
			"Create the table with CREATE TABLE (applied to every shard) and fill it by key, or route it with /* pgshard:shard=NAME */.")
	} else {
		p.defaultWhy = "CREATE TABLE ... AS of unsharded data"
	}
	return true
}

// noteDDL records the tables a schema change names (and drops).
func (c *classifying) noteDDL(node *pg.Node) {
	if !c.p.ddl {
		return
	}
	c.p.ddlTables = ddlTables(node)
	c.st.DropTables = dropTables(node)
	c.st.IndexNames = indexNames(node)
	for _, t := range c.p.ddlTables {
		c.a.addTable(t)
	}
}

// noteFacts records what the engine needs to know of any statement (no
// transaction block, COPY, SELECT), what the walk found unsupported,
// whether a user's type sends it to the default shard, session-private
// DDL, and the tables it names (unsharded ones apart).
func (c *classifying) noteFacts(text string, node *pg.Node) {
	st, a, p, s := c.st, c.a, c.p, c.s
	st.NoTxnBlock = noTxnBlock(node)
	_, st.Copy = node.GetNode().(*pg.Node_CopyStmt)
	if sel := node.GetSelectStmt(); sel != nil {
		st.Select = sel.IntoClause == nil
	}
	if a.unsupported != "" && st.Kind != KindUnsupported && !(c.own && a.unsupportedState != "") {
		c.unsupported(a.unsupportedState, a.unsupported)
		if a.unsupportedState == "set-config" {
			st.SetConfig = sessionSetConfig(node)
		}
	}
	if p.defaultWhy == "" && !p.ddl && st.Kind != KindUnsupported {
		if tn := userType(node); tn != "" {
			// A type the server does not ship: a user's, perhaps the row
			// type of an unsharded table; the default shard has them all.
			p.defaultWhy = "uses the type " + tn + ", which is not PostgreSQL's own"
		}
	}
	if st.Kind == KindDDL && strings.Contains(strings.ToLower(text), "pg_temp.") {
		// An object created in (or altered in) the session's temporary schema.
		c.unsupported("temp", "DDL in pg_temp creates session-private objects, which a transaction pooler shares")
	}
	st.Tables, st.ReadsObjects = a.tables, a.objects
	for _, t := range a.tables {
		if s.sc.tables[t] == nil && !s.sc.global[t] && !a.everywhere[t] {
			st.Unsharded = append(st.Unsharded, t)
		}
	}
}

// noteReadOnly decides whether a query is read-only: it writes, locks and
// calls nothing that changes data, and is not refused; a statement that
// only sets settings is.
func (c *classifying) noteReadOnly(node *pg.Node) {
	st, a := c.st, c.a
	st.ReadOnly = !a.write && !a.locking && a.notRO == "" && a.refusal == nil
	if st.Kind == KindOther {
		// Settings change no data: a transaction may run them on any of
		// its backends (the engine repeats them on the others).
		if st.Settings = localSettings(node); st.Settings != nil {
			st.ReadOnly = true
		}
		st.Terminate = terminateCall(node, c.a.rd.lit)
	}
}

// noTxnBlock reports whether Postgres refuses the statement inside a
// transaction block (PreventInTransactionBlock in its source). CLUSTER and
// CHECKPOINT are included as they always were: the engine never needs to
// wrap them.
func noTxnBlock(n *pg.Node) bool {
	switch x := n.GetNode().(type) {
	case *pg.Node_VacuumStmt, *pg.Node_ClusterStmt, *pg.Node_CheckPointStmt,
		*pg.Node_CreatedbStmt, *pg.Node_DropdbStmt, *pg.Node_AlterDatabaseStmt, *pg.Node_AlterDatabaseSetStmt,
		*pg.Node_CreateTableSpaceStmt, *pg.Node_DropTableSpaceStmt, *pg.Node_AlterTableSpaceOptionsStmt,
		*pg.Node_AlterSystemStmt, *pg.Node_CreateSubscriptionStmt, *pg.Node_DropSubscriptionStmt, *pg.Node_AlterSubscriptionStmt:
		return true
	case *pg.Node_ReindexStmt:
		return true
	case *pg.Node_IndexStmt:
		return x.IndexStmt.Concurrent
	case *pg.Node_DropStmt:
		return x.DropStmt.Concurrent
	case *pg.Node_RefreshMatViewStmt:
		return x.RefreshMatViewStmt.Concurrent
	}
	return false
}

// isolationOf reads transaction_isolation from BEGIN / SET TRANSACTION
// options.
func isolationOf(opts []*pg.Node) string {
	for _, o := range opts {
		if d := o.GetDefElem(); d != nil && d.Defname == "transaction_isolation" {
			if c := d.Arg.GetAConst(); c != nil && c.GetSval() != nil {
				return strings.ToLower(c.GetSval().Sval)
			}
		}
	}
	return ""
}

func temp(rv *pg.RangeVar) bool {
	return rv != nil && (rv.Relpersistence == "t" || rv.Schemaname == "pg_temp")
}

// constText is a constant EXECUTE argument in text format (nil = NULL).
func constText(n *pg.Node) ([]byte, bool) {
	for n.GetTypeCast() != nil {
		n = n.GetTypeCast().Arg
	}
	c := n.GetAConst()
	if c == nil {
		return nil, false
	}
	if c.Isnull {
		return nil, true
	}
	v, _ := constVal(c)
	switch v.kind {
	case kText, kInt, kNum:
		return []byte(v.text()), true
	}
	if b, ok := c.Val.(*pg.A_Const_Boolval); ok {
		if b.Boolval.Boolval {
			return []byte("t"), true
		}
		return []byte("f"), true
	}
	if b, ok := c.Val.(*pg.A_Const_Bsval); ok {
		return []byte(b.Bsval.Bsval), true
	}
	return nil, false
}

// set classifies SET / RESET.
func (c *classifying) set(v *pg.VariableSetStmt) {
	st := c.st
	st.ReadOnly = true
	name := strings.ToLower(v.Name)
	st.SetName = name
	if v.Kind == pg.VariableSetKind_VAR_SET_MULTI {
		switch name {
		case "transaction":
			st.Kind = KindSetLocal
			st.Isolation = isolationOf(v.Args)
		case "session characteristics":
			st.Kind = KindSetSession
			if d := oneSessionCharacteristic(v.Args); d != nil {
				// SET SESSION CHARACTERISTICS AS TRANSACTION <one mode>
				// is, in Postgres, SET default_transaction_<mode> (its
				// grammar builds the same assignment): a session setting
				// like any other, kept by the proxy (pgJDBC's
				// setTransactionIsolation sends it).
				name = "default_" + d.Defname
				st.SetName = name
				st.SetValue = setValuePlain([]*pg.Node{d.Arg})
				st.SetLocalSQL = "SET LOCAL " + name + " TO " + setValueSQL([]*pg.Node{d.Arg})
				return
			}
			var parts []string
			for _, a := range v.Args {
				if d := a.GetDefElem(); d != nil {
					parts = append(parts, "SET LOCAL "+d.Defname+" TO "+setValueSQL([]*pg.Node{d.Arg}))
				}
			}
			st.SetLocalSQL = strings.Join(parts, "; ")
		default:
			st.Kind = KindSetSession
		}
		return
	}
	if strings.HasPrefix(name, "pgshard.") {
		switch {
		case name != hintSetting && name != shardSetting:
			st.Kind = KindUnsupported
			st.Reason = fmt.Sprintf("unknown pgshard setting %q (the proxy knows %s and %s)", name, hintSetting, shardSetting)
		case !v.IsLocal:
			st.Kind = KindUnsupported
			st.Reason = "SET " + name + " must be SET LOCAL, inside a transaction: it names one transaction's shard"
		case v.Kind != pg.VariableSetKind_VAR_SET_VALUE || len(v.Args) != 1:
			st.Kind = KindUnsupported
			st.Reason = "SET LOCAL " + name + " takes one value"
		default:
			st.Kind = KindSetLocal
			st.SetValue = setValuePlain(v.Args)
		}
		return
	}
	switch {
	case name == "session_authorization":
		st.Kind, st.SessionState = KindUnsupported, "session-authorization"
		st.Reason = "SET SESSION AUTHORIZATION changes the identity of a server session, which a transaction pooler shares; connect as that user instead"
		return
	case v.IsLocal:
		st.Kind = KindSetLocal
	default:
		st.Kind = KindSetSession
	}
	switch v.Kind {
	case pg.VariableSetKind_VAR_SET_VALUE:
		st.SetValue = setValuePlain(v.Args)
		st.SetLocalSQL = "SET LOCAL " + quoteGUC(name) + " TO " + setValueSQL(v.Args)
		if !allConst(v.Args) {
			// SET TIME ZONE INTERVAL '...' HOUR TO MINUTE and the like: let
			// the deparser write the value.
			local := proto.Clone(v).(*pg.VariableSetStmt)
			local.IsLocal = true
			if out, err := deparse(&pg.Node{Node: &pg.Node_VariableSetStmt{VariableSetStmt: local}}); err == nil {
				st.SetLocalSQL = out
			}
		}
	case pg.VariableSetKind_VAR_SET_DEFAULT, pg.VariableSetKind_VAR_RESET:
		st.SetLocalSQL = "SET LOCAL " + quoteGUC(name) + " TO DEFAULT"
		st.ToDefault, st.Reset = true, v.Kind == pg.VariableSetKind_VAR_RESET
	case pg.VariableSetKind_VAR_SET_CURRENT:
		st.SetLocalSQL = "SET LOCAL " + quoteGUC(name) + " FROM CURRENT"
	case pg.VariableSetKind_VAR_RESET_ALL:
		st.SetName, st.ToDefault, st.Reset = "all", true, true
	}
	if st.Kind == KindSetLocal {
		st.SetLocalSQL = ""
	}
}

// oneSessionCharacteristic is the mode of SET SESSION CHARACTERISTICS AS
// TRANSACTION when it names exactly one (transaction_isolation,
// transaction_read_only or transaction_deferrable, as the parser names
// them) with a constant value; nil otherwise (several modes stay one
// statement the proxy cannot split into session settings).
func oneSessionCharacteristic(args []*pg.Node) *pg.DefElem {
	if len(args) != 1 {
		return nil
	}
	d := args[0].GetDefElem()
	if d == nil || d.Arg == nil || d.Arg.GetAConst() == nil {
		return nil
	}
	switch d.Defname {
	case "transaction_isolation", "transaction_read_only", "transaction_deferrable":
		return d
	}
	return nil
}

// setValuePlain is a SET value list as plain text: constants unquoted,
// joined by ", ".
func setValuePlain(args []*pg.Node) string {
	var parts []string
	for _, a := range args {
		if b, ok := constText(a); ok {
			parts = append(parts, string(b))
		} else {
			parts = append(parts, exprText(a))
		}
	}
	return strings.Join(parts, ", ")
}

func allConst(args []*pg.Node) bool {
	for _, a := range args {
		if a.GetAConst() == nil {
			return false
		}
	}
	return true
}

// setValueSQL is a SET value list as SQL.
func setValueSQL(args []*pg.Node) string {
	var parts []string
	for _, a := range args {
		c := a.GetAConst()
		switch {
		case c == nil:
			parts = append(parts, exprText(a))
		case c.GetSval() != nil:
			parts = append(parts, "'"+strings.ReplaceAll(c.GetSval().Sval, "'", "''")+"'")
		default:
			b, _ := constText(a)
			parts = append(parts, string(b))
		}
	}
	return strings.Join(parts, ", ")
}

func quoteGUC(name string) string {
	for _, part := range strings.Split(name, ".") {
		for i := 0; i < len(part); i++ {
			c := part[i]
			if !(c >= 'a' && c <= 'z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
				return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
			}
		}
	}
	return name
}

// finish turns the analysis into a plan: groups, edges, hints, the merge
// plan, and — when no parameter matters — the decision itself.
func (c *classifying) finish(h hints, hintErr error) {
	st, p, a := c.st, c.p, c.a
	st.plan = p
	p.noteStatement(st)
	if c.decidedByKind(hintErr) {
		return
	}
	p.groupRefs(a)
	p.takeAnalysis(a)
	if h.present() {
		hp, ref := c.hintPlan(h)
		if ref != nil {
			p.static = &Dest{Kind: DestRefuse, Bucket: -1, Reason: ref.Message, Refusal: ref}
			return
		}
		p.hint = hp
	}
	if !p.dependsOnParams() {
		e := evaluator{pl: c.s.pl, sc: c.s.sc, in: &input{}}
		d := e.decide(p)
		p.static, p.decided = &d, true
		return
	}
	if len(p.groups) == 1 && len(p.edges) == 0 && p.hint == nil && p.refusal == nil && !p.ddl {
		if e := p.groups[0].expr; e != nil && e.op == cSrc && e.src.param > 0 {
			p.fast = e.src // one key parameter decides it: Route's fast path
		}
	}
}

// noteStatement copies into the plan what the statement's kind and its
// unsharded tables say about where it runs when no key decides.
func (p *plan) noteStatement(st *Statement) {
	if len(st.Unsharded) > 0 && p.defaultWhy == "" && !p.ddl {
		p.defaultWhy = "touches unsharded tables (" + strings.Join(st.Unsharded, ", ") + ")"
	}
	if len(st.Unsharded) > 0 {
		p.unsharded = strings.Join(st.Unsharded, ", ")
	}
	if st.Kind != KindOther && st.Kind != KindDDL {
		p.anyReason = kindReason(st.Kind)
	}
}

// decidedByKind decides, once, the statements whose kind alone decides
// them: unsupported ones and bad hints (refused), SET LOCAL pgshard.key
// and pgshard.shard (routed by their value). It reports whether it did.
func (c *classifying) decidedByKind(hintErr error) bool {
	st, p, pl := c.st, c.p, c.s.pl
	switch {
	case st.Kind == KindUnsupported:
		ref := &Refusal{SQLState: "0A000", Message: st.Reason}
		p.static = &Dest{Kind: DestRefuse, Bucket: -1, Reason: st.Reason, Refusal: ref}
	case hintErr != nil:
		ref := &Refusal{SQLState: "42601", Message: hintErr.Error(),
			Hint: "Hints are /* pgshard:key=VALUE */ or /* pgshard:shard=NAME */."}
		p.static = &Dest{Kind: DestRefuse, Bucket: -1, Reason: ref.Message, Refusal: ref}
	case st.Kind == KindSetLocal && st.SetName == hintSetting:
		d := pl.routeKey(st.SetValue, c.s.sc.hintType)
		p.static = &d
	case st.Kind == KindSetLocal && st.SetName == shardSetting:
		d := pl.routeShard(st.SetValue)
		p.static = &d
	default:
		return false
	}
	return true
}

// groupRefs gathers the keyed references into groups (references whose
// keys are equal), each with the conjunction of its conditions, and the
// edges between groups (a group needs only the rows that join another).
func (p *plan) groupRefs(a *analyzer) {
	groupOf := map[int]int{}
	colocOf := map[int]int{}
	for _, ref := range a.g.refs {
		root, leaf := find(a.g.uf, ref.id), leafOf(a.top, ref)
		gi, ok := groupOf[root]
		if !ok {
			gi = len(p.groups)
			groupOf[root] = gi
			c := find(a.g.co, ref.id)
			if _, ok := colocOf[c]; !ok {
				colocOf[c] = len(colocOf)
			}
			p.groups = append(p.groups, group{coloc: colocOf[c], leaf: leaf})
		}
		g := &p.groups[gi]
		if g.leaf != leaf {
			g.leaf = -1
		}
		if g.sub == "" {
			g.sub = ref.sub
		}
		if g.desc != "" {
			g.desc += ", "
		}
		g.desc += ref.desc
		if ref.role != roleRead {
			g.write = true
		}
		for _, c := range ref.cons {
			if g.expr == nil {
				g.expr = c
			} else if g.expr.op == cAnd && g.expr.note == "group" {
				g.expr.kids = append(g.expr.kids, c)
			} else {
				g.expr = &cnode{op: cAnd, kids: []*cnode{g.expr, c}, note: "group"}
			}
		}
	}
	for _, e := range a.g.edges {
		from, to := groupOf[find(a.g.uf, e[0])], groupOf[find(a.g.uf, e[1])]
		if from != to && !containsEdge(p.edges, from, to) {
			p.edges = append(p.edges, [2]int{from, to})
		}
	}
}

// takeAnalysis copies into the plan what the walk found: writes and locks,
// why the statement is not read-only, its refusal, and its merge plan.
func (p *plan) takeAnalysis(a *analyzer) {
	p.write = a.write || a.locking
	p.writeWhat = a.writeWhat
	if p.writeWhat == "" && a.locking {
		p.writeWhat = "SELECT ... FOR UPDATE/SHARE"
	}
	p.notReadOnly = a.notRO
	p.unknownFn = a.unknownFn
	if a.locking && p.notReadOnly == "" {
		p.notReadOnly = "it locks rows (FOR UPDATE/SHARE)"
	}
	p.refusal = a.refusal
	p.setop = a.top != nil && a.top.setop
	p.noFrom = a.top != nil && !a.top.setop && len(a.top.sel.FromClause) == 0 && len(a.top.sel.ValuesLists) == 0
	switch {
	case p.copyOut != nil:
		p.merge, p.mergeWhy = a.copyPlan(p.copyOut)
		p.copyStaged = copyStagedOf(a)
	case p.mergeWhy == "":
		p.merge, p.mergeWhy = a.mergePlan()
	}
}

// leafOf is the branch of the top-level set operation t that ref is in,
// -1 for none (t is not a set operation, or ref is outside its branches).
func leafOf(t *topInfo, ref *tref) int {
	if t == nil || !t.setop {
		return -1
	}
	return t.leafOf(ref.sc)
}

func containsEdge(es [][2]int, a, b int) bool {
	for _, e := range es {
		if e[0] == a && e[1] == b {
			return true
		}
	}
	return false
}

func (p *plan) dependsOnParams() bool {
	if p.merge != nil && (p.merge.limit != nil || p.merge.offset != nil) {
		return true
	}
	var dep func(n *cnode) bool
	dep = func(n *cnode) bool {
		if n == nil {
			return false
		}
		if n.op == cSrc {
			return n.src.param > 0 || n.src.lit > 0
		}
		for _, k := range n.kids {
			if dep(k) {
				return true
			}
		}
		return false
	}
	for i := range p.groups {
		if dep(p.groups[i].expr) {
			return true
		}
	}
	return false
}

// hintPlan resolves a statement's hints.
func (c *classifying) hintPlan(h hints) (*hintPlan, *Refusal) {
	pl, a := c.s.pl, c.a
	hp := &hintPlan{shard: -1, b: -1}
	if h.hasShard {
		i, ok := pl.byName[h.shard]
		if !ok {
			return nil, pl.unknownShard(h.shard)
		}
		hp.shard = i
		hp.desc = "hint pgshard:shard=" + h.shard
	}
	if h.hasKey {
		t := c.s.sc.hintType
		if a.g.havePlace {
			t = a.g.placeType
		}
		d := pl.routeKey(h.key, t)
		if d.Kind != DestShard {
			return nil, d.Refusal
		}
		if hp.shard >= 0 && hp.shard != d.Shard {
			return nil, &Refusal{SQLState: "0A000",
				Message: fmt.Sprintf("hints disagree: pgshard:key=%s is on shard %s, pgshard:shard=%s", h.key, pl.name(d.Shard), h.shard)}
		}
		hp.shard, hp.key, hp.b = d.Shard, d.Key, d.Bucket
		hp.desc = fmt.Sprintf("hint pgshard:key=%s (%s) → bucket %d", quoteKey(h.key), t, d.Bucket)
		if t == KeySeq {
			hp.desc = fmt.Sprintf("hint pgshard:key=%s (seq)", h.key)
		}
	}
	return hp, nil
}

// maxParamUpTo is the highest $n of text that is at most limit (the real
// parameters of a normalized text, whose literal slots come above them).
func maxParamUpTo(text string, limit int) int {
	sc := scanner{sql: text}
	m := 0
	for {
		t, ok := sc.next()
		if !ok {
			return m
		}
		if t.kind == tokParam {
			if n, err := strconv.Atoi(t.text[1:]); err == nil && n <= limit && n > m {
				m = n
			}
		}
	}
}

// ddlTables returns the relations a utility statement names (every
// RangeVar in it, and the objects of DROP TABLE / VIEW / SEQUENCE / INDEX
// / MATERIALIZED VIEW / FOREIGN TABLE), unqualified, in order; none for a
// composite type's CREATE TYPE or ALTER TYPE (a type, on every shard).
func ddlTables(n *pg.Node) []string {
	var out []string
	add := func(name string) {
		if name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	for _, t := range dropTables(n) {
		add(t)
	}
	for _, t := range onTables(n) {
		add(t)
	}
	if n.GetCreateFunctionStmt() != nil {
		return out // a function exists on every shard, whatever its body reads
	}
	if n.GetCompositeTypeStmt() != nil || n.GetAlterTableStmt() != nil && n.GetAlterTableStmt().Objtype == pg.ObjectType_OBJECT_TYPE {
		// A composite type is a relation to Postgres but a type to its
		// users: like every other type (an enum, a domain, DROP TYPE), it
		// exists on every shard, so any table may use it.
		return out
	}
	rangeVars(n.ProtoReflect(), func(rv *pg.RangeVar) { add(rv.Relname) })
	return out
}

// onTables returns the relation that COMMENT ON, SECURITY LABEL ON or
// DROP names as a list of names rather than a RangeVar: a relation (TABLE,
// VIEW, SEQUENCE, INDEX, ...), a column's table, or the table an object
// is ON (a constraint, trigger, policy or rule), so the statement goes
// where that relation is, as the statements that made it did.
func onTables(n *pg.Node) []string {
	var typ pg.ObjectType
	var objs []*pg.Node
	switch {
	case n.GetCommentStmt() != nil:
		typ, objs = n.GetCommentStmt().Objtype, []*pg.Node{n.GetCommentStmt().Object}
	case n.GetSecLabelStmt() != nil:
		typ, objs = n.GetSecLabelStmt().Objtype, []*pg.Node{n.GetSecLabelStmt().Object}
	case n.GetDropStmt() != nil:
		typ, objs = n.GetDropStmt().RemoveType, n.GetDropStmt().Objects
	default:
		return nil
	}
	back := 0 // how far from the end of the name list the relation is
	switch typ {
	case pg.ObjectType_OBJECT_TABLE, pg.ObjectType_OBJECT_VIEW, pg.ObjectType_OBJECT_SEQUENCE,
		pg.ObjectType_OBJECT_INDEX, pg.ObjectType_OBJECT_MATVIEW, pg.ObjectType_OBJECT_FOREIGN_TABLE:
		if n.GetDropStmt() != nil {
			return nil // dropTables
		}
		back = 1
	case pg.ObjectType_OBJECT_COLUMN, pg.ObjectType_OBJECT_TABCONSTRAINT, pg.ObjectType_OBJECT_TRIGGER,
		pg.ObjectType_OBJECT_POLICY, pg.ObjectType_OBJECT_RULE:
		back = 2
	default:
		return nil
	}
	var out []string
	for _, o := range objs {
		if l := o.GetList(); l != nil && len(l.Items) >= back {
			out = append(out, strName(l.Items[len(l.Items)-back]))
		}
	}
	return out
}

// rangeVars calls fn for every RangeVar in a parse tree (protobuf
// reflection: utility statements have too many node types to list).
func rangeVars(m protoreflect.Message, fn func(*pg.RangeVar)) {
	if rv, ok := m.Interface().(*pg.RangeVar); ok {
		fn(rv)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind || fd.IsMap() {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				rangeVars(l.Get(i).Message(), fn)
			}
			return true
		}
		rangeVars(v.Message(), fn)
		return true
	})
}

// dropTables returns the relations a DROP statement drops.
func dropTables(n *pg.Node) []string {
	d := n.GetDropStmt()
	if d == nil {
		return nil
	}
	switch d.RemoveType {
	case pg.ObjectType_OBJECT_TABLE, pg.ObjectType_OBJECT_VIEW, pg.ObjectType_OBJECT_SEQUENCE,
		pg.ObjectType_OBJECT_INDEX, pg.ObjectType_OBJECT_MATVIEW, pg.ObjectType_OBJECT_FOREIGN_TABLE:
	default:
		return nil
	}
	var out []string
	for _, o := range d.Objects {
		if l := o.GetList(); l != nil && len(l.Items) > 0 {
			out = append(out, strName(l.Items[len(l.Items)-1]))
		}
	}
	return out
}

// userType returns the first type name in a statement that is not one
// of PostgreSQL's own ("" if none): casts and declared types.
func userType(n *pg.Node) string {
	found := ""
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		if found != "" {
			return
		}
		if tn, ok := m.Interface().(*pg.TypeName); ok {
			if len(tn.Names) == 0 {
				return
			}
			name := strName(tn.Names[len(tn.Names)-1])
			schema := ""
			if len(tn.Names) > 1 {
				schema = strName(tn.Names[len(tn.Names)-2])
			}
			if name != "" && (schema != "" && schema != "pg_catalog" || !pgBuiltinType[name] && !sqlTypeAlias[name]) {
				found = name
			}
			return
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd.Kind() != protoreflect.MessageKind || fd.IsMap() {
				return true
			}
			if fd.IsList() {
				l := v.List()
				for i := 0; i < l.Len(); i++ {
					walk(l.Get(i).Message())
				}
				return true
			}
			walk(v.Message())
			return true
		})
	}
	walk(n.ProtoReflect())
	return found
}

// sqlTypeAlias are type names the grammar accepts that pg_type spells
// otherwise.
var sqlTypeAlias = map[string]bool{"integer": true, "int": true, "smallint": true, "bigint": true, "real": true,
	"double": true, "boolean": true, "decimal": true, "dec": true, "character": true, "char": true, "varchar": true,
	"timestamp": true, "timestamptz": true, "time": true, "timetz": true, "interval": true, "float": true, "serial": true,
	"bigserial": true, "smallserial": true}

// indexNames returns the indexes a schema change names by their own name
// alone — DROP INDEX, ALTER INDEX (RENAME, SET, ATTACH PARTITION, DEPENDS
// ON EXTENSION), REINDEX INDEX, COMMENT ON INDEX — as written (schema-
// qualified when they are): which table each belongs to, and so where it
// lives, only the database can say (Statement.IndexNames).
func indexNames(n *pg.Node) []string {
	var objs []*pg.Node
	var rv *pg.RangeVar
	switch {
	case n.GetDropStmt() != nil && n.GetDropStmt().RemoveType == pg.ObjectType_OBJECT_INDEX:
		objs = n.GetDropStmt().Objects
	case n.GetCommentStmt() != nil && n.GetCommentStmt().Objtype == pg.ObjectType_OBJECT_INDEX:
		objs = []*pg.Node{n.GetCommentStmt().Object}
	case n.GetRenameStmt() != nil && n.GetRenameStmt().RenameType == pg.ObjectType_OBJECT_INDEX:
		rv = n.GetRenameStmt().Relation
	case n.GetAlterTableStmt() != nil && n.GetAlterTableStmt().Objtype == pg.ObjectType_OBJECT_INDEX:
		rv = n.GetAlterTableStmt().Relation
	case n.GetAlterObjectDependsStmt() != nil && n.GetAlterObjectDependsStmt().ObjectType == pg.ObjectType_OBJECT_INDEX:
		rv = n.GetAlterObjectDependsStmt().Relation
	case n.GetReindexStmt() != nil && n.GetReindexStmt().Kind == pg.ReindexObjectType_REINDEX_OBJECT_INDEX:
		rv = n.GetReindexStmt().Relation
	default:
		return nil
	}
	if rv != nil {
		if rv.Schemaname != "" {
			return []string{rv.Schemaname + "." + rv.Relname}
		}
		return []string{rv.Relname}
	}
	var out []string
	for _, o := range objs {
		l := o.GetList()
		if l == nil || len(l.Items) == 0 {
			continue
		}
		parts := make([]string, 0, len(l.Items))
		for _, it := range l.Items {
			parts = append(parts, strName(it))
		}
		out = append(out, strings.Join(parts, "."))
	}
	return out
}
