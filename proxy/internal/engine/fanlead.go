package engine

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// Leads: statements that only set transaction-local settings, ahead of a
// read of every shard in the same implicit transaction — the store's
// SELECT set_config('statement_timeout', $1, true) before its relay reads
// in one pipeline (one Sync), or SET LOCAL ...; SELECT ... in one query
// string (or a session SET or constant set_config(..., false) in either,
// which the shards run transaction-locally and the proxy keeps once the
// read succeeded: sessionLead). On one
// database the settings apply to the read; so every shard
// the read runs on runs them first, in the same implicit transaction:
//
//	client:  P1 B1 [D1] E1 … P2 B2 [D2] E2 S     (or Q "SET LOCAL …; SELECT …")
//	         │  └─ lead ──┘    └─ the fan-out ┘
//	shard k: [BEGIN; preamble]  P1 B1 [D1] E1 …  P2 B2 D2 E2 S  [COMMIT]
//	         one write per shard; the client gets the first shard's answers
//	         to each lead (every shard's must succeed), then the merged read
//	         and one ReadyForQuery.
//
// A lead that fails on any shard fails the implicit transaction, as on
// one database: the client gets the error in the lead's place (the
// shard's own when every shard failed alike), the rest is skipped and
// every shard rolls back at its Sync. Only what provably sets
// transaction-local state leads (leadable: route.Statement.Settings, or a
// SET LOCAL of a setting that is not a transaction characteristic), and
// only in a pipeline of exactly this shape (leadShape) or a query string
// of such statements and one read; anything else ahead of a read of every
// shard is refused as before. The planner checks the shape before it
// makes the first lead (lookahead), so a pipeline never leaves leads
// without their read. A keyed statement after the same settings is not a
// lead: the settings run on its shard (lookahead), as before.

// aheadFan is lookahead's answer when the pipeline's next statement, past
// settings, is a read of every shard the settings may lead.
const aheadFan = -2

// aheadAny is lookahead's answer when a statement follows in the pipeline
// that runs on no fixed shard (any shard, or every shard but not as a
// read a lead can go ahead of): settings ahead of it go to the backend the
// pipeline picks, which that statement follows (or refuses it).
const aheadAny = -3

// fanLead is one lead of a fan-out read.
type fanLead struct {
	st   *route.Statement
	oids []uint32
	// bind is the client's Bind with the portal and statement unnamed
	// (nil in a simple query: no parameters, text results).
	bind []byte
	// describe: the client described the lead's portal; executed: it
	// sent its Execute (the shape requires both in order).
	describe, executed bool
	// replay, inside a transaction block, repeats the settings on the
	// transaction's other backends later (settingsReplay).
	replay string
	// session: the lead is a session SET of a query string (sessionLead),
	// which the shards run as SET LOCAL (st.SetLocalSQL) and the proxy
	// keeps for the session once the whole string has succeeded.
	session bool
}

// sessionLead reports whether a session SET may lead a read of every
// shard in a query string ("SET statement_timeout = 5000; SELECT count(*)
// FROM ..."): a plain SET of a value that the shards can run as SET LOCAL
// in the read's implicit transaction, whose value the proxy then keeps as
// written — not a setting Postgres reports to the client
// (ParameterStatus), refused by pgshard, or transaction-local already.
//
// A constant set_config(name, value, false) (setconfig.go) leads alike:
// the shards run it as set_config(name, value, true), whose row is the
// same.
func sessionLead(a *route.Statement) bool {
	name, value := sessionLeadSetting(a)
	_, refused := refusedSettings[name]
	_, reported := backend.ReportedParams[name]
	if sc := a.SetConfig; sc != nil {
		return sc.Param == 0 && !refused && !reported
	}
	return a.Kind == route.KindSetSession && !a.Reset && !a.ToDefault && value != "" && a.SetLocalSQL != "" &&
		name != "all" && !strings.Contains(name, " ") && !strings.HasPrefix(name, "pgshard.") && !refused && !reported
}

// sessionLeadSetting is the setting (name lower case) and value a session
// lead keeps.
func sessionLeadSetting(a *route.Statement) (string, string) {
	if sc := a.SetConfig; sc != nil {
		return sc.Name, sc.Value
	}
	return strings.ToLower(a.SetName), a.SetValue
}

