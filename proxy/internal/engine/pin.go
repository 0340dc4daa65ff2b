package engine

// Pinning: a client kept on one server session.
//
// In transaction pooling (the default) a client's transactions run on
// whichever pooled backend is free, and the proxy keeps the client's
// session state itself (settings, prepared statements). Some state lives
// only in a server session: temporary tables, WITH HOLD cursors, session
// advisory locks, LISTEN, set_config(..., false), LOAD, SET SESSION
// AUTHORIZATION, prepared transactions, a SET inside a transaction block
// or a query string that mixes settings with other statements. When a
// client creates such state, the proxy pins it: it gives the client a
// backend of its own — a direct connection to the shard's Postgres (a
// transaction pooler in front would still switch server sessions
// between transactions), opened with the client's startup parameters and
// its session settings replayed — and from then on every statement of
// the client runs there, unchanged (SET, DISCARD, PREPARE, LISTEN and
// the rest go to the server as they are). A statement that needs another
// shard is refused while the pin lasts. The pin ends when the state is
// gone (DISCARD ALL; DISCARD TEMP or DROP of every temporary table it
// created; CLOSE ALL; pg_advisory_unlock_all(); UNLISTEN *), and the
// pinned backend is then closed (it carries the client's session state),
// not returned to a pool. Config.MaxPinned bounds the pinned sessions;
// beyond it such statements are refused.
//
// In session pooling (Config.PoolMode / User.PoolMode = PoolSession) every
// client is pinned for its whole session: on a map with one shard at
// startup (BackendKeyData then carries the backend's real PID and
// secret), else at its first statement, on the shard its first key picks
// or on Config.DefaultShard. Everything a single Postgres session can do
// works, unless it needs a second shard.
//
//	client ─▶ session ─pin?─▶ no:  backend.Pool (PgBouncer or direct, per transaction)
//	                      └─▶ yes: s.bc, a direct backend of its own (Server.direct)
//	                               ◀── notifications while idle (clientConn.forwardAsync)

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// PoolMode is how a client's statements use backend connections.
type PoolMode int

const (
	// PoolModeDefault (the zero value) inherits: a User's mode is the
	// server's, the server's is PoolTransaction.
	PoolModeDefault PoolMode = iota
	// PoolTransaction: each transaction runs on a pooled backend; session
	// state the proxy cannot keep pins the client (see above).
	PoolTransaction
	// PoolSession: every client has a backend of its own for its session.
	PoolSession
)

// String returns "transaction", "session" or "default".
func (m PoolMode) String() string {
	switch m {
	case PoolTransaction:
		return "transaction"
	case PoolSession:
		return "session"
	}
	return "default"
}

// ParsePoolMode parses "transaction" or "session" ("" is PoolModeDefault).
func ParsePoolMode(s string) (PoolMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return PoolModeDefault, nil
	case "transaction":
		return PoolTransaction, nil
	case "session":
		return PoolSession, nil
	}
	return PoolModeDefault, fmt.Errorf("unknown pool mode %q (want transaction or session)", s)
}

// DefaultMaxPinned is the default of Config.MaxPinned.
const DefaultMaxPinned = 100

// pinReason is a kind of session state that keeps a client pinned.
type pinReason uint16

const (
	pinSessionMode pinReason = 1 << iota // session pooling: for the whole session
	pinTemp                              // temporary tables, views, sequences
	pinCursor                            // WITH HOLD cursors
	pinLock                              // session advisory locks
	pinListen                            // LISTEN
	pinSettings                          // settings the proxy cannot keep (set_config(..., false), SET in a transaction or a query string)
	pinOther                             // LOAD, SET SESSION AUTHORIZATION, prepared transactions, large objects, dblink
	// pinSetsOnce: a query string or pipeline whose session SET precedes
	// other statements runs on one server session, in order; its settings
	// are then kept by the proxy (s.cur) and the pin ends with it.
	pinSetsOnce
	// pinPrepare: SQL-level prepared statements on a database of one
	// shard (where EXECUTE needs no routing): the server's own, as on a
	// direct connection (EXPLAIN EXECUTE, pg_prepared_statements).
	pinPrepare
)

