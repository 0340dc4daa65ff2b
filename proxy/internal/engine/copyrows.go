package engine

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// COPY (query) TO STDOUT whose rows need merging across shards
// (route.CopyOut.Rows): the shards run the query as a read, the merge
// runs as for the SELECT, and what it answers is rewritten on its way to
// the client into the COPY Postgres would have sent — the
// RowDescription into a CopyOutResponse (and the HEADER line), each
// DataRow into a CopyData line (text or CSV, escaped and quoted as
// Postgres's COPY TO does, or a binary tuple: a binary DataRow's body is
// one), the CommandComplete into CopyDone and "COPY n". Streamed: the
// client connection's writer is swapped for copyRowsWriter while the
// merge runs, as a cursor's capture is (cursor.go), and every flush is
// converted and written on.
//
// Hand-written: the escaping is Postgres's CopyAttributeOutText and
// CopyAttributeOutCSV, which no library reproduces byte for byte.

// copyRowsWriter converts a merge's answer into a COPY's and writes it
// to the client connection dst.
type copyRowsWriter struct {
	dst *clientConn
	co  *route.CopyOut
	// quoted[i]: FORCE_QUOTE of column i; single: one column (a lone
	// \. is then quoted in CSV).
	quoted []bool
	single bool
	// head: a binary COPY's file header, not yet written (it goes in
	// the first CopyData, as Postgres sends it).
	head bool
	// failed: the COPY could not begin (a FORCE_QUOTE column the query
	// does not have: Postgres's 42703 before its CopyOutResponse): the
	// merge's rows are dropped.
	failed  bool
	scratch []byte
	line    []byte
	cols    [][]byte
}

// Read: nothing is read (the fan-out only writes).
func (w *copyRowsWriter) Read([]byte) (int, error) { return 0, io.EOF }

// Write converts the whole messages of p (a flush writes whole
// messages) and writes them to the client.
func (w *copyRowsWriter) Write(p []byte) (int, error) {
	w.scratch = w.convert(w.scratch[:0], p)
	w.dst.wmu.Lock()
	_, err := w.dst.io.Write(w.scratch)
	w.dst.wmu.Unlock()
	if cap(w.scratch) > 1<<20 {
		w.scratch = nil
	}
	return len(p), err
}

// convert appends the COPY's messages for the merge's messages p.
func (w *copyRowsWriter) convert(out, p []byte) []byte {
	for msg := range pgwire.Msgs(p) {
		switch msg[0] {
		case 'T':
			out = w.begin(out, msg)
		case 'D':
			if !w.failed {
				out = w.row(out, msg)
			}
		case 'C':
			if !w.failed {
				out = w.end(out, msg)
			}
		default:
			out = append(out, msg...)
		}
	}
	return out
}

// begin answers the RowDescription: the CopyOutResponse, and the header
// line when the COPY asks for one.
func (w *copyRowsWriter) begin(out, msg []byte) []byte {
	fs, err := pgvalue.ParseRowDesc(msg)
	if err != nil {
		w.failed = true
		return pgwire.AppendError(out, pgwire.AsError(err, pgwire.NewError(pgwire.CodeProtocolViolation, err.Error())))
	}
	co := w.co
	w.quoted, w.single = make([]bool, len(fs)), len(fs) == 1
	for i := range w.quoted {
		w.quoted[i] = co.ForceQuoteAll
	}
	for _, name := range co.ForceQuote {
		i := slices.IndexFunc(fs, func(f pgvalue.Field) bool { return f.Name == name })
		if i < 0 {
			w.failed = true
			return pgwire.AppendError(out, &pgwire.Error{Code: pgwire.CodeUndefinedColumn, Message: fmt.Sprintf("column %q does not exist", name)})
		}
		w.quoted[i] = true
	}
	if co.Format == route.CopyBinary {
		w.head = true
		return pgwire.AppendCopyOutResponse(out, 1, len(fs))
	}
	out = pgwire.AppendCopyOutResponse(out, 0, len(fs))
	if co.Header {
		w.line = w.line[:0]
		for i, f := range fs {
			if i > 0 {
				w.line = append(w.line, co.Delim)
			}
			w.line = w.value(w.line, []byte(f.Name), false)
		}
		out = pgwire.AppendCopyData(out, append(w.line, '\n'))
	}
	return out
}

