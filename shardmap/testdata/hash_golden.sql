-- Generates hash_golden.tsv from a LIVE Postgres (never from the Go code):
--
--   psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p 55432 -U postgres \
--        -f shardmap/testdata/hash_golden.sql > shardmap/testdata/hash_golden.tsv
--
-- The database must use UTF8 and a deterministic collation (C.UTF-8 here).
-- Columns: kind (text|int8), key (COPY text escaping: \\ \t \n \r),
-- hashextended (hashtextextended / hashint8extended with
-- HASH_PARTITION_SEED, signed, as Postgres prints it), bucket for B=4096,
-- bucket for B=64, computed with the numeric form of ARCHITECTURE.md §2's formula:
--   ((h::numeric + 2^64) % 2^64 + 0x49a0f4dd15e5a8e3) % 2^64 % B
-- Before printing anything the script cross-checks the bucket64 column
-- against real PARTITION BY HASH tables (modulus 64, text and bigint) and
-- aborts if a single row lands elsewhere.
\set ON_ERROR_STOP on
SET client_min_messages = warning;
SET client_encoding = 'UTF8';

CREATE TEMP TABLE golden_keys (ord serial PRIMARY KEY, kind text NOT NULL, k text NOT NULL);

-- Every length 0..64 (ASCII); covers the 11/12/13, 23/24/25, 35/36/37 block edges.
INSERT INTO golden_keys (kind, k)
SELECT 'text', left('abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_', n)
FROM generate_series(0, 64) n;

-- Bytes >= 0x80 at every offset: 'aé' repeated (1 + 2 bytes), 1..44 characters.
INSERT INTO golden_keys (kind, k)
SELECT 'text', left(repeat('aé', 30), n) FROM generate_series(1, 44) n;

-- Block edges again with other byte values.
INSERT INTO golden_keys (kind, k)
SELECT 'text', repeat(c, n)
FROM unnest(ARRAY['z', '0', '~']) c, unnest(ARRAY[11, 12, 13, 23, 24, 25, 35, 36, 37]) n;