var pinReasonNames = []string{"session mode", "temporary objects", "WITH HOLD cursors", "session advisory locks", "LISTEN", "session settings", "session state", "settings ahead of other statements", "prepared statements"}

func (r pinReason) String() string {
	var out []string
	for i, n := range pinReasonNames {
		if r&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return strings.Join(out, ", ")
}

// reasonOf maps route.Statement.SessionState to a pin reason.
func reasonOf(state string) pinReason {
	switch state {
	case "temp":
		return pinTemp
	case "hold-cursor":
		return pinCursor
	case "advisory-lock":
		return pinLock
	case "listen":
		return pinListen
	case "set-config":
		return pinSettings
	case "":
		return 0
	}
	return pinOther
}

// pinOp is a change of a pin's state that a forwarded statement makes,
// applied when the exchange succeeded (afterReady).
type pinOp struct {
	st *route.Statement
	// value, for a Bind of a set_config(name, $n, false) (bound), is $n's
	// value (setconfig.go).
	value string
	bound bool
}

// PinnedSession describes one pinned client session (admin console).
type PinnedSession struct {
	PID    uint32
	User   string
	DB     string
	Shard  string
	Reason string
	Since  time.Time
}

// poolMode is user's pool mode (the user's own, else the server's).
func (g *GenerationEnv) poolMode(user string) PoolMode {
	for _, u := range g.Config.UserPoolModes {
		if u.Name == user {
			return u.Mode
		}
	}
	if g.Config.PoolMode == PoolModeDefault {
		return PoolTransaction
	}
	return g.Config.PoolMode
}

// pinTrigger returns the reason a statement pins a session in
// transaction pooling (0 = none). inMulti: it is part of a query string
// with other statements; inTxn: a transaction block is open.
func pinTrigger(a *route.Statement, inMulti, inTxn bool) pinReason {
	switch a.Kind {
	case route.KindUnsupported:
		if a.SetConfig != nil && !inMulti && !inTxn { // its Bind's value: keepsSetConfig
			return 0 // kept as a session setting (setconfig.go)
		}
		return reasonOf(a.SessionState)
	case route.KindSetSession:
		if strings.HasPrefix(strings.ToLower(a.SetName), "pgshard.") {
			return 0
		}
		if _, refused := refusedSettings[strings.ToLower(a.SetName)]; refused || inMulti || inTxn {
			return pinSettings
		}
	case route.KindDiscard, route.KindPrepare, route.KindExecute, route.KindDeallocate:
		if inMulti {
			return pinSettings
		}
	}
	return 0
}

// pinTriggerOf is pinTrigger with what the generation's database allows:
// on one shard SQL-level PREPARE pins too (elsewhere the proxy routes each
// EXECUTE by its arguments, which needs its own prepared statements).
func (g *GenerationEnv) pinTriggerOf(a *route.Statement, inMulti, inTxn bool) pinReason {
	if a.Kind == route.KindPrepare && len(g.Pools) == 1 {
		return pinPrepare
	}
	return pinTrigger(a, inMulti, inTxn)
}

// pinner is the pin's life on a session: pinning it (at startup, before a
// query or a pipeline, on a shard), recording and publishing the pin,
// applying what the pinned backend ran to it and ending it. It holds the
// session explicitly (as exchanger does) and is made where it is needed
// (pinning); the pin's own state is Session.own (ownbackend.go).
type pinner struct {
	s *Session
}

// pinning is s's pinner.
func pinning(s *Session) pinner { return pinner{s} }

// pinForQuery pins the session before a simple query when one of its
// statements needs it (or the session pools by session). It returns an
// error to answer instead of the query, nil to go on (pinned or not).
func (p pinner) pinForQuery(ctx context.Context, as []*route.Statement) *pgwire.Error {
	s := p.s
	if s.own != nil {
		return nil
	}
	var why pinReason
	var temps []string
	multi := len(as) > 1
	if multi {
		local, other := false, false
		for _, a := range as {
			if localKind(a.Kind) && a.Kind != route.KindEmpty || a.Kind == route.KindSetLocal && strings.HasPrefix(a.SetName, "pgshard.") {
				local = true
			} else if a.Kind != route.KindEmpty {
				other = true
			}
		}
		multi = local && other
	}
	for _, a := range as {
		if r := s.gen.pinTriggerOf(a, multi, s.txn.tx != txIdle); r != 0 {
			if releasesOnly(a) && s.txn.tx == txIdle {
				// It ends the state it names (pg_advisory_unlock_all()):
				// a server session of its own for this query only.
				r = pinSetsOnce
			}
			why |= r
			temps = append(temps, a.TempTables...)
			if a.Kind == route.KindPrepare {
				temps = append(temps, "\x00prepare\x00"+a.PrepareName)
			}
		}
	}
	if why&^pinSetsOnce == pinSettings && s.txn.tx == txIdle {
		if _, leads := s.gen.setsLeadRead(as); leads {
			// Session settings ahead of a read of every shard: they lead
			// it on every shard as SET LOCAL, and the proxy keeps them
			// after it (fanlead.go).
			why = 0
		} else if multi && !sqlPrepared(as) {
			// Only settings in a query string with other statements,
			// ahead of them (they apply to them) or after them (they take
			// effect only if the whole string does, as in its implicit
			// transaction: asyncpg's pool resets each connection it takes
			// back with "SELECT pg_advisory_unlock_all(); CLOSE ALL;
			// UNLISTEN *; RESET ALL"): one server session for this query,
			// on the query's shard; the proxy keeps the settings after it
			// (applyPinOps).
			why = pinSetsOnce
		}
	}
	if why == 0 && len(as) == 1 && as[0].NoTxnBlock && s.txn.tx == txIdle && s.bc == nil {
		// A statement that cannot run in a transaction block (VACUUM,
		// CREATE TABLESPACE, ...) cannot get the client's settings from
		// a transaction-local preamble: through a pooler it runs on a
		// server session of its own, opened with them.
		if _, pre := s.cur.Split(true); len(pre.KV) > 0 && s.gen.Pools[s.gen.DefaultShard].ViaPooler {
			why = pinSetsOnce
		}
	}
	if s.gen.poolMode(s.user) == PoolSession {
		why |= pinSessionMode
	}
	if why == 0 {
		return nil
	}
	shard := -1
	if why&(pinSessionMode|pinSetsOnce) != 0 {
		shard = s.gen.firstShard(as)
	}
	own, e := stateShard(s, as) // pinroute.go
	if e != nil {
		return e
	}
	return p.pinOn(ctx, shard, own, why, temps)
}

// sqlPrepared reports whether a query string uses SQL-level prepared
// statements (PREPARE, EXECUTE, DEALLOCATE): the server session they run
// on keeps them, so a pin for them lasts (pinSettings), not only for the
// query (pinSetsOnce), which would lose a PREPARE with its session.
func sqlPrepared(as []*route.Statement) bool {
	for _, a := range as {
		switch a.Kind {
		case route.KindPrepare, route.KindExecute, route.KindDeallocate:
			return true
		}
	}
	return false
}

// releasesOnly reports whether a ends the session state it names, all of
// it, and makes none (a call of pg_advisory_unlock_all()): it needs a
// server session of its own to run on, but leaves nothing to pin after it.
func releasesOnly(a *route.Statement) bool {
	return a.Kind == route.KindUnsupported && a.Releases != "" && a.Releases == a.SessionState
}

// pinForPipeline is pinForQuery for a buffered extended-protocol
// pipeline: the statements it parses or binds.
func (p pinner) pinForPipeline(ctx context.Context) *pgwire.Error {
	s := p.s
	if s.own != nil {
		return nil
	}
	var why pinReason
	var temps []string
	var pv pgwire.ParseView
	bv := &s.bv // scratch: the planner decodes each Bind again
	var sets, others, nonFan bool
	// parsed is the unnamed statement an unnamed Bind binds (the last
	// Parse's, or one parsed before the pipeline); own the shard of the
	// statements that keep session state (pinroute.go).
	var parsed *route.Statement
	var parsedOids []uint32
	if s.unnamed != nil {
		parsed, parsedOids = s.unnamed.st, s.unnamed.oids
	}
	own := -1
	var err2 *pgwire.Error
	for _, m := range s.grp {
		var a *route.Statement
		var params [][]byte // a Bind's, for keepsSetConfig
		var poids []uint32
		switch m.typ {
		case 'P':
			if pv.Decode(m.raw) != nil {
				return nil
			}
			st, err := s.gen.Config.Analyzer.AnalyzeBytes(pv.Query)
			if err != nil {
				return nil
			}
			a = st
			if len(pv.Name) == 0 {
				parsed, parsedOids = st, nil
				if keepsState(st) {
					parsedOids = slices.Clone(pv.Oids) // pv's are reused; only these are read
				}
			}
			if keepsState(st) {
				if st.NumParams > 0 {
					// Its rows' shard is its Bind's to say (pgx describes
					// a statement in a pipeline of its own, then binds it):
					// the Bind pins it.
					a = nil
				} else if own, err2 = stateShardOf(s, own, st, nil, nil, pv.Oids); err2 != nil {
					return err2
				}
			}
		case 'B':
			if bv.Decode(m.raw) != nil {
				return nil
			}
			bound, oids := boundStatement(s, bv, parsed, parsedOids)
			if poids = oids; len(bv.Stmt) > 0 {
				a = bound
			}
			if bound != nil && keepsState(bound) {
				a, params, poids = bound, bv.Params, oids
				if own, err2 = stateShardOf(s, own, bound, bv.Params, bv.Formats, oids); err2 != nil {
					return err2
				}
			}
		}
		if a == nil {
			continue
		}
		// A set_config(..., false) with a text value is a session setting
		// the proxy keeps, like a SET (setconfig.go); else it pins.
		keep := keepsSetConfig(a, params, poids)
		if r := s.gen.pinTriggerOf(a, a.SetConfig != nil && !keep, s.txn.tx != txIdle); r != 0 {
			why |= r
			temps = append(temps, a.TempTables...)
		}
		switch {
		case a.Kind == route.KindSetSession && !strings.HasPrefix(strings.ToLower(a.SetName), "pgshard."), keep:
			sets = true
		case sets && !localKind(a.Kind) && !txnControl(a.Kind):
			others = true
			nonFan = nonFan || !s.gen.plainFanRead(a, m.typ == 'B', bv, poids)
		}
	}
	if sets && others && nonFan && why == 0 && s.txn.tx == txIdle {
		// A session SET ahead of other statements applies to them, as on
		// one server session (ahead of a read of every shard: fanlead.go).
		why = pinSetsOnce
	}
	if s.gen.poolMode(s.user) == PoolSession {
		why |= pinSessionMode
	}
	if why == 0 {
		return nil
	}
	shard := -1
	if why&(pinSessionMode|pinSetsOnce) != 0 {
		shard = p.pipelineShard()
	}
	return p.pinOn(ctx, shard, own, why, temps)
}

// boundStatement is the statement a Bind (decoded in bv) binds, with its
// declared parameter types: a named one's, or parsed (the unnamed one).
func boundStatement(s *Session, bv *pgwire.BindView, parsed *route.Statement, parsedOids []uint32) (*route.Statement, []uint32) {
	if len(bv.Stmt) == 0 {
		return parsed, parsedOids
	}
	if vs := s.stmts[string(bv.Stmt)]; vs != nil {
		return vs.st, vs.oids
	}
	return nil, nil
}

// plainFanRead reports whether a, a Parse's statement or (bound) the one
// a Bind decoded in bv binds (oids its parameter types), is a read of
// every shard the proxy merges, known without a parameter's value.
func (g *GenerationEnv) plainFanRead(a *route.Statement, bound bool, bv *pgwire.BindView, oids []uint32) bool {
	if !fanRead(a) || !bound && a.NumParams > 0 {
		return false
	}
	var d route.Dest
	if bound {
		d = g.Config.Analyzer.Route(a, bv.Params, bv.Formats, oids)
	} else {
		d = g.Config.Analyzer.Route(a, nil, nil, oids)
	}
	return d.Kind == route.DestAll && d.Merge != nil
}

// keepsState reports whether a is refused in transaction pooling for the
// session state it keeps, which pins the session (on the shard its rows
// are on: pinroute.go).
func keepsState(a *route.Statement) bool {
	return a.Kind == route.KindUnsupported && a.SessionState != ""
}

// pipelineShard is the shard of the first Bind of the buffered pipeline
// (s.grp) whose statement routes to one shard, -1 when none does. Only a
// pin that needs a shard asks (pinForPipeline): most pipelines pin nothing
// and are routed once, by their planner.
func (p pinner) pipelineShard() int {
	s := p.s
	bv := &s.bv
	for _, m := range s.grp {
		if m.typ != 'B' || bv.Decode(m.raw) != nil {
			continue
		}
		vs := s.unnamed
		if len(bv.Stmt) > 0 {
			vs = s.stmts[string(bv.Stmt)]
		}
		if vs == nil {
			continue
		}
		if d := s.gen.adjustDest(vs.st, s.gen.Config.Analyzer.Route(vs.st, bv.Params, bv.Formats, vs.oids)); d.Kind == route.DestShard {
			return d.Shard
		}
	}
	return -1
}

// pinTo pins the session on shard (-1: the transaction's, the hint's or
// the default shard). A transaction already running on a pooled
// connection through a pooler cannot move to a server session of its
// own: the statement is then refused as before (nil is returned and the
// session stays unpinned; the planner refuses it).
func (p pinner) pinTo(ctx context.Context, shard int, why pinReason, temps []string) *pgwire.Error {
	s := p.s
	srv := s.gen
	if shard < 0 {
		switch {
		case s.bc != nil:
			shard = s.txn.shard
		case s.txn.hint >= 0:
			shard = s.txn.hint
		default:
			shard = srv.DefaultShard
		}
	}
	if why&pinSessionMode == 0 {
		if max := srv.Config.MaxPinned; max > 0 && s.host.NPinned.Load() >= int64(max) {
			srv.Metrics.Refusals.WithLabelValues("max_pinned").Inc()
			return &pgwire.Error{Code: pgwire.CodeTooManyConnections,
				Message: fmt.Sprintf("too many pinned sessions (%d, proxy.max_pinned): this statement needs a server session of its own (%s)", max, why),
				Hint:    "End the session state of other clients (DISCARD ALL, DROP of temporary tables, UNLISTEN *), or raise proxy.max_pinned."}
		}
	}
	if s.readers.any() {
		return nil // a transaction reading several shards: refused as before
	}
	if s.bc != nil && s.bc.Pool.ViaPooler && s.txn.soft && s.txn.tx == txBound {
		// Only table-less reads ran: roll back and replay the start of
		// the transaction on the pinned backend, as a soft move does.
		res, err := s.bc.RunSimple(ctx, srv.Config.PoolTimeout, "ROLLBACK")
		s.dropBackend(err == nil && len(res) == 1 && res[0].Status == 'I')
		s.txn.soft, s.txn.tx = false, txDeferred
	}
	switch {
	case s.bc != nil && s.bc.Pool.ViaPooler:
		srv.Metrics.Refusals.WithLabelValues("pinned").Inc()
		return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: fmt.Sprintf("this statement needs a server session of its own (%s), but its transaction already runs on a pooled connection (PgBouncer), which cannot become one", why),
			Hint:    "Run it at the start of the transaction, or outside a transaction block: pgshard then pins the session to a backend of its own."}
	case s.bc != nil:
		// A direct backend in a transaction (or mid-pipeline): it becomes
		// the client's own.
		p.setPin(shard, why, temps)
		return nil
	}
	if e := srv.Pools[shard].IsDown(); e != nil {
		return e
	}
	pool := srv.Ops.DirectPool(shard)
	bc, err := pool.AcquireAs(ctx, s.startup, pinnedBackendUser)
	if err != nil {
		if be, ok := err.(*backend.PgError); ok {
			return pgErrorToError(be.PgErr, "ERROR")
		}
		return pgwire.AsError(err, pgwire.NewError(pgwire.CodeCannotConnect, fmt.Sprintf("shard %q: %v", pool.Shard.Name, err)))
	}
	var qs []string
	if q := sessionReplaySQL(s.startup, s.cur); q != "" {
		qs = append(qs, q)
	}
	if s.txn.tx == txDeferred {
		qs = append(qs, replaySQL(s.txn.deferred, backend.NoSettings))
	}
	if len(qs) > 0 {
		res, err := bc.RunSimple(ctx, srv.Config.PoolTimeout, qs...)
		if err != nil {
			pool.Discard(bc)
			return pgwire.NewError(pgwire.CodeConnectionFailure, fmt.Sprintf("pinning the session on shard %q failed: %v", pool.Shard.Name, err))
		}
		for _, r := range res {
			if r.ErrRaw != nil {
				pool.Discard(bc)
				e := pgwire.DecodeError(r.ErrRaw)
				if e == nil {
					e = pgwire.NewError(pgwire.CodeInternalError, "undecodable error from a shard")
				}
				return e
			}
		}
		if s.txn.tx == txDeferred {
			s.txn.tx, s.txn.bstatus = txBound, res[len(res)-1].Status
			if s.txn.hint >= 0 {
				s.txn.hintBound = true
			}
			s.txn.hint = -1
		}
	}
	s.setBackend(bc)
	s.txn.shard = shard
	p.setPin(shard, why, temps)
	return nil
}

