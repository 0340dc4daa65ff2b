-- The mover (ARCHITECTURE.md §6): what a bucket-range move needs on the
-- shards. Nothing here runs while no move does: the capture triggers are
-- created by the first capture on a shard and dropped by the last.
--
-- Change capture on the source of a move. pgshard_move_capture holds the
-- ranges being moved away from this shard (one row per move); while any
-- exists, a trigger on each of the six store tables records the key
-- (execution id) of every changed row whose bucket is in one of them in
-- pgshard_move_changes. The mover copies the range once from a snapshot,
-- then replays, key by key, the keys recorded since (it re-copies every
-- row of a recorded key), and deletes the records it replayed.

CREATE TABLE pgshard_move_capture (
    move_id BIGINT PRIMARY KEY,
    lo      INT NOT NULL CHECK (lo >= 0),
    hi      INT NOT NULL CHECK (hi >= lo)
);

-- A change record names the key; for outbox and spawns, whose rows have
-- no index on the key, it names the row (tbl, seq) instead.
CREATE TABLE pgshard_move_changes (
    id     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    bucket INT  NOT NULL,
    key    TEXT NOT NULL,
    tbl    TEXT CHECK (tbl IN ('outbox', 'spawns')),
    seq    BIGINT
);
CREATE INDEX pgshard_move_changes_bucket ON pgshard_move_changes (bucket, id);

