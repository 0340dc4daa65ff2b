-- The fence (ARCHITECTURE.md §6): every shard records the bucket ranges it
-- owns and refuses keyed reads and writes of buckets it does not own, with
-- SQLSTATE PS001 (class PS, which no Postgres error uses).
--
-- pgshard_fence_config is one row: whether the fence is on, the epoch of
-- the map it was last set from and the bucket count. This migration
-- creates it OFF with no ranges, so a shard behaves exactly as before
-- until its fence is set from a map (pgshard_fence_set, which pgshard
-- migrate calls). Off is explicit, never inferred from an empty table: an
-- on fence with no range for a bucket refuses that bucket.
--
-- pgshard_fence holds, when on, a set of non-overlapping ranges covering
-- every bucket 0..buckets-1, each with this shard's state for it:
--   owned     this shard owns it: reads and writes are served
--   frozen    this shard owns it, a move is cutting it over: reads are
--             served, writes refused (the mover holds the range's lock
--             while it freezes; a committed 'frozen' outlives only a
--             crashed mover, and writes must not slip in then)
--   incoming  a move is bringing it here: refused, owner = the source
--   moved     another shard owns it (it moved away, or was never here):
--             refused, owner = that shard as of epoch
-- and the epoch of the map that set the row.

CREATE TABLE pgshard_fence_config (
    singleton  BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    enabled    BOOLEAN NOT NULL,
    epoch      BIGINT  NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    buckets    INT     CHECK (buckets > 0),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK (NOT enabled OR buckets IS NOT NULL)
);

INSERT INTO pgshard_fence_config (enabled) VALUES (false);

CREATE TABLE pgshard_fence (
    lo    INT    PRIMARY KEY CHECK (lo >= 0),
    hi    INT    NOT NULL CHECK (hi >= lo),
    state TEXT   NOT NULL CHECK (state IN ('owned', 'frozen', 'incoming', 'moved')),
    epoch BIGINT NOT NULL CHECK (epoch > 0),
    owner TEXT,  -- the shard owning the range as of epoch; NULL: unknown
    -- enabled mirrors pgshard_fence_config.enabled on every row (both are
    -- written together), so that the checks learn the range and whether
    -- the fence is on from one index probe.
    enabled BOOLEAN NOT NULL DEFAULT true,
    EXCLUDE USING gist (int4range(lo, hi, '[]') WITH &&)
);

-- The range lock: pg_advisory_xact_lock_shared(1885824627, lo) — the class
-- is 'pgfs' in ASCII, the object the range's lo. Writers hold it SHARED
-- until their transaction ends; a mover that takes it EXCLUSIVE waits for
-- the writers in flight and holds back new ones until it commits. A mover
-- that splits a range locks the range being split (its current lo) first.
-- Transaction-level only: safe through PgBouncer in transaction mode.
CREATE FUNCTION pgshard_fence_lock_class() RETURNS INT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 1885824627 $$;

-- Raises the fence's error for key p_key in bucket p_bucket, which the
-- range p_lo..p_hi holds in state p_state (p_lo NULL: no range holds it).
-- MESSAGE names the shard, the key, the bucket, the range, its state, the
-- epoch and the owner when known; DETAIL carries the same as key=value
-- pairs for programs; HINT says what to do.
CREATE FUNCTION pgshard_fence_refuse(
    p_key TEXT, p_bucket INT, p_lo INT, p_hi INT, p_state TEXT, p_epoch BIGINT, p_owner TEXT, p_write BOOLEAN
) RETURNS VOID
LANGUAGE plpgsql STABLE AS $$
DECLARE
    me   TEXT;
    what TEXT := CASE WHEN p_write THEN 'write' ELSE 'read' END;
BEGIN
    SELECT shard_name INTO me FROM pgshard_identity;
    IF p_lo IS NULL THEN
        RAISE USING ERRCODE = 'PS001',
            MESSAGE = format('pgshard fence: shard "%s" refuses to %s key "%s": bucket %s is in no range of its fence',
                             me, what, p_key, p_bucket),
            DETAIL = format('bucket=%s shard=%s', p_bucket, me),
            HINT = 'The fence is on but does not cover this bucket: set it from the map in force ("pgshard migrate" or "pgshard map push").';
    END IF;
    RAISE USING ERRCODE = 'PS001',
        MESSAGE = format('pgshard fence: shard "%s" refuses to %s key "%s": bucket %s is in range %s-%s, %s here at epoch %s%s',
                         me, what, p_key, p_bucket, p_lo, p_hi, p_state, p_epoch,
                         coalesce(', owner "' || p_owner || '"', '')),
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

