# The differential corpus (TestDifferential): one read statement per line,
# run against one plain Postgres database and against pgshard over 3 shards
# holding the same rows, in simple protocol, extended protocol, binary
# results, inside a transaction (alone, after a keyed read bound it, and
# after SET LOCAL extra_float_digits = 0 and set_config(..., true) in the
# block), with extra_float_digits = 0, and behind transaction-local
# settings (set_config(..., true) and SET LOCAL extra_float_digits = 0
# ahead of it in one pipeline — in its implicit transaction or inside a
# block — or in one query string), and under session TimeZone, DateStyle,
# IntervalStyle and extra_float_digits given at startup or by SET (and
# DateStyle and TimeZone by SET LOCAL in a block), and under the client
# encodings LATIN1 and EUC_JP. Each
# must be answered the same (rows,
# column types, command tag) or refused with 0A000.
#
# Line format:  [@unordered | @ties=COLS] SQL [ ;; JSON array of parameters ]
#   @unordered   compare the rows as a multiset (default when the statement
#                has no ORDER BY)
#   @ties=1,3    rows as a multiset, and the sequence of those columns must
#                match (an ORDER BY with ties)
#   @answered    pgshard must answer it (a refusal fails the test)
#   @staged      a read in two stages: pgshard must answer it (in every
#                mode, as @answered)
#   {execN}      the id of the data set's execution N (0..239)
# Parameters are text ("..."), null is NULL.
#
# Tables (differential_data_test.go): executions (240), outbox (180),
# timers (~290, fire_at in steps of 0.25 with ties), spawns (90), trace,
# processed_events, vals (200 rows of typed values: g group a..e/NULL, i2,
# i4, i8 (int8 sums beyond 64 bits), n numeric (scales 0..4), f4, f8 (NaN
# in group e), fbig (~1e21), ftiny (~1e-9), f4big, t text, b, d, ts, u).

# --- the seed store's reads, as its PostgresStore sends them ---------------
SELECT seq, target_id, event FROM outbox ORDER BY seq
SELECT seq, target_id, event FROM outbox ORDER BY seq LIMIT $1 ;; ["10"]
SELECT seq, COALESCE(target_id, ''), event FROM outbox ORDER BY seq LIMIT $1::bigint ;; ["25"]
@ties=3 SELECT execution_id, path, fire_at FROM timers WHERE fire_at <= $1 ORDER BY fire_at ;; ["1020.5"]
@ties=3 SELECT execution_id, path, fire_at FROM timers WHERE fire_at <= $1 ORDER BY fire_at ;; ["1100"]
@ties=3 SELECT execution_id, path, fire_at FROM timers WHERE fire_at <= $1 ORDER BY fire_at ;; ["999"]
SELECT execution_id, path, fire_at FROM timers WHERE fire_at <= $1::float8 ORDER BY fire_at, execution_id COLLATE "C", path COLLATE "C" LIMIT $2::bigint ;; ["1050", "20"]
SELECT execution_id, path, fire_at FROM timers WHERE fire_at <= $1::float8 ORDER BY fire_at, execution_id COLLATE "C", path COLLATE "C" LIMIT $2::bigint ;; ["1100", null]
SELECT seq, parent_id, child_id, root_path, context FROM spawns ORDER BY seq
SELECT seq, parent_id, child_id, root_path, context FROM spawns ORDER BY seq LIMIT $1 ;; ["7"]
SELECT id, definition_id, data FROM executions ORDER BY id LIMIT $1 ;; ["51"]
SELECT id, definition_id, data FROM executions WHERE id > $1 ORDER BY id LIMIT $2 ;; ["{exec5}", "11"]
SELECT id, definition_id, data FROM executions WHERE definition_id = $1 ORDER BY id LIMIT $2 ;; ["payment", "21"]
SELECT id, definition_id, data FROM executions WHERE definition_id = $1 AND id > $2 ORDER BY id LIMIT $3 ;; ["order", "{exec9}", "6"]
SELECT id, definition_id, data FROM executions WHERE data::jsonb->>'status' = ANY($1) ORDER BY id LIMIT $2 ;; ["{running,failed}", "31"]
SELECT id, definition_id, data FROM executions WHERE data::jsonb->>'status' = ANY($1) AND data::jsonb->>'parent_id' IS NULL ORDER BY id LIMIT $2 ;; ["{done}", "41"]
SELECT id, definition_id, data FROM executions WHERE data::jsonb->>'parent_id' IS NULL ORDER BY id LIMIT $1 ;; ["16"]
SELECT id, definition_id, data FROM executions WHERE data::jsonb->>'parent_id' IS NULL AND id > $1 ORDER BY id LIMIT $2 ;; ["{exec100}", "16"]
SELECT id, definition_id, data FROM executions WHERE definition_id = $1 AND data::jsonb->>'status' = ANY($2) AND data::jsonb->>'parent_id' IS NULL AND id > $3 ORDER BY id LIMIT $4 ;; ["shipment", "{running,waiting,done}", "", "101"]
SELECT e.id, e.definition_id, e.version, COALESCE(d.status, ''), COALESCE(d.parent_id, ''), d.outcome FROM executions e CROSS JOIN LATERAL jsonb_to_record(e.data::jsonb) AS d(status text, parent_id text, outcome jsonb) WHERE e.id COLLATE "C" > $1::text AND ($2::text = '' OR e.definition_id = $2::text) AND (cardinality($3::text[]) = 0 OR d.status = ANY($3::text[])) AND (NOT $4::bool OR COALESCE(d.parent_id, '') = '') ORDER BY e.id COLLATE "C" LIMIT $5::bigint ;; ["", "", "{}", "false", "26"]
SELECT e.id, e.definition_id, e.version, COALESCE(d.status, ''), COALESCE(d.parent_id, ''), d.outcome FROM executions e CROSS JOIN LATERAL jsonb_to_record(e.data::jsonb) AS d(status text, parent_id text, outcome jsonb) WHERE e.id COLLATE "C" > $1::text AND ($2::text = '' OR e.definition_id = $2::text) AND (cardinality($3::text[]) = 0 OR d.status = ANY($3::text[])) AND (NOT $4::bool OR COALESCE(d.parent_id, '') = '') ORDER BY e.id COLLATE "C" LIMIT $5::bigint ;; ["{exec3}", "ärger", "{failed,done}", "true", "9"]
SELECT data FROM executions WHERE id = $1 ;; ["{exec17}"]
SELECT data, EXISTS (SELECT 1 FROM processed_events WHERE execution_id = $1 AND event_id = $2) FROM executions WHERE id = $1 ;; ["{exec4}", "ev-3"]
SELECT idx AS index, entry FROM trace WHERE execution_id = $1 ORDER BY idx ;; ["{exec2}"]
SELECT count(*) FROM outbox
SELECT count(*) FROM timers WHERE fire_at <= $1 ;; ["1050"]

# --- pgshard's own store's reads (store/reads.go, store/list.go), as sent ---
SELECT seq, target_id, event FROM outbox ORDER BY seq LIMIT $1::bigint ;; [null]
SELECT seq, target_id, event FROM outbox ORDER BY seq LIMIT $1::bigint ;; ["7"]
SELECT seq, parent_id, child_id, root_path, context FROM spawns ORDER BY seq LIMIT $1::bigint ;; [null]
SELECT seq, parent_id, child_id, root_path, context FROM spawns ORDER BY seq LIMIT $1::bigint ;; ["3"]
SELECT execution_id, path, fire_at FROM timers WHERE fire_at <= $1::float8 ORDER BY fire_at, execution_id COLLATE "C", path COLLATE "C" LIMIT $2::bigint ;; ["1e9", null]
SELECT e.id, e.definition_id, e.version, COALESCE(d.status, ''), COALESCE(d.parent_id, ''), d.active_path, d.outcome FROM executions e CROSS JOIN LATERAL jsonb_to_record(e.data::jsonb) AS d(status text, parent_id text, active_path jsonb, outcome jsonb) WHERE e.id COLLATE "C" > $1::text AND ($2::text = '' OR e.definition_id = $2::text) AND (cardinality($3::text[]) = 0 OR d.status = ANY($3::text[])) AND (NOT $4::bool OR d.parent_id IS NULL) ORDER BY e.id COLLATE "C" LIMIT $5::bigint ;; ["", "", "{}", "false", "51"]
SELECT e.id, e.definition_id, e.version, COALESCE(d.status, ''), COALESCE(d.parent_id, ''), d.active_path, d.outcome FROM executions e CROSS JOIN LATERAL jsonb_to_record(e.data::jsonb) AS d(status text, parent_id text, active_path jsonb, outcome jsonb) WHERE e.id COLLATE "C" > $1::text AND ($2::text = '' OR e.definition_id = $2::text) AND (cardinality($3::text[]) = 0 OR d.status = ANY($3::text[])) AND (NOT $4::bool OR d.parent_id IS NULL) ORDER BY e.id COLLATE "C" LIMIT $5::bigint ;; ["{exec7}", "payment", "{running,done}", "true", "4"]

# --- plain reads: rows of every shard, concatenated -------------------------
SELECT id, version FROM executions
SELECT id, version FROM executions WHERE version > 6
SELECT * FROM timers WHERE path = 'root/t3'
SELECT seq, event FROM outbox WHERE target_id IS NULL
SELECT seq FROM outbox WHERE target_id = ''
SELECT id FROM executions WHERE id IN ('{exec1}', '{exec2}', '{exec3}', 'nope')
SELECT id, data::jsonb->>'status' FROM executions WHERE data::jsonb ? 'outcome'
SELECT id FROM executions WHERE definition_id LIKE 'R%'
SELECT id, i2, t FROM vals WHERE t = ''
SELECT id FROM vals WHERE t IS NULL
SELECT id, b FROM vals WHERE b
SELECT id FROM vals WHERE false
SELECT 1 AS one FROM executions WHERE version = 1
SELECT id, data FROM executions WHERE version BETWEEN 3 AND 4 AND definition_id <> 'order'
SELECT t.execution_id, t.path FROM timers t WHERE t.fire_at = 1000.25
SELECT execution_id, event_id FROM processed_events WHERE event_id LIKE 'ev-1%'
SELECT seq, root_path FROM spawns WHERE root_path IN ('root/r1', 'root/r3')
SELECT execution_id, count(*) AS n FROM trace GROUP BY execution_id
SELECT id, d, ts FROM vals WHERE d > '2024-06-01'
SELECT id, u FROM vals WHERE u IS NOT NULL AND i2 > 250
SELECT id FROM vals WHERE n > 5000 OR f8 < -100000
SELECT id, i8 FROM vals WHERE i8 > $1 ;; ["3000000000000000000"]
SELECT id FROM vals WHERE t = $1 ;; ["abc"]
SELECT id FROM vals WHERE t = ANY ($1) ;; ["{abc,Abc,\"\"}"]
SELECT id, g FROM vals WHERE g IS DISTINCT FROM 'a'
SELECT id FROM executions WHERE data::jsonb @> '{"status": "done"}'
SELECT id, data::jsonb->'outcome'->>'n' FROM executions WHERE data::jsonb->'outcome' IS NOT NULL AND data::jsonb->'outcome' <> 'null'::jsonb

