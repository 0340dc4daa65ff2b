package pgwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// FuzzStartupPacket: any bytes decode to a packet or an error, never a
// panic; a decoded packet's parameters survive re-encoding.
func FuzzStartupPacket(f *testing.F) {
	f.Add(append(binary.BigEndian.AppendUint32(nil, ProtocolV3), "user\x00u\x00database\x00d\x00options\x00-c a=b --c-d=e\x00\x00"...))
	f.Add(binary.BigEndian.AppendUint32(nil, sslRequestCode))
	f.Add(append(binary.BigEndian.AppendUint32(nil, CancelCode), 0, 0, 0, 1, 1, 2, 3, 4))
	f.Add(append(binary.BigEndian.AppendUint32(nil, ProtocolV3+2), "_pq_.x\x00y\x00\x00"...))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parseStartupPacket(b)
		if err != nil {
			return
		}
		if p.Kind != startupNormal {
			return
		}
		var enc []byte
		enc = binary.BigEndian.AppendUint32(enc, uint32(protocolMajorV3)<<16|uint32(p.Minor))
		for _, kv := range p.Params {
			enc = append(enc, kv[0]...)
			enc = append(enc, 0)
			enc = append(enc, kv[1]...)
			enc = append(enc, 0)
		}
		enc = append(enc, 0)
		q, err := parseStartupPacket(enc)
		if err != nil {
			t.Fatalf("re-encoded packet rejected: %v", err)
		}
		if len(q.Params) != len(p.Params) {
			t.Fatalf("params %v became %v", p.Params, q.Params)
		}
		if o, ok := p.Param("options"); ok {
			_, _ = ParseOptions(o)
		}
		// Through the reader with its length prefix.
		framed := binary.BigEndian.AppendUint32(nil, uint32(len(b)+4))
		framed = append(framed, b...)
		if _, err := ReadStartupPacket(bytes.NewReader(framed)); err != nil && len(framed) <= startupPacketLimit {
			t.Fatalf("framed packet rejected: %v", err)
		}
	})
}

// FuzzClientMessages: a stream of client messages is framed and decoded
// without panics; every message is either decoded or reported as a
// protocol error (08P01), never silently mis-split.
func FuzzClientMessages(f *testing.F) {
	f.Add([]byte("Q\x00\x00\x00\x0dSELECT 1\x00S\x00\x00\x00\x04"))
	f.Add(AppendBindText(AppendParseMsg(nil, "s1", "SELECT $1", []uint32{20}), "", "s1", [][]byte{[]byte("42"), nil}))
	f.Add(AppendExecute(AppendDescribe(nil, 'P', ""), "", 0))
	f.Add(AppendClose(nil, 'S', "s1"))
	f.Add([]byte("B\x00\x00\x00\x0c\x00\x00\x00\x05\x00\x00\x00\x00"))
	f.Add([]byte("X\x00\x00\x00\x04"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rd := NewMsgReader(bytes.NewReader(b), func(typ byte) int {
			if typ == 'S' || typ == 'H' {
				return SmallMessageLimit
			}
			return 1 << 16
		})
		var pv ParseView
		var bv BindView
		total := 0
		for i := 0; i < 1000; i++ {
			if i%3 == 0 {
				rd.Hold()
			} else if i%3 == 2 {
				rd.Release()
			}
			typ, msg, err := rd.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrProtocol) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				return
			}
			if msg[0] != typ || int(binary.BigEndian.Uint32(msg[1:]))+1 != len(msg) {
				t.Fatalf("framing: type %q len %d, message %x", typ, len(msg), msg)
			}
			total += len(msg)
			if !bytes.Equal(b[total-len(msg):total], msg) {
				t.Fatalf("message bytes differ from the input at %d", total-len(msg))
			}
			switch typ {
			case 'P':
				if pv.Decode(msg) == nil {
					re := AppendParseMsg(nil, string(pv.Name), string(pv.Query), pv.Oids)
					if !bytes.Equal(re, msg) {
						t.Fatalf("Parse re-encodes differently: %x vs %x", re, msg)
					}
				}
			case 'B':
				if bv.Decode(msg) == nil {
					re := AppendBindAs(nil, msg, &bv, string(bv.Stmt))
					if !bytes.Equal(re, msg) {
						t.Fatalf("Bind re-encodes differently: %x vs %x", re, msg)
					}
					for _, p := range bv.Params {
						_ = p
					}
				}
			case 'D', 'C':
				_, _, _ = DecodeTarget(msg)
			case 'E':
				_, _, _ = DecodeExecute(msg)
			case 'Q':
				_, _ = DecodeQuery(msg)
			}
		}
	})
}
