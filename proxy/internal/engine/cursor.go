package engine

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/pgshard/pgshard/proxy/internal/obs"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// Cursors over a read of every shard: a client that fetches a portal in
// parts — an Execute with a row limit (JDBC's fetch size with autocommit
// off, Statement.setMaxRows, postgres.js's cursors), or a Flush between
// the Bind and its Execute (node-postgres's pg-cursor) — gets the rows of
// a merged read as Postgres gives a portal's: at most the limit per
// Execute, then PortalSuspended, until the Execute that finds fewer ends
// it with its CommandComplete ("SELECT n" of that Execute's rows).
//
// The merge runs to its end at the first Execute (or at the Flush), on
// every shard at once, as a whole read does; its rows are kept in the
// proxy (fanCursor), as a coordinator materialises a multi-shard cursor,
// and later Executes of the portal are answered from them without a
// backend. A portal held open on every shard between the client's
// messages would pin a backend per shard for as long as the client
// fetches; the rows kept are bounded instead (Config.CursorBufferBytes,
// 54000 beyond, nothing kept).
//
//	first Execute(n) ─▶ fanExec.runCursor: the read into a capture
//	  (cursorCapture), then cutCursor: the answers around the rows go
//	  out, the first n rows with PortalSuspended (or the rest with
//	  CommandComplete), the rest is kept (cursorSet.put)
//	later Execute(n) ─▶ planCursorExecute: a local answer of the next
//	  rows; its effect (effCursor) moves the cursor as it is sent
//	Describe ─▶ its RowDescription; Close ─▶ dropped (effCursor)
//	a Bind of the same portal name, or the end of the transaction (Sync
//	  outside a block, COMMIT or ROLLBACK) ─▶ dropped (cursorSet.clear)

// fanCursor is the rest of a read of every shard fetched in parts.
type fanCursor struct {
	name string
	// desc is the read's RowDescription message.
	desc []byte
	// rows holds the DataRow messages back to back; offs where each
	// begins.
	rows []byte
	offs []int
	// pos is the next row to send; atEnd: an Execute completed it.
	pos   int
	atEnd bool
}

// cursorSet is a session's cursors (at most a few: one per portal the
// client fetches in parts), counted in metrics (nil: not counted).
type cursorSet struct {
	list    []*fanCursor
	metrics *obs.Metrics
}

// count adds n cursors like fc (n = 1 or -1) to the metrics.
func (c *cursorSet) count(fc *fanCursor, n int) {
	if c.metrics == nil {
		return
	}
	c.metrics.Cursors.Add(float64(n))
	c.metrics.CursorBytes.Add(float64(n * (len(fc.desc) + len(fc.rows) + 8*len(fc.offs))))
}

func (c *cursorSet) get(name string) *fanCursor {
	for _, fc := range c.list {
		if fc.name == name {
			return fc
		}
	}
	return nil
}

// put adds fc, replacing the cursor of its name.
func (c *cursorSet) put(fc *fanCursor) {
	c.drop(fc.name)
	c.list = append(c.list, fc)
	c.count(fc, 1)
}

func (c *cursorSet) drop(name string) {
	for i, fc := range c.list {
		if fc.name == name {
			c.list = append(c.list[:i], c.list[i+1:]...)
			c.count(fc, -1)
			return
		}
	}
}

// clear drops every cursor: the transaction that held them ended.
func (c *cursorSet) clear() {
	for _, fc := range c.list {
		c.count(fc, -1)
	}
	clear(c.list)
	c.list = c.list[:0]
}

// cursorAt is where a pipeline's plan left a cursor (its Executes so
// far), read by the next Execute of the same pipeline.
type cursorAt struct {
	name  string
	pos   int
	atEnd bool
}

// appendFetch appends the answer to an Execute of fc with row limit
// limit (rowLimit's; 0: every row left) from row pos, and returns where it leaves
// fc: at most limit rows, then PortalSuspended when the limit was reached,
// else the rest and CommandComplete (as Postgres ends a portal's fetch:
// a limit met exactly still suspends, and the next Execute completes
// with SELECT 0).
func (fc *fanCursor) appendFetch(dst []byte, pos int, atEnd bool, limit int32) ([]byte, int, bool) {
	if atEnd {
		return pgwire.AppendCommandComplete(dst, "SELECT 0"), pos, true
	}
	n := len(fc.offs) - pos
	if limit > 0 && int(limit) <= n {
		n = int(limit)
	} else {
		atEnd = true
	}
	dst = append(dst, fc.rowBytes(pos, pos+n)...)
	if atEnd {
		return pgwire.AppendCommandComplete(dst, "SELECT "+strconv.Itoa(n)), pos + n, true
	}
	return pgwire.AppendEmpty(dst, 's'), pos + n, false
}

