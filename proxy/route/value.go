package route

import (
	"encoding/binary"
	"strconv"
	"strings"
	"unsafe"

	"github.com/jackc/pgx/v5/pgtype"
	pg "github.com/pganalyze/pg_query_go/v6"
)

// vtype is the SQL type of a value on its way to a key: the type of a
// parameter (declared in Parse, given by a cast, or inferred from the key
// column) and the types of the casts applied to it.
type vtype uint8

const (
	vtNone   vtype = iota // no cast / unspecified
	vtText                // text, varchar (no length), unknown
	vtBpchar              // char(n): trailing blanks are dropped when compared as text
	vtName                // name (63 bytes at most)
	vtInt2
	vtInt4
	vtInt8
	vtUUID
	vtOther // anything else: not interpreted (no key)
)

var vtypeNames = [...]string{"", "text", "bpchar", "name", "int2", "int4", "int8", "uuid", "other"}

// String names the type as in a cast.
func (t vtype) String() string { return vtypeNames[t] }

// vtypeOfOID is the vtype of a parameter declared with a built-in type
// (pgx's pgtype OIDs).
func vtypeOfOID(oid uint32) vtype {
	switch oid {
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.UnknownOID:
		return vtText
	case pgtype.BPCharOID:
		return vtBpchar
	case pgtype.NameOID:
		return vtName
	case pgtype.Int2OID:
		return vtInt2
	case pgtype.Int4OID:
		return vtInt4
	case pgtype.Int8OID:
		return vtInt8
	case pgtype.UUIDOID:
		return vtUUID
	}
	return vtOther
}

// builtinTypeOIDs resolves the type names PREPARE may declare.
var builtinTypeOIDs = map[string]uint32{
	"bool": pgtype.BoolOID, "bytea": pgtype.ByteaOID, "name": pgtype.NameOID, "int8": pgtype.Int8OID, "int2": pgtype.Int2OID, "int4": pgtype.Int4OID,
	"text": pgtype.TextOID, "oid": pgtype.OIDOID, "json": pgtype.JSONOID, "float4": pgtype.Float4OID, "float8": pgtype.Float8OID, "unknown": pgtype.UnknownOID,
	"bpchar": pgtype.BPCharOID, "varchar": pgtype.VarcharOID, "date": pgtype.DateOID, "time": pgtype.TimeOID, "timestamp": pgtype.TimestampOID,
	"timestamptz": pgtype.TimestamptzOID, "interval": pgtype.IntervalOID, "numeric": pgtype.NumericOID, "uuid": pgtype.UUIDOID, "jsonb": pgtype.JSONBOID,
}

// typeNameOID returns the OID of a built-in type name, 0 if unknown.
func typeNameOID(tn *pg.TypeName) uint32 {
	if tn == nil || len(tn.ArrayBounds) > 0 || tn.Setof || tn.PctType || len(tn.Names) == 0 {
		return 0
	}
	if len(tn.Names) > 1 && strName(tn.Names[0]) != "pg_catalog" {
		return 0
	}
	return builtinTypeOIDs[strName(tn.Names[len(tn.Names)-1])]
}

// vtypeOfCast is the type a cast converts to. Casts that pad or truncate
// (varchar(n), char(n), name beyond 63 bytes) are vtOther or checked later.
func vtypeOfCast(tn *pg.TypeName) vtype {
	if tn == nil || len(tn.ArrayBounds) > 0 || tn.Setof || tn.PctType || len(tn.Names) == 0 {
		return vtOther
	}
	if len(tn.Names) > 1 && strName(tn.Names[0]) != "pg_catalog" {
		return vtOther
	}
	switch strName(tn.Names[len(tn.Names)-1]) {
	case "text", "unknown":
		return vtText
	case "varchar":
		if len(tn.Typmods) > 0 {
			return vtOther
		}
		return vtText
	case "name":
		return vtName
	case "int2":
		return vtInt2
	case "int4":
		return vtInt4
	case "int8":
		return vtInt8
	case "uuid":
		return vtUUID
	}
	return vtOther
}

func naturalType(k KeyType) vtype {
	if k == KeyText {
		return vtText
	}
	return vtInt8
}

// vkind is what a value turned out to be.
type vkind uint8

const (
	kNone   vkind = iota // not interpretable as a key: constrains nothing
	kNull                // SQL NULL
	kText                // text (s)
	kInt                 // integer (i)
	kNum                 // a numeric constant that is not an integer literal (s)
	kEmpty               // a value no key can equal (42.5 against an int8 key)
	kRefuse              // Postgres would reject it (ref)
)