# --- ORDER BY: k-way merge of sorted rows ----------------------------------
SELECT id, version FROM executions ORDER BY version, id
SELECT id, version FROM executions ORDER BY version DESC, id
SELECT id, version FROM executions ORDER BY 2 DESC, 1 DESC
SELECT id, version AS v FROM executions ORDER BY v, id DESC
SELECT id AS k FROM executions ORDER BY k
SELECT id FROM executions ORDER BY id DESC
SELECT id FROM executions ORDER BY version, id
SELECT id FROM executions ORDER BY version DESC, definition_id, id
SELECT id FROM executions ORDER BY definition_id COLLATE "C", id COLLATE "C"
SELECT id, definition_id FROM executions ORDER BY definition_id DESC, id
SELECT * FROM executions ORDER BY id
SELECT * FROM executions ORDER BY version DESC, id LIMIT 17
SELECT * FROM timers ORDER BY fire_at DESC, execution_id, path
SELECT *, version * 10 FROM executions ORDER BY 5 DESC, 1
SELECT id FROM executions ORDER BY length(data), id
SELECT id, version FROM executions ORDER BY version % 3, id DESC
SELECT id, version FROM executions ORDER BY version % 3 DESC, version, id
SELECT id FROM executions ORDER BY id COLLATE "C" DESC
SELECT id FROM executions e ORDER BY e.id
SELECT e.id FROM executions e ORDER BY id
SELECT id, data::jsonb->>'status' AS status FROM executions ORDER BY status NULLS FIRST, id
SELECT id, data::jsonb->>'status' AS status FROM executions ORDER BY status DESC NULLS LAST, id
@ties=3 SELECT execution_id, path, fire_at FROM timers ORDER BY fire_at
@ties=2 SELECT id, version FROM executions ORDER BY version
@ties=2 SELECT id, version FROM executions ORDER BY version DESC
@ties=1 SELECT definition_id, id FROM executions ORDER BY definition_id
SELECT seq, target_id FROM outbox ORDER BY target_id NULLS FIRST, seq
SELECT seq, target_id FROM outbox ORDER BY target_id DESC, seq DESC
SELECT seq FROM outbox ORDER BY seq DESC
SELECT seq, event FROM outbox ORDER BY event, seq
SELECT seq, parent_id FROM spawns ORDER BY parent_id, seq
SELECT execution_id, idx, entry FROM trace ORDER BY execution_id, idx
SELECT execution_id, idx FROM trace ORDER BY idx DESC, execution_id
SELECT id, t FROM vals ORDER BY t, id
SELECT id, t FROM vals ORDER BY t DESC NULLS LAST, id
SELECT id, t FROM vals ORDER BY t NULLS FIRST, id DESC
SELECT id, i2 FROM vals ORDER BY i2, id
SELECT id, i2 FROM vals ORDER BY i2 DESC NULLS LAST, id
SELECT id, i4 FROM vals ORDER BY i4, id
SELECT id, i4 FROM vals ORDER BY i4 NULLS FIRST, id
SELECT id, i8 FROM vals ORDER BY i8 DESC, id
SELECT id, n FROM vals ORDER BY n, id
SELECT id, n FROM vals ORDER BY n DESC NULLS LAST, id
SELECT id, f4 FROM vals ORDER BY f4, id
SELECT id, f4 FROM vals ORDER BY f4 DESC, id
SELECT id, f8 FROM vals ORDER BY f8, id
SELECT id, f8 FROM vals ORDER BY f8 DESC NULLS LAST, id
SELECT id, fbig FROM vals ORDER BY fbig, id
SELECT id, ftiny FROM vals ORDER BY ftiny DESC, id
SELECT id, f4big FROM vals ORDER BY f4big, id
SELECT id, b FROM vals ORDER BY b, id
SELECT id, b FROM vals ORDER BY b DESC NULLS LAST, id
SELECT id, d FROM vals ORDER BY d, id
SELECT id, d FROM vals ORDER BY d DESC, id
SELECT id, ts FROM vals ORDER BY ts, id
SELECT id, ts FROM vals ORDER BY ts DESC NULLS LAST, id
SELECT id, u FROM vals ORDER BY u, id
# Intervals (any IntervalStyle; '1 mon' equals '30 days'), times, times
# with time zone (ordered by UTC, then by zone), dates BC and past 9999.
@answered SELECT id, ts - timestamptz '2020-01-01' AS age FROM vals ORDER BY age, id
@answered SELECT id, make_interval(months => i4 % 3, days => (i2 % 40) - 20, secs => i4 % 7 * 0.25) AS iv FROM vals ORDER BY iv DESC, id LIMIT 40
@answered SELECT max(ts - timestamptz '2020-01-01'), min(make_interval(days => i4 % 30, hours => -(i2 % 9))) FROM vals
@answered SELECT DISTINCT make_interval(months => i4 % 2, days => i4 % 3) AS iv FROM vals ORDER BY iv
@answered SELECT g, max(make_interval(mins => i4 % 100)) AS m FROM vals GROUP BY g ORDER BY m, g
@answered SELECT id, ts::time AS tm FROM vals ORDER BY tm, id
@answered SELECT id, (ts::time AT TIME ZONE 'UTC') AT TIME ZONE interval '+05:30' AS tz FROM vals ORDER BY tz DESC NULLS LAST, id
@answered SELECT id, d - 800000 AS bc FROM vals ORDER BY bc, id
@answered SELECT id, d + 3000000 AS far, ts + interval '9000 years' AS farts FROM vals ORDER BY far DESC, farts, id
# Sums and averages of intervals (added field by field; avg divides as
# interval_div does), written in the session's IntervalStyle.
@answered SELECT sum(ts - timestamptz '2020-01-01'), avg(ts - timestamptz '2020-01-01'), count(*) FROM vals
@answered SELECT g, sum(make_interval(months => i4 % 3, days => i2 % 40, secs => i4 % 7 * 0.25)) AS s, avg(make_interval(days => i4 % 30, secs => i2 * 0.5)) AS a FROM vals GROUP BY g ORDER BY g
@answered SELECT g, avg(make_interval(months => i4 % 5 - 2)) AS a FROM vals GROUP BY g ORDER BY a DESC, g
@answered SELECT b, sum(make_interval(hours => -i2)) FILTER (WHERE i2 > 0) AS s FROM vals GROUP BY b HAVING sum(make_interval(hours => -i2)) FILTER (WHERE i2 > 0) IS NOT NULL ORDER BY s
SELECT id, g FROM vals ORDER BY g NULLS FIRST, id
SELECT id FROM vals ORDER BY i4 + i2, id
SELECT id FROM vals ORDER BY n * 2 DESC, id
SELECT id FROM vals ORDER BY t COLLATE "C", id
SELECT id, t FROM vals ORDER BY t COLLATE "POSIX" DESC, id
SELECT id FROM vals ORDER BY t COLLATE "en_US", id
SELECT id FROM vals ORDER BY lower(t), id
SELECT id, f8 FROM vals ORDER BY abs(f8), id LIMIT 12
SELECT id, i8, n FROM vals ORDER BY i8::numeric + n, id
SELECT id FROM executions ORDER BY version USING >, id

# --- LIMIT / OFFSET ---------------------------------------------------------
SELECT id FROM executions ORDER BY id LIMIT 0
SELECT id FROM executions ORDER BY id LIMIT 1
SELECT id FROM executions ORDER BY id LIMIT 5 OFFSET 0
SELECT id FROM executions ORDER BY id OFFSET 5
SELECT id FROM executions ORDER BY id OFFSET 239
SELECT id FROM executions ORDER BY id OFFSET 240
SELECT id FROM executions ORDER BY id OFFSET 1000
SELECT id FROM executions ORDER BY id LIMIT 7 OFFSET 233
SELECT id FROM executions ORDER BY id LIMIT ALL
SELECT id FROM executions ORDER BY id LIMIT ALL OFFSET 200
SELECT id FROM executions ORDER BY id LIMIT NULL
SELECT id FROM executions ORDER BY id LIMIT 3 OFFSET NULL
SELECT id FROM executions ORDER BY id LIMIT 4294967296 OFFSET 5
SELECT id FROM executions ORDER BY id LIMIT 4294967296
SELECT id FROM executions ORDER BY id LIMIT 2147483648 OFFSET 2147483648
SELECT id FROM executions ORDER BY id LIMIT 9223372036854775807 OFFSET 9223372036854775807
SELECT id FROM executions ORDER BY id LIMIT 9223372036854775807 OFFSET 1
SELECT id FROM executions ORDER BY id LIMIT 9223372036854775806 OFFSET 1
SELECT id FROM executions ORDER BY id LIMIT 9223372036854775808
SELECT id FROM executions ORDER BY id LIMIT -1
SELECT id FROM executions ORDER BY id OFFSET -1
SELECT id FROM executions ORDER BY id LIMIT 5 OFFSET -3
SELECT id FROM executions ORDER BY id LIMIT -5 OFFSET 3
SELECT id FROM executions ORDER BY id LIMIT '7'
SELECT id FROM executions ORDER BY id LIMIT '7' OFFSET '2'
SELECT id FROM executions ORDER BY id LIMIT 2.5
SELECT id FROM executions ORDER BY id LIMIT 2.4 OFFSET 1.5
SELECT id FROM executions ORDER BY id LIMIT 3::int2 OFFSET 2::int4
SELECT id FROM executions ORDER BY id FETCH FIRST 3 ROWS ONLY
SELECT id FROM executions ORDER BY id FETCH FIRST ROW ONLY
SELECT id FROM executions ORDER BY id OFFSET 2 ROWS FETCH NEXT 4 ROWS ONLY
@ties=2 SELECT id, version FROM executions ORDER BY version FETCH FIRST 3 ROWS WITH TIES
SELECT id FROM executions ORDER BY id LIMIT $1 OFFSET $2 ;; ["5", "3"]
SELECT id FROM executions ORDER BY id LIMIT $1 OFFSET $2 ;; ["0", "0"]
SELECT id FROM executions ORDER BY id LIMIT $1 OFFSET $2 ;; [null, "230"]
SELECT id FROM executions ORDER BY id LIMIT $1 OFFSET $2 ;; ["3", null]
SELECT id FROM executions ORDER BY id LIMIT $1 OFFSET $2 ;; ["9223372036854775807", "9223372036854775807"]
SELECT id FROM executions ORDER BY id LIMIT $1 OFFSET $2 ;; ["4294967296", "5"]
SELECT id FROM executions ORDER BY id LIMIT $1 OFFSET $2 ;; ["-1", "0"]
SELECT id FROM executions ORDER BY id LIMIT $1 OFFSET $2 ;; ["1", "-1"]
SELECT id FROM executions ORDER BY id OFFSET $1 ;; ["236"]
SELECT id FROM executions ORDER BY id OFFSET $1 ;; [null]
SELECT id FROM executions ORDER BY id LIMIT $1 ;; ["2"]
SELECT id FROM executions ORDER BY id LIMIT $1::int8 OFFSET $2::int8 ;; ["4", "4"]
SELECT id FROM executions ORDER BY id LIMIT $1::int4 ;; ["6"]
SELECT id, version FROM executions ORDER BY version DESC, id LIMIT 10 OFFSET 20
SELECT * FROM executions ORDER BY id LIMIT 3 OFFSET 3
SELECT seq FROM outbox ORDER BY seq LIMIT 10 OFFSET 170
SELECT id FROM executions LIMIT 0
SELECT id FROM executions LIMIT 1000
SELECT id FROM executions OFFSET 240
SELECT id FROM vals ORDER BY f8 NULLS FIRST, id LIMIT 10
SELECT id FROM vals ORDER BY n DESC NULLS FIRST, id LIMIT 5 OFFSET 5

# --- aggregates without GROUP BY: one row per shard, combined ---------------
SELECT count(*) FROM executions
SELECT count(*), count(version), sum(version), min(version), max(version) FROM executions
SELECT avg(version) FROM executions
SELECT count(*)::int FROM executions
SELECT count(*)::int2, count(*)::int8, count(*)::numeric, count(*)::float8, count(*)::float4, count(*)::text FROM executions
SELECT CAST(count(*) AS integer) AS n FROM executions
SELECT sum(version)::bigint, sum(version)::int, avg(version)::float8, avg(version)::int FROM executions
SELECT min(id), max(id) FROM executions
SELECT min(definition_id), max(definition_id) FROM executions
SELECT count(*) FILTER (WHERE version > 6), count(*) FILTER (WHERE definition_id = 'order') FROM executions
SELECT count(*) AS total, 'x' AS tag, 42 AS answer, NULL::int AS nothing FROM executions
SELECT count(DISTINCT id) FROM executions
SELECT count(DISTINCT execution_id) FROM timers
SELECT count(DISTINCT execution_id), count(*) FROM trace
SELECT count(DISTINCT definition_id) FROM executions
SELECT sum(DISTINCT version) FROM executions
SELECT min(DISTINCT version), max(DISTINCT path) FROM executions, timers WHERE timers.execution_id = executions.id
SELECT count(*), sum(version), avg(version), min(id) FROM executions WHERE false
SELECT count(*), sum(fire_at), avg(fire_at), max(fire_at) FROM timers WHERE fire_at > 5000
SELECT count(*) FROM executions HAVING count(*) > 100
SELECT count(*) FROM executions HAVING count(*) > 1000
SELECT count(*) FROM executions WHERE false HAVING count(*) = 0
SELECT sum(version) FROM executions HAVING sum(version) IS NOT NULL
SELECT max(version) FROM executions HAVING max(version) = 12 AND min(version) = 1
SELECT count(*), min(fire_at), max(fire_at), sum(fire_at), avg(fire_at) FROM timers
SELECT sum(fire_at)::numeric, avg(fire_at)::numeric, sum(fire_at)::text FROM timers
SELECT count(*), sum(idx), avg(idx) FROM trace
SELECT count(*), count(target_id), min(seq), max(seq), sum(seq), avg(seq) FROM outbox
SELECT count(i2), sum(i2), avg(i2), min(i2), max(i2) FROM vals
SELECT count(i4), sum(i4), avg(i4), min(i4), max(i4) FROM vals
SELECT count(i8), sum(i8), avg(i8), min(i8), max(i8) FROM vals
SELECT count(n), sum(n), avg(n), min(n), max(n) FROM vals
SELECT count(f4), sum(f4), min(f4), max(f4) FROM vals
SELECT sum(f4), sum(f8), sum(fbig), sum(ftiny), sum(f4big) FROM vals WHERE g IS DISTINCT FROM 'e'
SELECT sum(f8) FROM vals
SELECT max(f8), min(f8), max(f4), min(f4) FROM vals
SELECT avg(f8), avg(fbig), avg(ftiny) FROM vals WHERE g <> 'e'
SELECT avg(f4) FROM vals
SELECT avg(f4::float8) FROM vals WHERE g <> 'e'
SELECT sum(f4)::float8, sum(f4)::numeric, sum(f4)::int FROM vals WHERE g <> 'e'
SELECT sum(fbig)::numeric, sum(ftiny)::numeric, avg(ftiny)::float4 FROM vals
SELECT sum(f8)::numeric, sum(f8)::int8 FROM vals WHERE g <> 'e'
SELECT sum(i4)::int FROM vals
SELECT sum(i8)::bigint FROM vals
SELECT sum(i8)::float8, sum(i8)::float4, sum(i8)::text, avg(i8)::float8 FROM vals
SELECT sum(i2)::numeric, sum(i2)::int2, avg(i2)::float4, avg(i2)::int FROM vals
SELECT sum(n)::int, sum(n)::float8, avg(n)::int, avg(n)::float8, max(n)::int8, min(n)::float4 FROM vals
SELECT max(f8)::int FROM vals WHERE g <> 'e'
SELECT min(t), max(t) FROM vals
SELECT min(t COLLATE "C"), max(t COLLATE "C") FROM vals
SELECT min(d), max(d), min(ts), max(ts) FROM vals
SELECT count(b), count(u), count(*) FROM vals
SELECT count(*) FROM vals WHERE t = 'abc' AND b
SELECT sum(i4) FILTER (WHERE i4 > 0), sum(i4) FILTER (WHERE i4 < 0), avg(n) FILTER (WHERE g = 'a') FROM vals
SELECT sum(version) AS "Total", avg(version) AS "Mean" FROM executions
SELECT count(*) FROM executions ORDER BY 1
SELECT count(*) FROM executions LIMIT 0
SELECT count(*) FROM executions OFFSET 1
SELECT count(*) FROM executions LIMIT 5
SELECT sum(version) / count(*) FROM executions
SELECT max(version) + 1 FROM executions
SELECT coalesce(sum(i4), 0) FROM vals
SELECT string_agg(id, ',') FROM executions
SELECT array_agg(version ORDER BY version) FROM executions
SELECT bool_and(b), bool_or(b) FROM vals
SELECT bool_and(b), bool_or(b), every(b), count(*) FROM vals WHERE g = 'a'
SELECT g, bool_and(b), bool_or(b), every(i4 > 0) FROM vals GROUP BY g ORDER BY g COLLATE "C"
SELECT bool_and(b), bool_or(b) FROM vals WHERE b IS NULL
SELECT bool_and(b), bool_or(b) FROM vals WHERE false
SELECT bool_or(version > $1), bool_and(version > $1) FROM executions ;; ["3"]
SELECT g FROM vals GROUP BY g HAVING bool_or(b) = bool_and(b) ORDER BY 1
SELECT bool_and(DISTINCT b), bool_or(DISTINCT b) FROM vals
SELECT bool_and(b)::text FROM vals
SELECT bool_and(b)::int FROM vals
SELECT NOT bool_and(b) FROM vals
@ties=1 SELECT bool_or(b) FROM vals GROUP BY g ORDER BY 1
SELECT json_agg(id) FROM vals
SELECT stddev(version) FROM executions
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY version) FROM executions
SELECT count(*)::numeric(10,2) FROM executions
SELECT count(*)::varchar FROM executions
SELECT count(*) FROM executions WHERE id = '{exec7}'
SELECT count(*), sum(version) FROM executions WHERE id IN ('{exec1}', '{exec2}', '{exec3}', '{exec4}')
SELECT count(*) FROM executions WHERE version > $1 ;; ["5"]
SELECT sum(i8) FROM vals WHERE i8 > $1 ;; ["0"]
SELECT count(*) FROM executions HAVING count(*) > $1 ;; ["10"]
SELECT count(*) FROM executions HAVING count(*) > $1 ;; ["10000"]

