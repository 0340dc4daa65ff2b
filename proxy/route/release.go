package route

import pg "github.com/pganalyze/pg_query_go/v6"

// Statements that end a kind of session state entirely
// (Statement.Releases): a session pinned to a backend of its own for that
// state (the engine's pin.go) is unpinned once nothing else keeps it.
// Recognized from the parse tree, so that a name in a string constant or
// a comment ends nothing:
//
//   - UNLISTEN * ends every LISTEN: "listen";
//   - CLOSE ALL closes every cursor, WITH HOLD ones too: "hold-cursor";
//   - a call of pg_advisory_unlock_all() (pg_catalog's) anywhere in the
//     statement releases every session-level advisory lock:
//     "advisory-lock".
//
// The names are those of Statement.SessionState. DISCARD ALL, which ends
// them all, is KindDiscard.

// releases returns the session state that node ends entirely, "" if none.
func releases(node *pg.Node) string {
	switch x := node.GetNode().(type) {
	case *pg.Node_UnlistenStmt:
		if x.UnlistenStmt.Conditionname == "" {
			return "listen"
		}
		return ""
	case *pg.Node_ClosePortalStmt:
		if x.ClosePortalStmt.Portalname == "" {
			return "hold-cursor"
		}
		return ""
	}
	found := false
	inspect(node, func(n *pg.Node) bool {
		if fc := n.GetFuncCall(); fc != nil && len(fc.Funcname) <= 2 {
			if schema, name := funcName(fc); name == "pg_advisory_unlock_all" && (schema == "" || schema == "pg_catalog") {
				found = true
			}
		}
		return !found
	})
	if found {
		return "advisory-lock"
	}
	return ""
}
