package admin

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// result is a command's answer: a result set (cols) or only a tag.
type result struct {
	cols []column
	rows [][]any
	tag  string
}

// column is one result column: its name and type.
type column struct {
	name string
	oid  uint32
}

// The console's column types are PgBouncer's: text, int4, int8 and
// numeric (pgx's pgtype OIDs).

func textCols(names ...string) []column {
	out := make([]column, len(names))
	for i, n := range names {
		out[i] = column{n, pgtype.TextOID}
	}
	return out
}

// append encodes the result: RowDescription, DataRows, CommandComplete.
func (r *result) append(dst []byte) []byte {
	if r.cols != nil {
		var sp int
		dst, sp = pgwire.BeginMsg(dst, 'T')
		dst = pgwire.AppendU16(dst, uint16(len(r.cols)))
		for _, c := range r.cols {
			dst = pgwire.AppendCStr(dst, c.name)
			dst = pgwire.AppendU32(dst, 0)
			dst = pgwire.AppendU16(dst, 0)
			dst = pgwire.AppendU32(dst, c.oid)
			size := uint16(0xffff) // -1: variable
			switch c.oid {
			case pgtype.Int4OID:
				size = 4
			case pgtype.Int8OID:
				size = 8
			}
			dst = pgwire.AppendU16(dst, size)
			dst = pgwire.AppendU32(dst, 0xffffffff) // typmod -1
			dst = pgwire.AppendU16(dst, 0)          // text
		}
		dst = pgwire.FinishMsg(dst, sp)
		for _, row := range r.rows {
			dst, sp = pgwire.BeginMsg(dst, 'D')
			dst = pgwire.AppendU16(dst, uint16(len(row)))
			for _, v := range row {
				txt, null := valueText(v)
				if null {
					dst = pgwire.AppendU32(dst, 0xffffffff)
					continue
				}
				dst = pgwire.AppendU32(dst, uint32(len(txt)))
				dst = append(dst, txt...)
			}
			dst = pgwire.FinishMsg(dst, sp)
		}
	}
	tag := r.tag
	if tag == "" {
		tag = "SHOW"
	}
	return pgwire.AppendCommandComplete(dst, tag)
}

// valueText formats a value (nil is NULL).
func valueText(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", true
	case string:
		return x, false
	case int:
		return strconv.Itoa(x), false
	case int64:
		return strconv.FormatInt(x, 10), false
	case uint64:
		return strconv.FormatUint(x, 10), false
	case uint32:
		return strconv.FormatUint(uint64(x), 10), false
	case bool:
		if x {
			return "1", false
		}
		return "0", false
	case time.Time:
		if x.IsZero() {
			return "", true
		}
		return x.UTC().Format("2006-01-02 15:04:05 UTC"), false
	case time.Duration:
		return x.String(), false
	}
	return fmt.Sprint(v), false
}

// nullIfEmpty is s, or NULL for "".
func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// hostPort splits an address into host and port (the whole text and 0
// when it has no port: "pipe", "" for none).
func hostPort(a string) (string, int) {
	h, p, err := net.SplitHostPort(a)
	if err != nil {
		return a, 0
	}
	n, _ := strconv.Atoi(p)
	return h, n
}
