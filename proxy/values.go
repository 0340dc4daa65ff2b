package proxy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// The value codec of the merge: how values of the shards' results compare
// (as Postgres orders them) and how the values the proxy computes (merged
// aggregates, their casts) are encoded exactly as Postgres would encode
// that result type, in text and in binary:
//
//   - integers: int2/int4/int8, checked like Postgres (22003 on overflow);
//   - numeric: exact decimals (coefficient and display scale), sums keep
//     the larger scale, division (avg) rounds at the scale Postgres's
//     select_div_scale picks, half away from zero; text as numeric_out,
//     binary as numeric_send (base-10000 digits, leading and trailing
//     zero digits stripped);
//   - float4/float8: IEEE arithmetic in the type's own width (sum(real) is
//     accumulated in float4, as float4pl does); text as float4out/float8out:
//     with extra_float_digits > 0 the shortest exact digits, fixed notation
//     for decimal exponents in [-4, 15) (float8) or [-4, 6) (float4), else
//     d.ddde±XX; with extra_float_digits <= 0, %.Ng with N = 15 (6) +
//     extra_float_digits.
//
// Written by hand: no Go library reproduces Postgres's numeric scale rules
// or its float output thresholds, and the merge must match them byte for
// byte.

// Type OIDs.
const (
	oidBool        = 16
	oidBytea       = 17
	oidChar        = 18
	oidName        = 19
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidText        = 25
	oidOID         = 26
	oidFloat4      = 700
	oidFloat8      = 701
	oidBpchar      = 1042
	oidVarchar     = 1043
	oidDate        = 1082
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidNumeric     = 1700
	oidUUID        = 2950
)

// field is one column of a RowDescription.
type field struct {
	name   string
	table  uint32
	attnum uint16
	oid    uint32
	typlen int16
	typmod int32
	format int16
}

// parseRowDesc decodes a RowDescription (nil → no columns).
func parseRowDesc(msg []byte) ([]field, error) {
	if msg == nil {
		return nil, nil
	}
	b := pgwire.Body(msg)
	if len(b) < 2 {
		return nil, pgwire.ProtoErrorf("malformed RowDescription from a shard")
	}
	n := int(binary.BigEndian.Uint16(b))
	i := 2
	fs := make([]field, 0, n)
	for k := 0; k < n; k++ {
		name, j, err := pgwire.CString(b, i)
		if err != nil || len(b)-j < 18 {
			return nil, pgwire.ProtoErrorf("malformed RowDescription from a shard")
		}
		fs = append(fs, field{
			name:   string(name),
			table:  binary.BigEndian.Uint32(b[j:]),
			attnum: binary.BigEndian.Uint16(b[j+4:]),
			oid:    binary.BigEndian.Uint32(b[j+6:]),
			typlen: int16(binary.BigEndian.Uint16(b[j+10:])),
			typmod: int32(binary.BigEndian.Uint32(b[j+12:])),
			format: int16(binary.BigEndian.Uint16(b[j+16:])),
		})
		i = j + 18
	}
	return fs, nil
}

// appendRowDesc encodes a RowDescription.
func appendRowDesc(dst []byte, fs []field) []byte {
	dst, sp := pgwire.BeginMsg(dst, 'T')
	dst = pgwire.AppendU16(dst, uint16(len(fs)))
	for _, f := range fs {
		dst = pgwire.AppendCStr(dst, f.name)
		dst = pgwire.AppendU32(dst, f.table)
		dst = pgwire.AppendU16(dst, f.attnum)
		dst = pgwire.AppendU32(dst, f.oid)
		dst = pgwire.AppendU16(dst, uint16(f.typlen))
		dst = pgwire.AppendU32(dst, uint32(f.typmod))
		dst = pgwire.AppendU16(dst, uint16(f.format))
	}
	return pgwire.FinishMsg(dst, sp)
}

// ---- comparison ----