// kval is a value on its way to a key. s may alias Bind bytes while Route
// runs: copy it before keeping it.
type kval struct {
	kind vkind
	s    string
	i    int64
	ref  *Refusal
	note string // why kNone
}

func none(note string) kval { return kval{kind: kNone, note: note} }

func refuse(state, msg string) kval {
	return kval{kind: kRefuse, ref: &Refusal{SQLState: state, Message: msg}}
}

// text returns the value's text form.
func (v kval) text() string {
	switch v.kind {
	case kText, kNum:
		return v.s
	case kInt:
		return strconv.FormatInt(v.i, 10)
	case kNull:
		return "NULL"
	}
	return ""
}

func intTypeName(t vtype) string {
	switch t {
	case vtInt2:
		return "smallint"
	case vtInt4:
		return "integer"
	}
	return "bigint"
}

func intBits(t vtype) int {
	switch t {
	case vtInt2:
		return 16
	case vtInt4:
		return 32
	}
	return 64
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// parseInt parses an integer as PostgreSQL 15's int2in/int4in/int8in do:
// optional blanks, an optional sign, decimal digits, optional blanks.
func parseInt(s string, t vtype) kval {
	i, j := 0, len(s)
	for i < j && isSpace(s[i]) {
		i++
	}
	for j > i && isSpace(s[j-1]) {
		j--
	}
	body := s[i:j]
	digits := body
	if digits != "" && (digits[0] == '+' || digits[0] == '-') {
		digits = digits[1:]
	}
	if !isDecimal(digits) {
		return refuse("22P02", "invalid input syntax for type "+intTypeName(t)+": \""+s+"\"")
	}
	if body[0] == '+' {
		body = body[1:]
	}
	v, err := strconv.ParseInt(body, 10, intBits(t))
	if err != nil {
		return refuse("22003", "value \""+s+"\" is out of range for type "+intTypeName(t))
	}
	return kval{kind: kInt, i: v}
}

// parseUUID accepts what uuid_in accepts — 32 hex digits, optionally in
// braces, a hyphen allowed after any group of four — and returns the
// canonical text form (lowercase, 8-4-4-4-12), which is what uuid::text
// yields.
func parseUUID(s string) kval {
	bad := refuse("22P02", "invalid input syntax for type uuid: \""+s+"\"")
	src := s
	braces := false
	if src != "" && src[0] == '{' {
		braces = true
		src = src[1:]
	}
	var u [16]byte
	for i := 0; i < 16; i++ {
		if len(src) < 2 {
			return bad
		}
		hi, ok1 := unhex(src[0])
		lo, ok2 := unhex(src[1])
		if !ok1 || !ok2 {
			return bad
		}
		u[i] = hi<<4 | lo
		src = src[2:]
		if src != "" && src[0] == '-' && i%2 == 1 && i < 15 {
			src = src[1:]
		}
	}
	if braces {
		if src == "" || src[0] != '}' {
			return bad
		}
		src = src[1:]
	}
	if src != "" {
		return bad
	}
	return kval{kind: kText, s: uuidText(u[:])}
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func uuidText(u []byte) string {
	const hexd = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = hexd[c>>4], hexd[c&15]
		j += 2
	}
	return string(b[:])
}

// bstr views b as a string without copying; valid while b is.
func bstr(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// decodeParam decodes a Bind parameter of type t in the given format
// (0 text, 1 binary). n is the parameter's 1-based number for messages.
func decodeParam(raw []byte, format int16, t vtype, n int) kval {
	if raw == nil {
		return kval{kind: kNull}
	}
	switch format {
	case 0:
		s := bstr(raw)
		switch t {
		case vtText:
			return kval{kind: kText, s: s}
		case vtBpchar:
			return kval{kind: kText, s: strings.TrimRight(s, " ")}
		case vtName:
			if len(s) > 63 {
				return none("a name parameter longer than 63 bytes is truncated by the server")
			}
			return kval{kind: kText, s: s}
		case vtInt2, vtInt4, vtInt8:
			return parseInt(s, t)
		case vtUUID:
			return parseUUID(s)
		}
		return none("a parameter of this type is not a key type")
	case 1:
		bad := func() kval {
			return refuse("22P03", "incorrect binary data format in bind parameter "+strconv.Itoa(n))
		}
		switch t {
		case vtText:
			return kval{kind: kText, s: bstr(raw)}
		case vtBpchar:
			return kval{kind: kText, s: strings.TrimRight(bstr(raw), " ")}
		case vtName:
			if len(raw) > 63 {
				return none("a name parameter longer than 63 bytes is truncated by the server")
			}
			return kval{kind: kText, s: bstr(raw)}
		case vtInt2:
			if len(raw) != 2 {
				return bad()
			}
			return kval{kind: kInt, i: int64(int16(binary.BigEndian.Uint16(raw)))}
		case vtInt4:
			if len(raw) != 4 {
				return bad()
			}
			return kval{kind: kInt, i: int64(int32(binary.BigEndian.Uint32(raw)))}
		case vtInt8:
			if len(raw) != 8 {
				return bad()
			}
			return kval{kind: kInt, i: int64(binary.BigEndian.Uint64(raw))}
		case vtUUID:
			if len(raw) != 16 {
				return bad()
			}
			return kval{kind: kText, s: uuidText(raw)}
		}
		return none("a binary parameter of this type is not decoded")
	}
	return refuse("22023", "unsupported format code: "+strconv.Itoa(int(format)))
}

// castTo applies an explicit cast (::t) to v.
func castTo(v kval, t vtype) kval {
	switch v.kind {
	case kNull, kNone, kRefuse, kEmpty:
		return v
	}
	switch t {
	case vtText:
		switch v.kind {
		case kText:
			return v
		case kInt:
			return kval{kind: kText, s: strconv.FormatInt(v.i, 10)}
		}
		return none("numeric::text keeps the literal's scale; not interpreted")
	case vtName:
		v = castTo(v, vtText)
		if v.kind == kText && len(v.s) > 63 {
			return none("::name truncates beyond 63 bytes")
		}
		return v
	case vtInt2, vtInt4, vtInt8:
		switch v.kind {
		case kInt:
			if bitsOK(v.i, t) {
				return v
			}
			return refuse("22003", intTypeName(t)+" out of range")
		case kText:
			return parseInt(v.s, t)
		}
		return none("numeric to integer casts round; not interpreted")
	case vtUUID:
		if v.kind == kText {
			return parseUUID(v.s)
		}
		return none("no cast to uuid from this value")
	}
	return none("a cast to a type that is not a key type")
}

func bitsOK(i int64, t vtype) bool {
	switch t {
	case vtInt2:
		return i >= -1<<15 && i < 1<<15
	case vtInt4:
		return i >= -1<<31 && i < 1<<31
	}
	return true
}

// toKey converts v for comparison with a key of type k (the implicit
// conversion of `key = value`).
func toKey(v kval, k KeyType) kval {
	switch v.kind {
	case kNull, kNone, kRefuse, kEmpty:
		return v
	}
	if k == KeyText {
		switch v.kind {
		case kText:
			return v
		case kInt:
			return kval{kind: kText, s: strconv.FormatInt(v.i, 10)}
		}
		return none("a numeric value compared with a text key")
	}
	switch v.kind {
	case kInt:
		return v
	case kText:
		p := parseInt(v.s, vtInt8)
		if p.kind != kInt {
			return none("a text value compared with an integer key")
		}
		return p
	case kNum:
		return numericToInt(v.s)
	}
	return none("not an integer")
}

// numericToInt compares a numeric literal with an integer key: an integral
// value (42.000) is that integer, a fractional one equals no integer.
func numericToInt(s string) kval {
	if strings.ContainsAny(s, "eE") {
		return none("a numeric literal with an exponent is not interpreted")
	}
	intPart, frac, _ := strings.Cut(s, ".")
	if strings.Trim(frac, "0") != "" {
		return kval{kind: kEmpty, note: "no integer equals " + s}
	}
	if intPart == "" || intPart == "-" || intPart == "+" {
		intPart += "0"
	}
	return parseIntLoose(intPart)
}

func parseIntLoose(s string) kval {
	v, err := strconv.ParseInt(strings.TrimPrefix(s, "+"), 10, 64)
	if err != nil {
		return kval{kind: kEmpty, note: "no bigint equals " + s}
	}
	return kval{kind: kInt, i: v}
}

// constVal is the value of an A_Const before casts. A string literal is of
// type unknown: it takes the type of the first cast or, with none, of the
// key it is compared with (literal is then true).
func constVal(c *pg.A_Const) (v kval, literal bool) {
	if c.Isnull {
		return kval{kind: kNull}, false
	}
	switch x := c.Val.(type) {
	case *pg.A_Const_Sval:
		return kval{kind: kText, s: x.Sval.Sval}, true
	case *pg.A_Const_Ival:
		return kval{kind: kInt, i: int64(x.Ival.Ival)}, false
	case *pg.A_Const_Fval:
		s := x.Fval.Fval
		// An integer literal too large for int4 arrives as a Float node; it
		// is an int8 constant when it fits.
		if d := strings.TrimPrefix(s, "-"); isDecimal(d) {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return kval{kind: kInt, i: i}, false
			}
		}
		return kval{kind: kNum, s: s}, false
	}
	return none("a boolean or bit-string constant is not a key"), false
}