# --- GROUP BY without a key: partial groups merged --------------------------
SELECT definition_id, count(*) FROM executions GROUP BY definition_id ORDER BY definition_id
SELECT definition_id, count(*) FROM executions GROUP BY definition_id
SELECT definition_id, count(*) FROM executions GROUP BY 1 ORDER BY 1 DESC
SELECT definition_id, count(*), sum(version), min(version), max(version), avg(version) FROM executions GROUP BY definition_id ORDER BY 1
SELECT definition_id AS d, count(*) AS n FROM executions GROUP BY definition_id ORDER BY n DESC, d
SELECT definition_id, count(*) FROM executions GROUP BY definition_id HAVING count(*) > 45 ORDER BY 1
SELECT definition_id, avg(version) FROM executions GROUP BY definition_id HAVING avg(version) > 6.5 ORDER BY 1
SELECT definition_id FROM executions GROUP BY definition_id HAVING max(version) = 12 AND min(version) = 1 ORDER BY 1
SELECT definition_id FROM executions GROUP BY definition_id HAVING NOT (count(*) < 50) ORDER BY 1
SELECT definition_id, count(*) FROM executions GROUP BY definition_id HAVING count(*) > $1 ORDER BY 1 ;; ["48"]
SELECT definition_id, count(*) FROM executions GROUP BY definition_id HAVING count(*) >= 40 OR definition_id = 'order' ORDER BY 1
SELECT definition_id, count(*) FROM executions GROUP BY definition_id HAVING count(*) BETWEEN 40 AND 50 ORDER BY 1
SELECT definition_id, count(*) FROM executions GROUP BY definition_id HAVING sum(version) % 2 = 0
SELECT definition_id, count(*) FROM executions GROUP BY definition_id ORDER BY count(*) DESC, 1
SELECT definition_id, count(*) FROM executions GROUP BY definition_id ORDER BY 2 DESC, 1 LIMIT 2
SELECT definition_id, count(*) FROM executions GROUP BY definition_id ORDER BY 2, 1 LIMIT 2 OFFSET 1
SELECT definition_id FROM executions GROUP BY definition_id ORDER BY avg(version), 1
SELECT definition_id, max(version) FROM executions GROUP BY definition_id ORDER BY definition_id LIMIT 3 OFFSET 1
SELECT definition_id, max(version) FROM executions GROUP BY definition_id ORDER BY definition_id LIMIT $1 OFFSET $2 ;; ["2", "2"]
SELECT count(*) FROM executions GROUP BY definition_id
SELECT count(*), definition_id FROM executions GROUP BY definition_id ORDER BY 2
SELECT version % 3, count(*) FROM executions GROUP BY version % 3 ORDER BY 1
SELECT version % 3 AS r, count(*) FROM executions GROUP BY 1 ORDER BY r DESC
SELECT data::jsonb->>'status' AS s, count(*) FROM executions GROUP BY 1 ORDER BY 1 NULLS FIRST
SELECT data::jsonb->>'status', definition_id, count(*) FROM executions GROUP BY 1, 2 ORDER BY 1, 2
SELECT data::jsonb->>'status', count(*) FROM executions GROUP BY data::jsonb->>'status' HAVING count(*) > 50
SELECT g, count(*), sum(i8), avg(n), sum(f8), sum(f4), min(t), max(t) FROM vals GROUP BY g ORDER BY g NULLS FIRST
SELECT g, count(*), sum(i2), sum(i4), avg(i4), avg(i2) FROM vals GROUP BY g ORDER BY g
SELECT g, sum(n), min(n), max(n), avg(n)::float8 FROM vals GROUP BY g ORDER BY g DESC NULLS LAST
SELECT g, sum(fbig), sum(ftiny), sum(f4big), avg(ftiny) FROM vals GROUP BY g ORDER BY 1
SELECT g, max(f8), min(f8), max(f4) FROM vals GROUP BY g ORDER BY 1
SELECT g, b, count(*) FROM vals GROUP BY g, b ORDER BY g, b
SELECT g, b, count(*) FROM vals GROUP BY b, g ORDER BY b DESC, g NULLS FIRST
SELECT b, count(*), sum(i4) FROM vals GROUP BY b ORDER BY b
SELECT d, count(*) FROM vals GROUP BY d ORDER BY d DESC LIMIT 5
SELECT date_trunc('month', d) AS m, count(*) FROM vals GROUP BY 1 ORDER BY 1
SELECT extract(year FROM ts), count(*) FROM vals GROUP BY 1 ORDER BY 1
SELECT t, count(*) FROM vals GROUP BY t ORDER BY t NULLS FIRST
SELECT t, count(*) FROM vals GROUP BY t ORDER BY 2 DESC, 1
SELECT lower(t), count(*) FROM vals GROUP BY lower(t) ORDER BY 1
SELECT i2 / 100, count(*) FROM vals GROUP BY 1 ORDER BY 1
SELECT round(n), count(*) FROM vals GROUP BY round(n) ORDER BY 2 DESC, 1 LIMIT 5
SELECT f4 > 0, count(*) FROM vals GROUP BY 1 ORDER BY 1
SELECT u, count(*) FROM vals WHERE i2 > 200 GROUP BY u ORDER BY u
SELECT path, count(*), min(fire_at), max(fire_at), avg(fire_at) FROM timers GROUP BY path ORDER BY path
SELECT path, count(DISTINCT execution_id) FROM timers GROUP BY path ORDER BY 1
SELECT path, count(DISTINCT fire_at) FROM timers GROUP BY path ORDER BY 1
SELECT target_id IS NULL, count(*) FROM outbox GROUP BY 1 ORDER BY 1
SELECT target_id, count(*) FROM outbox GROUP BY target_id HAVING count(*) > 1 ORDER BY 1 NULLS FIRST
SELECT root_path, count(*), min(seq), max(seq) FROM spawns GROUP BY root_path ORDER BY 1
SELECT idx, count(*) FROM trace GROUP BY idx ORDER BY idx
SELECT definition_id, count(*) FROM executions WHERE false GROUP BY definition_id
SELECT definition_id, count(*)::int FROM executions GROUP BY definition_id ORDER BY 1
SELECT definition_id, sum(version)::numeric, avg(version)::int FROM executions GROUP BY definition_id ORDER BY 1
SELECT definition_id, count(*) FROM executions GROUP BY ROLLUP (definition_id)
SELECT definition_id, count(*) FROM executions GROUP BY CUBE (definition_id, version)
SELECT definition_id, string_agg(id, ',') FROM executions GROUP BY 1
SELECT definition_id AS id, count(*) FROM executions GROUP BY id
SELECT lower(definition_id) AS definition_id, count(*) FROM executions GROUP BY definition_id
SELECT definition_id, count(*), rank() OVER (ORDER BY count(*)) FROM executions GROUP BY 1
SELECT definition_id, count(*) * 2 FROM executions GROUP BY 1
SELECT g, count(*) FROM vals GROUP BY g HAVING max(t) > 'a'
SELECT g, count(*) FROM vals GROUP BY g HAVING g IS NOT NULL ORDER BY 1
SELECT g, avg(f4) FROM vals GROUP BY g ORDER BY 1

# --- GROUP BY or DISTINCT with a sharding key: groups live on one shard -----
SELECT execution_id, count(*) FROM timers GROUP BY execution_id ORDER BY 2 DESC, 1 LIMIT 5
SELECT execution_id, max(idx) FROM trace GROUP BY execution_id HAVING max(idx) > 3 ORDER BY 1
SELECT parent_id, count(*) FROM spawns GROUP BY parent_id ORDER BY parent_id
SELECT e.id, count(t.path) FROM executions e LEFT JOIN timers t ON t.execution_id = e.id GROUP BY e.id ORDER BY 2 DESC, 1 LIMIT 10
SELECT execution_id, avg(fire_at), min(path) FROM timers GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 7
SELECT execution_id, count(*) FROM processed_events GROUP BY execution_id HAVING count(*) > 1 ORDER BY 2, 1
SELECT id, count(*) FROM vals GROUP BY id ORDER BY id LIMIT 3
SELECT DISTINCT execution_id FROM timers ORDER BY 1
SELECT DISTINCT execution_id, path FROM timers ORDER BY 2, 1 LIMIT 10
SELECT DISTINCT id, definition_id FROM executions ORDER BY 2, 1

# --- DISTINCT without a key: every shard sorts by every column --------------
SELECT DISTINCT definition_id FROM executions ORDER BY 1
SELECT DISTINCT definition_id FROM executions
SELECT DISTINCT g FROM vals ORDER BY g NULLS FIRST
SELECT DISTINCT g, b FROM vals ORDER BY 1, 2
SELECT DISTINCT b, g FROM vals ORDER BY 2 DESC, 1
SELECT DISTINCT version FROM executions ORDER BY version DESC LIMIT 3 OFFSET 1
SELECT DISTINCT path FROM timers ORDER BY path LIMIT 5
SELECT DISTINCT path FROM timers ORDER BY path OFFSET 10
SELECT DISTINCT n FROM vals WHERE g = 'a' ORDER BY n
SELECT DISTINCT f8 FROM vals ORDER BY 1 LIMIT 20
SELECT DISTINCT t FROM vals ORDER BY t
SELECT DISTINCT root_path FROM spawns
SELECT DISTINCT data::jsonb->>'status' FROM executions ORDER BY 1
SELECT DISTINCT version % 4 FROM executions ORDER BY 1 DESC
SELECT DISTINCT * FROM timers ORDER BY 1, 2
SELECT DISTINCT ON (definition_id) id FROM executions ORDER BY definition_id, id
SELECT DISTINCT definition_id FROM executions ORDER BY 1 LIMIT $1 ;; ["2"]

# --- UNION [ALL] of reads whose rows are each on one shard ----------------
# (merged: @answered); then set operations answered in two stages (each
# branch merged alone, the set operation on the default shard), which are
# refused behind transaction-local settings, as every two-stage read
@answered SELECT execution_id FROM timers UNION SELECT execution_id FROM trace
@answered SELECT execution_id FROM timers UNION ALL SELECT execution_id FROM trace
@answered SELECT definition_id FROM executions UNION SELECT root_path FROM spawns ORDER BY 1
@answered SELECT definition_id FROM executions UNION SELECT path FROM timers ORDER BY 1 DESC LIMIT 4 OFFSET 1
@answered SELECT g, b FROM vals UNION SELECT definition_id, version > 2 FROM executions ORDER BY 1 NULLS FIRST, 2
@answered SELECT n FROM vals UNION SELECT version FROM executions ORDER BY n
@answered SELECT f8 FROM vals UNION SELECT fire_at FROM timers ORDER BY 1 LIMIT 30
@answered @ties=1 SELECT version AS v, id FROM executions WHERE version > 5 UNION ALL SELECT idx, execution_id FROM trace ORDER BY v DESC
@answered SELECT id AS k FROM executions UNION ALL SELECT execution_id FROM timers ORDER BY k, 1 LIMIT $1 OFFSET $2 ;; ["7", "3"]
@answered SELECT e.id, t.path FROM executions e JOIN timers t ON t.execution_id = e.id WHERE e.version < 4 UNION ALL SELECT parent_id, root_path FROM spawns UNION ALL SELECT execution_id, event_id FROM processed_events
@answered SELECT execution_id, count(*) FROM trace GROUP BY execution_id UNION ALL SELECT id, version FROM executions ORDER BY 1, 2
@answered SELECT id FROM executions WHERE id = '{exec1}' UNION ALL SELECT id FROM executions WHERE id = '{exec2}' UNION ALL SELECT execution_id FROM timers WHERE execution_id = '{exec3}'
@answered SELECT id, version FROM executions WHERE id = $1 UNION SELECT execution_id, idx FROM trace WHERE execution_id = $2 ORDER BY 2, 1 ;; ["{exec4}", "{exec5}"]
@answered SELECT definition_id FROM executions UNION (SELECT path FROM timers UNION ALL SELECT root_path FROM spawns) ORDER BY 1 FETCH FIRST 5 ROWS WITH TIES
@answered SELECT * FROM timers WHERE fire_at < 1010 UNION ALL SELECT * FROM timers WHERE fire_at > 1090
SELECT execution_id FROM timers UNION ALL VALUES ('x')
SELECT execution_id FROM timers UNION ALL SELECT 'x'
(SELECT id FROM executions UNION SELECT execution_id FROM timers) UNION ALL SELECT execution_id FROM trace
@unordered SELECT id FROM executions UNION ALL (SELECT execution_id FROM timers ORDER BY 1 LIMIT 3)
SELECT id FROM executions EXCEPT SELECT execution_id FROM trace
SELECT definition_id, version FROM executions INTERSECT ALL SELECT definition_id, version FROM executions WHERE version > 1 ORDER BY 1, 2 LIMIT 10
SELECT path FROM timers EXCEPT ALL SELECT path FROM timers WHERE fire_at > 1050 ORDER BY 1
SELECT count(*) FROM timers UNION ALL SELECT count(*) FROM trace
SELECT e.id FROM executions e, timers t UNION ALL SELECT execution_id FROM trace

