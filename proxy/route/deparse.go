package route

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Every statement pgshard writes for a shard — a merge's per-shard
// statement, a two-stage plan's stages, a read's served form — is a parse
// tree rendered back to SQL by pg_query's deparser, which does not always
// put back the parentheses the tree needs. Measured on pg_query_go
// v6.2.5: the argument of IS [NOT] NULL, IS [NOT] TRUE/FALSE/UNKNOWN, IN,
// BETWEEN, LIKE, = ANY, an operator, COLLATE, AT TIME ZONE and a
// subscript is written bare, so
//
//	(a OR b) IS NULL               → a OR b IS NULL            (another meaning)
//	(a IS DISTINCT FROM 1) IS NULL → a IS DISTINCT FROM 1 IS NULL   (a syntax error)
//	(a = b) IN (true)              → a = b IN (true)           (another meaning)
//
// Of 3,503 pairings of an operator-like parent with an operator-like
// child (TestDeparseParens), 317 came back as another tree or not as SQL
// (found by the random differential test's rich shape). Nothing else
// renders Postgres parse trees (hand-writing a deparser for the whole
// grammar is what pg_query already is), so deparse keeps it and does two
// things of its own:
//
//   - parens: every operator-like child of an operator-like parent is
//     rendered on its own and put back in parentheses (a marker column
//     stands for it while the rest is rendered; parentheses never change
//     a tree);
//   - proof: the text is parsed again and must give the tree it was
//     written from, locations aside; a text that does not is an error
//     (the caller plans without it — refuses, or takes another plan),
//     never sent to a shard with another meaning.

// parseVersion is the parse-tree version Deparse expects (the grammar's
// PG_VERSION_NUM), taken from a parse.
var parseVersion = sync.OnceValue(func() int32 {
	res, err := pg.Parse("SELECT 1")
	if err != nil {
		return 0
	}
	return res.Version
})

// deparse renders one statement as SQL that parses back to n.
func deparse(n *pg.Node) (string, error) {
	text, err := renderParens(n)
	if err != nil {
		return "", err
	}
	if err := proveRendered(n, text); err != nil {
		return "", err
	}
	return text, nil
}

// proveRendered checks that text, rendered from n, parses back to n.
func proveRendered(n *pg.Node, text string) error {
	res, err := pg.Parse(text)
	if err != nil || len(res.Stmts) != 1 {
		return fmt.Errorf("pg_query's deparser wrote SQL that does not parse back (%v): %s", err, text)
	}
	if !sameStatement(n, res.Stmts[0].Stmt) {
		return fmt.Errorf("pg_query's deparser wrote SQL of another meaning: %s", text)
	}
	return nil
}

// rawDeparse is pg_query's deparser on one statement.
func rawDeparse(n *pg.Node) (string, error) {
	return pg.Deparse(&pg.ParseResult{Version: parseVersion(), Stmts: []*pg.RawStmt{{Stmt: n}}})
}

// parenMarker names the column that stands for the i-th parenthesized
// child while the tree around it is rendered.
func parenMarker(i int) string { return "pgshard_paren_" + strconv.Itoa(i) + "_x" }

// renderParens renders n with each operator-like child of an
// operator-like parent rendered on its own, in parentheses.
func renderParens(n *pg.Node) (string, error) {
	if !guardParens(n.ProtoReflect(), posOther, nil) {
		return rawDeparse(n) // nothing to parenthesize: no copy
	}
	n = proto.Clone(n).(*pg.Node)
	var subs []*pg.Node
	guardParens(n.ProtoReflect(), posOther, &subs)
	text, err := rawDeparse(n)
	if err != nil {
		return "", err
	}
	for i, sub := range subs {
		// The child, a statement of its own (SELECT child): its own
		// children parenthesized the same way.
		sel := &pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: &pg.SelectStmt{TargetList: []*pg.Node{
			{Node: &pg.Node_ResTarget{ResTarget: &pg.ResTarget{Val: sub, Location: -1}}}}}}}
		s, err := renderParens(sel)
		if err != nil {
			return "", err
		}
		m := parenMarker(i)
		if strings.Count(text, m) != 1 {
			return "", fmt.Errorf("the statement names %s", m)
		}
		text = strings.Replace(text, m, "("+strings.TrimPrefix(s, "SELECT ")+")", 1)
	}
	return text, nil
}