-- pgshard_fence_bucket(key, buckets): pgshard_bucket for a power-of-two
-- bucket count (every shard's: its identity's CHECK), written so that
-- Postgres inlines it (one expression, not STRICT). pgshard_bucket cannot
-- be inlined (its STRICT body is a CASE), so each call of it runs a SQL
-- function's executor, planned afresh: measured, that alone cost more than
-- the rest of the fence. NULL buckets yield NULL.
CREATE FUNCTION pgshard_fence_bucket(key TEXT, buckets INT) RETURNS INT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (((hashtextextended(key, 8816678312871386365) & (buckets - 1)::bigint)
             + (5305509591434766563 & (buckets - 1)::bigint)) & (buckets - 1)::bigint)::int
$$;

-- pgshard_fence_nb(): this shard's bucket count (its identity's; NULL
-- without one), declared IMMUTABLE although it reads a table, so that the
-- checks below fold it into their plans, which PL/pgSQL caches for the
-- session: the bucket count of a shard never changes once its identity
-- exists (ARCHITECTURE.md §2). A plan that folded NULL (a session that
-- called a check before the identity was written) only sends the checks
-- down their slow path, which reads the config row.
CREATE FUNCTION pgshard_fence_nb() RETURNS INT
LANGUAGE sql IMMUTABLE AS $$ SELECT (SELECT buckets FROM pgshard_identity) $$;

-- The two functions below compute key's bucket and find its range with one
-- index probe (the row also says whether the fence is on). Only when no
-- range holds the bucket — a fence never set, or a gap — do they read the
-- config row: off serves, on refuses.
--
-- pgshard_fence_assert(key): "this shard owns key's bucket now", for
-- writers and for the first statement of a transaction. It takes the
-- range's lock SHARED (held to the end of the transaction), then reads the
-- range's state again with a fresh snapshot (a VOLATILE function's
-- statements each take one under READ COMMITTED), so a move that flipped
-- the range while it waited is seen; anything but 'owned' raises PS001.
-- Under REPEATABLE READ or SERIALIZABLE the transaction's snapshot may
-- predate a flip: the range's row is then locked FOR SHARE, which fails
-- with 40001 if a move changed it after the snapshot. With the fence off
-- it does nothing but that probe.
CREATE FUNCTION pgshard_fence_assert(p_key TEXT) RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    on_     BOOLEAN;
    nb      INT;
    b       INT := pgshard_fence_bucket(p_key, pgshard_fence_nb());
    f       RECORD;
    locked  INT := -1;
BEGIN
    -- Bounded: a range is split under its own lock, so the second read
    -- finds the locked range unless a split happened in between.
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

-- pgshard_fence_check(key): "this shard serves key's bucket", for a read
-- that is one statement: call it on the key in that statement's WHERE
-- (`WHERE id = $1 AND pgshard_fence_check($1)`: a condition without
-- columns, which Postgres evaluates once, as a One-Time Filter, before it
-- scans — so it runs even when no row exists).
-- STABLE, so it reads the fence with the calling statement's snapshot —
-- the one the statement reads its rows with — and the verdict and the
-- rows are of the same instant: a read whose snapshot predates a flip
-- reads the range as it was, entirely, and one that follows it is
-- refused. Owned and frozen ranges are served. No lock: a snapshot read
-- needs none. Returns true or raises PS001.
CREATE FUNCTION pgshard_fence_check(p_key TEXT) RETURNS BOOLEAN
LANGUAGE plpgsql STABLE AS $$
DECLARE
    on_ BOOLEAN;
    nb  INT;
    b   INT := pgshard_fence_bucket(p_key, pgshard_fence_nb());
    f   RECORD;