# --- subqueries of a SELECT without FROM: answered in two stages -----------
SELECT EXISTS(SELECT 1 FROM executions WHERE version = 3)
SELECT EXISTS(SELECT 1 FROM executions WHERE version = 99) AS e, NOT EXISTS (SELECT FROM timers) AS none
SELECT (SELECT count(*) FROM executions) AS n, (SELECT max(fire_at) FROM timers) AS last, (SELECT sum(idx) FROM trace)
SELECT 1 AS one WHERE EXISTS (SELECT 1 FROM timers WHERE path = $1) ;; ["root/t3"]
SELECT 'order' IN (SELECT definition_id FROM executions), 'nope' = ANY (SELECT definition_id FROM executions)
SELECT ARRAY(SELECT id FROM executions WHERE version = 2 ORDER BY id)
SELECT (SELECT id FROM executions ORDER BY id LIMIT 1 OFFSET $1) ;; ["4"]
SELECT (SELECT id FROM executions)
WITH c AS (SELECT id FROM executions) SELECT (SELECT count(*) FROM c)

# --- subqueries of WHERE / the select list that do not refer to the row: two stages, the statement routed as any read ---
@staged SELECT count(*) FROM executions WHERE id IN (SELECT execution_id FROM timers)
@staged SELECT id, version FROM executions WHERE version > (SELECT avg(version) FROM executions) ORDER BY version DESC, id LIMIT 7
@staged SELECT id FROM executions WHERE id NOT IN (SELECT execution_id FROM timers WHERE fire_at < 1010) ORDER BY id OFFSET 200
@staged SELECT id FROM executions WHERE id NOT IN (SELECT target_id FROM outbox) ORDER BY id
@staged SELECT count(*) FROM executions WHERE id NOT IN (SELECT execution_id FROM timers WHERE fire_at > 99999)
@staged SELECT definition_id, count(*), max(version) FROM executions WHERE EXISTS (SELECT 1 FROM timers WHERE fire_at > $1) GROUP BY 1 ORDER BY 1 ;; ["1050"]
@staged SELECT count(*) FROM executions WHERE NOT EXISTS (SELECT 1 FROM timers WHERE fire_at > $1) ;; ["1050"]
@staged SELECT id, (SELECT max(fire_at) FROM timers) AS last, (SELECT count(*) FROM trace) FROM executions WHERE version = 3 ORDER BY id
@staged SELECT id, data FROM executions WHERE id = '{exec7}' AND version <= (SELECT max(version) FROM executions)
@staged SELECT seq FROM spawns WHERE parent_id = '{exec3}' AND child_id NOT IN (SELECT execution_id FROM processed_events) ORDER BY seq
@staged SELECT path, fire_at FROM timers WHERE execution_id = $1 AND fire_at >= (SELECT min(fire_at) FROM timers) ORDER BY path ;; ["{exec11}"]
@staged SELECT e.id, t.path FROM executions e JOIN timers t ON t.execution_id = e.id WHERE t.fire_at = (SELECT max(fire_at) FROM timers) ORDER BY 1, 2
@staged SELECT definition_id FROM executions GROUP BY definition_id HAVING count(*) > (SELECT count(*) FROM executions) / 10 ORDER BY 1
@staged SELECT id FROM executions WHERE version = ANY (SELECT idx FROM trace WHERE idx < 3) AND id < '{exec50}' ORDER BY id
@staged SELECT DISTINCT version FROM executions WHERE version < ALL (SELECT idx + 3 FROM trace) ORDER BY 1
@staged SELECT o.seq FROM outbox o WHERE EXISTS (SELECT 1 FROM executions e WHERE e.id = o.target_id AND e.version > 3) ORDER BY o.seq
@staged SELECT count(*), count(o.target_id) FROM outbox o WHERE NOT EXISTS (SELECT 1 FROM timers t WHERE t.execution_id = o.target_id)
@staged SELECT o.seq, o.target_id FROM outbox o WHERE NOT EXISTS (SELECT 1 FROM timers t WHERE o.target_id = t.execution_id AND t.fire_at < $1) ORDER BY 1 LIMIT 40 ;; ["1030"]
@staged SELECT e.id, EXISTS (SELECT 1 FROM spawns s WHERE s.child_id = e.id) AS spawned FROM executions e WHERE e.version = 2 ORDER BY 1
@staged SELECT s.parent_id, count(*) FROM spawns s WHERE EXISTS (SELECT 1 FROM processed_events p WHERE p.execution_id = s.child_id) GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5
@staged SELECT id, (SELECT count(*) FROM timers) AS n FROM executions WHERE version = 2 ORDER BY (SELECT count(*) FROM timers), id
@staged SELECT seq, (SELECT min(fire_at) FROM timers) FROM outbox ORDER BY (SELECT max(version) FROM executions) DESC, seq LIMIT 10 OFFSET 3
@staged SELECT data FROM executions WHERE id = '{exec5}' AND EXISTS (SELECT 1 FROM timers WHERE execution_id = '{exec9}')
SELECT count(*) FROM outbox o WHERE EXISTS (SELECT count(*) FROM executions e WHERE e.id = o.target_id)
SELECT count(*) FROM outbox o WHERE NOT EXISTS (SELECT generate_series(1, e.version - 3) FROM executions e WHERE e.id = o.target_id)
SELECT id FROM executions WHERE id = (SELECT execution_id FROM timers ORDER BY fire_at DESC, execution_id, path LIMIT 1)
SELECT id FROM executions WHERE version = (SELECT version FROM executions)
SELECT id FROM executions e WHERE version > (SELECT count(*) FROM timers t WHERE t.path = e.definition_id) ORDER BY id
SELECT e.id, (SELECT count(*) FROM outbox o WHERE o.target_id = e.id) AS n FROM executions e ORDER BY 2 DESC, 1 LIMIT 10
SELECT o.seq, (SELECT min(t.fire_at) FROM timers t WHERE t.execution_id = o.target_id), (SELECT avg(r.idx) FROM trace r WHERE r.execution_id = o.target_id) FROM outbox o ORDER BY 1
@staged SELECT o.seq FROM outbox o WHERE EXISTS (SELECT 1 AS a FROM executions e WHERE e.id = o.target_id LIMIT 1) ORDER BY 1
@staged SELECT o.seq FROM outbox o WHERE NOT EXISTS (SELECT 1 FROM timers t WHERE t.execution_id = o.target_id ORDER BY t.fire_at LIMIT 1 OFFSET 0) ORDER BY 1
SELECT o.seq FROM outbox o WHERE EXISTS (SELECT 1 FROM executions e WHERE e.id = o.target_id LIMIT 0)
SELECT o.seq FROM outbox o WHERE EXISTS (SELECT 1 FROM timers t WHERE t.execution_id = o.target_id OFFSET 1) ORDER BY 1
SELECT e.id, (SELECT count(*) + 1 FROM outbox o WHERE o.target_id = e.id) FROM executions e ORDER BY 1
SELECT e.id, (SELECT max(o.seq) FROM outbox o WHERE o.target_id = e.id GROUP BY o.event) FROM executions e WHERE e.version = 3 ORDER BY 1
@staged SELECT count(*) FROM executions WHERE EXISTS (SELECT 1 FROM outbox WHERE target_id = id)
@staged SELECT o.seq, EXISTS (SELECT 1 FROM executions e WHERE e.id = o.target_id), NOT EXISTS (SELECT 1 FROM timers t WHERE t.execution_id = o.target_id) FROM outbox o ORDER BY 1
@staged SELECT s.seq, s.child_id FROM spawns s WHERE EXISTS (SELECT 1 FROM executions e WHERE e.id = s.child_id AND e.version = s.seq % 13) ORDER BY 1
@staged SELECT count(*) FROM spawns s WHERE NOT EXISTS (SELECT 1 FROM executions e WHERE e.id = s.child_id AND e.version = s.seq % 13 AND e.definition_id <> 'x')
@staged SELECT o.seq FROM outbox o WHERE EXISTS (SELECT 1 FROM processed_events p WHERE p.execution_id = o.target_id AND p.event_id = 'ev-' || (o.seq % 220)) ORDER BY 1
@staged SELECT seq, target_id FROM outbox WHERE NOT EXISTS (SELECT 1 FROM executions WHERE id = target_id) ORDER BY seq
@staged SELECT o.seq FROM outbox o WHERE EXISTS (SELECT 1 FROM executions WHERE version > 4 AND target_id = id) ORDER BY 1
@staged SELECT id FROM executions e WHERE EXISTS (SELECT 1 FROM timers WHERE execution_id = id AND fire_at > $1) ORDER BY id ;; ["1050"]
@staged SELECT id, (SELECT count(*) FROM timers WHERE execution_id = id) AS n FROM executions ORDER BY n DESC, id LIMIT 20
SELECT s.seq, (SELECT max(version) FROM executions WHERE id = child_id) FROM spawns s ORDER BY 1
SELECT seq FROM outbox o WHERE EXISTS (SELECT 1 FROM executions WHERE id = target_id AND version > seq)

# --- joins on the key, lateral functions -----------------------------------
SELECT e.id, t.path, t.fire_at FROM executions e JOIN timers t ON t.execution_id = e.id ORDER BY t.fire_at, e.id, t.path LIMIT 20
SELECT e.id, r.idx FROM executions e LEFT JOIN trace r ON r.execution_id = e.id WHERE e.version > 10 ORDER BY e.id, r.idx
SELECT e.definition_id, count(*) FROM executions e JOIN timers t ON t.execution_id = e.id GROUP BY 1 ORDER BY 1
SELECT count(*) FROM executions e JOIN processed_events p ON p.execution_id = e.id
SELECT e.id, p.event_id FROM executions e JOIN processed_events p USING (id) ORDER BY 1
SELECT e.id, t.path FROM executions e, timers t WHERE t.execution_id = e.id AND t.fire_at < 1003 ORDER BY 1, 2
SELECT s.seq, e.version FROM spawns s JOIN executions e ON e.id = s.parent_id ORDER BY s.seq
SELECT e.id, j.key FROM executions e, LATERAL jsonb_object_keys(e.data::jsonb) j(key) WHERE e.version = 3 ORDER BY 1, 2
SELECT e.id, x.n FROM executions e CROSS JOIN LATERAL (SELECT count(*) AS n FROM trace r WHERE r.execution_id = e.id) x ORDER BY x.n DESC, e.id LIMIT 5
SELECT t.execution_id, t.path, r.entry FROM timers t JOIN trace r ON r.execution_id = t.execution_id AND r.idx = 0 ORDER BY 1, 2
SELECT e.id, t.path FROM executions e RIGHT JOIN timers t ON t.execution_id = e.id WHERE t.fire_at > 1098 ORDER BY 2, 1
SELECT e.id, t.path FROM executions e FULL JOIN timers t ON t.execution_id = e.id WHERE e.version = 2 ORDER BY 1, 2
SELECT count(*) FROM executions e JOIN timers t ON t.path = e.definition_id
SELECT e.id FROM executions e JOIN outbox o ON o.target_id = e.id ORDER BY 1
SELECT a.id, b.id FROM executions a JOIN executions b ON a.version = b.version WHERE a.version = 1 ORDER BY 1, 2
SELECT count(*) FROM executions e, vals v WHERE v.t = e.definition_id

# --- subqueries and CTEs ----------------------------------------------------
SELECT id FROM executions WHERE id IN (SELECT execution_id FROM timers WHERE fire_at < 1010) ORDER BY id
SELECT id FROM executions WHERE id = ANY (SELECT execution_id FROM trace WHERE idx = 4) ORDER BY id
SELECT id FROM executions e WHERE EXISTS (SELECT 1 FROM trace r WHERE r.execution_id = e.id AND r.idx > 3) ORDER BY id
SELECT id FROM executions e WHERE NOT EXISTS (SELECT 1 FROM timers t WHERE t.execution_id = e.id) ORDER BY id
SELECT id, (SELECT count(*) FROM timers t WHERE t.execution_id = e.id) AS n FROM executions e ORDER BY n DESC, id LIMIT 10
SELECT id, (SELECT max(idx) FROM trace r WHERE r.execution_id = e.id) FROM executions e WHERE version = 5 ORDER BY 1
SELECT e.id FROM executions e WHERE EXISTS (SELECT 1 FROM timers t WHERE t.execution_id = e.id ORDER BY t.fire_at LIMIT 1) ORDER BY 1
SELECT id FROM executions WHERE id IN (SELECT execution_id FROM timers GROUP BY execution_id HAVING count(*) > 2) ORDER BY id
SELECT id FROM executions WHERE id IN (SELECT execution_id FROM timers ORDER BY fire_at LIMIT 5) ORDER BY id
@unordered SELECT id FROM executions WHERE id = ANY (SELECT execution_id FROM timers ORDER BY fire_at LIMIT 5)
SELECT id FROM executions WHERE id = '{exec11}' AND id IN (SELECT execution_id FROM timers ORDER BY fire_at LIMIT 5)
@unordered SELECT id FROM executions WHERE id IN (SELECT execution_id FROM timers ORDER BY execution_id, path OFFSET 100)
@unordered SELECT id FROM executions WHERE id IN (SELECT DISTINCT ON (path) execution_id FROM timers ORDER BY path, fire_at, execution_id)
@unordered SELECT id FROM executions WHERE id IN (SELECT execution_id FROM (SELECT execution_id, row_number() OVER (ORDER BY fire_at, execution_id, path) AS rn FROM timers) x WHERE rn <= 5)
SELECT id FROM executions WHERE version > (SELECT avg(version) FROM executions) ORDER BY id
SELECT id FROM executions WHERE id IN (SELECT max(execution_id) FROM timers) ORDER BY id
WITH t AS (SELECT execution_id FROM timers WHERE fire_at > 1090) SELECT id FROM executions WHERE id IN (SELECT execution_id FROM t) ORDER BY id
@unordered WITH t AS (SELECT execution_id FROM timers ORDER BY fire_at LIMIT 5) SELECT id FROM executions WHERE id IN (SELECT execution_id FROM t)
WITH t AS (SELECT execution_id, count(*) AS n FROM timers GROUP BY execution_id) SELECT e.id, t.n FROM executions e JOIN t ON t.execution_id = e.id ORDER BY 2 DESC, 1
WITH t AS (SELECT * FROM timers) SELECT * FROM t ORDER BY 1, 2
SELECT count(*) FROM (SELECT DISTINCT definition_id FROM executions) s
SELECT * FROM (SELECT id, version FROM executions) s ORDER BY 1
SELECT id FROM executions WHERE definition_id IN (SELECT 'order' UNION SELECT 'payment') ORDER BY id
SELECT id FROM executions WHERE definition_id IN (VALUES ('order'), ('Refund')) ORDER BY id
SELECT id FROM executions WHERE version IN (SELECT generate_series(1, 3)) ORDER BY id
SELECT id, (SELECT count(*) FROM executions) FROM executions ORDER BY 1 LIMIT 3
SELECT id FROM executions WHERE id IN (SELECT parent_id FROM spawns) ORDER BY id
SELECT id FROM executions e WHERE version = (SELECT max(version) FROM executions x WHERE x.id = e.id) ORDER BY id LIMIT 5

