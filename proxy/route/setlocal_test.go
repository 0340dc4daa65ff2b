package route_test

import (
	"reflect"
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
)

// TestLocalSettings: exactly the statements that provably only set
// transaction-local settings carry Settings; everything else (a table, a
// session setting, a transaction characteristic, a pgshard hint, a value
// computed by an expression or a truncating cast) carries none.
func TestLocalSettings(t *testing.T) {
	s := func(name, value string) route.Setting { return route.Setting{Name: name, Value: value} }
	p := func(name string, n int) route.Setting { return route.Setting{Name: name, Param: n} }
	cases := []struct {
		sql  string
		want []route.Setting
	}{
		{"SELECT set_config('statement_timeout', $1::text, true)", []route.Setting{p("statement_timeout", 1)}},
		{"SELECT set_config('statement_timeout', $1, true)", []route.Setting{p("statement_timeout", 1)}},
		{"select PG_CATALOG.SET_CONFIG('work_mem', '8MB', 't')", []route.Setting{s("work_mem", "8MB")}},
		{"SELECT set_config('lock_timeout', CAST($2 AS varchar), 'on'), set_config('myapp.user', 'it''s', TRUE) AS u",
			[]route.Setting{p("lock_timeout", 2), s("myapp.user", "it's")}},
		{"SELECT set_config('search_path'::text, NULL, true)", []route.Setting{{Name: "search_path", Null: true}}},
		{"SELECT set_config('role', 'app', true)", []route.Setting{s("role", "app")}},
		// Not only settings, or not provably transaction-local.
		{"SELECT set_config('statement_timeout', $1, false)", nil},
		{"SELECT set_config('statement_timeout', $1, $2)", nil},
		{"SELECT set_config($1, '5s', true)", nil},
		{"SELECT set_config('transaction_isolation', 'serializable', true)", nil},
		{"SELECT set_config('TRANSACTION_READ_ONLY', 'on', true)", nil},
		{"SELECT set_config('pgshard.key', 'abc', true)", nil},
		{"SELECT set_config('session_authorization', 'app', true)", nil},
		{"SELECT set_config('statement_timeout', $1::varchar(2), true)", nil},
		{"SELECT set_config('statement_timeout', $1::int::text, true)", nil},
		{"SELECT set_config('statement_timeout', 5000, true)", nil},
		{"SELECT set_config('statement_timeout', '5' || 's', true)", nil},
		{"SELECT set_config('statement_timeout', (SELECT max(event) FROM outbox), true)", nil},
		{"SELECT set_config('statement_timeout', '5s', true) FROM executions", nil},
		{"SELECT set_config('statement_timeout', '5s', true) WHERE false", nil},
		{"SELECT set_config('statement_timeout', '5s', true) LIMIT 1", nil},
		{"SELECT set_config('statement_timeout', '5s', true), 1", nil},
		{"SELECT set_config('statement_timeout', '5s', true) UNION SELECT '1'", nil},
		{"WITH x AS (SELECT 1) SELECT set_config('statement_timeout', '5s', true)", nil},
		{"SELECT myschema.set_config('statement_timeout', '5s', true)", nil},
		{"SELECT count(set_config('statement_timeout', '5s', true))", nil},
		{"SELECT set_config('statement_timeout', '5s', true) INTO t", nil},
		{"SELECT 1", nil},
		{"SET LOCAL statement_timeout = '5s'", nil},
	}
	// Each text in a router of its own, and all in one (texts that differ
	// only in their constants share an analysis unless it depends on them).
	shared := newRouter(t, "default")
	for _, c := range cases {
		for _, st := range analyzedTwice(t, shared, c.sql) {
			if !reflect.DeepEqual(st.Settings, c.want) {
				t.Errorf("%s: Settings %+v, want %+v", c.sql, st.Settings, c.want)
			}
			if c.want != nil && (st.Kind != route.KindOther || !st.ReadOnly) {
				t.Errorf("%s: kind %s, read-only %v: want a read-only statement", c.sql, st.Kind, st.ReadOnly)
			}
		}
	}
}

// TestSessionSetConfig: exactly a statement that is nothing but one
// set_config(name, value, false) of a setting the proxy may keep carries
// SetConfig (it stays KindUnsupported, "set-config": where the engine
// cannot keep it, it pins); anything else carries none.
func TestSessionSetConfig(t *testing.T) {
	sc := func(name, value, col string) *route.SetConfig {
		return &route.SetConfig{Setting: route.Setting{Name: name, Value: value}, Column: col}
	}
	cases := []struct {
		sql  string
		want *route.SetConfig
	}{
		{"SELECT pg_catalog.set_config('search_path', '', false);", sc("search_path", "", "set_config")},
		{"SELECT pg_catalog.set_config('search_path', 'public, app', false)", sc("search_path", "public, app", "set_config")},
		{"select SET_CONFIG('App.Tenant', $1, FALSE)", &route.SetConfig{Setting: route.Setting{Name: "app.tenant", Param: 1}, Column: "set_config"}},
		{"SELECT set_config('app.user'::text, $2::varchar, 'off') AS who", &route.SetConfig{Setting: route.Setting{Name: "app.user", Param: 2}, Column: "who"}},
		{"SELECT set_config('statement_timeout', '5s', 'f'::bool) s", sc("statement_timeout", "5s", "s")},
		{"SELECT set_config('work_mem', 'it''s', false)", sc("work_mem", "it's", "set_config")},
		// Not one call of a setting the proxy keeps, or not provably
		// session-level.
		{"SELECT set_config('search_path', '', true)", nil},
		{"SELECT set_config('search_path', '', $1)", nil},
		{"SELECT set_config('search_path', NULL::text, false)", nil},
		{"SELECT set_config($1, 'x', false)", nil},
		{"SELECT set_config('role', 'app', false)", nil},
		{"SELECT set_config('session_authorization', 'app', false)", nil},
		{"SELECT set_config('transaction_isolation', 'serializable', false)", nil},
		{"SELECT set_config('pgshard.key', 'abc', false)", nil},
		{"SELECT set_config('bad name', 'x', false)", nil},
		{"SELECT set_config('a.b', 'x', false), set_config('a.c', 'y', false)", nil},
		{"SELECT set_config('a.b', 'x', false), 1", nil},
		{"SELECT set_config('a.b', 'x' || 'y', false)", nil},
		{"SELECT set_config('a.b', 5, false)", nil},
		{"SELECT set_config('a.b', $1::varchar(3), false)", nil},
		{"SELECT set_config('a.b', 'x', false) FROM executions", nil},
		{"SELECT set_config('a.b', 'x', false) WHERE true", nil},
		{"SELECT myschema.set_config('a.b', 'x', false)", nil},
		{"SELECT * FROM set_config('a.b', 'x', false)", nil},
		{"SELECT 1", nil},
	}
	shared := newRouter(t, "default")
	for _, c := range cases {
		for _, st := range analyzedTwice(t, shared, c.sql) {
			if !reflect.DeepEqual(st.SetConfig, c.want) {
				t.Errorf("%s: SetConfig %+v, want %+v", c.sql, st.SetConfig, c.want)
			}
			if c.want != nil && (st.Kind != route.KindUnsupported || st.SessionState != "set-config") {
				t.Errorf("%s: kind %s, session state %q: want unsupported, set-config", c.sql, st.Kind, st.SessionState)
			}
		}
	}
}
