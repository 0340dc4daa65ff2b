package engine

import (
	"strings"
	"time"

	"github.com/pgshard/pgshard/proxy/route"
)

// ownBackend is the state of a pinned session's own backend (pin.go):
// the shard it is on, why the session is pinned and what of its server
// session state the proxy tracks to know when the pin can end. The
// backend itself is Session.bc; Session.own is nil while the session is
// not pinned.
type ownBackend struct {
	shard   int
	reasons pinReason
	// temps are the temporary objects the session created (while pinned
	// for them); dropping all of them clears pinTemp.
	temps map[string]bool
	// prepared are its SQL-level prepared statements (pinPrepare).
	prepared map[string]bool
	since    time.Time
}

// add records why the session is (also) pinned, and the temporary
// objects (or "\x00prepare\x00"-prefixed prepared statements) that keep
// it so.
func (o *ownBackend) add(why pinReason, temps []string) {
	o.reasons |= why
	for _, t := range temps {
		if name, ok := strings.CutPrefix(t, "\x00prepare\x00"); ok {
			if o.prepared == nil {
				o.prepared = map[string]bool{}
			}
			o.prepared[name] = true
			continue
		}
		if o.temps == nil {
			o.temps = map[string]bool{}
		}
		o.temps[t] = true
	}
}

// holdsAll reports whether every name is one of the session's temporary
// objects.
func (o *ownBackend) holdsAll(names []string) bool {
	for _, n := range names {
		if !o.temps[n] {
			return false
		}
	}
	return true
}

// heldOf is the first of names that is one of the session's temporary
// tables, "" for none.
func (o *ownBackend) heldOf(names []string) string {
	for _, n := range names {
		if o.temps[n] {
			return n
		}
	}
	return ""
}

// forwards reports whether a statement the proxy answers itself in
// transaction pooling goes to the backend because the session is pinned
// (o nil: it is not).
func (o *ownBackend) forwards(a *route.Statement) bool {
	if o == nil {
		return false
	}
	switch a.Kind {
	case route.KindSetSession:
		return !strings.HasPrefix(strings.ToLower(a.SetName), "pgshard.")
	case route.KindDiscard, route.KindPrepare, route.KindExecute, route.KindDeallocate:
		return true
	case route.KindEmpty:
		// A ping (lib/pq's ";", pgx's "-- ping"): the session's own
		// backend answers, so a backend terminated since its last
		// statement ends the session now, as on a direct connection,
		// not at the next statement.
		return true
	case route.KindUnsupported:
		return a.SessionState != ""
	}
	return false
}

// apply changes the pin's reasons and tracked state by a statement its
// backend ran successfully.
func (o *ownBackend) apply(a *route.Statement) {
	switch a.Kind {
	case route.KindDiscard:
		switch strings.ToLower(a.SetName) {
		case "all":
			o.reasons &= pinSessionMode
			o.temps, o.prepared = nil, nil
		case "temp", "temporary":
			o.reasons &^= pinTemp
			o.temps = nil
		}
	case route.KindDeallocate:
		if a.PrepareName == "" {
			o.prepared = nil
		} else {
			delete(o.prepared, a.PrepareName)
		}
		if len(o.prepared) == 0 {
			o.reasons &^= pinPrepare
		}
	case route.KindPrepare:
		o.add(0, []string{"\x00prepare\x00" + a.PrepareName})
	case route.KindDDL:
		for _, t := range a.DropTables {
			delete(o.temps, t)
		}
		if len(a.DropTables) > 0 && len(o.temps) == 0 {
			o.reasons &^= pinTemp
		}
	case route.KindUnsupported:
		if a.Releases != "" {
			o.reasons &^= reasonOf(a.Releases)
			return
		}
		o.add(reasonOf(a.SessionState), a.TempTables)
	case route.KindOther:
		if a.Releases != "" {
			o.reasons &^= reasonOf(a.Releases)
		}
	}
}

// settle ends what lasts only to the end of a query string or pipeline
// when the session is idle (the settings of pinSetsOnce are in
// Session.cur by then); it reports whether nothing keeps the pin.
func (o *ownBackend) settle(idle bool) bool {
	if !idle {
		return false
	}
	o.reasons &^= pinSetsOnce
	return o.reasons == 0
}
