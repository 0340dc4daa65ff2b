package chaos_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/chaos"
)

// server is a fake upstream: it accepts connections and serves each with
// handle on a goroutine it owns; Close stops and waits for them.
type server struct {
	ln       net.Listener
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
	accepted atomic.Int64
}

func newServer(t *testing.T, handle func(net.Conn)) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *server) addr() string { return s.ln.Addr().String() }

func echo(c net.Conn) { _, _ = io.Copy(c, c) }

func newRelay(t *testing.T, upstream string) *chaos.Relay {
	t.Helper()
	r, err := chaos.NewRelay(upstream, chaos.RelayOptions{Name: "test", Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes msg and reads it back within 5 s.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read: %v", err)
	}
	if string(got) != msg {
		t.Fatalf("got %q, want %q", got, msg)
	}
}

// silent asserts that nothing arrives on c for a short while (the one
// negative check a relay test cannot poll for).
func silent(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	var b [1]byte
	n, err := c.Read(b[:])
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("expected silence, got %d bytes, %v", n, err)
	}
}

// eventually polls cond every 5 ms until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE)
}

// readErr reads from c until an error (bounded) and returns it.
func readErr(t *testing.T, c net.Conn) error {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if err == nil {
		err = io.EOF
	}
	return err
}

func TestRelayPassThrough(t *testing.T) {
	up := newServer(t, echo)
	r := newRelay(t, up.addr())
	c := dial(t, r.Addr())
	roundTrip(t, c, "hello")
	roundTrip(t, c, string(bytes.Repeat([]byte("x"), 100_000)))
	// The relay counts a chunk after writing it: poll.
	eventually(t, "the byte counters", func() bool { st := r.Stats(); return st.BytesUp == 100_005 && st.BytesDown == 100_005 })
	st := r.Stats()
	if st.Accepted != 1 || st.Active != 1 || st.BytesUp != 100_005 || st.BytesDown != 100_005 {
		t.Fatalf("stats %+v", st)
	}
	if st.Unframed != 1 {
		t.Errorf("a non-Postgres stream should be unframed once: %+v", st)
	}
	_ = c.Close()
	eventually(t, "the connection to close", func() bool { return r.Stats().Active == 0 })
}

func TestRelayLatency(t *testing.T) {
	up := newServer(t, echo)
	r := newRelay(t, up.addr())
	c := dial(t, r.Addr())
	r.SetLatency(5*time.Millisecond, 5*time.Millisecond, rand.New(rand.NewPCG(1, 2)))
	for range 3 {
		roundTrip(t, c, "ping")
	}
	if d := r.Stats().Delayed; d < 6 {
		t.Fatalf("delayed chunks %d, want >= 6 (3 round trips, both ways)", d)
	}
	r.SetLatency(0, 0, nil)
	before := r.Stats().Delayed
	roundTrip(t, c, "pong")
	if d := r.Stats().Delayed; d != before {
		t.Fatalf("latency off, but %d more chunks were delayed", d-before)
	}
}

func TestRelayStall(t *testing.T) {
	up := newServer(t, echo)
	r := newRelay(t, up.addr())
	c := dial(t, r.Addr())
	roundTrip(t, c, "before")
	if n := r.Stall(); n != 1 {
		t.Fatalf("Stall: %d connections, want 1", n)
	}
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	silent(t, c)
	c2 := dial(t, r.Addr()) // a new connection stalls too
	if _, err := c2.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both connections' data held", func() bool { return r.Stats().Held >= 2 })
	if n := r.Unstall(); n != 2 {
		t.Fatalf("Unstall: %d connections held, want 2", n)
	}
	got := make([]byte, 4)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "held" {
		t.Fatalf("after Unstall: %q, %v", got, err)
	}
	got = got[:3]
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c2, got); err != nil || string(got) != "new" {
		t.Fatalf("new connection after Unstall: %q, %v", got, err)
	}
	if n := r.Unstall(); n != 0 {
		t.Fatalf("second Unstall: %d", n)
	}
}

func TestRelayReset(t *testing.T) {
	up := newServer(t, echo)
	r := newRelay(t, up.addr())
	c1, c2 := dial(t, r.Addr()), dial(t, r.Addr())
	roundTrip(t, c1, "a")
	roundTrip(t, c2, "b")
	if n := r.Reset(); n != 2 {
		t.Fatalf("Reset: %d, want 2", n)
	}
	for _, c := range []net.Conn{c1, c2} {
		if err := readErr(t, c); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("client read after reset: %v, want ECONNRESET", err)
		}
	}
	if st := r.Stats(); st.Resets != 2 || st.Active != 0 {
		t.Fatalf("stats %+v", st)
	}
	roundTrip(t, dial(t, r.Addr()), "after") // new connections work
}