# --- shapes that need every shard's rows at once ---------------------------
@unordered SELECT id, rank() OVER (ORDER BY version) FROM executions
SELECT id, row_number() OVER (PARTITION BY definition_id ORDER BY id) FROM executions
SELECT id FROM executions INTERSECT SELECT execution_id FROM trace
SELECT id FROM executions WHERE version = 1 FOR UPDATE
SELECT id, version FROM executions TABLESAMPLE BERNOULLI (100) ORDER BY 1
SELECT nextval('outbox_seq_seq') FROM executions LIMIT 1
# windows over peers answered in two stages when their ORDER BY says the
# order (ties broken here, so one database's answer is the only one)
@staged SELECT a.id, lag(a.id) OVER (ORDER BY a.id), row_number() OVER (PARTITION BY a.definition_id ORDER BY a.version, a.id) FROM executions a WHERE a.version > 1 AND lower(a.definition_id) <> 'x' ORDER BY a.id
@staged SELECT t.execution_id, t.path, sum(t.fire_at) OVER w, first_value(t.path) OVER w FROM timers t WHERE t.fire_at > $1 WINDOW w AS (PARTITION BY t.path ORDER BY t.fire_at, t.execution_id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) ORDER BY 2, 1 ;; ["1040"]
@staged SELECT DISTINCT ON (s.root_path) s.root_path, s.seq, s.child_id FROM spawns s ORDER BY s.root_path, s.seq DESC
@staged SELECT a.id, count(*) OVER () FROM executions a WHERE a.id IN ('{exec1}', '{exec2}', '{exec3}') ORDER BY 1
@staged SELECT id, lag(id) OVER (ORDER BY id), version FROM executions WHERE version > 3 AND definition_id <> 'x' ORDER BY id
@staged SELECT count(DISTINCT (definition_id, version)), count(DISTINCT ROW(version % 3, definition_id)) FROM executions
@staged SELECT count(DISTINCT (definition_id, version)) FROM executions WHERE version > 2
# terms of the WHERE copied into a table read whole: never a table on the
# nullable side of an outer join (an anti-join by IS NULL would keep rows
# it must drop)
@staged SELECT e.id, s.seq FROM executions e LEFT JOIN spawns s ON s.child_id = e.id WHERE s.seq IS NULL AND e.version > 1 ORDER BY e.id
@staged SELECT e.id, s.seq FROM spawns s RIGHT JOIN executions e ON s.child_id = e.id WHERE (s.seq IS NULL OR s.seq > 3) AND e.id <> '{exec3}' ORDER BY e.id, s.seq
@staged SELECT r.execution_id, r.idx, t.path FROM trace r FULL JOIN timers t ON t.fire_at = r.idx + 1000 WHERE r.idx > 1 OR t.path IS NULL ORDER BY 1, 2, 3
@staged SELECT count(*), sum(e.version) FROM executions e JOIN spawns s ON s.parent_id = e.data::jsonb->>'parent_id' WHERE e.version >= $1 AND s.root_path <> 'root/r1' ;; ["2"]
# ON terms naming one table: pushed into an inner join's sides and an
# outer join's nullable side, never its preserved side (whose rows all
# stay, NULL-extended)
@staged SELECT e.id, s.seq FROM executions e LEFT JOIN spawns s ON s.child_id = e.id AND s.seq > 3 AND e.version > 5 ORDER BY 1, 2
@staged SELECT e.id, s.seq FROM spawns s RIGHT JOIN executions e ON s.child_id = e.id AND s.root_path = 'root/r2' AND e.version < 3 ORDER BY 1, 2
@staged SELECT count(*), count(s.seq), count(t.path) FROM executions e JOIN spawns s ON s.child_id = e.id AND e.version > 1 LEFT JOIN timers t ON t.execution_id = s.parent_id AND t.fire_at > 1040 AND s.seq > 2
@staged SELECT r.execution_id, t.path FROM trace r FULL JOIN timers t ON t.fire_at = r.idx + 1000 AND t.path = 'root/t3' AND r.idx > 1 ORDER BY 1, 2
# keys of two shards, or a keyed read of another shard beside an unsharded
# table: each table read on its key's shard first (never whole)
@staged SELECT e.data, t.path FROM executions e, timers t WHERE e.id = '{exec1}' AND t.execution_id = '{exec2}' ORDER BY 2
@staged SELECT e.id, count(t.path) FROM executions e LEFT JOIN timers t ON t.execution_id = $2 WHERE e.id = $1 GROUP BY 1 ;; ["{exec5}", "{exec6}"]
@staged SELECT a.version FROM executions a WHERE NOT EXISTS (SELECT 1 FROM lookup b WHERE b.k = a.id AND b.v > 'm') AND a.id IN ('{exec7}', '{exec8}') ORDER BY 1
# parts no read answers alone, taken apart (the deep plan)
@staged SELECT d.id, d.n FROM (SELECT x.id, count(*) AS n FROM executions x JOIN spawns y ON y.child_id = x.id GROUP BY x.id) d WHERE d.n > 0 ORDER BY d.n DESC, d.id LIMIT 7
@staged SELECT id FROM executions WHERE id IN (SELECT t.execution_id FROM timers t JOIN spawns s ON s.child_id = t.execution_id WHERE s.seq > 2) ORDER BY id
@staged WITH c AS (SELECT 2 AS two) SELECT d.id FROM (SELECT id FROM executions, c WHERE version > c.two ORDER BY id LIMIT 5) d ORDER BY 1
@staged SELECT e.id FROM executions e, timers t WHERE t.execution_id = e.data UNION ALL SELECT execution_id FROM trace WHERE idx = 1 ORDER BY 1
# subqueries that refer to the row off the keys: their tables read first,
# stage 2 runs them per row (the correlated plan), within a budget
@staged SELECT e.id, (SELECT count(*) FROM spawns s WHERE s.child_id = e.id AND s.seq > 1) AS n FROM executions e WHERE e.version > 1 ORDER BY n DESC, e.id
@staged SELECT e.id, x.seq FROM executions e JOIN LATERAL (SELECT s.seq FROM spawns s WHERE s.child_id = e.id ORDER BY s.seq DESC LIMIT 2) x ON true ORDER BY 1, 2
@staged SELECT e.id, x.seq FROM executions e LEFT JOIN LATERAL (SELECT s.seq FROM spawns s WHERE s.root_path <> e.definition_id AND s.parent_id = e.data::jsonb->>'parent_id' ORDER BY s.seq LIMIT 1) x ON true WHERE e.version < 4 ORDER BY 1, 2
@staged SELECT o.seq FROM outbox o WHERE EXISTS (SELECT 1 FROM executions b WHERE b.id = o.target_id AND b.version > o.seq % 5) ORDER BY 1
@staged SELECT o.seq FROM outbox o WHERE o.seq > ALL (SELECT s.seq FROM spawns s WHERE s.parent_id = o.target_id) ORDER BY 1
@staged SELECT count(*) FROM timers WHERE NOT EXISTS (SELECT 1 FROM spawns b WHERE child_id = execution_id)
@staged SELECT lower(definition_id), version FROM executions WHERE (SELECT count(*) FROM spawns b WHERE child_id <> id) >= 2 AND version BETWEEN 2 AND $1::int ORDER BY 1, 2 ;; ["9"]
@staged SELECT seq, CASE WHEN EXISTS (SELECT NULL FROM timers b WHERE execution_id = target_id AND fire_at <= 1050) THEN 'y' ELSE 'n' END FROM outbox ORDER BY 1

# --- keyed reads: one shard answers ----------------------------------------
SELECT * FROM vals WHERE id = 'v001'
SELECT * FROM vals WHERE id = $1 ;; ["v042"]
SELECT id, version, definition_id FROM executions WHERE id = $1 ;; ["{exec30}"]
SELECT path, fire_at FROM timers WHERE execution_id = $1 ORDER BY path ;; ["{exec12}"]
SELECT count(*), max(idx) FROM trace WHERE execution_id = $1 ;; ["{exec1}"]
SELECT * FROM outbox WHERE seq = 1
SELECT * FROM outbox WHERE seq = $1::bigint ;; ["2"]
SELECT * FROM spawns WHERE parent_id = $1 ORDER BY seq ;; ["{exec20}"]
SELECT id FROM executions WHERE id = $1 AND version > $2 ;; ["{exec21}", "0"]
SELECT e.id, t.path FROM executions e JOIN timers t ON t.execution_id = e.id WHERE e.id = $1 ORDER BY 2 ;; ["{exec40}"]
SELECT id FROM executions WHERE id IN ($1, $2, $3) ORDER BY id ;; ["{exec50}", "{exec51}", "{exec52}"]
SELECT count(*) FROM timers WHERE execution_id IN ('{exec60}', '{exec61}', '{exec62}', '{exec63}')
SELECT id FROM executions WHERE id = 'no-such-id'
SELECT 1, 'x', now() IS NOT NULL
SELECT version()  IS NOT NULL

# --- more parameters and types ---------------------------------------------
SELECT id, i4 FROM vals WHERE i4 > $1 ORDER BY i4, id LIMIT $2 ;; ["0", "9"]
SELECT id FROM vals WHERE d > $1::date ORDER BY d, id ;; ["2024-08-01"]
SELECT id, ts FROM vals WHERE ts >= $1 ORDER BY ts DESC, id LIMIT 5 ;; ["2024-03-05 00:00:00+00"]
SELECT g, count(*) FROM vals WHERE n > $1 GROUP BY g ORDER BY g ;; ["0"]
SELECT g, sum(i8) FROM vals WHERE t <> $1 GROUP BY 1 ORDER BY 1 NULLS FIRST ;; ["abc"]
SELECT definition_id, count(*) FROM executions WHERE version >= $1 GROUP BY 1 HAVING count(*) >= $2 ORDER BY 2 DESC, 1 ;; ["3", "30"]
SELECT id FROM vals WHERE f8 = $1 ;; ["NaN"]
SELECT id FROM vals WHERE u = $1 ;; ["00000000-0000-4000-8000-000000000001"]
SELECT id, n FROM vals WHERE n BETWEEN $1 AND $2 ORDER BY n, id ;; ["-100.5", "100.25"]
SELECT max(n) - min(n) FROM vals
SELECT count(*) FROM vals WHERE i2 IS NULL OR i4 IS NULL
SELECT min(i2 + i4), max(i8 - 1) FROM vals
SELECT sum(i2 * 2), sum(i4::int8 * 3), avg(n * 2) FROM vals
SELECT sum(abs(f8)) FROM vals WHERE g <> 'e'
SELECT g, sum(i4 / 1000) FROM vals GROUP BY g ORDER BY 1
SELECT sum(version::numeric / 4) FROM executions
SELECT avg(version::numeric / 3) FROM executions
SELECT avg(fire_at - 1000) FROM timers
SELECT sum(fire_at * 1000000000000) FROM timers
SELECT min(fire_at * 1e20), max(fire_at * 1e-10) FROM timers
SELECT sum(i8 / 1000000000) FROM vals
SELECT sum(i8::numeric * i8) FROM vals
SELECT count(*) FROM vals WHERE t LIKE $1 ;; ["a%"]
SELECT id, t || '!' AS x FROM vals WHERE t IS NOT NULL ORDER BY x, id LIMIT 15
SELECT id, length(t) FROM vals ORDER BY 2 DESC NULLS LAST, 1 LIMIT 10
SELECT t, max(i2) FROM vals GROUP BY t ORDER BY 2 DESC NULLS LAST, 1 NULLS FIRST
SELECT id, f8::text FROM vals ORDER BY id LIMIT 10
SELECT id, (f4 * 3)::real FROM vals WHERE g = 'b' ORDER BY 2, 1
SELECT sum(f4 * 3) FROM vals WHERE g = 'b'

