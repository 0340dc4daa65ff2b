package chaos

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// The relay's Postgres protocol framer: it finds message boundaries in a
// byte stream that arrives in arbitrary chunks, without buffering messages.
//
//	chunk ──▶ framer.next ──▶ (bytes consumed, frame at a message's end)
//	           │  header: type byte + int32 length (typed phase), or
//	           │          int32 length + int32 code (startup phase)
//	           └─ body: skipped, its first bytes captured (bounded)
//
// Hand-written rather than pgproto3's Frontend/Backend: those decode whole
// messages into structs, buffering each message entirely (up to their body
// limit), while the relay must forward bytes unchanged as they arrive and
// know where in a chunk a message ends — and must never buffer unboundedly
// on garbage. The tests encode their messages with pgproto3.

// Protocol codes of the untyped startup-phase messages.
const (
	protocolV3       = 196608   // StartupMessage, protocol 3.0
	codeCancel       = 80877102 // CancelRequest
	codeSSLRequest   = 80877103 // SSLRequest
	codeGSSENCReqest = 80877104 // GSSENCRequest
)

// Limits of the framer.
const (
	// maxStartupLen is the largest startup-phase message Postgres accepts
	// (MAX_STARTUP_PACKET_LENGTH).
	maxStartupLen = 10000
	// maxMessageLen is the largest typed message Postgres sends or
	// accepts (PQ_LARGE_MESSAGE_LIMIT, 1 GiB - 1, incl. the length).
	maxMessageLen = 1<<30 - 1
	// frontendCapture bounds the captured head of a Parse or Query: the
	// commit function must be named within it.
	frontendCapture = 4096
	// bindCapture bounds the captured head of a Bind: enough for the
	// portal and statement names (identifiers of at most 63 bytes each).
	bindCapture = 160
	// backendCapture bounds the captured head of an ErrorResponse or
	// DataRow (the SQLSTATE, the commit's result).
	backendCapture = 256
)

// side says whose messages a framer reads.
type side uint8

const (
	frontendSide side = iota // the client's messages
	backendSide              // the server's messages
)

// errFrame is wrapped by every framing error: the stream is not the
// Postgres protocol (or not one the framer follows).
var errFrame = errors.New("not a postgres protocol stream")

// frame is one complete message seen by a framer.
type frame struct {
	// Type is the message type byte; 0 for an untyped startup-phase
	// message (Code says which) and for a one-byte SSL/GSS answer.
	Type byte
	// Code is the request code of an untyped startup-phase message
	// (protocol version, SSLRequest, ...), or the answer byte ('S', 'N',
	// 'G') of a one-byte answer.
	Code uint32
	// Len is the message's size on the wire (type byte, length, body).
	Len int
	// Head holds the first bytes of the body of the message types the
	// framer captures (frontend Parse and Query, backend ErrorResponse and
	// DataRow); nil for the others. It is valid until the next call of
	// next.
	Head []byte
}

// framer state.
type frameState uint8

const (
	stStartup frameState = iota // frontend: an untyped message comes next
	stTyped                     // typed messages
	stFailed                    // the stream is not framable any more
)

// framer follows one direction of a connection. It is not safe for
// concurrent use; oneByte is the one field another goroutine may change
// (through expectOneByte), between messages.
type framer struct {
	side  side
	state frameState
	// oneByte counts pending one-byte answers (to SSLRequest or
	// GSSENCRequest) that precede the next typed message: backend only.
	oneByte int
	hdr     [8]byte
	hdrN    int // header bytes collected
	hdrLen  int // header size of the current message: 5 typed, 8 untyped
	typ     byte
	code    uint32
	total   int // the current message's wire size
	remain  int // body bytes still to skip
	capN    int // body bytes to capture for the current message
	head    []byte
	err     error
}

// newFramer returns a framer for side: a frontend one starts in the
// startup phase, a backend one with typed messages.
func newFramer(s side) *framer {
	f := &framer{side: s}
	if s == backendSide {
		f.state = stTyped
	}
	return f
}

// atBoundary reports whether the framer is between two messages.
func (f *framer) atBoundary() bool { return f.hdrLen == 0 && f.remain == 0 }

