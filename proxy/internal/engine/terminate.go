package engine

// pg_terminate_backend / pg_cancel_backend of a client session's PID, and
// SELECT pg_backend_pid() (the session's PID, unless it is pinned).
//
// A client's BackendKeyData PID is the proxy's key for its session (a
// backend's real PID only for a session pinned at startup): no backend has
// it. Tools and drivers end or cancel another session with
// pg_terminate_backend(pid) / pg_cancel_backend(pid) of that PID; sent to
// a shard it would find no such process (or, worse, another one). So the
// proxy answers the common forms itself when every PID named is one of
// its sessions — `SELECT pg_terminate_backend(PID | $1)` and
// `SELECT pg_terminate_backend(n) FROM unnest($1::int[]) n`, and
// `pg_terminate_backend(pg_backend_pid())`, the caller's own session (the
// backend's PID is not the session's: a pooled backend's death would
// not end the client's session) — ending that
// session as Postgres would (FATAL 57P01 to its client, then the
// connection closed) or cancelling its running query, and returning true
// per PID. Any other form, or a PID that is not a session's, goes to the
// backend as it is. The forms are recognized by the analyzer, from the
// statement's parse tree (route.Terminate, proxy/route/terminate.go);
// here the PIDs are read from the call's constant or Bind parameter,
// whether every one is a session's is decided without I/O (resolve: the
// session register), and the call itself is the I/O step the executor
// takes (stepTerminate, carryOut) before the answer is sent.

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// terminateCall is a recognized call: the function and the PIDs.
type terminateCall struct {
	fn   string // "terminate", "cancel" or "pid" (pg_backend_pid())
	pids []uint32
	// own: SELECT pg_backend_pid(); pids then holds the session's PID.
	own bool
	// column is the result column's name.
	column string
	// self: pg_terminate_backend of the calling session's own PID
	// (pg_backend_pid(), or its number: resolve).
	self bool
	// binary: the client asked for its result in binary.
	binary bool
	// targets are the sessions the PIDs name, in order (resolve): what
	// the executor's step ends or cancels (carryOut).
	targets []*Session
}

// parseTerminate reads the call the analyzer recognized in st
// (route.Terminate) with its Bind params (nil for a simple query); nil
// when st is not one or a value cannot be read.
func parseTerminate(st *route.Statement, params [][]byte, formats []int16) *terminateCall {
	t := st.Terminate
	if t == nil {
		return nil
	}
	c := &terminateCall{fn: t.Fn(), column: t.Column}
	switch {
	case t.Own:
		c.own = true
	case t.Self:
		if t.Cancel {
			return nil // the backend running it cancels itself, as Postgres does
		}
		c.self = true
	case t.Param == 0:
		if t.PID > 1<<32-1 {
			return nil
		}
		c.pids = []uint32{uint32(t.PID)}
	default:
		if t.Param > len(params) || params[t.Param-1] == nil {
			return nil
		}
		v, f := params[t.Param-1], pgwire.FormatAt(formats, t.Param-1)
		if t.Array {
			pids, ok := readPIDArray(v, f)
			if !ok || len(pids) == 0 {
				return nil
			}
			c.pids = pids
		} else {
			pid, ok := readPID(v, f)
			if !ok {
				return nil
			}
			c.pids = []uint32{pid}
		}
	}
	return c
}

func readPID(v []byte, format int16) (uint32, bool) {
	if format == 1 {
		switch len(v) {
		case 4:
			return binary.BigEndian.Uint32(v), true
		case 8:
			n := binary.BigEndian.Uint64(v)
			return uint32(n), n <= 1<<32-1
		case 2:
			return uint32(binary.BigEndian.Uint16(v)), true
		}
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(v)), 10, 32)
	return uint32(n), err == nil
}

// readPIDArray reads a one-dimensional integer array parameter in text
// ({1,2}) or binary form.
func readPIDArray(v []byte, format int16) ([]uint32, bool) {
	if format != 1 {
		s := strings.TrimSpace(string(v))
		if !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") {
			return nil, false
		}
		var out []uint32
		for _, f := range strings.Split(s[1:len(s)-1], ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
			if err != nil {
				return nil, false
			}
			out = append(out, uint32(n))
		}
		return out, true
	}
	ndim, _, elems, ok := pgvalue.DecodeArray(v)
	if !ok || ndim > 1 {
		return nil, false
	}
	var out []uint32
	for _, e := range elems {
		if e == nil {
			return nil, false
		}
		pid, ok := readPID(e, 1)
		if !ok {
			return nil, false
		}
		out = append(out, pid)
	}
	return out, true
}