# --- fan-out rule: rows that do not come from one shard are refused; the merge's own sort columns never collide with the client's names ---
@answered SELECT e.version, v.w FROM (VALUES ('{exec1}', 0), ('{exec2}', 1), ('nope', 2)) AS v(k, w) LEFT JOIN executions e ON e.id = v.k WHERE v.w <> $1 ;; ["5"]
@answered SELECT v.w, count(e.id) FROM (VALUES ('{exec1}', 0), ('{exec2}', 1), ('nope', 2)) AS v(k, w) LEFT JOIN executions e ON e.id = v.k GROUP BY v.w ORDER BY v.w
# a VALUES list kept whole by an outer join on the key is split by shard: each shard gets the rows whose key it owns
@answered SELECT v.k, v.w, t.path FROM (VALUES ('{exec1}', 0), ('{exec2}', 1), ('{exec3}', 2), ('{exec1}', 3), (NULL, 4), ('nope', 5)) AS v(k, w) LEFT JOIN timers t ON t.execution_id = v.k ORDER BY v.w, t.path NULLS FIRST
@answered SELECT v.k, count(t.path), min(t.fire_at) FROM (VALUES ('{exec4}'), ('{exec5}'), ('{exec6}'), (NULL)) AS v(k) LEFT JOIN timers t ON t.execution_id = v.k GROUP BY v.k ORDER BY 1 NULLS FIRST
@answered SELECT v.w, r.idx FROM (VALUES ('{exec7}', 1.5), ('{exec8}', 2), ('{exec9}', $1)) AS v(k, w) FULL JOIN trace r ON r.execution_id = v.k AND r.idx < 3 ORDER BY r.execution_id, r.idx, v.w LIMIT 40 ;; ["7"]
@answered SELECT count(*), count(v.k), count(r.idx) FROM (VALUES ('{exec7}', 1), ('{exec8}', 2)) AS v(k, w) FULL JOIN trace r ON r.execution_id = v.k
@answered SELECT v.column2, e.version FROM executions e RIGHT JOIN (VALUES ('{exec10}', 'a'), ('{exec11}', 'b'), ('x', 'c')) AS v ON e.id = v.column1 ORDER BY 1
@answered SELECT v.k, s.seq FROM (VALUES ('{exec12}'), ('{exec13}'), ('{exec14}')) AS v(k) LEFT JOIN spawns s ON s.parent_id = v.k ORDER BY 1, 2 NULLS FIRST
@answered SELECT DISTINCT v.w FROM (VALUES ('{exec1}', 0), ('{exec2}', 0), ('{exec3}', 1)) AS v(k, w) LEFT JOIN executions e ON e.id = v.k ORDER BY 1
@answered SELECT e.id, v.w FROM (VALUES ('{exec15}', 0), ('{exec16}', 1), ('{exec17}', 2)) AS v(k, w) LEFT JOIN executions e ON v.k = e.id AND e.version >= 0 ORDER BY v.w OFFSET 1 LIMIT 1
@answered SELECT v.k, t.path FROM unnest(ARRAY['{exec18}', '{exec19}', NULL, '{exec18}', 'nope']) AS v(k) LEFT JOIN timers t ON t.execution_id = v.k ORDER BY 1 NULLS FIRST, 2 NULLS FIRST
@answered SELECT count(*), count(v.k), count(e.id) FROM unnest(ARRAY['{exec20}', '{exec21}']) AS v(k) FULL JOIN executions e ON e.id = v.k
SELECT v FROM unnest(ARRAY['{exec20}', '{exec21}']) AS v(k) LEFT JOIN executions e ON e.id = v.k
SELECT e.version, v.w FROM (VALUES ('{exec1}', 0), ('{exec2}', 1)) AS v(k, w) LEFT JOIN executions e ON e.definition_id = v.k
SELECT e.version, v.w FROM (VALUES ('{exec1}', 0), ('{exec2}', 1)) AS v(k, w) LEFT JOIN executions e ON e.id = v.k OR e.version = v.w
SELECT e.id, v.w FROM executions e LEFT JOIN (VALUES ('{exec1}', 0), ('{exec2}', 1)) AS v(k, w) ON e.id = v.k ORDER BY e.id LIMIT 20
SELECT g, t.path FROM generate_series(1, 3) AS g FULL JOIN timers t ON t.fire_at = g ORDER BY 1, 2 FETCH FIRST 5 ROWS ONLY
SELECT id FROM executions ORDER BY id::uuid, id
SELECT execution_id, path FROM timers ORDER BY execution_id::uuid, execution_id, path LIMIT 30
SELECT execution_id, idx FROM trace ORDER BY idx::int8, idx, execution_id
SELECT id AS pgshard_1, version FROM executions ORDER BY version::int8, pgshard_1

# --- co-located joins on the execution id, pushed down to every shard and merged ---
SELECT e.id, t.path, t.fire_at FROM executions e JOIN timers t ON t.execution_id = e.id ORDER BY t.fire_at DESC, e.id, t.path LIMIT 25 OFFSET 3
SELECT e.id, count(r.idx), max(r.idx) FROM executions e LEFT JOIN trace r ON r.execution_id = e.id GROUP BY e.id ORDER BY 2 DESC, 1 LIMIT 20
SELECT e.definition_id, count(*), count(p.event_id) FROM executions e LEFT JOIN processed_events p ON p.execution_id = e.id GROUP BY e.definition_id ORDER BY 1
SELECT s.parent_id, s.child_id, e.version FROM spawns s JOIN executions e ON e.id = s.parent_id ORDER BY s.seq
SELECT count(*), sum(e.version) FROM executions e WHERE EXISTS (SELECT 1 FROM timers t WHERE t.execution_id = e.id AND t.fire_at > $1) ;; ["1050"]
SELECT e.id FROM executions e WHERE NOT EXISTS (SELECT 1 FROM trace r WHERE r.execution_id = e.id) ORDER BY e.id LIMIT 15
SELECT e.id, e.version FROM executions e WHERE e.id IN (SELECT p.execution_id FROM processed_events p WHERE p.event_id > 'ev-50') ORDER BY e.version, e.id
SELECT e.id FROM executions e WHERE e.id NOT IN (SELECT s.parent_id FROM spawns s) ORDER BY e.id DESC LIMIT 10
SELECT e.id, t.path, r.idx FROM executions e FULL JOIN timers t ON t.execution_id = e.id LEFT JOIN trace r ON r.execution_id = e.id ORDER BY 1, 2, 3 LIMIT 40
WITH c AS (SELECT execution_id, count(*) AS n FROM timers GROUP BY execution_id) SELECT e.id, c.n FROM executions e JOIN c ON c.execution_id = e.id ORDER BY c.n DESC, e.id LIMIT 12
SELECT d.id, d.n FROM (SELECT e.id, count(t.path) AS n FROM executions e LEFT JOIN timers t ON t.execution_id = e.id GROUP BY e.id) d WHERE d.n > 1 ORDER BY d.n, d.id
SELECT execution_id, idx, row_number() OVER (PARTITION BY execution_id ORDER BY idx DESC) FROM trace ORDER BY execution_id, idx
SELECT DISTINCT ON (execution_id) execution_id, path, fire_at FROM timers ORDER BY execution_id, fire_at DESC, path LIMIT 30
SELECT DISTINCT ON (definition_id) definition_id, id FROM executions ORDER BY definition_id, id
SELECT DISTINCT ON (definition_id) definition_id, id, version FROM executions ORDER BY definition_id DESC NULLS LAST, version DESC, id LIMIT 3 OFFSET 1
SELECT DISTINCT ON (path) path, execution_id, fire_at FROM timers ORDER BY path, fire_at DESC, execution_id
SELECT DISTINCT ON (2, 1) version, definition_id, id FROM executions ORDER BY definition_id, version, id
SELECT DISTINCT ON (g) g, i4, id FROM vals ORDER BY g NULLS FIRST, i4 DESC, id
SELECT DISTINCT ON (b, g) b, g, id FROM vals ORDER BY g, b, id LIMIT $1 ;; ["4"]
SELECT DISTINCT ON (version % 3) version % 3, id FROM executions WHERE version > $1 ORDER BY version % 3, id ;; ["2"]
SELECT DISTINCT ON (lower(path)) lower(path), execution_id FROM timers ORDER BY lower(path), execution_id, path
SELECT DISTINCT ON (definition_id) id FROM executions ORDER BY definition_id, id
SELECT DISTINCT ON (definition_id, version) definition_id, id FROM executions ORDER BY definition_id, id
SELECT DISTINCT ON (definition_id) definition_id, id FROM executions
SELECT count(DISTINCT t.execution_id), count(*) FROM executions e LEFT JOIN timers t ON t.execution_id = e.id
SELECT e.definition_id, count(DISTINCT t.execution_id) FROM executions e LEFT JOIN timers t ON t.execution_id = e.id GROUP BY e.definition_id ORDER BY 1 NULLS FIRST
WITH c AS (SELECT x.execution_id AS c1, x.path FROM timers x) SELECT count(*), count(DISTINCT c.c1) FROM c
SELECT count(DISTINCT d.k) FROM (SELECT execution_id AS k FROM trace WHERE idx > $1) d ;; ["1"]
SELECT count(DISTINCT seq), sum(DISTINCT seq), avg(DISTINCT seq) FROM outbox
SELECT count(DISTINCT s.parent_id), count(DISTINCT s.seq) FROM executions e FULL JOIN spawns s ON s.parent_id = e.id
SELECT count(DISTINCT t.path) FROM executions e LEFT JOIN timers t ON t.execution_id = e.id
@unordered SELECT definition_id, count(*) FROM executions GROUP BY definition_id ORDER BY count(*) DESC FETCH FIRST 1 ROWS WITH TIES
@unordered SELECT version, count(*) FROM executions GROUP BY version ORDER BY count(*) FETCH FIRST 2 ROWS WITH TIES
@unordered SELECT version % 3, version, max(id) FROM executions GROUP BY version % 3, version ORDER BY 1 DESC FETCH FIRST 2 ROWS WITH TIES
SELECT version % 3, version, max(id) FROM executions GROUP BY version % 3, version ORDER BY 3 OFFSET 2 FETCH FIRST 2 ROWS WITH TIES
@unordered SELECT g, sum(i4) FROM vals GROUP BY g HAVING count(*) > 1 ORDER BY g NULLS FIRST FETCH FIRST 2 ROWS WITH TIES
SELECT count(*), max(version) FROM executions ORDER BY count(*) FETCH FIRST 3 ROWS WITH TIES
SELECT min(a.execution_id) FROM timers a WHERE a.fire_at < 1025 ORDER BY min(a.execution_id) DESC NULLS FIRST, min(a.execution_id) FETCH FIRST 3 ROWS WITH TIES
SELECT count(*) FROM executions ORDER BY 1 FETCH FIRST 0 ROWS WITH TIES
@unordered SELECT execution_id, count(*) FROM timers GROUP BY execution_id ORDER BY count(*) DESC FETCH FIRST 3 ROWS WITH TIES
@unordered SELECT path, count(*) FROM timers GROUP BY path ORDER BY count(*) DESC, path FETCH FIRST 3 ROWS WITH TIES
SELECT e.id, v.w FROM executions e JOIN (VALUES ('order', 1), ('payment', 2)) AS v(k, w) ON v.k = e.definition_id ORDER BY e.id LIMIT 10
SELECT s.seq, e.id FROM spawns s JOIN executions e ON e.id = s.child_id ORDER BY s.seq
SELECT o.seq, e.version FROM outbox o JOIN executions e ON e.id = o.target_id ORDER BY o.seq
WITH c AS (SELECT id FROM executions) SELECT count(*) FROM c a JOIN c b ON a.id < b.id
SELECT count(*) FROM (SELECT DISTINCT definition_id FROM executions) d
@ties=2 SELECT execution_id, fire_at FROM timers ORDER BY fire_at FETCH FIRST 7 ROWS WITH TIES
@ties=2 SELECT execution_id, fire_at FROM timers ORDER BY fire_at DESC OFFSET 3 FETCH FIRST 5 ROWS WITH TIES
@unordered SELECT e.id, t.fire_at FROM executions e JOIN timers t ON t.execution_id = e.id ORDER BY e.version FETCH FIRST 1 ROW WITH TIES
@unordered SELECT id FROM executions ORDER BY version FETCH FIRST 0 ROWS WITH TIES
@unordered SELECT id FROM executions ORDER BY version FETCH FIRST $1 ROWS WITH TIES ;; ["3"]
# FETCH ... WITH TIES that no merge answers, in two stages (the rows that
# tie with the last are all kept: the same rows in any order read)
@staged @unordered SELECT DISTINCT definition_id FROM executions ORDER BY definition_id FETCH FIRST 2 ROWS WITH TIES
@staged SELECT count(*), sum(version) FROM executions ORDER BY count(*) FETCH FIRST 3 ROWS WITH TIES
@staged SELECT count(*) FROM executions WHERE version > 2 HAVING count(*) > 1 ORDER BY 1 OFFSET 1 FETCH FIRST 2 ROWS WITH TIES
@staged SELECT avg(t.fire_at), count(*) FROM timers t JOIN spawns s ON s.child_id = t.execution_id ORDER BY 2 DESC FETCH FIRST 1 ROW WITH TIES
@staged SELECT min(b.version), max(a.fire_at) FROM timers a RIGHT JOIN executions b ON b.id = a.execution_id ORDER BY min(b.version) DESC, 1 DESC FETCH FIRST 2 ROWS WITH TIES
@staged SELECT min(a.execution_id), count(*) FROM timers a WHERE a.fire_at < 1025 ORDER BY min(a.execution_id) DESC NULLS FIRST, min(a.execution_id) FETCH FIRST 3 ROWS WITH TIES
@staged @unordered SELECT a.seq + 1 FROM outbox a RIGHT JOIN timers b ON b.execution_id = a.target_id ORDER BY a.seq + 1 NULLS LAST FETCH FIRST 6 ROWS WITH TIES
@staged @unordered SELECT s.root_path, s.seq FROM spawns s JOIN executions e ON e.id = s.child_id ORDER BY s.root_path FETCH FIRST 3 ROWS WITH TIES

