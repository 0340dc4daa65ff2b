package proxy_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/proxy"
)

// rawClient is a hand-driven protocol client for malformed input.
type rawClient struct {
	t    testing.TB
	conn net.Conn
	fe   *pgproto3.Frontend
}

func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	return &rawClient{t: t, conn: conn, fe: pgproto3.NewFrontend(bufio.NewReader(conn), conn)}
}

// startup logs in as postgres (trust) and reads up to ReadyForQuery.
func (c *rawClient) startup(db string) {
	c.t.Helper()
	c.fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "postgres", "database": db}})
	if err := c.fe.Flush(); err != nil {
		c.t.Fatal(err)
	}
	for {
		m, err := c.fe.Receive()
		if err != nil {
			c.t.Fatal(err)
		}
		switch m := m.(type) {
		case *pgproto3.ReadyForQuery:
			return
		case *pgproto3.ErrorResponse:
			c.t.Fatalf("startup: %s", m.Message)
		}
	}
}

// expectFatal reads until an ErrorResponse with code and then EOF.
func (c *rawClient) expectError(code string, closed bool) *pgproto3.ErrorResponse {
	c.t.Helper()
	var er *pgproto3.ErrorResponse
	for er == nil {
		m, err := c.fe.Receive()
		if err != nil {
			c.t.Fatalf("waiting for error %s: %v", code, err)
		}
		if e, ok := m.(*pgproto3.ErrorResponse); ok {
			cp := *e
			er = &cp
		}
	}
	if er.Code != code {
		c.t.Fatalf("error %s %q, want %s", er.Code, er.Message, code)
	}
	if closed {
		var b [1]byte
		_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.conn.Read(b[:]); !errors.Is(err, io.EOF) {
			c.t.Fatalf("connection not closed after %s: %v", code, err)
		}
	}
	return er
}

// TestMalformedMessages: malformed or oversized client messages get
// 08P01 and a closed connection; the proxy keeps serving.
func TestMalformedMessages(t *testing.T) {
	e := startProxy(t, func(c *proxy.Config) { c.MaxMessageSize = 64 << 10 })
	cases := []struct {
		name string
		msg  []byte
	}{
		{"unknown type", []byte{'y', 0, 0, 0, 4}},
		{"negative length", []byte{'Q', 0xff, 0xff, 0xff, 0xf0}},
		{"length below 4", []byte{'Q', 0, 0, 0, 2}},
		{"oversized query", append([]byte{'Q'}, binary.BigEndian.AppendUint32(nil, 1<<20)...)},
		{"oversized sync", []byte{'S', 0, 0, 0x40, 0}},
		{"query without terminator", []byte{'Q', 0, 0, 0, 8, 'a', 'b', 'c', 'd'}},
		{"bind with bad counts", []byte{'B', 0, 0, 0, 12, 0, 0, 0, 5, 0, 0, 0, 0}},
		{"describe bad kind", []byte{'D', 0, 0, 0, 6, 'X', 0}},
		{"parse truncated", []byte{'P', 0, 0, 0, 7, 0, 'x', 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, e.addr)
			c.startup(e.db.name)
			if _, err := c.conn.Write(tc.msg); err != nil {
				t.Fatal(err)
			}
			if tc.msg[0] == 'B' || tc.msg[0] == 'D' || tc.msg[0] == 'P' {
				_, _ = c.conn.Write([]byte{'S', 0, 0, 0, 4})
			}
			er := c.expectError("08P01", true)
			if er.Severity != "FATAL" {
				t.Fatalf("severity %s", er.Severity)
			}
		})
	}
	// Startup: an oversized packet and a bad protocol version.
	for _, pkt := range [][]byte{
		binary.BigEndian.AppendUint32(nil, 20000),
		{0, 0, 0, 8, 0, 2, 0, 0},
	} {
		c := dialRaw(t, e.addr)
		_, _ = c.conn.Write(pkt)
		m, err := c.fe.Receive()
		if err != nil {
			t.Fatalf("bad startup packet: %v", err)
		}
		if er, ok := m.(*pgproto3.ErrorResponse); !ok || er.Severity != "FATAL" || (er.Code != "08P01" && er.Code != "0A000") {
			t.Fatalf("bad startup packet: %#v", m)
		}
	}
	// SSL and GSS encryption requests are declined ('N'), then plain works.
	c := dialRaw(t, e.addr)
	for _, code := range []uint32{80877103, 80877104} {
		req := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 8), code)
		if _, err := c.conn.Write(req); err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		if _, err := io.ReadFull(c.conn, b[:]); err != nil || b[0] != 'N' {
			t.Fatalf("encryption request %d: %q %v", code, b, err)
		}
	}
	c.startup(e.db.name)
	c.fe.Send(&pgproto3.Query{String: "SELECT 1"})
	_ = c.fe.Flush()
	for {
		m, err := c.fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			break
		}
	}
	// And the proxy still serves others.
	conn := e.connect(t)
	var one int
	if err := conn.QueryRow(ctxT(t, 10*time.Second), "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
}

