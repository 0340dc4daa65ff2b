-- One-off check that shardmap's bucket is the partition Postgres picks
-- (run 2026-11-30 against PG 15.18; result recorded in hash_golden.tsv's header):
--
--   psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p 55432 -U postgres \
--        -f shardmap/testdata/partition_check.sql > /tmp/partition_check.tsv
--
-- prints "key<TAB>remainder" (COPY text escaping) for 5000 random text keys
-- stored in a table PARTITION BY HASH (k) with 8 partitions, the remainder
-- read from the row's tableoid. Compare with PartitionHashText(key) % 8 in Go.
\set ON_ERROR_STOP on
SET client_min_messages = warning;
SET client_encoding = 'UTF8';
SELECT setseed(0.4242) AS seeded \gset
CREATE TEMP TABLE p8 (k text PRIMARY KEY) PARTITION BY HASH (k);
SELECT format('CREATE TEMP TABLE p8_%s PARTITION OF p8 FOR VALUES WITH (MODULUS 8, REMAINDER %s)', r, r)
FROM generate_series(0, 7) r \gexec
-- 3000 uuid-hex ids, 1000 random-length ASCII strings, 1000 with multibyte characters.
INSERT INTO p8
SELECT md5(random()::text || i) FROM generate_series(1, 3000) i
UNION ALL
SELECT left(md5(random()::text) || md5(random()::text), 1 + (random() * 63)::int) || '#' || i FROM generate_series(1, 1000) i
UNION ALL
SELECT repeat(chr(192 + (random() * 4000)::int), 1 + (random() * 20)::int) || i FROM generate_series(1, 1000) i;
COPY (SELECT k, substring(tableoid::regclass::text from '_(\d+)$') FROM p8) TO STDOUT;
