package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The server's lifecycle: whether it accepts logins, whether it drains,
// when it is ready and where it listens, and its hand-over socket; and the
// entry points that serve (one run of Serve is serve.go's serveRun).

// lifecycle is the Server's lifecycle state.
type lifecycle struct {
	// log receives the shutdown's start.
	log *slog.Logger
	// disabled refuses new client logins (DISABLE); admin logins still work.
	disabled atomic.Bool
	// draining is set once a graceful shutdown began.
	draining atomic.Bool
	// shutdown is closed by the first Shutdown.
	once     sync.Once
	shutdown chan struct{}
	// drainStart is when the shutdown began (unix nanos).
	drainStart atomic.Int64

	// ready is closed once Serve accepts clients; addrMu guards the
	// addresses it listens on (Addr, MetricsAddr).
	ready       chan struct{}
	addrMu      sync.Mutex
	addr        net.Addr
	metricsAddr net.Addr

	// mu guards handover, the hand-over listener of the running Serve
	// (nil if none).
	mu       sync.Mutex
	handover *handoverServer
}

func (l *lifecycle) init(log *slog.Logger) {
	l.log = log
	l.shutdown = make(chan struct{})
	l.ready = make(chan struct{})
}

// beginShutdown starts the graceful shutdown (once); timeout is the
// configured one, for the log.
func (l *lifecycle) beginShutdown(why string, timeout time.Duration) {
	l.once.Do(func() {
		l.drainStart.Store(time.Now().UnixNano())
		l.draining.Store(true)
		l.log.Info("graceful shutdown: no new clients; waiting for sessions to end", "reason", why,
			"timeout", timeout.String())
		close(l.shutdown)
	})
}

// listening records the addresses Serve listens on (mln may be nil).
func (l *lifecycle) listening(ln, mln net.Listener) {
	l.addrMu.Lock()
	l.addr = ln.Addr()
	if mln != nil {
		l.metricsAddr = mln.Addr()
	}
	l.addrMu.Unlock()
}

// readyAddr waits until Serve accepts clients (or ctx ends), then returns
// the address it listens on (metrics: its metrics endpoint's).
func (l *lifecycle) readyAddr(ctx context.Context, metrics bool) (net.Addr, error) {
	select {
	case <-l.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	l.addrMu.Lock()
	defer l.addrMu.Unlock()
	if metrics {
		return l.metricsAddr, nil
	}
	return l.addr, nil
}

// Shutdown starts a graceful shutdown: the server stops accepting clients
// at once; sessions are served until their clients leave, for at most
// Config.ShutdownTimeout, then every connection is closed and Serve
// returns. It does not wait; calling it again does nothing.
func (s *Server) Shutdown() { s.life.beginShutdown("requested", s.current().cfg.ShutdownTimeout) }

// Draining reports whether a graceful shutdown began.
func (s *Server) Draining() bool { return s.life.draining.Load() }

// ListenAndServe listens on Config.Listen and serves until ctx is done or a
// graceful shutdown ended.
func (s *Server) ListenAndServe(ctx context.Context) error {
	cfg := &s.current().cfg
	ln, err := Listen(ctx, cfg.Listen, cfg.ReusePort)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// Serve accepts clients on ln until ctx is done (then it closes every
// client and backend connection at once) or a graceful shutdown (Shutdown,
// SIGTERM in the command, the admin console's SHUTDOWN, a successor taking
// over the listening socket) has drained, and returns once all its
// goroutines ended. With Config.Follow it accepts no client (and Addr
// waits) until the proxy holds its first catalog lease, and fails when
// none came within Config.LeaseWait.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.serve(ctx, ln, nil, nil)
}

// ServeHandover serves on the listening sockets a predecessor handed over
// (TakeOver): it accepts clients on them at once, then tells the
// predecessor, which stops accepting and drains, and from then on offers
// the sockets to its own successor (Config.HandoverSocket).
func (s *Server) ServeHandover(ctx context.Context, h *Handover) error {
	if h == nil || h.Listener == nil {
		return errors.New("proxy: ServeHandover needs a hand-over with a listener")
	}
	return s.serve(ctx, h.Listener, h.Metrics, h)
}

// ServeListeners is Serve with the metrics endpoint's listener opened by
// the caller (mln; nil: Config.MetricsListen, if set, is listened on).
func (s *Server) ServeListeners(ctx context.Context, ln, mln net.Listener) error {
	return s.serve(ctx, ln, mln, nil)
}
