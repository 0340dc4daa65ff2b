package chaos

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/pgshard/pgshard/catalog"
)

// Shard crashes aimed at a move's catch-up (shard-crash with param
// during=catch-up): the crash waits for a move of its shard to enter the
// catch-up, and the mover waits at that point until the crash is in.
//
//	shard-crash Inject ─▶ catchUps.wait(shard, role) ────────────────┐
//	move / mover-kill: reshard.Options.Hook (moveOptions)            │
//	  step "copied" (range copied, capture on, journaled catching_up)│
//	  ─▶ catchUps.offer(move): a waiter whose shard is the move's    │
//	     source or destination (its role) ─▶ the crash ◀────────────┘
//	     ─▶ the mover goes on once the shard is down: its catch-up
//	        fails, and the move faults' retrying resumes it from the
//	        journal (catching_up) once the heal restarted the shard.

// catchUpBoard matches shard crashes waiting for a catch-up with the
// moves that enter one. Safe for concurrent use.
type catchUpBoard struct {
	mu      sync.Mutex
	waiters []*catchUpWaiter
}

// catchUpWaiter is one crash waiting: for a move of which shard is the
// role ("source", "destination", "any").
type catchUpWaiter struct {
	shard, role string
	offers      chan *catchUpOffer // buffered 1: the one offer
}

// catchUpOffer is a move at the start of its catch-up, handed to a
// waiting crash: the mover waits until done is closed (the crash is in,
// or given up).
type catchUpOffer struct {
	move catalog.MoveRecord
	role string // the crashed shard's: "source" or "destination"
	done chan struct{}
}

// catchUpHold bounds how long a mover waits at its catch-up for the crash
// it was offered to (stopping a shard takes seconds at most).
const catchUpHold = time.Minute

// roleOf returns the role shard plays in m ("source", "destination"), ""
// for none.
func roleOf(m catalog.MoveRecord, shard string) string {
	switch shard {
	case m.From:
		return "source"
	case m.To:
		return "destination"
	}
	return ""
}

// wait registers a crash of shard (role "source", "destination" or
// "any") and waits, at most within or until ctx ends, for a move to offer
// it its catch-up; nil when none did (then no mover waits for it).
func (b *catchUpBoard) wait(ctx context.Context, shard, role string, within time.Duration) *catchUpOffer {
	w := &catchUpWaiter{shard: shard, role: role, offers: make(chan *catchUpOffer, 1)}
	b.mu.Lock()
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case o := <-w.offers:
		return o
	case <-t.C:
	case <-ctx.Done():
	}
	b.mu.Lock()
	i := slices.Index(b.waiters, w)
	if i >= 0 {
		b.waiters = slices.Delete(b.waiters, i, i+1)
	}
	b.mu.Unlock()
	if i < 0 { // offered meanwhile: the mover waits for it
		o := <-w.offers
		close(o.done)
	}
	return nil
}

// offer hands move m, at the start of its catch-up, to the first crash
// waiting for one of its shards, and waits (at most catchUpHold, or
// until ctx ends) until that crash is in. Without a waiter it returns at
// once.
func (b *catchUpBoard) offer(ctx context.Context, m catalog.MoveRecord) {
	if b == nil {
		return
	}
	b.mu.Lock()
	var o *catchUpOffer
	for i, w := range b.waiters {
		role := roleOf(m, w.shard)
		if role == "" || (w.role != "any" && w.role != role) {
			continue
		}
		b.waiters = slices.Delete(b.waiters, i, i+1)
		o = &catchUpOffer{move: m, role: role, done: make(chan struct{})}
		w.offers <- o
		break
	}
	b.mu.Unlock()
	if o == nil {
		return
	}
	t := time.NewTimer(catchUpHold)
	defer t.Stop()
	select {
	case <-o.done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// hook is the move faults' reshard.Options.Hook: at step "copied" it
// offers the move's catch-up to a waiting crash.
func (b *catchUpBoard) hook(ctx context.Context, step string, m catalog.MoveRecord) error {
	if step == "copied" {
		b.offer(ctx, m)
	}
	return nil
}
