package engine

// Session SET / RESET: a client's session settings are kept by the proxy
// (internal/backend/clientsettings.go) and validated by running them on a shard inside a
// transaction that is rolled back; the settings that the preamble applies
// are validated once per set, as Postgres validates startup parameters.

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// refusedSettings cannot be changed through a transaction pooler.
var refusedSettings = map[string]string{
	"role":                    "SET ROLE",
	"session_authorization":   "SET SESSION AUTHORIZATION",
	"transaction":             "SET SESSION CHARACTERISTICS",
	"session characteristics": "SET SESSION CHARACTERISTICS",
}

// setSessionAction handles a session SET / RESET: the proxy records the
// setting in the client's settings (never on a pooled backend) and applies
// it to each of the client's transactions from then on. A SET of a value
// is validated on a shard first: the action's step (stepProbeSet), which
// the executor runs (backendExec.probeSet).
func (p *planner) setSessionAction(a *route.Statement) action {
	s := p.s
	st := a
	name := strings.ToLower(st.SetName)
	if p.sim.tx != txIdle || p.held {
		return p.failLocal(errSessionSetInTxn())
	}
	if strings.HasPrefix(name, "pgshard.") {
		return action{err: &pgwire.Error{Code: pgwire.CodeFeatureNotSupported, Message: name + " is transaction-local: use SET LOCAL " + name + " inside a transaction"}}
	}
	if what, ok := refusedSettings[name]; ok {
		s.gen.Metrics.Refusals.WithLabelValues("unsupported").Inc()
		return action{err: &pgwire.Error{Code: pgwire.CodeFeatureNotSupported, Message: what + " is not supported by pgshard: backend connections are shared and authenticated once"}}
	}
	tag := "SET"
	if st.Reset {
		tag = "RESET"
	}
	if name == "all" {
		return action{tag: "RESET", eff: &effect{kind: effSettings, set: s.startup, rep: s.ps.startupReported}}
	}
	if st.ToDefault {
		cur, reported := settingsNow(p)
		set := cur.Without(name)
		if v, ok := s.startup.Get(name); ok {
			set = cur.With(name, v)
		}
		rep := reported
		if canon, ok := backend.ReportedParams[name]; ok {
			rep = maps.Clone(reported)
			if v, ok := s.ps.startupReported[canon]; ok {
				rep[canon] = v
			}
		}
		return action{tag: tag, eff: &effect{kind: effSettings, set: set, rep: rep}}
	}
	step := &actionStep{kind: stepProbeSet, st: a, name: name, tag: tag}
	if p.onBackend { // taken by this pipeline (p.held is false here)
		step.on = p.bc
	}
	return action{tag: tag, step: step}
}

// errSessionSetInTxn refuses a session setting planned inside a
// transaction block (one that reaches the planner: a session pins for
// it first, pinTrigger).
func errSessionSetInTxn() *pgwire.Error {
	return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: "a session-level SET or RESET inside a transaction block is not supported by pgshard",
		Hint:    "Use SET LOCAL inside the transaction, or SET before BEGIN."}
}

// probeSet runs a session SET's validation (stepProbeSet) and answers
// with what the shard said: the setting's canonical value in the
// client's settings, or Postgres's error.
func (p backendExec) probeSet(st *actionStep) action {
	return probeAction(p.planner, st, probeStep(p.planner.ctx, p.planner.s, st))
}

// settingsNow is the session's settings and the parameters its client was
// told, as the plan has them so far: after the last settings change
// planned before (a query string or pipeline may set several, each on top
// of the one before), else the session's own.
func settingsNow(p *planner) (*backend.Settings, map[string]string) {
	for i := len(p.plan.items) - 1; i >= 0; i-- {
		if e := p.plan.items[i].eff; e != nil && e.kind == effSettings {
			return e.set, e.rep
		}
	}
	return p.s.cur, p.s.ps.reported
}

// probeRead is what a session SET's probe read: the setting's value,
// the ParameterStatus messages the backend sent, the shard's error (raw)
// or the proxy's (err).
type probeRead struct {
	value    string
	statuses [][2]string
	raw      []byte
	err      *pgwire.Error
}

// probeStep runs step st's probe (probeSet): on its backend, or any shard's.
func probeStep(ctx context.Context, s *Session, st *actionStep) probeRead {
	sql := st.st.SQL
	if st.cfg != nil {
		sql = st.cfg.probeSQL() // set_config(name, value, false): setconfig.go
	}
	var r probeRead
	r.value, r.statuses, r.raw, r.err = s.probeSet(ctx, sql, st.name, st.on)
	return r
}

