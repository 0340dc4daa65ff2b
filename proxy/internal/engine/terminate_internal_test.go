package engine

import (
	"encoding/binary"
	"slices"
	"testing"
)

func TestParseTerminate(t *testing.T) {
	an := oneShardTable(t)
	arr := func(vals ...uint32) []byte {
		b := binary.BigEndian.AppendUint32(nil, 1)              // ndim
		b = binary.BigEndian.AppendUint32(b, 0)                 // flags
		b = binary.BigEndian.AppendUint32(b, 23)                // int4
		b = binary.BigEndian.AppendUint32(b, uint32(len(vals))) // length
		b = binary.BigEndian.AppendUint32(b, 1)                 // lower bound
		for _, v := range vals {
			b = binary.BigEndian.AppendUint32(b, 4)
			b = binary.BigEndian.AppendUint32(b, v)
		}
		return b
	}
	for _, tc := range []struct {
		sql     string
		params  [][]byte
		formats []int16
		fn      string
		pids    []uint32
		self    bool
	}{
		{"select pg_terminate_backend(1234)", nil, nil, "terminate", []uint32{1234}, false},
		{"SELECT pg_catalog.pg_cancel_backend( 42 ) ;", nil, nil, "cancel", []uint32{42}, false},
		{"select pg_terminate_backend($1)", [][]byte{[]byte("77")}, nil, "terminate", []uint32{77}, false},
		{"select pg_terminate_backend($1::int4)", [][]byte{{0, 0, 1, 0}}, []int16{1}, "terminate", []uint32{256}, false},
		{"select pg_terminate_backend(n) from unnest($1::int[]) n", [][]byte{[]byte("{5, 6}")}, nil, "terminate", []uint32{5, 6}, false},
		{"select pg_terminate_backend(n) from unnest($1) as n", [][]byte{arr(7, 8, 9)}, []int16{1}, "terminate", []uint32{7, 8, 9}, false},
		{"select pg_terminate_backend(pg_backend_pid())", nil, nil, "terminate", nil, true},
		{"SELECT pg_catalog.pg_terminate_backend(pg_catalog.pg_backend_pid( ))", nil, nil, "terminate", nil, true},
		{"select pg_cancel_backend(pg_backend_pid())", nil, nil, "", nil, false},
		{"select pg_terminate_backend(pg_backend_pid() + 1)", nil, nil, "", nil, false},
		{"select pg_terminate_backend(x) from unnest($1::int[]) n", [][]byte{[]byte("{5}")}, nil, "", nil, false},
		{"select pg_terminate_backend($1)", [][]byte{[]byte("nope")}, nil, "", nil, false},
		{"select pg_terminate_backend($1)", [][]byte{{1, 2, 3}}, []int16{1}, "", nil, false},
		{"select pg_terminate_backend(n) from unnest($1) n", [][]byte{{0, 0, 0, 1, 0, 0}}, []int16{1}, "", nil, false},
		{"select 1", nil, nil, "", nil, false},
		{"select pg_terminate_backend($2)", [][]byte{[]byte("1"), []byte("88")}, []int16{0, 0}, "terminate", []uint32{88}, false},
		{"select pg_terminate_backend($2)", [][]byte{{0, 0, 0, 1}, []byte("89")}, []int16{1, 0}, "terminate", []uint32{89}, false},
		{"select pg_terminate_backend($2)", [][]byte{[]byte("1")}, nil, "", nil, false},
		{"select pg_terminate_backend(5000000000)", nil, nil, "", nil, false},
		{"select pg_terminate_backend(1, 100)", nil, nil, "", nil, false},
		{"select pg_terminate_backend(1) where false", nil, nil, "", nil, false},
		{"select pg_terminate_backend(1), 2", nil, nil, "", nil, false},
		{"select public.pg_terminate_backend(1)", nil, nil, "", nil, false},
		{"select pg_terminate_backend(1::text)", nil, nil, "", nil, false},
		{"select pg_terminate_backend(n) from unnest($1::text[]) n", [][]byte{[]byte("{5}")}, nil, "", nil, false},
		{"select pg_terminate_backend(n) from unnest($1::int[]) n, t", [][]byte{[]byte("{5}")}, nil, "", nil, false},
		{"/* who */ SELECT\tpg_terminate_backend(\n  12 )", nil, nil, "terminate", []uint32{12}, false},
	} {
		st, err := an.Analyze(tc.sql)
		if err != nil {
			t.Fatalf("%q: %v", tc.sql, err)
		}
		c := parseTerminate(st, tc.params, tc.formats)
		if tc.fn == "" {
			if c != nil {
				t.Errorf("%q: recognized %+v", tc.sql, c)
			}
			continue
		}
		if c == nil || c.fn != tc.fn || !slices.Equal(c.pids, tc.pids) || c.self != tc.self {
			t.Errorf("%q: %+v, want %s %v", tc.sql, c, tc.fn, tc.pids)
		}
	}
}

// FuzzParseTerminate: Bind parameters are untrusted bytes; reading them
// never panics, whatever statement the analyzer recognized.
func FuzzParseTerminate(f *testing.F) {
	f.Add("select pg_terminate_backend(n) from unnest($1) n", []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 23, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 9}, int16(1))
	f.Add("select pg_terminate_backend($1)", []byte("12"), int16(0))
	an := oneShardTable(f)
	f.Fuzz(func(t *testing.T, sql string, param []byte, format int16) {
		st, err := an.Analyze(sql)
		if err != nil {
			return
		}
		_ = parseTerminate(st, [][]byte{param}, []int16{format})
	})
}
