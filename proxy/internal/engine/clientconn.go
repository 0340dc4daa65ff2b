package engine

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// clientConn is a session's side of its client socket: the connection,
// its message reader, the output buffer the session appends to, and the
// lock that serializes writes (a pinned session's watcher forwards
// notifications while the session goroutine waits for the client). It
// knows nothing of transactions or backends but those it is handed.
type clientConn struct {
	conn net.Conn
	io   io.ReadWriter // conn's raw reader/writer (pgwire.ConnIO)
	rd   *pgwire.MsgReader
	// limit is the size limit of a client message by type (rd's).
	limit func(byte) int
	// out is what the session sends the client at its next flush;
	// flushes counts the flushes that wrote some (a read of every shard
	// runs again only if none happened since it began: servedretry.go).
	out     []byte
	flushes uint64
	// wmu serializes writes to the client (the session's flush, the
	// watcher's forwards, another session's terminate).
	wmu sync.Mutex
	// aio is the watcher's writer to the client (asyncWriter).
	aio io.Writer
	// tlsOn: the client uses TLS (set during startup, read-only
	// afterwards: SHOW CLIENTS reads it from other goroutines).
	tlsOn bool
}

// init makes c the client connection conn, whose messages limit bounds.
func (c *clientConn) init(conn net.Conn, limit func(byte) int) {
	c.conn, c.io, c.limit = conn, pgwire.ConnIO(conn), limit
	c.rd = pgwire.NewLendingMsgReader(c.io, limit)
}

// flush writes the client buffer.
func (c *clientConn) flush() error {
	if len(c.out) == 0 {
		return nil
	}
	c.flushes++
	c.wmu.Lock()
	_, err := c.io.Write(c.out)
	c.wmu.Unlock()
	if cap(c.out) > 1<<20 {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
	return err
}

// fail sends a FATAL error and ends the startup.
func (c *clientConn) fail(e *pgwire.Error) (bool, error) {
	if e.Severity == "" {
		e.Severity = "FATAL"
	}
	c.out = pgwire.AppendError(c.out[:0], e)
	_ = c.flush()
	return false, e
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

// writeFrom writes msg to the client from another goroutine than the
// session's (a terminate): a writer of its own, under wmu.
func (c *clientConn) writeFrom(msg []byte) {
	c.wmu.Lock()
	_, _ = pgwire.ConnIO(c.conn).Write(msg)
	c.wmu.Unlock()
}

// readWatching reads the client's next message; meanwhile the pinned
// backend bc (nil: none, pinner.watched) forwards what it sends on its
// own (NotificationResponse, NoticeResponse, ParameterStatus), as
// Postgres delivers notifications to an idle session.
func (c *clientConn) readWatching(bc *backend.Conn) (byte, []byte, error) {
	if bc == nil {
		return c.rd.Next()
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned here: waited for below
		defer wg.Done()
		c.forwardAsync(bc)
	}()
	typ, msg, err := c.rd.Next()
	_ = bc.NetConn.SetReadDeadline(time.Now()) // ends the watcher's read
	wg.Wait()
	_ = bc.NetConn.SetReadDeadline(time.Time{})
	return typ, msg, err
}

// forwardAsync forwards the pinned backend bc's asynchronous messages to
// the client until its read is interrupted (or the backend fails: the
// next exchange reports that).
func (c *clientConn) forwardAsync(bc *backend.Conn) {
	for {
		typ, msg, err := bc.Reader.Next()
		if err != nil {
			if !isTimeout(err) {
				bc.Broken = true
			}
			return
		}
		switch typ {
		case 'A', 'N', 'S':
			c.wmu.Lock()
			_, err := c.asyncWriter().Write(msg)
			c.wmu.Unlock()
			if err != nil {
				return
			}
		case 'E':
			// A FATAL (the server terminating the session): forward it and
			// let the next exchange find the connection gone.
			c.wmu.Lock()
			_, _ = c.asyncWriter().Write(msg)
			c.wmu.Unlock()
			bc.Broken = true
			return
		default:
			bc.Broken = true
			return
		}
	}
}

// asyncWriter writes to the client from the watcher while the session
// goroutine reads: a rawIO of its own (a rawIO's call state serves one
// call at a time).
func (c *clientConn) asyncWriter() io.Writer {
	if c.aio == nil {
		c.aio = pgwire.ConnIO(c.conn)
	}
	return c.aio
}

// relay copies the client's bytes to bc and bc's to the client,
// unchanged, until either side closes (PgBouncer's session pooling does
// the same): everything one Postgres session does behaves exactly as on
// a direct connection. Cancel requests still reach the backend through
// the proxy (the client knows the backend's PID and secret). Both
// goroutines end before it returns.
func (c *clientConn) relay(bc *backend.Conn) error {
	if b := c.rd.Take(); len(b) > 0 {
		if _, err := bc.NetConn.Write(b); err != nil {
			return err
		}
	}
	if b := bc.Reader.Take(); len(b) > 0 {
		if _, err := c.conn.Write(b); err != nil {
			return err
		}
	}
	bc.Broken = true // never reused: it carries the client's session
	done := make(chan struct{})
	go func() { // owned here: waited for below
		defer close(done)
		_, _ = io.Copy(bc.NetConn, c.conn)
		_ = bc.NetConn.SetDeadline(time.Now()) // the client left: stop the other copy
	}()
	_, err := io.Copy(c.conn, bc.NetConn)
	_ = c.conn.SetDeadline(time.Now()) // the backend left: stop the other copy
	<-done
	if err != nil && !isDisconnect(err) && !isTimeout(err) {
		return err
	}
	return nil
}
