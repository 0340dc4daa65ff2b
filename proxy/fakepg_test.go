package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// fakePG is a tiny Postgres speaking the wire protocol well enough for the
// proxy's unit tests: trust auth, simple and extended queries answered
// with one text row, transaction status, an error for abortSQL-like
// syntax errors, and a log of every message it received.
type fakePG struct {
	t  testing.TB
	ln net.Listener
	wg sync.WaitGroup

	mu      sync.Mutex
	log     []string // "conn#: message" in arrival order
	conns   int
	pings   int      // syncPings answered and left out of log
	cancels []string // "pid/secret"
	closed  bool
	// fence: the shard has the fence (answers the proxy's question with
	// t; the question is left out of log, counted in detects); refuse:
	// every pgshard_fence_assert fails with PS001.
	fence   bool
	refuse  bool
	detects int
	open    map[net.Conn]bool
}

func newFakePG(t testing.TB) *fakePG {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakePG{t: t, ln: ln, open: map[net.Conn]bool{}}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *fakePG) addr() string { return f.ln.Addr().String() }

func (f *fakePG) close() {
	f.mu.Lock()
	f.closed = true
	for c := range f.open {
		c.Close()
	}
	f.mu.Unlock()
	f.ln.Close()
	f.wg.Wait()
	if f.pings > 0 {
		f.t.Logf("fake shard %s: %d sync pings answered, not logged", f.addr(), f.pings)
	}
}

func (f *fakePG) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			c.Close()
			return
		}
		f.open[c] = true
		f.mu.Unlock()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer func() {
				f.mu.Lock()
				delete(f.open, c)
				f.mu.Unlock()
				c.Close()
			}()
			f.serve(c)
		}()
	}
}

// messages returns the log, and clears it.
func (f *fakePG) messages() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.log
	f.log = nil
	return out
}

// syncPing is the query pgconn's Ping sends. The proxy's pool runs
// pgconn's SyncConn between connecting and taking a connection over
// (backend.Pool.dialAs); when a write stalled over 15 ms while connecting
// (a loaded machine), pgconn's background reader is running and SyncConn
// stops it with a Ping, so a new connection may start with this query
// before the proxy sends anything. The fake answers it as Postgres does
// and counts it instead of logging it, but only before a connection's
// first other message: a ping anywhere later is logged like any query.
const syncPing = "-- ping"

// fenceDetectSQL is the proxy's question whether a shard has the fence
// (proxy/internal/engine/fence.go).
const fenceDetectSQL = "SELECT to_regprocedure('pgshard_fence_assert(text)') IS NOT NULL, to_regprocedure('pgshard_fence_enter(text)') IS NOT NULL, to_regprocedure('pgshard_fence_served_by(bigint,int[],int[],text[])') IS NOT NULL"

// refused reports whether stmt is an assert the shard refuses.
func (f *fakePG) refused(stmt string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refuse && (strings.Contains(stmt, "pgshard_fence_assert(") || strings.Contains(stmt, "pgshard_fence_enter("))
}

// setFence says whether the shard has the fence and refuses every key.
func (f *fakePG) setFence(has, refuse bool) {
	f.mu.Lock()
	f.fence, f.refuse = has, refuse
	f.mu.Unlock()
}

func (f *fakePG) record(id int, s string) {
	f.mu.Lock()
	f.log = append(f.log, fmt.Sprintf("%d:%s", id, s))
	f.mu.Unlock()
}