// failed reports whether the framer gave up (and why).
func (f *framer) failed() error { return f.err }

func (f *framer) fail(format string, args ...any) error {
	f.state = stFailed
	f.err = fmt.Errorf("%w: "+format, append([]any{errFrame}, args...)...)
	return f.err
}

// next consumes bytes from b up to and including the end of the next
// message (or all of b, if no message ends in it). It returns how many
// bytes it consumed and, when a message ended, that message. An error
// means the stream cannot be framed; the framer then stays failed and
// consumes nothing more.
func (f *framer) next(b []byte) (n int, fr frame, ok bool, err error) {
	if f.state == stFailed {
		return 0, frame{}, false, f.err
	}
	if f.remain == 0 && f.hdrN == 0 && f.oneByte > 0 && len(b) > 0 {
		f.oneByte--
		c := b[0]
		if c != 'S' && c != 'N' && c != 'G' && c != 'E' {
			return 0, frame{}, false, f.fail("answer %q to an SSL or GSS request", c)
		}
		// 'E': an old server's error for the request comes as a typed
		// ErrorResponse; put the byte back by not consuming it.
		if c == 'E' {
			return f.next(b)
		}
		return 1, frame{Code: uint32(c), Len: 1}, true, nil
	}
	for n < len(b) {
		if f.remain == 0 && f.hdrLen == 0 { // at a message boundary
			f.hdrLen = 5
			if f.state == stStartup {
				f.hdrLen = 8
			}
			f.hdrN = 0
		}
		if f.hdrN < f.hdrLen {
			k := copy(f.hdr[f.hdrN:f.hdrLen], b[n:])
			f.hdrN += k
			n += k
			if f.hdrN < f.hdrLen {
				return n, frame{}, false, nil
			}
			if err := f.header(); err != nil {
				return n, frame{}, false, err
			}
			if f.remain == 0 {
				return n, f.finish(), true, nil
			}
			continue
		}
		k := min(f.remain, len(b)-n)
		if c := f.capN - len(f.head); c > 0 {
			f.head = append(f.head, b[n:n+min(k, c)]...)
		}
		f.remain -= k
		n += k
		if f.remain == 0 {
			return n, f.finish(), true, nil
		}
	}
	return n, frame{}, false, nil
}

// header validates the collected header and sets up the body.
func (f *framer) header() error {
	if f.hdrLen == 8 {
		l := int(binary.BigEndian.Uint32(f.hdr[0:4]))
		f.typ, f.code = 0, binary.BigEndian.Uint32(f.hdr[4:8])
		if l < 8 || l > maxStartupLen {
			return f.fail("startup message length %d", l)
		}
		switch {
		case f.code == protocolV3 || f.code>>16 == 3:
		case f.code == codeCancel, f.code == codeSSLRequest, f.code == codeGSSENCReqest:
		default:
			return f.fail("startup message code %d", f.code)
		}
		f.total, f.remain, f.capN = l, l-8, 0
	} else {
		f.typ, f.code = f.hdr[0], 0
		l := int(binary.BigEndian.Uint32(f.hdr[1:5]))
		if !f.known(f.typ) {
			return f.fail("message type %q", f.typ)
		}
		if l < 4 || l > maxMessageLen {
			return f.fail("message %q length %d", f.typ, l)
		}
		f.total, f.remain = l+1, l-4
		f.capN = 0
		switch {
		case f.side == frontendSide && (f.typ == 'P' || f.typ == 'Q'):
			f.capN = frontendCapture
		case f.side == frontendSide && f.typ == 'B':
			f.capN = bindCapture // the portal's and the statement's names
		case f.side == backendSide && (f.typ == 'E' || f.typ == 'D'):
			f.capN = backendCapture
		case f.side == backendSide && f.typ == 'Z':
			f.capN = 1 // the transaction status: 'I' idle, 'T' in a block, 'E' failed block
		}
	}
	f.head = f.head[:0]
	return nil
}

