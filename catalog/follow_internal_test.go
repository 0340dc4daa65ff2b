package catalog

import (
	"errors"
	"testing"
	"time"
)

// TestFollowerCheckFastPath: Check's lock-free answer follows the lease
// exactly: live before its local bound, refused at and after it, and
// refused once the lease is no longer held.
func TestFollowerCheckFastPath(t *testing.T) {
	f, err := (&Catalog{}).NewFollower(FollowOptions{Owner: "p", Kind: "proxy"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f.mu.Lock()
	f.lease, f.held = Lease{ValidUntil: now.Add(time.Second)}, true
	f.publish()
	f.mu.Unlock()
	if err := f.Check(now); err != nil {
		t.Errorf("before the bound: %v", err)
	}
	for _, at := range []time.Time{now.Add(time.Second), now.Add(2 * time.Second)} {
		if err := f.Check(at); !errors.Is(err, ErrNoLease) {
			t.Errorf("at %v past the bound: %v, want ErrNoLease", at.Sub(now), err)
		}
	}
	f.mu.Lock()
	f.held = false
	f.publish()
	f.mu.Unlock()
	if err := f.Check(now); !errors.Is(err, ErrNoLease) {
		t.Errorf("not held: %v, want ErrNoLease", err)
	}
}

// TestFollowerWaitLive: WaitLive returns once the lease is live, and a
// wait that never sees one ends at its bound with ErrNoLease.
func TestFollowerWaitLive(t *testing.T) {
	f, err := (&Catalog{}).NewFollower(FollowOptions{Owner: "p", Kind: "router"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WaitLive(t.Context(), 50*time.Millisecond); !errors.Is(err, ErrNoLease) {
		t.Fatalf("never acquired: %v, want ErrNoLease", err)
	}
	f.mu.Lock()
	f.lease, f.held = Lease{ValidUntil: time.Now().Add(time.Hour)}, true
	f.publish()
	f.mu.Unlock()
	if err := f.WaitLive(t.Context(), time.Minute); err != nil {
		t.Fatalf("live lease: %v", err)
	}
}
