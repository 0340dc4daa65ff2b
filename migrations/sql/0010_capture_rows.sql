-- Row-level change capture for the mover (ARCHITECTURE.md §6), replacing
-- migration 0009's key-level one. 0009 recorded the key (execution id) of
-- a changed row, and the catch-up re-copied every row of that key: under
-- writers whose tables grow per event (processed_events, trace, outbox),
-- each change cost the whole key's history and a hot range never drained.
-- Here a change record names one row — its table and primary key — and
-- the catch-up replays that row alone: the source's current row is
-- upserted on the destination, or deleted there when the source has none.
--
-- Each capture is a move's own trigger on each of the six store tables
-- (pgshard_move_capture_<move>), its bucket range and the shard's bucket
-- count passed as the trigger's arguments: a row outside the range costs
-- the PL/pgSQL call and one inlined hash, no table read (0009's trigger
-- read the capture table for every row). Not a WHEN condition with the
-- range as constants: Postgres prepares a WHEN expression again for every
-- statement, which measured slower than the call (ARCHITECTURE.md §6).

-- A capture of migration 0009 running now would lose its records (its
-- triggers and table go below): finish or abort the move first.
DO $$
DECLARE
    moves TEXT;
BEGIN
    SELECT string_agg(move_id::text, ', ' ORDER BY move_id) INTO moves FROM pgshard_move_capture;
    IF moves IS NOT NULL OR EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'pgshard_move_capture') THEN
        RAISE EXCEPTION 'pgshard migration 0010: a change capture of the old scheme (migration 0009) is running on this shard (moves %)',
                coalesce(moves, 'none recorded, triggers left')
            USING ERRCODE = '55000',
                  HINT = 'Finish the move with "pgshard reshard apply" or roll it back with "pgshard reshard abort" (the mover of the release that started it), then migrate again.';
    END IF;
END;
$$;

DROP TABLE pgshard_move_changes;
DROP FUNCTION pgshard_move_capture_row();

-- A change record: one row of one store table, by primary key, as text
-- (executions: {id}; processed_events: {execution_id, event_id}; timers:
-- {execution_id, path}; trace: {execution_id, idx}; spawns and outbox:
-- {seq}). One record per row change, in commit order of nothing: the
-- catch-up replays the row's state as its snapshot sees it, so the order
-- and the number of records of one row do not matter.
CREATE TABLE pgshard_move_rows (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    move_id BIGINT NOT NULL,
    tbl     TEXT   NOT NULL CHECK (tbl IN ('executions', 'processed_events', 'timers', 'trace', 'spawns', 'outbox')),
    pk      TEXT[] NOT NULL
);
CREATE INDEX pgshard_move_rows_move ON pgshard_move_rows (move_id, id);

-- The capture trigger: TG_ARGV is (move, lo, hi, buckets). It records OLD
-- (update, delete) and NEW (insert, update) when their bucket is in
-- lo..hi — an update whose primary key did not change, once.
CREATE FUNCTION pgshard_move_capture_rows() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    mv  BIGINT := TG_ARGV[0]::bigint;
    lo  INT := TG_ARGV[1]::int;
    hi  INT := TG_ARGV[2]::int;
    nb  INT := TG_ARGV[3]::int;
    ok  TEXT[];
    nk  TEXT[];
    ob  INT;
    nbk INT;
BEGIN
    -- One branch per table: a record's fields are resolved when a
    -- statement first runs, so each names only its own table's columns.
    IF TG_OP <> 'INSERT' THEN
        IF TG_TABLE_NAME = 'executions' THEN ok := ARRAY[OLD.id]; ob := pgshard_fence_bucket(OLD.id, nb);
        ELSIF TG_TABLE_NAME = 'processed_events' THEN ok := ARRAY[OLD.execution_id, OLD.event_id]; ob := pgshard_fence_bucket(OLD.execution_id, nb);
        ELSIF TG_TABLE_NAME = 'timers' THEN ok := ARRAY[OLD.execution_id, OLD.path]; ob := pgshard_fence_bucket(OLD.execution_id, nb);
        ELSIF TG_TABLE_NAME = 'trace' THEN ok := ARRAY[OLD.execution_id, OLD.idx::text]; ob := pgshard_fence_bucket(OLD.execution_id, nb);
        ELSIF TG_TABLE_NAME = 'spawns' THEN ok := ARRAY[OLD.seq::text]; ob := pgshard_fence_bucket(OLD.parent_id, nb);
        ELSE ok := ARRAY[OLD.seq::text]; ob := pgshard_fence_bucket(pgshard_move_outbox_from(OLD.event), nb);
        END IF;
        IF ob BETWEEN lo AND hi THEN
            INSERT INTO pgshard_move_rows (move_id, tbl, pk) VALUES (mv, TG_TABLE_NAME, ok);
        ELSE
            ok := NULL;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF TG_TABLE_NAME = 'executions' THEN nk := ARRAY[NEW.id]; nbk := pgshard_fence_bucket(NEW.id, nb);
        ELSIF TG_TABLE_NAME = 'processed_events' THEN nk := ARRAY[NEW.execution_id, NEW.event_id]; nbk := pgshard_fence_bucket(NEW.execution_id, nb);
        ELSIF TG_TABLE_NAME = 'timers' THEN nk := ARRAY[NEW.execution_id, NEW.path]; nbk := pgshard_fence_bucket(NEW.execution_id, nb);
        ELSIF TG_TABLE_NAME = 'trace' THEN nk := ARRAY[NEW.execution_id, NEW.idx::text]; nbk := pgshard_fence_bucket(NEW.execution_id, nb);
        ELSIF TG_TABLE_NAME = 'spawns' THEN nk := ARRAY[NEW.seq::text]; nbk := pgshard_fence_bucket(NEW.parent_id, nb);
        ELSE nk := ARRAY[NEW.seq::text]; nbk := pgshard_fence_bucket(pgshard_move_outbox_from(NEW.event), nb);
        END IF;
        IF nbk BETWEEN lo AND hi AND nk IS DISTINCT FROM ok THEN
            INSERT INTO pgshard_move_rows (move_id, tbl, pk) VALUES (mv, TG_TABLE_NAME, nk);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