// probeAction is the answer to a session SET whose probe read r: its
// error, or its tag and the session's settings (and reported
// parameters) changed, on top of the plan's so far (settingsNow).
func probeAction(p *planner, st *actionStep, r probeRead) action {
	value, statuses, raw, e := r.value, r.statuses, r.raw, r.err
	if e != nil {
		return action{err: e}
	}
	if raw != nil {
		e := pgwire.DecodeError(raw)
		if e == nil {
			e = pgwire.NewError(pgwire.CodeInternalError, "undecodable error from a shard")
		}
		return action{err: e}
	}
	cur, told := settingsNow(p)
	rep := told
	// A reported setting (GUC_REPORT) is reported when its value differs
	// from what the client was last told, as Postgres does. The probe's
	// backend reports only a change of its own value, which a pooled
	// backend may already hold (SET x back to the server default says
	// nothing there), so the value read back decides too.
	canon, reported := backend.ReportedParams[st.name]
	if len(statuses) > 0 || (reported && rep[canon] != value) {
		rep = maps.Clone(told)
		for _, kv := range statuses {
			rep[kv[0]] = kv[1]
		}
		if reported {
			rep[canon] = value
		}
	}
	act := action{tag: st.tag, eff: &effect{kind: effSettings, set: cur.With(st.name, value), rep: rep}}
	if st.cfg != nil {
		act.rows = appendSetConfigRow(nil, st.cfg, value)
	}
	return act
}

// probeSet runs the client's SET (sql) in a transaction that is rolled back, on
// any shard: Postgres validates it (the client gets Postgres's own error)
// and reports the canonical value; nothing stays on the connection.
//
// own is the backend the pipeline or query string already took (nothing
// sent on it yet), or nil: the probe then runs there, because waiting for
// another connection while holding one can wait for itself (the same
// shard's pool being full) or for sessions that wait likewise, until
// PoolTimeout.
func (s *Session) probeSet(ctx context.Context, sql, name string, own *backend.Conn) (string, [][2]string, []byte, *pgwire.Error) {
	probe := []string{"BEGIN", sql, "SELECT pg_catalog.current_setting(" + backend.QuoteLiteral(name) + ")", "ROLLBACK"}
	if own != nil {
		res, err := own.RunSimple(ctx, s.gen.Config.PoolTimeout, probe...)
		if err != nil || len(res) != 4 || res[3].Status != 'I' {
			own.Broken = true
			return "", nil, nil, pgwire.NewError(pgwire.CodeConnectionFailure, fmt.Sprintf("checking the setting on shard %q failed: %v", own.Pool.Shard.Name, err))
		}
		return probeResult(res, name)
	}
	var lastErr error
	first := s.gen.pickAny()
	for k := 0; k < len(s.gen.Pools); k++ {
		pool := s.gen.Pools[(first+k)%len(s.gen.Pools)]
		if pool.IsDown() != nil {
			lastErr = pool.IsDown()
			continue
		}
		key, _ := s.cur.Split(pool.ViaPooler)
		bc, err := pool.Acquire(ctx, key)
		if err != nil {
			lastErr = err
			continue
		}
		res, err := bc.RunSimple(ctx, s.gen.Config.PoolTimeout, probe...)
		if err != nil || len(res) != 4 || res[3].Status != 'I' {
			pool.Discard(bc)
			lastErr = fmt.Errorf("shard %q: %v", pool.Shard.Name, err)
			continue
		}
		pool.Release(bc)
		return probeResult(res, name)
	}
	e := pgwire.AsError(lastErr, pgwire.NewError(pgwire.CodeCannotConnect, fmt.Sprintf("no shard could check the setting: %v", lastErr)))
	return "", nil, nil, e
}

// probeResult reads probeSet's results: the canonical value and the
// ParameterStatus changes, or Postgres's error.
func probeResult(res []backend.SimpleResult, name string) (string, [][2]string, []byte, *pgwire.Error) {
	if res[1].ErrRaw != nil {
		return "", nil, res[1].ErrRaw, nil
	}
	if res[2].ErrRaw != nil {
		return "", nil, res[2].ErrRaw, nil
	}
	if len(res[2].Rows) != 1 || len(res[2].Rows[0]) != 1 {
		return "", nil, nil, pgwire.NewError(pgwire.CodeInternalError, "pgshard could not read back the setting "+name)
	}
	return string(res[2].Rows[0][0]), res[1].Statuses, nil, nil
}