// A child's position, for guardParens: not an operand, an operand of an
// operator-like expression, or what a subscript or field selection
// applies to.
const (
	posOther = iota
	posOperand
	posIndirected
)

// guardParens replaces, under m, each child that needs parentheses in its
// position (pos: m's own, passed on by a node's wrapper and a list) by a
// marker column, appending the child to subs; it does not look inside a
// child it replaced (renderParens renders it on its own). With subs nil
// it changes nothing and stops at the first such child. It reports
// whether there was one.
func guardParens(m protoreflect.Message, pos int, subs *[]*pg.Node) bool {
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil || fd.IsMap() {
			return true
		}
		cpos := childPos(m, fd, pos)
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				if node, ok := l.Get(i).Message().Interface().(*pg.Node); ok && needsParens(node, cpos) {
					found = true
					if subs == nil {
						return false
					}
					l.Set(i, protoreflect.ValueOfMessage(markerFor(node, subs).ProtoReflect()))
					continue
				}
				if guardParens(l.Get(i).Message(), cpos, subs) {
					found = true
					if subs == nil {
						return false
					}
				}
			}
			return true
		}
		if node, ok := v.Message().Interface().(*pg.Node); ok && needsParens(node, cpos) {
			found = true
			if subs == nil {
				return false
			}
			m.Set(fd, protoreflect.ValueOfMessage(markerFor(node, subs).ProtoReflect()))
			return true
		}
		if guardParens(v.Message(), cpos, subs) {
			found = true
			return subs != nil
		}
		return true
	})
	return found
}

// markerFor records node as the next parenthesized child and returns the
// column that stands for it.
func markerFor(node *pg.Node, subs *[]*pg.Node) *pg.Node {
	*subs = append(*subs, node)
	return pg.MakeColumnRefNode([]*pg.Node{pg.MakeStrNode(parenMarker(len(*subs) - 1))}, -1)
}

// childPos is the position of what field fd of m holds: the operands of
// an operator-like expression (those pg_query writes without parentheses
// of their own), the argument of a subscript or field selection, or
// neither. A node's wrapper and a list (BETWEEN's bounds, IN's list) pass
// on their own position (pos).
func childPos(m protoreflect.Message, fd protoreflect.FieldDescriptor, pos int) int {
	name := fd.Name()
	switch x := m.Interface().(type) {
	case *pg.Node, *pg.List:
		return pos
	case *pg.A_Expr:
		if name == "lexpr" || name == "rexpr" {
			return posOperand
		}
	case *pg.NullTest, *pg.BooleanTest, *pg.CollateClause:
		if name == "arg" {
			return posOperand
		}
	case *pg.A_Indirection:
		if name == "arg" {
			return posIndirected
		}
	case *pg.SubLink:
		if name == "testexpr" {
			return posOperand
		}
	case *pg.XmlExpr:
		if name == "args" && x.Op == pg.XmlExprOp_IS_DOCUMENT {
			return posOperand
		}
	case *pg.JsonIsPredicate:
		if name == "expr" {
			return posOperand
		}
	case *pg.FuncCall:
		if name == "args" && x.Funcformat == pg.CoercionForm_COERCE_SQL_SYNTAX {
			return posOperand // a AT TIME ZONE b, a IS NORMALIZED, ...
		}
	}
	return posOther
}

// needsParens reports whether n needs parentheses in its position: an
// operand made of operators (whose precedence pg_query does not weigh
// against its parent's) — a column, constant, parameter, function call,
// CASE, array, row or cast never does — and anything a subscript or
// field selection applies to but a column or a parameter.
func needsParens(n *pg.Node, pos int) bool {
	switch pos {
	case posOther:
		return false
	case posIndirected:
		return n.GetColumnRef() == nil && n.GetParamRef() == nil
	}
	switch x := n.Node.(type) {
	case *pg.Node_AExpr, *pg.Node_BoolExpr, *pg.Node_NullTest, *pg.Node_BooleanTest,
		*pg.Node_CollateClause, *pg.Node_JsonIsPredicate, *pg.Node_AIndirection:
		return true
	case *pg.Node_SubLink:
		t := x.SubLink.SubLinkType
		return t == pg.SubLinkType_ANY_SUBLINK || t == pg.SubLinkType_ALL_SUBLINK || t == pg.SubLinkType_ROWCOMPARE_SUBLINK
	case *pg.Node_XmlExpr:
		return x.XmlExpr.Op == pg.XmlExprOp_IS_DOCUMENT
	case *pg.Node_FuncCall:
		return x.FuncCall.Funcformat == pg.CoercionForm_COERCE_SQL_SYNTAX
	}
	return false
}

