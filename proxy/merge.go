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

	"github.com/pgshard/pgshard/proxy/route"
)

// Merging rows of different shards needs Postgres's order for each column
// type. Supported: integers, floats, numeric (text format), bool, text-like
// types (C collation: byte order), uuid, date, timestamp and timestamptz.
// Anything else is refused with 0A000 rather than merged wrongly.

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
	oidJSONB       = 3802
)

// colInfo is one result column: type and format.
type colInfo struct {
	name   string
	oid    uint32
	format int16
}

// parseRowDesc decodes a RowDescription (nil → no columns).
func parseRowDesc(msg []byte) ([]colInfo, error) {
	if msg == nil {
		return nil, nil
	}
	b := body(msg)
	if len(b) < 2 {
		return nil, protoErrorf("malformed RowDescription from a shard")
	}
	n := int(binary.BigEndian.Uint16(b))
	i := 2
	cols := make([]colInfo, 0, n)
	for k := 0; k < n; k++ {
		name, j, err := cstring(b, i)
		if err != nil || len(b)-j < 18 {
			return nil, protoErrorf("malformed RowDescription from a shard")
		}
		c := colInfo{name: string(name)}
		c.oid = binary.BigEndian.Uint32(b[j+6:])
		c.format = int16(binary.BigEndian.Uint16(b[j+16:]))
		cols = append(cols, c)
		i = j + 18
	}
	return cols, nil
}

// dataRowValue returns column col of a raw DataRow (nil, false for NULL).
func dataRowValue(msg []byte, col int) ([]byte, bool) {
	b := body(msg)
	if len(b) < 2 {
		return nil, false
	}
	n := int(binary.BigEndian.Uint16(b))
	if col >= n {
		return nil, false
	}
	i := 2
	for k := 0; ; k++ {
		if i+4 > len(b) {
			return nil, false
		}
		l := int(int32(binary.BigEndian.Uint32(b[i:])))
		i += 4
		if k == col {
			if l < 0 {
				return nil, false
			}
			if i+l > len(b) {
				return nil, false
			}
			return b[i : i+l], true
		}
		if l > 0 {
			i += l
		}
	}
}

// splitDataRow copies a DataRow's values (nil = NULL).
func splitDataRow(msg []byte) [][]byte { return decodeDataRow(msg) }

// appendDataRow appends a DataRow.
func appendDataRow(dst []byte, row [][]byte) []byte {
	dst, sp := beginMsg(dst, 'D')
	dst = appendU16(dst, uint16(len(row)))
	for _, v := range row {
		if v == nil {
			dst = appendU32(dst, 0xFFFFFFFF)
			continue
		}
		dst = appendU32(dst, uint32(len(v)))
		dst = append(dst, v...)
	}
	return finishMsg(dst, sp)
}

// compareRows orders two DataRows by the sort keys (<0: a first).
func compareRows(a, b []byte, keys []route.SortKey, cols []colInfo) (int, *Error) {
	for _, k := range keys {
		if k.Column < 0 || k.Column >= len(cols) {
			return 0, newError(codeInternalError, fmt.Sprintf("pgshard merge: sort column %d is not in the result", k.Column))
		}
		av, aok := dataRowValue(a, k.Column)
		bv, bok := dataRowValue(b, k.Column)
		var c int
		switch {
		case !aok && !bok:
			c = 0
		case !aok:
			c = 1
			if k.NullsFirst {
				c = -1
			}
		case !bok:
			c = -1
			if k.NullsFirst {
				c = 1
			}
		default:
			var e *Error
			c, e = compareValues(av, bv, cols[k.Column])
			if e != nil {
				return 0, e
			}
			if k.Desc {
				c = -c
			}
		}
		if c != 0 {
			return c, nil
		}
	}
	return 0, nil
}

