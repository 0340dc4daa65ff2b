-- A read of every shard through the proxy is filtered, on each shard, to
-- the buckets that shard serves (0008's pgshard_fence_served). A range
-- move flips the range on its source and on its destination in two
-- transactions, after the catalog's new epoch; a read whose shards take
-- their snapshots on either side of those commits would miss the range
-- (neither serves it in the snapshot it read) or read it twice (both
-- do). pgshard_fence_served_by(epoch, los, his, shards) is the served
-- set checked against the map the reader routes by — the ranges los..his
-- (both included) owned by shards, the map of epoch: it returns what
-- pgshard_fence_served returns, and raises PS002 when this shard's served
-- set is not the ranges that map gives it. When every shard's part of a
-- read passes, the parts cover every bucket exactly once (the map's
-- ranges partition the buckets). A fence that is off serves everything
-- and checks nothing (NULL, as pgshard_fence_served).
--
-- The proxy calls it as an uncorrelated scalar subquery of each keyed
-- table's filter: one call per table reference and statement (an
-- InitPlan), evaluated before the first row of that table leaves the
-- shard. DETAIL holds key=value pairs a program parses: the fence's
-- epoch says whether the reader's map is behind the shard (reload it) or
-- the shard is behind the map (a flip in progress: retry shortly).
CREATE FUNCTION pgshard_fence_served_by(p_epoch BIGINT, p_los INT[], p_his INT[], p_shards TEXT[])
RETURNS INT4MULTIRANGE
LANGUAGE plpgsql STABLE AS $$
DECLARE
    got   INT4MULTIRANGE;
    want  INT4MULTIRANGE;
    me    TEXT;
    fep   BIGINT;
    on_   BOOLEAN;
BEGIN
    -- pgshard_fence_served()'s set, read here: a SQL function is planned
    -- again at every call, these statements once per session. STABLE: they
    -- read the calling statement's snapshot, the one the part reads.
    SELECT c.enabled, c.epoch INTO on_, fep FROM pgshard_fence_config c;
    IF NOT coalesce(on_, false) THEN
        RETURN NULL;
    END IF;
    SELECT coalesce(range_agg(int4range(f.lo, f.hi, '[]')), '{}'::int4multirange) INTO got
      FROM pgshard_fence f
     WHERE f.state IN ('owned', 'frozen');
    SELECT shard_name INTO me FROM pgshard_identity;
    SELECT coalesce(range_agg(int4range(u.lo, u.hi, '[]')), '{}'::int4multirange) INTO want
      FROM unnest(p_los, p_his, p_shards) AS u(lo, hi, shard)
     WHERE u.shard = me;
    IF got = want THEN
        RETURN got;
    END IF;
    RAISE USING ERRCODE = 'PS002',
        MESSAGE = format('pgshard fence: shard "%s" serves buckets %s to reads at fence epoch %s, not %s as the map of epoch %s says: a range move is flipping',
                         me, got, fep, want, p_epoch),
        DETAIL = format('epoch=%s map_epoch=%s shard=%s served=%s expected=%s', fep, p_epoch, me, got, want),
        HINT = 'The read of every shard would miss the moving range or read it twice: retry it (after reloading the shard map when the fence''s epoch is newer than the map''s).';
END;
$$;
