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
-- 0008's function unchanged, which decides and raises exactly as before
-- (the same PS001 messages: pgshard_fence_refuse, 0011). 0008's function
-- keeps its body under a new name, pgshard_fence_assert_general, so
-- that path is the released code itself, not a copy of it. Taking the
-- lock twice is harmless (a transaction-level lock is counted, released
-- at the end).
ALTER FUNCTION pgshard_fence_assert(TEXT) RENAME TO pgshard_fence_assert_general;

CREATE FUNCTION pgshard_fence_assert(p_key TEXT) RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    b       INT := pgshard_fence_bucket(p_key, pgshard_fence_nb());
    on_     BOOLEAN;
    flo     INT;
    fhi     INT;
    fstate  TEXT;
BEGIN
    SELECT x.lo, x.enabled INTO flo, on_ FROM pgshard_fence x WHERE x.lo <= b ORDER BY x.lo DESC LIMIT 1;
    IF on_ AND pg_try_advisory_xact_lock_shared(1885824627, flo) THEN
        SELECT x.hi, x.state, x.enabled INTO fhi, fstate, on_ FROM pgshard_fence x WHERE x.lo = flo;
        IF fhi >= b AND fstate = 'owned' AND on_
           AND current_setting('transaction_isolation') = 'read committed' THEN
            RETURN;
        END IF;
    END IF;
    PERFORM pgshard_fence_assert_general(p_key);
END;
$$;
