package route

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// A session setting made by the function form of SET:
//
//	SELECT set_config('app.tenant', $1, false)
//	SELECT pg_catalog.set_config('search_path', '', false)   -- pg_dump's first line
//
// It changes the server session's setting, which a pooled server
// connection would keep for the next client: the analyzer marks it
// KindUnsupported with SessionState "set-config", and an engine may pin
// the session to a server session of its own. When the statement is
// nothing but one such call, an engine that keeps session settings
// itself (as it keeps a session SET) can do the same with it and answer
// its one row: Statement.SetConfig says so. Recognized is only what is
// provably that:
//
//   - a SELECT with nothing but a select list of one entry (no FROM,
//     WHERE, ..., the same bare SELECT as the transaction-local form,
//     setlocal.go), a call of set_config or pg_catalog.set_config with
//     three positional arguments, an alias at most (the answer's column);
//   - the name a string constant (cast to text or varchar at most) that
//     is a plain setting name (letters, digits, '_', '.') naming neither
//     a transaction characteristic, a pgshard setting, role nor
//     session_authorization (those keep the session pinned, or are
//     refused as a SET of them is);
//   - the value a string constant or a parameter, cast at most to text
//     or varchar; not NULL, which resets the setting to the value the
//     session started with, which only a server session of the client's
//     own knows (a pooled one has its own; the engine pins for it, and
//     for a parameter bound to NULL);
//   - is_local the constant false.

// SetConfig is the session setting a statement that is nothing but a
// call of set_config(name, value, false) makes (Statement.SetConfig).
type SetConfig struct {
	// Setting is the name (lower case: Postgres matches setting names
	// case-insensitively) and the value: Param > 0 for $n, else Value.
	Setting
	// Column is the name of the answer's one column: the call's alias,
	// or "set_config".
	Column string
}

// sessionSetConfig returns the setting of a statement that is nothing
// but set_config(name, value, false), nil for any other statement.
func sessionSetConfig(node *pg.Node) *SetConfig {
	sel := node.GetSelectStmt()
	if sel == nil || len(sel.TargetList) != 1 || !bareSelect(sel, false) {
		return nil
	}
	rt := sel.TargetList[0].GetResTarget()
	if rt == nil || rt.Val == nil || len(rt.Indirection) > 0 {
		return nil
	}
	fc := rt.Val.GetFuncCall()
	if fc == nil || len(fc.Args) != 3 || !plainCall(fc) || len(fc.Funcname) > 2 {
		return nil
	}
	if schema, name := funcName(fc); name != "set_config" || (schema != "" && schema != "pg_catalog") {
		return nil
	}
	if !isFalse(fc.Args[2]) {
		return nil
	}
	name, ok := settingConst(fc.Args[0])
	if !ok || name.Null || name.Param > 0 || !sessionSettingName(name.Value) {
		return nil
	}
	v, ok := settingConst(fc.Args[1])
	if !ok || v.Null {
		return nil
	}
	v.Name = strings.ToLower(name.Value)
	col := rt.Name
	if col == "" {
		col = "set_config"
	}
	return &SetConfig{Setting: v, Column: col}
}

// sessionSettingName reports whether set_config(name, ..., false) may be
// kept as a session setting: a plain name that the transaction-local form
// may set too (localSettingName), and not role (a SET ROLE pins).
func sessionSettingName(name string) bool {
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.') {
			return false
		}
	}
	return localSettingName(name) && !strings.EqualFold(name, "role")
}