// rowBytes are the DataRow messages of rows [lo, hi).
func (fc *fanCursor) rowBytes(lo, hi int) []byte {
	if lo >= hi {
		return nil
	}
	end := len(fc.rows)
	if hi < len(fc.offs) {
		end = fc.offs[hi]
	}
	return fc.rows[fc.offs[lo]:end]
}

// cursorCapture is the client connection's writer while a read fetched
// in parts runs (fanExec.runCursor): what the merge flushes is kept, its
// DataRows up to limit bytes; beyond that they are counted, not kept.
type cursorCapture struct {
	buf     []byte
	rowSize int
	limit   int
	dropped int
}

// Read: nothing is read from a capture (clientConn's io reads and
// writes; a fan-out only writes).
func (c *cursorCapture) Read([]byte) (int, error) { return 0, io.EOF }

// Write keeps the whole messages of p (a flush writes whole messages).
func (c *cursorCapture) Write(p []byte) (int, error) {
	for msg := range pgwire.Msgs(p) {
		c.keep(msg)
	}
	return len(p), nil
}

func (c *cursorCapture) keep(msg []byte) {
	if msg[0] == 'D' {
		if c.dropped > 0 || c.rowSize+len(msg) > c.limit {
			c.dropped++
			return
		}
		c.rowSize += len(msg)
	}
	c.buf = append(c.buf, msg...)
}

// tooBig is the error of a read fetched in parts whose rows exceeded the
// proxy's bound (nil if they did not, or if c is nil: no read fetched in
// parts), once the rows still in cc's buffer are flushed to the capture:
// the merge answers it in place of its CommandComplete, and the read
// fails as if a shard had failed it.
func (c *cursorCapture) tooBig(cc *clientConn) *pgwire.Error {
	if c == nil {
		return nil
	}
	_ = cc.flush() // into the capture, which counts the rows it keeps
	if c.dropped == 0 {
		return nil
	}
	limit, dropped := c.limit, c.dropped
	return &pgwire.Error{Code: pgwire.CodeProgramLimitExceeded,
		Message: fmt.Sprintf("a read of every shard fetched in parts keeps its rows in pgshard, and this one has more than %d bytes of them (%d rows over)", limit, dropped),
		Hint:    "Fetch it whole (no fetch size, no cursor: its rows stream), add a LIMIT or a key, or raise proxy.cursor_buffer_bytes."}
}

// runCursor runs x's read, fetched in parts (x.f.fetch: its first
// Execute's row limit, or fetchApart), into a capture, and answers the
// client with what a portal fetched that way answers; the rows left
// become the session's cursor of the portal.
func (x *fanExec) runCursor() error {
	f := x.f
	cc := x.cc
	capt := &cursorCapture{limit: x.gen.Config.CursorBufferBytes}
	x.cc = &clientConn{io: capt, flushes: cc.flushes}
	outStart, asked := x.outStart, f.describe
	x.outStart, f.describe, x.capt = 0, true, capt
	err := x.run()
	x.capt = nil
	captured := append(capt.buf, x.cc.out...)
	x.cc, x.outStart, f.describe = cc, outStart, asked
	name := f.portal
	if f.fetch == fetchDeclare {
		name = f.cursor
	}
	fc, rest := cutCursor(captured, name, asked && f.fetch != fetchDeclare)
	if fc == nil {
		cc.out = append(cc.out, dropRows(captured, !asked || f.fetch == fetchDeclare)...)
		return err
	}
	cc.out = append(cc.out, rest[0]...)
	pos, atEnd := 0, false
	switch f.fetch {
	case fetchApart:
	case fetchDeclare:
		if asked {
			cc.out = pgwire.AppendEmpty(cc.out, 'n') // a DECLARE's portal describes no rows
		}
		cc.out = pgwire.AppendCommandComplete(cc.out, "DECLARE CURSOR")
	default:
		cc.out, pos, atEnd = fc.appendFetch(cc.out, 0, false, f.fetch)
	}
	cc.out = append(cc.out, rest[1]...)
	fc.pos, fc.atEnd = pos, atEnd
	x.cursors.put(fc)
	return err
}

// rowLimit is an Execute's row limit as Postgres reads it: a signed
// count, none (0) when not positive.
func rowLimit(n uint32) int32 { return max(int32(n), 0) }

// fetchApart is fanPlan.fetch for a portal flushed or synced before its
// Execute: the read runs then, and every Execute is answered from the
// cursor.
const fetchApart = -1