// compareValues compares two non-NULL values of one column as Postgres
// orders them.
func compareValues(a, b []byte, c colInfo) (int, *Error) {
	unsupported := func() (int, *Error) {
		return 0, &Error{Code: codeFeatureNotSupported,
			Message: fmt.Sprintf("pgshard cannot merge rows of every shard ordered by column %q (type oid %d, format %d)", c.name, c.oid, c.format),
			Hint:    "Order by an integer, numeric, float, text, uuid, date or timestamp column, or add a key so that one shard answers."}
	}
	if c.format == 1 {
		switch c.oid {
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
		case oidFloat4:
			if len(a) != 4 || len(b) != 4 {
				return unsupported()
			}
			return cmpFloat(float64(math.Float32frombits(binary.BigEndian.Uint32(a))), float64(math.Float32frombits(binary.BigEndian.Uint32(b)))), nil
		case oidFloat8:
			if len(a) != 8 || len(b) != 8 {
				return unsupported()
			}
			return cmpFloat(math.Float64frombits(binary.BigEndian.Uint64(a)), math.Float64frombits(binary.BigEndian.Uint64(b))), nil
		case oidBool, oidText, oidVarchar, oidName, oidChar, oidUUID, oidBytea:
			return bytes.Compare(a, b), nil
		case oidBpchar:
			return bytes.Compare(bytes.TrimRight(a, " "), bytes.TrimRight(b, " ")), nil
		}
		return unsupported()
	}
	switch c.oid {
	case oidInt2, oidInt4, oidInt8, oidOID:
		x, err1 := strconv.ParseInt(string(a), 10, 64)
		y, err2 := strconv.ParseInt(string(b), 10, 64)
		if err1 != nil || err2 != nil {
			return unsupported()
		}
		return cmpInt(x, y), nil
	case oidFloat4, oidFloat8:
		x, ok1 := parsePgFloat(string(a))
		y, ok2 := parsePgFloat(string(b))
		if !ok1 || !ok2 {
			return unsupported()
		}
		return cmpFloat(x, y), nil
	case oidNumeric:
		c, ok := cmpNumeric(string(a), string(b))
		if !ok {
			return unsupported()
		}
		return c, nil
	case oidBool, oidText, oidVarchar, oidName, oidChar, oidUUID:
		return bytes.Compare(a, b), nil
	case oidBpchar:
		return bytes.Compare(bytes.TrimRight(a, " "), bytes.TrimRight(b, " ")), nil
	case oidDate, oidTimestamp, oidTimestamptz:
		c, ok := cmpTime(string(a), string(b))
		if !ok {
			return unsupported()
		}
		return c, nil
	}
	return unsupported()
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

// cmpFloat orders floats like Postgres: NaN is greater than everything.
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

func parsePgFloat(s string) (float64, bool) {
	switch s {
	case "NaN":
		return math.NaN(), true
	case "Infinity":
		return math.Inf(1), true
	case "-Infinity":
		return math.Inf(-1), true
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}

// cmpNumeric compares numeric text values exactly (NaN greatest,
// Infinity below NaN).
func cmpNumeric(a, b string) (int, bool) {
	rank := func(s string) (int, *big.Rat, bool) {
		switch s {
		case "NaN":
			return 3, nil, true
		case "Infinity":
			return 2, nil, true
		case "-Infinity":
			return 0, nil, true
		}
		r, ok := new(big.Rat).SetString(s)
		return 1, r, ok
	}
	ra, xa, ok1 := rank(a)
	rb, xb, ok2 := rank(b)
	if !ok1 || !ok2 {
		return 0, false
	}
	if ra != rb {
		return cmpInt(int64(ra), int64(rb)), true
	}
	if ra != 1 {
		return 0, true
	}
	return xa.Cmp(xb), true
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

// combineAggregates combines the single row of each shard column by
// column: sum, min or max; AggNone keeps the first shard's value. NULLs
// (aggregates over no rows) are skipped.
func combineAggregates(rows [][][]byte, aggs []route.Agg, cols []colInfo) ([][]byte, *Error) {
	out := make([][]byte, len(rows[0]))
	for c := range out {
		agg := route.AggNone
		if c < len(aggs) {
			agg = aggs[c]
		}
		var col colInfo
		if c < len(cols) {
			col = cols[c]
		}
		var acc []byte
		have := false
		for _, r := range rows {
			if c >= len(r) {
				return nil, newError(codeInternalError, "pgshard merge: shards returned rows of different widths")
			}
			v := r[c]
			if agg == route.AggNone {
				if !have {
					acc, have = v, true
				}
				continue
			}
			if v == nil {
				continue
			}
			if !have {
				acc, have = v, true
				continue
			}
			switch agg {
			case route.AggSum:
				sum, e := addValues(acc, v, col)
				if e != nil {
					return nil, e
				}
				acc = sum
			case route.AggMin, route.AggMax:
				cmp, e := compareValues(v, acc, col)
				if e != nil {
					return nil, e
				}
				if agg == route.AggMin && cmp < 0 || agg == route.AggMax && cmp > 0 {
					acc = v
				}
			}
		}
		out[c] = acc
	}
	return out, nil
}

// addValues adds two values of a sum/count column.
func addValues(a, b []byte, c colInfo) ([]byte, *Error) {
	unsupported := &Error{Code: codeFeatureNotSupported,
		Message: fmt.Sprintf("pgshard cannot add up column %q of every shard (type oid %d, format %d)", c.name, c.oid, c.format)}
	if c.format == 1 {
		switch c.oid {
		case oidInt8:
			if len(a) != 8 || len(b) != 8 {
				return nil, unsupported
			}
			return binary.BigEndian.AppendUint64(nil, uint64(int64(binary.BigEndian.Uint64(a))+int64(binary.BigEndian.Uint64(b)))), nil
		case oidInt4:
			if len(a) != 4 || len(b) != 4 {
				return nil, unsupported
			}
			return binary.BigEndian.AppendUint32(nil, uint32(int32(binary.BigEndian.Uint32(a))+int32(binary.BigEndian.Uint32(b)))), nil
		case oidFloat8:
			if len(a) != 8 || len(b) != 8 {
				return nil, unsupported
			}
			s := math.Float64frombits(binary.BigEndian.Uint64(a)) + math.Float64frombits(binary.BigEndian.Uint64(b))
			return binary.BigEndian.AppendUint64(nil, math.Float64bits(s)), nil
		}
		return nil, unsupported
	}
	switch c.oid {
	case oidInt2, oidInt4, oidInt8:
		x, err1 := strconv.ParseInt(string(a), 10, 64)
		y, err2 := strconv.ParseInt(string(b), 10, 64)
		if err1 != nil || err2 != nil {
			return nil, unsupported
		}
		return strconv.AppendInt(nil, x+y, 10), nil
	case oidFloat4, oidFloat8:
		x, ok1 := parsePgFloat(string(a))
		y, ok2 := parsePgFloat(string(b))
		if !ok1 || !ok2 {
			return nil, unsupported
		}
		return []byte(formatPgFloat(x + y)), nil
	case oidNumeric:
		s, ok := addNumeric(string(a), string(b))
		if !ok {
			return nil, unsupported
		}
		return []byte(s), nil
	}
	return nil, unsupported
}

func formatPgFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// addNumeric adds two numeric texts exactly, keeping the larger scale.
func addNumeric(a, b string) (string, bool) {
	if a == "NaN" || b == "NaN" {
		return "NaN", true
	}
	x, ok1 := new(big.Rat).SetString(a)
	y, ok2 := new(big.Rat).SetString(b)
	if !ok1 || !ok2 {
		return "", false
	}
	scale := max(numScale(a), numScale(b))
	return new(big.Rat).Add(x, y).FloatString(scale), true
}

func numScale(s string) int {
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return len(s) - i - 1
	}
	return 0
}
