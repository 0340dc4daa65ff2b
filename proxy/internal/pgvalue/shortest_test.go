package pgvalue

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestShortestMidpoints: where Go's shortest digits lie halfway to a
// neighbour, Postgres writes more (the values measured on Postgres 15 by
// TestValueCodecAgainstPostgres); elsewhere the two agree.
func TestShortestMidpoints(t *testing.T) {
	for _, c := range []struct {
		f    float64
		bits int
		want string
	}{
		{60817408, 32, "6.0817408e+07"}, // Go: 6.081741e+07 (60817410 is halfway to 60817412)
		{-60817408, 32, "-6.0817408e+07"},
		{33554448, 32, "3.3554448e+07"},
		{372245184, 32, "3.7224518e+08"},
		{0.1, 32, "1e-01"},
		{123.456, 64, "1.23456e+02"},
		{5e-324, 64, "5e-324"},
		{math.MaxFloat32, 32, "3.4028235e+38"},
		{math.MaxFloat64, 64, "1.7976931348623157e+308"},
	} {
		f := c.f
		if c.bits == 32 {
			f = float64(float32(f))
		}
		if got := shortestE(f, c.bits); got != c.want {
			t.Errorf("shortestE(%v, %d) = %q, want %q (strconv: %q)", c.f, c.bits, got, c.want, strconv.FormatFloat(f, 'e', -1, c.bits))
		}
	}
	// The digits always read back as the value, and are never fewer than
	// strconv's.
	for i := int64(0); i < 20000; i++ {
		f := float64(float32(1<<25 + 4*i))
		s := shortestE(f, 32)
		back, err := strconv.ParseFloat(s, 32)
		if err != nil || back != f || len(s) < len(strconv.FormatFloat(f, 'e', -1, 32)) {
			t.Fatalf("%v: %q reads back as %v (%v)", f, s, back, err)
		}
	}
}

func TestFixedFromE(t *testing.T) {
	for _, c := range []struct {
		mant string
		exp  int
		want string
	}{
		{"1.5", 3, "1500"}, {"-1.25", -2, "-0.0125"}, {"6", 0, "6"}, {"1.2345", 2, "123.45"},
		{"6.0817408", 7, "60817408"}, {"1", -4, "0.0001"}, {"9.99", 0, "9.99"},
	} {
		if got := fixedFromE(c.mant, c.exp); got != c.want {
			t.Errorf("fixedFromE(%q, %d) = %q, want %q", c.mant, c.exp, got, c.want)
		}
	}
}

// TestTieFloor: below tieFloor no value's shortest digits (Go's) lie on
// a midpoint with a neighbour, so shortestE may skip the check there —
// tried on random values of both widths below their floors (and the
// last float4 before 2^22); above the floors ties exist (measured: none
// below 2^25 for float4 and 2^54 for float8, a fifth and a fifth of the
// values just above), so the check is needed there.
func TestTieFloor(t *testing.T) {
	onMid := func(a float64, bits int) bool {
		lo, hi := midpoints(a, bits)
		d, ok := new(big.Rat).SetString(strconv.FormatFloat(a, 'e', -1, bits))
		return ok && (d.Cmp(lo) == 0 || d.Cmp(hi) == 0)
	}
	rng := rand.New(rand.NewPCG(7, 9))
	for i := 0; i < 100000; i++ {
		a := float64(float32(rng.Float64() * (1 << 22)))
		if i < 1000 {
			a = float64(float32(1<<22 - i/2)) // the float4s just below the floor
		}
		if a > 0 && onMid(a, 32) {
			t.Fatalf("float4 %v below the floor is on a midpoint", a)
		}
		if a := rng.Float64() * math.Ldexp(1, 52-rng.IntN(120)); a > 0 && onMid(a, 64) {
			t.Fatalf("float8 %v below the floor is on a midpoint", a)
		}
	}
	ties := [2]int{}
	for i := 0; i < 2000; i++ {
		if onMid(float64(float32(1<<25+4*i)), 32) {
			ties[0]++
		}
		if onMid(float64(1<<54+4*i), 64) {
			ties[1]++
		}
	}
	if ties[0] == 0 || ties[1] == 0 {
		t.Fatalf("ties above the floors: %v; want some of each width (the check would be needless)", ties)
	}
}
