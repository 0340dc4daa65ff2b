package engine

import (
	"maps"
	"slices"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// paramStatus is what a session's client was told of the parameters
// Postgres reports (ParameterStatus): a backend shared by many clients
// reports its own values, which the client must see inside its
// transaction and never after it, and a pinned backend's values are the
// session's own.
type paramStatus struct {
	// reported are the session values of the GUC_REPORT parameters
	// (canonical names) — what a client with a direct connection would
	// have been told; startupReported those at connect time (for RESET).
	reported, startupReported map[string]string
	// seen is what the client was last told for each parameter that
	// changed since startup (told reads it).
	seen map[string]string
	// pendingPS collects ParameterStatus messages from the backend during
	// an exchange; they are reconciled before the client's ReadyForQuery.
	pendingPS [][2]string
	// psDirty: the client was told a transaction-local value that differs
	// from the session's.
	psDirty bool
}

// notePS records a ParameterStatus from the backend.
func (ps *paramStatus) notePS(msg []byte) {
	b := pgwire.Body(msg)
	name, i, err := pgwire.CString(b, 0)
	if err != nil {
		return
	}
	val, _, err := pgwire.CString(b, i)
	if err != nil {
		return
	}
	for k := range ps.pendingPS {
		if ps.pendingPS[k][0] == string(name) {
			ps.pendingPS[k][1] = string(val)
			return
		}
	}
	ps.pendingPS = append(ps.pendingPS, [2]string{string(name), string(val)})
}

// reconcilePS sends the ParameterStatus messages the client needs before a
// ReadyForQuery with status st: inside a transaction the backend's values,
// after it the session's own (a backend reverting to its pool defaults at
// COMMIT must not change what the client believes).
func (ps *paramStatus) reconcilePS(st byte, pinned bool, out []byte) []byte {
	if len(ps.pendingPS) == 0 && !(st == 'I' && ps.psDirty) {
		return out
	}
	if pinned {
		// A pinned backend is the client's own session: its values are
		// the session's.
		rep := maps.Clone(ps.reported)
		for _, p := range ps.pendingPS {
			rep[p[0]] = p[1]
			if ps.told(p[0]) != p[1] {
				ps.seen[p[0]] = p[1]
				out = pgwire.AppendParameterStatus(out, p[0], p[1])
			}
		}
		ps.reported = rep
		ps.pendingPS = ps.pendingPS[:0]
		ps.psDirty = false
		return out
	}
	for _, p := range ps.pendingPS {
		want := p[1]
		if sv, ok := ps.reported[p[0]]; ok {
			if st == 'I' {
				want = sv
			} else if want != sv {
				ps.psDirty = true
			}
		}
		if ps.told(p[0]) != want {
			ps.seen[p[0]] = want
			out = pgwire.AppendParameterStatus(out, p[0], want)
		}
	}
	ps.pendingPS = ps.pendingPS[:0]
	if st == 'I' && ps.psDirty {
		ps.psDirty = false
		for n, v := range ps.reported {
			if ps.told(n) != v {
				ps.seen[n] = v
				out = pgwire.AppendParameterStatus(out, n, v)
			}
		}
	}
	return out
}

// told is what the client was last told of parameter n: what ps.seen
// records since startup, else the startup's value (sent by greet; seen
// starts empty so that an idle session shares the startup's map).
func (ps *paramStatus) told(n string) string {
	if v, ok := ps.seen[n]; ok {
		return v
	}
	return ps.startupReported[n]
}

// appendSettingStatus appends the ParameterStatus messages a settings
// change implies (after its CommandComplete, as Postgres does before
// ReadyForQuery): the reported parameters it changes from before.
func appendSettingStatus(dst []byte, e *effect, before map[string]string) []byte {
	names := make([]string, 0, len(e.rep))
	for n := range e.rep {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if v := e.rep[n]; before[n] != v {
			dst = pgwire.AppendParameterStatus(dst, n, v)
		}
	}
	return dst
}
