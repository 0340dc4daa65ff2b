package proxy

import (
	"github.com/pgshard/pgshard/proxy/internal/backend"

	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
)

// The server's life: serving, a graceful shutdown, a hand-over of the
// listening socket to a successor.
//
//	Serve ──▶ [with a catalog: the first lease (catalog.go)] ─▶ accept loop ─▶ sessions
//	  │       monitors (health probe + PgBouncer reading, one per shard)
//	  │       idle reaper (idle connections, retired pools)
//	  │       metrics endpoint, hand-over socket (handover.go)
//	  │
//	  ├─ Shutdown / SIGTERM / admin SHUTDOWN / a successor took the socket:
//	  │     stop accepting ─▶ sessions go on until their clients leave,
//	  │     at most Config.ShutdownTimeout ─▶ hard stop
//	  └─ ctx done (hard stop): every client and backend connection closed
//
// Draining never cuts a session between its client's statements before
// the timeout: a client connected when the shutdown began can finish what
// it does and start more transactions (they still work); a client that
// reconnects reaches the successor (or is refused: nothing listens).

// lifecycle is the Server's lifecycle state.
type lifecycle struct {
	// disabled refuses new client logins (DISABLE); admin logins still work.
	disabled atomic.Bool
	// draining is set once a graceful shutdown began.
	draining atomic.Bool
	// shutdown is closed by the first Shutdown.
	once     sync.Once
	shutdown chan struct{}
	// drainStart is when the shutdown began (unix nanos).
	drainStart atomic.Int64

	// mu guards handover, the hand-over listener of the running Serve
	// (nil if none).
	mu       sync.Mutex
	handover *handoverServer
}

func (l *lifecycle) init() {
	l.shutdown = make(chan struct{})
}

// Shutdown starts a graceful shutdown: the server stops accepting clients
// at once; sessions are served until their clients leave, for at most
// Config.ShutdownTimeout, then every connection is closed and Serve
// returns. It does not wait; calling it again does nothing.
func (s *Server) Shutdown() { s.beginShutdown("requested") }

// Draining reports whether a graceful shutdown began.
func (s *Server) Draining() bool { return s.life.draining.Load() }

func (s *Server) beginShutdown(why string) {
	s.life.once.Do(func() {
		s.life.drainStart.Store(time.Now().UnixNano())
		s.life.draining.Store(true)
		s.log.Info("graceful shutdown: no new clients; waiting for sessions to end", "reason", why,
			"timeout", s.current().cfg.ShutdownTimeout.String())
		close(s.life.shutdown)
	})
}

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

func (s *Server) serve(ctx context.Context, ln, mln net.Listener, h *Handover) error {
	hardCtx, hardStop := context.WithCancel(ctx)
	defer hardStop()
	g, gctx := errgroup.WithContext(hardCtx)
	cur := s.current()
	// The metrics endpoint listens before the server is ready, so that
	// MetricsAddr (and a ready file) can name the port it got.
	if mln == nil && cur.cfg.MetricsListen != "" {
		var err error
		if mln, err = Listen(ctx, cur.cfg.MetricsListen, cur.cfg.ReusePort); err != nil {
			_ = ln.Close()
			return fmt.Errorf("proxy: metrics: %w", err)
		}
	}
	s.addrMu.Lock()
	s.addr = ln.Addr()
	if mln != nil {
		s.metricsAddr = mln.Addr()
	}
	s.addrMu.Unlock()

	var metricsSrv *http.Server
	if mln != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		g.Go(func() error {
			if err := metricsSrv.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("proxy: metrics endpoint: %w", err)
			}
			return nil
		})
	}

	s.keeper.run(gctx, g)
	for _, p := range cur.pools {
		s.keeper.startMonitor(p)
	}
	// The extra databases' own pools, monitors and reapers run until the
	// hard stop (their sessions are this Server's and drain with it).
	cur.dbs.serve(gctx, g)

	var stopAccept sync.Once
	closeListener := func() { stopAccept.Do(func() { _ = ln.Close() }) }

	g.Go(func() error { return s.onHardStop(gctx, closeListener, metricsSrv) })
	g.Go(func() error { return s.gracefulShutdown(gctx, closeListener, hardStop) })
	g.Go(func() error { return s.reapLoop(gctx) })
	g.Go(func() error { s.follow(gctx); return nil })
	// Ready (Addr returns, clients are accepted) once the proxy holds its
	// first catalog lease (catalog.go): until then a keyed statement
	// would only be refused. Clients that connect meanwhile wait in the
	// listen backlog; a predecessor handing over goes on serving.
	if err := s.waitFirstLease(gctx); err != nil {
		stopped := gctx.Err() != nil // a shutdown or the hard stop came first
		hardStop()
		werr := g.Wait()
		if h != nil {
			h.Abort() // the predecessor goes on serving
		}
		s.shutdownPools()
		if stopped {
			return werr
		}
		return err
	}
	close(s.ready)
	s.log.Info("proxy listening", "addr", ln.Addr().String(), "shards", len(cur.pools), "via_pooler", cur.cfg.UsePooler, "tls", cur.cfg.TLS.Mode.String())
	g.Go(func() error { return s.acceptLoop(gctx, g, ln) })
	if h != nil {
		// Accepting on the inherited sockets: let the predecessor go.
		if err := h.finish(gctx); err != nil {
			s.log.Warn("hand-over: the predecessor did not confirm; it keeps accepting too until it stops", "err", err)
		} else {
			s.log.Info("hand-over: took over the listening socket", "from_pid", h.FromPID)
		}
	}
	if cur.cfg.HandoverSocket != "" {
		hs, err := listenHandover(cur.cfg.HandoverSocket, ln, mln, s)
		if err != nil {
			s.log.Warn("hand-over socket unavailable; a successor cannot take over without dropping connections", "path", cur.cfg.HandoverSocket, "err", err)
		} else {
			s.life.mu.Lock()
			s.life.handover = hs
			s.life.mu.Unlock()
			g.Go(func() error { hs.serve(gctx); return nil })
		}
	}
	err := g.Wait()
	s.shutdownPools()
	s.log.Info("proxy stopped")
	return err
}