// pinnedBackendUser is the user a pinned backend connects as ("" = what
// its startup settings say: the client's own for a client admitted
// through the "*" login, else the shard DSN's).
const pinnedBackendUser = ""

// setPin records the pin (the backend is s.bc) and publishes it
// (Registry.Pinned).
func (p pinner) setPin(shard int, why pinReason, temps []string) {
	s := p.s
	if s.own == nil {
		s.own = &ownBackend{shard: shard, since: time.Now()}
		s.host.NPinned.Add(1)
		s.txn.soft = false
		s.txn.wrapped = false
	}
	s.own.add(why, temps)
	s.host.PinsTotal.WithLabelValues(why.String()).Inc()
	publishPin(s)
}

// publishPin publishes s's pin as it stands (Registry.Pinned, the
// console's SHOW CLIENTS): again whenever its reasons change.
func publishPin(s *Session) {
	s.pinnedAs.Store(&PinnedSession{PID: s.pid, User: s.user, DB: s.db, Shard: s.gen.shardName(s.own.shard), Reason: s.own.reasons.String(), Since: s.own.since})
}

// clearPin forgets the pin (its backend is being dropped or closed).
func (p pinner) clearPin() {
	s := p.s
	if s.own == nil {
		return
	}
	s.own = nil
	s.host.NPinned.Add(-1)
	s.pinnedAs.Store(nil)
}

