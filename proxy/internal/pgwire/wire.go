package pgwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"sync"
)

// Wire-level framing shared by the client and the backend side.
//
// A message is handled as its raw bytes: type byte, 4-byte length (which
// counts itself) and body. Forwarding raw bytes instead of decoding and
// re-encoding is what keeps the proxy's CPU per query low; the few fields
// the engine needs are read by the small view functions below, which never
// allocate.

const (
	// HeaderLen is the length of a message header: type byte and length.
	HeaderLen = 5
	// SmallMessageLimit is Postgres's PQ_SMALL_MESSAGE_LIMIT: messages that
	// carry no user data (Sync, Execute, Describe, ...) may not be larger.
	SmallMessageLimit = 10000
	// startupPacketLimit is Postgres's MAX_STARTUP_PACKET_LENGTH.
	startupPacketLimit = 10000
	// readBufSize is the initial size of a reader's buffer.
	readBufSize = 16 * 1024
	// shrinkAbove: a reader whose buffer grew beyond this for one large
	// message shrinks back once it is idle.
	shrinkAbove = 1 << 20
)

// ErrProtocol marks violations of the wire protocol by the peer.
var ErrProtocol = errors.New("protocol violation")

// ProtocolError describes a malformed or oversized message. The session
// answers it with SQLSTATE 08P01 and closes the connection.
type ProtocolError struct {
	Msg string
}

// Error returns the description.
func (e *ProtocolError) Error() string { return e.Msg }

// Is makes errors.Is(err, ErrProtocol) true for every ProtocolError.
func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

// ProtoErrorf returns a *ProtocolError with the formatted description.
func ProtoErrorf(format string, args ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, args...)}
}

// MsgReader frames messages read from r. A message returned by next is a
// slice of the reader's buffer, valid until the next call to next; while
// the reader holds (hold/release), every message returned since hold stays
// valid until release, which lets the session buffer an extended-protocol
// pipeline up to Sync without copying it.
//
// The buffer is allocated at the first read. A lending reader
// (NewLendingMsgReader) gives it back to a shared pool whenever it waits
// for input with nothing buffered and nothing held, and takes one again
// when input arrives: an idle client then costs no buffer.
type MsgReader struct {
	r   io.Reader
	buf []byte
	// raw is r when the reader lends its buffer while it waits (r is a
	// *RawIO and the reader was made by NewLendingMsgReader); nil otherwise.
	raw *RawIO
	// keep is the first byte that must be preserved (held messages), pos
	// the next unread byte, end the end of the valid data.
	keep, pos, end int
	holding        bool
	// limit returns the maximum total length (header included) allowed
	// for a message of type typ; nil = no limit.
	limit func(typ byte) int
	// ready is the status of the last ReadyForQuery read ('I', 'T', 'E'),
	// or 0 when the owner has written since (backend connections: see
	// backend.Conn.Write and backend.Pool.Release).
	Ready byte
	// nread counts the bytes read (statistics).
	nread uint64
}

// NewMsgReader returns a reader framing messages from r; limit (nil: none)
// returns the largest total length allowed for a message type.
func NewMsgReader(r io.Reader, limit func(byte) int) *MsgReader {
	return &MsgReader{r: r, limit: limit}
}

// NewLendingMsgReader is NewMsgReader for a connection that is mostly
// idle (a client's): while it waits for input with nothing buffered and
// no message held, its buffer is back in a pool shared by all lending
// readers, as net/http does with its connections' buffers. It lends only
// when r is a *RawIO (ConnIO of a socket); on another reader (TLS) it is
// NewMsgReader. A buffer grown for a large message is kept, not lent (a
// client that sends large messages keeps its larger buffer, as before).
func NewLendingMsgReader(r io.Reader, limit func(byte) int) *MsgReader {
	m := NewMsgReader(r, limit)
	m.raw, _ = r.(*RawIO)
	return m
}

// readBufPool holds the buffers (readBufSize) of lending readers that wait.
var readBufPool = sync.Pool{New: func() any { return new([readBufSize]byte) }}

// takeBuf gives the reader a buffer from the pool (it has none).
func (m *MsgReader) takeBuf() {
	m.buf = readBufPool.Get().(*[readBufSize]byte)[:]
}

// lendBuf returns the reader's buffer to the pool; it must hold nothing
// (keep == pos == end) and be of the pool's size.
func (m *MsgReader) lendBuf() {
	readBufPool.Put((*[readBufSize]byte)(m.buf))
	m.buf = nil
	m.keep, m.pos, m.end = 0, 0, 0
}

