package pgvalue

import (
	"math"
	"math/big"
	"strconv"
	"strings"
)

// Postgres writes a float (extra_float_digits > 0, the default) with the
// fewest significant digits that read back as the same value: Ryu
// (src/common/d2s.c, f2s.c), built without STRICTLY_SHORTEST, so that a
// decimal exactly halfway between the value and its neighbour never
// counts as reading back to it, even where round-half-even would make it
// so. Go's strconv counts such a decimal when the value's mantissa is
// even. The two agree but on those ties: the float4 60817408 is
// "6.081741e+07" to Go (60817410 is halfway to 60817412) and
// "6.0817408e+07" to Postgres — a merged sum(real) was written so (found
// by the random differential test's vals shape). shortestE is Go's
// answer where it is not on a midpoint, and Postgres's choice where it
// is: the fewest digits strictly inside the interval of the value's
// neighbours' midpoints, the value rounded to them (half to even), or the
// next decimal up when that rounding falls on the lower midpoint.

// shortestE is f (a float32 value when bits is 32) in the shortest form
// Postgres writes, as strconv's 'e' format: d.ddde±XX. f is finite.
func shortestE(f float64, bits int) string {
	e := strconv.FormatFloat(f, 'e', -1, bits)
	a := math.Abs(f)
	if a < tieFloor(bits) {
		return e // no midpoint of a value this small has so few digits
	}
	lo, hi := midpoints(a, bits)
	d, ok := new(big.Rat).SetString(strings.TrimPrefix(e, "-"))
	if !ok || d.Cmp(lo) != 0 && d.Cmp(hi) != 0 {
		return e
	}
	s := shortestInside(a, lo, hi, bits)
	if f < 0 {
		return "-" + s
	}
	return s
}

// tieFloor is the least magnitude whose midpoints with its neighbours can
// be written in as few digits as the shortest form has (9 for float4, 17
// for float8), so that below it Go's digits are Postgres's with no
// arithmetic. A midpoint is odd×2^j with odd ≥ 2^24 (float4) or 2^53
// (float8); for j < 0 its decimal form is odd×5^-j / 10^-j, whose digits
// are odd×5^-j's: at most 9 only for j ≥ -2, a value of at least 2^22
// (float4), at most 17 only for j ≥ -1, at least 2^52 (float8).
// Subnormals' midpoints (j = -150, -1075) have hundreds of digits.
func tieFloor(bits int) float64 {
	if bits == 32 {
		return 1 << 22
	}
	return 1 << 52
}

// midpoints are the exact midpoints between a (> 0) and its neighbours
// in its own width (the largest finite value's upper neighbour taken a
// gap as wide as the lower).
func midpoints(a float64, bits int) (lo, hi *big.Rat) {
	var below, above float64
	if bits == 32 {
		below = float64(math.Nextafter32(float32(a), 0))
		above = float64(math.Nextafter32(float32(a), float32(math.Inf(1))))
	} else {
		below = math.Nextafter(a, 0)
		above = math.Nextafter(a, math.Inf(1))
	}
	ra := new(big.Rat).SetFloat64(a)
	rb := new(big.Rat).SetFloat64(below)
	var rc *big.Rat
	if math.IsInf(above, 0) || bits == 32 && above > math.MaxFloat32 {
		rc = new(big.Rat).Sub(new(big.Rat).Add(ra, ra), rb)
	} else {
		rc = new(big.Rat).SetFloat64(above)
	}
	half := big.NewRat(1, 2)
	lo = new(big.Rat).Mul(new(big.Rat).Add(ra, rb), half)
	hi = new(big.Rat).Mul(new(big.Rat).Add(ra, rc), half)
	return lo, hi
}

// shortestInside is Ryu's digits for a (> 0) whose interval of decimals
// that read back as a is (lo, hi), both ends excluded: the first length
// with a decimal inside, and at that length a rounded half to even, or
// one up when that is not above lo.
func shortestInside(a float64, lo, hi *big.Rat, bits int) string {
	exact := new(big.Rat).SetFloat64(a)
	exp := decimalExponent(a)
	for p := 1; p <= 17; p++ {
		// scaled so that the p-digit decimals are the integers
		scale := pow10Rat(exp - p + 1)
		q := new(big.Rat).Quo(exact, scale)
		loS := new(big.Rat).Quo(lo, scale)
		hiS := new(big.Rat).Quo(hi, scale)
		first := new(big.Int).Add(floorRat(loS), big.NewInt(1)) // the least integer above lo
		if new(big.Rat).SetInt(first).Cmp(hiS) >= 0 {
			continue // no p-digit decimal strictly inside
		}
		trunc := floorRat(q)
		out := new(big.Int).Set(trunc)
		frac := new(big.Rat).Sub(q, new(big.Rat).SetInt(trunc))
		switch c := frac.Cmp(big.NewRat(1, 2)); {
		case new(big.Rat).SetInt(trunc).Cmp(loS) <= 0:
			out.Add(out, big.NewInt(1)) // at or below lo: the next one up
		case c > 0, c == 0 && trunc.Bit(0) == 1:
			out.Add(out, big.NewInt(1))
		}
		if new(big.Rat).SetInt(out).Cmp(hiS) >= 0 {
			out.Set(trunc)
		}
		return formatDigits(out.String(), exp-p+1)
	}
	return strconv.FormatFloat(a, 'e', -1, bits)
}

// decimalExponent is the exponent of a's first significant digit (a > 0).
func decimalExponent(a float64) int {
	e := strconv.FormatFloat(a, 'e', 40, 64) // exact to 41 digits: no carry into the exponent
	n, _ := strconv.Atoi(e[strings.LastIndexByte(e, 'e')+1:])
	return n
}

// formatDigits writes the integer digits × 10^e as strconv's 'e' format.
func formatDigits(digits string, e int) string {
	exp := e + len(digits) - 1
	if t := strings.TrimRight(digits, "0"); t != "" {
		digits = t
	}
	mant := digits[:1]
	if len(digits) > 1 {
		mant += "." + digits[1:]
	}
	sign := "+"
	if exp < 0 {
		sign, exp = "-", -exp
	}
	es := strconv.Itoa(exp)
	if len(es) < 2 {
		es = "0" + es
	}
	return mant + "e" + sign + es
}

// pow10Rat is 10^n.
func pow10Rat(n int) *big.Rat {
	p := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(max(n, -n))), nil)
	if n < 0 {
		return new(big.Rat).SetFrac(big.NewInt(1), p)
	}
	return new(big.Rat).SetInt(p)
}

// floorRat is ⌊r⌋ for r ≥ 0.
func floorRat(r *big.Rat) *big.Int {
	return new(big.Int).Quo(r.Num(), r.Denom())
}