// sessionLeadSQL is what the shards run for a session lead: its
// transaction-local form.
func sessionLeadSQL(a *route.Statement) string {
	if sc := a.SetConfig; sc != nil {
		return "SELECT pg_catalog.set_config(" + backend.QuoteLiteral(sc.Name) + ", " + backend.QuoteLiteral(sc.Value) + `, true) AS "` + strings.ReplaceAll(sc.Column, `"`, `""`) + `"`
	}
	return a.SetLocalSQL
}

// setsLeadRead reports whether a query string's statements are settings
// that may lead (leadable, sessionLead) and then one read of every shard
// that takes leads, and returns that read's destination.
func (g *GenerationEnv) setsLeadRead(as []*route.Statement) (route.Dest, bool) {
	if len(as) < 2 {
		return route.Dest{}, false
	}
	for _, a := range as[:len(as)-1] {
		if !leadable(a) && !sessionLead(a) {
			return route.Dest{}, false
		}
	}
	last := as[len(as)-1]
	if last.Kind != route.KindOther || !fanRead(last) {
		return route.Dest{}, false
	}
	d := g.Config.Analyzer.Route(last, nil, nil, nil)
	if d.Kind != route.DestAll || d.Merge == nil {
		return route.Dest{}, false // (a read in two stages runs them ahead of each stage: twostage.go)
	}
	return d, true
}

// keepSessionLeads keeps the session SETs that led x's read in the
// session's settings, once the read answered without an error (on one
// database they hold from then on, the string having committed).
func keepSessionLeads(x *fanExec) {
	if x.f.failed || firstFailed(x.streams) != nil {
		return
	}
	for _, l := range x.f.leads {
		if l.session {
			*x.cur = (*x.cur).With(sessionLeadSetting(l.st))
		}
	}
}

// setsOnlyLocal reports whether a statement only sets transaction-local
// state: SELECT set_config(..., true) as route.Statement.Settings says, or
// SET LOCAL / SET TRANSACTION / SET CONSTRAINTS (not a pgshard hint).
func setsOnlyLocal(a *route.Statement) bool {
	return a.Settings != nil || a.Kind == route.KindSetLocal && !strings.HasPrefix(a.SetName, "pgshard.")
}

// errSettingsAhead refuses transaction-local settings ahead of a
// statement that runs on every shard in the same implicit transaction but
// is not a read they can lead (DDL, utility statements): each shard would
// run it in its own implicit transaction without them, so the setting
// would be silently dropped.
func errSettingsAhead(reason string) *pgwire.Error {
	return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: "transaction-local settings (SET LOCAL, set_config(..., true)) can go ahead of a statement that runs on every shard only if it is a read pgshard merges; they cannot be carried to this statement",
		Detail:  reason,
		Hint:    "Send the statement in a pipeline (up to Sync) or query string of its own; a setting it needs can be SET for the session before it and RESET after."}
}

// leadable reports whether a statement may run on every shard ahead of a
// read of every shard: one that only sets transaction-local settings, and
// not a transaction characteristic (SET TRANSACTION, transaction_*: a read
// of several shards is refused under some of them) nor SET CONSTRAINTS.
func leadable(a *route.Statement) bool {
	if a.Settings != nil {
		return true
	}
	return setsOnlyLocal(a) && !strings.HasPrefix(a.SetName, "transaction") && a.SetName != "constraints"
}

// leadShape follows a pipeline from a lead's Bind to the read's Bind:
// only unnamed Parses and leads, each its Bind, an optional Describe of
// its portal, and its Execute (all rows); after the read's Bind, an
// optional Describe of its portal, its Execute (all rows) and the Sync
// that ends the pipeline. This is what fanExec.run runs; any other message
// (Flush, Close, Describe of a statement, a named Parse, a second
// Execute, messages after the read) breaks the shape, and the statements
// run as they did without leads.
type leadShape struct {
	portal            []byte // the current lead's portal
	started, executed bool
}

