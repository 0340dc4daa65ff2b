package chaos

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgshard/pgshard/loadgen"
)

// echoUpstream is a TCP server that echoes what it reads, standing in
// for the catalog's server behind the catalog relay.
func echoUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// TestCatalogCut: the cut blackholes the follower's open connection and
// holds a new one unconnected; the evidence names the follower, its TTL
// and the cut's times on the history's clock; the heal resets what it
// held, and connections pass again. It lands only when the cut outlasted
// the TTL and the follower tried the catalog during it.
func TestCatalogCut(t *testing.T) {
	r, err := NewRelay(echoUpstream(t), RelayOptions{Name: "catalog"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ttl := 50 * time.Millisecond
	env := &Env{CatalogRelay: r, CatalogTTL: ttl, Clock: time.Now()}
	ctx := context.Background()

	dial := func() net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", r.Addr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	old := dial()
	buf := make([]byte, 4)
	if _, err := old.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(old, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("before the cut: %q, %v", buf, err)
	}

	f, err := NewFault(KindCatalogCut)
	if err != nil {
		t.Fatal(err)
	}
	before := env.since(time.Now())
	ev, err := f.Inject(ctx, env, -1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Fields["follower"] != "proxy" || ev.Fields["ttl_ms"] != int64(50) || ev.Fields["held"] != 1 || ev.Landed {
		t.Fatalf("inject: %v", ev.Fields)
	}
	cut := ev.Fields["cut_t"].(int64)
	if cut < int64(before) {
		t.Fatalf("cut_t %d before the inject began (%d)", cut, before)
	}
	// The follower tries: its open connection's request is swallowed, a
	// new connection is held unconnected.
	if _, err := old.Write([]byte("renew")); err != nil {
		t.Fatal(err)
	}
	fresh := dial()
	if _, err := fresh.Write([]byte("acquire")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the follower's requests swallowed", func() bool {
		_, reqs := r.PartitionLoad()
		r.mu.Lock()
		refused := r.partRefused
		r.mu.Unlock()
		return reqs >= 2 && refused >= 1
	})
	time.Sleep(2 * ttl) // the hold outlasts the TTL
	ev, err = f.Heal(ctx, env, -1)
	if err != nil {
		t.Fatal(err)
	}
	healT := ev.Fields["heal_t"].(int64)
	if !ev.Landed || healT-cut <= int64(ttl) || ev.Fields["refused"].(int) < 1 || ev.Fields["requests"].(int) < 2 {
		t.Fatalf("heal: %v (cut_t %d)", ev.Fields, cut)
	}
	// What the cut held was reset; a new connection passes again.
	_ = old.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := old.Read(buf); err == nil {
		t.Fatal("a connection the cut held was not reset")
	}
	c := dial()
	if _, err := c.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("after the heal: %q, %v", buf, err)
	}

	// A cut shorter than the TTL does not land.
	f, _ = NewFault(KindCatalogCut)
	env.CatalogTTL = time.Hour
	if _, err := f.Inject(ctx, env, -1, nil, nil); err != nil {
		t.Fatal(err)
	}
	if ev, _ := f.Heal(ctx, env, -1); ev.Landed {
		t.Fatalf("a cut shorter than the ttl landed: %v", ev.Fields)
	}
	// The evidence names every follower behind the relay, as the op
	// lines' via does.
	f, _ = NewFault(KindCatalogCut)
	env.CatalogFollowers = []string{"proxy", "router"}
	if ev, err := f.Inject(ctx, env, -1, nil, nil); err != nil || ev.Fields["follower"] != "proxy,router" {
		t.Fatalf("inject with the proxy and the router behind the relay: %v, %v", ev.Fields, err)
	}
	if _, err := f.Heal(ctx, env, -1); err != nil {
		t.Fatal(err)
	}
	// Without a catalog relay the inject fails, and the heal tolerates it.
	f, _ = NewFault(KindCatalogCut)
	if _, err := f.Inject(ctx, &Env{}, -1, nil, nil); err == nil || !strings.Contains(err.Error(), "no catalog relay") {
		t.Fatalf("inject without a relay: %v", err)
	}
	if _, err := f.Heal(ctx, &Env{}, -1); err != nil {
		t.Fatalf("heal after a failed inject: %v", err)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %s within 10s", what)
}

// TestViaOf: the op lines name the client each keyed op went through, by
// the split's rule for pgbouncer+proxy.
func TestViaOf(t *testing.T) {
	split := &splitTarget{}
	via := viaOf(TargetPgBouncerPlusPx, split)
	sides := map[string]bool{}
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		for _, k := range []loadgen.OpKind{loadgen.OpLoad, loadgen.OpCommit, loadgen.OpDeleteTimer} {
			got := via(&loadgen.Op{Kind: k, ExecutionID: id})
			want := [2]string{"router", "proxy"}[split.side(id)]
			if got != want {
				t.Fatalf("%s of %s: via %q, want %q", k, id, got, want)
			}
			sides[got] = true
		}
		if got := via(&loadgen.Op{Kind: loadgen.OpAckSpawn, ExecutionID: id}); got != "" {
			t.Fatalf("ack_spawn (alternated): via %q", got)
		}
	}
	if !sides["router"] || !sides["proxy"] {
		t.Fatalf("the split sent 8 executions one way: %v", sides)
	}
	if got := viaOf(TargetProxy, nil)(&loadgen.Op{Kind: loadgen.OpReadOutbox}); got != "proxy" {
		t.Fatalf("proxy target: %q", got)
	}
	if got := viaOf(TargetPgBouncer, nil)(&loadgen.Op{Kind: loadgen.OpLoad, ExecutionID: "a"}); got != "router" {
		t.Fatalf("pgbouncer target: %q", got)
	}
}
