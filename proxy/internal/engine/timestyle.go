package engine

import (
	"strings"

	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
)

// timeStyleOf is how the shards write dates and times as text in x's
// read — what a merge ordering them by their text must know (the order
// of day and month in DateStyle SQL and Postgres, the TimeZone an
// abbreviation belongs to): the session's DateStyle and TimeZone as a
// direct connection would report them. Inside a transaction block, or
// when the request sets either transaction-locally ahead of the read (a
// lead, a deferred SET LOCAL), the shards may run with values the proxy
// has not been told yet (Postgres reports a change at ReadyForQuery):
// nothing is known then, and only texts that say everything themselves
// (ISO, German, numeric offsets) are ordered. nil for a read that merges
// nothing of several shards.
func timeStyleOf(x *fanExec) *pgvalue.TimeStyle {
	if x.f.dest.Merge == nil || x.f.only > 0 {
		return nil
	}
	if x.txn.tx != txIdle || timeSetting(x) {
		return &pgvalue.TimeStyle{}
	}
	ts := pgvalue.NewTimeStyle(x.ps.reported["DateStyle"], x.ps.reported["TimeZone"])
	return &ts
}

// timeSetting reports whether a lead of x's read or a deferred
// statement of its transaction may set DateStyle or TimeZone.
func timeSetting(x *fanExec) bool {
	names := func(n string) bool {
		n = strings.ToLower(n)
		return strings.Contains(n, "datestyle") || strings.Contains(n, "timezone") || strings.Contains(n, "time zone")
	}
	for _, l := range x.f.leads {
		if names(l.st.SetName) || names(l.st.SQL) {
			return true
		}
		for _, st := range l.st.Settings {
			if names(st.Name) {
				return true
			}
		}
	}
	for _, d := range x.txn.deferred {
		if names(d.sql) {
			return true
		}
	}
	return false
}