// bind starts a lead at its Bind m (the previous lead must be complete).
func (l *leadShape) bind(m cmsg) bool {
	var bv pgwire.BindView
	if m.typ != 'B' || bv.Decode(m.raw) != nil {
		return false
	}
	if l.started && !l.executed {
		return false
	}
	l.portal, l.started, l.executed = append(l.portal[:0], bv.Portal...), true, false
	return true
}

// parse accepts an unnamed Parse between complete leads.
func (l *leadShape) parse(pv *pgwire.ParseView) bool { return len(pv.Name) == 0 && l.executed }

// other accepts the current lead's Describe and Execute.
func (l *leadShape) other(m cmsg) bool {
	switch m.typ {
	case 'D':
		kind, name, err := pgwire.DecodeTarget(m.raw)
		return err == nil && kind == 'P' && bytes.Equal(name, l.portal) && !l.executed
	case 'E':
		portal, maxRows, err := pgwire.DecodeExecute(m.raw)
		if err != nil || !bytes.Equal(portal, l.portal) || maxRows != 0 || l.executed {
			return false
		}
		l.executed = true
		return true
	}
	return false
}

// fan accepts the read: rest starts at its Bind and must be the end of
// the pipeline, unless more may follow (inside a transaction block the
// pipeline goes on after the read: runPipeline plans the rest afresh).
func (l *leadShape) fan(rest []cmsg, more bool) bool {
	var bv pgwire.BindView
	if !l.executed || len(rest) < 2 || bv.Decode(rest[0].raw) != nil {
		return false
	}
	i := 1
	if rest[i].typ == 'D' {
		kind, name, err := pgwire.DecodeTarget(rest[i].raw)
		if err != nil || kind != 'P' || !bytes.Equal(name, bv.Portal) {
			return false
		}
		i++
	}
	if i >= len(rest) || rest[i].typ != 'E' {
		return false
	}
	if portal, maxRows, err := pgwire.DecodeExecute(rest[i].raw); err != nil || !bytes.Equal(portal, bv.Portal) || maxRows != 0 {
		return false
	}
	return more || i+2 == len(rest) && rest[i+1].typ == 'S'
}

// settingsReplay is the statement that repeats a's settings (a.Settings)
// on the other backends of the client's transaction (readers opened later,
// a soft transaction that moves: replaySQL): a's own text when it takes no
// parameters, else SELECT pg_catalog.set_config(E'name', E'value', true),
// ... with the values the Bind gives. A parameter the server reads as
// another type than text (declared other than text, varchar or unknown)
// or a value with a NUL byte (no statement text holds one) cannot be
// repeated exactly, nor a constant with a backslash next to parameters
// (what it means depends on standard_conforming_strings): an error, which
// refuses the statement. "" when the
// server refuses the Bind itself (a value missing, a NUL byte).
func settingsReplay(a *route.Statement, bv *pgwire.BindView, oids []uint32) (string, *pgwire.Error) {
	if a.NumParams == 0 {
		return a.SQL, nil
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, st := range a.Settings {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("pg_catalog.set_config(")
		backend.WriteEscapeLiteral(&b, st.Name)
		b.WriteString(", ")
		switch {
		case st.Param > 0:
			k := st.Param - 1
			if k >= len(bv.Params) {
				return "", nil
			}
			var oid uint32
			if k < len(oids) {
				oid = oids[k]
			}
			switch v := bv.Params[k]; {
			case oid != 0 && oid != pgtype.TextOID && oid != pgtype.VarcharOID && oid != pgtype.UnknownOID:
				return "", &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
					Message: fmt.Sprintf("pgshard cannot repeat set_config(%s, $%d, true) on the other shards of the transaction: the parameter is declared with type oid %d", backend.QuoteLiteral(st.Name), st.Param, oid),
					Detail:  "A transaction's settings apply on every shard it reads; pgshard repeats them as text.",
					Hint:    "Declare the parameter as text (or leave its type to the server)."}
			case v == nil:
				b.WriteString("NULL")
			case bytes.IndexByte(v, 0) >= 0:
				return "", nil // the server refuses the value (22021)
			default:
				backend.WriteEscapeLiteral(&b, string(v))
			}
		case st.Null:
			b.WriteString("NULL")
		case strings.IndexByte(st.Value, '\\') >= 0:
			// The constant's value depends on the session's
			// standard_conforming_strings, which the analysis assumes on.
			return "", &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
				Message: "pgshard cannot repeat a set_config constant with a backslash next to a parameter on the other shards of the transaction",
				Hint:    "Pass the value as a parameter too, or write the statement without parameters."}
		default:
			backend.WriteEscapeLiteral(&b, st.Value)
		}
		b.WriteString(", true)")
	}
	return b.String(), nil
}