// HasBuffer reports whether the reader holds a buffer now (a lending
// reader waiting for input holds none).
func (m *MsgReader) HasBuffer() bool { return m.buf != nil }

// buffered reports how many unread bytes are buffered.
func (m *MsgReader) Buffered() int { return m.end - m.pos }

// hold keeps every message returned from now on valid until release.
func (m *MsgReader) Hold() {
	m.holding = true
	m.keep = m.pos
}

// release ends a hold: held messages become invalid at the next call.
func (m *MsgReader) Release() {
	m.holding = false
	m.keep = m.pos
}

// peekType returns the type of the next message without consuming it.
func (m *MsgReader) PeekType() (byte, error) {
	if err := m.fill(1); err != nil {
		return 0, err
	}
	return m.buf[m.pos], nil
}

// Wait waits until a message header is buffered (or the read fails):
// the read Next would make, made where the caller chooses — a session
// waits for its idle client at the top of its goroutine's stack.
func (m *MsgReader) Wait() error { return m.fill(HeaderLen) }

// next returns the next message (type and raw bytes, header included).
func (m *MsgReader) Next() (byte, []byte, error) {
	if err := m.fill(HeaderLen); err != nil {
		return 0, nil, err
	}
	typ := m.buf[m.pos]
	n := int(binary.BigEndian.Uint32(m.buf[m.pos+1:]))
	if n < 4 || n > 1<<30 {
		return 0, nil, ProtoErrorf("invalid message length %d (message type %q)", n, typ)
	}
	total := n + 1
	if m.limit != nil {
		if max := m.limit(typ); max > 0 && total > max {
			return 0, nil, ProtoErrorf("message of type %q is %d bytes, more than the limit of %d bytes", typ, total, max)
		}
	}
	if err := m.fill(total); err != nil {
		return 0, nil, err
	}
	msg := m.buf[m.pos : m.pos+total : m.pos+total]
	m.pos += total
	if typ == 'Z' && total >= 6 {
		m.Ready = msg[5]
	}
	if !m.holding {
		m.keep = m.pos
	}
	return typ, msg, nil
}

