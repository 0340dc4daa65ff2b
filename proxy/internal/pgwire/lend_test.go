package pgwire

import (
	"bytes"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// msg builds a message of type typ with body b.
func msg(typ byte, b string) []byte {
	m, sp := BeginMsg(nil, typ)
	m = append(m, b...)
	return FinishMsg(m, sp)
}

// waitNothing reads with nothing to come: the read ends at a deadline.
func waitNothing(t *testing.T, c net.Conn, m *MsgReader) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	if typ, _, err := m.Next(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Next with nothing sent = %q, %v; want the deadline", typ, err)
	}
}

func write(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

func next(t *testing.T, m *MsgReader, want []byte) []byte {
	t.Helper()
	_, got, err := m.Next()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Next = %q, want %q", got, want)
	}
	return got
}

// An idle client's reader holds no buffer: none before its first message,
// none while it waits after one; the buffer is back for each message.
func TestLendingReaderIdleHoldsNoBuffer(t *testing.T) {
	srv, cl := tcpPair(t)
	m := NewLendingMsgReader(ConnIO(srv), nil)
	if m.raw == nil {
		t.Fatal("a TCP connection's reader does not lend (ConnIO gave no RawIO)")
	}
	if m.HasBuffer() {
		t.Fatal("a reader that has read nothing holds a buffer")
	}
	waitNothing(t, srv, m)
	if m.HasBuffer() {
		t.Fatal("a reader that waited with nothing sent holds a buffer")
	}
	for i, body := range []string{"SELECT 1\x00", "SELECT 2\x00"} {
		q := msg('Q', body)
		write(t, cl, q)
		next(t, m, q)
		if !m.HasBuffer() {
			t.Fatalf("message %d: the reader holds no buffer while its message is being handled", i)
		}
		waitNothing(t, srv, m)
		if m.HasBuffer() {
			t.Fatalf("message %d: the buffer did not go back after the message was handled", i)
		}
	}
	// Two messages in one write: the second is buffered, not lent away.
	a, b := msg('P', "\x00SELECT 3\x00\x00\x00"), msg('S', "")
	write(t, cl, append(append([]byte(nil), a...), b...))
	next(t, m, a)
	next(t, m, b)
}

// Held messages and a partly received message keep the buffer through a
// wait; they are intact afterwards.
func TestLendingReaderKeepsHeldAndPartial(t *testing.T) {
	srv, cl := tcpPair(t)
	m := NewLendingMsgReader(ConnIO(srv), nil)
	p := msg('P', "\x00SELECT $1\x00\x00\x00")
	write(t, cl, p)
	m.Hold()
	held := next(t, m, p)
	waitNothing(t, srv, m)
	if !m.HasBuffer() {
		t.Fatal("a reader holding a message gave its buffer away")
	}
	// Another reader takes (and fills) a pooled buffer meanwhile.
	srv2, cl2 := tcpPair(t)
	m2 := NewLendingMsgReader(ConnIO(srv2), nil)
	junk := msg('Q', string(bytes.Repeat([]byte{'x'}, 200)))
	write(t, cl2, junk)
	next(t, m2, junk)
	if !bytes.Equal(held, p) {
		t.Fatalf("held message changed during the wait: %q", held)
	}
	s := msg('S', "")
	write(t, cl, s)
	next(t, m, s)
	m.Release()
	waitNothing(t, srv, m)
	if m.HasBuffer() {
		t.Fatal("the buffer did not go back after Release")
	}

	// A partial message stays buffered through a wait.
	q := msg('Q', "SELECT 4\x00")
	write(t, cl, q[:3])
	waitNothing(t, srv, m)
	if !m.HasBuffer() {
		t.Fatal("a reader with a partial message buffered gave its buffer away")
	}
	write(t, cl, q[3:])
	next(t, m, q)
}

// A message larger than the pool's buffers grows the reader's buffer,
// which the reader keeps (not lent); a connection without a descriptor
// (net.Pipe, TLS) is read as before.
func TestLendingReaderLargeAndPipe(t *testing.T) {
	srv, cl := tcpPair(t)
	m := NewLendingMsgReader(ConnIO(srv), nil)
	big := msg('Q', string(bytes.Repeat([]byte{'y'}, 3*readBufSize))+"\x00")
	done := make(chan error, 1)
	go func() { _, err := cl.Write(big); done <- err }() // waited for below
	next(t, m, big)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitNothing(t, srv, m)
	if !m.HasBuffer() || len(m.buf) <= readBufSize {
		t.Fatalf("a grown buffer was not kept (len %d)", len(m.buf))
	}

	ps, pc := net.Pipe()
	defer ps.Close()
	defer pc.Close()
	pm := NewLendingMsgReader(ConnIO(ps), nil)
	if pm.raw != nil {
		t.Fatal("a net.Pipe reader lends")
	}
	q := msg('Q', "SELECT 5\x00")
	go func() { _, err := pc.Write(q); done <- err }() // waited for below
	next(t, pm, q)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
