-- pgshard catalog, version 1: the shard map's generations, the move
-- journal and the leases of the processes that follow the map
-- (ARCHITECTURE.md §6). Everything lives in the schema pgshard_catalog,
-- created (with the ledger) by the installer before this file runs.

-- The current epoch: one row. Every change of the map is a new generation
-- written in the same transaction as an UPDATE of this row guarded by
-- "WHERE epoch = <the epoch the writer read>": the compare-and-swap.
-- Epoch 0 means no map has been pushed yet.
CREATE TABLE pgshard_catalog.head (
    singleton  BOOLEAN PRIMARY KEY DEFAULT true CHECK (singleton),
    epoch      BIGINT NOT NULL CHECK (epoch >= 0),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO pgshard_catalog.head (epoch) VALUES (0);

-- One row per map generation. A generation never changes once written
-- (the trigger below refuses UPDATE): a change of anything, a range's
-- state included, is a new epoch. Old generations may be deleted, never
-- the head's.
CREATE TABLE pgshard_catalog.generations (
    epoch      BIGINT PRIMARY KEY CHECK (epoch > 0),
    buckets    INT NOT NULL CHECK (buckets > 0 AND buckets & (buckets - 1) = 0),
    pushed_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    pushed_by  TEXT NOT NULL DEFAULT ''
);

-- The shards of a generation. Ordinals select the shard's stride of the
-- global sequences and never change for a name (checked by the writer).
CREATE TABLE pgshard_catalog.shards (
    epoch      BIGINT NOT NULL REFERENCES pgshard_catalog.generations ON DELETE CASCADE,
    name       TEXT NOT NULL CHECK (name ~ '^[A-Za-z0-9_-]+$'),
    ordinal    INT NOT NULL CHECK (ordinal BETWEEN 0 AND 1023),
    dsn        TEXT NOT NULL CHECK (dsn <> ''),
    pooler_dsn TEXT NOT NULL DEFAULT '',
    position   INT NOT NULL CHECK (position >= 0),  -- the shard's place in the map as pushed
    PRIMARY KEY (epoch, name),
    UNIQUE (epoch, ordinal),
    UNIQUE (epoch, position)
);

-- The bucket ranges of a generation, each on one shard, with its state:
--   owned     the shard owns the range and serves it;
--   frozen    the shard still owns it, but writes wait: a move is cutting
--             it over;
--   incoming  the shard receives the range from a move and does not own
--             it yet;
--   moved     the shard owned it until a move's flip; rows may remain
--             until clean-up.
-- Exactly one owned-or-frozen range covers each bucket of a generation;
-- incoming and moved ranges are extra rows beside it (checked by the
-- writer with shardmap's validation, and again by every reader).
CREATE TABLE pgshard_catalog.ranges (
    epoch   BIGINT NOT NULL,
    shard   TEXT NOT NULL,
    lo      INT NOT NULL CHECK (lo >= 0),
    hi      INT NOT NULL CHECK (hi >= lo),
    state   TEXT NOT NULL DEFAULT 'owned' CHECK (state IN ('owned', 'frozen', 'incoming', 'moved')),
    move_id BIGINT,
    PRIMARY KEY (epoch, shard, lo),
    FOREIGN KEY (epoch, shard) REFERENCES pgshard_catalog.shards (epoch, name) ON DELETE CASCADE
);

CREATE FUNCTION pgshard_catalog.refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'pgshard catalog: % rows are never updated: write a new generation (epoch) instead', TG_TABLE_NAME
        USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;
CREATE TRIGGER generations_immutable BEFORE UPDATE ON pgshard_catalog.generations
    FOR EACH ROW EXECUTE FUNCTION pgshard_catalog.refuse_update();
CREATE TRIGGER shards_immutable BEFORE UPDATE ON pgshard_catalog.shards
    FOR EACH ROW EXECUTE FUNCTION pgshard_catalog.refuse_update();
CREATE TRIGGER ranges_immutable BEFORE UPDATE ON pgshard_catalog.ranges
    FOR EACH ROW EXECUTE FUNCTION pgshard_catalog.refuse_update();

-- The move journal: one row per bucket-range move, updated as the mover
-- goes through its phases, so that a mover that died can resume (apply)
-- or roll back (abort) from the last recorded phase. Empty until the
-- mover exists.
CREATE TABLE pgshard_catalog.moves (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lo          INT NOT NULL CHECK (lo >= 0),
    hi          INT NOT NULL CHECK (hi >= lo),
    from_shard  TEXT NOT NULL,
    to_shard    TEXT NOT NULL CHECK (to_shard <> from_shard),
    from_epoch  BIGINT NOT NULL,          -- the generation the move was planned on
    to_epoch    BIGINT,                   -- the generation its flip wrote
    phase       TEXT NOT NULL DEFAULT 'planned' CHECK (phase IN (
                    'planned', 'copying', 'catching_up', 'frozen', 'flipped',
                    'cleaning', 'done', 'aborting', 'aborted', 'failed')),
    owner       TEXT,                     -- the mover (lease owner) working on it
    attempts    INT NOT NULL DEFAULT 0,   -- freezes tried
    rows_copied BIGINT NOT NULL DEFAULT 0,
    detail      JSONB NOT NULL DEFAULT '{}', -- the mover's resumable state (slots, LSNs, ...)
    error       TEXT,                     -- the last failure, NULL when none
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at TIMESTAMPTZ
);
CREATE INDEX moves_unfinished ON pgshard_catalog.moves (lo, hi)
    WHERE phase NOT IN ('done', 'aborted');

-- Leases: one row per process that serves the map (proxy, router, mover).
-- Times are the catalog server's (now()), never a client's clock. A lease
-- is live while expires_at > now(); only the holder of its token renews or
-- releases it, and an expired lease is taken over, never revived.
CREATE SEQUENCE pgshard_catalog.lease_tokens;
CREATE TABLE pgshard_catalog.leases (
    owner       TEXT PRIMARY KEY CHECK (owner <> ''),
    kind        TEXT NOT NULL DEFAULT '',
    epoch       BIGINT NOT NULL CHECK (epoch >= 0),  -- the map epoch the owner serves
    token       BIGINT NOT NULL,
    acquired_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    renewed_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ NOT NULL
);
