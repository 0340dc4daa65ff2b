package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Wire-level framing shared by the client and the backend side.
//
// A message is handled as its raw bytes: type byte, 4-byte length (which
// counts itself) and body. Forwarding raw bytes instead of decoding and
// re-encoding is what keeps the proxy's CPU per query low; the few fields
// the engine needs are read by the small view functions below, which never
// allocate.

const (
	headerLen = 5
	// smallMessageLimit is Postgres's PQ_SMALL_MESSAGE_LIMIT: messages that
	// carry no user data (Sync, Execute, Describe, ...) may not be larger.
	smallMessageLimit = 10000
	// startupPacketLimit is Postgres's MAX_STARTUP_PACKET_LENGTH.
	startupPacketLimit = 10000
	// readBufSize is the initial size of a reader's buffer.
	readBufSize = 16 * 1024
	// shrinkAbove: a reader whose buffer grew beyond this for one large
	// message shrinks back once it is idle.
	shrinkAbove = 1 << 20
)

// errProtocol marks violations of the wire protocol by the peer.
var errProtocol = errors.New("protocol violation")

// ProtocolError describes a malformed or oversized message. The session
// answers it with SQLSTATE 08P01 and closes the connection.
type ProtocolError struct {
	Msg string
}

// Error returns the description.
func (e *ProtocolError) Error() string { return e.Msg }

// Is makes errors.Is(err, errProtocol) true for every ProtocolError.
func (e *ProtocolError) Is(target error) bool { return target == errProtocol }

