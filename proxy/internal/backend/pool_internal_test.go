package backend

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/shardmap"
)

// quietPool is a pool of m's first shard (direct, not monitored) whose
// environment logs nowhere; errs counts its backend errors.
func quietPool(t *testing.T, m *shardmap.Map) (p *Pool, errs *prometheus.CounterVec) {
	t.Helper()
	errs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "backend_errors_total", Help: "test"}, []string{"shard", "kind"})
	env := &Env{
		PoolSize: 4, PoolTimeout: 10 * time.Second, ConnectTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		VerifyIdentity: true, Map: m, BackendErrors: errs, StmtEpoch: new(atomic.Uint64),
		Log:                slog.New(slog.NewTextHandler(io.Discard, nil)),
		RegisterDatabaseID: func(string, string) error { return nil },
	}
	p, err := NewPool(env, m.Shards[0], false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Shutdown)
	return p, errs
}

// The pool's safety net: a connection handed back while its last
// ReadyForQuery said "in a transaction" (or after a write whose replies
// were not read) is closed, counted and logged, never pooled; an idle one
// is pooled.
func TestReleaseClosesConnectionsNotIdle(t *testing.T) {
	m, err := shardmap.Even(64, []shardmap.Shard{{Name: "a", Ordinal: 0, DSN: "postgres://x@127.0.0.1:1/d"}})
	if err != nil {
		t.Fatal(err)
	}
	p, errs := quietPool(t, m)
	conn := func(ready byte) (*Conn, net.Conn) {
		a, b := net.Pipe()
		go func() { _, _ = io.Copy(io.Discard, b) }() // the "server": reads the Terminate
		c := &Conn{Pool: p, NetConn: a, IO: a, Reader: pgwire.NewMsgReader(a, nil), key: &Settings{}}
		c.Reader.Ready = ready
		p.mu.Lock()
		p.open++
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		t.Cleanup(func() { a.Close(); b.Close() })
		return c, b
	}
	unclean := func() float64 {
		var m dto.Metric
		if err := errs.WithLabelValues("a", "unclean").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	for _, ready := range []byte{'T', 'E', 0} {
		c, _ := conn(ready)
		p.Release(c)
		p.mu.Lock()
		_, kept := p.conns[c]
		nidle := p.nidle
		p.mu.Unlock()
		if kept || nidle != 0 {
			t.Fatalf("status %q: connection kept (idle %d)", ready, nidle)
		}
	}
	if got := unclean(); got != 3 {
		t.Fatalf("unclean releases counted %v, want 3", got)
	}
	c, _ := conn('I')
	p.Release(c)
	p.mu.Lock()
	nidle := p.nidle
	p.mu.Unlock()
	if nidle != 1 || unclean() != 3 {
		t.Fatalf("an idle connection: %d idle, %v unclean; want 1 and 3", nidle, unclean())
	}
}

// stallConn is a connection whose first writes return only after a pause,
// their bytes already sent: a writer descheduled on a loaded machine.
type stallConn struct {
	net.Conn
	stalls *atomic.Int32
}

func (c *stallConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if c.stalls.Add(-1) >= 0 {
		time.Sleep(60 * time.Millisecond)
	}
	return n, err
}

// A write that stalls for more than 15ms while connecting starts pgconn's
// background reader, which keeps reading after the connection is set up;
// taken over as it was, that reader stole the backend's next reply and the
// proxy waited for it forever (a session, or a fan-out, stuck on an idle
// backend, seen under full-CI load). The pool syncs the connection before
// taking it over: the first query's reply reaches the proxy.
func TestConnectionTakenOverWithPgconnsBackgroundReaderStopped(t *testing.T) {
	m := clustertest.MigratedOneShard(t, clustertest.Get(t))
	p, _ := quietPool(t, m)
	var stalls atomic.Int32
	var d net.Dialer
	p.dial.base.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &stallConn{Conn: c, stalls: &stalls}, nil
	}
	for i := range 3 {
		stalls.Store(1) // the startup message
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p.mu.Lock()
		p.open++
		p.mu.Unlock()
		c, err := p.connect(ctx, &Settings{}, "")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Write(pgwire.AppendQuery(nil, "SELECT 1")); err != nil {
			t.Fatal(err)
		}
		_ = c.NetConn.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			typ, _, err := c.Reader.Next()
			if err != nil {
				t.Fatalf("connection %d: the reply to the first query never came: %v", i, err)
			}
			if typ == 'Z' {
				break
			}
		}
		_ = c.NetConn.SetReadDeadline(time.Time{})
		p.Discard(c)
	}
}
