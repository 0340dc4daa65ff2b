# Part of scripts/demo.sh (sourced): operating the proxy — its admin
# console (PgBouncer's commands and columns), TLS and Prometheus metrics.
status=$("$bin" dev status --dir "$dir" --json)
jfield() { python3 -c "import json,sys; print(json.loads(sys.argv[1]).get(sys.argv[2], ''))" "$status" "$1"; }
adsn=$(jfield admin_dsn)
murl=$(jfield metrics_url)
ca=$(jfield tls_ca)
pdsn=$(jfield proxy_dsn)

step "The proxy's admin console, as with PgBouncer: psql $adsn -c 'SHOW POOLS'"
psql "$adsn" -X -P pager=off -c "SHOW POOLS"
echo "SHOW SHARDS (first shard; every shard has one record): state, buckets, routing decisions by kind, pool and PgBouncer figures"
# Output is captured first and the reader consumes all of it: a reader that
# stops early (awk's exit, head) would kill its writer with SIGPIPE, and
# under pipefail the demo would fail by chance.
shards_out=$(psql "$adsn" -X -P pager=off -x -c "SHOW SHARDS")
awk '/RECORD 2/ {done = 1} !done {print}' <<<"$shards_out"
psql "$adsn" -X -P pager=off -c "SHOW STATS"

if [ -n "$ca" ]; then
	step "TLS: psql verifies the proxy's certificate (sslmode=verify-full, the dev CA)"
	tdsn="${pdsn%%\?*}?sslmode=verify-full&sslrootcert=$ca"
	psql "$tdsn" -X -c '\conninfo' -c "SELECT count(*) AS executions FROM executions"
fi

if [ -n "$murl" ]; then
	step "Prometheus metrics: curl -s $murl"
	metrics=$(curl -sS --fail --max-time 10 "$murl")
	grep -E '^pgshard_(build_info|proxy_(transactions_total|routes_total\{[^}]*kind="(keyed|fanout)"|shard_up|backend_connections\{|pgbouncer_clients_waiting))' <<<"$metrics" | awk 'NR <= 24'
fi