// finish returns the message that just ended and moves to the next state.
func (f *framer) finish() frame {
	fr := frame{Type: f.typ, Code: f.code, Len: f.total}
	if f.capN > 0 {
		fr.Head = f.head
	}
	if f.hdrLen == 8 && f.code != codeSSLRequest && f.code != codeGSSENCReqest {
		f.state = stTyped // a StartupMessage (or a CancelRequest, which ends the stream)
	}
	f.hdrLen, f.hdrN = 0, 0
	return fr
}

// known reports whether t is a message type of the framer's side.
func (f *framer) known(t byte) bool {
	if f.side == frontendSide {
		return bytes.IndexByte([]byte("BCDEFHPQSXcdfp"), t) >= 0
	}
	return bytes.IndexByte([]byte("RKSZTDCEN123ntsIAGHWVcdfv"), t) >= 0
}

// commitFuncs are the functions whose call is a commit: the store's fast
// and complex commits and the seed's CAS.
var commitFuncs = [][]byte{[]byte("pgshard_commit_cas"), []byte("pgshard_commit"), []byte("harel_commit_cas")}

// isCommit reports whether a frontend message (a Parse or a Query, by its
// captured head) calls one of the commit functions. The test is lexical —
// a commit function's name followed by "(" — and sees only the captured
// head (frontendCapture bytes), so a call further into a long multi-statement
// Query is not recognized.
func isCommit(fr frame) bool {
	var sql []byte
	switch fr.Type {
	case 'Q':
		sql = fr.Head
	case 'P': // statement name \0 query \0 ...
		i := bytes.IndexByte(fr.Head, 0)
		if i < 0 {
			return false
		}
		sql = fr.Head[i+1:]
	default:
		return false
	}
	for i := 0; i < len(sql); i++ {
		c := sql[i] | 0x20 // ASCII lower case (letters only matter below)
		if c != 'p' && c != 'h' {
			continue
		}
		if i > 0 && isIdentByte(sql[i-1]) {
			continue
		}
		for _, fn := range commitFuncs {
			if i+len(fn) > len(sql) || !bytes.EqualFold(sql[i:i+len(fn)], fn) {
				continue
			}
			j := i + len(fn)
			for j < len(sql) && (sql[j] == ' ' || sql[j] == '\t' || sql[j] == '\n' || sql[j] == '\r') {
				j++
			}
			if j < len(sql) && sql[j] == '(' {
				return true
			}
		}
	}
	return false
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c|0x20 >= 'a' && c|0x20 <= 'z' || c >= 0x80
}

// errorCode returns the SQLSTATE of an ErrorResponse by its captured head
// ("" when the head does not reach it).
func errorCode(head []byte) string {
	for len(head) > 0 && head[0] != 0 {
		t := head[0]
		end := bytes.IndexByte(head[1:], 0)
		if end < 0 {
			return ""
		}
		if t == 'C' {
			return string(head[1 : 1+end])
		}
		head = head[end+2:]
	}
	return ""
}

// firstBool returns the first column of a DataRow (by its captured head)
// read as a boolean in text ("t"/"f") or binary (1/0) format; ok is false
// if it is not one.
func firstBool(head []byte) (v, ok bool) {
	if len(head) < 7 || binary.BigEndian.Uint16(head) == 0 || binary.BigEndian.Uint32(head[2:]) != 1 {
		return false, false
	}
	switch head[6] {
	case 't', 1:
		return true, true
	case 'f', 0:
		return false, true
	}
	return false, false
}

// parseName returns a Parse message's statement name ("" the unnamed
// statement), by its captured head.
func parseName(head []byte) string {
	if i := bytes.IndexByte(head, 0); i >= 0 {
		return string(head[:i])
	}
	return ""
}

// bindStatement returns the statement a Bind message binds (portal name
// \0 statement name \0 ...), by its captured head; ok is false when the
// head does not hold it whole.
func bindStatement(head []byte) (name string, ok bool) {
	i := bytes.IndexByte(head, 0)
	if i < 0 {
		return "", false
	}
	rest := head[i+1:]
	j := bytes.IndexByte(rest, 0)
	if j < 0 {
		return "", false
	}
	return string(rest[:j]), true
}