-- pgshard_move_capture_drop(move): drops the capture triggers of move
-- that exist (only those: dropping a trigger locks its table ACCESS
-- EXCLUSIVE, even IF EXISTS finds none).
CREATE FUNCTION pgshard_move_capture_drop(p_move BIGINT) RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    r RECORD;
BEGIN
    FOR r IN SELECT tg.tgname, tg.tgrelid::regclass AS rel FROM pg_trigger tg
              WHERE tg.tgname = 'pgshard_move_capture_' || p_move
              ORDER BY tg.tgrelid, tg.tgname LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.rel);
    END LOOP;
END;
$$;

-- pgshard_move_capture_begin(move, lo, hi): starts capturing the changed
-- rows of buckets lo..hi for move (again: a resumed move restarts its
-- capture, its old records dropped): creates the move's triggers. It
-- takes the range's fence lock EXCLUSIVE first (the fence's class, lo):
-- every fenced writer in flight on the range finishes first, and every
-- later one writes with the capture visible. Call it where [lo, hi] is a
-- row of this shard's fence (pgshard_move_fence splits it), under a
-- lock_timeout: creating a trigger waits for every writer of its table.
CREATE OR REPLACE FUNCTION pgshard_move_capture_begin(p_move BIGINT, p_lo INT, p_hi INT) RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    t    TEXT;
    nb   INT := pgshard_fence_nb();
    args TEXT;
BEGIN
    IF nb IS NULL OR p_move IS NULL OR p_lo IS NULL OR p_hi IS NULL OR p_lo < 0 OR p_hi < p_lo OR p_hi >= nb THEN
        RAISE EXCEPTION 'pgshard mover: bad capture % of buckets %-% (bucket count %)', p_move, p_lo, p_hi, nb USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(1885824627, -1); -- capture begin/end, one at a time
    -- The range lock before any table lock: a writer holds it SHARED
    -- before it touches a table, so taking it after a trigger's table
    -- lock would deadlock with a writer waiting for that table.
    PERFORM pg_advisory_xact_lock(1885824627, p_lo);
    DELETE FROM pgshard_move_rows WHERE move_id = p_move;
    INSERT INTO pgshard_move_capture (move_id, lo, hi) VALUES (p_move, p_lo, p_hi)
    ON CONFLICT (move_id) DO UPDATE SET lo = EXCLUDED.lo, hi = EXCLUDED.hi;
    PERFORM pgshard_move_capture_drop(p_move);
    args := format('%s, %s, %s, %s', p_move, p_lo, p_hi, nb);
    FOREACH t IN ARRAY ARRAY['executions', 'processed_events', 'timers', 'trace', 'spawns', 'outbox'] LOOP
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OR DELETE ON %I FOR EACH ROW EXECUTE FUNCTION pgshard_move_capture_rows(%s)',
                       'pgshard_move_capture_' || p_move, t, args);
    END LOOP;
END;
$$;

-- pgshard_move_capture_end(move): stops move's capture — its triggers
-- dropped, its records deleted. Idempotent. (The destination's
-- pgshard_move_seqs rows of the move are the mover's to delete, on the
-- destination.)
CREATE OR REPLACE FUNCTION pgshard_move_capture_end(p_move BIGINT) RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1885824627, -1);
    DELETE FROM pgshard_move_capture WHERE move_id = p_move;
    PERFORM pgshard_move_capture_drop(p_move);
    DELETE FROM pgshard_move_rows WHERE move_id = p_move;
END;
$$;
