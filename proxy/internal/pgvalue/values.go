package pgvalue

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
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

// Field is one column of a RowDescription.
type Field struct {
	Name   string
	Table  uint32
	Attnum uint16
	OID    uint32
	Typlen int16
	Typmod int32
	Format int16
}

// ParseRowDesc decodes a RowDescription (nil → no columns).
func ParseRowDesc(msg []byte) ([]Field, error) {
	if msg == nil {
		return nil, nil
	}
	b := pgwire.Body(msg)
	if len(b) < 2 {
		return nil, pgwire.ProtoErrorf("malformed RowDescription from a shard")
	}
	n := int(binary.BigEndian.Uint16(b))
	i := 2
	fs := make([]Field, 0, n)
	for k := 0; k < n; k++ {
		name, j, err := pgwire.CString(b, i)
		if err != nil || len(b)-j < 18 {
			return nil, pgwire.ProtoErrorf("malformed RowDescription from a shard")
		}
		fs = append(fs, Field{
			Name:   string(name),
			Table:  binary.BigEndian.Uint32(b[j:]),
			Attnum: binary.BigEndian.Uint16(b[j+4:]),
			OID:    binary.BigEndian.Uint32(b[j+6:]),
			Typlen: int16(binary.BigEndian.Uint16(b[j+10:])),
			Typmod: int32(binary.BigEndian.Uint32(b[j+12:])),
			Format: int16(binary.BigEndian.Uint16(b[j+16:])),
		})
		i = j + 18
	}
	return fs, nil
}

// AppendRowDesc encodes a RowDescription.
func AppendRowDesc(dst []byte, fs []Field) []byte {
	dst, sp := pgwire.BeginMsg(dst, 'T')
	dst = pgwire.AppendU16(dst, uint16(len(fs)))
	for _, f := range fs {
		dst = pgwire.AppendCStr(dst, f.Name)
		dst = pgwire.AppendU32(dst, f.Table)
		dst = pgwire.AppendU16(dst, f.Attnum)
		dst = pgwire.AppendU32(dst, f.OID)
		dst = pgwire.AppendU16(dst, uint16(f.Typlen))
		dst = pgwire.AppendU32(dst, uint32(f.Typmod))
		dst = pgwire.AppendU16(dst, uint16(f.Format))
	}
	return pgwire.FinishMsg(dst, sp)
}

// ---- comparison ----

