package mutant_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/chaos/mutant"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// fenceAdmits reports whether shard i of m admits key to a read
// (pgshard_fence_check) and to a write (pgshard_fence_assert), each in a
// new session: nil, or the refusal.
func fenceAdmits(t *testing.T, m *shardmap.Map, i int, key string) (read, write error) {
	t.Helper()
	c := shardConn(t, m, i)
	var ok bool
	read = c.QueryRow(ctxT(t), `SELECT pgshard_fence_check($1)`, key).Scan(&ok)
	write = pgx.BeginFunc(ctxT(t), c, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctxT(t), `SELECT pgshard_fence_assert($1)`, key)
		return err
	})
	for _, err := range []error{read, write} {
		var pe *pgconn.PgError
		if err != nil && (!errors.As(err, &pe) || pe.Code != store.FenceSQLState) {
			t.Fatalf("shard %d, key %s: %v (want nil or a fence refusal)", i, key, err)
		}
	}
	return read, write
}

// TestShardNotFencing, on a fresh database of the shared cluster (the
// functions it replaces are the database's): Configure makes every shard
// admit a key it does not own, restore makes it refuse the key again, and
// a Configure over a shard a dead run left unfenced is refused.
func TestShardNotFencing(t *testing.T) {
	m := clustertest.MigratedMap(t, clustertest.Get(t))
	key := ids(20, 1)[0]
	owner := m.ShardIndexForBucket(m.Bucket(key))
	other := (owner + 1) % len(m.Shards)
	if r, w := fenceAdmits(t, m, other, key); r == nil || w == nil {
		t.Fatalf("before: shard %d admits key %s it does not own (read %v, write %v): is the fence on?", other, key, r, w)
	}
	restore, err := mutant.Configure(ctxT(t), m, mutant.ShardNotFencing)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Shards {
		if r, w := fenceAdmits(t, m, i, key); r != nil || w != nil {
			t.Errorf("configured: shard %d refuses key %s (read %v, write %v)", i, key, r, w)
		}
	}
	// A second Configure finds the mutant's functions: refused, and the
	// shards are left as they were (unfenced, restore still undoes it).
	if again, err := mutant.Configure(ctxT(t), m, mutant.ShardNotFencing); err == nil {
		_ = again(ctxT(t))
		t.Error("Configure over unfenced shards succeeded")
	} else if !strings.Contains(err.Error(), "already the mutant's") {
		t.Errorf("Configure over unfenced shards: %v, want it to say the functions are already the mutant's", err)
	}
	if err := restore(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if r, w := fenceAdmits(t, m, other, key); r == nil || w == nil {
		t.Errorf("restored: shard %d admits key %s it does not own (read %v, write %v)", other, key, r, w)
	}
	if r, w := fenceAdmits(t, m, owner, key); r != nil || w != nil {
		t.Errorf("restored: the owner, shard %d, refuses key %s (read %v, write %v)", owner, key, r, w)
	}
}
