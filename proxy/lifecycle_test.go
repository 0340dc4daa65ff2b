package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/proxy"
)

// ownProxy is a proxy whose Serve the test controls.
type ownProxy struct {
	srv  *proxy.Server
	addr string
	dsn  string
	done chan error
}

// serveOwn builds a proxy for the shared database and serves it on ln
// (nil: a new loopback listener) until the test ends or it stops.
func serveOwn(t *testing.T, ln net.Listener, opts ...envOpt) *ownProxy {
	t.Helper()
	d := db(t)
	an, err := newRouter(d.m)
	if err != nil {
		t.Fatal(err)
	}
	cfg := proxy.Config{Map: d.m, Analyzer: an, UsePooler: true, VerifyIdentity: true,
		Users:          []proxy.User{{Name: "postgres", Trust: true}},
		ConnectTimeout: 5 * time.Second, PoolTimeout: 20 * time.Second,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &ownProxy{srv: srv, addr: ln.Addr().String(), done: make(chan error, 1)}
	p.dsn = fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", p.addr, d.name)
	go func() { p.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Errorf("proxy did not stop")
		}
	})
	return p
}

// TestGracefulShutdown: Shutdown stops accepting at once; a session in a
// transaction finishes it and an idle one keeps working until its client
// leaves; Serve returns when the last one left, or closes what is left at
// ShutdownTimeout.
func TestGracefulShutdown(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	d := db(t)
	k := d.keysOn(2, 1, 39_000_000)[0]
	t.Run("drains", func(t *testing.T) {
		p := serveOwn(t, nil, func(c *proxy.Config) { c.ShutdownTimeout = time.Minute })
		idle, err := pgx.Connect(ctx, p.dsn)
		if err != nil {
			t.Fatal(err)
		}
		busy, err := pgx.Connect(ctx, p.dsn)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := busy.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO accounts (aid) VALUES ($1) ON CONFLICT (aid) DO UPDATE SET abalance = accounts.abalance + 1", k); err != nil {
			t.Fatal(err)
		}
		p.srv.Shutdown()
		if !p.srv.Draining() {
			t.Fatal("not draining after Shutdown")
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", p.addr, time.Second)
			if err != nil {
				break // refused: the listener is closed
			}
			c.Close()
			if time.Now().After(deadline) {
				t.Fatal("the proxy still accepts connections after Shutdown")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := tx.Exec(ctx, "UPDATE accounts SET note = 'during shutdown' WHERE aid = $1", k); err != nil {
			t.Fatalf("the transaction open at the shutdown: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("commit during the shutdown: %v", err)
		}
		if _, err := idle.Exec(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k); err != nil {
			t.Fatalf("a session idle at the shutdown: %v", err)
		}
		select {
		case err := <-p.done:
			t.Fatalf("Serve returned with sessions left: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		busy.Close(ctx)
		idle.Close(ctx)
		start := time.Now()
		select {
		case err := <-p.done:
			p.done <- err // for the cleanup
			if err != nil {
				t.Fatalf("Serve: %v", err)
			}
			t.Logf("Serve returned %s after the last client left", time.Since(start).Round(time.Millisecond))
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return after the last client left")
		}
		var note string
		if err := d.shardConn(t, 2).QueryRow(ctx, "SELECT note FROM accounts WHERE aid = $1", k).Scan(&note); err != nil || note != "during shutdown" {
			t.Fatalf("the transaction committed during the shutdown: %q %v", note, err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		p := serveOwn(t, nil, func(c *proxy.Config) { c.ShutdownTimeout = time.Second })
		lingering, err := pgx.Connect(ctx, p.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer lingering.Close(ctx)
		start := time.Now()
		p.srv.Shutdown()
		select {
		case err := <-p.done:
			p.done <- err
			if took := time.Since(start); took < 900*time.Millisecond || took > 10*time.Second {
				t.Fatalf("Serve returned after %s, want about the 1s timeout", took)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("Serve did not return at the shutdown timeout")
		}
		if _, err := lingering.Exec(ctx, "SELECT 1"); err == nil {
			t.Fatal("the lingering session still works after the timeout")
		}
	})
	t.Run("admin SHUTDOWN", func(t *testing.T) {
		p := serveOwn(t, nil, func(c *proxy.Config) { c.AdminUsers = []string{"postgres"}; c.ShutdownTimeout = time.Minute })
		cfg, _ := pgx.ParseConfig(fmt.Sprintf("postgres://postgres@%s/pgshard?sslmode=disable", p.addr))
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		admin, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "SHUTDOWN"); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-p.done:
			p.done <- err
		case <-time.After(10 * time.Second):
			t.Fatal("SHUTDOWN with only the admin connected did not stop the proxy")
		}
	})
}

// TestHandover: a second server takes the listening socket over from a
// running one (Config.HandoverSocket) while clients connect, run a
// transaction and disconnect in a loop: no connection is refused or
// dropped, no transaction fails, every committed one is counted, and the
// first server drains and stops.
func TestHandover(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	d := db(t)
	sock := filepath.Join(t.TempDir(), "handover.sock")
	opt := func(c *proxy.Config) { c.HandoverSocket = sock }
	a := serveOwn(t, nil, opt)
	keys := d.keysOn(1, 8, 40_000_000)
	conn := d.shardConn(t, 1)
	for _, k := range keys {
		if _, err := conn.Exec(ctx, "INSERT INTO accounts (aid, abalance) VALUES ($1, 0) ON CONFLICT (aid) DO UPDATE SET abalance = 0", k); err != nil {
			t.Fatal(err)
		}
	}
	// Clients: connect, one committed increment, disconnect, repeat.
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := pgx.Connect(ctx, a.dsn)
				if err == nil {
					_, err = c.Exec(ctx, "UPDATE accounts SET abalance = abalance + 1 WHERE aid = $1", k)
					c.Close(ctx)
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("client %d: %w", i, err))
					continue
				}
				ok.Add(1)
			}
		}()
	}
	time.Sleep(time.Second)
	before := ok.Load()
	h, err := proxy.TakeOver(ctx, sock)
	if err != nil || h == nil {
		t.Fatalf("TakeOver: %v %v", h, err)
	}
	b := serveHandover(t, h, opt)
	select {
	case err := <-a.done:
		a.done <- err
		if err != nil {
			t.Fatalf("the first server: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the first server did not stop after the hand-over")
	}
	atHandover := ok.Load()
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d client operations failed across the hand-over; first: %v", failed.Load(), firstErr.Load())
	}
	var sum int64
	for _, k := range keys {
		var v int64
		if err := conn.QueryRow(ctx, "SELECT abalance FROM accounts WHERE aid = $1", k).Scan(&v); err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	if sum != ok.Load() {
		t.Fatalf("committed increments %d, acknowledged %d", sum, ok.Load())
	}
	if ok.Load() <= atHandover || atHandover <= before {
		t.Fatalf("transactions: %d before, %d at the hand-over, %d at the end: both servers must have served", before, atHandover, ok.Load())
	}
	// The successor offers the socket in turn.
	h2, err := proxy.TakeOver(ctx, sock)
	if err != nil || h2 == nil {
		t.Fatalf("second TakeOver: %v %v", h2, err)
	}
	serveHandover(t, h2, opt)
	select {
	case err := <-b.done:
		b.done <- err
	case <-time.After(20 * time.Second):
		t.Fatal("the second server did not stop after handing over")
	}
	t.Logf("hand-over under connect/transaction/disconnect load: %d transactions, 0 failed, %d committed", ok.Load(), sum)
}

// serveHandover serves a new proxy on a hand-over.
func serveHandover(t *testing.T, h *proxy.Handover, opts ...envOpt) *ownProxy {
	t.Helper()
	d := db(t)
	an, err := newRouter(d.m)
	if err != nil {
		t.Fatal(err)
	}
	cfg := proxy.Config{Map: d.m, Analyzer: an, UsePooler: true, VerifyIdentity: true,
		Users:  []proxy.User{{Name: "postgres", Trust: true}},
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &ownProxy{srv: srv, addr: h.Listener.Addr().String(), done: make(chan error, 1)}
	go func() { p.done <- srv.ServeHandover(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Errorf("proxy did not stop")
		}
	})
	return p
}

var _ = errors.New
