-- A READ ONLY transaction under REPEATABLE READ or SERIALIZABLE can assert
-- the fence. 0008's assert (pgshard_fence_assert_general since 0012)
-- locked the range's row FOR SHARE at those levels, and Postgres refuses
-- any row lock in a read-only transaction (25006, "cannot execute SELECT
-- FOR SHARE in a read-only transaction"): `BEGIN ISOLATION LEVEL
-- SERIALIZABLE, READ ONLY` followed by a keyed SELECT failed through the
-- proxy, which asserts the key at the transaction's start.
--
-- The lock is there for writers: a transaction whose snapshot predates a
-- flip must not write the range on its old owner, and FOR SHARE fails
-- with 40001 if the row changed after the snapshot. A read-only
-- transaction writes nothing, and what it reads is the shard as of its
-- snapshot, taken inside the transaction (at its first statement) and,
-- if it predates a flip, before the flip — the range was owned here then
-- and every row of it was here, and stays visible to that snapshot after
-- the mover's clean-up deletes it. So a read-only transaction at those
-- levels is served on the state its snapshot sees, without the row lock:
-- 'owned' serves, anything else refuses as before. It still takes the
-- range's lock SHARED, so a mover's freeze waits for it as for any
-- transaction of the range.
--
-- The body is 0008's but for that condition.
CREATE OR REPLACE FUNCTION pgshard_fence_assert_general(p_key TEXT) RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    on_     BOOLEAN;
    nb      INT;
    b       INT := pgshard_fence_bucket(p_key, pgshard_fence_nb());
    f       RECORD;
    locked  INT := -1;
BEGIN
    FOR attempt IN 1..4 LOOP
        SELECT x.lo, x.hi, x.state, x.epoch, x.owner, x.enabled INTO f
          FROM pgshard_fence x WHERE x.lo <= b ORDER BY x.lo DESC LIMIT 1;
        IF f.lo IS NULL OR f.hi < b THEN
            SELECT enabled, buckets INTO on_, nb FROM pgshard_fence_config;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'pgshard fence: the configuration row of pgshard_fence_config is missing'
                    USING ERRCODE = '55000', HINT = 'Run "pgshard migrate" against the shard map to set the fence again.';
            END IF;
            IF NOT on_ THEN
                RETURN;
            END IF;
            IF b IS DISTINCT FROM pgshard_fence_bucket(p_key, nb) THEN
                b := pgshard_fence_bucket(p_key, nb); -- a plan folded no identity
                CONTINUE;
            END IF;
            PERFORM pgshard_fence_refuse(p_key, b, NULL, NULL, NULL, NULL, NULL, true);
        END IF;
        IF NOT f.enabled THEN
            RETURN;
        END IF;
        IF f.lo = locked THEN
            IF current_setting('transaction_isolation') <> 'read committed'
               AND current_setting('transaction_read_only') <> 'on' THEN
                PERFORM 1 FROM pgshard_fence WHERE pgshard_fence.lo = f.lo FOR SHARE;
            END IF;
            IF f.state <> 'owned' THEN
                PERFORM pgshard_fence_refuse(p_key, b, f.lo, f.hi, f.state, f.epoch, f.owner, true);
            END IF;
            RETURN;
        END IF;
        IF NOT pg_try_advisory_xact_lock_shared(1885824627, f.lo) THEN
            PERFORM pg_advisory_xact_lock_shared(1885824627, f.lo);
        END IF;
        locked := f.lo;
    END LOOP;
    RAISE EXCEPTION 'pgshard fence: the range of key "%" kept changing while it was locked', p_key
        USING ERRCODE = '40001', HINT = 'Retry the transaction.';
END;
$$;
