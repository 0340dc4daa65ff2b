-- Every shard records who it is. The router and the proxy compare this record
-- with their shard map and refuse to start on a mismatch (two map entries on
-- one database, a wrong ordinal, another bucket count). pgshard migrate
-- writes the row; it is not part of any migration's SQL because its values
-- differ per shard.
CREATE TABLE pgshard_identity (
    singleton   BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    shard_name  TEXT    NOT NULL,
    ordinal     INT     NOT NULL CHECK (ordinal BETWEEN 0 AND 1023),
    buckets     INT     NOT NULL CHECK (buckets > 0 AND buckets & (buckets - 1) = 0),
    map_epoch   BIGINT  NOT NULL CHECK (map_epoch > 0),
    database_id UUID    NOT NULL DEFAULT gen_random_uuid(),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
