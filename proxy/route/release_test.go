package route_test

import (
	"reflect"
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
)

// TestReleases: the statements that end a kind of session state entirely
// are recognized from their parse tree — a function's name in a string
// or a comment, UNLISTEN of one channel, CLOSE of one cursor end nothing.
func TestReleases(t *testing.T) {
	cases := []struct{ sql, want string }{
		{"UNLISTEN *", "listen"},
		{"unlisten *;", "listen"},
		{"CLOSE ALL", "hold-cursor"},
		{"close all ;", "hold-cursor"},
		{"SELECT pg_advisory_unlock_all()", "advisory-lock"},
		{"select PG_CATALOG.pg_advisory_unlock_all()", "advisory-lock"},
		{"SELECT 1 FROM (SELECT pg_advisory_unlock_all()) s", "advisory-lock"},
		{"UNLISTEN chan", ""},
		{"CLOSE c1", ""},
		{"SELECT 'pg_advisory_unlock_all'", ""},
		{"SELECT 1 /* pg_advisory_unlock_all() */", ""},
		{"SELECT myschema.pg_advisory_unlock_all()", ""},
		{"SELECT pg_advisory_unlock(1)", ""},
		{"SELECT 1", ""},
	}
	shared := newRouter(t, "default")
	for _, c := range cases {
		for _, st := range analyzedTwice(t, shared, c.sql) {
			if st.Releases != c.want {
				t.Errorf("%s: Releases %q, want %q", c.sql, st.Releases, c.want)
			}
		}
	}
}

// TestTerminateCalls: pg_terminate_backend / pg_cancel_backend calls in
// the forms tools send, and pg_backend_pid() alone, are recognized — also
// when texts differing only in the PID share an analysis — and nothing
// else is.
func TestTerminateCalls(t *testing.T) {
	cases := []struct {
		sql  string
		want *route.Terminate
	}{
		{"SELECT pg_terminate_backend(1234)", &route.Terminate{PID: 1234, Column: "pg_terminate_backend"}},
		{"SELECT pg_terminate_backend(4321)", &route.Terminate{PID: 4321, Column: "pg_terminate_backend"}},
		{"select pg_catalog.pg_cancel_backend(42::int4);", &route.Terminate{Cancel: true, PID: 42, Column: "pg_cancel_backend"}},
		{"SELECT pg_terminate_backend($2::integer)", &route.Terminate{Param: 2, Column: "pg_terminate_backend"}},
		{"SELECT pg_terminate_backend(pg_backend_pid())", &route.Terminate{Self: true, Column: "pg_terminate_backend"}},
		{"SELECT pg_terminate_backend(p) FROM unnest($1::int8[]) AS p", &route.Terminate{Param: 1, Array: true, Column: "pg_terminate_backend"}},
		{"SELECT pg_terminate_backend(p) FROM unnest($1) p", &route.Terminate{Param: 1, Array: true, Column: "pg_terminate_backend"}},
		{"SELECT pg_terminate_backend(-1)", nil},
		{"SELECT pg_terminate_backend(1) FROM executions", nil},
		{"SELECT pg_terminate_backend(p) FROM unnest('{1,2}'::int[]) p", nil},
		{"SELECT pg_terminate_backend(p) FROM unnest($1) q", nil},
		{"SELECT pg_terminate_backend(p) FROM unnest($1) WITH ORDINALITY p", nil},
		{"SELECT pg_terminate_backend(pid) FROM pg_stat_activity", nil},
		{"SELECT pg_terminate_backend($1::numeric)", nil},
		{"SELECT pg_terminate_backend(1) ORDER BY 1", nil},
		{"SELECT x.pg_terminate_backend(1)", nil},
		{"SELECT pg_terminate_backend(pid => 1)", nil},
		{"SELECT pg_reload_conf()", nil},
		{"SELECT pg_terminate_backend(1234) AS ended", &route.Terminate{PID: 1234, Column: "ended"}},
		{"SELECT pg_backend_pid()", &route.Terminate{Own: true, Column: "pg_backend_pid"}},
		{"select pg_catalog.pg_backend_pid() as pid;", &route.Terminate{Own: true, Column: "pid"}},
		{"SELECT pg_backend_pid() FROM executions", nil},
		{"SELECT pg_backend_pid(), 1", nil},
		{"SELECT pg_backend_pid()::text", nil},
		{"SELECT pg_backend_pid() WHERE true", nil},
		{"SELECT pid FROM pg_stat_activity WHERE pid = pg_backend_pid()", nil},
		{"SELECT x.pg_backend_pid()", nil},
		{"SELECT pg_backend_pid() /* pgshard:shard=s0 */", nil},
	}
	shared := newRouter(t, "default")
	for _, c := range cases {
		for _, st := range analyzedTwice(t, shared, c.sql) {
			if !reflect.DeepEqual(st.Terminate, c.want) {
				t.Errorf("%s: Terminate %+v, want %+v", c.sql, st.Terminate, c.want)
			}
		}
	}
}

// analyzedTwice analyzes sql in a Table of its own and in shared, where
// texts that differ only in their constants share an analysis unless it
// depends on them: a recognition must hold both ways.
func analyzedTwice(t *testing.T, shared *route.Table, sql string) [2]*route.Statement {
	t.Helper()
	var out [2]*route.Statement
	for i, r := range []*route.Table{newRouter(t, "default"), shared} {
		st, err := r.Analyze(sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		out[i] = st
	}
	return out
}
