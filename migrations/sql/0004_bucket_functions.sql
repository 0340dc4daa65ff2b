-- pgshard_bucket: the bucket of a key, the same value Go's shardmap computes
-- and Postgres's PARTITION BY HASH would:
--   uint64(hash_combine64(0, hash*extended(key, HASH_PARTITION_SEED))) % buckets
-- with HASH_PARTITION_SEED = 0x7A5B22367996DCFD (8816678312871386365) and
-- hash_combine64(0, h) = h + 0x49a0f4dd15e5a8e3 (5305509591434766563) mod 2^64.
--
-- For a power-of-two bucket count the unsigned modulo of the 64-bit sum is
-- computed with masks on the signed int8 (two's complement keeps the low
-- bits), which avoids numeric arithmetic; any other count takes the exact
-- numeric path.
CREATE FUNCTION pgshard_bucket_of_hash(h BIGINT, buckets INT) RETURNS INT
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE
        WHEN buckets > 0 AND buckets & (buckets - 1) = 0 THEN
            (((h & (buckets - 1)) + (5305509591434766563 & (buckets - 1))) & (buckets - 1))::int
        ELSE
            (((h::numeric + 18446744073709551616) % 18446744073709551616
              + 5305509591434766563) % 18446744073709551616 % buckets)::int
    END
$$;

CREATE FUNCTION pgshard_bucket(key TEXT, buckets INT) RETURNS INT
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT pgshard_bucket_of_hash(hashtextextended(key, 8816678312871386365), buckets)
$$;

CREATE FUNCTION pgshard_bucket(key BIGINT, buckets INT) RETURNS INT
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT pgshard_bucket_of_hash(hashint8extended(key, 8816678312871386365), buckets)
$$;

-- The one-argument forms use this shard's bucket count from its identity
-- record, so placement can be checked with a plain query:
--   SELECT count(*) FROM executions WHERE pgshard_bucket(id) NOT BETWEEN lo AND hi;
CREATE FUNCTION pgshard_buckets() RETURNS INT
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
DECLARE
    b INT;
BEGIN
    SELECT buckets INTO b FROM pgshard_identity;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'this database has no pgshard identity record'
            USING ERRCODE = '55000', HINT = 'Run "pgshard migrate" against the shard map.';
    END IF;
    RETURN b;
END;
$$;

CREATE FUNCTION pgshard_bucket(key TEXT) RETURNS INT
LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT pgshard_bucket(key, pgshard_buckets())
$$;

CREATE FUNCTION pgshard_bucket(key BIGINT) RETURNS INT
LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT pgshard_bucket(key, pgshard_buckets())
$$;
