-- The fence's refusal (PS001) says what happened to the range in words a
-- person reads right. Migration 0008 wrote "<state> here at epoch N", so a
-- range moved away read "moved here", and pgshard_fence_assert — which
-- opens every fenced transaction, reads as well as writes — said "refuses
-- to write". Now the message names the state as a sentence ("moved to
-- shard "s2" at epoch 7", "incoming from shard "s0" by a move",
-- "frozen for a move") and the assert "refuses key". DETAIL, the
-- key=value pairs programs parse (store.AsFenceError), and HINT are
-- unchanged; the function's signature is the same.
CREATE OR REPLACE FUNCTION pgshard_fence_refuse(
    p_key TEXT, p_bucket INT, p_lo INT, p_hi INT, p_state TEXT, p_epoch BIGINT, p_owner TEXT, p_write BOOLEAN
) RETURNS VOID
LANGUAGE plpgsql STABLE AS $$
DECLARE
    me    TEXT;
    what  TEXT := CASE WHEN p_write THEN 'refuses key' ELSE 'refuses to read key' END;
    owner TEXT := CASE WHEN p_owner IS NULL THEN 'another shard' ELSE format('shard "%s"', p_owner) END;
    state TEXT;
BEGIN
    SELECT shard_name INTO me FROM pgshard_identity;
    IF p_lo IS NULL THEN
        RAISE USING ERRCODE = 'PS001',
            MESSAGE = format('pgshard fence: shard "%s" %s "%s": bucket %s is in no range of its fence',
                             me, what, p_key, p_bucket),
            DETAIL = format('bucket=%s shard=%s', p_bucket, me),
            HINT = 'The fence is on but does not cover this bucket: set it from the map in force ("pgshard migrate" or "pgshard map push").';
    END IF;
    state := CASE p_state
        WHEN 'moved' THEN format('moved to %s at epoch %s', owner, p_epoch)
        WHEN 'incoming' THEN format('incoming from %s by a move (epoch %s)', owner, p_epoch)
        WHEN 'frozen' THEN format('frozen for a move (epoch %s)', p_epoch)
        ELSE format('%s at epoch %s%s', p_state, p_epoch, coalesce(', owner "' || p_owner || '"', ''))
    END;
    RAISE USING ERRCODE = 'PS001',
        MESSAGE = format('pgshard fence: shard "%s" %s "%s": bucket %s is in range %s-%s, %s',
                         me, what, p_key, p_bucket, p_lo, p_hi, state),
        DETAIL = format('bucket=%s lo=%s hi=%s state=%s epoch=%s owner=%s shard=%s',
                        p_bucket, p_lo, p_hi, p_state, p_epoch, coalesce(p_owner, ''), me),
        HINT = CASE
            WHEN p_state = 'frozen' THEN
                format('Range %s-%s is frozen for a move: the transaction cannot commit; retry it shortly, after reloading the shard map (epoch %s or later).', p_lo, p_hi, p_epoch)
            WHEN p_owner IS NOT NULL THEN
                format('The transaction cannot commit: reload the shard map (epoch %s or later) and retry on shard "%s".', p_epoch, p_owner)
            ELSE
                format('The transaction cannot commit: reload the shard map (epoch %s or later) and retry on the shard it names.', p_epoch)
            END;
END;
$$;