// CompareValues compares non-NULL values of one column as Postgres orders
// them. bytewise says text orders by bytes (the database's collation is
// C/POSIX, or the term says COLLATE "C"); ts is how the shards write
// dates and times (nil: nothing known of it, ISO texts are still read).
func CompareValues(a, b []byte, f *Field, bytewise bool, ts *TimeStyle) (int, *pgwire.Error) {
	unsupported := func() (int, *pgwire.Error) {
		return 0, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: fmt.Sprintf("pgshard cannot merge rows of every shard by column %q (type oid %d, %s format)", f.Name, f.OID, formatName(f.Format)),
			Hint:    "Order, group or aggregate by an integer, numeric, float, boolean, text, uuid, date, time, timestamp or interval value, or add a key so that one shard answers."}
	}
	textLike := func() (int, *pgwire.Error) {
		if !bytewise {
			return 0, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
				Message: fmt.Sprintf("pgshard cannot merge rows of every shard by the text column %q: the shards' collation is not C, so their order is not the order of bytes", f.Name),
				Hint:    `Write COLLATE "C" in the ORDER BY / GROUP BY term (or use a C-collated database), or add a key so that one shard answers.`}
		}
		if f.OID == pgtype.BPCharOID {
			return bytes.Compare(bytes.TrimRight(a, " "), bytes.TrimRight(b, " ")), nil
		}
		return bytes.Compare(a, b), nil
	}
	switch f.OID {
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID:
		return textLike()
	case pgtype.NameOID, pgtype.QCharOID:
		return bytes.Compare(a, b), nil // name and "char" always compare bytewise
	case pgtype.BoolOID:
		if f.Format == 1 {
			return bytes.Compare(a, b), nil
		}
		return cmpInt(boolRank(a), boolRank(b)), nil
	case pgtype.UUIDOID:
		return bytes.Compare(a, b), nil // 16 bytes, or the canonical lowercase text: the same order
	case pgtype.ByteaOID:
		if f.Format == 1 || bytes.HasPrefix(a, []byte(`\x`)) && bytes.HasPrefix(b, []byte(`\x`)) {
			return bytes.Compare(a, b), nil // hex preserves byte order
		}
		return unsupported()
	}
	switch f.OID {
	case pgtype.IntervalOID:
		if c, ok := cmpInterval(a, b, f.Format); ok {
			return c, nil
		}
		return unsupported()
	case pgtype.TimeOID, pgtype.TimetzOID:
		if c, ok := cmpClock(a, b, f.OID == pgtype.TimetzOID, f.Format); ok {
			return c, nil
		}
		return unsupported()
	}
	if f.Format == 1 {
		if c, ok := compareBinary(a, b, f.OID); ok {
			return c, nil
		}
		return unsupported()
	}
	switch f.OID {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.OIDOID:
		x, err1 := strconv.ParseInt(string(a), 10, 64)
		y, err2 := strconv.ParseInt(string(b), 10, 64)
		if err1 != nil || err2 != nil {
			return unsupported()
		}
		return cmpInt(x, y), nil
	case pgtype.Float4OID, pgtype.Float8OID, pgtype.NumericOID:
		x, e1 := DecodeNum(a, f.OID, 0)
		y, e2 := DecodeNum(b, f.OID, 0)
		if e1 != nil || e2 != nil {
			return unsupported()
		}
		return CmpNum(x, y), nil
	case pgtype.DateOID, pgtype.TimestampOID, pgtype.TimestamptzOID:
		c, ok := cmpTime(string(a), string(b), f.OID == pgtype.TimestamptzOID, ts)
		if !ok {
			return 0, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
				Message: fmt.Sprintf("pgshard cannot merge rows of every shard by column %q: it cannot tell which of %q and %q comes first as written", f.Name, a, b),
				Detail:  "A date written day and month as numbers (DateStyle SQL or Postgres) needs DateStyle's order, a time zone abbreviation needs the session's TimeZone and must name one instant there; neither is known inside a transaction block, where SET LOCAL may have changed them.",
				Hint:    "Use DateStyle ISO, ask for binary results, order outside a transaction block, or add a key so that one shard answers."}
		}
		return c, nil
	}
	return unsupported()
}