// valueOrder compares non-NULL values of one column as Postgres orders
// them. bytewise says text orders by bytes (the database's collation is
// C/POSIX, or the term says COLLATE "C").
func compareValues(a, b []byte, f *field, bytewise bool) (int, *pgwire.Error) {
	unsupported := func() (int, *pgwire.Error) {
		return 0, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: fmt.Sprintf("pgshard cannot merge rows of every shard by column %q (type oid %d, %s format)", f.name, f.oid, formatName(f.format)),
			Hint:    "Order, group or aggregate by an integer, numeric, float, boolean, text, uuid, date or timestamp value, or add a key so that one shard answers."}
	}
	textLike := func() (int, *pgwire.Error) {
		if !bytewise {
			return 0, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
				Message: fmt.Sprintf("pgshard cannot merge rows of every shard by the text column %q: the shards' collation is not C, so their order is not the order of bytes", f.name),
				Hint:    `Write COLLATE "C" in the ORDER BY / GROUP BY term (or use a C-collated database), or add a key so that one shard answers.`}
		}
		if f.oid == oidBpchar {
			return bytes.Compare(bytes.TrimRight(a, " "), bytes.TrimRight(b, " ")), nil
		}
		return bytes.Compare(a, b), nil
	}
	switch f.oid {
	case oidText, oidVarchar, oidBpchar:
		return textLike()
	case oidName, oidChar:
		return bytes.Compare(a, b), nil // name and "char" always compare bytewise
	case oidBool:
		if f.format == 1 {
			return bytes.Compare(a, b), nil
		}
		return cmpInt(boolRank(a), boolRank(b)), nil
	case oidUUID:
		return bytes.Compare(a, b), nil // 16 bytes, or the canonical lowercase text: the same order
	case oidBytea:
		if f.format == 1 || bytes.HasPrefix(a, []byte(`\x`)) && bytes.HasPrefix(b, []byte(`\x`)) {
			return bytes.Compare(a, b), nil // hex preserves byte order
		}
		return unsupported()
	}
	if f.format == 1 {
		switch f.oid {
		case oidInt2:
			if len(a) != 2 || len(b) != 2 {
				return unsupported()
			}
			return cmpInt(int64(int16(binary.BigEndian.Uint16(a))), int64(int16(binary.BigEndian.Uint16(b)))), nil
		case oidInt4, oidDate:
			if len(a) != 4 || len(b) != 4 {
				return unsupported()
			}
			return cmpInt(int64(int32(binary.BigEndian.Uint32(a))), int64(int32(binary.BigEndian.Uint32(b)))), nil
		case oidOID:
			if len(a) != 4 || len(b) != 4 {
				return unsupported()
			}
			return cmpInt(int64(binary.BigEndian.Uint32(a)), int64(binary.BigEndian.Uint32(b))), nil
		case oidInt8, oidTimestamp, oidTimestamptz:
			if len(a) != 8 || len(b) != 8 {
				return unsupported()
			}
			return cmpInt(int64(binary.BigEndian.Uint64(a)), int64(binary.BigEndian.Uint64(b))), nil
		case oidFloat4, oidFloat8, oidNumeric:
			x, e1 := decodeNum(a, f.oid, 1)
			y, e2 := decodeNum(b, f.oid, 1)
			if e1 != nil || e2 != nil {
				return unsupported()
			}
			return cmpNum(x, y), nil
		}
		return unsupported()
	}
	switch f.oid {
	case oidInt2, oidInt4, oidInt8, oidOID:
		x, err1 := strconv.ParseInt(string(a), 10, 64)
		y, err2 := strconv.ParseInt(string(b), 10, 64)
		if err1 != nil || err2 != nil {
			return unsupported()
		}
		return cmpInt(x, y), nil
	case oidFloat4, oidFloat8, oidNumeric:
		x, e1 := decodeNum(a, f.oid, 0)
		y, e2 := decodeNum(b, f.oid, 0)
		if e1 != nil || e2 != nil {
			return unsupported()
		}
		return cmpNum(x, y), nil
	case oidDate, oidTimestamp, oidTimestamptz:
		c, ok := cmpTime(string(a), string(b))
		if !ok {
			return unsupported()
		}
		return c, nil
	}
	return unsupported()
}

func formatName(f int16) string {
	if f == 1 {
		return "binary"
	}
	return "text"
}

