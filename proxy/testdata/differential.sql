# The differential corpus (TestDifferential): one read statement per line,
# run against one plain Postgres database and against pgshard over 3 shards
# holding the same rows, in simple protocol, extended protocol, binary
# results, inside a transaction (alone, and after a keyed read bound it),
# and with extra_float_digits = 0. Each must be answered the same (rows,
# column types, command tag) or refused with 0A000.
#
# Line format:  [@unordered | @ties=COLS] SQL [ ;; JSON array of parameters ]
#   @unordered   compare the rows as a multiset (default when the statement
#                has no ORDER BY)
#   @ties=1,3    rows as a multiset, and the sequence of those columns must
#                match (an ORDER BY with ties)
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
