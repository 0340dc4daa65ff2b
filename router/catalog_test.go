package router_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/catalog"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// waitFor calls cond until it returns nil, bounded by d; it fails the
// test with cond's last error.
func waitFor(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRouterFollowsCatalog: a router that takes its map from a catalog
// (catalog.Follower: Watch and a lease) on a real dev cluster.
//   - The map is pushed; the router serves once its lease is live.
//   - A bucket moves (rows copied, every shard's fence set at epoch+1):
//     before the catalog has the new map, the router gets the fence's
//     error (its reload finds nothing newer); once the map is pushed it
//     gets the right answer (reload on the refusal, or the watch), and
//     its lease records the new epoch.
//   - The catalog is cut off (its database refuses connections, its
//     sessions are terminated): once the lease's local bound passes, the
//     router refuses keyed operations (router.ErrNotServing,
//     catalog.ErrNoLease) instead of serving a map it cannot prove
//     current; with the catalog back, it re-acquires and serves again.
func TestRouterFollowsCatalog(t *testing.T) {
	ctx := ctxT(t)
	c := clustertest.Get(t)
	old := clustertest.MigratedMap(t, c)
	catDB := clustertest.FreshDatabase(t, c)
	cm, err := c.MapFor(catDB, shardmap.DefaultBuckets)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Open(ctx, cm.Shards[0].DSN, catalog.Options{ApplicationName: "router catalog test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	if _, err := cat.Install(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cat.Push(ctx, old, 0); err != nil {
		t.Fatal(err)
	}

	const ttl = 8 * time.Second // renewed every 2.7 s: generous under load
	var errMu sync.Mutex
	var lastErr error
	f, err := cat.NewFollower(catalog.FollowOptions{Owner: "router-test", Kind: "router", TTL: ttl, Interval: 100 * time.Millisecond,
		OnError: func(err error) { errMu.Lock(); lastErr = err; errMu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.Open(ctx, old, router.Options{Maps: cat, Lease: f, Store: store.Options{ConnectAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	id := newID(t)
	e := &store.Execution{ID: id, DefinitionID: "follow", Status: "running"}
	if err := r.Save(ctx, e); !errors.Is(err, router.ErrNotServing) || !errors.Is(err, catalog.ErrNoLease) {
		t.Fatalf("save before the lease: %v, want ErrNotServing and catalog.ErrNoLease", err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Run(runCtx, r.Epoch, r.SetMap) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("follower: %v", err)
		}
	})
	waitFor(t, time.Minute, "lease acquired", func() error { return f.Check(time.Now()) })
	if err := r.Save(ctx, e); err != nil {
		t.Fatal(err)
	}

	// The move: copy the execution's row, flip every shard's fence.
	from := old.Lookup(id).Name
	to := old.Shards[(old.ShardIndexForBucket(old.Bucket(id))+1)%len(old.Shards)].Name
	next := moveBucket(t, old, old.Bucket(id), to)
	src, dst := shardStore(t, r, from), shardStore(t, r, to)
	var def, data string
	var version int
	if err := src.Pool().QueryRow(ctx, `SELECT definition_id, data, version FROM executions WHERE id = $1`, id).Scan(&def, &data, &version); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Pool().Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1, $2, $3, $4)`, id, def, data, version); err != nil {
		t.Fatal(err)
	}
	for _, sh := range next.Shards {
		if _, err := migrations.SetFence(ctx, shardStore(t, r, sh.Name).Pool(), next); err != nil {
			t.Fatal(err)
		}
	}
	_, err = r.Load(ctx, id)
	var fe *store.FenceError
	if !errors.As(err, &fe) || fe.Owner != to || fe.Epoch != next.Epoch {
		t.Fatalf("load before the catalog has the new map: %v, want the fence's error naming %s at epoch %d", err, to, next.Epoch)
	}
	if got := r.Map().Epoch; got != old.Epoch {
		t.Fatalf("the router switched to epoch %d with the catalog at %d", got, old.Epoch)
	}
	if err := cat.Push(ctx, next, old.Epoch); err != nil {
		t.Fatal(err)
	}
	got, err := r.Load(ctx, id)
	if err != nil || got.Version != 1 {
		t.Fatalf("load after the push: %+v, %v", got, err)
	}
	if r.Map().Epoch != next.Epoch || r.ShardOf(id) != to {
		t.Fatalf("router at epoch %d routes %s to %s, want epoch %d and %s", r.Map().Epoch, id, r.ShardOf(id), next.Epoch, to)
	}
	got.Status = "done"
	if err := r.Save(ctx, got); err != nil {
		t.Fatal(err)
	}
	if n := count(t, dst, `SELECT version FROM executions WHERE id = $1`, id); n != 2 {
		t.Errorf("the new owner's row is at version %d, want 2", n)
	}
	waitFor(t, time.Minute, "lease renewed at the new epoch", func() error {
		leases, err := cat.Live(ctx)
		if err != nil {
			return err
		}
		for _, l := range leases {
			if l.Owner == "router-test" && l.Epoch == next.Epoch {
				return nil
			}
		}
		return errors.New("no live lease of router-test at the new epoch")
	})

	// The catalog cut off: its database refuses connections and its
	// sessions end.
	admin, err := pgx.Connect(ctx, old.Shards[0].DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	cutOff := func(off bool) {
		t.Helper()
		q := `ALTER DATABASE ` + pgx.Identifier{catDB}.Sanitize() + ` ALLOW_CONNECTIONS ` + map[bool]string{true: "false", false: "true"}[off]
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
		if off {
			if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, catDB); err != nil {
				t.Fatal(err)
			}
		}
	}
	cutOff(true)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `ALTER DATABASE `+pgx.Identifier{catDB}.Sanitize()+` ALLOW_CONNECTIONS true`)
	})
	waitFor(t, time.Minute, "refused once the lease lapsed", func() error {
		_, err := r.Load(ctx, id)
		if errors.Is(err, router.ErrNotServing) {
			if !errors.Is(err, catalog.ErrNoLease) {
				t.Fatalf("refusal %v does not match catalog.ErrNoLease", err)
			}
			return nil
		}
		if err != nil {
			t.Fatalf("load while the lease is live or lapsing: %v", err)
		}
		return errors.New("still served")
	})
	if err := r.Save(ctx, got); !errors.Is(err, router.ErrNotServing) {
		t.Errorf("save with a lapsed lease: %v, want ErrNotServing", err)
	}
	if n := count(t, dst, `SELECT version FROM executions WHERE id = $1`, id); n != 2 {
		t.Errorf("a refused save changed the row: version %d, want 2", n)
	}
	errMu.Lock()
	if lastErr == nil {
		t.Error("the follower reported no error while the catalog was cut off")
	}
	errMu.Unlock()

	cutOff(false)
	waitFor(t, time.Minute, "served again with the catalog back", func() error {
		_, err := r.Load(ctx, id)
		return err
	})
	if _, ok := f.Lease(); !ok {
		t.Error("serving without a held lease")
	}
}
