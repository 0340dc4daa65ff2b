package proxy_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/pgshard/pgshard/proxy"
)

// BenchmarkIdleClients measures what an idle client costs the proxy's Go
// heap and goroutine stacks: PGSHARD_IDLE_CLIENTS (default 2000) clients
// connect to a proxy over fake shards, complete startup and then send
// nothing; the heap in use and the stacks in use are read (after a GC)
// before and with them all connected, and reported per client. The client
// side is in the same process but costs little (a socket, no goroutine,
// a few hundred bytes of heap). PGSHARD_IDLE_HEAPPROFILE=FILE writes the
// heap profile taken with the clients connected (every allocation
// sampled) to see where the rest goes. PGSHARD_IDLE_QUERY=1 has each
// client run one query before it goes idle (what an application's pooled
// connection looks like; the session then has its exchange scratch). The
// memory a whole process holds (RSS, beside PgBouncer's):
// scripts/bench-idle.sh. Asserts nothing.
func BenchmarkIdleClients(b *testing.B) {
	n := 2000
	if v := os.Getenv("PGSHARD_IDLE_CLIENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("PGSHARD_IDLE_CLIENTS=%q: want a positive count", v)
		}
	}
	query := os.Getenv("PGSHARD_IDLE_QUERY") == "1"
	prof := os.Getenv("PGSHARD_IDLE_HEAPPROFILE")
	if prof != "" {
		old := runtime.MemProfileRate
		runtime.MemProfileRate = 1
		b.Cleanup(func() { runtime.MemProfileRate = old })
	}
	fe := startFake(b, false, func(c *proxy.Config) { c.MaxClients = n + 10 })
	// One client first: the proxy's per-process state (pools, caches) is
	// then in the baseline, not in the clients' share.
	warm := idleConnect(b, fe.addr, query)
	defer warm.Close()
	for range b.N {
		before := settledMem()
		conns := make([]net.Conn, 0, n)
		for range n {
			conns = append(conns, idleConnect(b, fe.addr, query))
		}
		after := settledMem()
		if prof != "" {
			f, err := os.Create(prof)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
				b.Fatal(err)
			}
			_ = f.Close()
		}
		heap := float64(after.HeapInuse-before.HeapInuse) / float64(n)
		stack := float64(after.StackInuse-before.StackInuse) / float64(n)
		b.ReportMetric(heap, "heap-B/client")
		b.ReportMetric(stack, "stack-B/client")
		b.ReportMetric((heap+stack)/1024, "KiB/client")
		for _, c := range conns {
			_ = c.Close()
		}
	}
}

// settledMem returns the memory statistics after a GC.
func settledMem() runtime.MemStats {
	// The proxy's goroutines park after their last write: give them a
	// moment (bounded), then collect twice (finalizers, sweep).
	time.Sleep(200 * time.Millisecond)
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// idleConnect opens a connection, completes startup (trust), runs one
// simple query if query is set, and returns it idle: a minimal client
// that keeps no reader, buffer or goroutine.
func idleConnect(b *testing.B, addr string, query bool) net.Conn {
	b.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var pkt []byte
	pkt = binary.BigEndian.AppendUint32(pkt, 0)
	pkt = binary.BigEndian.AppendUint32(pkt, 196608)
	for _, kv := range []string{"user", "postgres", "database", "db"} {
		pkt = append(append(pkt, kv...), 0)
	}
	pkt = append(pkt, 0)
	binary.BigEndian.PutUint32(pkt, uint32(len(pkt)))
	if query {
		pkt = append(pkt, 'Q', 0, 0, 0, 0)
		pkt = append(pkt, "SELECT 1\x00"...)
		binary.BigEndian.PutUint32(pkt[len(pkt)-13:], 13)
	}
	if _, err := c.Write(pkt); err != nil {
		b.Fatal(err)
	}
	rfq := 1
	if query {
		rfq = 2
	}
	var hdr [5]byte
	var body [256]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			b.Fatal(err)
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if n < 0 || n > len(body) {
			b.Fatalf("startup: message %q of %d bytes", hdr[0], n)
		}
		if _, err := io.ReadFull(c, body[:n]); err != nil {
			b.Fatal(err)
		}
		switch hdr[0] {
		case 'E':
			b.Fatalf("startup: %s", fmt.Sprintf("%q", body[:n]))
		case 'Z':
			if rfq--; rfq == 0 {
				_ = c.SetDeadline(time.Time{})
				return c
			}
		}
	}
}