-- Multibyte UTF-8 and odd ASCII.
INSERT INTO golden_keys (kind, k)
SELECT 'text', k FROM unnest(ARRAY[
  'é', 'ß', 'Ω', 'ÿ', '日本語', '😀', '👩‍💻', 'Ñandú', 'Привет мир', 'مرحبا', 'עברית',
  '中文键值存储', E'e\u0301', E'\uFFFD', E'\U0010FFFF', E'\u00A0', '€€€€', '😀😀😀',
  'ü' || repeat('x', 10), repeat('x', 10) || 'ü', repeat('x', 11) || 'ü', repeat('ü', 12),
  ' ', '  ', 'a b', '''', '"', '\', E'\t', E'\n', E'\r\n', E'a\tb\nc\\d', '%', '*', E'\x7f', E'\x01',
  'key', 'Key', 'KEY', '0', '-1', 'NULL', 'null'
]) k;

-- Execution ids: lowercase uuid hex, 32 chars (md5 makes them reproducible).
INSERT INTO golden_keys (kind, k)
SELECT 'text', md5('pgshard-golden-' || i) FROM generate_series(1, 120) i;

-- One uuid in three spellings: the bytes differ, so the buckets do.
INSERT INTO golden_keys (kind, k) VALUES
  ('text', 'a0eebc999c0b4ef8bb6d6bb9bd380a11'),
  ('text', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'),
  ('text', 'A0EEBC999C0B4EF8BB6D6BB9BD380A11');

-- Long keys.
INSERT INTO golden_keys (kind, k) VALUES
  ('text', repeat('x', 100)), ('text', repeat('abc', 100)), ('text', repeat('日本', 200));

-- int8: edges of int4/int8 and the sign fold, then 24 pseudo-random values.
INSERT INTO golden_keys (kind, k)
SELECT 'int8', v::text FROM unnest(ARRAY[
  0, 1, -1, 2, -2, 42, 1024, 1025,
  2147483647, 2147483648, -2147483648, -2147483649,
  4294967295, 4294967296, -4294967295, -4294967296, 1099511627776,
  9223372036854775807, -9223372036854775808, 9223372036854775806, -9223372036854775807
]::bigint[]) v;
INSERT INTO golden_keys (kind, k)
SELECT 'int8', (('x' || substr(md5('pgshard-int8-' || i), 1, 16))::bit(64)::bigint)::text
FROM generate_series(1, 24) i;

CREATE TEMP VIEW golden AS
SELECT ord, kind, k, h,
       ((h::numeric + 18446744073709551616) % 18446744073709551616 + 5305509591434766563)
         % 18446744073709551616 AS ph
FROM (SELECT ord, kind, k,
             CASE kind WHEN 'text' THEN hashtextextended(k, 8816678312871386365)
                       ELSE hashint8extended(k::bigint, 8816678312871386365) END AS h
      FROM golden_keys) s;

-- Cross-check against real hash partitions (modulus 64).
CREATE TEMP TABLE pt (ord int, k text) PARTITION BY HASH (k);
CREATE TEMP TABLE pi (ord int, v bigint) PARTITION BY HASH (v);
SELECT format('CREATE TEMP TABLE pt_%s PARTITION OF pt FOR VALUES WITH (MODULUS 64, REMAINDER %s)', r, r),
       format('CREATE TEMP TABLE pi_%s PARTITION OF pi FOR VALUES WITH (MODULUS 64, REMAINDER %s)', r, r)
FROM generate_series(0, 63) r \gexec
INSERT INTO pt SELECT ord, k FROM golden_keys WHERE kind = 'text';
INSERT INTO pi SELECT ord, k::bigint FROM golden_keys WHERE kind = 'int8';
DO $$
DECLARE bad int;
BEGIN
  SELECT count(*) INTO bad
  FROM (SELECT ord, substring(tableoid::regclass::text from '_(\d+)$')::int AS rem FROM pt
        UNION ALL
        SELECT ord, substring(tableoid::regclass::text from '_(\d+)$')::int FROM pi) p
  JOIN golden g USING (ord)
  WHERE g.ph % 64 <> p.rem;
  IF bad <> 0 OR (SELECT count(*) FROM pt) + (SELECT count(*) FROM pi) <> (SELECT count(*) FROM golden_keys) THEN
    RAISE EXCEPTION '% golden rows disagree with PARTITION BY HASH (modulus 64)', bad;
  END IF;
END $$;

\echo '# Golden placement vectors for shardmap, produced by a live Postgres; do not edit.'
\echo '# Regenerate: psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p 55432 -U postgres -f shardmap/testdata/hash_golden.sql > shardmap/testdata/hash_golden.tsv'
SELECT '# server: ' || split_part(version(), ' (', 1) || ', encoding ' || current_setting('server_encoding')
       || ', collation ' || datcollate FROM pg_database WHERE datname = current_database();
\echo '# hashextended = hashtextextended(key, 8816678312871386365) or hashint8extended(key, 8816678312871386365);'
\echo '# bucketB = ((h::numeric + 2^64) % 2^64 + 5305509591434766563) % 2^64 % B  (= uint64(hash_combine64(0, h)) % B).'
\echo '# The generator asserted bucket64 = the REMAINDER of the real PARTITION BY HASH (MODULUS 64) partition'
\echo '# holding every text and int8 row. Separately (partition_check.sql, 2026-11-30, PG 15.18): 5000 random'
\echo '# text keys inserted into PARTITION BY HASH (k) with 8 partitions; the tableoid partition remainder'
\echo '# equaled PartitionHashText(k) % 8 (Go) for all 5000.'
SELECT $$# key uses COPY text escaping (\\ \t \n \r). Columns:$$;
\echo 'kind	key	hashextended	bucket4096	bucket64'
COPY (SELECT kind, k, h, ph % 4096, ph % 64 FROM golden ORDER BY ord) TO STDOUT;