// addLead makes the statement bound by the Bind being planned (p.bv, raw)
// a lead of the pipeline's fan-out read; its answers come from the shards
// (an itLead item).
func (p pipePlanner) addLead(vs *vstmt, raw []byte, pi portalInfo) {
	b, sp := pgwire.BeginMsg(nil, 'B')
	b = pgwire.AppendCStr(b, "")
	b = pgwire.AppendCStr(b, "")
	b = append(b, raw[p.planner.bv.RestAt:]...)
	p.planner.leads = append(p.planner.leads, fanLead{st: vs.st, oids: vs.oids, bind: pgwire.FinishMsg(b, sp)})
	p.planner.plan.items = append(p.planner.plan.items, item{kind: itLead, lo: int32(len(p.planner.leads) - 1)})
	pi.lead = len(p.planner.leads)
	p.planner.plan.portals = append(p.planner.plan.portals, pi)
	p.planner.pendingParse = -1
}

// simpleLeads plans a query string of settings and one read of every
// shard, in its implicit transaction (no transaction block open): nil if
// as is not of that shape.
func (p queryPlanner) simpleLeads(msg []byte, as []*route.Statement) *fanPlan {
	s := p.planner.s
	if p.planner.sim.tx != txIdle || p.planner.onTxnBackend() {
		return nil
	}
	d, ok := s.gen.setsLeadRead(as)
	if !ok {
		return nil
	}
	last := as[len(as)-1]
	f := &fanPlan{simple: true, st: last, dest: d, query: string(msg)}
	for _, a := range as[:len(as)-1] {
		f.leads = append(f.leads, fanLead{st: a, describe: true, executed: true, session: sessionLead(a)})
		p.planner.plan.items = append(p.planner.plan.items, item{kind: itLead, lo: int32(len(f.leads) - 1)})
	}
	return f
}

// appendLead appends what a shard is sent for lead l (ahead of the read,
// in the same write and implicit transaction).
func appendLead(dst []byte, l *fanLead) []byte {
	sql := l.st.SQL
	if l.session {
		sql = sessionLeadSQL(l.st)
	}
	dst = pgwire.AppendParseMsg(dst, "", sql, l.oids)
	if l.bind != nil {
		dst = append(dst, l.bind...)
	} else {
		dst = pgwire.AppendBindNoParams(dst, nil)
	}
	if l.describe {
		dst = pgwire.AppendDescribe(dst, 'P', "")
	}
	return pgwire.AppendExecute(dst, "", 0)
}

// setLocalWarning is the warning Postgres gives for SET LOCAL in a
// pipeline's implicit transaction (not in a query string's, which is a
// transaction block of its own).
var setLocalWarning = &pgwire.Error{Severity: "WARNING", Code: pgwire.CodeNoActiveTransaction, Message: "SET LOCAL can only be used in transaction blocks"}