// sameStatement reports whether built, a tree the planner made, and
// parsed, its text parsed again, are one statement: the locations aside,
// and what a built tree leaves unset read as the parser sets it — an
// enum left 0 (pg_query's UNDEFINED) is Postgres's default, its first
// value (LIMIT_OPTION_DEFAULT, SETOP_NONE, ...), and a LIMIT option
// without a LIMIT is no option.
func sameStatement(built, parsed *pg.Node) bool {
	a := proto.Clone(built).(*pg.Node) // parsed is the caller's own, built is not
	normalizeTree(a.ProtoReflect())
	normalizeTree(parsed.ProtoReflect())
	return proto.Equal(a, parsed)
}

// normalizeTree clears every location under m and sets what the parser
// sets and a built tree may leave unset (sameStatement), in one walk.
func normalizeTree(m protoreflect.Message) {
	switch x := m.Interface().(type) {
	case *pg.SelectStmt:
		if x.LimitCount == nil && x.LimitOption == pg.LimitOption_LIMIT_OPTION_COUNT {
			x.LimitOption = pg.LimitOption_LIMIT_OPTION_DEFAULT
		}
	case *pg.DefElem:
		if b, ok := copyBoolean(x); ok {
			x.Arg = &pg.Node{Node: &pg.Node_Boolean{Boolean: &pg.Boolean{Boolval: b}}}
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() == protoreflect.Int32Kind && strings.HasSuffix(string(fd.Name()), "location"):
			m.Clear(fd) // location, arg_location, stmt_location: the current field
		case fd.Message() == nil || fd.IsMap():
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				normalizeTree(l.Get(i).Message())
			}
		default:
			normalizeTree(v.Message())
		}
		return true
	})
	// Range skips fields at their zero value: an enum left 0 is set to
	// its first value.
	for _, fd := range enumFields(m.Descriptor()) {
		if m.Get(fd).Enum() == 0 {
			m.Set(fd, protoreflect.ValueOfEnum(fd.Enum().Values().Get(1).Number()))
		}
	}
}

// enumFieldsOf caches enumFields per message type.
var enumFieldsOf sync.Map // protoreflect.FullName → []protoreflect.FieldDescriptor

// enumFields are md's singular enum fields with a value besides 0 (pg_query's
// UNDEFINED).
func enumFields(md protoreflect.MessageDescriptor) []protoreflect.FieldDescriptor {
	if v, ok := enumFieldsOf.Load(md.FullName()); ok {
		return v.([]protoreflect.FieldDescriptor)
	}
	var out []protoreflect.FieldDescriptor
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Kind() == protoreflect.EnumKind && !fd.IsList() && fd.Enum().Values().Len() > 1 {
			out = append(out, fd)
		}
	}
	enumFieldsOf.Store(md.FullName(), out)
	return out
}

// copyBoolean is the value of a COPY option that takes a boolean, written
// any of the ways Postgres reads one (defGetBoolean): none, 0 or 1, true,
// false, on or off — pg_query writes HEADER 1 as HEADER, reads back true.
func copyBoolean(d *pg.DefElem) (bool, bool) {
	if d.Defname != "header" && d.Defname != "freeze" {
		return false, false
	}
	if d.Arg == nil {
		return true, true
	}
	switch a := d.Arg.Node.(type) {
	case *pg.Node_Boolean:
		return a.Boolean.Boolval, true
	case *pg.Node_Integer:
		return a.Integer.Ival != 0, a.Integer.Ival == 0 || a.Integer.Ival == 1
	case *pg.Node_String_:
		switch strings.ToLower(a.String_.Sval) {
		case "true", "on":
			return true, true
		case "false", "off":
			return false, true
		}
	}
	return false, false
}
