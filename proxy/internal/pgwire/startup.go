package pgwire

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"
)

// Startup packet codes (the first int32 after the length).
const (
	ProtocolV3      = 3 << 16 // 196608, protocol 3.0
	sslRequestCode  = 80877103
	gssEncCode      = 80877104
	CancelCode      = 80877102
	protocolMajorV3 = 3
)

// startupKind says what a startup packet asks for.
type startupKind int

const (
	startupNormal startupKind = iota
	StartupSSL
	StartupGSSEnc
	StartupCancel
)

// StartupPacket is a decoded startup packet.
type StartupPacket struct {
	Kind startupKind
	// minor is the requested protocol minor version (3.minor).
	Minor uint16
	// params in the order the client sent them; names as sent.
	Params [][2]string
	// ProtocolOptions are the "_pq_." options the client asked for.
	ProtocolOptions []string
	// cancel request key.
	CancelPID uint32
	CancelKey []byte
}

// ReadStartupPacket reads one startup packet (length-prefixed, no type
// byte) of at most startupPacketLimit bytes.
func ReadStartupPacket(r io.Reader) (*StartupPacket, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(int32(binary.BigEndian.Uint32(hdr[:])))
	if n < 8 || n > startupPacketLimit {
		return nil, ProtoErrorf("invalid length of startup packet: %d", n)
	}
	buf := make([]byte, n-4)
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return parseStartupPacket(buf)
}

// parseStartupPacket decodes a startup packet body (after the length).
func parseStartupPacket(b []byte) (*StartupPacket, error) {
	if len(b) < 4 {
		return nil, ProtoErrorf("invalid length of startup packet: %d", len(b)+4)
	}
	code := binary.BigEndian.Uint32(b)
	switch code {
	case sslRequestCode:
		if len(b) != 4 {
			return nil, ProtoErrorf("invalid length of SSL request packet")
		}
		return &StartupPacket{Kind: StartupSSL}, nil
	case gssEncCode:
		if len(b) != 4 {
			return nil, ProtoErrorf("invalid length of GSSAPI encryption request packet")
		}
		return &StartupPacket{Kind: StartupGSSEnc}, nil
	case CancelCode:
		// Protocol 3.0 keys are 4 bytes; 3.2 allows up to 256.
		if len(b) < 12 || len(b) > 8+256 {
			return nil, ProtoErrorf("invalid length of cancel request packet")
		}
		return &StartupPacket{Kind: StartupCancel, CancelPID: binary.BigEndian.Uint32(b[4:]), CancelKey: append([]byte(nil), b[8:]...)}, nil
	}
	major, minor := uint16(code>>16), uint16(code)
	if major != protocolMajorV3 {
		return nil, &Error{Severity: "FATAL", Code: CodeFeatureNotSupported,
			Message: fmt.Sprintf("unsupported frontend protocol %d.%d: server supports 3.0 to 3.0", major, minor)}
	}
	p := &StartupPacket{Kind: startupNormal, Minor: minor}
	i := 4
	for {
		name, j, err := CString(b, i)
		if err != nil {
			return nil, ProtoErrorf("invalid startup packet layout: expected terminator as last byte")
		}
		if len(name) == 0 {
			if j != len(b) {
				return nil, ProtoErrorf("invalid startup packet layout: expected terminator as last byte")
			}
			break
		}
		val, k, err := CString(b, j)
		if err != nil {
			return nil, ProtoErrorf("invalid startup packet layout: expected terminator as last byte")
		}
		i = k
		n := string(name)
		if strings.HasPrefix(n, "_pq_.") {
			p.ProtocolOptions = append(p.ProtocolOptions, n)
			continue
		}
		p.Params = append(p.Params, [2]string{n, string(val)})
	}
	return p, nil
}

// param returns the value of startup parameter name ("" if absent).
func (p *StartupPacket) Param(name string) (string, bool) {
	for _, kv := range p.Params {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

// splitOptions splits the "options" startup parameter like Postgres's
// pg_split_opts: arguments are separated by whitespace, and a backslash
// makes the next character literal.
func splitOptions(s string) []string {
	var out []string
	var cur strings.Builder
	in := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			in = true
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// ParseOptions turns the "options" startup parameter into settings. Postgres
// accepts "-c name=value", "-cname=value" and "--name=value"; other backend
// switches are refused (they have no meaning through a pooler).
func ParseOptions(s string) ([][2]string, error) {
	args := splitOptions(s)
	var out [][2]string
	for i := 0; i < len(args); i++ {
		a := args[i]
		var kv string
		switch {
		case a == "-c":
			if i+1 >= len(args) {
				return nil, &Error{Severity: "FATAL", Code: CodeProtocolViolation, Message: "invalid command-line argument for server process: -c needs name=value"}
			}
			i++
			kv = args[i]
		case strings.HasPrefix(a, "-c"):
			kv = a[2:]
		case strings.HasPrefix(a, "--"):
			kv = a[2:]
		default:
			return nil, &Error{Severity: "FATAL", Code: CodeFeatureNotSupported,
				Message: fmt.Sprintf("unsupported command-line argument in options: %q", a),
				Hint:    `pgshard accepts only settings in "options" ("-c name=value" or "--name=value").`}
		}
		name, val, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			if strings.HasPrefix(a, "--") {
				return nil, &Error{Severity: "FATAL", Code: CodeSyntaxError, Message: fmt.Sprintf("--%s requires a value", kv)}
			}
			return nil, &Error{Severity: "FATAL", Code: CodeSyntaxError, Message: fmt.Sprintf("-c %s requires a value", kv)}
		}
		out = append(out, [2]string{strings.ReplaceAll(name, "-", "_"), val})
	}
	return out, nil
}
