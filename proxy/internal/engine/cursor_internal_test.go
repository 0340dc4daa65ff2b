package engine

import (
	"slices"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// dataRow is a DataRow of one text value.
func dataRow(v string) []byte {
	b, sp := pgwire.BeginMsg(nil, 'D')
	b = pgwire.AppendU16(b, 1)
	b = pgwire.AppendU32(b, uint32(len(v)))
	b = append(b, v...)
	return pgwire.FinishMsg(b, sp)
}

// msgTypes lists the message types in b, with each DataRow's value.
func msgTypes(t *testing.T, b []byte) string {
	t.Helper()
	var out []string
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("a partial message: %q", b)
		}
		n := 1 + int(uint32(b[1])<<24|uint32(b[2])<<16|uint32(b[3])<<8|uint32(b[4]))
		s := string(b[0])
		switch b[0] {
		case 'D':
			s += string(b[11:n])
		case 'C':
			s += "(" + string(b[5:n-1]) + ")"
		}
		out = append(out, s)
		b = b[n:]
	}
	return strings.Join(out, " ")
}

// TestCutCursor: the answers of a read fetched in parts are split into
// what goes out before the rows (the RowDescription only when asked),
// the rows (the cursor) and what follows the read's CommandComplete;
// an answer that does not end in "SELECT n" (an error) makes no cursor.
func TestCutCursor(t *testing.T) {
	var out []byte
	out = pgwire.AppendEmpty(out, '1')
	out = pgwire.AppendCommandComplete(out, "BEGIN") // an answer planned before the read
	out = pgwire.AppendEmpty(out, '2')
	out = append(out, 'T', 0, 0, 0, 6, 0, 0)
	for _, v := range []string{"a", "b", "c"} {
		out = append(out, dataRow(v)...)
	}
	out = pgwire.AppendNotice(out, "NOTICE", "00000", "n")
	out = pgwire.AppendCommandComplete(out, "SELECT 3")
	out = pgwire.AppendRFQ(out, 'T')
	for _, asked := range []bool{false, true} {
		fc, rest := cutCursor(out, "c1", asked)
		if fc == nil {
			t.Fatalf("asked=%v: no cursor", asked)
		}
		wantPre := "1 C(BEGIN) 2"
		if asked {
			wantPre += " T"
		}
		if got := msgTypes(t, rest[0]); got != wantPre {
			t.Errorf("asked=%v: before the rows %q, want %q", asked, got, wantPre)
		}
		if got := msgTypes(t, rest[1]); got != "N Z" {
			t.Errorf("asked=%v: after the rows %q, want the notice and ReadyForQuery", asked, got)
		}
		if got := msgTypes(t, fc.rows); got != "Da Db Dc" || len(fc.offs) != 3 || fc.name != "c1" || fc.desc == nil {
			t.Errorf("asked=%v: cursor %q offs %v desc %v", asked, got, fc.offs, fc.desc)
		}
	}
	failed := pgwire.AppendError(pgwire.AppendEmpty(nil, '2'), pgwire.NewError("XX000", "boom"))
	failed = pgwire.AppendRFQ(failed, 'E')
	if fc, _ := cutCursor(failed, "", false); fc != nil {
		t.Errorf("an error made a cursor")
	}
	if got := msgTypes(t, dropRows(append(append(dataRow("x"), failed...), dataRow("y")...), false)); got != "2 E Z" {
		t.Errorf("dropRows: %q", got)
	}
	described := slices.Concat([]byte{'T', 0, 0, 0, 6, 0, 0}, pgwire.AppendEmpty(nil, '2'), []byte{'T', 0, 0, 0, 6, 0, 0}, dataRow("x"), failed[5:])
	for _, desc := range []bool{false, true} {
		want := map[bool]string{false: "T 2 T E Z", true: "T 2 E Z"}[desc]
		if got := msgTypes(t, dropRows(described, desc)); got != want {
			t.Errorf("dropRows(desc=%v): %q, want %q (only the description just before the error goes)", desc, got, want)
		}
	}
	empty := pgwire.AppendCommandComplete(pgwire.AppendEmpty(nil, '2'), "SELECT 0")
	if fc, rest := cutCursor(empty, "", false); fc == nil || len(fc.offs) != 0 || msgTypes(t, rest[0]) != "2" {
		t.Errorf("no rows: %+v", fc)
	}
}

// TestAppendFetch: Execute's row limit as Postgres applies it to a
// portal: at most the limit, PortalSuspended when it was reached (also
// exactly), the rest with "SELECT n" of that fetch, then SELECT 0; a
// limit of 0 or a negative one fetches every row left.
func TestAppendFetch(t *testing.T) {
	fc := &fanCursor{}
	for _, v := range []string{"a", "b", "c", "d", "e"} {
		fc.offs = append(fc.offs, len(fc.rows))
		fc.rows = append(fc.rows, dataRow(v)...)
	}
	steps := []struct {
		limit int32
		want  string
	}{
		{2, "Da Db s"}, {3, "Dc Dd De s"}, {1, "C(SELECT 0)"}, {0, "C(SELECT 0)"},
	}
	pos, atEnd := 0, false
	for _, st := range steps {
		var b []byte
		b, pos, atEnd = fc.appendFetch(nil, pos, atEnd, st.limit)
		if got := msgTypes(t, b); got != st.want {
			t.Errorf("Execute(%d): %q, want %q", st.limit, got, st.want)
		}
	}
	b, _, end := fc.appendFetch(nil, 3, false, 0)
	if got := msgTypes(t, b); got != "Dd De C(SELECT 2)" || !end {
		t.Errorf("Execute(0) from row 3: %q end=%v", got, end)
	}
	b, _, _ = fc.appendFetch(nil, 4, false, rowLimit(uint32(1<<31)))
	if got := msgTypes(t, b); got != "De C(SELECT 1)" {
		t.Errorf("a negative limit: %q", got)
	}
}

// TestCursorCapture: the capture keeps whole messages, DataRows up to
// its bound; beyond it, rows are counted and tooBig names the setting.
func TestCursorCapture(t *testing.T) {
	c := &cursorCapture{limit: 2 * len(dataRow("a"))}
	var in []byte
	in = pgwire.AppendEmpty(in, '2')
	for _, v := range []string{"a", "b", "c", "d"} {
		in = append(in, dataRow(v)...)
	}
	if n, err := c.Write(in); n != len(in) || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if got := msgTypes(t, c.buf); got != "2 Da Db" || c.dropped != 2 {
		t.Errorf("kept %q, dropped %d", got, c.dropped)
	}
	if e := c.tooBig(&clientConn{io: c}); e == nil || e.Code != pgwire.CodeProgramLimitExceeded || !strings.Contains(e.Hint, "proxy.cursor_buffer_bytes") {
		t.Errorf("tooBig: %+v", e)
	}
	var none *cursorCapture
	if none.tooBig(&clientConn{}) != nil {
		t.Errorf("tooBig without a capture")
	}
	// The rows still in the client buffer are flushed into the capture
	// first, and counted.
	roomy := &cursorCapture{limit: 1 << 20}
	if roomy.tooBig(&clientConn{io: roomy, out: dataRow("z")}) != nil || msgTypes(t, roomy.buf) != "Dz" {
		t.Errorf("tooBig within the bound: kept %q", roomy.buf)
	}
	tight := &cursorCapture{limit: 1}
	if tight.tooBig(&clientConn{io: tight, out: dataRow("z")}) == nil {
		t.Errorf("tooBig: a row over the bound left in the client buffer was not counted")
	}
}
