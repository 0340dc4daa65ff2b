package pgwire

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// RawIO reads and writes a socket with raw system calls on its
// non-blocking descriptor, through syscall.RawConn so the runtime's
// netpoller still parks the goroutine when a call would block (and
// deadlines still apply).
//
// Why: a plain net.Conn read or write enters the scheduler's syscall state;
// a loopback write takes long enough (it runs the receiver's TCP stack and
// wakes it) that the runtime hands the P to another thread, and the writer
// then sleeps to get it back. Measured on the 2-core machine: 1.9 context
// switches per proxied query with net.Conn against PgBouncer's 0.4. A raw
// call on a non-blocking socket never blocks, so it needs no handoff.
type RawIO struct {
	conn net.Conn
	rc   syscall.RawConn

	// Arguments and results of the current call (the callbacks are made
	// once, so a call allocates nothing).
	p     []byte
	n     int
	errno syscall.Errno
	// lender, during readLending, is the reader whose buffer p is: it
	// goes back to the pool while the call waits.
	lender  *MsgReader
	readFn  func(fd uintptr) bool
	writeFn func(fd uintptr) bool
	// pend[pendAt:] is a write the next read makes first (WriteBeforeRead);
	// drained: the last read returned less than it asked for (the socket
	// had nothing more); pendBlocked: that write would block.
	pend        []byte
	pendAt      int
	drained     bool
	pendBlocked bool
	pendFn      func(fd uintptr) bool
}

// WriteBeforeRead queues a copy of b to be written by the next Read, in
// the same netpoller wait as that read: after a read that drained the
// socket, the read then waits for the answer's arrival instead of first
// trying a read that fails with EAGAIN (one system call less per round
// trip). The runtime resets a socket's readiness when a read call starts
// and its epoll is edge triggered, so only data that arrives after the
// call started wakes it: safe when every byte the peer sends next answers
// this write (a Postgres backend between requests; an unsolicited message
// before it is read with the answer, and a closed peer answers the write
// with a reset, which wakes the wait). Not for a client connection, which
// may send before it is answered. FlushPending writes what a read did not.
func (r *RawIO) WriteBeforeRead(b []byte) {
	r.pend = append(r.pend[:0], b...)
	r.pendAt = 0
}

// FlushPending writes what WriteBeforeRead queued and no read wrote.
func (r *RawIO) FlushPending() error {
	if r.pendAt >= len(r.pend) {
		r.pend, r.pendAt = r.pend[:0], 0
		return nil
	}
	b := r.pend[r.pendAt:]
	r.pend, r.pendAt = r.pend[:0], 0
	_, err := r.Write(b)
	return err
}

// doPendThenRead is the read callback while a write is queued: the write
// first, then (the socket drained) the wait, or the read.
func (r *RawIO) doPendThenRead(fd uintptr) bool {
	for r.pendAt < len(r.pend) {
		b := r.pend[r.pendAt:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch e {
		case 0:
			r.pendAt += int(n)
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			r.pendBlocked = true // the rest is written by read (blocking)
			return true
		}
		r.errno = e
		return true
	}
	if r.drained {
		r.drained = false
		return false // wait for the answer
	}
	return r.doRead(fd)
}

// newRawIO wraps c; nil when c has no file descriptor (then use c).
func newRawIO(c net.Conn) *RawIO {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &RawIO{conn: c, rc: rc}
	r.readFn = r.doRead
	r.writeFn = r.doWrite
	r.pendFn = r.doPendThenRead
	return r
}

// rawConn returns the connection's raw file descriptor access.
func (r *RawIO) RawConn() syscall.RawConn { return r.rc }

func (r *RawIO) doRead(fd uintptr) bool {
	if r.lender != nil && r.p == nil {
		// Input arrived after a wait: take a buffer again.
		r.lender.takeBuf()
		r.p = r.lender.buf
	}
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if r.lender != nil {
				// Nothing to read: the wait holds no buffer.
				r.lender.lendBuf()
				r.p = nil
			}
			return false
		}
		r.n, r.errno = int(n), e
		r.drained = e == 0 && int(n) > 0 && int(n) < len(r.p)
		return true
	}
}

func (r *RawIO) doWrite(fd uintptr) bool {
	for len(r.p) > 0 {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		switch e {
		case 0:
			r.n += int(n)
			r.p = r.p[n:]
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		r.errno = e
		return true
	}
	return true
}

// Read implements io.Reader.
func (r *RawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p, r.n, r.errno = p, 0, 0
	if len(r.pend) > 0 {
		return r.readAfterPend(p)
	}
	return r.read()
}

// readAfterPend is Read with a queued write (WriteBeforeRead).
func (r *RawIO) readAfterPend(p []byte) (int, error) {
	r.pendBlocked = false
	err := r.rc.Read(r.pendFn)
	if err == nil && r.errno == 0 && r.pendBlocked {
		// The socket's send buffer was full: the rest the ordinary way.
		r.pendBlocked = false
		if err = r.FlushPending(); err == nil {
			r.p, r.n, r.errno = p, 0, 0
			return r.read()
		}
	}
	r.pend, r.pendAt = r.pend[:0], 0
	return r.result(err)
}

// readLending reads into m's buffer, which holds nothing, from its
// start: while the call waits for input the buffer is back in the pool
// (m.buf is nil), and it is taken again when input arrives. After an
// error (a deadline, the connection closed) m holds no buffer.
func (r *RawIO) readLending(m *MsgReader) (int, error) {
	r.p, r.n, r.errno, r.lender = m.buf, 0, 0, m
	n, err := r.read()
	r.lender = nil
	if err != nil && m.buf != nil {
		m.lendBuf()
	}
	return n, err
}

// read runs the read call set up in r.
func (r *RawIO) read() (int, error) {
	return r.result(r.rc.Read(r.readFn))
}

// result ends a read call whose callback ran (err: the call's own error).
func (r *RawIO) result(err error) (int, error) {
	r.p = nil
	if err != nil {
		return 0, err
	}
	if r.errno != 0 {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: r.errno}
	}
	if r.n == 0 {
		return 0, io.EOF
	}
	return r.n, nil
}

// Write implements io.Writer: all of p, or an error.
func (r *RawIO) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p, r.n, r.errno = p, 0, 0
	err := r.rc.Write(r.writeFn)
	n := r.n
	r.p = nil
	if err != nil {
		return n, err
	}
	if r.errno != 0 {
		return n, &net.OpError{Op: "write", Net: "tcp", Err: r.errno}
	}
	return n, nil
}

// ConnIO returns the fastest reader/writer for c.
func ConnIO(c net.Conn) io.ReadWriter {
	if r := newRawIO(c); r != nil {
		return r
	}
	return c
}