// fill makes at least need unread bytes available.
func (m *MsgReader) fill(need int) error {
	for m.end-m.pos < need {
		if m.buf == nil {
			if m.raw != nil {
				m.takeBuf()
			} else {
				m.buf = make([]byte, readBufSize)
			}
		}
		if m.pos+need > len(m.buf) {
			m.makeRoom(need)
		}
		var n int
		var err error
		if m.raw != nil && m.end == m.pos && !m.holding && len(m.buf) == readBufSize {
			// Nothing buffered or held: the buffer is lent while the read
			// waits (RawIO.readLending).
			m.keep, m.pos, m.end = 0, 0, 0
			n, err = m.raw.readLending(m)
		} else {
			n, err = m.r.Read(m.buf[m.end:])
		}
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
func (m *MsgReader) makeRoom(need int) {
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
func (m *MsgReader) MaybeShrink() {
	if !m.holding && len(m.buf) > shrinkAbove && m.end == m.pos {
		m.buf = make([]byte, readBufSize)
		m.keep, m.pos, m.end = 0, 0, 0
	}
}

// take returns the unread buffered bytes and consumes them.
func (m *MsgReader) Take() []byte {
	b := append([]byte(nil), m.buf[m.pos:m.end]...)
	m.pos = m.end
	m.keep = m.pos
	return b
}

// bytesRead returns how many bytes the reader has read (statistics).
func (m *MsgReader) BytesRead() uint64 { return m.nread }

// Body returns the message's body (after the 5-byte header).
func Body(msg []byte) []byte { return msg[HeaderLen:] }

// Msgs yields the whole messages laid back to back in b (answers the
// proxy buffered), each with its header; it stops at a partial or
// malformed message at the end.
func Msgs(b []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for len(b) >= HeaderLen {
			n := 1 + int(binary.BigEndian.Uint32(b[1:HeaderLen]))
			if n < HeaderLen || n > len(b) || !yield(b[:n]) {
				return
			}
			b = b[n:]
		}
	}
}

// CString reads a NUL-terminated string from b at i, returning it and the
// index after the NUL.
func CString(b []byte, i int) ([]byte, int, error) {
	for j := i; j < len(b); j++ {
		if b[j] == 0 {
			return b[i:j], j + 1, nil
		}
	}
	return nil, 0, ProtoErrorf("missing string terminator")
}

// ParseView is a decoded Parse message; slices point into the message.
type ParseView struct {
	Name, Query []byte
	Oids        []uint32 // reused
}

// Decode fills v from a Parse message (Oids reuses its slice).
func (v *ParseView) Decode(msg []byte) error {
	b := Body(msg)
	var err error
	i := 0
	if v.Name, i, err = CString(b, i); err != nil {
		return ProtoErrorf("malformed Parse message: %v", err)
	}
	if v.Query, i, err = CString(b, i); err != nil {
		return ProtoErrorf("malformed Parse message: %v", err)
	}
	if len(b)-i < 2 {
		return ProtoErrorf("malformed Parse message: truncated parameter count")
	}
	n := int(binary.BigEndian.Uint16(b[i:]))
	i += 2
	if len(b)-i != 4*n {
		return ProtoErrorf("malformed Parse message: %d parameter types need %d bytes, got %d", n, 4*n, len(b)-i)
	}
	v.Oids = v.Oids[:0]
	for k := 0; k < n; k++ {
		v.Oids = append(v.Oids, binary.BigEndian.Uint32(b[i:]))
		i += 4
	}
	return nil
}

// FormatAt is the format code of parameter or result column i among a
// Bind's format codes: none means all text, one applies to all, else one
// each (0 past their end).
func FormatAt(formats []int16, i int) int16 {
	switch {
	case len(formats) == 1:
		return formats[0]
	case i < len(formats):
		return formats[i]
	}
	return 0
}

// BindView is a decoded Bind message; slices point into the message. A
// NULL parameter is a nil slice, an empty one a non-nil empty slice.
type BindView struct {
	Portal, Stmt []byte
	Formats      []int16  // reused
	Params       [][]byte // reused
	ResultFmts   []int16  // reused
	// restAt is the offset in the message of the parameter format count:
	// everything from there on is copied unchanged when the statement name
	// is rewritten. resultAt is the offset of the result format count.
	RestAt, resultAt int
}

// Decode fills v from a Bind message.
func (v *BindView) Decode(msg []byte) error {
	b := Body(msg)
	var err error
	i := 0
	if v.Portal, i, err = CString(b, i); err != nil {
		return ProtoErrorf("malformed Bind message: %v", err)
	}
	if v.Stmt, i, err = CString(b, i); err != nil {
		return ProtoErrorf("malformed Bind message: %v", err)
	}
	v.RestAt = HeaderLen + i
	short := func(what string) error { return ProtoErrorf("malformed Bind message: truncated %s", what) }
	if len(b)-i < 2 {
		return short("parameter format count")
	}
	nf := int(binary.BigEndian.Uint16(b[i:]))
	i += 2
	if len(b)-i < 2*nf {
		return short("parameter formats")
	}
	v.Formats = v.Formats[:0]
	for k := 0; k < nf; k++ {
		v.Formats = append(v.Formats, int16(binary.BigEndian.Uint16(b[i:])))
		i += 2
	}
	if len(b)-i < 2 {
		return short("parameter count")
	}
	np := int(binary.BigEndian.Uint16(b[i:]))
	i += 2
	if nf > 1 && nf != np {
		return ProtoErrorf("bind message has %d parameter formats but %d parameters", nf, np)
	}
	v.Params = v.Params[:0]
	for k := 0; k < np; k++ {
		if len(b)-i < 4 {
			return short("parameter length")
		}
		l := int(int32(binary.BigEndian.Uint32(b[i:])))
		i += 4
		if l == -1 {
			v.Params = append(v.Params, nil)
			continue
		}
		if l < 0 || len(b)-i < l {
			return ProtoErrorf("malformed Bind message: invalid parameter length %d", l)
		}
		v.Params = append(v.Params, b[i:i+l:i+l])
		i += l
	}
	if len(b)-i < 2 {
		return short("result format count")
	}
	v.resultAt = HeaderLen + i
	nr := int(binary.BigEndian.Uint16(b[i:]))
	i += 2
	if len(b)-i != 2*nr {
		return ProtoErrorf("malformed Bind message: %d result formats need %d bytes, got %d", nr, 2*nr, len(b)-i)
	}
	v.ResultFmts = v.ResultFmts[:0]
	for k := 0; k < nr; k++ {
		v.ResultFmts = append(v.ResultFmts, int16(binary.BigEndian.Uint16(b[i:])))
		i += 2
	}
	for _, f := range v.Formats {
		if f != 0 && f != 1 {
			return ProtoErrorf("unsupported format code: %d", f)
		}
	}
	for _, f := range v.ResultFmts {
		if f != 0 && f != 1 {
			return ProtoErrorf("unsupported format code: %d", f)
		}
	}
	return nil
}

// DecodeTarget decodes Describe and Close: a kind byte ('S' or 'P') and a
// name.
func DecodeTarget(msg []byte) (byte, []byte, error) {
	b := Body(msg)
	if len(b) < 2 {
		return 0, nil, ProtoErrorf("malformed %s message", msgName(msg[0]))
	}
	kind := b[0]
	if kind != 'S' && kind != 'P' {
		return 0, nil, ProtoErrorf("invalid %s message subtype %d", msgName(msg[0]), kind)
	}
	name, i, err := CString(b, 1)
	if err != nil || i != len(b) {
		return 0, nil, ProtoErrorf("malformed %s message", msgName(msg[0]))
	}
	return kind, name, nil
}

// DecodeExecute returns an Execute message's portal and row limit.
func DecodeExecute(msg []byte) ([]byte, uint32, error) {
	b := Body(msg)
	portal, i, err := CString(b, 0)
	if err != nil || len(b)-i != 4 {
		return nil, 0, ProtoErrorf("malformed Execute message")
	}
	return portal, binary.BigEndian.Uint32(b[i:]), nil
}

// DecodeQuery returns a Query message's text.
func DecodeQuery(msg []byte) ([]byte, error) {
	b := Body(msg)
	q, i, err := CString(b, 0)
	if err != nil || i != len(b) {
		return nil, ProtoErrorf("malformed Query message")
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

// BeginMsg appends a message header of type typ with a length to be filled
// by FinishMsg; it returns the buffer and the header's position.
func BeginMsg(dst []byte, typ byte) ([]byte, int) {
	sp := len(dst)
	dst = append(dst, typ, 0, 0, 0, 0)
	return dst, sp
}

// FinishMsg writes the length of the message begun at sp.
func FinishMsg(dst []byte, sp int) []byte {
	binary.BigEndian.PutUint32(dst[sp+1:], uint32(len(dst)-sp-1))
	return dst
}

func appendCString(dst []byte, s []byte) []byte {
	dst = append(dst, s...)
	return append(dst, 0)
}

// AppendCStr appends s NUL-terminated.
func AppendCStr(dst []byte, s string) []byte {
	dst = append(dst, s...)
	return append(dst, 0)
}

// AppendU16 appends v big-endian.
func AppendU16(dst []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(dst, v) }

// AppendU32 appends v big-endian.
func AppendU32(dst []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(dst, v) }

// AppendEmpty appends a message with no body ('1', '2', '3', 'n', 'I', 'S', 'H').
func AppendEmpty(dst []byte, typ byte) []byte {
	return append(dst, typ, 0, 0, 0, 4)
}

// AppendRFQ appends a ReadyForQuery with status ('I', 'T', 'E').
func AppendRFQ(dst []byte, status byte) []byte {
	return append(dst, 'Z', 0, 0, 0, 5, status)
}

// AppendCommandComplete appends a CommandComplete with tag.
func AppendCommandComplete(dst []byte, tag string) []byte {
	dst, sp := BeginMsg(dst, 'C')
	dst = AppendCStr(dst, tag)
	return FinishMsg(dst, sp)
}

// AppendCopyData appends a CopyData carrying data.
func AppendCopyData(dst, data []byte) []byte {
	dst, sp := BeginMsg(dst, 'd')
	dst = append(dst, data...)
	return FinishMsg(dst, sp)
}

// copySignature opens every binary COPY file (the format's 11-byte
// signature), followed by a 32-bit flags field and a 32-bit length of a
// header extension.
const copySignature = "PGCOPY\n\xff\r\n\x00"

// AppendCopyBinaryHeader appends a binary COPY file's header: its
// signature, no flags, no header extension.
func AppendCopyBinaryHeader(dst []byte) []byte {
	return append(append(dst, copySignature...), 0, 0, 0, 0, 0, 0, 0, 0)
}

// AppendCopyOutResponse appends a CopyOutResponse: the overall format
// (0 text, 1 binary) and the same format for each of ncols columns.
func AppendCopyOutResponse(dst []byte, format int8, ncols int) []byte {
	dst, sp := BeginMsg(dst, 'H')
	dst = append(dst, byte(format), byte(ncols>>8), byte(ncols))
	for range ncols {
		dst = append(dst, 0, byte(format))
	}
	return FinishMsg(dst, sp)
}

// CopyBinaryHeaderLen is the length of the binary COPY file header at the
// start of data (signature, flags, extension); false when data does not
// start with one.
func CopyBinaryHeaderLen(data []byte) (int, bool) {
	const fixed = len(copySignature) + 8
	if len(data) < fixed || string(data[:len(copySignature)]) != copySignature {
		return 0, false
	}
	ext := binary.BigEndian.Uint32(data[fixed-4 : fixed])
	if uint64(len(data)-fixed) < uint64(ext) {
		return 0, false
	}
	return fixed + int(ext), true
}

// IsCopyBinaryTrailer reports whether data is a binary COPY file's
// trailer: a field count of -1 (a row's count is never negative).
func IsCopyBinaryTrailer(data []byte) bool {
	return len(data) == 2 && data[0] == 0xff && data[1] == 0xff
}

// AppendParameterStatus appends a ParameterStatus.
func AppendParameterStatus(dst []byte, name, value string) []byte {
	dst, sp := BeginMsg(dst, 'S')
	dst = AppendCStr(dst, name)
	dst = AppendCStr(dst, value)
	return FinishMsg(dst, sp)
}

// AppendQuery appends a simple-protocol Query.
func AppendQuery(dst []byte, sql string) []byte {
	dst, sp := BeginMsg(dst, 'Q')
	dst = AppendCStr(dst, sql)
	return FinishMsg(dst, sp)
}

// AppendParseMsg appends a Parse message.
func AppendParseMsg(dst []byte, name string, query string, oids []uint32) []byte {
	dst, sp := BeginMsg(dst, 'P')
	dst = AppendCStr(dst, name)
	dst = AppendCStr(dst, query)
	dst = AppendU16(dst, uint16(len(oids)))
	for _, o := range oids {
		dst = AppendU32(dst, o)
	}
	return FinishMsg(dst, sp)
}

// AppendBindAs appends msg (a Bind) with its statement name replaced.
func AppendBindAs(dst []byte, msg []byte, v *BindView, stmt string) []byte {
	dst, sp := BeginMsg(dst, 'B')
	dst = appendCString(dst, v.Portal)
	dst = AppendCStr(dst, stmt)
	dst = append(dst, msg[v.RestAt:]...)
	return FinishMsg(dst, sp)
}

// AppendBindFormats appends msg (a Bind) to the unnamed portal and
// statement with its parameters unchanged and the result formats given.
func AppendBindFormats(dst []byte, msg []byte, v *BindView, formats []int16) []byte {
	dst, sp := BeginMsg(dst, 'B')
	dst = AppendCStr(dst, "")
	dst = AppendCStr(dst, "")
	dst = append(dst, msg[v.RestAt:v.resultAt]...)
	dst = AppendU16(dst, uint16(len(formats)))
	for _, f := range formats {
		dst = AppendU16(dst, uint16(f))
	}
	return FinishMsg(dst, sp)
}

// AppendBindNoParams appends a Bind of the unnamed portal and statement
// without parameters, with the result formats given.
func AppendBindNoParams(dst []byte, formats []int16) []byte {
	dst, sp := BeginMsg(dst, 'B')
	dst = AppendCStr(dst, "")
	dst = AppendCStr(dst, "")
	dst = AppendU16(dst, 0)
	dst = AppendU16(dst, 0)
	dst = AppendU16(dst, uint16(len(formats)))
	for _, f := range formats {
		dst = AppendU16(dst, uint16(f))
	}
	return FinishMsg(dst, sp)
}

// ---- DataRow: the one codec ----

// DataRowCols splits a raw DataRow into its values (nil for NULL, an empty
// non-nil slice for an empty value), appended to dst; the values alias
// msg.
func DataRowCols(dst [][]byte, msg []byte) ([][]byte, error) {
	b := Body(msg)
	if len(b) < 2 {
		return dst, ProtoErrorf("malformed DataRow")
	}
	n := int(binary.BigEndian.Uint16(b))
	i := 2
	for k := 0; k < n; k++ {
		if len(b)-i < 4 {
			return dst, ProtoErrorf("malformed DataRow")
		}
		l := int(int32(binary.BigEndian.Uint32(b[i:])))
		i += 4
		if l == -1 {
			dst = append(dst, nil)
			continue
		}
		if l < 0 || len(b)-i < l {
			return dst, ProtoErrorf("malformed DataRow")
		}
		dst = append(dst, b[i:i+l:i+l])
		i += l
	}
	if i != len(b) {
		return dst, ProtoErrorf("malformed DataRow")
	}
	return dst, nil
}

// AppendDataRow appends a DataRow of the values (nil = NULL).
func AppendDataRow(dst []byte, row [][]byte) []byte {
	dst, sp := BeginMsg(dst, 'D')
	dst = AppendU16(dst, uint16(len(row)))
	for _, v := range row {
		if v == nil {
			dst = AppendU32(dst, 0xFFFFFFFF)
			continue
		}
		dst = AppendU32(dst, uint32(len(v)))
		dst = append(dst, v...)
	}
	return FinishMsg(dst, sp)
}

// AppendBindText appends a Bind of portal to statement stmt with text
// parameters (nil = NULL) and text results.
func AppendBindText(dst []byte, portal, stmt string, params [][]byte) []byte {
	dst, sp := BeginMsg(dst, 'B')
	dst = AppendCStr(dst, portal)
	dst = AppendCStr(dst, stmt)
	dst = AppendU16(dst, 0)
	dst = AppendU16(dst, uint16(len(params)))
	for _, p := range params {
		if p == nil {
			dst = AppendU32(dst, 0xFFFFFFFF)
			continue
		}
		dst = AppendU32(dst, uint32(len(p)))
		dst = append(dst, p...)
	}
	dst = AppendU16(dst, 0)
	return FinishMsg(dst, sp)
}

// AppendDescribe appends a Describe of kind 'S' or 'P'.
func AppendDescribe(dst []byte, kind byte, name string) []byte {
	dst, sp := BeginMsg(dst, 'D')
	dst = append(dst, kind)
	dst = AppendCStr(dst, name)
	return FinishMsg(dst, sp)
}

// AppendClose appends a Close of kind 'S' or 'P'.
func AppendClose(dst []byte, kind byte, name string) []byte {
	dst, sp := BeginMsg(dst, 'C')
	dst = append(dst, kind)
	dst = AppendCStr(dst, name)
	return FinishMsg(dst, sp)
}

// AppendExecute appends an Execute (maxRows 0: all rows).
func AppendExecute(dst []byte, portal string, maxRows uint32) []byte {
	dst, sp := BeginMsg(dst, 'E')
	dst = AppendCStr(dst, portal)
	dst = AppendU32(dst, maxRows)
	return FinishMsg(dst, sp)
}

// ReadyStatus returns the status byte of a raw ReadyForQuery message.
func ReadyStatus(msg []byte) byte {
	if len(msg) >= 6 {
		return msg[5]
	}
	return 'I'
}

// ErrorField returns field code f of a raw ErrorResponse/NoticeResponse.
func ErrorField(msg []byte, f byte) string {
	b := Body(msg)
	for i := 0; i < len(b) && b[i] != 0; {
		code := b[i]
		v, j, err := CString(b, i+1)
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

// CommandTag returns the tag of a raw CommandComplete message.
func CommandTag(msg []byte) []byte {
	b := Body(msg)
	if len(b) > 0 && b[len(b)-1] == 0 {
		return b[:len(b)-1]
	}
	return b
}

// IsFormatCountMismatch reports whether a raw ErrorResponse is Postgres
// refusing a Bind whose result format count is neither 0, 1 nor the
// statement's column count (08P01 from PortalSetResultFormat, "bind message
// has N result formats but query has M columns").
func IsFormatCountMismatch(msg []byte) bool {
	return ErrorField(msg, 'C') == CodeProtocolViolation && ErrorField(msg, 'R') == "PortalSetResultFormat" &&
		strings.Contains(ErrorField(msg, 'M'), "result formats")
}

// IsResultTypeChanged reports whether a raw ErrorResponse is Postgres
// refusing to run a prepared statement whose result columns changed since
// it was prepared ("cached plan must not change result type"). The routine
// name identifies it whatever the server's lc_messages.
func IsResultTypeChanged(msg []byte) bool {
	return ErrorField(msg, 'C') == CodeFeatureNotSupported && ErrorField(msg, 'R') == "RevalidateCachedQuery"
}

// NextMsg splits the first message off a run of framed messages (type
// byte, length, body): msg is it, rest what follows; ok is false when b
// holds no whole message.
func NextMsg(b []byte) (msg, rest []byte, ok bool) {
	if len(b) < 5 {
		return nil, b, false
	}
	n := 1 + int(binary.BigEndian.Uint32(b[1:5]))
	if n < 5 || n > len(b) {
		return nil, b, false
	}
	return b[:n], b[n:], true
}