func boolRank(b []byte) int64 {
	if len(b) > 0 && (b[0] == 't' || b[0] == 1) {
		return 1
	}
	return 0
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// cmpFloat orders floats like Postgres: NaN is greater than everything and
// equal to itself; -0 equals 0.
func cmpFloat(a, b float64) int {
	an, bn := math.IsNaN(a), math.IsNaN(b)
	switch {
	case an && bn:
		return 0
	case an:
		return 1
	case bn:
		return -1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// cmpTime compares ISO-format date/timestamp texts (DateStyle ISO):
// parsed when they carry a time zone offset, else compared as text (which
// orders ISO values correctly). infinity sorts last, -infinity first.
func cmpTime(a, b string) (int, bool) {
	rank := func(s string) int {
		switch s {
		case "-infinity":
			return 0
		case "infinity":
			return 2
		}
		return 1
	}
	ra, rb := rank(a), rank(b)
	if ra != rb || ra != 1 {
		return cmpInt(int64(ra), int64(rb)), true
	}
	if strings.HasSuffix(a, " BC") || strings.HasSuffix(b, " BC") || len(a) < 10 || len(b) < 10 || a[4] != '-' || b[4] != '-' {
		return 0, false
	}
	ta, erra := parseTimestamptz(a)
	tb, errb := parseTimestamptz(b)
	if erra == nil && errb == nil {
		return ta.Compare(tb), true
	}
	return strings.Compare(a, b), true
}

func parseTimestamptz(s string) (time.Time, error) {
	// Postgres prints offsets as +HH, +HH:MM or +HH:MM:SS.
	for _, layout := range []string{"2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00", "2006-01-02 15:04:05.999999-07:00:00"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("not a timestamptz")
}

// ---- numbers ----

// numKind is what a number is.
type numKind uint8

const (
	nNull numKind = iota
	nInt          // int2/int4/int8 (i)
	nDec          // numeric (d)
	nF4           // float4 (f holds the float32 value)
	nF8           // float8 (f)
)

// num is a number the merge computes with.
type num struct {
	kind numKind
	i    int64
	d    dec
	f    float64
	oid  uint32 // its SQL type: int2, int4, int8, numeric, float4, float8
}

// dec is an exact decimal: c / 10^scale, scale being the display scale
// (numeric's dscale); or a special value.
type dec struct {
	c       *big.Int
	scale   int
	special uint8 // 0, decNaN, decPInf, decNInf
}

const (
	decNaN uint8 = 1 + iota
	decPInf
	decNInf
)

var (
	bigTen   = big.NewInt(10)
	bigNBase = big.NewInt(10000)
)

func pow10(n int) *big.Int { return new(big.Int).Exp(bigTen, big.NewInt(int64(n)), nil) }

func decInt(i int64) dec { return dec{c: big.NewInt(i)} }

// decodeNum reads an int, numeric or float value in text or binary.
func decodeNum(v []byte, oid uint32, format int16) (num, *pgwire.Error) {
	bad := func() (num, *pgwire.Error) {
		return num{}, pgwire.NewError(pgwire.CodeInternalError, fmt.Sprintf("pgshard merge: a shard sent a malformed value of type oid %d", oid))
	}
	n := num{oid: oid}
	switch oid {
	case oidInt2, oidInt4, oidInt8:
		n.kind = nInt
		if format == 1 {
			switch {
			case oid == oidInt2 && len(v) == 2:
				n.i = int64(int16(binary.BigEndian.Uint16(v)))
			case oid == oidInt4 && len(v) == 4:
				n.i = int64(int32(binary.BigEndian.Uint32(v)))
			case oid == oidInt8 && len(v) == 8:
				n.i = int64(binary.BigEndian.Uint64(v))
			default:
				return bad()
			}
			return n, nil
		}
		i, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return bad()
		}
		n.i = i
		return n, nil
	case oidFloat4:
		n.kind = nF4
		if format == 1 {
			if len(v) != 4 {
				return bad()
			}
			n.f = float64(math.Float32frombits(binary.BigEndian.Uint32(v)))
			return n, nil
		}
		f, ok := parsePgFloat(string(v), 32)
		if !ok {
			return bad()
		}
		n.f = f
		return n, nil
	case oidFloat8:
		n.kind = nF8
		if format == 1 {
			if len(v) != 8 {
				return bad()
			}
			n.f = math.Float64frombits(binary.BigEndian.Uint64(v))
			return n, nil
		}
		f, ok := parsePgFloat(string(v), 64)
		if !ok {
			return bad()
		}
		n.f = f
		return n, nil
	case oidNumeric:
		n.kind = nDec
		var ok bool
		if format == 1 {
			n.d, ok = decFromBinary(v)
		} else {
			n.d, ok = decFromText(string(v))
		}
		if !ok {
			return bad()
		}
		return n, nil
	}
	return num{}, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: fmt.Sprintf("pgshard cannot add up values of type oid %d from every shard", oid),
		Hint:    "Sum and average integers, numeric or floats, or add a key so that one shard answers."}
}

func parsePgFloat(s string, bits int) (float64, bool) {
	switch s {
	case "NaN":
		return math.NaN(), true
	case "Infinity":
		return math.Inf(1), true
	case "-Infinity":
		return math.Inf(-1), true
	}
	f, err := strconv.ParseFloat(s, bits)
	return f, err == nil
}

// decFromText reads numeric_out's text.
func decFromText(s string) (dec, bool) {
	switch s {
	case "NaN":
		return dec{special: decNaN}, true
	case "Infinity":
		return dec{special: decPInf}, true
	case "-Infinity":
		return dec{special: decNInf}, true
	}
	digits, scale := s, 0
	if i := strings.IndexByte(s, '.'); i >= 0 {
		digits, scale = s[:i]+s[i+1:], len(s)-i-1
	}
	c, ok := new(big.Int).SetString(digits, 10)
	if !ok {
		return dec{}, false
	}
	return dec{c: c, scale: scale}, true
}

// decFromBinary reads numeric_send's form.
func decFromBinary(b []byte) (dec, bool) {
	if len(b) < 8 {
		return dec{}, false
	}
	nd := int(binary.BigEndian.Uint16(b))
	weight := int(int16(binary.BigEndian.Uint16(b[2:])))
	sign := binary.BigEndian.Uint16(b[4:])
	dscale := int(binary.BigEndian.Uint16(b[6:]))
	switch sign {
	case 0xC000:
		return dec{special: decNaN}, true
	case 0xD000:
		return dec{special: decPInf}, true
	case 0xF000:
		return dec{special: decNInf}, true
	case 0x0000, 0x4000:
	default:
		return dec{}, false
	}
	if len(b) != 8+2*nd || dscale > 0x3FFF {
		return dec{}, false
	}
	c := new(big.Int)
	for i := 0; i < nd; i++ {
		d := binary.BigEndian.Uint16(b[8+2*i:])
		if d >= 10000 {
			return dec{}, false
		}
		c.Mul(c, bigNBase).Add(c, big.NewInt(int64(d)))
	}
	// value = c * 10000^(weight-nd+1); at scale dscale: c * 10^e.
	e := 4*(weight-nd+1) + dscale
	scale := dscale
	if e >= 0 {
		c.Mul(c, pow10(e))
	} else {
		q, r := new(big.Int).QuoRem(c, pow10(-e), new(big.Int))
		if r.Sign() == 0 {
			c = q
		} else {
			scale = dscale - e // digits beyond the display scale: keep them
		}
	}
	if sign == 0x4000 {
		c.Neg(c)
	}
	return dec{c: c, scale: scale}, true
}

// text is numeric_out.
func (d dec) text() string {
	switch d.special {
	case decNaN:
		return "NaN"
	case decPInf:
		return "Infinity"
	case decNInf:
		return "-Infinity"
	}
	s := new(big.Int).Abs(d.c).String()
	neg := d.c.Sign() < 0
	if d.scale > 0 {
		if len(s) <= d.scale {
			s = strings.Repeat("0", d.scale-len(s)+1) + s
		}
		s = s[:len(s)-d.scale] + "." + s[len(s)-d.scale:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// nbase returns the value's base-10000 digits (no leading or trailing
// zero digits) and the weight of the first: |value| = Σ digits[i] *
// 10000^(weight-i). Zero has no digits and weight 0.
func (d dec) nbase() (weight int, digits []uint16) {
	s4 := (d.scale + 3) / 4 * 4
	c := new(big.Int).Abs(d.c)
	c.Mul(c, pow10(s4-d.scale))
	var rev []uint16
	m := new(big.Int)
	for c.Sign() > 0 {
		c.QuoRem(c, bigNBase, m)
		rev = append(rev, uint16(m.Int64()))
	}
	if len(rev) == 0 {
		return 0, nil
	}
	weight = len(rev) - 1 - s4/4
	for i := len(rev) - 1; i >= 0; i-- {
		digits = append(digits, rev[i])
	}
	for len(digits) > 0 && digits[len(digits)-1] == 0 {
		digits = digits[:len(digits)-1]
	}
	return weight, digits
}

// appendBinary is numeric_send.
func (d dec) appendBinary(dst []byte) []byte {
	var sign uint16
	switch d.special {
	case decNaN:
		return append(dst, 0, 0, 0, 0, 0xC0, 0, 0, 0)
	case decPInf:
		return append(dst, 0, 0, 0, 0, 0xD0, 0, 0, 0)
	case decNInf:
		return append(dst, 0, 0, 0, 0, 0xF0, 0, 0, 0)
	}
	weight, digits := d.nbase()
	if d.c.Sign() < 0 && len(digits) > 0 {
		sign = 0x4000
	}
	dst = pgwire.AppendU16(dst, uint16(len(digits)))
	dst = pgwire.AppendU16(dst, uint16(int16(weight)))
	dst = pgwire.AppendU16(dst, sign)
	dst = pgwire.AppendU16(dst, uint16(d.scale))
	for _, g := range digits {
		dst = pgwire.AppendU16(dst, g)
	}
	return dst
}

// decAdd adds exactly, keeping the larger scale (numeric's add_var).
func decAdd(a, b dec) dec {
	if a.special != 0 || b.special != 0 {
		switch {
		case a.special == decNaN || b.special == decNaN:
			return dec{special: decNaN}
		case a.special != 0 && b.special != 0 && a.special != b.special:
			return dec{special: decNaN} // Infinity + -Infinity
		case a.special != 0:
			return dec{special: a.special}
		}
		return dec{special: b.special}
	}
	s := max(a.scale, b.scale)
	x := new(big.Int).Mul(a.c, pow10(s-a.scale))
	y := new(big.Int).Mul(b.c, pow10(s-b.scale))
	return dec{c: x.Add(x, y), scale: s}
}

// decDiv divides as numeric_div does: the result scale from
// select_div_scale, rounded half away from zero (div_var with round).
func decDiv(a, b dec) (dec, *pgwire.Error) {
	if a.special == decNaN || b.special == decNaN {
		return dec{special: decNaN}, nil
	}
	if b.special == 0 && b.c.Sign() == 0 {
		return dec{}, pgwire.NewError("22012", "division by zero")
	}
	switch {
	case a.special != 0 && b.special != 0:
		return dec{special: decNaN}, nil
	case a.special != 0:
		if (a.special == decPInf) == (b.c.Sign() > 0) {
			return dec{special: decPInf}, nil
		}
		return dec{special: decNInf}, nil
	case b.special != 0:
		return dec{c: new(big.Int), scale: 0}, nil // finite / infinity = 0
	}
	rscale := selectDivScale(a, b)
	// q = a/b * 10^rscale = (ca * 10^(sb+rscale)) / (cb * 10^sa)
	num := new(big.Int).Mul(a.c, pow10(b.scale+rscale))
	den := new(big.Int).Mul(b.c, pow10(a.scale))
	return dec{c: divRound(num, den), scale: rscale}, nil
}

// selectDivScale is numeric.c's select_div_scale.
func selectDivScale(a, b dec) int {
	const minSigDigits, decDigits, maxDisplayScale = 16, 4, 1000
	w1, d1 := a.nbase()
	w2, d2 := b.nbase()
	var f1, f2 uint16
	if len(d1) > 0 {
		f1 = d1[0]
	} else {
		w1 = 0
	}
	if len(d2) > 0 {
		f2 = d2[0]
	} else {
		w2 = 0
	}
	qweight := w1 - w2
	if f1 <= f2 {
		qweight--
	}
	r := minSigDigits - qweight*decDigits
	r = max(r, a.scale, b.scale, 0)
	return min(r, maxDisplayScale)
}

// divRound is num/den rounded half away from zero.
func divRound(num, den *big.Int) *big.Int {
	neg := (num.Sign() < 0) != (den.Sign() < 0)
	n, d := new(big.Int).Abs(num), new(big.Int).Abs(den)
	q, r := new(big.Int).QuoRem(n, d, new(big.Int))
	if r.Lsh(r, 1).Cmp(d) >= 0 {
		q.Add(q, big.NewInt(1))
	}
	if neg {
		q.Neg(q)
	}
	return q
}

// decRoundInt rounds half away from zero to an integer (numeric → int).
func decRoundInt(d dec) *big.Int {
	return divRound(d.c, pow10(d.scale))
}

// decCmp orders numerics as Postgres: NaN greatest, then Infinity.
func decCmp(a, b dec) int {
	rank := func(d dec) int {
		switch d.special {
		case decNaN:
			return 3
		case decPInf:
			return 2
		case decNInf:
			return 0
		}
		return 1
	}
	ra, rb := rank(a), rank(b)
	if ra != rb || ra != 1 {
		return cmpInt(int64(ra), int64(rb))
	}
	s := max(a.scale, b.scale)
	x := new(big.Int).Mul(a.c, pow10(s-a.scale))
	y := new(big.Int).Mul(b.c, pow10(s-b.scale))
	return x.Cmp(y)
}

// asDec converts an integer or numeric to a dec.
func (n num) asDec() dec {
	if n.kind == nInt {
		return decInt(n.i)
	}
	return n.d
}

// cmpNum compares two non-NULL numbers as Postgres's cross-type
// comparison operators do: floats as float8, else exactly.
func cmpNum(a, b num) int {
	if a.kind == nF4 || a.kind == nF8 || b.kind == nF4 || b.kind == nF8 {
		return cmpFloat(a.float(), b.float())
	}
	if a.kind == nInt && b.kind == nInt {
		return cmpInt(a.i, b.i)
	}
	return decCmp(a.asDec(), b.asDec())
}

// float is the number as a float8.
func (n num) float() float64 {
	switch n.kind {
	case nF4, nF8:
		return n.f
	case nInt:
		return float64(n.i)
	}
	f, _ := decToFloat(n.d, 64)
	return f
}

// decToFloat is numeric → float8/float4 (numeric_float8: numeric_out,
// then float8in).
func decToFloat(d dec, bits int) (float64, bool) {
	switch d.special {
	case decNaN:
		return math.NaN(), true
	case decPInf:
		return math.Inf(1), true
	case decNInf:
		return math.Inf(-1), true
	}
	f, err := strconv.ParseFloat(d.text(), bits)
	if err != nil && !math.IsInf(f, 0) && f != 0 {
		return f, false
	}
	return f, err == nil
}

// numAdd adds two partial sums of one column (same type). A NULL side is
// skipped (sum over no rows).
func numAdd(a, b num) (num, *pgwire.Error) {
	switch {
	case a.kind == nNull:
		return b, nil
	case b.kind == nNull:
		return a, nil
	case a.kind != b.kind:
		return num{}, pgwire.NewError(pgwire.CodeInternalError, "pgshard merge: shards returned sums of different types")
	}
	switch a.kind {
	case nInt:
		s := a.i + b.i
		if (s > a.i) != (b.i > 0) {
			return num{}, pgwire.NewError("22003", "bigint out of range")
		}
		a.i = s
	case nDec:
		a.d = decAdd(a.d, b.d)
	case nF4:
		s := float32(a.f) + float32(b.f) // float4pl: in float4
		if math.IsInf(float64(s), 0) && !math.IsInf(a.f, 0) && !math.IsInf(b.f, 0) {
			return num{}, pgwire.NewError("22003", "value out of range: overflow")
		}
		a.f = float64(s)
	case nF8:
		s := a.f + b.f
		if math.IsInf(s, 0) && !math.IsInf(a.f, 0) && !math.IsInf(b.f, 0) {
			return num{}, pgwire.NewError("22003", "value out of range: overflow")
		}
		a.f = s
	}
	return a, nil
}

// numAvg is avg from the merged sum and count, with Postgres's result
// type: numeric for integer and numeric input (int8_avg / numeric_avg:
// numeric_div(sum, count)), float8 for float8 (float8_avg: Sx / N).
func numAvg(sum num, count int64) (num, *pgwire.Error) {
	if count == 0 || sum.kind == nNull {
		return num{kind: nNull}, nil
	}
	switch sum.kind {
	case nInt, nDec:
		d, e := decDiv(sum.asDec(), decInt(count))
		if e != nil {
			return num{}, e
		}
		return num{kind: nDec, d: d, oid: oidNumeric}, nil
	case nF8:
		return num{kind: nF8, f: sum.f / float64(count), oid: oidFloat8}, nil
	}
	return num{}, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: "pgshard cannot merge avg(real): Postgres accumulates it in double precision, which the shards' sum(real) does not give",
		Hint:    "Write avg(x::float8), or add a key so that one shard answers."}
}

// numCast applies a cast of a merged aggregate, as Postgres's cast
// functions do (rounding and range errors included).
func numCast(n num, c route.Cast, efd int) (num, []byte, *pgwire.Error) {
	if n.kind == nNull || c == route.CastNone {
		return n, nil, nil
	}
	switch c {
	case route.CastInt2, route.CastInt4, route.CastInt8:
		lo, hi, name, oid := int64(math.MinInt16), int64(math.MaxInt16), "smallint", uint32(oidInt2)
		if c == route.CastInt4 {
			lo, hi, name, oid = math.MinInt32, math.MaxInt32, "integer", oidInt4
		} else if c == route.CastInt8 {
			lo, hi, name, oid = math.MinInt64, math.MaxInt64, "bigint", oidInt8
		}
		out := num{kind: nInt, oid: oid}
		switch n.kind {
		case nInt:
			out.i = n.i
		case nDec:
			if n.d.special == decNaN {
				return num{}, nil, pgwire.NewError(pgwire.CodeFeatureNotSupported, "cannot convert NaN to "+name)
			}
			if n.d.special != 0 {
				return num{}, nil, pgwire.NewError(pgwire.CodeFeatureNotSupported, "cannot convert infinity to "+name)
			}
			r := decRoundInt(n.d)
			if !r.IsInt64() {
				return num{}, nil, pgwire.NewError("22003", name+" out of range")
			}
			out.i = r.Int64()
		case nF4, nF8:
			r := math.RoundToEven(n.f) // rint
			if math.IsNaN(r) || r < float64(lo) || r >= -float64(lo) {
				return num{}, nil, pgwire.NewError("22003", name+" out of range")
			}
			out.i = int64(r)
		}
		if out.i < lo || out.i > hi {
			return num{}, nil, pgwire.NewError("22003", name+" out of range")
		}
		return out, nil, nil
	case route.CastNumeric:
		switch n.kind {
		case nInt:
			return num{kind: nDec, d: decInt(n.i), oid: oidNumeric}, nil, nil
		case nDec:
			return n, nil, nil
		case nF8, nF4:
			// float8_numeric / float4_numeric: DBL_DIG (FLT_DIG) digits.
			digs := 15
			if n.kind == nF4 {
				digs = 6
			}
			d, ok := decFromFloatG(n.f, digs)
			if !ok {
				return num{}, nil, pgwire.NewError(pgwire.CodeInternalError, "pgshard merge: cannot convert the float to numeric")
			}
			return num{kind: nDec, d: d, oid: oidNumeric}, nil, nil
		}
	case route.CastFloat8:
		switch n.kind {
		case nInt:
			return num{kind: nF8, f: float64(n.i), oid: oidFloat8}, nil, nil
		case nDec:
			f, ok := decToFloat(n.d, 64)
			if !ok || math.IsInf(f, 0) && n.d.special == 0 {
				return num{}, nil, pgwire.NewError("22003", fmt.Sprintf("%q is out of range for type double precision", n.d.text()))
			}
			return num{kind: nF8, f: f, oid: oidFloat8}, nil, nil
		case nF4, nF8:
			return num{kind: nF8, f: n.f, oid: oidFloat8}, nil, nil
		}
	case route.CastFloat4:
		switch n.kind {
		case nInt:
			return num{kind: nF4, f: float64(float32(n.i)), oid: oidFloat4}, nil, nil
		case nDec:
			f, ok := decToFloat(n.d, 32)
			if !ok || math.IsInf(f, 0) && n.d.special == 0 {
				return num{}, nil, pgwire.NewError("22003", fmt.Sprintf("%q is out of range for type real", n.d.text()))
			}
			return num{kind: nF4, f: float64(float32(f)), oid: oidFloat4}, nil, nil
		case nF4:
			return n, nil, nil
		case nF8:
			r := float32(n.f)
			if math.IsInf(float64(r), 0) && !math.IsInf(n.f, 0) {
				return num{}, nil, pgwire.NewError("22003", "value out of range: overflow")
			}
			if r == 0 && n.f != 0 {
				return num{}, nil, pgwire.NewError("22003", "value out of range: underflow")
			}
			return num{kind: nF4, f: float64(r), oid: oidFloat4}, nil, nil
		}
	case route.CastText:
		return n, []byte(numText(n, efd)), nil // compared as text (its field says so)
	}
	return num{}, nil, pgwire.NewError(pgwire.CodeInternalError, "pgshard merge: unknown cast")
}

// decFromFloatG is numeric_in of printf("%.*g", digs, f).
func decFromFloatG(f float64, digs int) (dec, bool) {
	switch {
	case math.IsNaN(f):
		return dec{special: decNaN}, true
	case math.IsInf(f, 1):
		return dec{special: decPInf}, true
	case math.IsInf(f, -1):
		return dec{special: decNInf}, true
	}
	s := strconv.FormatFloat(f, 'g', digs, 64)
	mant, exp := s, 0
	if i := strings.IndexByte(s, 'e'); i >= 0 {
		mant = s[:i]
		e, err := strconv.Atoi(s[i+1:])
		if err != nil {
			return dec{}, false
		}
		exp = e
	}
	d, ok := decFromText(mant)
	if !ok {
		return dec{}, false
	}
	// numeric_in: value * 10^exp, dscale = max(0, dscale - exp).
	if exp > 0 {
		shift := min(exp, d.scale)
		d.scale -= shift
		d.c.Mul(d.c, pow10(exp-shift))
	} else if exp < 0 {
		d.scale -= exp
	}
	return d, true
}

// numText is the value's text, as the type's output function writes it.
func numText(n num, efd int) string {
	switch n.kind {
	case nInt:
		return strconv.FormatInt(n.i, 10)
	case nDec:
		return n.d.text()
	case nF4:
		return formatFloat(n.f, 32, efd)
	case nF8:
		return formatFloat(n.f, 64, efd)
	}
	return ""
}

// appendNum appends a non-NULL value of type n.oid in format.
func appendNum(dst []byte, n num, format int16, efd int) []byte {
	if format == 0 {
		return append(dst, numText(n, efd)...)
	}
	switch n.kind {
	case nInt:
		switch n.oid {
		case oidInt2:
			return pgwire.AppendU16(dst, uint16(int16(n.i)))
		case oidInt4:
			return pgwire.AppendU32(dst, uint32(int32(n.i)))
		}
		return binary.BigEndian.AppendUint64(dst, uint64(n.i))
	case nDec:
		return n.d.appendBinary(dst)
	case nF4:
		return pgwire.AppendU32(dst, math.Float32bits(float32(n.f)))
	case nF8:
		return binary.BigEndian.AppendUint64(dst, math.Float64bits(n.f))
	}
	return dst
}

// typeLen is the RowDescription type size of a type the merge computes.
func typeLen(oid uint32) int16 {
	switch oid {
	case oidInt2:
		return 2
	case oidInt4, oidFloat4:
		return 4
	case oidInt8, oidFloat8:
		return 8
	}
	return -1
}

// formatFloat is float4out / float8out with extra_float_digits efd.
func formatFloat(f float64, bits, efd int) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	if efd > 0 {
		// Shortest exact digits (Ryu in Postgres, the same digits in Go),
		// in fixed notation for decimal exponents -4 <= exp < 15 (float8)
		// or 6 (float4), else scientific.
		e := strconv.FormatFloat(f, 'e', -1, bits)
		i := strings.LastIndexByte(e, 'e')
		exp, _ := strconv.Atoi(e[i+1:])
		limit := 15
		if bits == 32 {
			limit = 6
		}
		if exp >= -4 && exp < limit {
			return strconv.FormatFloat(f, 'f', -1, bits)
		}
		return e
	}
	digits := 15 + efd
	if bits == 32 {
		digits = 6 + efd
	}
	if digits < 1 {
		digits = 1
	}
	return formatG(f, digits)
}

// formatG is C's printf("%.*g", digits, f).
func formatG(f float64, digits int) string {
	e := strconv.FormatFloat(f, 'e', digits-1, 64) // d.ddd…e±XX, rounded to digits
	i := strings.LastIndexByte(e, 'e')
	exp, _ := strconv.Atoi(e[i+1:])
	if exp < -4 || exp >= digits {
		mant := e[:i]
		if strings.IndexByte(mant, '.') >= 0 {
			mant = strings.TrimRight(strings.TrimRight(mant, "0"), ".")
		}
		return mant + e[i:]
	}
	s := strconv.FormatFloat(f, 'f', max(digits-1-exp, 0), 64)
	if strings.IndexByte(s, '.') >= 0 {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
