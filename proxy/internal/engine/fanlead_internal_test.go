package engine

import (
	"testing"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// TestSettingsReplay: the statement that repeats a transaction's
// set_config on its other backends is the client's own text without
// parameters, the values written in with them; what cannot be written
// exactly is refused.
func TestSettingsReplay(t *testing.T) {
	an := oneShardTable(t)
	for _, c := range []struct {
		sql     string
		params  [][]byte
		oids    []uint32
		want    string
		refused bool
	}{
		{sql: `SELECT set_config('lock_timeout', E'2\\s', true)`, want: `SELECT set_config('lock_timeout', E'2\\s', true)`},
		{sql: "SELECT set_config('statement_timeout', $1::text, true)", params: [][]byte{[]byte("5s")},
			want: "SELECT pg_catalog.set_config(E'statement_timeout', E'5s', true)"},
		{sql: "SELECT set_config('a.b', $2, true), set_config('c.d', $1, true), set_config('e.f', NULL, true)", params: [][]byte{[]byte(`it's \`), nil},
			oids: []uint32{25, 1043},
			want: `SELECT pg_catalog.set_config(E'a.b', NULL, true), pg_catalog.set_config(E'c.d', E'it\'s \\', true), pg_catalog.set_config(E'e.f', NULL, true)`},
		{sql: "SELECT set_config('statement_timeout', $1, true)", params: [][]byte{[]byte("5000")}, oids: []uint32{23}, refused: true},
		{sql: `SELECT set_config('statement_timeout', $1, true), set_config('search_path', 'a\b', true)`, params: [][]byte{[]byte("5s")}, refused: true},
		{sql: "SELECT set_config('statement_timeout', $1, true)", params: [][]byte{[]byte("5\x00s")}, want: ""},
		{sql: "SELECT set_config('statement_timeout', $1, true)", want: ""},
	} {
		st, err := an.Analyze(c.sql)
		if err != nil || st.Settings == nil {
			t.Fatalf("%s: %v %+v", c.sql, err, st)
		}
		var bv pgwire.BindView
		if err := bv.Decode(pgwire.AppendBindText(nil, "", "", c.params)); err != nil {
			t.Fatal(err)
		}
		got, e := settingsReplay(st, &bv, c.oids)
		if (e != nil) != c.refused || got != c.want {
			t.Errorf("%s %q: %q, %v; want %q (refused %v)", c.sql, c.params, got, e, c.want, c.refused)
		}
	}
}
