package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/engine"
)

// One run of Serve: serving, a graceful shutdown, a hand-over of the
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

// serveRun is one run of Serve: its listener and metrics endpoint, the
// group of its goroutines and the hard stop that ends them, and what its
// loops act on (the server's lifecycle, sessions, pool keeper and current
// generation). It lives as long as the Serve call that made it.
type serveRun struct {
	life    *lifecycle
	log     *slog.Logger
	clients *engine.Registry
	keeper  *poolKeeper
	cur     *atomic.Pointer[generation]

	ln         net.Listener
	stopAccept sync.Once
	metricsSrv *http.Server // nil without a metrics endpoint
	g          *errgroup.Group
	gctx       context.Context // ends at the hard stop
	hardStop   context.CancelFunc
}

func (s *Server) serve(ctx context.Context, ln, mln net.Listener, h *Handover) error {
	hardCtx, hardStop := context.WithCancel(ctx)
	defer hardStop()
	g, gctx := errgroup.WithContext(hardCtx)
	r := &serveRun{life: &s.life, log: s.log, clients: s.clients, keeper: &s.keeper, cur: &s.cur,
		ln: ln, g: g, gctx: gctx, hardStop: hardStop}
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
	s.life.listening(ln, mln)
	if mln != nil {
		r.serveMetrics(mln, s.reg)
	}

	s.keeper.run(gctx, g)
	for _, p := range cur.pools {
		s.keeper.startMonitor(p)
	}
	// The extra databases' own pools, monitors and reapers run until the
	// hard stop (their sessions are this Server's and drain with it).
	cur.srv.dbs.serve(gctx, g)

	g.Go(r.onHardStop)
	g.Go(r.gracefulShutdown)
	g.Go(r.reapLoop)
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
		r.shutdownPools()
		if stopped {
			return werr
		}
		return err
	}
	close(s.life.ready)
	s.log.Info("proxy listening", "addr", ln.Addr().String(), "shards", len(cur.pools), "via_pooler", cur.cfg.UsePooler, "tls", cur.cfg.TLS.Mode.String())
	g.Go(r.acceptLoop)
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
	r.shutdownPools()
	s.log.Info("proxy stopped")
	return err
}

// serveMetrics serves reg's metrics on mln in the run's group until the
// hard stop closes the endpoint.
func (r *serveRun) serveMetrics(mln net.Listener, reg *prometheus.Registry) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	r.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	r.g.Go(func() error {
		if err := r.metricsSrv.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("proxy: metrics endpoint: %w", err)
		}
		return nil
	})
}

// closeListener stops accepting clients (once).
func (r *serveRun) closeListener() { r.stopAccept.Do(func() { _ = r.ln.Close() }) }

// shutdownPools ends Serve's group's reach and shuts every pool down,
// once its goroutines ended.
func (r *serveRun) shutdownPools() {
	r.keeper.run(nil, nil)
	for _, p := range r.allPools() {
		p.Shutdown()
	}
}

// onHardStop waits for the hard stop (gctx done), then closes the listener,
// the metrics endpoint, the hand-over socket and every client session,
// and interrupts the sessions waiting for a backend.
func (r *serveRun) onHardStop() error {
	<-r.gctx.Done()
	r.closeListener()
	if r.metricsSrv != nil {
		_ = r.metricsSrv.Close()
	}
	r.life.closeHandover()
	r.clients.CloseAll()
	// Sessions waiting for a backend (a long query, a fan-out's
	// shards) end too.
	for _, p := range r.allPools() {
		p.Ops.InterruptInUse()
	}
	return nil
}

// gracefulShutdown waits for SHUTDOWN (or the hard stop), stops accepting,
// waits for the sessions to end, at most ShutdownTimeout, then calls
// hardStop.
func (r *serveRun) gracefulShutdown() error {
	select {
	case <-r.gctx.Done():
		return nil
	case <-r.life.shutdown:
	}
	r.closeListener()
	r.life.closeHandover()
	timeout := r.cur.Load().cfg.ShutdownTimeout
	wctx, cancel := context.WithTimeout(r.gctx, timeout)
	err := backend.PollUntil(wctx, func() bool {
		n, admin := r.clients.Counts()
		return n-admin == 0
	})
	cancel()
	n, admin := r.clients.Counts()
	left := n - admin
	if err != nil && r.gctx.Err() == nil {
		r.log.Warn("graceful shutdown: timeout; closing the sessions left", "sessions", left, "timeout", timeout.String())
	} else {
		r.log.Info("graceful shutdown: every session ended")
	}
	r.hardStop()
	return nil
}

// reapLoop closes idle backends, rolls the pools' statistics and retires
// the pools of past generations, once a second until the hard stop.
func (r *serveRun) reapLoop() error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-r.gctx.Done():
			return nil
		case now := <-t.C:
			cur := r.cur.Load()
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
			r.keeper.reapRetired()
		}
	}
}

// acceptLoop accepts clients on the listener until it closes (a session
// each, owned by the run's group); a transient accept error (timeout,
// EMFILE) is retried with backoff.
func (r *serveRun) acceptLoop() error {
	backoff := 5 * time.Millisecond
	for {
		conn, err := r.ln.Accept()
		if err != nil {
			if r.gctx.Err() != nil || r.life.draining.Load() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscallEMFILE) {
				r.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
				t := time.NewTimer(backoff)
				select {
				case <-r.gctx.Done():
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
		r.g.Go(func() error {
			r.cur.Load().handle(r.gctx, conn)
			return nil
		})
	}
}

// allPools returns the current generation's pools (its shards' and the
// direct ones of pinned sessions) and the retired ones still draining.
func (r *serveRun) allPools() []*backend.Pool {
	cur := r.cur.Load()
	out := append([]*backend.Pool(nil), cur.pools...)
	out = append(out, cur.directPools()...)
	return append(out, r.keeper.retiredPools()...)
}