func (f *fakePG) serve(c net.Conn) {
	be := pgproto3.NewBackend(c, c)
	msg, err := be.ReceiveStartupMessage()
	if err != nil {
		return // a health probe: connect and close
	}
	switch m := msg.(type) {
	case *pgproto3.CancelRequest:
		f.mu.Lock()
		f.cancels = append(f.cancels, fmt.Sprintf("%d/%x", m.ProcessID, m.SecretKey))
		f.mu.Unlock()
		return
	case *pgproto3.StartupMessage:
	default:
		return
	}
	f.mu.Lock()
	f.conns++
	id := f.conns
	f.mu.Unlock()
	be.Send(&pgproto3.AuthenticationOk{})
	for _, kv := range [][2]string{{"server_version", "15.0"}, {"server_encoding", "UTF8"}, {"client_encoding", "UTF8"},
		{"DateStyle", "ISO, MDY"}, {"TimeZone", "UTC"}, {"integer_datetimes", "on"}, {"standard_conforming_strings", "on"},
		{"IntervalStyle", "postgres"}, {"application_name", ""}, {"is_superuser", "on"}, {"session_authorization", "postgres"}} {
		be.Send(&pgproto3.ParameterStatus{Name: kv[0], Value: kv[1]})
	}
	be.Send(&pgproto3.BackendKeyData{ProcessID: uint32(1000 + id), SecretKey: []byte{0, 0, 0, byte(id)}})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if be.Flush() != nil {
		return
	}
	status := byte('I')
	skipping := false
	// The texts of the prepared statements and portals (extended
	// protocol), for the fence's refusal of an Execute.
	stmts, portals := map[string]string{}, map[string]string{}
	row := func() {
		be.Send(&pgproto3.DataRow{Values: [][]byte{[]byte(fmt.Sprintf("conn%d", id))}})
	}
	desc := &pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("v"), DataTypeOID: 25, DataTypeSize: -1, TypeModifier: -1}}}
	fail := func() {
		be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "42601", Message: "syntax error at end of input"})
		if status == 'T' {
			status = 'E'
		}
	}
	syncing := true // no message but syncPings yet
	for {
		msg, err := be.Receive()
		if err != nil {
			return
		}
		if q, ok := msg.(*pgproto3.Query); ok && syncing && q.String == syncPing {
			f.mu.Lock()
			f.pings++
			f.mu.Unlock()
			be.Send(&pgproto3.EmptyQueryResponse{})
			be.Send(&pgproto3.ReadyForQuery{TxStatus: status})
			if be.Flush() != nil {
				return
			}
			continue
		}
		syncing = false
		if q, ok := msg.(*pgproto3.Query); ok && q.String == fenceDetectSQL {
			f.mu.Lock()
			f.detects++
			v := []byte("f")
			if f.fence {
				v = []byte("t")
			}
			f.mu.Unlock()
			has := pgproto3.FieldDescription{Name: []byte("has"), DataTypeOID: 16, DataTypeSize: 1, TypeModifier: -1}
			be.Send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{has, has, has}})
			be.Send(&pgproto3.DataRow{Values: [][]byte{v, v, v}})
			be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
			be.Send(&pgproto3.ReadyForQuery{TxStatus: status})
			if be.Flush() != nil {
				return
			}
			continue
		}
		switch m := msg.(type) {
		case *pgproto3.Query:
			f.record(id, "Q:"+m.String)
			for _, stmt := range strings.Split(m.String, ";\n") {
				up := strings.ToUpper(strings.TrimSpace(stmt))
				erred := true // as Postgres, an error ends the query string
				switch {
				case strings.Contains(stmt, "hang forever"):
					f.mu.Lock()
					f.log = append(f.log, fmt.Sprintf("%d:hanging", id))
					f.mu.Unlock()
					var b [1]byte
					_, _ = c.Read(b[:]) // until the connection closes
					return
				case strings.Contains(stmt, "SELECT ("):
					fail()
				case status != 'E' && f.refused(stmt):
					be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "PS001", Message: "pgshard fence: this shard does not own the key's bucket",
						Hint: "The shard map changed: retry on the new owner."})
					if status == 'T' {
						status = 'E'
					}
				case status == 'E' && !strings.HasPrefix(up, "ROLLBACK") && !strings.HasPrefix(up, "COMMIT"):
					be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "25P02", Message: "current transaction is aborted"})
				case strings.HasPrefix(up, "BEGIN"):
					status, erred = 'T', false
					be.Send(&pgproto3.CommandComplete{CommandTag: []byte("BEGIN")})
				case strings.HasPrefix(up, "COMMIT"), strings.HasPrefix(up, "ROLLBACK"):
					tag := "COMMIT"
					if status == 'E' || strings.HasPrefix(up, "ROLLBACK") {
						tag = "ROLLBACK"
					}
					status, erred = 'I', false
					be.Send(&pgproto3.CommandComplete{CommandTag: []byte(tag)})
				case strings.HasPrefix(up, "SET"):
					be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SET")})
					erred = false
				case strings.HasPrefix(up, "CALL"):
					// as Postgres: a procedure without OUT arguments
					// answers no row description and no row
					be.Send(&pgproto3.CommandComplete{CommandTag: []byte("CALL")})
					erred = false
				default:
					be.Send(desc)
					row()
					be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
					erred = false
				}
				if erred {
					break
				}
			}
			be.Send(&pgproto3.ReadyForQuery{TxStatus: status})
		case *pgproto3.Parse:
			f.record(id, fmt.Sprintf("P:%s:%s", m.Name, m.Query))
			if skipping {
				continue
			}
			if status == 'E' {
				be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "25P02", Message: "current transaction is aborted"})
				skipping = true
				continue
			}
			if strings.Contains(m.Query, "SELECT (") {
				fail()
				skipping = true
				continue
			}
			stmts[m.Name] = m.Query
			be.Send(&pgproto3.ParseComplete{})
		case *pgproto3.Bind:
			f.record(id, fmt.Sprintf("B:%s:%s", m.DestinationPortal, m.PreparedStatement))
			if !skipping {
				portals[m.DestinationPortal] = stmts[m.PreparedStatement]
				be.Send(&pgproto3.BindComplete{})
			}
		case *pgproto3.Describe:
			f.record(id, fmt.Sprintf("D:%c:%s", m.ObjectType, m.Name))
			if skipping {
				continue
			}
			if m.ObjectType == 'S' {
				be.Send(&pgproto3.ParameterDescription{ParameterOIDs: []uint32{20}})
			}
			be.Send(desc)
		case *pgproto3.Execute:
			f.record(id, "E:"+m.Portal)
			if !skipping && f.refused(portals[m.Portal]) {
				be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "PS001", Message: "pgshard fence: this shard does not own the key's bucket",
					Hint: "The shard map changed: retry on the new owner."})
				if status == 'T' {
					status = 'E'
				}
				skipping = true
			} else if !skipping && strings.HasPrefix(portals[m.Portal], "CALL") {
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("CALL")})
			} else if !skipping {
				row()
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
			}
		case *pgproto3.Close:
			f.record(id, fmt.Sprintf("C:%c:%s", m.ObjectType, m.Name))
			if !skipping {
				be.Send(&pgproto3.CloseComplete{})
			}
		case *pgproto3.Sync:
			f.record(id, "S")
			skipping = false
			be.Send(&pgproto3.ReadyForQuery{TxStatus: status})
		case *pgproto3.Flush:
			f.record(id, "H")
		case *pgproto3.Terminate:
			return
		}
		if err := be.Flush(); err != nil {
			return
		}
	}
}

