package pgvalue

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// TestIntervalArithmeticAgainstPostgres checks the merged interval sums
// and averages against a live server: interval_out in each
// IntervalStyle, interval_pl (and its overflow error), interval_div by
// a count, byte for byte, on random intervals with mixed signs,
// fractions of a second and fields near their limits.
func TestIntervalArithmeticAgainstPostgres(t *testing.T) {
	ctx, conn := serverConn(t, 3*time.Minute)
	rng := rand.New(rand.NewPCG(31, 32))
	random := func() Interval {
		iv := Interval{Months: int32(rng.IntN(41) - 20), Days: int32(rng.IntN(81) - 40), Usec: rng.Int64N(400*86400*1_000_000) - 200*86400*1_000_000}
		switch rng.IntN(8) {
		case 0:
			iv.Months, iv.Days, iv.Usec = int32(rng.Uint32()), int32(rng.Uint32()), int64(rng.Uint64())
		case 1:
			iv.Usec = int64(rng.IntN(2_000_001) - 1_000_000)
		case 2:
			iv.Months, iv.Days = 0, 0
		case 3:
			iv.Usec = int64(rng.IntN(100)-50) * 1_000_000
		case 4:
			iv = Interval{}
		}
		return iv
	}
	bin := func(iv Interval) []byte { b, _ := AppendInterval(nil, iv, 1, ""); return b }
	read := func(sql string, params [][]byte, oids []uint32, format int16) ([]byte, string) {
		t.Helper()
		formats := make([]int16, len(oids)) // intervals binary, a float8 as text
		for i, o := range oids {
			if o == pgtype.IntervalOID {
				formats[i] = 1
			}
		}
		r := conn.ExecParams(ctx, sql, params, oids, formats, []int16{format}).Read()
		if r.Err != nil {
			if pe, ok := r.Err.(*pgconn.PgError); ok {
				return nil, pe.Code
			}
			t.Fatalf("%s: %v", sql, r.Err)
		}
		return r.Rows[0][0], ""
	}
	for _, style := range []string{"postgres", "postgres_verbose", "sql_standard", "iso_8601"} {
		if _, err := conn.Exec(ctx, "SET IntervalStyle = "+style).ReadAll(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 400; i++ {
			iv := random()
			want, code := read("SELECT $1::interval", [][]byte{bin(iv)}, []uint32{pgtype.IntervalOID}, 0)
			if code != "" {
				t.Fatalf("%s %+v: %s", style, iv, code)
			}
			got, ok := AppendInterval(nil, iv, 0, style)
			if !ok || !bytes.Equal(got, want) {
				t.Fatalf("%s %+v: got %q, Postgres %q", style, iv, got, want)
			}
		}
	}
	for i := 0; i < 1000; i++ {
		a, b := random(), random()
		want, code := read("SELECT $1::interval + $2::interval", [][]byte{bin(a), bin(b)}, []uint32{pgtype.IntervalOID, pgtype.IntervalOID}, 1)
		sum, e := a.Add(b)
		switch {
		case code != "" && (e == nil || e.Code != code):
			t.Fatalf("%+v + %+v: Postgres %s, got %+v %v", a, b, code, sum, e)
		case code == "" && (e != nil || !bytes.Equal(bin(sum), want)):
			t.Fatalf("%+v + %+v: got %+v %v, Postgres %x", a, b, sum, e, want)
		}
		n := int64(1 + rng.IntN(7))
		if rng.IntN(2) == 0 {
			n = 1 + rng.Int64N(1<<40)
		}
		want, code = read("SELECT $1::interval / $2::float8", [][]byte{bin(a), []byte(strconv.FormatInt(n, 10))}, []uint32{pgtype.IntervalOID, pgtype.Float8OID}, 1)
		if code != "" {
			continue // out of range in Postgres too (its avg would fail alike)
		}
		if got := bin(a.Div(n)); !bytes.Equal(got, want) {
			w, _ := DecodeInterval(want)
			t.Fatalf("%+v / %d: got %+v, Postgres %+v", a, n, a.Div(n), w)
		}
	}
}
