package router_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/store"
)

// TestRouterWaitsForTheFlip: a move's flip reaches the catalog first and
// the destination's fence last, so a router holding the new map can meet
// the destination still "incoming" at the older epoch. That refusal
// means "not yet": the operation waits for the destination (bounded) and
// succeeds once it owns the range; a destination that never takes the
// flip still refuses, after the bound, with the fence's error.
func TestRouterWaitsForTheFlip(t *testing.T) {
	ctx := ctxT(t)
	old := clustertest.MigratedMap(t, clustertest.Get(t))
	base := openRouter(t, old, "direct", store.Options{})
	id := newID(t)
	from := old.Lookup(id).Name
	to := old.Shards[(old.ShardIndexForBucket(old.Bucket(id))+1)%len(old.Shards)].Name
	if err := base.Commit(ctx, &store.Execution{ID: id, DefinitionID: "flip", Status: "running"}, nil, "ev1", nil, nil, json.RawMessage(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	next := moveBucket(t, old, old.Bucket(id), to)
	src, dst := shardStore(t, base, from), shardStore(t, base, to)
	copyRows(ctx, t, src, dst, id, []copyQuery{
		{`SELECT id, definition_id, data, version FROM executions WHERE id = $1`, `INSERT INTO executions VALUES ($1, $2, $3, $4)`},
		{`SELECT execution_id, event_id FROM processed_events WHERE execution_id = $1`, `INSERT INTO processed_events VALUES ($1, $2)`},
	})
	for _, sh := range next.Shards {
		if _, err := migrations.SetFence(ctx, shardStore(t, base, sh.Name).Pool(), next); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, sh := range old.Shards { // the other tests' map
			_, _ = migrations.SetFence(ctx, shardStore(t, base, sh.Name).Pool(), old)
		}
	})
	b := old.Bucket(id)
	// The destination as it is between the catalog's flip and its own.
	setDst := func(state string, epoch uint64, owner string) error {
		_, err := dst.Pool().Exec(ctx, `UPDATE pgshard_fence SET state = $1, epoch = $2, owner = $3 WHERE lo <= $4 AND hi >= $4`,
			state, int64(epoch), owner, b)
		return err
	}
	if err := setDst("incoming", old.Epoch, from); err != nil {
		t.Fatal(err)
	}

	r := openRouter(t, next, "direct", store.Options{})
	flipped := make(chan error, 1)
	go func() {
		// The mover's last step, a moment after the router's first try.
		time.Sleep(300 * time.Millisecond)
		flipped <- setDst("owned", next.Epoch, to)
	}()
	got, err := r.Load(ctx, id)
	if ferr := <-flipped; ferr != nil {
		t.Fatal(ferr)
	}
	if err != nil || got.Version != 1 {
		t.Fatalf("load on the new map while the destination takes the flip: %+v, %v; want version 1", got, err)
	}

	// A destination that never takes it: the fence's refusal, after the wait.
	if err := setDst("incoming", old.Epoch, from); err != nil {
		t.Fatal(err)
	}
	_, err = r.Load(ctx, id)
	var fe *store.FenceError
	if !errors.As(err, &fe) || fe.State != "incoming" || fe.Owner != from {
		t.Fatalf("load while the destination stays incoming: %v (%+v), want its fence's refusal naming %s", err, fe, from)
	}
}
