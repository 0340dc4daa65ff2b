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
	return r.read()
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
	err := r.rc.Read(r.readFn)
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