func protoErrorf(format string, args ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// msgReader frames messages read from r. A message returned by next is a
// slice of the reader's buffer, valid until the next call to next; while
// the reader holds (hold/release), every message returned since hold stays
// valid until release, which lets the session buffer an extended-protocol
// pipeline up to Sync without copying it.
type msgReader struct {
	r   io.Reader
	buf []byte
	// keep is the first byte that must be preserved (held messages), pos
	// the next unread byte, end the end of the valid data.
	keep, pos, end int
	holding        bool
	// limit returns the maximum total length (header included) allowed
	// for a message of type typ; nil = no limit.
	limit func(typ byte) int
	// ready is the status of the last ReadyForQuery read ('I', 'T', 'E'),
	// or 0 when the owner has written since (backend connections: see
	// bconn.write and shardPool.release).
	ready byte
	// nread counts the bytes read (statistics).
	nread uint64
}

func newMsgReader(r io.Reader, limit func(byte) int) *msgReader {
	return &msgReader{r: r, buf: make([]byte, readBufSize), limit: limit}
}

// buffered reports how many unread bytes are buffered.
func (m *msgReader) buffered() int { return m.end - m.pos }

// hold keeps every message returned from now on valid until release.
func (m *msgReader) hold() {
	m.holding = true
	m.keep = m.pos
}

// release ends a hold: held messages become invalid at the next call.
func (m *msgReader) release() {
	m.holding = false
	m.keep = m.pos
}

// peekType returns the type of the next message without consuming it.
func (m *msgReader) peekType() (byte, error) {
	if err := m.fill(1); err != nil {
		return 0, err
	}
	return m.buf[m.pos], nil
}

// next returns the next message (type and raw bytes, header included).
func (m *msgReader) next() (byte, []byte, error) {
	if err := m.fill(headerLen); err != nil {
		return 0, nil, err
	}
	typ := m.buf[m.pos]
	n := int(binary.BigEndian.Uint32(m.buf[m.pos+1:]))
	if n < 4 || n > 1<<30 {
		return 0, nil, protoErrorf("invalid message length %d (message type %q)", n, typ)
	}
	total := n + 1
	if m.limit != nil {
		if max := m.limit(typ); max > 0 && total > max {
			return 0, nil, protoErrorf("message of type %q is %d bytes, more than the limit of %d bytes", typ, total, max)
		}
	}
	if err := m.fill(total); err != nil {
		return 0, nil, err
	}
	msg := m.buf[m.pos : m.pos+total : m.pos+total]
	m.pos += total
	if typ == 'Z' && total >= 6 {
		m.ready = msg[5]
	}
	if !m.holding {
		m.keep = m.pos
	}
	return typ, msg, nil
}

// fill makes at least need unread bytes available.
func (m *msgReader) fill(need int) error {
	for m.end-m.pos < need {
		if m.pos+need > len(m.buf) {
			m.makeRoom(need)
		}
		n, err := m.r.Read(m.buf[m.end:])
		m.end += n
		m.nread += uint64(n)
		if err != nil {
			if m.end-m.pos >= need {
				return nil
			}
			if err == io.EOF && m.end > m.pos {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// makeRoom ensures the buffer can hold need bytes from pos on. Held bytes
// (keep..pos) are preserved; if the reader holds, they are never moved
// within the current buffer (slices handed out still point at it), so the
// data moves to a new buffer instead.
func (m *msgReader) makeRoom(need int) {
	live := m.end - m.keep
	want := (m.pos - m.keep) + need
	if !m.holding && want <= len(m.buf) {
		copy(m.buf, m.buf[m.keep:m.end])
	} else {
		nb := make([]byte, max(2*len(m.buf), want))
		copy(nb, m.buf[m.keep:m.end])
		m.buf = nb
	}
	m.pos -= m.keep
	m.end = live
	m.keep = 0
}

// maybeShrink returns an oversized buffer to the default size when nothing
// is buffered.
func (m *msgReader) maybeShrink() {
	if !m.holding && len(m.buf) > shrinkAbove && m.end == m.pos {
		m.buf = make([]byte, readBufSize)
		m.keep, m.pos, m.end = 0, 0, 0
	}
}

// body returns the message's body (after the 5-byte header).
func body(msg []byte) []byte { return msg[headerLen:] }

// cstring reads a NUL-terminated string from b at i, returning it and the
// index after the NUL.
func cstring(b []byte, i int) ([]byte, int, error) {
	for j := i; j < len(b); j++ {
		if b[j] == 0 {
			return b[i:j], j + 1, nil
		}
	}
	return nil, 0, protoErrorf("missing string terminator")
}

// parseView is a decoded Parse message; slices point into the message.
type parseView struct {
	name, query []byte
	oids        []uint32 // reused
}

func (v *parseView) decode(msg []byte) error {
	b := body(msg)
	var err error
	i := 0
	if v.name, i, err = cstring(b, i); err != nil {
		return protoErrorf("malformed Parse message: %v", err)
	}
	if v.query, i, err = cstring(b, i); err != nil {
		return protoErrorf("malformed Parse message: %v", err)
	}
	if len(b)-i < 2 {
		return protoErrorf("malformed Parse message: truncated parameter count")
	}
	n := int(binary.BigEndian.Uint16(b[i:]))
	i += 2
	if len(b)-i != 4*n {
		return protoErrorf("malformed Parse message: %d parameter types need %d bytes, got %d", n, 4*n, len(b)-i)
	}
	v.oids = v.oids[:0]
	for k := 0; k < n; k++ {
		v.oids = append(v.oids, binary.BigEndian.Uint32(b[i:]))
		i += 4
	}
	return nil
}

// bindView is a decoded Bind message; slices point into the message. A
// NULL parameter is a nil slice, an empty one a non-nil empty slice.
type bindView struct {
	portal, stmt []byte
	formats      []int16  // reused
	params       [][]byte // reused
	resultFmts   []int16  // reused
	// restAt is the offset in the message of the parameter format count:
	// everything from there on is copied unchanged when the statement name
	// is rewritten. resultAt is the offset of the result format count.
	restAt, resultAt int
}

func (v *bindView) decode(msg []byte) error {
	b := body(msg)
	var err error
	i := 0
	if v.portal, i, err = cstring(b, i); err != nil {
		return protoErrorf("malformed Bind message: %v", err)
	}
	if v.stmt, i, err = cstring(b, i); err != nil {
		return protoErrorf("malformed Bind message: %v", err)
	}
	v.restAt = headerLen + i
	short := func(what string) error { return protoErrorf("malformed Bind message: truncated %s", what) }
	if len(b)-i < 2 {
		return short("parameter format count")
	}
	nf := int(binary.BigEndian.Uint16(b[i:]))
	i += 2
	if len(b)-i < 2*nf {
		return short("parameter formats")
	}
	v.formats = v.formats[:0]
	for k := 0; k < nf; k++ {
		v.formats = append(v.formats, int16(binary.BigEndian.Uint16(b[i:])))
		i += 2
	}
	if len(b)-i < 2 {
		return short("parameter count")
	}
	np := int(binary.BigEndian.Uint16(b[i:]))
	i += 2
	if nf > 1 && nf != np {
		return protoErrorf("bind message has %d parameter formats but %d parameters", nf, np)
	}
	v.params = v.params[:0]
	for k := 0; k < np; k++ {
		if len(b)-i < 4 {
			return short("parameter length")
		}
		l := int(int32(binary.BigEndian.Uint32(b[i:])))
		i += 4
		if l == -1 {
			v.params = append(v.params, nil)
			continue
		}
		if l < 0 || len(b)-i < l {
			return protoErrorf("malformed Bind message: invalid parameter length %d", l)
		}
		v.params = append(v.params, b[i:i+l:i+l])
		i += l
	}
	if len(b)-i < 2 {
		return short("result format count")
	}
	v.resultAt = headerLen + i
	nr := int(binary.BigEndian.Uint16(b[i:]))
	i += 2
	if len(b)-i != 2*nr {
		return protoErrorf("malformed Bind message: %d result formats need %d bytes, got %d", nr, 2*nr, len(b)-i)
	}
	v.resultFmts = v.resultFmts[:0]
	for k := 0; k < nr; k++ {
		v.resultFmts = append(v.resultFmts, int16(binary.BigEndian.Uint16(b[i:])))
		i += 2
	}
	for _, f := range v.formats {
		if f != 0 && f != 1 {
			return protoErrorf("unsupported format code: %d", f)
		}
	}
	for _, f := range v.resultFmts {
		if f != 0 && f != 1 {
			return protoErrorf("unsupported format code: %d", f)
		}
	}
	return nil
}

// decodeTarget decodes Describe and Close: a kind byte ('S' or 'P') and a
// name.
func decodeTarget(msg []byte) (byte, []byte, error) {
	b := body(msg)
	if len(b) < 2 {
		return 0, nil, protoErrorf("malformed %s message", msgName(msg[0]))
	}
	kind := b[0]
	if kind != 'S' && kind != 'P' {
		return 0, nil, protoErrorf("invalid %s message subtype %d", msgName(msg[0]), kind)
	}
	name, i, err := cstring(b, 1)
	if err != nil || i != len(b) {
		return 0, nil, protoErrorf("malformed %s message", msgName(msg[0]))
	}
	return kind, name, nil
}

// decodeExecute returns an Execute message's portal and row limit.
func decodeExecute(msg []byte) ([]byte, uint32, error) {
	b := body(msg)
	portal, i, err := cstring(b, 0)
	if err != nil || len(b)-i != 4 {
		return nil, 0, protoErrorf("malformed Execute message")
	}
	return portal, binary.BigEndian.Uint32(b[i:]), nil
}

// decodeQuery returns a Query message's text.
func decodeQuery(msg []byte) ([]byte, error) {
	b := body(msg)
	q, i, err := cstring(b, 0)
	if err != nil || i != len(b) {
		return nil, protoErrorf("malformed Query message")
	}
	return q, nil
}

// msgName names a frontend message type for error messages.
func msgName(typ byte) string {
	switch typ {
	case 'B':
		return "Bind"
	case 'C':
		return "Close"
	case 'D':
		return "Describe"
	case 'E':
		return "Execute"
	case 'F':
		return "FunctionCall"
	case 'H':
		return "Flush"
	case 'P':
		return "Parse"
	case 'Q':
		return "Query"
	case 'S':
		return "Sync"
	case 'X':
		return "Terminate"
	case 'd':
		return "CopyData"
	case 'c':
		return "CopyDone"
	case 'f':
		return "CopyFail"
	case 'p':
		return "PasswordMessage"
	}
	return fmt.Sprintf("%q", typ)
}

// ---- message builders (append to a buffer; never allocate on their own) ----

func beginMsg(dst []byte, typ byte) ([]byte, int) {
	sp := len(dst)
	dst = append(dst, typ, 0, 0, 0, 0)
	return dst, sp
}

func finishMsg(dst []byte, sp int) []byte {
	binary.BigEndian.PutUint32(dst[sp+1:], uint32(len(dst)-sp-1))
	return dst
}

func appendCString(dst []byte, s []byte) []byte {
	dst = append(dst, s...)
	return append(dst, 0)
}

func appendCStr(dst []byte, s string) []byte {
	dst = append(dst, s...)
	return append(dst, 0)
}

func appendU16(dst []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(dst, v) }
func appendU32(dst []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(dst, v) }

// appendEmpty appends a message with no body ('1', '2', '3', 'n', 'I', 'S', 'H').
func appendEmpty(dst []byte, typ byte) []byte {
	return append(dst, typ, 0, 0, 0, 4)
}

func appendRFQ(dst []byte, status byte) []byte {
	return append(dst, 'Z', 0, 0, 0, 5, status)
}

func appendCommandComplete(dst []byte, tag string) []byte {
	dst, sp := beginMsg(dst, 'C')
	dst = appendCStr(dst, tag)
	return finishMsg(dst, sp)
}

func appendParameterStatus(dst []byte, name, value string) []byte {
	dst, sp := beginMsg(dst, 'S')
	dst = appendCStr(dst, name)
	dst = appendCStr(dst, value)
	return finishMsg(dst, sp)
}

func appendQuery(dst []byte, sql string) []byte {
	dst, sp := beginMsg(dst, 'Q')
	dst = appendCStr(dst, sql)
	return finishMsg(dst, sp)
}

// appendParseMsg appends a Parse message.
func appendParseMsg(dst []byte, name string, query string, oids []uint32) []byte {
	dst, sp := beginMsg(dst, 'P')
	dst = appendCStr(dst, name)
	dst = appendCStr(dst, query)
	dst = appendU16(dst, uint16(len(oids)))
	for _, o := range oids {
		dst = appendU32(dst, o)
	}
	return finishMsg(dst, sp)
}

// appendBindAs appends msg (a Bind) with its statement name replaced.
func appendBindAs(dst []byte, msg []byte, v *bindView, stmt string) []byte {
	dst, sp := beginMsg(dst, 'B')
	dst = appendCString(dst, v.portal)
	dst = appendCStr(dst, stmt)
	dst = append(dst, msg[v.restAt:]...)
	return finishMsg(dst, sp)
}

// appendBindFormats appends msg (a Bind) to the unnamed portal and
// statement with its parameters unchanged and the result formats given.
func appendBindFormats(dst []byte, msg []byte, v *bindView, formats []int16) []byte {
	dst, sp := beginMsg(dst, 'B')
	dst = appendCStr(dst, "")
	dst = appendCStr(dst, "")
	dst = append(dst, msg[v.restAt:v.resultAt]...)
	dst = appendU16(dst, uint16(len(formats)))
	for _, f := range formats {
		dst = appendU16(dst, uint16(f))
	}
	return finishMsg(dst, sp)
}

// appendBindNoParams appends a Bind of the unnamed portal and statement
// without parameters, with the result formats given.
func appendBindNoParams(dst []byte, formats []int16) []byte {
	dst, sp := beginMsg(dst, 'B')
	dst = appendCStr(dst, "")
	dst = appendCStr(dst, "")
	dst = appendU16(dst, 0)
	dst = appendU16(dst, 0)
	dst = appendU16(dst, uint16(len(formats)))
	for _, f := range formats {
		dst = appendU16(dst, uint16(f))
	}
	return finishMsg(dst, sp)
}

// ---- DataRow: the one codec ----

// dataRowCols splits a raw DataRow into its values (nil for NULL, an empty
// non-nil slice for an empty value), appended to dst; the values alias
// msg.
func dataRowCols(dst [][]byte, msg []byte) ([][]byte, error) {
	b := body(msg)
	if len(b) < 2 {
		return dst, protoErrorf("malformed DataRow")
	}
	n := int(binary.BigEndian.Uint16(b))
	i := 2
	for k := 0; k < n; k++ {
		if len(b)-i < 4 {
			return dst, protoErrorf("malformed DataRow")
		}
		l := int(int32(binary.BigEndian.Uint32(b[i:])))
		i += 4
		if l == -1 {
			dst = append(dst, nil)
			continue
		}
		if l < 0 || len(b)-i < l {
			return dst, protoErrorf("malformed DataRow")
		}
		dst = append(dst, b[i:i+l:i+l])
		i += l
	}
	if i != len(b) {
		return dst, protoErrorf("malformed DataRow")
	}
	return dst, nil
}

// appendDataRow appends a DataRow of the values (nil = NULL).
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

// appendBindText appends a Bind of portal to statement stmt with text
// parameters (nil = NULL) and text results.
func appendBindText(dst []byte, portal, stmt string, params [][]byte) []byte {
	dst, sp := beginMsg(dst, 'B')
	dst = appendCStr(dst, portal)
	dst = appendCStr(dst, stmt)
	dst = appendU16(dst, 0)
	dst = appendU16(dst, uint16(len(params)))
	for _, p := range params {
		if p == nil {
			dst = appendU32(dst, 0xFFFFFFFF)
			continue
		}
		dst = appendU32(dst, uint32(len(p)))
		dst = append(dst, p...)
	}
	dst = appendU16(dst, 0)
	return finishMsg(dst, sp)
}

func appendDescribe(dst []byte, kind byte, name string) []byte {
	dst, sp := beginMsg(dst, 'D')
	dst = append(dst, kind)
	dst = appendCStr(dst, name)
	return finishMsg(dst, sp)
}

func appendClose(dst []byte, kind byte, name string) []byte {
	dst, sp := beginMsg(dst, 'C')
	dst = append(dst, kind)
	dst = appendCStr(dst, name)
	return finishMsg(dst, sp)
}

func appendExecute(dst []byte, portal string, maxRows uint32) []byte {
	dst, sp := beginMsg(dst, 'E')
	dst = appendCStr(dst, portal)
	dst = appendU32(dst, maxRows)
	return finishMsg(dst, sp)
}

// readyStatus returns the status byte of a raw ReadyForQuery message.
func readyStatus(msg []byte) byte {
	if len(msg) >= 6 {
		return msg[5]
	}
	return 'I'
}

// errorField returns field code f of a raw ErrorResponse/NoticeResponse.
func errorField(msg []byte, f byte) string {
	b := body(msg)
	for i := 0; i < len(b) && b[i] != 0; {
		code := b[i]
		v, j, err := cstring(b, i+1)
		if err != nil {
			return ""
		}
		if code == f {
			return string(v)
		}
		i = j
	}
	return ""
}

// commandTag returns the tag of a raw CommandComplete message.
func commandTag(msg []byte) []byte {
	b := body(msg)
	if len(b) > 0 && b[len(b)-1] == 0 {
		return b[:len(b)-1]
	}
	return b
}

// isFormatCountMismatch reports whether a raw ErrorResponse is Postgres
// refusing a Bind whose result format count is neither 0, 1 nor the
// statement's column count (08P01 from PortalSetResultFormat, "bind message
// has N result formats but query has M columns").
func isFormatCountMismatch(msg []byte) bool {
	return errorField(msg, 'C') == codeProtocolViolation && errorField(msg, 'R') == "PortalSetResultFormat" &&
		strings.Contains(errorField(msg, 'M'), "result formats")
}

// isResultTypeChanged reports whether a raw ErrorResponse is Postgres
// refusing to run a prepared statement whose result columns changed since
// it was prepared ("cached plan must not change result type"). The routine
// name identifies it whatever the server's lc_messages.
func isResultTypeChanged(msg []byte) bool {
	return errorField(msg, 'C') == codeFeatureNotSupported && errorField(msg, 'R') == "RevalidateCachedQuery"
}