// resolve decides, without I/O, whether the call made by session s is
// the proxy's: every PID one of its sessions' (the self form names s's
// own). The answer comes from the session register (a lookup in
// memory), and the sessions found are recorded (targets) for the step
// that does the call (carryOut). False: not ours, send it on.
func (c *terminateCall) resolve(s *Session) bool {
	if c.own {
		// A session with a backend of its own (pinned) asks that backend,
		// as on a direct connection: its NOTIFYs carry that PID, and its
		// views (pg_stat_activity, pg_locks) show it. Any other session's
		// backend changes from transaction to transaction: the proxy
		// answers with the session's PID.
		if s.own != nil {
			return false
		}
		c.pids = []uint32{s.pid}
		return true
	}
	if c.self {
		c.pids = []uint32{s.pid}
	}
	c.targets = make([]*Session, 0, len(c.pids))
	for _, pid := range c.pids {
		t := s.host.Clients.byPID(pid)
		if t == nil {
			c.targets = nil
			return false
		}
		c.targets = append(c.targets, t)
		if t == s && c.fn == "terminate" {
			// The caller's own PID, however it was written (a literal, a
			// parameter: psycopg's conn.pgconn.backend_pid): as in
			// Postgres, whose backend signals itself, the statement is
			// interrupted — its answer is the FATAL, not a row.
			c.self = true
		}
	}
	return true
}

// terminateAction is the plan of a call resolve found to be the
// proxy's: its I/O is the action's step (stepTerminate), which the
// executor takes (backendExec.take) before the answer is sent. The
// self form's answer is its FATAL (the statement itself is
// interrupted); any other's is one "t" per PID (appendTerminateResult),
// which the caller plans.
func terminateAction(c *terminateCall) action {
	var act action
	if !c.own { // pg_backend_pid() is answered without a step
		act.step = &actionStep{kind: stepTerminate, term: c}
	}
	if c.self {
		act.err = errSelfTerminated()
	}
	return act
}

// carryOut does the call session s made (the I/O of stepTerminate):
// each target's running query is cancelled, or its session ended; s's
// own session ends with the FATAL as the statement's answer
// (terminateSelf, selfFatalSent: the self form).
func (c *terminateCall) carryOut(ctx context.Context, s *Session) {
	for _, t := range c.targets {
		if c.fn == "cancel" {
			t.cancelBackend(ctx)
			continue
		}
		if t == s {
			s.terminateSelf = true // c.self: the FATAL is the answer
			continue
		}
		terminateSession(t)
	}
	if c.self {
		s.selfFatalSent = true
	}
}

// errSelfTerminated is what a session that terminated itself gets.
func errSelfTerminated() *pgwire.Error {
	return &pgwire.Error{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}
}

// terminateSession ends session t as pg_terminate_backend does: FATAL
// 57P01 to its client, then its connection is closed (its goroutine then
// ends and releases what it holds).
func terminateSession(t *Session) {
	msg := pgwire.AppendError(nil, &pgwire.Error{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"})
	t.cc.writeFrom(msg)
	t.closeClient()
}

// appendTerminateResult appends the result of a recognized call: one bool
// column, one "t" row per PID — or, for pg_backend_pid(), one integer
// row, the session's PID.
func appendTerminateResult(dst []byte, c *terminateCall, describe bool) []byte {
	if describe {
		dst = appendTerminateDesc(dst, c)
	}
	if c.own {
		v := []byte(strconv.FormatUint(uint64(c.pids[0]), 10))
		if c.binary {
			v = binary.BigEndian.AppendUint32(nil, c.pids[0])
		}
		dst = pgwire.AppendDataRow(dst, [][]byte{v})
		return pgwire.AppendCommandComplete(dst, "SELECT 1")
	}
	v := []byte("t")
	if c.binary {
		v = []byte{1}
	}
	for range c.pids {
		dst = pgwire.AppendDataRow(dst, [][]byte{v})
	}
	return pgwire.AppendCommandComplete(dst, "SELECT "+strconv.Itoa(len(c.pids)))
}

// appendTerminateDesc appends the RowDescription Postgres gives c's
// statement: one column, bool (the calls) or integer (pg_backend_pid).
func appendTerminateDesc(dst []byte, c *terminateCall) []byte {
	oid, size := uint32(16), int16(1) // bool
	if c.own {
		oid, size = 23, 4 // int4
	}
	return pgvalue.AppendRowDesc(dst, []pgvalue.Field{{Name: c.column, OID: oid, Typlen: size, Typmod: -1, Format: formatCode(c.binary)}})
}

// terminateSimple answers session s's simple query (its statements as)
// when it is a recognized call of our sessions' PIDs; false: not one.
func terminateSimple(ctx context.Context, s *Session, as []*route.Statement) bool {
	if len(as) != 1 || as[0].Kind != route.KindOther || s.txn.tx == txFailed {
		return false
	}
	c := parseTerminate(as[0], nil, nil)
	if c == nil || !c.resolve(s) {
		return false
	}
	// No plan is made for it: the step is taken here, before the answer.
	c.carryOut(ctx, s)
	if c.self {
		// As in Postgres the statement itself is interrupted: the FATAL
		// is its answer, and the session ends.
		s.cc.out = pgwire.AppendError(s.cc.out, errSelfTerminated())
		return true
	}
	s.cc.out = appendTerminateResult(s.cc.out, c, true)
	s.cc.out = pgwire.AppendRFQ(s.cc.out, s.txn.status())
	return true
}