// fakeEnv is a proxy in front of two fake shards.
type fakeEnv struct {
	shards []*fakePG
	m      *shardmap.Map
	addr   string
}

// startFake runs a proxy over two fake shards; pooler makes the proxy
// treat them as PgBouncers (no server-side statement cache).
func startFake(t testing.TB, pooler bool, opts ...envOpt) *fakeEnv {
	t.Helper()
	fe := &fakeEnv{shards: []*fakePG{newFakePG(t), newFakePG(t)}}
	var shards []shardmap.Shard
	for i, f := range fe.shards {
		s := shardmap.Shard{Name: fmt.Sprintf("shard%d", i), Ordinal: i, DSN: "postgres://postgres@" + f.addr() + "/db?sslmode=disable"}
		if pooler {
			s.PoolerDSN = s.DSN
		}
		shards = append(shards, s)
	}
	m, err := shardmap.Even(64, shards)
	if err != nil {
		t.Fatal(err)
	}
	fe.m = m
	an, err := route.New(m, testSchema(), route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := proxy.Config{
		Map: m, Analyzer: an, UsePooler: pooler,
		Users:  []proxy.User{{Name: "postgres", Trust: true}},
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("proxy: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("the proxy did not stop within 15s of its context ending")
		}
	})
	fe.addr = ln.Addr().String()
	return fe
}

