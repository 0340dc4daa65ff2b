-- pgshard_fence_enter: 0012's fast-path assert as a procedure, sent as
-- CALL pgshard_fence_enter('k'). The same decision and the same refusal
-- (0012's body; anything off its common path takes
-- pgshard_fence_assert_general, the same PS001 messages naming the
-- range, its owner and epoch), at less backend CPU per transaction
-- (issue 20): a CALL has no result to describe or send (no
-- RowDescription, no DataRow: CommandComplete "CALL") and less executor
-- setup than SELECT of a function returning VOID. Measured with
-- BenchmarkFenceBackendCPU (store) and BenchmarkProxyFence (proxy).
--
-- A procedure, not a function: it cannot share pgshard_fence_assert's
-- name and argument types, and the function stays for older callers (a
-- proxy or store that predates this migration). Transaction control is
-- never used in it, so a CALL inside a transaction block, in a query
-- string's implicit transaction, or in an extended-protocol pipeline
-- before Sync runs in the caller's transaction (the advisory lock it
-- takes is held to that transaction's end), through PgBouncer's
-- transaction mode too. Its body repeats 0012's fast path instead of
-- PERFORM pgshard_fence_assert(p_key): a nested PL/pgSQL call would put
-- back a function call per transaction, part of what the CALL saves (not
-- measured on its own); the slow path is shared (0012's general function).
CREATE PROCEDURE pgshard_fence_enter(p_key TEXT)
LANGUAGE plpgsql AS $$
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
