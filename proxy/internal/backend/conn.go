package backend

import (
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// Conn is one authenticated backend connection (to a shard's Postgres or
// its PgBouncer), taken over from pgconn with Hijack. It is used by one
// session at a time; between transactions it sits idle in its pool, clean:
// no open transaction, no session state the proxy did not put there at
// connect time (its startup settings, which are its pool key).
type Conn struct {
	Pool    *Pool
	NetConn net.Conn
	IO      io.ReadWriter
	Reader  *pgwire.MsgReader
	// key is the startup settings the connection was opened with.
	key *Settings
	// statuses are the ParameterStatus values the backend reported at
	// connect time.
	Statuses map[string]string
	PID      uint32
	Secret   []byte
	// stmts caches server-side prepared statements (direct connections
	// only; nil through a pooler).
	Stmts *StmtCache
	// idleSince is when the connection was last returned to its pool.
	idleSince time.Time
	// broken marks a connection that must not be reused.
	Broken bool
	// downErr is set when the shard was found down while the connection
	// was in use (its reads are then interrupted).
	DownErr atomic.Pointer[pgwire.Error]
	// peekFn, peekBuf, peekOK: idleHealthy's state.
	peekFn  func(fd uintptr) bool
	peekBuf [1]byte
	peekOK  bool
	// txnChecked: in the client transaction it serves, the isolation
	// check of fan-out reads passed (the engine's fanout.go); cleared when released.
	TxnChecked bool
	// cancelled is set when a cancel request was sent for this connection;
	// the connection is then closed instead of being reused, so a late
	// cancel can never hit another client's query.
	Cancelled atomic.Bool
	// usedSince is when the current use began (unix nanoseconds), 0 while
	// idle (stats.go).
	UsedSince atomic.Int64
	// queries, sent and the reader's received bytes since the last
	// release (owned by the session using the connection).
	Queries, sent, recvMark uint64
	// opened is when the connection was made; gen the pool's reconnect
	// generation then (RECONNECT closes older ones when released).
	opened time.Time
	gen    uint64
	// tls: the connection is encrypted.
	TLS bool
}

// Write sends b in one write (after what Send queued).
func (c *Conn) Write(b []byte) error {
	if err := c.FlushPending(); err != nil {
		return err
	}
	c.Reader.Ready = 0 // until its ReadyForQuery is read
	c.sent += uint64(len(b))
	if _, err := c.IO.Write(b); err != nil {
		c.Broken = true
		return err
	}
	return nil
}

// Send sends b, a request every byte of whose answer the caller then
// reads with c.Reader: on a socket with nothing buffered, b is written by
// the reader's next read, which then waits for the answer without first
// trying a read that would find nothing (pgwire.RawIO.WriteBeforeRead:
// one system call less per round trip). A write error surfaces as the
// read's. The caller calls FlushPending if it may read nothing.
func (c *Conn) Send(b []byte) error {
	r, ok := c.IO.(*pgwire.RawIO)
	if !ok || len(b) == 0 || c.Reader.Buffered() > 0 {
		return c.Write(b)
	}
	if err := c.FlushPending(); err != nil {
		return err
	}
	c.Reader.Ready = 0
	c.sent += uint64(len(b))
	r.WriteBeforeRead(b)
	return nil
}

// FlushPending writes what Send queued and no read wrote.
func (c *Conn) FlushPending() error {
	r, ok := c.IO.(*pgwire.RawIO)
	if !ok {
		return nil
	}
	if err := r.FlushPending(); err != nil {
		c.Broken = true
		return err
	}
	return nil
}

// Close ends a connection of no pool's (OpenOutside): Terminate,
// then the socket.
func (c *Conn) Close() { c.close() }

// close closes the network connection (politely: Terminate first).
func (c *Conn) close() {
	_ = c.NetConn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.NetConn.Write([]byte{'X', 0, 0, 0, 4})
	_ = c.NetConn.Close()
}

// idleHealthy reports whether an idle connection is still usable: nothing
// may be waiting to be read (a terminated backend sends a FATAL error, a
// closed one EOF). One non-blocking peek.
func (c *Conn) idleHealthy() bool {
	if c.Reader.Buffered() > 0 || c.DownErr.Load() != nil {
		return false
	}
	if time.Since(c.idleSince) < peekAfter {
		// Just used: a peek would find nothing new (and it costs a system
		// call per transaction under load). A backend terminated in this
		// window is still reported to the client as an error, as it would
		// be if it died a moment after the peek.
		return true
	}
	r, ok := c.IO.(*pgwire.RawIO)
	if !ok {
		return true
	}
	c.peekOK = true
	if err := r.RawConn().Read(c.peekFn); err != nil {
		return false
	}
	return c.peekOK
}

// Readable reports, without blocking, whether the backend sent something
// not read yet (or closed the connection).
func (c *Conn) Readable() bool {
	if c.Reader.Buffered() > 0 {
		return true
	}
	r, ok := c.IO.(*pgwire.RawIO)
	if !ok || c.peekFn == nil {
		return false
	}
	c.peekOK = true
	if err := r.RawConn().Read(c.peekFn); err != nil {
		return true // the next read reports it
	}
	return !c.peekOK
}

// peekAfter: connections idle for less are not peeked at.
const peekAfter = 20 * time.Millisecond

// peek is idleHealthy's non-blocking MSG_PEEK (made once per connection,
// so a check allocates nothing).
func (c *Conn) peek(fd uintptr) bool {
	n, _, err := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&c.peekBuf[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	switch {
	case err == syscall.EAGAIN:
	case err != 0:
		c.peekOK = false
	case n > 0:
		c.peekOK = false // unsolicited data: an error or a notice before closing
	default:
		c.peekOK = false // EOF
	}
	return true
}