// row answers one DataRow with its CopyData.
func (w *copyRowsWriter) row(out, msg []byte) []byte {
	co := w.co
	if co.Format == route.CopyBinary {
		return pgwire.AppendCopyData(out, append(w.binaryStart(), pgwire.Body(msg)...))
	}
	cols, err := pgwire.DataRowCols(w.cols[:0], msg)
	w.cols = cols
	if err != nil {
		w.failed = true
		return pgwire.AppendError(out, pgwire.AsError(err, pgwire.NewError(pgwire.CodeProtocolViolation, err.Error())))
	}
	w.line = w.line[:0]
	for i, v := range cols {
		if i > 0 {
			w.line = append(w.line, co.Delim)
		}
		if v == nil {
			w.line = append(w.line, co.Null...)
			continue
		}
		w.line = w.value(w.line, v, i < len(w.quoted) && w.quoted[i])
	}
	return pgwire.AppendCopyData(out, append(w.line, '\n'))
}

// end answers the merge's CommandComplete ("SELECT n"): a binary COPY's
// trailer (after its header if no row came), CopyDone and "COPY n".
func (w *copyRowsWriter) end(out, msg []byte) []byte {
	n := int64(0)
	if tag := bytes.TrimRight(pgwire.Body(msg), "\x00"); bytes.HasPrefix(tag, []byte("SELECT ")) {
		n, _ = strconv.ParseInt(string(tag[len("SELECT "):]), 10, 64)
	}
	if w.co.Format == route.CopyBinary {
		out = pgwire.AppendCopyData(out, append(w.binaryStart(), 0xff, 0xff))
	}
	out = pgwire.AppendEmpty(out, 'c')
	return pgwire.AppendCommandComplete(out, "COPY "+strconv.FormatInt(n, 10))
}

// binaryStart empties the line for a binary COPY's next CopyData, which
// begins with the file header if none went out yet (Postgres sends it
// with the first tuple, or with the trailer when there is none).
func (w *copyRowsWriter) binaryStart() []byte {
	w.line = w.line[:0]
	if w.head {
		w.line, w.head = pgwire.AppendCopyBinaryHeader(w.line), false
	}
	return w.line
}

// value appends one non-null value as the COPY's format writes it.
func (w *copyRowsWriter) value(dst, v []byte, forceQuote bool) []byte {
	if w.co.Format == route.CopyCSV {
		return appendCopyCSV(dst, v, w.co, forceQuote, w.single)
	}
	return appendCopyText(dst, v, w.co.Delim)
}

