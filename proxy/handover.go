package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// Zero-downtime restart: the running proxy offers its listening sockets on
// a unix socket (Config.HandoverSocket); a new proxy process started with
// the same setting takes them over before it serves:
//
//	successor                              predecessor (serving)
//	TakeOver: dial HandoverSocket ───────▶ "TAKEOVER"
//	          ◀──── header + SCM_RIGHTS: the client listener (+ metrics)
//	ServeHandover: accepts on them ──────▶ "READY"
//	                                        stops accepting (its copy of the
//	                                        socket closed; the socket and its
//	                                        queue of pending connections live
//	                                        on in the successor), removes the
//	          ◀──────────────────── "BYE"   hand-over socket, drains
//	binds HandoverSocket for its own successor
//
// Both processes hold the one listening socket while it changes hands, so
// no connection that reached the kernel's accept queue is lost (closing a
// listener that is only shared through SO_REUSEPORT would reset the
// connections queued on it). Sessions of the predecessor drain as in any
// graceful shutdown. A predecessor that does not answer is no hand-over:
// TakeOver returns nil and the caller listens itself.
//
// Hand-written: no Go library passes listeners between processes with
// this handshake; the fd passing is syscall.UnixRights.

// Handover is what a successor received from its predecessor.
type Handover struct {
	// Listener is the client listener; Metrics the metrics listener, nil
	// if the predecessor had none.
	Listener, Metrics net.Listener
	// FromPID is the predecessor's process id.
	FromPID int
	conn    *net.UnixConn
	rd      *bufio.Reader
}

// handoverHeader is the predecessor's description of the sockets it sends.
type handoverHeader struct {
	PID     int    `json:"pid"`
	Addr    string `json:"addr"`
	Metrics string `json:"metrics,omitempty"`
}

// handoverTimeout bounds each step of the hand-over.
const handoverTimeout = 30 * time.Second

// TakeOver asks the proxy serving on the hand-over socket at path for its
// listening sockets. It returns nil, nil when no proxy answers there (no
// file, or a stale one, which it removes): the caller then listens itself.
// On success, serve with Server.ServeHandover, which completes the
// exchange once it accepts.
func TakeOver(ctx context.Context, path string) (*Handover, error) {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nc, err := d.DialContext(dctx, "unix", path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			_ = os.Remove(path) // a predecessor that died without cleaning up
			return nil, nil
		}
		return nil, fmt.Errorf("hand-over: connect to %s: %w", path, err)
	}
	uc := nc.(*net.UnixConn)
	fail := func(err error) (*Handover, error) {
		_ = uc.Close()
		return nil, fmt.Errorf("hand-over from %s: %w", path, err)
	}
	_ = uc.SetDeadline(time.Now().Add(handoverTimeout))
	if _, err := uc.Write([]byte("TAKEOVER\n")); err != nil {
		return fail(err)
	}
	buf := make([]byte, 4096)
	oob := make([]byte, syscall.CmsgSpace(2*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return fail(err)
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return fail(err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := syscall.ParseUnixRights(&m)
		if err != nil {
			return fail(err)
		}
		fds = append(fds, got...)
	}
	closeFDs := func() {
		for _, fd := range fds {
			_ = syscall.Close(fd)
		}
	}
	var hdr handoverHeader
	if err := json.Unmarshal(buf[:n], &hdr); err != nil {
		closeFDs()
		return fail(fmt.Errorf("bad header: %w", err))
	}
	want := 1
	if hdr.Metrics != "" {
		want = 2
	}
	if len(fds) != want {
		closeFDs()
		return fail(fmt.Errorf("got %d sockets, want %d", len(fds), want))
	}
	h := &Handover{FromPID: hdr.PID, conn: uc, rd: bufio.NewReader(uc)}
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), fmt.Sprintf("handover-%d", i))
		ln, err := net.FileListener(f)
		_ = f.Close()
		if err != nil {
			if h.Listener != nil {
				_ = h.Listener.Close()
			}
			for _, fd := range fds[i+1:] {
				_ = syscall.Close(fd)
			}
			return fail(err)
		}
		if i == 0 {
			h.Listener = ln
		} else {
			h.Metrics = ln
		}
	}
	_ = uc.SetDeadline(time.Time{})
	return h, nil
}