// unpin ends a pin whose state is gone: the backend, which carries the
// client's session state, is closed; the session goes back to pooled
// backends with the settings it has now.
func (p pinner) unpin() {
	s := p.s
	p.clearPin()
	s.mu.Lock()
	bc := s.bc
	s.bc = nil
	s.mu.Unlock()
	if bc != nil {
		bc.Pool.Discard(bc)
	}
}

// sessionReplaySQL is the statement that gives a fresh backend opened with
// startup the session settings cur ("" when they are the same).
func sessionReplaySQL(startup, cur *backend.Settings) string {
	var kv [][2]string
	for _, p := range cur.KV {
		if v, ok := startup.Get(p[0]); !ok || v != p[1] {
			kv = append(kv, p)
		}
	}
	if len(kv) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, p := range kv {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("pg_catalog.set_config(")
		backend.WriteEscapeLiteral(&b, p[0])
		b.WriteString(", ")
		backend.WriteEscapeLiteral(&b, p[1])
		b.WriteString(", false)")
	}
	return b.String()
}

// notePinOp records, for a statement sent to a pinned backend, how it
// changes the pin (applied if the exchange succeeds).
func (p *planner) notePinOp(a *route.Statement) {
	if p.s.own == nil {
		return
	}
	switch a.Kind {
	case route.KindSetSession, route.KindDiscard, route.KindDeallocate, route.KindPrepare, route.KindUnsupported, route.KindDDL, route.KindOther:
		p.pinOps = append(p.pinOps, pinOp{st: a})
	}
}