// compareBinary orders two binary values of the integer, date,
// timestamp and number types; false for another type or a malformed value.
func compareBinary(a, b []byte, oid uint32) (int, bool) {
	switch oid {
	case pgtype.Int2OID:
		if len(a) == 2 && len(b) == 2 {
			return cmpInt(int64(int16(binary.BigEndian.Uint16(a))), int64(int16(binary.BigEndian.Uint16(b)))), true
		}
	case pgtype.Int4OID, pgtype.DateOID:
		if len(a) == 4 && len(b) == 4 {
			return cmpInt(int64(int32(binary.BigEndian.Uint32(a))), int64(int32(binary.BigEndian.Uint32(b)))), true
		}
	case pgtype.OIDOID:
		if len(a) == 4 && len(b) == 4 {
			return cmpInt(int64(binary.BigEndian.Uint32(a)), int64(binary.BigEndian.Uint32(b))), true
		}
	case pgtype.Int8OID, pgtype.TimestampOID, pgtype.TimestamptzOID:
		if len(a) == 8 && len(b) == 8 {
			return cmpInt(int64(binary.BigEndian.Uint64(a)), int64(binary.BigEndian.Uint64(b))), true
		}
	case pgtype.Float4OID, pgtype.Float8OID, pgtype.NumericOID:
		x, e1 := DecodeNum(a, oid, 1)
		y, e2 := DecodeNum(b, oid, 1)
		if e1 == nil && e2 == nil {
			return CmpNum(x, y), true
		}
	}
	return 0, false
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

// ---- numbers ----

// NumKind is what a number is.
type NumKind uint8

const (
	NumNull NumKind = iota
	NumInt          // int2/int4/int8 (i)
	NumDec          // numeric (d)
	NumF4           // float4 (f holds the float32 value)
	NumF8           // float8 (f)
)

// Num is a number the merge computes with.
type Num struct {
	Kind  NumKind
	Int   int64
	Dec   Dec
	Float float64
	OID   uint32 // its SQL type: int2, int4, int8, numeric, float4, float8
}

// Dec is an exact decimal: Coef / 10^Scale, scale being the display scale
// (numeric's dscale); or a special value.
type Dec struct {
	Coef    *big.Int
	Scale   int
	Special uint8 // 0, DecNaN, DecPInf, DecNInf
}

// Dec.Special values: NaN, +Infinity, -Infinity.
const (
	DecNaN uint8 = 1 + iota
	DecPInf
	DecNInf
)

var (
	bigTen   = big.NewInt(10)
	bigNBase = big.NewInt(10000)
)

func pow10(n int) *big.Int { return new(big.Int).Exp(bigTen, big.NewInt(int64(n)), nil) }

func decInt(i int64) Dec { return Dec{Coef: big.NewInt(i)} }

// DecodeNum reads an int, numeric or float value in text or binary.
func DecodeNum(v []byte, oid uint32, format int16) (Num, *pgwire.Error) {
	bad := func() (Num, *pgwire.Error) {
		return Num{}, pgwire.NewError(pgwire.CodeInternalError, fmt.Sprintf("pgshard merge: a shard sent a malformed value of type oid %d", oid))
	}
	n := Num{OID: oid}
	switch oid {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		n.Kind = NumInt
		if format == 1 {
			switch {
			case oid == pgtype.Int2OID && len(v) == 2:
				n.Int = int64(int16(binary.BigEndian.Uint16(v)))
			case oid == pgtype.Int4OID && len(v) == 4:
				n.Int = int64(int32(binary.BigEndian.Uint32(v)))
			case oid == pgtype.Int8OID && len(v) == 8:
				n.Int = int64(binary.BigEndian.Uint64(v))
			default:
				return bad()
			}
			return n, nil
		}
		i, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return bad()
		}
		n.Int = i
		return n, nil
	case pgtype.Float4OID:
		n.Kind = NumF4
		if format == 1 {
			if len(v) != 4 {
				return bad()
			}
			n.Float = float64(math.Float32frombits(binary.BigEndian.Uint32(v)))
			return n, nil
		}
		f, ok := ParsePgFloat(string(v), 32)
		if !ok {
			return bad()
		}
		n.Float = f
		return n, nil
	case pgtype.Float8OID:
		n.Kind = NumF8
		if format == 1 {
			if len(v) != 8 {
				return bad()
			}
			n.Float = math.Float64frombits(binary.BigEndian.Uint64(v))
			return n, nil
		}
		f, ok := ParsePgFloat(string(v), 64)
		if !ok {
			return bad()
		}
		n.Float = f
		return n, nil
	case pgtype.NumericOID:
		n.Kind = NumDec
		var ok bool
		if format == 1 {
			n.Dec, ok = decFromBinary(v)
		} else {
			n.Dec, ok = DecFromText(string(v))
		}
		if !ok {
			return bad()
		}
		return n, nil
	}
	return Num{}, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: fmt.Sprintf("pgshard cannot add up values of type oid %d from every shard", oid),
		Hint:    "Sum and average integers, numeric or floats, or add a key so that one shard answers."}
}