// finish tells the predecessor that this process accepts now and waits
// until it has stopped accepting and released the hand-over socket.
func (h *Handover) finish(ctx context.Context) error {
	defer h.conn.Close()
	deadline := time.Now().Add(handoverTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = h.conn.SetDeadline(deadline)
	if _, err := h.conn.Write([]byte("READY\n")); err != nil {
		return err
	}
	line, err := h.rd.ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "BYE" {
		return fmt.Errorf("unexpected answer %q", strings.TrimSpace(line))
	}
	return nil
}

// handoverServer offers a serving proxy's sockets to one successor.
type handoverServer struct {
	ul     *net.UnixListener
	ln     net.Listener
	mln    net.Listener
	c      *Server
	closed chan struct{}
}

// listenHandover binds the hand-over socket at path (replacing a stale
// file; a live one belongs to another proxy and is an error).
func listenHandover(path string, ln, mln net.Listener, c *Server) (*handoverServer, error) {
	if _, err := os.Stat(path); err == nil {
		if nc, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = nc.Close()
			return nil, fmt.Errorf("another proxy serves the hand-over socket %s", path)
		}
		_ = os.Remove(path)
	}
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	_ = os.Chmod(path, 0o600)
	return &handoverServer{ul: ul, ln: ln, mln: mln, c: c, closed: make(chan struct{})}, nil
}

// closeHandover closes the hand-over socket (removing its file), once.
func (l *lifecycle) closeHandover() {
	l.mu.Lock()
	hs := l.handover
	l.handover = nil
	l.mu.Unlock()
	if hs != nil {
		_ = hs.ul.Close()
	}
}

// serve answers successors until the server stops or one took over.
func (hs *handoverServer) serve(ctx context.Context) {
	go func() {
		<-ctx.Done()
		_ = hs.ul.Close()
	}()
	for {
		uc, err := hs.ul.AcceptUnix()
		if err != nil {
			return
		}
		if hs.give(uc) {
			return
		}
	}
}

// give runs one hand-over; true when the successor took the sockets.
func (hs *handoverServer) give(uc *net.UnixConn) bool {
	defer uc.Close()
	c := hs.c
	_ = uc.SetDeadline(time.Now().Add(handoverTimeout))
	rd := bufio.NewReader(uc)
	line, err := rd.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "TAKEOVER" {
		return false
	}
	if c.life.draining.Load() {
		return false // shutting down already: nothing to hand over
	}
	var fds []int
	defer func() {
		for _, fd := range fds {
			_ = syscall.Close(fd)
		}
	}()
	hdr := handoverHeader{PID: os.Getpid(), Addr: hs.ln.Addr().String()}
	for i, l := range []net.Listener{hs.ln, hs.mln} {
		if l == nil {
			continue
		}
		fd, err := dupListener(l)
		if err != nil {
			c.log.Warn("hand-over: a listener cannot be passed on", "addr", l.Addr().String(), "err", err)
			return false
		}
		fds = append(fds, fd)
		if i == 1 {
			hdr.Metrics = l.Addr().String()
		}
	}
	b, _ := json.Marshal(hdr)
	if _, _, err := uc.WriteMsgUnix(b, syscall.UnixRights(fds...), nil); err != nil {
		c.log.Warn("hand-over: sending the sockets failed", "err", err)
		return false
	}
	line, err = rd.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "READY" {
		// The successor failed after receiving the sockets: keep serving.
		c.log.Warn("hand-over: the successor did not take over; still serving", "err", err)
		return false
	}
	// The successor accepts: stop accepting (our copy of the socket only),
	// release the hand-over socket, then say so.
	c.life.beginShutdown("a successor took over the listening socket", c.current().cfg.ShutdownTimeout)
	c.life.closeHandover()
	_, _ = uc.Write([]byte("BYE\n"))
	return true
}

// dupListener duplicates a listener's descriptor without touching its
// mode (os.File.Fd would make the shared socket blocking).
func dupListener(l net.Listener) (int, error) {
	sc, ok := l.(syscall.Conn)
	if !ok {
		return -1, errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	nfd, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) {
		nfd, derr = syscall.Dup(int(fd))
	}); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	syscall.CloseOnExec(nfd)
	return nfd, nil
}

// Listen opens a TCP listener on addr; with reusePort it sets SO_REUSEPORT
// first, so that another process can listen on the same address at the
// same time (a restart that starts the new proxy before stopping the old
// one without a hand-over; the kernel spreads new connections over both).
func Listen(ctx context.Context, addr string, reusePort bool) (net.Listener, error) {
	lc := net.ListenConfig{}
	if reusePort {
		lc.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soReusePort, 1)
			})
			if err != nil {
				return err
			}
			return serr
		}
	}
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}

// soReusePort is SO_REUSEPORT on Linux.
const soReusePort = 0xf

// Abort gives up a hand-over before serving: the sockets are closed here
// (the predecessor, which keeps its own copies, goes on serving).
func (h *Handover) Abort() {
	if h.Listener != nil {
		_ = h.Listener.Close()
	}
	if h.Metrics != nil {
		_ = h.Metrics.Close()
	}
	_ = h.conn.Close()
}