// applyPinOps applies the pin changes of a successful exchange (the
// session's settings and statements here, the pin's reasons in
// ownBackend.apply) and ends the pin when its state is gone (the session
// is idle).
func (p pinner) applyPinOps(ops []pinOp, idle bool) {
	s := p.s
	if s.own == nil {
		return
	}
	for _, op := range ops {
		a := op.st
		switch a.Kind {
		case route.KindSetSession:
			name := strings.ToLower(a.SetName)
			switch {
			case name == "all":
				s.cur = s.startup
			case a.ToDefault:
				if v, ok := s.startup.Get(name); ok {
					s.cur = s.cur.With(name, v)
				} else {
					s.cur = s.cur.Without(name)
				}
			case a.SetValue != "" && !strings.Contains(name, " "):
				s.cur = s.cur.With(name, a.SetValue)
			}
		case route.KindDiscard:
			if strings.EqualFold(a.SetName, "all") {
				s.cur = s.startup
				clear(s.stmts)
				s.unnamed = nil
				p.resetStmtCache()
			}
		case route.KindPrepare:
			p.keepPrepared(a) // pinstmts.go
		case route.KindDeallocate:
			if a.PrepareName == "" {
				clear(s.stmts)
				p.resetStmtCache()
			} else {
				delete(s.stmts, a.PrepareName)
			}
		case route.KindUnsupported:
			if sc := a.SetConfig; sc != nil && (sc.Param == 0 || op.bound) {
				// A set_config(name, value, false) is kept as SET name =
				// value is; once its transaction has ended it needs no
				// pin (setconfig.go).
				v := sc.Value
				if op.bound {
					v = op.value
				}
				s.cur = s.cur.With(sc.Name, v)
				if idle {
					continue
				}
			}
		}
		s.own.apply(a)
	}
	if s.own.settle(idle) {
		p.unpin()
	} else if len(ops) > 0 {
		publishPin(s) // its reasons may have changed (a lock released, ...)
	}
}

