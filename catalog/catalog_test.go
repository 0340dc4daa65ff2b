package catalog_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/shardmap"
)

// testMap builds a valid map of even ranges; shards are named s0, s1, ...
// with ordinals 0, 1, ... unless names are given.
func testMap(t testing.TB, epoch uint64, buckets int, names ...string) *shardmap.Map {
	t.Helper()
	if len(names) == 0 {
		names = []string{"s0", "s1"}
	}
	var shards []shardmap.Shard
	for i, n := range names {
		shards = append(shards, shardmap.Shard{Name: n, Ordinal: i, DSN: "postgres://db" + n + ":5432/x", PoolerDSN: "postgres://db" + n + ":6432/x"})
	}
	m, err := shardmap.Even(buckets, shards)
	if err != nil {
		t.Fatal(err)
	}
	m.Epoch = epoch
	return m
}

func TestCheckSuccessor(t *testing.T) {
	prev := testMap(t, 4, 64)
	if err := catalog.CheckSuccessor(prev, testMap(t, 5, 64, "s0", "s1", "s2")); err != nil {
		t.Errorf("adding a shard: %v", err)
	}
	var ee *catalog.EpochError
	if err := catalog.CheckSuccessor(prev, testMap(t, 4, 64)); !errors.As(err, &ee) || ee.Current != 4 || ee.Pushed != 4 {
		t.Errorf("same epoch: got %v", err)
	}
	var se *catalog.SuccessorError
	err := catalog.CheckSuccessor(prev, testMap(t, 5, 128))
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "buckets: 128, but the cluster has 64") {
		t.Errorf("bucket count changed: got %v", err)
	}
	swapped := testMap(t, 5, 64, "s1", "s0") // s1 gets ordinal 0
	err = catalog.CheckSuccessor(prev, swapped)
	if !errors.As(err, &se) || len(se.Problems) != 2 || !strings.Contains(err.Error(), `shard "s1": ordinal 0, but it has ordinal 1`) {
		t.Errorf("ordinals changed: got %v", err)
	}
}

func TestErrorsNameBothEpochs(t *testing.T) {
	err := error(&catalog.ConflictError{Expected: 4, Found: 6, Pushed: 5})
	if !errors.Is(err, catalog.ErrConflict) {
		t.Error("ConflictError is not ErrConflict")
	}
	for _, s := range []string{"epoch 6", "not 4", "epoch 5"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q lacks %q", err, s)
		}
	}
	err = &catalog.EpochError{Current: 9, Pushed: 3}
	if !errors.Is(err, catalog.ErrEpochNotGrowing) || !strings.Contains(err.Error(), "epoch 9") || !strings.Contains(err.Error(), "epoch 3") {
		t.Errorf("EpochError: %v", err)
	}
	err = &catalog.LeaseLostError{Owner: "p1", Token: 7, Reason: "it was released"}
	if !errors.Is(err, catalog.ErrLeaseLost) || errors.Is(err, catalog.ErrLeaseHeld) {
		t.Errorf("LeaseLostError: %v", err)
	}
	err = &catalog.LeaseHeldError{Owner: "p1", Token: 7, Epoch: 2, Remaining: 1500 * time.Millisecond}
	if !errors.Is(err, catalog.ErrLeaseHeld) || !strings.Contains(err.Error(), "1.5s") {
		t.Errorf("LeaseHeldError: %v", err)
	}
}

func TestLeaseValid(t *testing.T) {
	now := time.Now()
	l := catalog.Lease{ValidUntil: now.Add(time.Second)}
	if !l.Valid(now) || l.Valid(now.Add(time.Second)) || l.Valid(now.Add(2*time.Second)) {
		t.Error("Valid must hold strictly before ValidUntil only")
	}
	if (catalog.Lease{}).Valid(now) {
		t.Error("the zero lease is valid")
	}
}

func TestOpenErrorsHideThePassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Port 1 refuses at once; the password must not appear in the error.
	_, err := catalog.Open(ctx, "postgres://u:s3cret@127.0.0.1:1/cat?connect_timeout=5", catalog.Options{})
	if err == nil {
		t.Fatal("opened a catalog on port 1")
	}
	if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "127.0.0.1:1/cat") {
		t.Errorf("error must name host:port/database and hide the password: %v", err)
	}
	if _, err := catalog.Open(ctx, "postgres://u:s3cret@[bad", catalog.Options{}); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("unparseable DSN: %v", err)
	}
}