// copyTextEscapes are the C escapes COPY's text format writes for
// control bytes (backspace, form feed, newline, carriage return, tab,
// vertical tab); other control bytes go as they are.
var copyTextEscapes = [0x20]byte{'\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't', '\v': 'v'}

// appendCopyText appends v escaped as COPY's text format does: the C
// escapes of copyTextEscapes, a backslash before a backslash or the
// delimiter; other bytes as they are (in the client's encoding: the
// shards converted them).
func appendCopyText(dst, v []byte, delim byte) []byte {
	start := 0
	for i, c := range v {
		switch {
		case c < 0x20 && copyTextEscapes[c] != 0:
			dst = append(append(dst, v[start:i]...), '\\', copyTextEscapes[c])
			start = i + 1
		case c == '\\' || c == delim:
			dst = append(append(dst, v[start:i]...), '\\')
			start = i // the byte itself follows the backslash
		}
	}
	return append(dst, v[start:]...)
}

// appendCopyCSV appends v as COPY's CSV format does: quoted when forced,
// when it equals the NULL string, when it holds the delimiter, the quote
// or a line break, or when it is a lone \. in a one-column COPY; inside
// quotes, the escape character before each quote and escape character.
func appendCopyCSV(dst, v []byte, co *route.CopyOut, force, single bool) []byte {
	quote := force || string(v) == co.Null || single && string(v) == `\.`
	if !quote {
		quote = bytes.IndexByte(v, co.Delim) >= 0 || bytes.IndexByte(v, co.Quote) >= 0 || bytes.ContainsAny(v, "\r\n")
	}
	if !quote {
		return append(dst, v...)
	}
	dst = append(dst, co.Quote)
	start := 0
	for i, c := range v {
		if c == co.Quote || c == co.Escape {
			dst = append(append(dst, v[start:i]...), co.Escape)
			start = i
		}
	}
	return append(append(dst, v[start:]...), co.Quote)
}

// clientOnlyEncodings are the client encodings whose multibyte
// characters may hold ASCII bytes (a backslash, a delimiter): Postgres
// steps over them character by character, the writer would not. Under
// every name Postgres takes for them (its encoding aliases), written as
// it compares them: lower case, letters and digits only.
var clientOnlyEncodings = map[string]bool{
	"sjis": true, "shiftjis": true, "mskanji": true, "win932": true, "windows932": true, "shiftjis2004": true,
	"big5": true, "win950": true, "windows950": true,
	"gbk": true, "cp936": true, "win936": true, "windows936": true,
	"uhc": true, "cp949": true, "win949": true, "windows949": true,
	"gb18030": true, "johab": true,
}

// encodingKey is an encoding name as Postgres compares names: lower
// case, letters and digits only ("Shift_JIS" is "shiftjis").
func encodingKey(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return -1
	}, name)
}

// copyRowsCheck refuses what the writer cannot write as Postgres would:
// the extended protocol (a COPY's portal would need its own answers), a
// client-only encoding (cur: the session's settings).
func copyRowsCheck(f *fanPlan, cur *backend.Settings) *pgwire.Error {
	if !f.simple {
		return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: "a COPY (query) TO whose rows pgshard merges runs only as a simple query",
			Hint:    "Send the COPY as a simple query (as psql, pgx's CopyTo and JDBC's CopyManager do)."}
	}
	if enc, ok := cur.Get("client_encoding"); ok && clientOnlyEncodings[encodingKey(enc)] {
		return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: fmt.Sprintf("a COPY (query) TO whose rows pgshard merges is not written in client encoding %s", enc),
			Hint:    "Use a UTF8 client encoding for the COPY, or SELECT the rows."}
	}
	return nil
}

// runCopyRows runs x's merge m of a COPY (query) TO with the client
// connection's writer swapped for a copyRowsWriter; what x answered
// before the COPY goes out first.
func runCopyRows(x *fanExec, m *route.Merge, bv *pgwire.BindView, bytewise bool) error {
	restore, err := copyRowsSwap(x, m.CopyOut)
	if err != nil {
		return err
	}
	err = x.fanMerge(m, bv, bytewise, -1)
	restore()
	return err
}

// copyRowsSwap swaps x's client connection for a copyRowsWriter of co,
// after flushing what x answered before the COPY; restore converts what
// is left unflushed and swaps the connection back.
func copyRowsSwap(x *fanExec, co *route.CopyOut) (restore func(), err error) {
	cc := x.cc
	if err := cc.flush(); err != nil {
		return nil, err
	}
	w := &copyRowsWriter{dst: cc, co: co}
	x.cc = &clientConn{io: w, flushes: cc.flushes}
	return func() {
		tail := w.convert(nil, x.cc.out)
		cc.flushes = x.cc.flushes
		x.cc = cc
		cc.out = append(cc.out, tail...)
	}, nil
}