// keyOn returns an int8 key owned by shard i.
func (fe *fakeEnv) keyOn(i int) int64 {
	for k := int64(1); ; k++ {
		if fe.m.ShardIndexForBucket(fe.m.BucketInt8(k)) == i {
			return k
		}
	}
}

// client is a raw protocol client for unit tests.
type client struct {
	t  testing.TB
	fe *pgproto3.Frontend
	c  net.Conn
}

func (fe *fakeEnv) client(t testing.TB) *client {
	t.Helper()
	rc := dialRaw(t, fe.addr)
	rc.startup("db")
	return &client{t: t, fe: rc.fe, c: rc.conn}
}

func (c *client) send(msgs ...pgproto3.FrontendMessage) {
	c.t.Helper()
	for _, m := range msgs {
		c.fe.Send(m)
	}
	if err := c.fe.Flush(); err != nil {
		c.t.Fatal(err)
	}
}

// until reads messages up to ReadyForQuery and returns them in a compact
// form: "1 2 T D C Z:T", errors as "E:<code>".
func (c *client) until() string {
	c.t.Helper()
	var out []string
	for {
		m, err := c.fe.Receive()
		if err != nil {
			if errors.Is(err, io.EOF) {
				c.t.Fatalf("connection closed after %v", out)
			}
			c.t.Fatal(err)
		}
		switch m := m.(type) {
		case *pgproto3.ReadyForQuery:
			out = append(out, "Z:"+string(m.TxStatus))
			return strings.Join(out, " ")
		case *pgproto3.ErrorResponse:
			out = append(out, "E:"+m.Code)
		case *pgproto3.NoticeResponse:
			out = append(out, "N:"+m.Code)
		case *pgproto3.CommandComplete:
			out = append(out, "C:"+string(m.CommandTag))
		case *pgproto3.DataRow:
			out = append(out, "D:"+string(m.Values[0]))
		case *pgproto3.ParseComplete:
			out = append(out, "1")
		case *pgproto3.BindComplete:
			out = append(out, "2")
		case *pgproto3.CloseComplete:
			out = append(out, "3")
		case *pgproto3.NoData:
			out = append(out, "n")
		case *pgproto3.ParameterDescription:
			out = append(out, "t")
		case *pgproto3.RowDescription:
			out = append(out, "T")
		case *pgproto3.ParameterStatus:
			out = append(out, "S:"+m.Name)
		default:
			out = append(out, fmt.Sprintf("%T", m))
		}
	}
}

func expect(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s:\n got %s\nwant %s", what, got, want)
	}
}

// waitFor polls cond until it holds or 10 s passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFakeShardLeavesOutOnlySyncPings: the fake leaves out of its log
// exactly the pings a connection sends before anything else (pgconn's
// SyncConn before the pool takes it over); a ping after the first other
// message, and every other query, is logged.
func TestFakeShardLeavesOutOnlySyncPings(t *testing.T) {
	f := newFakePG(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pc, err := pgconn.Connect(ctx, "postgres://postgres@"+f.addr()+"/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(context.Background())
	for range 2 {
		if err := pc.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pc.Exec(ctx, "SELECT 1").ReadAll(); err != nil {
		t.Fatal(err)
	}
	if err := pc.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	pings := f.pings
	f.mu.Unlock()
	if pings != 2 {
		t.Fatalf("the fake counted %d sync pings, want 2", pings)
	}
	expect(t, "logged", filterLog(f.messages()), "1:Q:SELECT 1 | 1:Q:"+syncPing)
}