func TestRelayPartition(t *testing.T) {
	var got atomic.Int64
	up := newServer(t, func(c net.Conn) {
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			got.Add(int64(n))
			if err != nil {
				return
			}
			_, _ = c.Write(buf[:n])
		}
	})
	r := newRelay(t, up.addr())
	old := dial(t, r.Addr())
	roundTrip(t, old, "x")
	if n := r.Partition(); n != 1 {
		t.Fatalf("Partition: %d held, want 1", n)
	}
	if _, err := old.Write([]byte("lost")); err != nil {
		t.Fatal(err)
	}
	fresh := dial(t, r.Addr())
	if _, err := fresh.Write([]byte("never")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "both writes blackholed", func() bool { return r.Stats().Blackholed >= 2 })
	silent(t, old)
	if up.accepted.Load() != 1 || got.Load() != 1 {
		t.Fatalf("upstream saw %d connections and %d bytes during the partition, want 1 and 1", up.accepted.Load(), got.Load())
	}
	held, refused := r.Unpartition()
	if held != 1 || refused != 1 {
		t.Fatalf("Unpartition: held %d refused %d, want 1 1", held, refused)
	}
	for _, c := range []net.Conn{old, fresh} {
		if err := readErr(t, c); !isReset(err) {
			t.Fatalf("after the partition's heal: %v, want a reset", err)
		}
	}
	roundTrip(t, dial(t, r.Addr()), "after")
}

// fakePG is a minimal Postgres: trust login, every Query or Sync-ended
// pipeline answered with one row ("t", "1") — or an error for SQL
// containing "fail". It counts the requests it answered.
type fakePG struct {
	answered atomic.Int64
	sslSeen  atomic.Int64
}

func (f *fakePG) serve(c net.Conn) {
	be := pgproto3.NewBackend(c, c)
	for {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		if _, ok := msg.(*pgproto3.SSLRequest); ok {
			f.sslSeen.Add(1)
			if _, err := c.Write([]byte("N")); err != nil {
				return
			}
			continue
		}
		if _, ok := msg.(*pgproto3.StartupMessage); ok {
			break
		}
		return
	}
	be.Send(&pgproto3.AuthenticationOk{})
	be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if be.Flush() != nil {
		return
	}
	rows := func(sql string) {
		if bytes.Contains([]byte(sql), []byte("fail")) {
			be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "22000", Message: "failed"})
			return
		}
		be.Send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("committed"), DataTypeOID: 16}, {Name: []byte("found_version"), DataTypeOID: 23}}})
		be.Send(&pgproto3.DataRow{Values: [][]byte{[]byte("t"), []byte("1")}})
		be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
	}
	var pending string
	for {
		msg, err := be.Receive()
		if err != nil {
			return
		}
		switch m := msg.(type) {
		case *pgproto3.Query:
			rows(m.String)
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			f.answered.Add(1)
		case *pgproto3.Parse:
			pending = m.Query
			be.Send(&pgproto3.ParseComplete{})
		case *pgproto3.Bind:
			be.Send(&pgproto3.BindComplete{})
		case *pgproto3.Describe:
			if m.ObjectType == 'S' {
				be.Send(&pgproto3.ParameterDescription{})
			}
			be.Send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("committed"), DataTypeOID: 16}, {Name: []byte("found_version"), DataTypeOID: 23}}})
		case *pgproto3.Execute:
			if bytes.Contains([]byte(pending), []byte("fail")) {
				be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "22000", Message: "failed"})
			} else {
				be.Send(&pgproto3.DataRow{Values: [][]byte{[]byte("t"), []byte("1")}})
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
			}
		case *pgproto3.Sync:
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			f.answered.Add(1)
		case *pgproto3.Terminate:
			return
		}
		if be.Flush() != nil {
			return
		}
	}
}

const commitSQL = `SELECT committed, found_version FROM pgshard_commit_cas($1::text, $2::text, $3::text, $4::int, $5::text)`

func pgConnect(t *testing.T, addr string) *pgconn.PgConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, "postgres://u@"+addr+"/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func execParams(c *pgconn.PgConn, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.ExecParams(ctx, sql, [][]byte{[]byte("a"), []byte("b"), []byte("{}"), []byte("0"), []byte("")}, nil, nil, nil).Read().Err
}

