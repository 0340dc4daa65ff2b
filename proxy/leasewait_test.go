package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// serveFollowing runs a proxy over two fake shards following ff, with
// Config.LeaseWait wait; it returns the server, its address, the map and
// Serve's end (closed once Serve returned *serveErr; the cleanup stops it).
func serveFollowing(t *testing.T, ff proxy.MapFollower, wait time.Duration) (srv *proxy.Server, addr string, m *shardmap.Map, done <-chan struct{}, serveErr *error) {
	t.Helper()
	var err error
	var shards []shardmap.Shard
	for i := range 2 {
		f := newFakePG(t)
		dsn := "postgres://postgres@" + f.addr() + "/db?sslmode=disable"
		shards = append(shards, shardmap.Shard{Name: fmt.Sprintf("shard%d", i), Ordinal: i, DSN: dsn, PoolerDSN: dsn})
	}
	m, err = shardmap.Even(64, shards)
	if err != nil {
		t.Fatal(err)
	}
	an, err := route.New(m, testSchema(), route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err = proxy.New(proxy.Config{
		Map: m, Analyzer: an, UsePooler: true, Fence: proxy.FenceOff,
		Users:  []proxy.User{{Name: "postgres", Trust: true}},
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Follow: ff, CatalogName: "postgres://cat/test", LeaseWait: wait,
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	end := make(chan struct{})
	serveErr = new(error)
	go func() {
		defer close(end)
		*serveErr = srv.Serve(ctx, ln)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-end:
		case <-time.After(15 * time.Second):
			t.Errorf("the proxy did not stop within 15s of its context ending")
		}
	})
	return srv, ln.Addr().String(), m, end, serveErr
}

// TestServeWaitsForFirstLease: following a catalog, the proxy is not
// ready (Addr waits) and answers no client before its first lease; a
// client that connected and sent a keyed statement meanwhile gets the
// statement's answer once the lease is live, never 57P03.
func TestServeWaitsForFirstLease(t *testing.T) {
	ff := &fakeFollower{lapsed: errors.New(`catalog lease "p" is not live (not acquired yet)`)}
	srv, addr, m, _, _ := serveFollowing(t, ff, time.Minute)

	actx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := srv.Addr(actx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Addr without a lease: %v; want it to wait for the first lease", err)
	}

	var k int64 = 1
	for m.ShardIndexForBucket(m.BucketInt8(k)) != 1 {
		k++
	}
	rc := dialRaw(t, addr) // the listen backlog takes it
	rc.fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "postgres", "database": "db"}})
	rc.fe.Send(&pgproto3.Query{String: fmt.Sprintf("SELECT note FROM accounts WHERE aid = %d", k)})
	if err := rc.fe.Flush(); err != nil {
		t.Fatal(err)
	}
	// Nothing is answered while the lease is not live.
	_ = rc.conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var b [1]byte
	if n, err := rc.conn.Read(b[:]); n > 0 || !isTimeout(err) {
		t.Fatalf("answered before the first lease: %d byte(s), %v", n, err)
	}
	_ = rc.conn.SetReadDeadline(time.Now().Add(30 * time.Second))

	ff.setLapsed(nil)
	c := &client{t: t, fe: rc.fe, c: rc.conn}
	if got := c.until(); strings.Contains(got, "E:") {
		t.Fatalf("login refused: %s", got)
	}
	expect(t, "the first keyed statement", c.until(), "T D:conn1 C:SELECT 1 Z:I")
	actx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := srv.Addr(actx); err != nil {
		t.Fatalf("Addr with the lease live: %v", err)
	}
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestServeFailsWithoutLease: no lease within Config.LeaseWait: Serve
// returns an error naming the catalog and the follower's reason, and
// accepts no client.
func TestServeFailsWithoutLease(t *testing.T) {
	ff := &fakeFollower{lapsed: errors.New(`catalog lease "p" is not live (not acquired yet); last catalog error: dial tcp 127.0.0.1:1: connect: connection refused`)}
	_, addr, _, done, serveErr := serveFollowing(t, ff, 300*time.Millisecond)
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Serve did not give up within a minute of its 300ms lease wait")
	}
	err := *serveErr
	if err == nil || !strings.Contains(err.Error(), "postgres://cat/test") || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "300ms") {
		t.Fatalf("Serve without a lease: %v; want an error naming the catalog, the wait and the cause", err)
	}
	if conn, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		fe := pgproto3.NewFrontend(conn, conn)
		fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "postgres", "database": "db"}})
		_ = fe.Flush()
		if msg, err := fe.Receive(); err == nil {
			t.Fatalf("a client was answered (%T) by a proxy that never held a lease", msg)
		}
		conn.Close()
	}
}

// TestServeShutdownBeforeLease: a graceful shutdown while the proxy
// waits for its first lease ends Serve without an error.
func TestServeShutdownBeforeLease(t *testing.T) {
	ff := &fakeFollower{lapsed: errors.New(`catalog lease "p" is not live (not acquired yet)`)}
	srv, _, _, done, serveErr := serveFollowing(t, ff, time.Hour)
	srv.Shutdown()
	select {
	case <-done:
		if err := *serveErr; err != nil {
			t.Fatalf("Serve after a shutdown before the first lease: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve did not end within a minute of Shutdown")
	}
}
