package pgvalue

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/cluster/clustertest"
)

// serverConn connects to the test cluster's first shard, for a test that
// checks the codec against a live server; closed when the test ends.
func serverConn(t *testing.T, timeout time.Duration) (context.Context, *pgconn.PgConn) {
	t.Helper()
	c := clustertest.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	conn, err := pgconn.Connect(ctx, c.Shards[0].DSN("postgres", c.Spec.User))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return ctx, conn
}

// TestValueCodecAgainstPostgres checks the values the merge computes
// against a live server, byte for byte: float4out/float8out at several
// extra_float_digits, numeric division (avg's scale and rounding),
// numeric and float binary encodings, and the casts of merged aggregates.
func TestValueCodecAgainstPostgres(t *testing.T) {
	ctx, conn := serverConn(t, 2*time.Minute)
	rng := rand.New(rand.NewPCG(3, 5))
	one := func(sql string, params [][]byte, formats []int16) []byte {
		t.Helper()
		r := conn.ExecParams(ctx, sql, params, nil, nil, formats).Read()
		if r.Err != nil {
			t.Fatalf("%s %q: %v", sql, params, r.Err)
		}
		return r.Rows[0][0]
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatal(err)
		}
	}

	// Floats: random bit patterns and the values people write.
	var f8s []float64
	for i := 0; i < 400; i++ {
		f8s = append(f8s, math.Float64frombits(rng.Uint64()))
	}
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 0.5, 1e15, 1e16, 123456789012345, 1234567890123456, 666400442918.75,
		1e-4, 1e-5, 0.0001234, 1.5e300, 5e-324, math.MaxFloat64, 100000, 1e6, 1e7, 280805.625, 3.4e38, 1.17e-38, 2.5, 0.25} {
		f8s = append(f8s, f, -f)
	}
	// Where a decimal halfway to a neighbour reads back as the value
	// (round-half-even, an even mantissa), Postgres does not take it as
	// the shortest (shortestE): integers beyond 2^24 (float4) and 2^53
	// (float8), where the neighbours are 2, 4, 8, ... apart, hit it often.
	for i := 0; i < 300; i++ {
		f8s = append(f8s, float64(float32(rng.Int64N(1<<31-1<<24)+1<<24)), float64(rng.Int64N(1<<62-1<<53)+1<<53),
			math.Ldexp(float64(rng.Int64N(1<<24)), rng.IntN(60)-30))
	}
	f8s = append(f8s, 60817408, 33554448, 9007199254740994, 18014398509481988)
	for _, efd := range []int{1, 0, -3, 3, -15, 2} {
		exec(fmt.Sprintf("SET extra_float_digits = %d", efd))
		for _, f := range f8s {
			if math.IsNaN(f) || math.IsInf(f, 0) {
				continue
			}
			bin := binary.BigEndian.AppendUint64(nil, math.Float64bits(f))
			r := conn.ExecParams(ctx, "SELECT $1::float8", [][]byte{bin}, []uint32{701}, []int16{1}, nil).Read()
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if got := formatFloat(f, 64, efd); got != string(r.Rows[0][0]) {
				t.Fatalf("float8 %b (efd %d): got %q, Postgres %q", math.Float64bits(f), efd, got, r.Rows[0][0])
			}
			f4 := float32(f)
			if math.IsInf(float64(f4), 0) {
				continue
			}
			bin4 := binary.BigEndian.AppendUint32(nil, math.Float32bits(f4))
			r = conn.ExecParams(ctx, "SELECT $1::float4", [][]byte{bin4}, []uint32{700}, []int16{1}, nil).Read()
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if got := formatFloat(float64(f4), 32, efd); got != string(r.Rows[0][0]) {
				t.Fatalf("float4 %b (efd %d): got %q, Postgres %q", math.Float32bits(f4), efd, got, r.Rows[0][0])
			}
		}
	}
	exec("SET extra_float_digits = 1")

	// Numeric: text and binary round trips, sums, avg's division.
	randDec := func() string {
		scale := rng.IntN(7)
		digits := 1 + rng.IntN(25)
		b := new(big.Int)
		for i := 0; i < digits; i++ {
			b.Mul(b, big.NewInt(10)).Add(b, big.NewInt(int64(rng.IntN(10))))
		}
		if rng.IntN(2) == 0 {
			b.Neg(b)
		}
		return Dec{Coef: b, Scale: scale}.Text()
	}
	for i := 0; i < 300; i++ {
		s := randDec()
		if i < 5 {
			s = []string{"0", "0.000", "-0.5", "10000", "0.0001"}[i]
		}
		bin := one("SELECT $1::numeric", [][]byte{[]byte(s)}, []int16{1})
		d, ok := decFromBinary(bin)
		if !ok || d.Text() != string(one("SELECT $1::numeric::text", [][]byte{[]byte(s)}, nil)) {
			t.Fatalf("numeric %s: decoded %v %q", s, ok, d.Text())
		}
		if got := d.AppendBinary(nil); !bytes.Equal(got, bin) {
			t.Fatalf("numeric %s: binary %x, Postgres %x", s, got, bin)
		}
		a, b := randDec(), randDec()
		da, _ := DecFromText(a)
		db, _ := DecFromText(b)
		if got, want := decAdd(da, db).Text(), string(one("SELECT ($1::numeric + $2::numeric)::text", [][]byte{[]byte(a), []byte(b)}, nil)); got != want {
			t.Fatalf("%s + %s: got %s, Postgres %s", a, b, got, want)
		}
		n := int64(1 + rng.IntN(100000))
		if rng.IntN(3) == 0 {
			n = rng.Int64N(1 << 50)
		}
		q, e := decDiv(da, decInt(n))
		if e != nil {
			t.Fatal(e)
		}
		if want := string(one("SELECT ($1::numeric / $2::numeric)::text", [][]byte{[]byte(a), []byte(strconv.FormatInt(n, 10))}, nil)); q.Text() != want {
			t.Fatalf("%s / %d: got %s, Postgres %s", a, n, q.Text(), want)
		}
		// avg over integers is numeric_div(sum, count).
		sum := rng.Int64N(1<<40) - 1<<39
		if got, want := mustAvg(t, Num{Kind: NumInt, Int: sum, OID: pgtype.Int8OID}, n), string(one("SELECT ($1::int8::numeric / $2::int8::numeric)::text", [][]byte{[]byte(strconv.FormatInt(sum, 10)), []byte(strconv.FormatInt(n, 10))}, nil)); got != want {
			t.Fatalf("avg %d/%d: got %s, Postgres %s", sum, n, got, want)
		}
	}

	// Casts of merged aggregates, as Postgres's cast functions.
	casts := []struct {
		to  uint32
		typ string
	}{{pgtype.Int2OID, "int2"}, {pgtype.Int4OID, "int4"}, {pgtype.Int8OID, "int8"}, {pgtype.NumericOID, "numeric"},
		{pgtype.Float4OID, "float4"}, {pgtype.Float8OID, "float8"}, {pgtype.TextOID, "text"}}
	var srcs []Num
	for _, i := range []int64{0, 1, -1, 32767, 32768, -32769, 2147483647, 2147483648, math.MaxInt64, math.MinInt64, 123456789} {
		srcs = append(srcs, Num{Kind: NumInt, Int: i, OID: pgtype.Int8OID})
	}
	for _, s := range []string{"0.5", "1.5", "-2.5", "2.4999", "32767.5", "9223372036854775807.4", "9223372036854775808", "1e-3", "123456.789", "NaN", "Infinity"} {
		d, _ := DecFromText(s)
		if s == "1e-3" {
			d, _ = DecFromText("0.001")
		}
		srcs = append(srcs, Num{Kind: NumDec, Dec: d, OID: pgtype.NumericOID})
	}
	for _, f := range []float64{0.5, 1.5, 2.5, -0.5, 32767.5, 1e10, 1e19, 123456.789, 1e-10, 1.0 / 3, 6.02e23} {
		srcs = append(srcs, Num{Kind: NumF8, Float: f, OID: pgtype.Float8OID})
	}
	for _, src := range srcs {
		param := []byte(numText(src, 3))
		typ := map[NumKind]string{NumInt: "int8", NumDec: "numeric", NumF8: "float8"}[src.Kind]
		for _, c := range casts {
			r := conn.ExecParams(ctx, fmt.Sprintf("SELECT ($1::%s)::%s::text", typ, c.typ), [][]byte{param}, nil, nil, nil).Read()
			got, text, e := NumCast(src, c.to, 1)
			if r.Err != nil {
				pe, _ := r.Err.(*pgconn.PgError)
				if e == nil || pe == nil || e.Code != pe.Code {
					t.Fatalf("%s::%s: Postgres fails (%v), the merge gives %v %v", param, c.typ, r.Err, numText(got, 1), e)
				}
				continue
			}
			if e != nil {
				t.Fatalf("%s::%s: Postgres gives %s, the merge fails: %v", param, c.typ, r.Rows[0][0], e)
			}
			g := numText(got, 1)
			if text != nil {
				g = string(text)
			}
			if g != string(r.Rows[0][0]) {
				t.Fatalf("%s (%s) ::%s: got %s, Postgres %s", param, typ, c.typ, g, r.Rows[0][0])
			}
		}
	}
}

func mustAvg(t *testing.T, sum Num, n int64) string {
	t.Helper()
	a, e := NumAvg(sum, n)
	if e != nil {
		t.Fatal(e)
	}
	return numText(a, 1)
}