BEGIN
    FOR attempt IN 1..2 LOOP
        SELECT x.lo, x.hi, x.state, x.epoch, x.owner, x.enabled INTO f
          FROM pgshard_fence x WHERE x.lo <= b ORDER BY x.lo DESC LIMIT 1;
        IF f.lo IS NOT NULL AND f.hi >= b THEN
            IF NOT f.enabled OR f.state IN ('owned', 'frozen') THEN
                RETURN true;
            END IF;
            PERFORM pgshard_fence_refuse(p_key, b, f.lo, f.hi, f.state, f.epoch, f.owner, false);
        END IF;
        SELECT enabled, buckets INTO on_, nb FROM pgshard_fence_config;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'pgshard fence: the configuration row of pgshard_fence_config is missing'
                USING ERRCODE = '55000', HINT = 'Run "pgshard migrate" against the shard map to set the fence again.';
        END IF;
        IF NOT on_ THEN
            RETURN true;
        END IF;
        IF b IS NOT DISTINCT FROM pgshard_fence_bucket(p_key, nb) THEN
            EXIT;
        END IF;
        b := pgshard_fence_bucket(p_key, nb); -- a plan folded no identity
    END LOOP;
    PERFORM pgshard_fence_refuse(p_key, b, NULL, NULL, NULL, NULL, NULL, false);
    RETURN false; -- not reached: refuse raises
END;
$$;

-- pgshard_fence_served(): the buckets this shard serves to reads (owned
-- and frozen ranges) as a multirange, and the bucket count; served is NULL
-- when the fence is off (everything is served). For scans over all rows,
-- which filter rather than fail:
--   ... CROSS JOIN pgshard_fence_served() s
--   WHERE (s.served IS NULL OR pgshard_fence_bucket(key, s.buckets) <@ s.served)
CREATE FUNCTION pgshard_fence_served(OUT buckets INT, OUT served INT4MULTIRANGE)
LANGUAGE sql STABLE AS $$
    SELECT c.buckets,
           CASE WHEN c.enabled THEN
               coalesce((SELECT range_agg(int4range(f.lo, f.hi, '[]')) FROM pgshard_fence f
                          WHERE f.state IN ('owned', 'frozen')), '{}'::int4multirange)
           END
      FROM pgshard_fence_config c
$$;

