package engine

import (
	"fmt"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// stmtBook is the prepared statements a plan sees: the session's named
// statements (stmts) and unnamed one (*unnamed), under an overlay of the
// statements the plan created or removed so far (effects reach the
// session only when the client is answered). PREPARE and DEALLOCATE are
// answered here; nothing in it does I/O.
type stmtBook struct {
	stmts   map[string]*vstmt
	unnamed **vstmt
	// overlay holds named statements created (or removed: nil) earlier in
	// the pipeline.
	overlay map[string]*vstmt
}

// lookup finds a prepared statement as the pipeline sees it so far.
func (b *stmtBook) lookup(name []byte) *vstmt {
	if len(name) == 0 {
		return *b.unnamed
	}
	if b.overlay != nil {
		if v, ok := b.overlay[string(name)]; ok {
			return v
		}
	}
	return b.stmts[string(name)]
}

func (b *stmtBook) overlayPut(name string, v *vstmt) {
	if b.overlay == nil {
		b.overlay = map[string]*vstmt{}
	}
	b.overlay[name] = v
}

// forgetSession removes the session's named statements from the plan's
// view (DISCARD ALL; those the plan made stay, as before).
func (b *stmtBook) forgetSession() {
	if b.overlay == nil {
		b.overlay = map[string]*vstmt{}
	}
	for n := range b.stmts {
		b.overlay[n] = nil
	}
}

// deallocate answers DEALLOCATE [ALL] of the session's virtual
// statements (an error is answered as the planner's failLocal).
func (b *stmtBook) deallocate(a *route.Statement) (action, *pgwire.Error) {
	if a.PrepareName == "" {
		b.forgetSession()
		for n := range b.overlay {
			b.overlay[n] = nil
		}
		return action{tag: "DEALLOCATE ALL", eff: &effect{kind: effStmtClear}}, nil
	}
	if b.lookup([]byte(a.PrepareName)) == nil {
		return action{}, pgwire.NewError(pgwire.CodeUndefinedPstatement, fmt.Sprintf("prepared statement %q does not exist", a.PrepareName))
	}
	b.overlayPut(a.PrepareName, nil)
	return action{tag: "DEALLOCATE", eff: &effect{kind: effStmtDel, name: a.PrepareName}}, nil
}

// preparedVstmt is the statement an SQL-level PREPARE a makes, of the
// statement epoch epoch.
func preparedVstmt(a *route.Statement, epoch uint64) *vstmt {
	vs := newVstmt(a.PrepareName, a.Prepared, a.PrepareTypes)
	vs.epoch = epoch
	return vs
}

// prepare answers PREPARE: a virtual statement of the session, of the
// statement epoch epoch.
func (b *stmtBook) prepare(a *route.Statement, epoch uint64) (action, *pgwire.Error) {
	if a.Prepared == nil {
		return action{}, pgwire.NewError(pgwire.CodeFeatureNotSupported, "cannot analyze the prepared statement: "+a.Reason)
	}
	if b.lookup([]byte(a.PrepareName)) != nil {
		return action{}, pgwire.NewError(pgwire.CodeDuplicatePstatement, fmt.Sprintf("prepared statement %q already exists", a.PrepareName))
	}
	vs := preparedVstmt(a, epoch)
	b.overlayPut(a.PrepareName, vs)
	return action{tag: "PREPARE", eff: &effect{kind: effStmtPut, name: a.PrepareName, vs: vs}}, nil
}