// ParsePgFloat reads a float in Postgres's text form (NaN, Infinity,
// -Infinity included) at bits precision.
func ParsePgFloat(s string, bits int) (float64, bool) {
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

// DecFromText reads numeric_out's text.
func DecFromText(s string) (Dec, bool) {
	switch s {
	case "NaN":
		return Dec{Special: DecNaN}, true
	case "Infinity":
		return Dec{Special: DecPInf}, true
	case "-Infinity":
		return Dec{Special: DecNInf}, true
	}
	digits, scale := s, 0
	if i := strings.IndexByte(s, '.'); i >= 0 {
		digits, scale = s[:i]+s[i+1:], len(s)-i-1
	}
	c, ok := new(big.Int).SetString(digits, 10)
	if !ok {
		return Dec{}, false
	}
	return Dec{Coef: c, Scale: scale}, true
}

// decFromBinary reads numeric_send's form.
func decFromBinary(b []byte) (Dec, bool) {
	if len(b) < 8 {
		return Dec{}, false
	}
	nd := int(binary.BigEndian.Uint16(b))
	weight := int(int16(binary.BigEndian.Uint16(b[2:])))
	sign := binary.BigEndian.Uint16(b[4:])
	dscale := int(binary.BigEndian.Uint16(b[6:]))
	switch sign {
	case 0xC000:
		return Dec{Special: DecNaN}, true
	case 0xD000:
		return Dec{Special: DecPInf}, true
	case 0xF000:
		return Dec{Special: DecNInf}, true
	case 0x0000, 0x4000:
	default:
		return Dec{}, false
	}
	if len(b) != 8+2*nd || dscale > 0x3FFF {
		return Dec{}, false
	}
	c := new(big.Int)
	for i := 0; i < nd; i++ {
		d := binary.BigEndian.Uint16(b[8+2*i:])
		if d >= 10000 {
			return Dec{}, false
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
			if scale > 0x3FFF {
				// Beyond numeric's scale (NUMERIC_DSCALE_MAX): no value
				// Postgres sends, and not one it could be sent back as.
				return Dec{}, false
			}
		}
	}
	if sign == 0x4000 {
		c.Neg(c)
	}
	return Dec{Coef: c, Scale: scale}, true
}

// text is numeric_out.
func (d Dec) Text() string {
	switch d.Special {
	case DecNaN:
		return "NaN"
	case DecPInf:
		return "Infinity"
	case DecNInf:
		return "-Infinity"
	}
	s := new(big.Int).Abs(d.Coef).String()
	neg := d.Coef.Sign() < 0
	if d.Scale > 0 {
		if len(s) <= d.Scale {
			s = strings.Repeat("0", d.Scale-len(s)+1) + s
		}
		s = s[:len(s)-d.Scale] + "." + s[len(s)-d.Scale:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// nbase returns the value's base-10000 digits (no leading or trailing
// zero digits) and the weight of the first: |value| = Σ digits[i] *
// 10000^(weight-i). Zero has no digits and weight 0.
func (d Dec) nbase() (weight int, digits []uint16) {
	s4 := (d.Scale + 3) / 4 * 4
	c := new(big.Int).Abs(d.Coef)
	c.Mul(c, pow10(s4-d.Scale))
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
func (d Dec) AppendBinary(dst []byte) []byte {
	var sign uint16
	switch d.Special {
	case DecNaN:
		return append(dst, 0, 0, 0, 0, 0xC0, 0, 0, 0)
	case DecPInf:
		return append(dst, 0, 0, 0, 0, 0xD0, 0, 0, 0)
	case DecNInf:
		return append(dst, 0, 0, 0, 0, 0xF0, 0, 0, 0)
	}
	weight, digits := d.nbase()
	if d.Coef.Sign() < 0 && len(digits) > 0 {
		sign = 0x4000
	}
	dst = pgwire.AppendU16(dst, uint16(len(digits)))
	dst = pgwire.AppendU16(dst, uint16(int16(weight)))
	dst = pgwire.AppendU16(dst, sign)
	dst = pgwire.AppendU16(dst, uint16(d.Scale))
	for _, g := range digits {
		dst = pgwire.AppendU16(dst, g)
	}
	return dst
}

// decAdd adds exactly, keeping the larger scale (numeric's add_var).
func decAdd(a, b Dec) Dec {
	if a.Special != 0 || b.Special != 0 {
		switch {
		case a.Special == DecNaN || b.Special == DecNaN:
			return Dec{Special: DecNaN}
		case a.Special != 0 && b.Special != 0 && a.Special != b.Special:
			return Dec{Special: DecNaN} // Infinity + -Infinity
		case a.Special != 0:
			return Dec{Special: a.Special}
		}
		return Dec{Special: b.Special}
	}
	s := max(a.Scale, b.Scale)
	x := new(big.Int).Mul(a.Coef, pow10(s-a.Scale))
	y := new(big.Int).Mul(b.Coef, pow10(s-b.Scale))
	return Dec{Coef: x.Add(x, y), Scale: s}
}

// decDiv divides as numeric_div does: the result scale from
// select_div_scale, rounded half away from zero (div_var with round).
func decDiv(a, b Dec) (Dec, *pgwire.Error) {
	if a.Special == DecNaN || b.Special == DecNaN {
		return Dec{Special: DecNaN}, nil
	}
	if b.Special == 0 && b.Coef.Sign() == 0 {
		return Dec{}, pgwire.NewError("22012", "division by zero")
	}
	switch {
	case a.Special != 0 && b.Special != 0:
		return Dec{Special: DecNaN}, nil
	case a.Special != 0:
		if (a.Special == DecPInf) == (b.Coef.Sign() > 0) {
			return Dec{Special: DecPInf}, nil
		}
		return Dec{Special: DecNInf}, nil
	case b.Special != 0:
		return Dec{Coef: new(big.Int), Scale: 0}, nil // finite / infinity = 0
	}
	rscale := selectDivScale(a, b)
	// q = a/b * 10^rscale = (ca * 10^(sb+rscale)) / (cb * 10^sa)
	num := new(big.Int).Mul(a.Coef, pow10(b.Scale+rscale))
	den := new(big.Int).Mul(b.Coef, pow10(a.Scale))
	return Dec{Coef: divRound(num, den), Scale: rscale}, nil
}

// selectDivScale is numeric.c's select_div_scale.
func selectDivScale(a, b Dec) int {
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
	r = max(r, a.Scale, b.Scale, 0)
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
func decRoundInt(d Dec) *big.Int {
	return divRound(d.Coef, pow10(d.Scale))
}

// decCmp orders numerics as Postgres: NaN greatest, then Infinity.
func decCmp(a, b Dec) int {
	rank := func(d Dec) int {
		switch d.Special {
		case DecNaN:
			return 3
		case DecPInf:
			return 2
		case DecNInf:
			return 0
		}
		return 1
	}
	ra, rb := rank(a), rank(b)
	if ra != rb || ra != 1 {
		return cmpInt(int64(ra), int64(rb))
	}
	s := max(a.Scale, b.Scale)
	x := new(big.Int).Mul(a.Coef, pow10(s-a.Scale))
	y := new(big.Int).Mul(b.Coef, pow10(s-b.Scale))
	return x.Cmp(y)
}

// asDec converts an integer or numeric to a dec.
func (n Num) asDec() Dec {
	if n.Kind == NumInt {
		return decInt(n.Int)
	}
	return n.Dec
}

// CmpNum compares two non-NULL numbers as Postgres's cross-type
// comparison operators do: floats as float8, else exactly.
func CmpNum(a, b Num) int {
	if a.Kind == NumF4 || a.Kind == NumF8 || b.Kind == NumF4 || b.Kind == NumF8 {
		return cmpFloat(a.float(), b.float())
	}
	if a.Kind == NumInt && b.Kind == NumInt {
		return cmpInt(a.Int, b.Int)
	}
	return decCmp(a.asDec(), b.asDec())
}

// float is the number as a float8.
func (n Num) float() float64 {
	switch n.Kind {
	case NumF4, NumF8:
		return n.Float
	case NumInt:
		return float64(n.Int)
	}
	f, _ := decToFloat(n.Dec, 64)
	return f
}

// decToFloat is numeric → float8/float4 (numeric_float8: numeric_out,
// then float8in).
func decToFloat(d Dec, bits int) (float64, bool) {
	switch d.Special {
	case DecNaN:
		return math.NaN(), true
	case DecPInf:
		return math.Inf(1), true
	case DecNInf:
		return math.Inf(-1), true
	}
	f, err := strconv.ParseFloat(d.Text(), bits)
	if err != nil && !math.IsInf(f, 0) && f != 0 {
		return f, false
	}
	return f, err == nil
}

// NumAdd adds two partial sums of one column (same type). A NULL side is
// skipped (sum over no rows).
func NumAdd(a, b Num) (Num, *pgwire.Error) {
	switch {
	case a.Kind == NumNull:
		return b, nil
	case b.Kind == NumNull:
		return a, nil
	case a.Kind != b.Kind:
		return Num{}, pgwire.NewError(pgwire.CodeInternalError, "pgshard merge: shards returned sums of different types")
	}
	switch a.Kind {
	case NumInt:
		s := a.Int + b.Int
		if (s > a.Int) != (b.Int > 0) {
			return Num{}, pgwire.NewError("22003", "bigint out of range")
		}
		a.Int = s
	case NumDec:
		a.Dec = decAdd(a.Dec, b.Dec)
	case NumF4:
		s := float32(a.Float) + float32(b.Float) // float4pl: in float4
		if math.IsInf(float64(s), 0) && !math.IsInf(a.Float, 0) && !math.IsInf(b.Float, 0) {
			return Num{}, pgwire.NewError("22003", "value out of range: overflow")
		}
		a.Float = float64(s)
	case NumF8:
		s := a.Float + b.Float
		if math.IsInf(s, 0) && !math.IsInf(a.Float, 0) && !math.IsInf(b.Float, 0) {
			return Num{}, pgwire.NewError("22003", "value out of range: overflow")
		}
		a.Float = s
	}
	return a, nil
}

// NumAvg is avg from the merged sum and count, with Postgres's result
// type: numeric for integer and numeric input (int8_avg / numeric_avg:
// numeric_div(sum, count)), float8 for float8 (float8_avg: Sx / N).
func NumAvg(sum Num, count int64) (Num, *pgwire.Error) {
	if count == 0 || sum.Kind == NumNull {
		return Num{Kind: NumNull}, nil
	}
	switch sum.Kind {
	case NumInt, NumDec:
		d, e := decDiv(sum.asDec(), decInt(count))
		if e != nil {
			return Num{}, e
		}
		return Num{Kind: NumDec, Dec: d, OID: pgtype.NumericOID}, nil
	case NumF8:
		return Num{Kind: NumF8, Float: sum.Float / float64(count), OID: pgtype.Float8OID}, nil
	}
	return Num{}, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: "pgshard cannot merge avg(real): Postgres accumulates it in double precision, which the shards' sum(real) does not give",
		Hint:    "Write avg(x::float8), or add a key so that one shard answers."}
}

// NumCast applies a cast of a merged aggregate to the type to (int2,
// int4, int8, numeric, float4, float8 or text; 0: no cast), as Postgres's
// cast functions do (rounding and range errors included).
func NumCast(n Num, to uint32, efd int) (Num, []byte, *pgwire.Error) {
	if n.Kind == NumNull || to == 0 {
		return n, nil, nil
	}
	switch to {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		lo, hi, name, oid := int64(math.MinInt16), int64(math.MaxInt16), "smallint", uint32(pgtype.Int2OID)
		if to == pgtype.Int4OID {
			lo, hi, name, oid = math.MinInt32, math.MaxInt32, "integer", pgtype.Int4OID
		} else if to == pgtype.Int8OID {
			lo, hi, name, oid = math.MinInt64, math.MaxInt64, "bigint", pgtype.Int8OID
		}
		out := Num{Kind: NumInt, OID: oid}
		switch n.Kind {
		case NumInt:
			out.Int = n.Int
		case NumDec:
			if n.Dec.Special == DecNaN {
				return Num{}, nil, pgwire.NewError(pgwire.CodeFeatureNotSupported, "cannot convert NaN to "+name)
			}
			if n.Dec.Special != 0 {
				return Num{}, nil, pgwire.NewError(pgwire.CodeFeatureNotSupported, "cannot convert infinity to "+name)
			}
			r := decRoundInt(n.Dec)
			if !r.IsInt64() {
				return Num{}, nil, pgwire.NewError("22003", name+" out of range")
			}
			out.Int = r.Int64()
		case NumF4, NumF8:
			r := math.RoundToEven(n.Float) // rint
			if math.IsNaN(r) || r < float64(lo) || r >= -float64(lo) {
				return Num{}, nil, pgwire.NewError("22003", name+" out of range")
			}
			out.Int = int64(r)
		}
		if out.Int < lo || out.Int > hi {
			return Num{}, nil, pgwire.NewError("22003", name+" out of range")
		}
		return out, nil, nil
	case pgtype.NumericOID:
		switch n.Kind {
		case NumInt:
			return Num{Kind: NumDec, Dec: decInt(n.Int), OID: pgtype.NumericOID}, nil, nil
		case NumDec:
			return n, nil, nil
		case NumF8, NumF4:
			// float8_numeric / float4_numeric: DBL_DIG (FLT_DIG) digits.
			digs := 15
			if n.Kind == NumF4 {
				digs = 6
			}
			d, ok := decFromFloatG(n.Float, digs)
			if !ok {
				return Num{}, nil, pgwire.NewError(pgwire.CodeInternalError, "pgshard merge: cannot convert the float to numeric")
			}
			return Num{Kind: NumDec, Dec: d, OID: pgtype.NumericOID}, nil, nil
		}
	case pgtype.Float8OID:
		switch n.Kind {
		case NumInt:
			return Num{Kind: NumF8, Float: float64(n.Int), OID: pgtype.Float8OID}, nil, nil
		case NumDec:
			f, ok := decToFloat(n.Dec, 64)
			if !ok || math.IsInf(f, 0) && n.Dec.Special == 0 {
				return Num{}, nil, pgwire.NewError("22003", fmt.Sprintf("%q is out of range for type double precision", n.Dec.Text()))
			}
			return Num{Kind: NumF8, Float: f, OID: pgtype.Float8OID}, nil, nil
		case NumF4, NumF8:
			return Num{Kind: NumF8, Float: n.Float, OID: pgtype.Float8OID}, nil, nil
		}
	case pgtype.Float4OID:
		switch n.Kind {
		case NumInt:
			return Num{Kind: NumF4, Float: float64(float32(n.Int)), OID: pgtype.Float4OID}, nil, nil
		case NumDec:
			f, ok := decToFloat(n.Dec, 32)
			if !ok || math.IsInf(f, 0) && n.Dec.Special == 0 {
				return Num{}, nil, pgwire.NewError("22003", fmt.Sprintf("%q is out of range for type real", n.Dec.Text()))
			}
			return Num{Kind: NumF4, Float: float64(float32(f)), OID: pgtype.Float4OID}, nil, nil
		case NumF4:
			return n, nil, nil
		case NumF8:
			r := float32(n.Float)
			if math.IsInf(float64(r), 0) && !math.IsInf(n.Float, 0) {
				return Num{}, nil, pgwire.NewError("22003", "value out of range: overflow")
			}
			if r == 0 && n.Float != 0 {
				return Num{}, nil, pgwire.NewError("22003", "value out of range: underflow")
			}
			return Num{Kind: NumF4, Float: float64(r), OID: pgtype.Float4OID}, nil, nil
		}
	case pgtype.TextOID:
		return n, []byte(numText(n, efd)), nil // compared as text (its field says so)
	}
	return Num{}, nil, pgwire.NewError(pgwire.CodeInternalError, "pgshard merge: unknown cast")
}

// decFromFloatG is numeric_in of printf("%.*g", digs, f).
func decFromFloatG(f float64, digs int) (Dec, bool) {
	switch {
	case math.IsNaN(f):
		return Dec{Special: DecNaN}, true
	case math.IsInf(f, 1):
		return Dec{Special: DecPInf}, true
	case math.IsInf(f, -1):
		return Dec{Special: DecNInf}, true
	}
	s := strconv.FormatFloat(f, 'g', digs, 64)
	mant, exp := s, 0
	if i := strings.IndexByte(s, 'e'); i >= 0 {
		mant = s[:i]
		e, err := strconv.Atoi(s[i+1:])
		if err != nil {
			return Dec{}, false
		}
		exp = e
	}
	d, ok := DecFromText(mant)
	if !ok {
		return Dec{}, false
	}
	// numeric_in: value * 10^exp, dscale = max(0, dscale - exp).
	if exp > 0 {
		shift := min(exp, d.Scale)
		d.Scale -= shift
		d.Coef.Mul(d.Coef, pow10(exp-shift))
	} else if exp < 0 {
		d.Scale -= exp
	}
	return d, true
}

// numText is the value's text, as the type's output function writes it.
func numText(n Num, efd int) string {
	switch n.Kind {
	case NumInt:
		return strconv.FormatInt(n.Int, 10)
	case NumDec:
		return n.Dec.Text()
	case NumF4:
		return formatFloat(n.Float, 32, efd)
	case NumF8:
		return formatFloat(n.Float, 64, efd)
	}
	return ""
}

// AppendNum appends a non-NULL value of type n.OID in format.
func AppendNum(dst []byte, n Num, format int16, efd int) []byte {
	if format == 0 {
		return append(dst, numText(n, efd)...)
	}
	switch n.Kind {
	case NumInt:
		switch n.OID {
		case pgtype.Int2OID:
			return pgwire.AppendU16(dst, uint16(int16(n.Int)))
		case pgtype.Int4OID:
			return pgwire.AppendU32(dst, uint32(int32(n.Int)))
		}
		return binary.BigEndian.AppendUint64(dst, uint64(n.Int))
	case NumDec:
		return n.Dec.AppendBinary(dst)
	case NumF4:
		return pgwire.AppendU32(dst, math.Float32bits(float32(n.Float)))
	case NumF8:
		return binary.BigEndian.AppendUint64(dst, math.Float64bits(n.Float))
	}
	return dst
}

// TypeLen is the RowDescription type size of a type the merge computes.
func TypeLen(oid uint32) int16 {
	switch oid {
	case pgtype.Int2OID:
		return 2
	case pgtype.Int4OID, pgtype.Float4OID:
		return 4
	case pgtype.Int8OID, pgtype.Float8OID:
		return 8
	case pgtype.IntervalOID:
		return 16
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
		// Shortest exact digits (Ryu in Postgres: shortestE), in fixed
		// notation for decimal exponents -4 <= exp < 15 (float8) or 6
		// (float4), else scientific.
		e := shortestE(f, bits)
		i := strings.LastIndexByte(e, 'e')
		exp, _ := strconv.Atoi(e[i+1:])
		limit := 15
		if bits == 32 {
			limit = 6
		}
		if exp >= -4 && exp < limit {
			return fixedFromE(e[:i], exp)
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

// fixedFromE writes mant×10^exp (mant: strconv's 'e' mantissa, [-]d[.ddd])
// in fixed notation with no more digits than mant has.
func fixedFromE(mant string, exp int) string {
	sign := ""
	if mant[0] == '-' {
		sign, mant = "-", mant[1:]
	}
	digits := strings.Replace(mant, ".", "", 1)
	point := 1 + exp // digits before the decimal point
	switch {
	case point <= 0:
		return sign + "0." + strings.Repeat("0", -point) + digits
	case point >= len(digits):
		return sign + digits + strings.Repeat("0", point-len(digits))
	}
	return sign + digits[:point] + "." + digits[point:]
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

// DecodeArray reads an array value in binary format: its number of
// dimensions, its element type and, when it has one dimension, its
// elements (sub-slices of v; nil for a NULL element). An empty array has
// ndim 0. ok is false when v is malformed (short or truncated).
func DecodeArray(v []byte) (ndim int, elemOID uint32, elems [][]byte, ok bool) {
	if len(v) < 12 {
		return 0, 0, nil, false
	}
	ndim = int(int32(binary.BigEndian.Uint32(v)))
	elemOID = binary.BigEndian.Uint32(v[8:])
	if ndim != 1 {
		return ndim, elemOID, nil, ndim >= 0
	}
	if len(v) < 20 {
		return ndim, elemOID, nil, false
	}
	n := int(int32(binary.BigEndian.Uint32(v[12:])))
	b := v[20:]
	if n < 0 || n > len(b)/4 {
		return ndim, elemOID, nil, false
	}
	elems = make([][]byte, 0, n)
	for range n {
		if len(b) < 4 {
			return ndim, elemOID, nil, false
		}
		l := int(int32(binary.BigEndian.Uint32(b)))
		b = b[4:]
		if l < 0 {
			elems = append(elems, nil)
			continue
		}
		if len(b) < l {
			return ndim, elemOID, nil, false
		}
		elems = append(elems, b[:l:l])
		b = b[l:]
	}
	return ndim, elemOID, elems, true
}