-- On the destination of a move: which outbox and spawns row (dst_seq,
-- from this shard's sequence) is the copy of which source row (src_seq).
-- A copied row takes a seq of the shard that holds it, so acks by seq
-- reach it; this table lets the catch-up replace it when its source row
-- changes. Dropped by the move's clean-up or abort.
CREATE TABLE pgshard_move_seqs (
    move_id BIGINT NOT NULL,
    tbl     TEXT   NOT NULL CHECK (tbl IN ('outbox', 'spawns')),
    src_seq BIGINT NOT NULL,
    dst_seq BIGINT NOT NULL,
    PRIMARY KEY (move_id, tbl, src_seq)
);

-- pgshard_move_outbox_from(event): the id of the execution that emitted an
-- outbox event — its JSON's "from" member — or NULL when the event is not
-- a JSON object with a string "from". An outbox row lives on the shard of
-- its emitter (ARCHITECTURE.md §2) and moves with it; a row whose emitter
-- cannot be read stays where it is.
CREATE FUNCTION pgshard_move_outbox_from(p_event TEXT) RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    j JSONB;
BEGIN
    IF p_event IS NULL OR p_event NOT LIKE '%"from"%' THEN
        RETURN NULL;
    END IF;
    BEGIN
        j := p_event::jsonb;
    EXCEPTION WHEN others THEN
        RETURN NULL;
    END;
    IF jsonb_typeof(j) <> 'object' OR jsonb_typeof(j -> 'from') IS DISTINCT FROM 'string' THEN
        RETURN NULL;
    END IF;
    RETURN j ->> 'from';
END;
$$;

-- The capture trigger: records the key of OLD and of NEW when its bucket
-- is in a captured range.
CREATE FUNCTION pgshard_move_capture_row() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    keys TEXT[] := '{}';
    seqs BIGINT[] := '{}';
    k    TEXT;
    i    INT := 0;
    b    INT;
    nb   INT := pgshard_fence_nb();
    tbl  TEXT := CASE WHEN TG_TABLE_NAME IN ('outbox', 'spawns') THEN TG_TABLE_NAME END;
BEGIN
    -- One branch per table: a record's fields are resolved when a
    -- statement first runs, so each names only its own table's columns.
    IF TG_OP <> 'INSERT' THEN
        IF TG_TABLE_NAME = 'executions' THEN keys := keys || OLD.id;
        ELSIF TG_TABLE_NAME = 'spawns' THEN keys := keys || OLD.parent_id; seqs := seqs || OLD.seq;
        ELSIF TG_TABLE_NAME = 'outbox' THEN keys := keys || pgshard_move_outbox_from(OLD.event); seqs := seqs || OLD.seq;
        ELSE keys := keys || OLD.execution_id;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF TG_TABLE_NAME = 'executions' THEN keys := keys || NEW.id;
        ELSIF TG_TABLE_NAME = 'spawns' THEN keys := keys || NEW.parent_id; seqs := seqs || NEW.seq;
        ELSIF TG_TABLE_NAME = 'outbox' THEN keys := keys || pgshard_move_outbox_from(NEW.event); seqs := seqs || NEW.seq;
        ELSE keys := keys || NEW.execution_id;
        END IF;
    END IF;
    FOREACH k IN ARRAY keys LOOP
        i := i + 1;
        CONTINUE WHEN k IS NULL;
        b := pgshard_fence_bucket(k, nb);
        IF EXISTS (SELECT 1 FROM pgshard_move_capture c WHERE b BETWEEN c.lo AND c.hi) THEN
            INSERT INTO pgshard_move_changes (bucket, key, tbl, seq) VALUES (b, k, tbl, seqs[i]);
        END IF;
    END LOOP;
    RETURN NULL;
END;
$$;

-- pgshard_move_capture_begin(move, lo, hi): starts capturing the changes
-- of buckets lo..hi for move (again: a resumed move restarts its capture,
-- its old records dropped), creating the triggers if no capture runs.
-- It takes the range's fence lock EXCLUSIVE first (the fence's class,
-- lo): every fenced writer in flight on the range finishes first, and
-- every later one writes with the capture visible. Call it where [lo, hi] is a
-- row of this shard's fence (pgshard_move_fence splits it), under a
-- lock_timeout: creating a trigger waits for every writer of its table.
CREATE FUNCTION pgshard_move_capture_begin(p_move BIGINT, p_lo INT, p_hi INT) RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    t TEXT;
BEGIN
    PERFORM pg_advisory_xact_lock(1885824627, -1); -- capture begin/end, one at a time
    -- The range lock before any table lock: a writer holds it SHARED
    -- before it touches a table, so taking it after a trigger's table
    -- lock would deadlock with a writer waiting for that table.
    PERFORM pg_advisory_xact_lock(1885824627, p_lo);
    DELETE FROM pgshard_move_changes WHERE bucket BETWEEN p_lo AND p_hi;
    INSERT INTO pgshard_move_capture (move_id, lo, hi) VALUES (p_move, p_lo, p_hi)
    ON CONFLICT (move_id) DO UPDATE SET lo = EXCLUDED.lo, hi = EXCLUDED.hi;
    FOREACH t IN ARRAY ARRAY['executions', 'processed_events', 'timers', 'trace', 'spawns', 'outbox'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'pgshard_move_capture' AND tgrelid = t::regclass) THEN
            EXECUTE format('CREATE TRIGGER pgshard_move_capture AFTER INSERT OR UPDATE OR DELETE ON %I
                            FOR EACH ROW EXECUTE FUNCTION pgshard_move_capture_row()', t);
        END IF;
    END LOOP;
END;
$$;

-- pgshard_move_capture_end(move): stops move's capture and drops its
-- records; the last capture on the shard drops the triggers. Idempotent.
-- (The destination's pgshard_move_seqs rows of the move are the mover's
-- to delete, on the destination.)
CREATE FUNCTION pgshard_move_capture_end(p_move BIGINT) RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    lo_ INT;
    hi_ INT;
    t   TEXT;
BEGIN
    PERFORM pg_advisory_xact_lock(1885824627, -1);
    DELETE FROM pgshard_move_capture WHERE move_id = p_move RETURNING lo, hi INTO lo_, hi_;
    IF lo_ IS NOT NULL THEN
        DELETE FROM pgshard_move_changes WHERE bucket BETWEEN lo_ AND hi_;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pgshard_move_capture) THEN
        FOREACH t IN ARRAY ARRAY['executions', 'processed_events', 'timers', 'trace', 'spawns', 'outbox'] LOOP
            EXECUTE format('DROP TRIGGER IF EXISTS pgshard_move_capture ON %I', t);
        END LOOP;
        DELETE FROM pgshard_move_changes;
    END IF;
END;
$$;