// TestLimits: the client limit refuses with 53300; sslmode=require gets a
// clear refusal; a pipeline error skips to Sync.
func TestLimits(t *testing.T) {
	e := startProxy(t, func(c *proxy.Config) { c.MaxClients = 2 })
	ctx := ctxT(t, 30*time.Second)
	a := e.connect(t)
	b := e.connect(t)
	_, err := pgx.Connect(ctx, e.dsn)
	if pgCode(err) != "53300" {
		t.Fatalf("third client: %v, want 53300", err)
	}
	b.Close(ctx)
	// The slot is free again once the proxy noticed the close.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := pgx.Connect(ctx, e.dsn)
		if err == nil {
			c.Close(ctx)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot not freed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err = pgx.Connect(ctx, strings.Replace(e.dsn, "sslmode=disable", "sslmode=require", 1))
	if err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("sslmode=require: %v", err)
	}
	var one int
	if err := a.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
}

// TestSCRAM: users with a password log in with SCRAM-SHA-256 (plain or
// stored verifier); a wrong password or unknown user gets 28P01.
func TestSCRAM(t *testing.T) {
	ver, err := proxy.NewSCRAMVerifier("s3cret")
	if err != nil {
		t.Fatal(err)
	}
	e := startProxy(t, withUsers(proxy.User{Name: "app", Password: "pa$$word"}, proxy.User{Name: "stored", Password: ver}))
	ctx := ctxT(t, 30*time.Second)
	dsn := func(user, pw string) string {
		return "postgres://" + user + ":" + pw + "@" + e.addr + "/" + e.db.name + "?sslmode=disable"
	}
	for _, ok := range [][2]string{{"app", "pa$$word"}, {"stored", "s3cret"}} {
		conn, err := pgx.Connect(ctx, dsn(ok[0], ok[1]))
		if err != nil {
			t.Fatalf("%s: %v", ok[0], err)
		}
		var one int
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
	}
	for _, bad := range [][2]string{{"app", "wrong"}, {"stored", "pa$$word"}, {"nobody", "x"}} {
		_, err := pgx.Connect(ctx, dsn(bad[0], bad[1]))
		if pgCode(err) != "28P01" {
			t.Fatalf("%s/%s: %v, want 28P01", bad[0], bad[1], err)
		}
	}
}

// TestShardDown: with one shard stopped, its transactions fail fast with
// an error naming it; the other shards keep serving; when it is back,
// everything works again.
func TestShardDown(t *testing.T) {
	c := clustertest.Private(t, cluster.Spec{Shards: 2, PgBouncer: true})
	d, err := newTestDB(c, "downtest")
	if err != nil {
		t.Fatal(err)
	}
	for _, via := range []string{"pgbouncer", "direct"} {
		t.Run(via, func(t *testing.T) {
			opts := []envOpt{func(cfg *proxy.Config) { cfg.ConnectTimeout = 3 * time.Second }}
			if via == "direct" {
				opts = append(opts, direct())
			}
			e := startProxyFor(t, d, opts...)
			ctx := ctxT(t, 2*time.Minute)
			conn := e.connect(t)
			k0 := d.keysOn(0, 1, 1)[0]
			k1 := d.keysOn(1, 1, 1)[0]
			for _, k := range []int64{k0, k1} {
				if _, err := conn.Exec(ctx, "INSERT INTO accounts (aid) VALUES ($1) ON CONFLICT DO NOTHING", k); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.StopShard(ctx, 1, cluster.Fast); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var n int
			err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k1).Scan(&n)
			if err == nil || !strings.Contains(err.Error(), "shard1") {
				t.Fatalf("query on the stopped shard: %v (want an error naming shard1)", err)
			}
			if time.Since(start) > 15*time.Second {
				t.Fatalf("failing took %v", time.Since(start))
			}
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k0).Scan(&n); err != nil || n != 1 {
				t.Fatalf("query on the live shard: %d %v", n, err)
			}
			if err := c.StartShard(ctx, 1); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE aid = $1", k1).Scan(&n)
				if err == nil && n == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("shard1 not usable again: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

var (
	_ = context.Background
	_ = pgconn.PgError{}
)
