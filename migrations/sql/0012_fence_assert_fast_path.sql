-- pgshard_fence_assert costs less on its common path: a key this shard
-- owns, under READ COMMITTED, with no mover holding the range's lock.
-- Measured per transaction on one backend (issue 20: the backend's CPU
-- time, /proc/PID/schedstat), the assert cost about as much as the keyed
-- point SELECT it guards: a PL/pgSQL call, two index probes of
-- pgshard_fence returning a whole row each into a RECORD, the range's
-- lock, the isolation level read through current_setting. Now:
--
--   1. one probe for the range that may hold the key's bucket (lo <= b,
--      the highest), reading only its lo and whether the fence is on;
--   2. the range's lock SHARED, if it is free at once
--      (pg_try_advisory_xact_lock_shared);
--   3. the range's row by its lo (an equality probe) with a fresh
--      snapshot, taken after the lock: served when it holds the bucket
--      (hi >= b; lo <= b from step 1, and a row's lo never changes),
--      is owned and on, and the transaction is READ COMMITTED.
--
-- That is 0008's second iteration, in scalars: the lock held is the
-- range's (the one a mover takes EXCLUSIVE to flip or split it), and
-- the read that decides follows it, so a flip committed before the lock
-- was granted is seen. Anything else — the fence off, no range, a gap,
-- the lock held by a mover (wait for it), another state (refuse),
-- REPEATABLE READ or SERIALIZABLE (lock the row FOR SHARE) — takes
-- 0008's path unchanged, which decides and raises exactly as before
-- (the same PS001 messages: pgshard_fence_refuse, 0011). Taking the
-- lock twice is harmless (a transaction-level lock is counted, released
-- at the end).
CREATE OR REPLACE FUNCTION pgshard_fence_assert(p_key TEXT) RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    on_     BOOLEAN;
    nb      INT;
    b       INT := pgshard_fence_bucket(p_key, pgshard_fence_nb());
    f       RECORD;
    locked  INT := -1;
    flo     INT;
    fhi     INT;
    fstate  TEXT;
BEGIN
    -- The common path (above).
    SELECT x.lo, x.enabled INTO flo, on_ FROM pgshard_fence x WHERE x.lo <= b ORDER BY x.lo DESC LIMIT 1;
    IF on_ AND pg_try_advisory_xact_lock_shared(1885824627, flo) THEN
        SELECT x.hi, x.state, x.enabled INTO fhi, fstate, on_ FROM pgshard_fence x WHERE x.lo = flo;
        IF fhi >= b AND fstate = 'owned' AND on_
           AND current_setting('transaction_isolation') = 'read committed' THEN
            RETURN;
        END IF;
    END IF;
    -- 0008's path, unchanged. Bounded: a range is split under its own
    -- lock, so the second read finds the locked range unless a split
    -- happened in between.
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
            IF current_setting('transaction_isolation') <> 'read committed' THEN
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