-- pgshard_move_fence(lo, hi, state, owner, epoch, from_states, lock): sets
-- buckets lo..hi of this shard's fence to state (owner, epoch), making
-- them one row of their own: a row that covers more is split, its other
-- parts keeping what they had. Every row it changes must be in one of
-- from_states (or already be what is asked: then nothing changes), else it
-- refuses (55000), naming what it found. With lock, it first takes the
-- fence lock EXCLUSIVE of every row it changes (in lo order): writers in
-- flight finish first. Without it, the caller holds that lock already
-- (the mover's freeze, in another transaction). The fence's epoch rises
-- to epoch if that is newer. Returns a one-line summary.
CREATE FUNCTION pgshard_move_fence(
    p_lo INT, p_hi INT, p_state TEXT, p_owner TEXT, p_epoch BIGINT, p_from TEXT[], p_lock BOOLEAN
) RETURNS TEXT
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    nb      INT;
    on_     BOOLEAN;
    r       RECORD;
    covered INT := 0;
    same    BOOLEAN := true;
    keep_lo INT[] := '{}';
    keep_hi INT[] := '{}';
    keep_state TEXT[] := '{}';
    keep_epoch BIGINT[] := '{}';
    keep_owner TEXT[] := '{}';
    keep_on BOOLEAN[] := '{}';
BEGIN
    SELECT buckets, enabled INTO nb, on_ FROM pgshard_fence_config WHERE epoch > 0 AND buckets IS NOT NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgshard mover: this shard''s fence was never set from a map'
            USING ERRCODE = '55000', HINT = 'Run "pgshard migrate" against the shard map first.';
    END IF;
    IF p_lo IS NULL OR p_hi IS NULL OR p_lo < 0 OR p_hi < p_lo OR p_hi >= nb
       OR p_state NOT IN ('owned', 'frozen', 'incoming', 'moved') OR p_epoch IS NULL OR p_epoch <= 0 THEN
        RAISE EXCEPTION 'pgshard mover: bad fence change %-% % epoch %', p_lo, p_hi, p_state, p_epoch USING ERRCODE = '22023';
    END IF;
    IF p_lock THEN
        FOR r IN SELECT f.lo FROM pgshard_fence f
                  WHERE int4range(f.lo, f.hi, '[]') && int4range(p_lo, p_hi, '[]') ORDER BY f.lo LOOP
            PERFORM pg_advisory_xact_lock(1885824627, r.lo);
        END LOOP;
    END IF;
    FOR r IN SELECT f.lo, f.hi, f.state, f.owner, f.epoch FROM pgshard_fence f
              WHERE int4range(f.lo, f.hi, '[]') && int4range(p_lo, p_hi, '[]') ORDER BY f.lo FOR UPDATE LOOP
        covered := covered + least(r.hi, p_hi) - greatest(r.lo, p_lo) + 1;
        IF NOT (r.lo = p_lo AND r.hi = p_hi AND r.state = p_state AND r.owner IS NOT DISTINCT FROM p_owner) THEN
            same := false;
            IF NOT (r.state = ANY (p_from)) THEN
                RAISE EXCEPTION 'pgshard mover: buckets %-% of shard "%" are % (range %-%, owner %, epoch %), not one of %',
                        greatest(r.lo, p_lo), least(r.hi, p_hi), (SELECT shard_name FROM pgshard_identity),
                        r.state, r.lo, r.hi, coalesce(r.owner, '?'), r.epoch, p_from
                    USING ERRCODE = '55000';
            END IF;
        END IF;
    END LOOP;
    IF covered <> p_hi - p_lo + 1 THEN
        RAISE EXCEPTION 'pgshard mover: the fence does not cover buckets %-%', p_lo, p_hi USING ERRCODE = '55000';
    END IF;
    IF same THEN
        RETURN format('buckets %s-%s already %s', p_lo, p_hi, p_state);
    END IF;
    -- Split: the parts of the overlapping rows outside lo..hi keep their
    -- state; lo..hi becomes one row.
    FOR r IN DELETE FROM pgshard_fence f WHERE int4range(f.lo, f.hi, '[]') && int4range(p_lo, p_hi, '[]')
              RETURNING f.lo, f.hi, f.state, f.epoch, f.owner, f.enabled LOOP
        IF r.lo < p_lo THEN
            keep_lo := keep_lo || r.lo; keep_hi := keep_hi || (p_lo - 1);
            keep_state := keep_state || r.state; keep_epoch := keep_epoch || r.epoch;
            keep_owner := keep_owner || r.owner; keep_on := keep_on || r.enabled;
        END IF;
        IF r.hi > p_hi THEN
            keep_lo := keep_lo || (p_hi + 1); keep_hi := keep_hi || r.hi;
            keep_state := keep_state || r.state; keep_epoch := keep_epoch || r.epoch;
            keep_owner := keep_owner || r.owner; keep_on := keep_on || r.enabled;
        END IF;
    END LOOP;
    INSERT INTO pgshard_fence (lo, hi, state, epoch, owner, enabled)
    SELECT * FROM unnest(keep_lo, keep_hi, keep_state, keep_epoch, keep_owner, keep_on);
    INSERT INTO pgshard_fence (lo, hi, state, epoch, owner, enabled) VALUES (p_lo, p_hi, p_state, p_epoch, p_owner, on_);
    UPDATE pgshard_fence_config SET epoch = p_epoch, updated_at = now() WHERE epoch < p_epoch;
    RETURN format('buckets %s-%s now %s (owner %s, epoch %s)', p_lo, p_hi, p_state, coalesce(p_owner, '?'), p_epoch);
END;
$$;