-- pgshard_fence_set(epoch, los, his, shards): sets this shard's fence from
-- a map — parallel arrays of its ranges and their owners — and turns it on.
-- The ranges must cover 0..buckets-1 (this shard's identity) without
-- overlap; a range owned by this shard (its identity's name) becomes
-- 'owned', any other 'moved' with that owner. An epoch older than the
-- fence's is refused (a stale map); the same epoch sets it again. Every
-- range whose row changes is locked EXCLUSIVE first, so writers in flight
-- finish before ownership changes. Returns a one-line summary.
CREATE FUNCTION pgshard_fence_set(p_epoch BIGINT, p_los INT[], p_his INT[], p_shards TEXT[]) RETURNS TEXT
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    me      TEXT;
    nb      INT;
    cur     BIGINT;
    next_lo INT := 0;
    r       RECORD;
    owned   INT := 0;
    others  INT := 0;
BEGIN
    SELECT shard_name, buckets INTO me, nb FROM pgshard_identity;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgshard fence: this database has no pgshard identity record'
            USING ERRCODE = '55000', HINT = 'Run "pgshard migrate" against the shard map.';
    END IF;
    IF p_epoch IS NULL OR p_epoch <= 0 THEN
        RAISE EXCEPTION 'pgshard fence: epoch % is not positive', p_epoch USING ERRCODE = '22023';
    END IF;
    IF coalesce(cardinality(p_los), 0) = 0
       OR cardinality(p_los) <> coalesce(cardinality(p_his), 0)
       OR cardinality(p_los) <> coalesce(cardinality(p_shards), 0) THEN
        RAISE EXCEPTION 'pgshard fence: the map''s ranges are empty or their arrays differ in length'
            USING ERRCODE = '22023';
    END IF;
    SELECT epoch INTO cur FROM pgshard_fence_config FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO pgshard_fence_config (enabled) VALUES (false);
        cur := 0;
    END IF;
    IF p_epoch < cur THEN
        RAISE EXCEPTION 'pgshard fence: shard "%" has its fence from map epoch %, newer than epoch %', me, cur, p_epoch
            USING ERRCODE = '55000', HINT = 'The map is stale: load the map in force and set the fence from it.';
    END IF;
    FOR r IN SELECT u.lo, u.hi, u.shard FROM unnest(p_los, p_his, p_shards) AS u(lo, hi, shard) ORDER BY u.lo LOOP
        IF r.lo IS NULL OR r.hi IS NULL OR r.shard IS NULL OR r.lo <> next_lo OR r.hi < r.lo OR r.hi >= nb THEN
            RAISE EXCEPTION 'pgshard fence: the map''s ranges must cover buckets 0-% in order without gaps or overlaps; found %-% (owner %) where bucket % comes next',
                    nb - 1, r.lo, r.hi, r.shard, next_lo
                USING ERRCODE = '22023';
        END IF;
        next_lo := r.hi + 1;
        IF r.shard = me THEN owned := owned + r.hi - r.lo + 1; ELSE others := others + r.hi - r.lo + 1; END IF;
    END LOOP;
    IF next_lo <> nb THEN
        RAISE EXCEPTION 'pgshard fence: the map''s ranges end at bucket %, this shard has % buckets', next_lo - 1, nb
            USING ERRCODE = '22023';
    END IF;
    -- Drain the writers of every range whose row changes (old rows that
    -- differ from the new set), in lo order.
    FOR r IN
        SELECT f.lo FROM pgshard_fence f
         WHERE NOT EXISTS (SELECT 1 FROM unnest(p_los, p_his, p_shards) AS u(lo, hi, shard)
                            WHERE u.lo = f.lo AND u.hi = f.hi
                              AND f.state = CASE WHEN u.shard = me THEN 'owned' ELSE 'moved' END
                              AND f.owner IS NOT DISTINCT FROM u.shard)
         ORDER BY f.lo
    LOOP
        PERFORM pg_advisory_xact_lock(1885824627, r.lo);
    END LOOP;
    DELETE FROM pgshard_fence;
    INSERT INTO pgshard_fence (lo, hi, state, epoch, owner)
    SELECT u.lo, u.hi, CASE WHEN u.shard = me THEN 'owned' ELSE 'moved' END, p_epoch, u.shard
      FROM unnest(p_los, p_his, p_shards) AS u(lo, hi, shard);
    UPDATE pgshard_fence_config SET enabled = true, epoch = p_epoch, buckets = nb, updated_at = now();
    RETURN format('fence on at epoch %s: %s of %s buckets owned', p_epoch, owned, nb);
END;
$$;

-- pgshard_fence_off(): turns the fence off (every key served, as before
-- this migration), keeping its ranges; pgshard_fence_set turns it on
-- again. For benchmarks and emergencies: with the fence off nothing stops a
-- stale router from reading or writing a range this shard no longer owns.
CREATE FUNCTION pgshard_fence_off() RETURNS VOID
LANGUAGE sql VOLATILE AS $$
    UPDATE pgshard_fence_config SET enabled = false, updated_at = now();
    UPDATE pgshard_fence SET enabled = false;
$$;

-- pgshard_fence_on(): turns a fence that was set and then turned off on
-- again, with the ranges it kept; refused when it was never set.
CREATE FUNCTION pgshard_fence_on() RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    UPDATE pgshard_fence_config SET enabled = true, updated_at = now() WHERE buckets IS NOT NULL AND epoch > 0;
    IF FOUND THEN
        UPDATE pgshard_fence SET enabled = true;
    ELSE
        RAISE EXCEPTION 'pgshard fence: the fence was never set from a map'
            USING ERRCODE = '55000', HINT = 'Run "pgshard migrate" against the shard map.';
    END IF;
END;
$$;

-- The commit functions refuse a key this shard does not own: pgshard_cas,
-- which pgshard_commit_cas, pgshard_commit and harel_commit_cas all call,
-- asserts the fence first. As 0007's otherwise.
CREATE OR REPLACE FUNCTION pgshard_cas(
    p_id            TEXT,
    p_definition_id TEXT,
    p_data          TEXT,
    p_old_version   INT,
    p_event_id      TEXT
) RETURNS BOOLEAN
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgshard_fence_assert(p_id);
    UPDATE executions
       SET data = p_data, version = p_old_version + 1
     WHERE id = p_id AND version = p_old_version;
    IF NOT FOUND THEN
        IF p_old_version <> 0 THEN
            RETURN FALSE;
        END IF;
        -- A concurrent first save of the same id waits for the other
        -- transaction and then inserts nothing: a conflict, not an error.
        INSERT INTO executions (id, definition_id, data, version)
        VALUES (p_id, p_definition_id, p_data, 1)
        ON CONFLICT (id) DO NOTHING;
        IF NOT FOUND THEN
            RETURN FALSE;
        END IF;
    END IF;
    IF p_event_id IS NOT NULL AND p_event_id <> '' THEN
        INSERT INTO processed_events (execution_id, event_id)
        VALUES (p_id, p_event_id)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN TRUE;
END;
$$;
