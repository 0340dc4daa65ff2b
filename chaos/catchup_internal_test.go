package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/pgshard/pgshard/catalog"
)

// TestCatchUpBoard: a crash waiting for a catch-up of its shard is offered
// the first move of which the shard plays the role it waits for (any:
// either), and the mover waits at its catch-up until the crash is in; a
// move of other shards, or in the other role, passes at once; a wait
// that ends unoffered leaves nothing behind for the movers.
func TestCatchUpBoard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := &catchUpBoard{}
	other := catalog.MoveRecord{ID: 1, Lo: 0, Hi: 7, From: "shard0", To: "shard2"}
	asSource := catalog.MoveRecord{ID: 2, Lo: 8, Hi: 15, From: "shard1", To: "shard2"}
	asDest := catalog.MoveRecord{ID: 3, Lo: 16, Hi: 23, From: "shard0", To: "shard1"}

	// Nobody waits: the hook passes at once, at every step.
	for _, step := range []string{"copying", "copied", "caught-up"} {
		if err := b.hook(ctx, step, asSource); err != nil {
			t.Fatal(err)
		}
	}

	type got struct{ o *catchUpOffer }
	waitFor := func(shard, role string) <-chan got {
		ch := make(chan got, 1)
		go func() { ch <- got{b.wait(ctx, shard, role, time.Minute)} }()
		// Registered before the movers come (bounded: the test's ctx).
		for ctx.Err() == nil {
			b.mu.Lock()
			n := len(b.waiters)
			b.mu.Unlock()
			if n > 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		return ch
	}

	ch := waitFor("shard1", "destination")
	b.offer(ctx, other)    // not its shard: returns at once
	b.offer(ctx, asSource) // its shard, the other role: returns at once
	moverDone := make(chan struct{})
	go func() {
		defer close(moverDone)
		_ = b.hook(ctx, "copied", asDest)
	}()
	g := <-ch
	if g.o == nil || g.o.move.ID != 3 || g.o.role != "destination" {
		t.Fatalf("offer: %+v", g.o)
	}
	select {
	case <-moverDone:
		t.Fatal("the mover went on before the crash was in")
	case <-time.After(50 * time.Millisecond):
	}
	close(g.o.done)
	<-moverDone

	// Role any: the source of a move.
	ch = waitFor("shard1", "any")
	go func() { _ = b.hook(ctx, "copied", asSource) }()
	g = <-ch
	if g.o == nil || g.o.role != "source" {
		t.Fatalf("offer to any: %+v", g.o)
	}
	close(g.o.done)

	// Unoffered within the wait: nil, and the board is empty again.
	if o := b.wait(ctx, "shard1", "any", 10*time.Millisecond); o != nil {
		t.Fatalf("offer without a mover: %+v", o)
	}
	b.mu.Lock()
	n := len(b.waiters)
	b.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d waiters left after the wait ended", n)
	}
	b.offer(ctx, asSource) // returns at once

	// A nil board (no moves) offers nothing.
	var nb *catchUpBoard
	nb.offer(ctx, asSource)
}

// TestRoleOf: the role a shard plays in a move.
func TestRoleOf(t *testing.T) {
	m := catalog.MoveRecord{From: "a", To: "b"}
	if roleOf(m, "a") != "source" || roleOf(m, "b") != "destination" || roleOf(m, "c") != "" {
		t.Fatal(roleOf(m, "a"), roleOf(m, "b"), roleOf(m, "c"))
	}
}
