# Part of scripts/demo.sh (sourced): unmodified clients through the proxy.
pdsn=$("$bin" dev status --dir "$dir" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['proxy_dsn'])")

# A second id on demo-1's shard, for a two-row INSERT that stays on one
# shard (by the map in force: the grow step below moves ranges, and a
# reused cluster starts from where the last run left them).
owners=$("$bin" map bucket --config "$cfg" demo-1 demo-1x demo-1x{2..40})
twin=$(awk -F'\t' 'NR==1 {s=$3; next} $3 == s {print $1; exit}' <<<"$owners")
[ -n "$twin" ] || { echo "no id among demo-1x..demo-1x40 on demo-1's shard" >&2; exit 1; }

step "psql through the pgshard proxy ($pdsn): one database, each transaction on its key's shard"
psql "$pdsn" -X -v ON_ERROR_STOP=1 \
	-c "INSERT INTO executions VALUES ('demo-1', 'demo', '{\"version\":1}', 1), ('$twin', 'demo', '{}', 1) ON CONFLICT (id) DO NOTHING" \
	-c "SELECT id, version, (SELECT shard_name FROM pgshard_identity) AS served_by FROM executions WHERE id = 'demo-1'" \
	-c "SELECT id, version, (SELECT shard_name FROM pgshard_identity) AS served_by FROM executions WHERE id = '$twin'" \
	-c "SELECT count(*) AS executions_on_all_shards FROM executions"
# Two ids on different shards, for the cross-shard refusal below.
read -r a sa b sb < <("$bin" map bucket --config "$cfg" demo-1 demo-2 demo-3 demo-4 demo-5 demo-6 |
	awk -F'\t' 'NR==1 {a=$1; sa=$3; next} !found && $3 != sa {print a, sa, $1, $3; found = 1}')
psql "$pdsn" -X -q -c "INSERT INTO executions VALUES ('$b', 'demo', '{}', 1) ON CONFLICT (id) DO NOTHING"
echo "A transaction that touches two shards ($a on $sa, then $b on $sb) is refused, never misrouted:"
psql "$pdsn" -X -c "BEGIN" -c "UPDATE executions SET version = version WHERE id = '$a'" \
	-c "UPDATE executions SET version = version WHERE id = '$b'" -c "ROLLBACK" 2>&1 | grep -E 'ERROR|DETAIL|HINT' || true
echo "Why: pgshard route explains each decision:"
"$bin" route --config "$cfg" "SELECT data FROM executions WHERE id = \$1" demo-1

step "pgbench -M prepared through the proxy (PgBouncer 1.18 alone breaks on prepared statements; the proxy virtualizes them)"
script=$(mktemp)
cat > "$script" <<'SQL'
\set n random(1, 300)
INSERT INTO executions VALUES (:n::text, 'bench', '{}', 1) ON CONFLICT (id) DO UPDATE SET version = executions.version + 1;
SELECT version FROM executions WHERE id = :n::text;
SQL
pgbench -n -M prepared -c 4 -j 2 -T 5 -f "$script" "$pdsn" 2>&1 | grep -E 'transaction type|number of (transactions|failed)|latency average|tps'
rm -f "$script"