// shutdownPools ends Serve's group's reach and shuts every pool down,
// once its goroutines ended.
func (s *Server) shutdownPools() {
	s.keeper.run(nil, nil)
	for _, p := range s.allPools() {
		p.Shutdown()
	}
}

// onHardStop waits for the hard stop (gctx done), then closes the listener,
// the metrics endpoint, the hand-over socket and every client session,
// and interrupts the sessions waiting for a backend.
func (s *Server) onHardStop(gctx context.Context, closeListener func(), metricsSrv *http.Server) error {
	<-gctx.Done()
	closeListener()
	if metricsSrv != nil {
		_ = metricsSrv.Close()
	}
	s.life.closeHandover()
	s.clients.CloseAll()
	// Sessions waiting for a backend (a long query, a fan-out's
	// shards) end too.
	for _, p := range s.allPools() {
		p.Ops.InterruptInUse()
	}
	return nil
}

// gracefulShutdown waits for SHUTDOWN (or the hard stop), stops accepting,
// waits for the sessions to end, at most ShutdownTimeout, then calls
// hardStop.
func (s *Server) gracefulShutdown(gctx context.Context, closeListener, hardStop func()) error {
	select {
	case <-gctx.Done():
		return nil
	case <-s.life.shutdown:
	}
	closeListener()
	s.life.closeHandover()
	timeout := s.current().cfg.ShutdownTimeout
	wctx, cancel := context.WithTimeout(gctx, timeout)
	err := backend.PollUntil(wctx, func() bool {
		n, admin := s.clients.Counts()
		return n-admin == 0
	})
	cancel()
	n, admin := s.clients.Counts()
	left := n - admin
	if err != nil && gctx.Err() == nil {
		s.log.Warn("graceful shutdown: timeout; closing the sessions left", "sessions", left, "timeout", timeout.String())
	} else {
		s.log.Info("graceful shutdown: every session ended")
	}
	hardStop()
	return nil
}

// reapLoop closes idle backends, rolls the pools' statistics and retires
// the pools of past generations, once a second until gctx is done.
func (s *Server) reapLoop(gctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-gctx.Done():
			return nil
		case now := <-t.C:
			cur := s.current()
			period := min(max(cur.cfg.IdleTimeout/4, time.Second), 30*time.Second)
			if now.Sub(last) >= period {
				last = now
				for _, p := range cur.pools {
					p.ReapIdle(now)
				}
			}
			for _, p := range cur.pools {
				p.Stats.Roll(now)
			}
			s.keeper.reapRetired()
		}
	}
}

// acceptLoop accepts clients on ln until it closes (a session each, owned
// by g); a transient accept error (timeout, EMFILE) is retried with
// backoff.
func (s *Server) acceptLoop(gctx context.Context, g *errgroup.Group, ln net.Listener) error {
	backoff := 5 * time.Millisecond
	for {
		conn, err := ln.Accept()
		if err != nil {
			if gctx.Err() != nil || s.life.draining.Load() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscallEMFILE) {
				s.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
				t := time.NewTimer(backoff)
				select {
				case <-gctx.Done():
					t.Stop()
					return nil
				case <-t.C:
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			return fmt.Errorf("proxy: accept: %w", err)
		}
		backoff = 5 * time.Millisecond
		g.Go(func() error {
			s.current().handle(gctx, conn)
			return nil
		})
	}
}

// allPools returns the current generation's pools (its shards' and the
// direct ones of pinned sessions) and the retired ones still draining.
func (s *Server) allPools() []*backend.Pool {
	cur := s.current()
	out := append([]*backend.Pool(nil), cur.pools...)
	out = append(out, cur.directPools()...)
	return append(out, s.keeper.retiredPools()...)
}

// ServeListeners is Serve with the metrics endpoint's listener opened by
// the caller (mln; nil: Config.MetricsListen, if set, is listened on).
func (s *Server) ServeListeners(ctx context.Context, ln, mln net.Listener) error {
	return s.serve(ctx, ln, mln, nil)
}