// TestRelayLostAckFakePostgres: an armed relay lets ordinary statements
// pass, forwards the commit, lets the server answer all of it, drops the
// answer and resets the client; one arm per connection.
func TestRelayLostAckFakePostgres(t *testing.T) {
	pg := &fakePG{}
	up := newServer(t, pg.serve)
	r := newRelay(t, up.addr())
	c1, c2, c3 := pgConnect(t, r.Addr()), pgConnect(t, r.Addr()), pgConnect(t, r.Addr())
	r.DropCommitReplies(2)
	if err := execParams(c1, "SELECT $1, $2, $3, $4, $5"); err != nil {
		t.Fatalf("an ordinary statement through the armed relay: %v", err)
	}
	before := pg.answered.Load()
	t0 := time.Now()
	err := execParams(c1, commitSQL)
	t1 := time.Now()
	if err == nil {
		t.Fatal("the commit's reply reached the client")
	}
	if !pgconn.SafeToRetry(err) && !isReset(errors.Unwrap(err)) {
		t.Logf("client error: %v", err) // any connection error will do; logged for the record
	}
	if pg.answered.Load() != before+1 {
		t.Fatalf("the server answered %d requests, want 1: the commit must reach it", pg.answered.Load()-before)
	}
	// A simple-protocol commit that fails on the server: its reply is not
	// a committed commit's, so it is passed on and the arm kept.
	mrr := c2.Exec(context.Background(), "SELECT * FROM pgshard_commit('fail')")
	_, err = mrr.ReadAll()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22000" {
		t.Fatalf("the failed commit's error did not reach the client: %v", err)
	}
	if st := r.Stats(); st.PassedReplies != 1 || st.DroppedReplies != 1 {
		t.Fatalf("after a failed commit: %+v, want 1 passed, 1 dropped", st)
	}
	// The kept arm takes the next committed commit's reply.
	if err := execParams(c3, commitSQL); err == nil {
		t.Fatal("the third commit's reply reached the client")
	}
	eventually(t, "two dropped replies", func() bool { return r.Stats().DroppedReplies == 2 })
	drops := r.DroppedReplies()
	if len(drops) != 2 || drops[0].Conn == drops[1].Conn {
		t.Fatalf("drops %+v", drops)
	}
	for _, d := range drops {
		if d.Committed == nil || !*d.Committed || d.Error || d.Status != "I" || d.Sent.IsZero() || d.At.Before(d.Sent) {
			t.Errorf("drop %+v: want committed, no error, idle, sent before at", d)
		}
		// Read on the monotonic clock (a stepped wall clock would move
		// them against the ops' times): Round(0) strips that reading.
		if d.Sent == d.Sent.Round(0) || d.At == d.At.Round(0) {
			t.Errorf("drop %+v: sent and at carry no monotonic reading", d)
		}
	}
	// The first commit's drop lies within the client's call.
	if d := drops[0]; d.Sent.Before(t0) || d.At.After(t1) {
		t.Errorf("drop [%v, %v] outside the client's commit [%v, %v]", d.Sent, d.At, t0, t1)
	}
	// No arms left: the second connection (still open) commits normally.
	if err := execParams(c2, commitSQL); err != nil {
		t.Fatalf("commit after the arms were used: %v", err)
	}
	if st := r.Stats(); st.Unframed != 0 {
		t.Errorf("unframed connections: %+v", st)
	}
}

// TestRelayLostAckAfterSSLRefused: the framer follows an SSLRequest that
// the server refuses, then the startup, then drops a simple-protocol
// commit's reply.
func TestRelayLostAckAfterSSLRefused(t *testing.T) {
	pg := &fakePG{}
	up := newServer(t, pg.serve)
	r := newRelay(t, up.addr())
	c := dial(t, r.Addr())
	fe := pgproto3.NewFrontend(c, c)
	fe.Send(&pgproto3.SSLRequest{})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'N' {
		t.Fatalf("SSL answer %q %v", b[0], err)
	}
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "u"}})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	untilReady := func() error {
		for {
			m, err := fe.Receive()
			if err != nil {
				return err
			}
			if _, ok := m.(*pgproto3.ReadyForQuery); ok {
				return nil
			}
		}
	}
	if err := untilReady(); err != nil {
		t.Fatal(err)
	}
	r.DropCommitReplies(1)
	fe.Send(&pgproto3.Query{String: "select harel_commit_cas('a','b','c',0,'')"})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := untilReady(); err == nil {
		t.Fatal("the commit's reply reached the client")
	}
	if pg.sslSeen.Load() != 1 || r.Stats().DroppedReplies != 1 {
		t.Fatalf("ssl %d, stats %+v", pg.sslSeen.Load(), r.Stats())
	}
}

