package proxy

import (
	"io"
	"log/slog"
	"net"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// The pool's safety net: a connection handed back while its last
// ReadyForQuery said "in a transaction" (or after a write whose replies
// were not read) is closed, counted and logged, never pooled; an idle one
// is pooled.
func TestReleaseClosesConnectionsNotIdle(t *testing.T) {
	m, err := shardmap.Even(64, []shardmap.Shard{{Name: "a", Ordinal: 0, DSN: "postgres://x@127.0.0.1:1/d"}})
	if err != nil {
		t.Fatal(err)
	}
	an, err := route.New(m, route.DefaultSchema(), route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Map: m, Analyzer: an, Users: []User{{Name: "u", Trust: true}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	p := srv.pools[0]
	conn := func(ready byte) (*bconn, net.Conn) {
		a, b := net.Pipe()
		go func() { _, _ = io.Copy(io.Discard, b) }() // the "server": reads the Terminate
		c := &bconn{pool: p, nc: a, io: a, rd: newMsgReader(a, nil), key: &settings{}}
		c.rd.ready = ready
		p.mu.Lock()
		p.open++
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		t.Cleanup(func() { a.Close(); b.Close() })
		return c, b
	}
	unclean := func() float64 {
		var m dto.Metric
		if err := srv.metrics.backendErrors.WithLabelValues("a", "unclean").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	for _, ready := range []byte{'T', 'E', 0} {
		c, _ := conn(ready)
		p.release(c)
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
	p.release(c)
	p.mu.Lock()
	nidle := p.nidle
	p.mu.Unlock()
	if nidle != 1 || unclean() != 3 {
		t.Fatalf("an idle connection: %d idle, %v unclean; want 1 and 3", nidle, unclean())
	}
}