// cutCursor splits the answers of a read fetched in parts: the rows of
// its last CommandComplete ("SELECT n", only notices and ReadyForQuery
// after it) become a cursor of portal name, with the RowDescription just
// before them; rest[0] is what goes out before the rows (without that
// RowDescription unless the client asked for it: asked), rest[1] what
// goes after the CommandComplete (notices, ReadyForQuery). Nil when the
// read did not end that way (an error: the answers go out as they are).
func cutCursor(out []byte, name string, asked bool) (*fanCursor, [2][]byte) {
	var at []int // where each message begins
	off := 0
	for msg := range pgwire.Msgs(out) {
		at = append(at, off)
		off += len(msg)
	}
	out = out[:off]
	end := func(k int) int {
		if k+1 < len(at) {
			return at[k+1]
		}
		return len(out)
	}
	c := len(at) - 1
	for c >= 0 && (out[at[c]] == 'Z' || out[at[c]] == 'N') {
		c--
	}
	if c < 0 || out[at[c]] != 'C' || !strings.HasPrefix(string(out[at[c]+5:end(c)]), "SELECT ") {
		return nil, [2][]byte{}
	}
	notes := c // notices between the rows and CommandComplete
	for notes > 0 && out[at[notes-1]] == 'N' {
		notes--
	}
	first := notes // the first row
	for first > 0 && out[at[first-1]] == 'D' {
		first--
	}
	fc := &fanCursor{name: name}
	pre := out[:at[first]]
	if first > 0 && out[at[first-1]] == 'T' {
		fc.desc = append([]byte(nil), out[at[first-1]:at[first]]...)
		if !asked {
			pre = out[:at[first-1]]
		}
	}
	if first < notes {
		fc.rows = append([]byte(nil), out[at[first]:at[notes]]...)
		for k := first; k < notes; k++ {
			fc.offs = append(fc.offs, at[k]-at[first])
		}
	}
	post := append(append([]byte(nil), out[at[notes]:at[c]]...), out[end(c):]...)
	return fc, [2][]byte{pre, post}
}

// dropRows is out without its DataRows: a read fetched in parts that
// failed answers its error, not the rows before it (which a fetch would
// not all have sent); with desc, without the RowDescription just before
// the error too (runCursor asked for it, the client did not).
func dropRows(out []byte, desc bool) []byte {
	kept := out[:0:0]
	descAt := -1 // where a RowDescription kept begins
	for msg := range pgwire.Msgs(out) {
		switch msg[0] {
		case 'D':
		case 'E':
			if desc && descAt >= 0 {
				kept = kept[:descAt]
			}
			fallthrough
		default:
			descAt = -1
			if msg[0] == 'T' {
				descAt = len(kept)
			}
			kept = append(kept, msg...)
		}
	}
	return kept
}

// cursorOf is the session's cursor of portal name, unless the pipeline
// bound a portal of that name (which replaced it).
func cursorOf(p pipePlanner, name []byte) *fanCursor {
	if len(p.planner.s.cursors.list) == 0 || p.portal(name) != nil {
		return nil
	}
	return p.planner.s.cursors.get(string(name))
}

// planCursorExecute answers an Execute of fc with row limit limit from
// where the pipeline's earlier Executes left it; the effect moves fc as
// the answer is sent.
func planCursorExecute(p pipePlanner, fc *fanCursor, limit int32) {
	pl := &p.planner.plan
	at := cursorPos(pl, fc)
	lo := len(pl.lbuf)
	pl.lbuf, at.pos, at.atEnd = fc.appendFetch(pl.lbuf, at.pos, at.atEnd, limit)
	pl.cursors = append(pl.cursors, at)
	pl.addLocal(lo, &effect{kind: effCursor, cur: at})
}

// cursorPos is where the plan's Executes and FETCHes so far leave fc.
func cursorPos(pl *planned, fc *fanCursor) cursorAt {
	for i := len(pl.cursors) - 1; i >= 0; i-- {
		if pl.cursors[i].name == fc.name {
			return pl.cursors[i]
		}
	}
	return cursorAt{name: fc.name, pos: fc.pos, atEnd: fc.atEnd}
}

// planCursorDescribe answers a Describe of fc's portal.
func planCursorDescribe(p pipePlanner, fc *fanCursor) {
	pl := &p.planner.plan
	lo := len(pl.lbuf)
	pl.lbuf = appendCursorDesc(pl.lbuf, fc)
	pl.addLocal(lo, nil)
}

// planCursorClose answers a Close of fc's portal: dropped as the answer
// is sent.
func planCursorClose(p pipePlanner, fc *fanCursor) {
	pl := &p.planner.plan
	lo := len(pl.lbuf)
	pl.lbuf = pgwire.AppendEmpty(pl.lbuf, '3')
	pl.addLocal(lo, &effect{kind: effCursor, cur: cursorAt{name: fc.name, pos: -1}})
}

// apply moves (or, at.pos < 0, drops) the cursor at.name.
func (c *cursorSet) apply(at cursorAt) {
	fc := c.get(at.name)
	switch {
	case fc == nil:
	case at.pos < 0:
		c.drop(at.name)
	default:
		fc.pos, fc.atEnd = at.pos, at.atEnd
	}
}