# --- string_agg ordered by its value, count(DISTINCT x) of a non-key (issue 18) ---
# The shards send array_agg of their values; the merge orders / dedups the
# union. NULLs skipped, no rows (NULL / 0), ties across shards, DISTINCT,
# DESC, COLLATE "C", FILTER, GROUP BY with NULL groups, HAVING, mixed types.
@answered SELECT string_agg(path, ',' ORDER BY path) FROM timers
@answered SELECT string_agg(t, '|' ORDER BY t) FROM vals
@answered SELECT string_agg(t, '|' ORDER BY t DESC) FROM vals WHERE t IS NULL OR t = ''
@answered SELECT string_agg(t, '' ORDER BY t NULLS FIRST) FROM vals WHERE id IS NULL
@answered SELECT string_agg(DISTINCT path, ', ' ORDER BY path DESC) FROM timers
@answered SELECT string_agg(definition_id, ',' ORDER BY definition_id COLLATE "C") FROM executions WHERE version > 1
@answered SELECT g, string_agg(t, ';' ORDER BY t) FILTER (WHERE i4 > 0), count(*) FROM vals GROUP BY g ORDER BY g NULLS FIRST
@answered SELECT g, string_agg(DISTINCT t, ',' ORDER BY t) FROM vals GROUP BY g HAVING string_agg(t, ',' ORDER BY t) IS NOT NULL ORDER BY 2, 1
@answered SELECT e.definition_id, string_agg(t.path, '/' ORDER BY t.path) FROM executions e LEFT JOIN timers t ON t.execution_id = e.id GROUP BY 1 ORDER BY 1
@answered SELECT string_agg(e.id, ',' ORDER BY e.id) FROM executions e WHERE e.id IN ('{exec1}', '{exec2}', '{exec3}', 'nope')
@answered SELECT string_agg(d::text, ',' ORDER BY d::text) FROM vals WHERE d IS NOT NULL
@answered SELECT string_agg(t, E'\n' ORDER BY t) AS s, max(t) FROM vals WHERE g = 'a'
SELECT string_agg(i4, ',' ORDER BY i4) FROM vals
@answered SELECT count(DISTINCT definition_id) FROM executions
@answered SELECT count(DISTINCT path), count(DISTINCT fire_at), count(*) FROM timers
@answered SELECT count(DISTINCT g), count(DISTINCT i2), count(DISTINCT i4), count(DISTINCT i8), count(DISTINCT n) FROM vals
@answered SELECT count(DISTINCT f4), count(DISTINCT f8), count(DISTINCT fbig), count(DISTINCT t), count(DISTINCT b), count(DISTINCT d), count(DISTINCT ts), count(DISTINCT u) FROM vals
@answered SELECT g, count(DISTINCT n), count(DISTINCT f8) FILTER (WHERE i4 > 0) FROM vals GROUP BY g ORDER BY 1 NULLS LAST
@answered SELECT count(DISTINCT t) FROM vals WHERE false
@answered SELECT g, count(DISTINCT t)::int4 AS c FROM vals GROUP BY g ORDER BY c DESC, g NULLS FIRST
@answered SELECT count(DISTINCT t.path) FROM executions e LEFT JOIN timers t ON t.execution_id = e.id
@answered SELECT definition_id, count(DISTINCT version) FROM executions GROUP BY definition_id HAVING count(DISTINCT version) > 1 ORDER BY 1
@answered SELECT count(DISTINCT (n * 10)::int8), count(DISTINCT i4 % 3) FROM vals
# Reads in two stages (proxy/route/twostage.go): inner statements merged first, the rest on one shard over their rows (refused inside a transaction block).
SELECT a.id, b.seq FROM executions a JOIN outbox b ON b.target_id = a.id ORDER BY b.seq
@unordered SELECT id, rank() OVER (ORDER BY version), dense_rank() OVER (ORDER BY definition_id) FROM executions WHERE version > 3
SELECT x.id FROM (SELECT id FROM executions WHERE version < 0 ORDER BY id LIMIT 3) x
SELECT x.n + $2::int FROM (SELECT count(*) AS n FROM executions WHERE version > $1::int) x ;; ["2", "5"]
WITH c AS (SELECT definition_id, count(*) AS n FROM executions GROUP BY definition_id) SELECT max(n), sum(n) FROM c
SELECT v.w, count(e.id) FROM generate_series(0, 4) AS v(w) LEFT JOIN executions e ON e.version = v.w GROUP BY v.w ORDER BY v.w

# --- an unsharded table (lookup: on the default shard alone; the other
# shards have it empty) beside sharded ones: its subqueries are read on
# the default shard first (stage 1), the statement then fans out with
# their rows; joined with a sharded table, the sharded rows are read
# first and the join runs on the default shard --------------------------
@staged SELECT id, version FROM executions WHERE id IN (SELECT k FROM lookup) ORDER BY id
@staged SELECT count(*) FROM executions WHERE id NOT IN (SELECT k FROM lookup WHERE k IS NOT NULL)
@staged SELECT count(*) FROM executions WHERE definition_id IN (SELECT v FROM lookup)
@staged SELECT definition_id, count(*) FROM executions WHERE definition_id NOT IN (SELECT v FROM lookup) GROUP BY 1 ORDER BY 1
@staged SELECT definition_id, count(*) FROM executions WHERE definition_id NOT IN (SELECT v FROM lookup WHERE v IS NOT NULL) GROUP BY 1 ORDER BY 1
@staged SELECT id, (SELECT max(n) FROM lookup) AS top FROM executions ORDER BY id LIMIT 5
@staged SELECT id, (SELECT n FROM lookup WHERE k = 'none-4') FROM executions ORDER BY id LIMIT 3
@staged SELECT id, (SELECT w FROM lookup ORDER BY w DESC NULLS LAST, k LIMIT 1) FROM executions ORDER BY id DESC LIMIT 3
@staged SELECT count(*) FROM executions WHERE version > ALL (SELECT w FROM lookup WHERE w IS NOT NULL)
@staged SELECT count(*) FROM executions WHERE version > ALL (SELECT w FROM lookup)
@staged SELECT count(*) FROM executions WHERE version = ANY (SELECT w FROM lookup)
@staged SELECT count(*), sum(version) FROM executions WHERE version < (SELECT avg(w) FROM lookup)
@staged SELECT id FROM executions e WHERE EXISTS (SELECT 1 FROM lookup l WHERE l.k = e.id) ORDER BY id
@staged SELECT id FROM executions e WHERE NOT EXISTS (SELECT 1 FROM lookup l WHERE l.k = e.id) ORDER BY id LIMIT 10
@staged SELECT count(*) FROM executions WHERE EXISTS (SELECT 1 FROM lookup WHERE w > 11)
@staged SELECT count(*) FROM outbox WHERE target_id IN (SELECT k FROM lookup WHERE w > 6)
@staged SELECT t.execution_id, count(*) FROM timers t WHERE t.execution_id IN (SELECT k FROM lookup WHERE v = $1) GROUP BY 1 ORDER BY 2 DESC, 1 ;; ["order"]
@staged SELECT id, definition_id FROM executions WHERE definition_id IN (SELECT v FROM lookup WHERE w = $1) ORDER BY id LIMIT 7 ;; ["3"]
@staged SELECT e.id, l.n, l.w FROM executions e JOIN lookup l ON l.k = e.id ORDER BY e.id
@staged SELECT l.v, count(e.id) FROM lookup l LEFT JOIN executions e ON e.id = l.k GROUP BY 1 ORDER BY 1
@staged SELECT l.k, e.version FROM lookup l JOIN executions e ON e.id = l.k WHERE l.w > $1 ORDER BY 1 ;; ["8"]
SELECT id FROM executions WHERE id = '{exec8}' AND id IN (SELECT k FROM lookup)
SELECT count(*), sum(n), max(w) FROM lookup
SELECT v, sum(n) FROM lookup GROUP BY 1 ORDER BY 1
@staged SELECT count(*) FROM executions WHERE EXISTS (SELECT 1 FROM lookup WHERE k = id)
@staged SELECT id FROM executions WHERE NOT EXISTS (SELECT 1 FROM lookup WHERE k = id AND w > 3) ORDER BY id LIMIT 5
SELECT count(*) FROM executions e WHERE EXISTS (SELECT 1 FROM lookup l WHERE l.w > e.version)
@staged SELECT id FROM executions UNION ALL SELECT k FROM lookup
@staged SELECT k FROM lookup INTERSECT SELECT id FROM executions
SELECT count(*) FROM (SELECT v FROM lookup EXCEPT SELECT definition_id FROM executions) x
# lookup's columns with type modifiers: stage 2 casts their rows back
@staged SELECT id, (SELECT vc FROM lookup WHERE vc IS NOT NULL ORDER BY vc LIMIT 1) FROM executions ORDER BY id LIMIT 3
@staged SELECT id, (SELECT nm FROM lookup WHERE k = 'none-9'), (SELECT tsp FROM lookup ORDER BY tsp NULLS LAST LIMIT 1), (SELECT ch FROM lookup ORDER BY ch LIMIT 1) FROM executions ORDER BY id LIMIT 3
@staged SELECT count(*) FROM executions WHERE id IN (SELECT vc FROM lookup)
@staged SELECT id, version FROM executions WHERE version::numeric IN (SELECT nm FROM lookup) OR id IN (SELECT vc FROM lookup WHERE nm > 0) ORDER BY id
@staged SELECT e.id, l.vc, l.nm, l.tsp, l.ch FROM executions e JOIN lookup l ON l.k = e.id ORDER BY e.id
@staged SELECT l.* FROM lookup l JOIN executions e ON e.id = l.vc ORDER BY l.k
@staged SELECT k, vc, nm FROM lookup WHERE vc IN (SELECT id FROM executions WHERE version > 6) ORDER BY k
@staged SELECT max(l.nm), min(l.tsp), count(l.ch) FROM lookup l WHERE l.k IN (SELECT id FROM executions)
SELECT id FROM executions WHERE id = '{exec12}' AND id IN (SELECT vc FROM lookup)
SELECT e.id, l.nm FROM executions e JOIN lookup l ON l.k = e.id WHERE e.id = '{exec12}'
# a CTE, derived table or set operation's branch that joins lookup with a
# sharded table stays on the default shard, its sharded table read first
@staged WITH c AS (SELECT e.id, e.version, l.v FROM executions e JOIN lookup l ON l.k = e.id) SELECT v, count(*), sum(version) FROM c GROUP BY v ORDER BY v
@staged SELECT d.v, d.n FROM (SELECT l.v, count(*) AS n FROM lookup l LEFT JOIN timers t ON t.execution_id = l.k GROUP BY l.v) d ORDER BY 1
@staged SELECT x.k FROM (SELECT k FROM lookup UNION SELECT id FROM executions WHERE version > 10) x ORDER BY 1
@staged SELECT count(*) FROM executions WHERE id IN (SELECT l.k FROM lookup l JOIN timers t ON t.execution_id = l.k)
# --- a global table (gdefs: the same rows on every shard) beside sharded ones
SELECT count(*), sum(rank) FROM gdefs
SELECT name, owner FROM gdefs ORDER BY rank
SELECT g.name, count(e.id) FROM gdefs g LEFT JOIN executions e ON e.definition_id = g.name GROUP BY 1 ORDER BY 1
SELECT e.id, g.owner FROM executions e JOIN gdefs g ON g.name = e.definition_id ORDER BY e.id LIMIT 20
SELECT g.owner, count(*) FROM executions e JOIN gdefs g ON g.name = e.definition_id GROUP BY 1 ORDER BY 1
SELECT name FROM gdefs UNION ALL SELECT definition_id FROM executions WHERE version = 3
SELECT name FROM gdefs UNION SELECT definition_id FROM executions
SELECT name FROM gdefs EXCEPT SELECT definition_id FROM executions
SELECT g.name FROM gdefs g WHERE EXISTS (SELECT 1 FROM executions e WHERE e.definition_id = g.name) ORDER BY 1
SELECT g.name FROM gdefs g WHERE NOT EXISTS (SELECT 1 FROM executions e WHERE e.definition_id = g.name) ORDER BY 1
SELECT count(*) FROM executions WHERE definition_id IN (SELECT name FROM gdefs WHERE owner = 'team-a')
SELECT * FROM executions e RIGHT JOIN gdefs g ON e.definition_id = g.name WHERE e.id IS NULL
SELECT count(*) FROM gdefs, executions
SELECT data FROM executions e JOIN gdefs g ON g.name = e.definition_id WHERE e.id = '{exec3}'
SELECT count(*) FROM gdefs g JOIN lookup l ON l.v = g.name
SELECT count(*) FROM executions e JOIN gdefs g ON g.name = e.definition_id JOIN lookup l ON l.k = e.id
# a subquery naming the row's columns without a qualifier, one of them
# named like an aggregate (rank: b.rank would read as rank(b))
@staged SELECT count(*), sum(length(name)) FROM gdefs WHERE EXISTS (SELECT 1 FROM spawns b WHERE b.root_path <> name AND b.seq > rank AND b.seq IS NOT NULL)
@staged SELECT count(*), sum(length(name)) FROM gdefs WHERE EXISTS (SELECT 1 FROM outbox b WHERE b.target_id = name AND b.seq = rank AND b.seq IS NOT NULL)
@staged SELECT name, (SELECT count(*) FROM executions b WHERE definition_id = name AND version > rank) AS n FROM gdefs ORDER BY 1