// readLead reads the shard's answer to lead l, up to its CommandComplete,
// and appends what the client gets of it to dst: in a pipeline
// BindComplete, the portal's description if the client asked, rows and
// CommandComplete (the client's Parse was answered already); in a query
// string RowDescription, rows and CommandComplete. An error is kept in
// errRaw (the shard then skips to its Sync). The warning SET LOCAL gives
// is the proxy's: a shard whose part is wrapped in BEGIN (for the
// client's settings) would not give it.
func (f *fanStream) readLead(dst []byte, l *fanLead, simple bool) []byte {
	// Postgres warns about SET LOCAL as it starts to run it, ahead of its
	// CommandComplete or of an error about its value.
	warn := l.st.Kind == route.KindSetLocal && !simple
	setLocal := l.st.Kind == route.KindSetLocal || l.session // a session SET runs as SET LOCAL
	bound := false
	for !f.failed() {
		typ, msg, ok := f.recv()
		if !ok {
			break
		}
		switch typ {
		case '1':
		case '2':
			bound = true
			if !simple {
				dst = append(dst, msg...)
			}
		case 'n':
			if !simple {
				dst = append(dst, msg...)
			}
		case 'T', 'D':
			dst = append(dst, msg...)
		case 'N':
			if !(setLocal && pgwire.ErrorField(msg, 'C') == pgwire.CodeNoActiveTransaction) {
				dst = append(dst, msg...)
			}
		case 'S':
			// ParameterStatus: Postgres reports settings at ReadyForQuery,
			// when the implicit transaction's are gone again.
		case 'C':
			if warn {
				dst = pgwire.AppendNotice(dst, setLocalWarning.Severity, setLocalWarning.Code, setLocalWarning.Message)
			}
			return append(dst, msg...)
		case 'E':
			if warn && bound {
				dst = pgwire.AppendNotice(dst, setLocalWarning.Severity, setLocalWarning.Code, setLocalWarning.Message)
			}
			f.errRaw = append([]byte(nil), msg...)
			if pgwire.ErrorField(msg, 'S') == "FATAL" {
				f.bc.Broken = true
			}
		default:
			f.loseConn(fmt.Errorf("unexpected message %q from the server ahead of the read", typ))
		}
	}
	return dst
}

// firstLead is the index of the first lead among a plan's items (-1:
// none).
func firstLead(items []item) int {
	return slices.IndexFunc(items, func(it item) bool { return it.kind == itLead })
}

// fanLeads answers the items from the fan-out's first lead on (leads and
// local answers in the client's order), reading every shard's answer to
// each lead. It returns false when a lead failed: the error is written in
// its place and the rest of the pipeline is skipped, as Postgres skips to
// the Sync. simple: the client sent a query string (fanPlan.simple; a
// read in two stages' stage answers the client's leads: stageLeads).
func (x *fanExec) fanLeads(items []item, simple bool) bool {
	f, streams := x.f, x.streams
	answers := make([][]byte, len(streams))
	for i := range items {
		it := &items[i]
		if it.kind != itLead {
			x.cc.out = append(x.cc.out, x.lbuf[it.lo:it.hi]...)
			x.sess.apply(it.eff)
			continue
		}
		l := &f.leads[it.lo]
		failed := false
		for k, st := range streams {
			answers[k] = st.readLead(answers[k][:0], l, simple)
			failed = failed || st.failed()
		}
		if failed {
			// What the first shard that failed answered before its error
			// (BindComplete, the description), then the error.
			for k, st := range streams {
				if st.failed() {
					if st.lost == nil {
						x.cc.out = append(x.cc.out, answers[k]...)
					}
					break
				}
			}
			x.cc.out = append(x.cc.out, x.leadError()...)
			return false
		}
		x.cc.out = append(x.cc.out, answers[0]...)
	}
	return true
}

// leadError is the error of a lead that failed: the shard's own error
// when every shard failed alike (one database would have said the same),
// else the first shard's with the shards named (fanResultError).
func (x *fanExec) leadError() []byte {
	streams := x.streams
	var first *fanStream
	alike := true
	for _, st := range streams {
		switch {
		case !st.failed() || st.lost != nil || st.leadErr != 0:
			alike = false
		case first == nil:
			first = st
		case pgwire.ErrorField(st.errRaw, 'C') != pgwire.ErrorField(first.errRaw, 'C') || pgwire.ErrorField(st.errRaw, 'M') != pgwire.ErrorField(first.errRaw, 'M'):
			alike = false
		}
	}
	if alike && first != nil {
		if pgwire.ErrorField(first.errRaw, 'S') == "FATAL" {
			return pgwire.AppendShardFatal(nil, first.errRaw, first.bc.Pool.Shard.Name) // the client's session survives
		}
		return first.errRaw
	}
	return x.gen.fanResultError(streams)
}
