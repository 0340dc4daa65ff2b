package mutant

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// unfenceMark is in the body of every function ShardNotFencing installs:
// a definition that holds it is the mutant's, never one to restore.
const unfenceMark = "pgshard mutant shard-not-fencing"

// unfenced are the fence's checks (migrations 0008, 0013) and what
// ShardNotFencing replaces each with.
var unfenced = []struct{ sig, replace string }{
	{"pgshard_fence_assert(text)", `CREATE OR REPLACE FUNCTION pgshard_fence_assert(p_key TEXT) RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    b  INT := pgshard_fence_bucket(p_key, pgshard_fence_nb());
    lo INT;
BEGIN
    -- ` + unfenceMark + `: admits every key; the range's lock is
    -- still taken SHARED, so a mover's freeze still drains the writers.
    SELECT x.lo INTO lo FROM pgshard_fence x WHERE x.lo <= b ORDER BY x.lo DESC LIMIT 1;
    IF lo IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock_shared(pgshard_fence_lock_class(), lo);
    END IF;
END;
$$`},
	{"pgshard_fence_enter(text)", `CREATE OR REPLACE PROCEDURE pgshard_fence_enter(p_key TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    b  INT := pgshard_fence_bucket(p_key, pgshard_fence_nb());
    lo INT;
BEGIN
    -- ` + unfenceMark + `: the proxy's assert (migration 0013's
    -- procedure) admits every key, the range's lock still taken SHARED.
    SELECT x.lo INTO lo FROM pgshard_fence x WHERE x.lo <= b ORDER BY x.lo DESC LIMIT 1;
    IF lo IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock_shared(pgshard_fence_lock_class(), lo);
    END IF;
END;
$$`},
	{"pgshard_fence_check(text)", `CREATE OR REPLACE FUNCTION pgshard_fence_check(p_key TEXT) RETURNS BOOLEAN
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN true; -- ` + unfenceMark + `: admits every key
END;
$$`},
}

// unfence is Configure(ShardNotFencing): on every shard of m (direct DSN,
// superuser), in one transaction per shard, it reads the definitions of
// the fence's checks and replaces them; restore puts the definitions read
// back. A shard whose checks already are the mutant's (a former run died
// before its restore) is an error naming what to do.
func unfence(ctx context.Context, m *shardmap.Map) (func(context.Context) error, error) {
	type saved struct {
		sh   shardmap.Shard
		defs []string
	}
	var done []saved
	restoreAll := func(ctx context.Context) error {
		var errs []error
		for _, s := range done {
			if err := execAll(ctx, s.sh, s.defs); err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("mutant %s: restore: %w", ShardNotFencing, err)
		}
		return nil
	}
	for _, sh := range m.Shards {
		defs, err := fenceDefs(ctx, sh)
		if err == nil {
			var repl []string
			for _, u := range unfenced {
				repl = append(repl, u.replace)
			}
			err = execAll(ctx, sh, repl)
		}
		if err != nil {
			rerr := restoreAll(context.WithoutCancel(ctx))
			return nil, errors.Join(fmt.Errorf("mutant %s: %w", ShardNotFencing, err), rerr)
		}
		done = append(done, saved{sh, defs})
	}
	return restoreAll, nil
}

// fenceDefs reads the definitions of the fence's checks on sh.
func fenceDefs(ctx context.Context, sh shardmap.Shard) ([]string, error) {
	fail := func(err error) error { return fmt.Errorf("shard %q (%s): %w", sh.Name, store.RedactDSN(sh.DSN), err) }
	conn, err := connect(ctx, sh.DSN)
	if err != nil {
		return nil, fail(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var defs []string
	for _, u := range unfenced {
		var def string
		if err := conn.QueryRow(ctx, `SELECT pg_get_functiondef($1::text::regprocedure)`, u.sig).Scan(&def); err != nil {
			return nil, fail(fmt.Errorf("read %s (is the shard migrated to 0013?): %w", u.sig, err))
		}
		if strings.Contains(def, unfenceMark) {
			return nil, fail(fmt.Errorf("%s is already the mutant's (a former mutant run died before restoring it): restore it by hand from migrations/sql/0008_fence.sql, or recreate the cluster", u.sig))
		}
		defs = append(defs, def)
	}
	return defs, nil
}

// execAll runs stmts on sh in one transaction.
func execAll(ctx context.Context, sh shardmap.Shard, stmts []string) error {
	fail := func(err error) error { return fmt.Errorf("shard %q (%s): %w", sh.Name, store.RedactDSN(sh.DSN), err) }
	conn, err := connect(ctx, sh.DSN)
	if err != nil {
		return fail(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	return nil
}