// TestRelayLostAckArmReturns: an arm taken by a connection that dies
// before the reply comes is given back, and Disarm cancels what is left.
func TestRelayLostAckArmReturns(t *testing.T) {
	pg := &fakePG{}
	var first atomic.Bool
	gotCommit := make(chan struct{})
	up := newServer(t, func(c net.Conn) {
		if first.CompareAndSwap(false, true) { // the first connection never answers its commit
			be := pgproto3.NewBackend(c, c)
			if _, err := be.ReceiveStartupMessage(); err != nil {
				return
			}
			be.Send(&pgproto3.AuthenticationOk{})
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
			_ = be.Flush()
			for {
				m, err := be.Receive()
				if err != nil {
					return
				}
				if _, ok := m.(*pgproto3.Query); ok {
					close(gotCommit)
				}
			}
		}
		pg.serve(c)
	})
	r := newRelay(t, up.addr())
	c := dial(t, r.Addr())
	fe := pgproto3.NewFrontend(c, c)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "u"}})
	_ = fe.Flush()
	for {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			break
		}
	}
	r.DropCommitReplies(1)
	fe.Send(&pgproto3.Query{String: "SELECT * FROM pgshard_commit('x')"})
	_ = fe.Flush()
	select {
	case <-gotCommit:
	case <-time.After(10 * time.Second):
		t.Fatal("the commit did not reach the server")
	}
	_ = c.Close()
	eventually(t, "the first connection to end", func() bool { return r.Stats().Active == 0 })
	c2 := pgConnect(t, r.Addr())
	if err := execParams(c2, commitSQL); err == nil {
		t.Fatal("the returned arm was not used on the next connection")
	}
	eventually(t, "one dropped reply", func() bool { return r.Stats().DroppedReplies == 1 })
	r.DropCommitReplies(3)
	if n := r.Disarm(); n != 3 {
		t.Fatalf("Disarm cancelled %d, want 3", n)
	}
	if err := execParams(pgConnect(t, r.Addr()), commitSQL); err != nil {
		t.Fatalf("commit after Disarm: %v", err)
	}
}

func TestRelayCloseWaits(t *testing.T) {
	up := newServer(t, echo)
	r, err := chaos.NewRelay(up.addr(), chaos.RelayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, r.Addr())
	roundTrip(t, c, "x")
	r.Stall()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "data held", func() bool { return r.Stats().Held == 1 })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := readErr(t, c); !isReset(err) {
		t.Fatalf("client after Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", r.Addr(), time.Second); err == nil {
		t.Fatal("a closed relay still accepts")
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed)) }

// TestRelayLostAckPreparedCommit: a client that prepares the commit once
// and then only binds it (pgx's statement cache) still has its committed
// commit's reply dropped — armed on the Bind — while the prepare's own
// reply (no result row) is never taken for a commit's.
func TestRelayLostAckPreparedCommit(t *testing.T) {
	pg := &fakePG{}
	up := newServer(t, pg.serve)
	r := newRelay(t, up.addr())
	c := pgConnect(t, r.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.DropCommitReplies(1)
	if _, err := c.Prepare(ctx, "commit1", commitSQL, nil); err != nil {
		t.Fatalf("prepare through the armed relay: %v", err)
	}
	if st := r.Stats(); st.DroppedReplies != 0 {
		t.Fatalf("the prepare's reply was dropped: %+v", st)
	}
	params := [][]byte{[]byte("a"), []byte("b"), []byte("{}"), []byte("0"), []byte("")}
	if err := c.ExecPrepared(ctx, "commit1", params, nil, nil).Read().Err; err == nil {
		t.Fatal("the prepared commit's reply reached the client")
	}
	eventually(t, "a dropped reply", func() bool { return r.Stats().DroppedReplies == 1 })
	if d := r.DroppedReplies(); len(d) != 1 || d[0].Committed == nil || !*d[0].Committed || d[0].Status != "I" {
		t.Errorf("drops %+v", d)
	}
}
