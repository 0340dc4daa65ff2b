package engine

// SELECT set_config(name, value, false): the function form of a session
// SET (pg_dump's first line; applications that set a tenant or user for
// row-level security pass it as a parameter). The analyzer recognizes the
// statement that is nothing but one such call of a setting the proxy may
// keep (route.Statement.SetConfig, proxy/route/setconfig.go). Outside a
// transaction block it is kept as SET name = value is:
//
//   - sent alone (its query string's only statement, or planned on its
//     own in a pipeline), it is validated on a shard in a transaction
//     rolled back (the step stepProbeSet, Session.probeSet, here with the
//     call itself as the probe), recorded in the client's settings and
//     applied to each of its transactions; its answer is the call's own,
//     one text column with the setting's value as Postgres reports it;
//   - with other statements (a query string, with a constant value, or a
//     pipeline) it runs with them on a server session of that exchange's
//     (pinSetsOnce), Postgres answering; the value is kept once the
//     exchange has succeeded (pinner.applyPinOps, noteSetConfigValue);
//   - ahead of a read of every shard (and nothing else) in a query string
//     or a pipeline, a constant value leads it: every shard runs it as
//     set_config(name, value, true) ahead of the read, as it runs a
//     session SET there as SET LOCAL (sessionLead, fanlead.go), and the
//     proxy keeps it once the read has succeeded; a $n value there is
//     kept first (alone, above), then the read runs with it.
//
// A NULL value (a reset to what the session started with, which only
// the client's own server session knows), a value of another type, and
// a call inside a transaction block pin the session as before
// (pinTrigger, keepsSetConfig).

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// setConfigCall is one set_config(name, value, false) the proxy keeps:
// the setting (name lower case), the value the client gave, the answer's
// column, and how the answer is sent.
type setConfigCall struct {
	name, value, column string
	// binary: the client asked for the result in binary (text's binary
	// form is its bytes: only the RowDescription's format code differs).
	binary bool
	// describe: the answer starts with its RowDescription (a simple query).
	describe bool
}

// querySetConfig reads the call the analyzer recognized in st, a query
// string's statement: its value is a constant (a query string has no
// parameters: Postgres's own error).
func querySetConfig(st *route.Statement) (*setConfigCall, *pgwire.Error) {
	sc := st.SetConfig
	if sc.Param > 0 {
		return nil, &pgwire.Error{Code: "42P02", Message: fmt.Sprintf("there is no parameter $%d", sc.Param)}
	}
	return &setConfigCall{name: sc.Name, value: sc.Value, column: sc.Column, describe: true}, nil
}

// parseSetConfig reads the call the analyzer recognized in st with its
// Bind's params and the statement's declared parameter types.
func parseSetConfig(st *route.Statement, params [][]byte, oids []uint32) (*setConfigCall, *pgwire.Error) {
	sc := st.SetConfig
	c := &setConfigCall{name: sc.Name, value: sc.Value, column: sc.Column}
	if sc.Param == 0 {
		return c, nil
	}
	i := sc.Param - 1
	if i >= len(params) {
		return nil, pgwire.NewError(pgwire.CodeProtocolViolation, fmt.Sprintf("bind message supplies %d parameters, but set_config's value is $%d", len(params), sc.Param))
	}
	if !textParam(oids, i) || params[i] == nil {
		// Pinned for instead (keepsSetConfig): reached only if that failed.
		return nil, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: fmt.Sprintf("pgshard keeps set_config(%s, $%d, false) as a session setting only with a text value that is not NULL", backend.QuoteLiteral(sc.Name), sc.Param)}
	}
	// A text value's binary form is its bytes: either format reads alike.
	c.value = string(params[i])
	return c, nil
}

// textParam reports whether parameter i is declared as text (or left to
// Postgres, which makes it text for set_config).
func textParam(oids []uint32, i int) bool {
	if i >= len(oids) {
		return true
	}
	switch oids[i] {
	case 0, pgtype.TextOID, pgtype.VarcharOID:
		return true
	}
	return false
}

// keepsSetConfig reports whether a's set_config(name, value, false), a
// Bind of it with params (nil: not bound yet), is one the proxy keeps as a
// session setting: its value is text and not NULL. Anything else pins
// (a NULL resets the setting to what the session started with, which
// only its own server session knows; a value of another type Postgres
// answers itself).
func keepsSetConfig(a *route.Statement, params [][]byte, oids []uint32) bool {
	sc := a.SetConfig
	if sc == nil {
		return false
	}
	if sc.Param == 0 || params == nil {
		return true
	}
	i := sc.Param - 1
	return i < len(params) && params[i] != nil && textParam(oids, i)
}

// probeSQL is the statement that validates the call on a shard: the call
// itself with its value written as a literal.
func (c *setConfigCall) probeSQL() string {
	return "SELECT pg_catalog.set_config(" + backend.QuoteLiteral(c.name) + ", " + backend.QuoteLiteral(c.value) + ", false)"
}

// setConfigAction plans the call: the probe is its step (run by the
// executor, backendExec.probeSet), its answer the call's row.
func setConfigAction(p *planner, a *route.Statement, c *setConfigCall) action {
	if p.sim.tx != txIdle || p.held {
		return p.failLocal(errSessionSetInTxn())
	}
	step := &actionStep{kind: stepProbeSet, st: a, name: c.name, tag: "SELECT 1", cfg: c}
	if p.onBackend {
		step.on = p.bc
	}
	return action{tag: "SELECT 1", step: step}
}

// appendSetConfigDesc appends the RowDescription Postgres gives the call:
// one text column.
func appendSetConfigDesc(dst []byte, c *setConfigCall) []byte {
	return pgvalue.AppendRowDesc(dst, []pgvalue.Field{{Name: c.column, OID: pgtype.TextOID, Typlen: -1, Typmod: -1, Format: formatCode(c.binary)}})
}

// formatCode is the wire's format code: 1 binary, 0 text.
func formatCode(binary bool) int16 {
	if binary {
		return 1
	}
	return 0
}

// appendSetConfigRow appends the call's result rows: the setting's value
// as the shard read it back (what set_config returns).
func appendSetConfigRow(dst []byte, c *setConfigCall, value string) []byte {
	if c.describe {
		dst = appendSetConfigDesc(dst, c)
	}
	return pgwire.AppendDataRow(dst, [][]byte{[]byte(value)})
}

// bindSetConfig reads the call a Bind (decoded in p.bv) of vs makes; nil
// when it fails (the planner then holds its error).
func bindSetConfig(p *planner, vs *vstmt) *setConfigCall {
	c, e := parseSetConfig(vs.st, p.bv.Params, vs.oids)
	if e != nil {
		p.fail(e, nil)
		return nil
	}
	c.binary = len(p.bv.ResultFmts) > 0 && p.bv.ResultFmts[0] == 1
	return c
}

// noteSetConfigValue records, for a Bind of a set_config(name, $n, false)
// sent to a pinned backend (a pipeline of it and other statements runs
// on a server session of its own), the value the proxy keeps once the
// pipeline has succeeded (pinner.applyPinOps).
func noteSetConfigValue(p *planner, a *route.Statement, params [][]byte, oids []uint32) {
	if len(p.pinOps) == 0 || p.pinOps[len(p.pinOps)-1].st != a || a.SetConfig == nil || a.SetConfig.Param == 0 || !keepsSetConfig(a, params, oids) {
		return
	}
	op := &p.pinOps[len(p.pinOps)-1]
	op.value, op.bound = string(params[a.SetConfig.Param-1]), true
}