# --- ad-hoc shapes a random query generator writes (ternary-logic partitions, NoREC sums, GROUP BY ROLLUP / GROUPING SETS, table column aliases, TABLE, ONLY, LIKE ... ESCAPE, SIMILAR TO, OVERLAPS, ...)
SELECT DISTINCT ON (definition_id) definition_id, id FROM executions ORDER BY definition_id, id DESC
SELECT definition_id, count(*) FILTER (WHERE version > 5), bool_or(version = 3) FROM executions GROUP BY ROLLUP (definition_id)
SELECT count(*) FROM executions WHERE (version > 5) IS NOT TRUE
SELECT count(*) FROM executions WHERE (version > 5) IS NULL
SELECT max(version) FROM (SELECT version FROM executions WHERE version > 3 UNION ALL SELECT version FROM executions WHERE NOT version > 3 UNION ALL SELECT version FROM executions WHERE version > 3 IS NULL) t
SELECT sum(CAST((version > 5) IS TRUE AS int)) FROM executions
SELECT id FROM executions ORDER BY version DESC NULLS FIRST, id COLLATE "C" LIMIT 5 OFFSET 3
SELECT version % 4 AS m, count(*) FROM executions GROUP BY 1 HAVING count(*) > 10 ORDER BY 2 DESC, 1
SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY version) FROM executions
SELECT count(DISTINCT (definition_id, version)) FROM executions
SELECT array_agg(DISTINCT version ORDER BY version) FROM executions
SELECT string_agg(DISTINCT definition_id, ',' ORDER BY definition_id) FROM executions
SELECT min(id), max(id), min(definition_id), max(definition_id) FROM executions
SELECT g, avg(i4), stddev_pop(i4), var_samp(i8) FROM vals GROUP BY g
SELECT sum(n) / count(*) FROM vals
SELECT i2 + i2 FROM vals ORDER BY 1 LIMIT 3
SELECT t, count(*) FROM vals GROUP BY t ORDER BY t COLLATE "C"
SELECT lower(t) AS lt, count(*) FROM vals GROUP BY lt ORDER BY count(*) DESC, lt COLLATE "C"
SELECT count(*) FROM vals WHERE f8 = 'NaN'::float8
SELECT max(f8), min(f8), max(f4), min(f4) FROM vals
SELECT DISTINCT b FROM vals
SELECT count(*) FROM vals WHERE u > '80000000-0000-0000-0000-000000000000'
SELECT date_trunc('month', ts) AS m, count(*) FROM vals GROUP BY 1 ORDER BY 1
SELECT ts::date, count(*) FROM vals GROUP BY 1 ORDER BY 1 LIMIT 5
SELECT to_char(ts, 'YYYY-MM'), count(*) FROM vals GROUP BY 1 ORDER BY 1
SELECT count(*) FILTER (WHERE b), count(*) FILTER (WHERE NOT b), count(*) FILTER (WHERE b IS NULL) FROM vals
SELECT x FROM generate_series(1, 14) x WHERE x IN (SELECT version FROM executions) ORDER BY 1
SELECT v.x FROM (VALUES (1), (2), (13), (99)) v(x) WHERE NOT EXISTS (SELECT 1 FROM executions WHERE version = v.x)
SELECT count(*) FROM executions e1 JOIN executions e2 USING (id)
SELECT e1.id FROM executions e1 NATURAL JOIN executions e2 ORDER BY 1 LIMIT 3
SELECT count(*) FROM executions e, timers t WHERE e.id = t.execution_id AND t.fire_at > e.version * 100
SELECT id, version, sum(version) OVER (PARTITION BY id) FROM executions ORDER BY id LIMIT 5
SELECT count(*) FROM executions WHERE id = ANY (ARRAY[(SELECT min(id) FROM executions)])
SELECT definition_id, count(*) FROM executions GROUP BY GROUPING SETS ((definition_id), ())
SELECT CASE WHEN version > 5 THEN 'hi' ELSE 'lo' END AS b, count(*) FROM executions GROUP BY 1 ORDER BY 1
SELECT count(*) FROM executions WHERE version BETWEEN SYMMETRIC 8 AND 3
SELECT definition_id FROM executions GROUP BY definition_id HAVING max(version) - min(version) > 5 ORDER BY 1
SELECT sum(version)::numeric / nullif(count(*), 0) FROM executions
SELECT avg(version)::numeric(10,3) FROM executions
SELECT round(avg(i4), 2), round(avg(n), 3) FROM vals
SELECT count(*) AS c FROM executions HAVING count(*) > 1000
SELECT 1 FROM executions HAVING count(*) > 0
SELECT count(*) FROM executions LIMIT 0
SELECT id FROM executions ORDER BY id LIMIT ALL OFFSET 235
SELECT id FROM executions ORDER BY id FETCH FIRST 0 ROWS ONLY
TABLE executions ORDER BY id LIMIT 3
SELECT * FROM ONLY executions ORDER BY id LIMIT 2
SELECT e.i, e.d FROM executions AS e(i, d) ORDER BY e.i LIMIT 2
SELECT count(*) FROM executions AS e(i, d) WHERE e.i = '{exec5}'
SELECT count(*) FROM executions WHERE id IN ('x', NULL)
SELECT count(*) FROM executions WHERE id NOT IN ('x', NULL)
SELECT count(*) FROM executions WHERE (id, version) = ('{exec3}', 3)
SELECT count(*) FROM executions WHERE (id, version) IN (('{exec3}', 3), ('{exec4}', 1))
SELECT count(*), max(version) FROM executions WHERE id IN (SELECT id FROM executions WHERE version = 3) AND version IN (SELECT version FROM executions WHERE id = '{exec3}')
SELECT sum(version) FROM executions GROUP BY () 
SELECT count(*) FROM executions GROUP BY true
SELECT id FROM executions WHERE id LIKE 'a%' ORDER BY id DESC LIMIT 3
SELECT count(*) FROM executions WHERE id ~ '^[0-9a]'
SELECT count(*) FROM executions WHERE definition_id ILIKE 'r%'
@answered SELECT count(*) FROM executions WHERE definition_id SIMILAR TO '(o|p)%'
SELECT version, count(*) FROM executions GROUP BY version ORDER BY count(*) DESC, version FETCH FIRST 3 ROWS WITH TIES
SELECT max(length(data)), min(length(data)) FROM executions
SELECT count(*) FROM executions WHERE data::jsonb ? 'status'
SELECT data::jsonb->>'status' AS s, count(*) FROM executions GROUP BY 1 ORDER BY 1 NULLS FIRST
SELECT count(*) FROM (SELECT DISTINCT definition_id, version FROM executions) d
SELECT count(*) FROM executions e WHERE e.version = (SELECT max(version) FROM executions e2 WHERE e2.id = e.id)
SELECT count(*) FROM executions WHERE version IN (SELECT max(version) FROM executions GROUP BY definition_id)
SELECT id IS NULL, count(*) FROM executions GROUP BY 1
SELECT count(*) FROM executions WHERE id IS DISTINCT FROM NULL AND version IS NOT DISTINCT FROM 3
SELECT abs(-version), sign(version - 6), count(*) FROM executions GROUP BY 1, 2 ORDER BY 1, 2
SELECT count(*) FROM executions WHERE coalesce(nullif(definition_id, 'order'), 'x') = 'x'
SELECT greatest(version, 5), least(version, 5), count(*) FROM executions GROUP BY 1, 2 ORDER BY 1, 2
SELECT count(*) FROM executions CROSS JOIN generate_series(1, 2)
SELECT count(*) FROM executions e LEFT JOIN LATERAL (SELECT * FROM timers t WHERE t.execution_id = e.id ORDER BY fire_at LIMIT 1) t1 ON true WHERE t1.path IS NULL
SELECT count(*) FROM executions e WHERE (SELECT count(*) FROM trace r WHERE r.execution_id = e.id) = 0
SELECT id FROM executions INTERSECT ALL SELECT execution_id FROM timers ORDER BY 1 LIMIT 5
SELECT version FROM executions EXCEPT ALL SELECT idx FROM trace ORDER BY 1
@answered SELECT count(*) FROM executions WHERE definition_id LIKE 'o\_%' ESCAPE '\'
@answered SELECT count(*) FROM executions WHERE definition_id NOT SIMILAR TO '%(e|a)%'
@answered SELECT count(*) FROM vals WHERE (d, d + 30) OVERLAPS ('2026-01-01'::date, '2026-03-01'::date)
@answered SELECT count(*) FROM vals WHERE t IS NFC NORMALIZED
# a LATERAL subquery tied to the row by the sharding key is evaluated per
# row on that row's shard: its LIMIT, aggregates, DISTINCT, windows fan out
@answered SELECT e.id, t1.path, t1.fire_at FROM executions e CROSS JOIN LATERAL (SELECT path, fire_at FROM timers t WHERE t.execution_id = e.id ORDER BY fire_at DESC, path LIMIT 2) t1 ORDER BY 1, 2
@answered SELECT e.id, t1.path FROM executions e LEFT JOIN LATERAL (SELECT path FROM timers t WHERE t.execution_id = e.id ORDER BY fire_at, path LIMIT 1) t1 ON true ORDER BY e.id LIMIT 30
@answered SELECT count(*), count(t1.n) FROM executions e LEFT JOIN LATERAL (SELECT count(*) AS n FROM trace r WHERE r.execution_id = e.id HAVING count(*) > 2) t1 ON true
@answered SELECT e.definition_id, sum(x.n) FROM executions e, LATERAL (SELECT count(DISTINCT r.entry) AS n FROM trace r WHERE r.execution_id = e.id) x GROUP BY 1 ORDER BY 1
@answered SELECT e.id, x.rn, x.path FROM executions e, LATERAL (SELECT path, row_number() OVER (ORDER BY fire_at, path) AS rn FROM timers t WHERE t.execution_id = e.id) x WHERE x.rn <= 2 ORDER BY 1, 2
@answered SELECT e.id, x.event_id FROM executions e, LATERAL (SELECT DISTINCT p.event_id FROM processed_events p WHERE p.execution_id = e.id ORDER BY 1 OFFSET 1 LIMIT 2) x ORDER BY 1, 2
@answered SELECT x.path, count(*) FROM executions e, LATERAL (SELECT t.path FROM timers t WHERE t.execution_id = e.id AND t.fire_at > $1 ORDER BY t.fire_at LIMIT 1) x GROUP BY 1 ORDER BY 2 DESC, 1 ;; ["1010"]
@answered SELECT e.id, x.idx FROM executions e JOIN LATERAL (SELECT r.idx FROM trace r JOIN timers t ON t.execution_id = r.execution_id WHERE r.execution_id = e.id ORDER BY r.idx DESC LIMIT 1) x ON true WHERE e.version > 6 ORDER BY 1
SELECT e.id, x.n FROM executions e, LATERAL (SELECT count(*) AS n FROM outbox o WHERE o.target_id = e.id) x ORDER BY 1
SELECT e.id, x.path FROM executions e, LATERAL (SELECT path FROM timers t WHERE t.fire_at > e.version * 100 ORDER BY fire_at, execution_id, path LIMIT 1) x ORDER BY 1
SELECT e.id, x.path FROM executions e, LATERAL (SELECT path FROM timers t WHERE t.execution_id = e.id OR t.path = 'root/t1' ORDER BY fire_at, execution_id, path LIMIT 1) x ORDER BY 1
SELECT e.id, x.m FROM executions e, LATERAL (SELECT max(t.fire_at) AS m FROM timers t WHERE t.execution_id = e.id AND t.path IN (SELECT path FROM timers t2 ORDER BY fire_at LIMIT 3)) x ORDER BY 1
# a keyed read joined with an unsharded table: the table is read whole on
# the default shard first, then joined on the key's shard
@staged SELECT e.id, e.version, l.v, l.nm, l.tsp FROM executions e JOIN lookup l ON l.k = e.id WHERE e.id = '{exec20}'
@staged SELECT e.id, l.vc FROM executions e LEFT JOIN lookup l ON l.k = e.id WHERE e.id = $1 ;; ["{exec21}"]
@staged SELECT l.k, e.version FROM lookup l LEFT JOIN executions e ON e.id = l.k AND e.id = $1 ORDER BY l.k ;; ["{exec24}"]
@staged SELECT count(*), max(l.w) FROM executions e JOIN lookup l ON l.v = e.definition_id WHERE e.id IN ($1, $2) ;; ["{exec30}", "{exec31}"]
@staged SELECT l.v, count(*), max(e.version) FROM executions e JOIN lookup l ON l.k = e.id GROUP BY l.v ORDER BY 1
@staged SELECT DISTINCT l.w FROM executions e JOIN lookup l ON l.k = e.id ORDER BY 1

# --- reads in two stages whose stages compute what settings change: behind
# extra_float_digits = 0 (the set-pipe, set-query and txn-set modes) each
# stage must set it first, stage 1 (on every shard) as much as stage 2
@staged SELECT count(*) FROM executions e WHERE (e.version::float8 / 3)::text IN (SELECT (o.seq::float8 / 3)::text FROM outbox o)
@staged SELECT e.id FROM executions e WHERE length((e.version::float8 / 3)::text) + 2 > (SELECT max(length((o.seq::float8 / 3)::text)) FROM outbox o) ORDER BY e.id
@staged SELECT d.t, d.n FROM (SELECT (x.version::float8 / 7)::text AS t, count(*) AS n FROM executions x JOIN outbox y ON y.target_id = x.id GROUP BY 1) d ORDER BY 1
@staged SELECT e.id, (SELECT (max(o.seq)::float8 / 3)::text FROM outbox o WHERE o.event = e.definition_id) FROM executions e ORDER BY e.id LIMIT 20

# --- operators under operators: what pgshard writes for the shards must put
# back the parentheses the statement had (pg_query's deparser writes
# (a OR b) IS NULL as a OR b IS NULL and (a IS DISTINCT FROM 1) IS NULL as
# a syntax error; route/deparse.go)
@answered SELECT id FROM executions WHERE (version IS DISTINCT FROM 2) IS NOT NULL ORDER BY id LIMIT 7 OFFSET 3
@answered SELECT id, (version > 3 OR version < 1) IS NOT TRUE FROM executions ORDER BY id LIMIT 9 OFFSET 1
@answered SELECT (version = 1) IN (true) AS v1, count(*) FROM executions GROUP BY 1 ORDER BY 1
@answered SELECT ((version % 2 = 0) OR (version > 5)) IS NULL AS n, avg(version) FROM executions GROUP BY 1 ORDER BY 1
@answered SELECT id, (NOT version > 2) = (version IS NULL) FROM executions ORDER BY id DESC LIMIT 5 OFFSET 5
@answered SELECT g, count(*) FILTER (WHERE (i4 > 0 AND i8 > 0) IS NOT FALSE), avg(i4) FROM vals GROUP BY g ORDER BY g NULLS FIRST
@answered SELECT id FROM vals WHERE (t LIKE 'a%') IS DISTINCT FROM (b IS TRUE) ORDER BY id LIMIT 11 OFFSET 2
@answered SELECT id, (i4 BETWEEN -5 AND 5) BETWEEN false AND true FROM vals ORDER BY id LIMIT 6 OFFSET 1
@answered SELECT max((i2 + 1) * 2), min(-(i4 - 3)), sum(2 ^ (i2 % 3)) FROM vals WHERE (i2 = 0 OR i2 = 1) IS NOT NULL
@staged SELECT e.id FROM executions e WHERE (e.version IS DISTINCT FROM 1) IS NOT NULL AND e.id IN (SELECT o.target_id FROM outbox o WHERE (o.seq > 3 OR o.seq < 2) IS TRUE) ORDER BY e.id

# --- NOT IN / ALL / ANY over a subquery that yields NULLs (three-valued
# logic: NOT IN a set holding NULL is never true)
SELECT id FROM vals WHERE i2 NOT IN (SELECT i2 FROM vals WHERE g = 'a') ORDER BY id
SELECT id FROM vals WHERE i4 NOT IN (SELECT v.i4 FROM vals v WHERE v.i4 IS NOT NULL AND v.g = 'b') ORDER BY id
SELECT count(*) FROM vals WHERE t NOT IN (SELECT t FROM vals WHERE id < 'v010')
SELECT id FROM vals WHERE (i2, g) NOT IN (SELECT i2, g FROM vals WHERE b) ORDER BY id
SELECT id FROM vals WHERE i2 > ALL (SELECT i2 FROM vals WHERE g = 'c') ORDER BY id
SELECT id FROM vals WHERE i2 = ANY (SELECT i2 FROM vals WHERE g = 'c' AND i2 IS NULL) ORDER BY id
SELECT id, i2 NOT IN (SELECT i2 FROM vals WHERE g = 'd') AS n FROM vals ORDER BY id LIMIT 30
SELECT g, count(*) FILTER (WHERE i2 NOT IN (SELECT i2 FROM vals WHERE g = 'e')) FROM vals GROUP BY g ORDER BY g NULLS FIRST
