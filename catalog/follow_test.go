package catalog_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/catalog"
)

// TestFollowerRefusesUntilAcquired: a Follower's options are checked, and
// before its lease is acquired Check refuses with a *NoLeaseError saying
// so (no catalog needed: nothing is sent).
func TestFollowerRefusesUntilAcquired(t *testing.T) {
	c := &catalog.Catalog{}
	if _, err := c.NewFollower(catalog.FollowOptions{}); err == nil || !strings.Contains(err.Error(), "owner is empty") {
		t.Errorf("no owner: %v", err)
	}
	if _, err := c.NewFollower(catalog.FollowOptions{Owner: "r", TTL: 10 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "below 30ms") {
		t.Errorf("tiny ttl: %v", err)
	}
	f, err := c.NewFollower(catalog.FollowOptions{Owner: "r", Kind: "router"})
	if err != nil {
		t.Fatal(err)
	}
	err = f.Check(time.Now())
	var ne *catalog.NoLeaseError
	if !errors.As(err, &ne) || !errors.Is(err, catalog.ErrNoLease) || ne.Owner != "r" || !ne.Since.IsZero() ||
		!strings.Contains(err.Error(), "not acquired yet") || !strings.Contains(err.Error(), "refused") {
		t.Errorf("check before acquiring: %v", err)
	}
	if _, held := f.Lease(); held {
		t.Error("a lease held before Run")
	}
}
