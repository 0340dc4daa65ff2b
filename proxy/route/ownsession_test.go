package route_test

import (
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
)

// TestOnOwnSession: a statement refused for the session state it keeps is
// routed, on a session of its own, by what it reads and writes: a keyed
// read on its key's shard, a key-less one refused (it cannot be merged
// into one session's state), a global table's anywhere, a statement of
// no table nowhere in particular (nil); the session state (a temporary
// table or view, a cursor WITH HOLD, a session lock or setting) is no reason to
// refuse it there, any other reason still is.
func TestOnOwnSession(t *testing.T) {
	r := newRouter(t, "default")
	key := r.RouteKey("k6", route.KeyText)
	cases := []struct {
		sql    string
		params [][]byte
		want   route.DestKind // -1: nil
	}{
		{"SELECT pg_advisory_lock(1), data FROM executions WHERE id = 'k6'", nil, route.DestShard},
		{"SELECT set_config('work_mem', '5MB', false), data FROM executions WHERE id = 'k6'", nil, route.DestShard},
		{"SELECT set_config('work_mem', '5MB', false), count(*) FROM executions", nil, route.DestRefuse},
		{"CREATE TEMP TABLE x AS SELECT * FROM executions WHERE id = 'k6'", nil, route.DestShard},
		{"CREATE TEMP TABLE x AS SELECT * FROM executions WHERE definition_id = 'd'", nil, route.DestRefuse},
		{"DECLARE c CURSOR WITH HOLD FOR SELECT * FROM executions WHERE id = $1", [][]byte{[]byte("k6")}, route.DestShard},
		{"DECLARE c CURSOR WITH HOLD FOR SELECT * FROM executions", nil, route.DestRefuse},
		{"DECLARE c CURSOR WITH HOLD FOR SELECT * FROM definitions", nil, route.DestAny}, // a global table
		{"CREATE TEMP VIEW v AS SELECT * FROM executions WHERE id = 'k6'", nil, route.DestShard},
		{"CREATE TEMP VIEW v AS SELECT * FROM executions", nil, route.DestRefuse},
		{"CREATE TEMP TABLE t (LIKE executions)", nil, -1}, // no rows
		{"SELECT pg_advisory_lock(1)", nil, -1},
		{"CREATE TEMP TABLE z (a int)", nil, -1},
		{"LISTEN chan", nil, -1},
		{"SELECT data FROM executions WHERE id = 'k6'", nil, -1}, // keeps no session state
	}
	for _, c := range cases {
		st, err := r.Analyze(c.sql)
		if err != nil {
			t.Fatal(err)
		}
		own := r.OnOwnSession(st)
		if c.want < 0 {
			if own != nil {
				t.Errorf("%s: OnOwnSession = %+v, want nil", c.sql, own)
			}
			continue
		}
		if own == nil {
			t.Errorf("%s: OnOwnSession = nil, want a statement routed %v", c.sql, c.want)
			continue
		}
		d := r.Route(own, c.params, nil, nil)
		if d.Kind != c.want || d.Kind == route.DestShard && d.Shard != key.Shard {
			t.Errorf("%s: on a session of its own routed %v (shard %d: %s), want %v (shard %d)", c.sql, d.Kind, d.Shard, d.Why(), c.want, key.Shard)
		}
	}
}
