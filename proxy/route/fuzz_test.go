package route_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
)

// FuzzAnalyze: any text analyzes without panicking, and routing it is
// deterministic: a cached analysis and a fresh one route alike, twice.
func FuzzAnalyze(f *testing.F) {
	for _, c := range loadCorpus(f) {
		f.Add(c.SQL)
	}
	f.Add("SELECT 1; SELECT 2")
	f.Add("SELECT set_config('statement_timeout', $1::text, true)")
	f.Add("SELECT set_config('transaction_isolation', 'serializable', true), set_config('a.b', 'c', 't')")
	f.Add("/* pgshard:key='a''b' */ UPDATE executions SET id = id WHERE id = $1")
	cached := newRouter(f, "default")
	fresh, err := route.New(testMap(f), testSchema(f, "default"), route.Options{CacheSize: -1})
	if err != nil {
		f.Fatal(err)
	}
	params := [][]byte{[]byte("abc"), []byte("42"), nil, []byte("x")}
	f.Fuzz(func(t *testing.T, sql string) {
		a, errA := cached.Split(sql)
		b, errB := fresh.Split(sql)
		if (errA == nil) != (errB == nil) {
			t.Fatalf("errors differ: %v / %v", errA, errB)
		}
		if errA != nil {
			if !strings.Contains(sql, "\x00") {
				t.Fatalf("Split error without a NUL byte: %v", errA)
			}
			return
		}
		if len(a) != len(b) || len(a) == 0 {
			t.Fatalf("%d / %d statements", len(a), len(b))
		}
		for i := range a {
			if a[i].Kind != b[i].Kind || a[i].SQL != b[i].SQL || a[i].ParseError != b[i].ParseError || !reflect.DeepEqual(a[i].Settings, b[i].Settings) {
				t.Fatalf("statement %d differs: %+v / %+v", i, a[i], b[i])
			}
			for _, ps := range [][][]byte{nil, params} {
				da := cached.Route(a[i], ps, nil, nil)
				db := fresh.Route(b[i], ps, nil, nil)
				if !sameDest(da, db) || !sameDest(da, cached.Route(a[i], ps, nil, nil)) {
					t.Fatalf("%q: routes differ:\n%+v\n%+v", a[i].SQL, da, db)
				}
				checkInvariants(t, cached.Map(), a[i], da)
			}
		}
		st, err := cached.Analyze(sql)
		if err != nil || st == nil {
			t.Fatalf("Analyze: %v", err)
		}
	})
}

// FuzzRouteParams: any Bind values, format codes and declared types route
// without panicking, deterministically, to a valid decision.
func FuzzRouteParams(f *testing.F) {
	stmts := []string{
		"SELECT data FROM executions WHERE id = $1",
		"SELECT data FROM executions WHERE id = $1::text AND version = $2",
		"SELECT 1 FROM executions WHERE id IN ($1, $2)",
		"DELETE FROM outbox WHERE seq = $1",
		"INSERT INTO outbox (seq, target_id, event) VALUES ($1, $2, 'e')",
		"INSERT INTO executions (id, definition_id, data, version) VALUES ($1, $2, '{}', 1)",
		"SELECT harel_commit_cas($1, $2, '{}', 0, '')",
		"SELECT id FROM executions ORDER BY id LIMIT $1 OFFSET $2",
		"SELECT 1 FROM executions WHERE id = $1::uuid::text",
		"SELECT 1 FROM executions WHERE id = $2::int2::text",
		"UPDATE executions SET id = $2 WHERE id = $1",
	}
	r := newRouter(f, "default")
	var sts []*route.Statement
	for _, s := range stmts {
		st, err := r.Analyze(s)
		if err != nil {
			f.Fatal(err)
		}
		sts = append(sts, st)
	}
	f.Add(uint8(0), []byte("abc"), []byte("def"), int16(0), int16(0), uint32(0), uint32(0), false)
	f.Add(uint8(3), []byte{0, 0, 0, 0, 0, 0, 4, 1}, []byte{}, int16(1), int16(1), uint32(20), uint32(0), false)
	f.Add(uint8(8), []byte("{0123456789abcdef0123456789ABCDEF}"), []byte("x"), int16(0), int16(0), uint32(0), uint32(25), true)
	f.Add(uint8(7), []byte{0, 5}, []byte{0, 0, 0, 9}, int16(1), int16(1), uint32(21), uint32(23), false)
	f.Add(uint8(9), []byte("x"), []byte("70000"), int16(2), int16(0), uint32(2950), uint32(0), false)
	f.Fuzz(func(t *testing.T, which uint8, p1, p2 []byte, f1, f2 int16, o1, o2 uint32, null bool) {
		st := sts[int(which)%len(sts)]
		params := [][]byte{p1, p2}
		if null {
			params[0] = nil
		}
		formats := []int16{f1, f2}
		oids := []uint32{o1, o2}
		d := r.Route(st, params, formats, oids)
		checkInvariants(t, r.Map(), st, d)
		if d2 := r.Route(st, params, formats, oids); !sameDest(d, d2) {
			t.Fatalf("not deterministic: %+v / %+v", d, d2)
		}
		// One format code for all, and none at all.
		for _, fs := range [][]int16{{f1}, nil} {
			checkInvariants(t, r.Map(), st, r.Route(st, params, fs, oids[:1]))
		}
	})
}
