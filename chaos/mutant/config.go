package mutant

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// settleTimeout bounds the wait for a reloaded setting to show.
const settleTimeout = 10 * time.Second

// Configure applies a LevelConfig mutant to every shard of m over their
// direct DSNs (superuser), waits until a new session of every shard shows
// it, and returns restore, which undoes it on every shard the same way.
// Kind "" changes nothing (restore is a no-op); any other level's kind is
// an error. If a shard fails, the shards already changed are restored
// before the error is returned.
//
// SynchronousCommitOff: ALTER SYSTEM SET synchronous_commit = off and
// pg_reload_conf(); restore: ALTER SYSTEM RESET synchronous_commit and
// pg_reload_conf(). ALTER SYSTEM persists in postgresql.auto.conf across
// restarts (so shard crashes keep it), and so outlives a run that dies
// before calling restore: run restore (or Configure's undo by hand) on a
// cluster that must keep its acknowledged commits.
//
// ShardNotFencing: CREATE OR REPLACE of pgshard_fence_assert, pgshard_fence_enter and
// pgshard_fence_check (migration 0008) with functions that admit every
// key (writers still take the range's lock: only the refusal is gone);
// restore: the definitions read
// (pg_get_functiondef) before replacing them. A run that dies before
// restore leaves the shards unfenced, and the next Configure refuses to
// start until the definitions are restored (see unfence).
func Configure(ctx context.Context, m *shardmap.Map, k Kind) (restore func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	if k == "" {
		return noop, nil
	}
	if _, err := lookupLevel(k, LevelConfig, "Configure"); err != nil {
		return nil, err
	}
	if k == ShardNotFencing {
		return unfence(ctx, m)
	}
	undoAll := func(ctx context.Context, shards []shardmap.Shard) error {
		var errs []error
		for _, sh := range shards {
			if err := setSyncCommit(ctx, sh, `ALTER SYSTEM RESET synchronous_commit`, false); err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("mutant %s: restore: %w", k, err)
		}
		return nil
	}
	for i, sh := range m.Shards {
		if err := setSyncCommit(ctx, sh, `ALTER SYSTEM SET synchronous_commit = off`, true); err != nil {
			rerr := undoAll(context.WithoutCancel(ctx), m.Shards[:i+1])
			return nil, errors.Join(fmt.Errorf("mutant %s: %w", k, err), rerr)
		}
	}
	shards := append([]shardmap.Shard(nil), m.Shards...)
	return func(ctx context.Context) error { return undoAll(ctx, shards) }, nil
}

// setSyncCommit runs alter and pg_reload_conf() on sh, then polls SHOW
// synchronous_commit on a new session until it is off (wantOff) or
// anything else (!wantOff).
func setSyncCommit(ctx context.Context, sh shardmap.Shard, alter string, wantOff bool) error {
	fail := func(err error) error { return fmt.Errorf("shard %q (%s): %w", sh.Name, store.RedactDSN(sh.DSN), err) }
	conn, err := connect(ctx, sh.DSN)
	if err != nil {
		return fail(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, q := range []string{alter, `SELECT pg_reload_conf()`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fail(fmt.Errorf("%s: %w", q, err))
		}
	}
	// The postmaster signals the backends after it reloaded; a session
	// started after that sees the new value.
	deadline := time.Now().Add(settleTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		v, err := show(ctx, sh.DSN)
		if err != nil {
			return fail(err)
		}
		if (v == "off") == wantOff {
			return nil
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("synchronous_commit is still %q %v after the reload", v, settleTimeout))
		}
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-tick.C:
		}
	}
}

func connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnectTimeout = defaultConnectTimeout
	cfg.RuntimeParams["application_name"] = "pgshard mutant configure"
	return pgx.ConnectConfig(ctx, cfg)
}

// show returns synchronous_commit as a new session of dsn sees it.
func show(ctx context.Context, dsn string) (string, error) {
	conn, err := connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v string
	err = conn.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&v)
	return v, err
}
