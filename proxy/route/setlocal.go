package route

import (
	"strings"

	"github.com/jackc/pgx/v5/pgtype"
	pg "github.com/pganalyze/pg_query_go/v6"
)

// Statements that only set transaction-local settings (Statement.Settings):
// SELECT set_config(name, value, true) [, set_config(...)]..., the function
// form of SET LOCAL that drivers and pgshard's own store send ahead of a
// statement, in its implicit transaction, because it takes a parameter.
// The proxy may run such a statement on every shard a read of every shard
// runs on, ahead of that read, and replay it in the transaction's other
// backends: it has no effect beyond the transaction. Recognized is only
// what is provably that:
//
//   - a SELECT with nothing but a select list (no FROM, WHERE, GROUP BY,
//     HAVING, WINDOW, ORDER BY, LIMIT, DISTINCT, WITH, INTO, locking, set
//     operation), every entry of which is a call of set_config (or
//     pg_catalog.set_config) with three positional arguments;
//   - the name a string constant (a cast to text at most) that names
//     neither a transaction characteristic (transaction_isolation,
//     transaction_read_only, transaction_deferrable: they must precede
//     every query and decide what a read of several shards may do), nor a
//     pgshard setting (hints), nor session_authorization;
//   - the value a string constant, NULL, or a parameter, each cast at most
//     to text or varchar (without a type modifier, which would truncate);
//   - is_local the constant true (set_config(..., false) is refused as a
//     session setting).

// Setting is one transaction-local setting of a Statement whose Settings
// are set.
type Setting struct {
	// Name is the setting's name as written (Postgres matches setting
	// names case-insensitively).
	Name string
	// Param, when > 0, is the $n that gives the value; else Value is the
	// constant value, or Null is set for NULL (which resets the setting).
	Param int
	Value string
	Null  bool
}

// localSettings returns the settings a statement that only sets
// transaction-local settings makes (nil for any other statement).
func localSettings(node *pg.Node) []Setting {
	sel := node.GetSelectStmt()
	if sel == nil || len(sel.TargetList) == 0 || !bareSelect(sel, false) {
		return nil
	}
	out := make([]Setting, 0, len(sel.TargetList))
	for _, t := range sel.TargetList {
		rt := t.GetResTarget()
		if rt == nil || rt.Val == nil || len(rt.Indirection) > 0 {
			return nil
		}
		fc := rt.Val.GetFuncCall()
		if fc == nil || len(fc.Args) != 3 || !plainCall(fc) {
			return nil
		}
		if schema, name := funcName(fc); name != "set_config" || (schema != "" && schema != "pg_catalog") || len(fc.Funcname) > 2 {
			return nil
		}
		if !isTrue(fc.Args[2]) || fc.Args[2].GetParamRef() != nil {
			return nil
		}
		name, ok := settingConst(fc.Args[0])
		if !ok || name.Null || !localSettingName(name.Value) {
			return nil
		}
		v, ok := settingConst(fc.Args[1])
		if !ok {
			return nil
		}
		v.Name = name.Value
		out = append(out, v)
	}
	return out
}

// settingConst reads a set_config argument: a string constant, NULL or a
// parameter, cast at most to text or varchar.
func settingConst(n *pg.Node) (Setting, bool) {
	for tc := n.GetTypeCast(); tc != nil; tc = n.GetTypeCast() {
		tn := tc.TypeName
		if tn == nil || len(tn.Typmods) > 0 {
			return Setting{}, false
		}
		if o := typeNameOID(tn); o != pgtype.TextOID && o != pgtype.VarcharOID {
			return Setting{}, false
		}
		n = tc.Arg
	}
	if pr := n.GetParamRef(); pr != nil && pr.Number > 0 {
		return Setting{Param: int(pr.Number)}, true
	}
	c := n.GetAConst()
	switch {
	case c == nil:
		return Setting{}, false
	case c.Isnull:
		return Setting{Null: true}, true
	}
	if s, ok := c.Val.(*pg.A_Const_Sval); ok {
		return Setting{Value: s.Sval.Sval}, true
	}
	return Setting{}, false
}

// localSettingName reports whether set_config(name, ..., true) sets only
// transaction-local state the proxy may repeat on other shards.
func localSettingName(name string) bool {
	n := strings.ToLower(strings.TrimSpace(name))
	switch {
	case n == "", strings.HasPrefix(n, "transaction_"), strings.HasPrefix(n, "pgshard."), n == "session_authorization":
		return false
	}
	return true
}
