package cluster_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgshard/pgshard/cluster"
)

// fakeServer answers the Postgres protocol on a port like any server that
// trusts every login: every query gets one row "foreign". It stands for
// another program's PostgreSQL or PgBouncer that took the port a cluster
// picked.
type fakeServer struct {
	l       net.Listener
	wg      sync.WaitGroup
	mu      sync.Mutex
	queries []string
}

func startFake(t *testing.T, port int) *fakeServer {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("fake server on port %d: %v", port, err)
	}
	f := &fakeServer{l: l}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() { defer f.wg.Done(); f.serve(c) }()
		}
	}()
	return f
}

func (f *fakeServer) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	be := pgproto3.NewBackend(c, c)
	for {
		m, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		if _, ok := m.(*pgproto3.SSLRequest); ok {
			if _, err := c.Write([]byte{'N'}); err != nil {
				return
			}
			continue
		}
		break
	}
	be.Send(&pgproto3.AuthenticationOk{})
	be.Send(&pgproto3.ParameterStatus{Name: "server_version", Value: "15.0"})
	be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 2}})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if be.Flush() != nil {
		return
	}
	for {
		m, err := be.Receive()
		if err != nil {
			return
		}
		switch q := m.(type) {
		case *pgproto3.Query:
			f.mu.Lock()
			f.queries = append(f.queries, q.String)
			f.mu.Unlock()
			be.Send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("x"), DataTypeOID: 25, DataTypeSize: -1, TypeModifier: -1}}})
			be.Send(&pgproto3.DataRow{Values: [][]byte{[]byte("foreign")}})
			be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		case *pgproto3.Terminate:
			return
		default:
			be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "0A000", Message: "the fake server only answers simple queries"})
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		}
		if be.Flush() != nil {
			return
		}
	}
}

func (f *fakeServer) close() {
	f.l.Close()
	f.wg.Wait()
}

// TestStartRefusesAnotherServerOnItsPort is the regression test of issue
// 11, defect 9 (a cluster start that failed now and then): when another
// server takes the port a cluster picked for one of its servers, between
// the pick and the start, the readiness check must not take that other
// server for the one it started (it answers the same logins). Up must
// notice, retry on another port and come up with its own servers.
func TestStartRefusesAnotherServerOnItsPort(t *testing.T) {
	for _, kind := range []string{"postgres", "pgbouncer"} {
		t.Run(kind, func(t *testing.T) {
			spec := cluster.Spec{Shards: 1, PgBouncer: true, Log: testLog{t}}
			requireLocal(t, spec)
			dir, err := os.MkdirTemp("", "pgshard-test-portrace-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := cluster.Down(ctx, dir, false); err != nil {
					t.Errorf("down: %v", err)
				}
				os.RemoveAll(dir)
			})
			var fake *fakeServer
			taken := 0
			restore := cluster.SetBeforeServerStart(func(k string, port int) {
				if k == kind && fake == nil {
					fake, taken = startFake(t, port), port
				}
			})
			defer restore()
			defer func() {
				if fake != nil {
					fake.close()
				}
			}()
			ctx := ctxFor(t, 2*time.Minute)
			c, err := cluster.Up(ctx, dir, spec)
			if err != nil {
				var hint string
				if fake != nil && errors.Is(ctx.Err(), nil) {
					hint = " (fake server saw: " + strings.Join(fake.queries, " | ") + ")"
				}
				t.Fatalf("up with port %d taken by another server: %v%s", taken, err, hint)
			}
			if fake == nil {
				t.Fatal("the hook never ran")
			}
			s := c.Shards[0]
			if got := map[string]int{"postgres": s.Port, "pgbouncer": s.PoolerPort}[kind]; got == taken {
				t.Fatalf("the cluster's %s is recorded on port %d, which the fake server holds", kind, got)
			}
			// The servers that answer are the cluster's own.
			if v := queryInt(ctx, t, s.DSN("postgres", "postgres"), `SELECT 1`); v != 1 {
				t.Fatal(v)
			}
			if v := queryInt(ctx, t, s.PoolerDSN("pgshard", "postgres"), `SELECT 1`); v != 1 {
				t.Fatal(v)
			}
		})
	}
}