// resetStmtCache forgets the pinned backend's server-side statements
// (DISCARD ALL and DEALLOCATE ALL dropped them on the server).
func (p pinner) resetStmtCache() {
	s := p.s
	if s.bc != nil && s.bc.Stmts != nil {
		s.bc.Stmts = backend.NewStmtCache(s.gen.Config.StatementCacheSize)
		s.bc.Stmts.Epoch = s.gen.StmtEpoch.Load()
	}
}

// watched is the pinned backend whose asynchronous messages reach the
// client while the session waits for the client's next message
// (clientConn.readWatching): a pinned session that listens (or pools by
// session), idle, with nothing buffered; nil otherwise.
func (p pinner) watched() *backend.Conn {
	s := p.s
	if s.own == nil || s.own.reasons&(pinListen|pinSessionMode) == 0 || s.bc == nil || len(s.grp) > 0 || s.txn.tx != txIdle || s.txn.pipelineHeld {
		return nil
	}
	return s.bc
}

// pinAtStartup pins a session-pooling client on a one-shard map at once;
// it returns the backend's ParameterStatus values (nil: not pinned).
func (p pinner) pinAtStartup(ctx context.Context) (map[string]string, *pgwire.Error) {
	s := p.s
	if s.gen.poolMode(s.user) != PoolSession || len(s.gen.Pools) != 1 {
		return nil, nil
	}
	if e := p.pinTo(ctx, 0, pinSessionMode, nil); e != nil {
		e.Severity = "FATAL"
		return nil, e
	}
	if s.bc == nil {
		return nil, nil
	}
	s.host.Clients.rekey(s, s.bc.PID, s.bc.Secret)
	return maps.Clone(s.bc.Statuses), nil
}

// pinnedMulti runs a query string of several statements in a pinned
// session: as it is, on the pinned backend, if every statement may run
// there (Postgres then runs it exactly as on a direct connection).
//
// A string of DDL statements that all change every shard's schema (a
// migration file, `DROP TYPE IF EXISTS t; CREATE TYPE t ...`) runs as it
// does in a session without state: on every shard, the pinned backend
// left idle (router.pinned fans such DDL out on pooled connections).
func (p queryPlanner) pinnedMulti(msg []byte, as []*route.Statement) {
	s := p.planner.s
	fans := 0 // DDL statements router.pinned fans out on pooled connections
	for _, a := range as {
		if txnControl(a.Kind) || a.Kind == route.KindEmpty {
			continue
		}
		d := pinAdjust(s, a, s.gen.Config.Analyzer.Route(a, nil, nil, nil))
		d, e := pinnedForwardDest(p.planner, a, d, nil, nil, nil) // pinroute.go
		ok := false
		if e == nil {
			ok, e = p.planner.pinnedRoute(a, d)
		}
		if e == nil && !ok {
			switch {
			case d.Kind == route.DestRefuse && d.Refusal != nil:
				e = refusalError(d.Refusal)
			case a.Kind == route.KindDDL && d.Kind == route.DestAll:
				fans++
				continue
			default:
				e = everyShardCombined()
			}
		}
		if e != nil {
			p.planner.fail(e, nil)
			p.endQuery()
			return
		}
	}
	switch {
	case fans == len(as):
		p.multiEveryShard(msg, as, p.multiShapeOf(as))
		return
	case fans > 0:
		p.planner.fail(everyShardCombined(), nil)
		p.endQuery()
		return
	}
	if e := p.planner.exec().ensureBackend(s.own.shard, as[0]); e != nil {
		p.planner.fail(e, nil)
		p.endQuery()
		return
	}
	for _, a := range as {
		p.planner.notePinOp(a)
	}
	p.planner.plan.bw = append(p.planner.plan.bw, msg...)
	p.planner.plan.items = append(p.planner.plan.items, item{kind: itQuery, flags: p.planner.queryFlags()})
	p.endQuery()
}

// everyShardCombined refuses a pinned session's query string in which a
// statement for every shard comes with statements for its backend.
func everyShardCombined() *pgwire.Error {
	return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: "a statement that runs on every shard cannot be combined with other statements in a query string",
		Hint:    "Send it as a separate query."}
}

// canRelay reports whether the session's protocol can be relayed as it
// is: a session-pooling client pinned at startup on a database of one
// shard, where no statement needs routing.
func (p pinner) canRelay() bool {
	s := p.s
	return s.own != nil && s.own.reasons&pinSessionMode != 0 && len(s.gen.Pools) == 1 && s.bc != nil && !s.bc.Pool.ViaPooler
}
