#!/usr/bin/env bash
# bench-proxy: point SELECT by key, CLIENTS clients, through five paths side
# by side in one run (rounds interleaved, each starting at another path,
# so a noisy machine hits every path alike), printing tps, p50/p99 latency, the ratio to direct Postgres and
# the CPU the middle layer spent per transaction:
#
#   direct            pgbench → Postgres (shard0)
#   pgbouncer         pgbench → PgBouncer → Postgres
#   pgshard           pgbench → pgshard → Postgres            (1-shard map)
#   pgshard+pgbouncer pgbench → pgshard → PgBouncer → Postgres (1-shard map)
#   pgshard-2shards   pgbench → pgshard → 2 Postgres           (2-shard map)
#   pgshard(base)     pgbench → BASE_BIN's pgshard → Postgres  (only with BASE_BIN:
#                     another build, e.g. main's, in the same interleaved rounds)
#
# Then the fan-out benchmark: a key-less read merged over 4 shards (4
# databases on the 2 servers) against the same read on one database
# holding every row, FAN_CLIENTS clients:
#
#   fan-small  SELECT aid, abalance ... WHERE aid > random ORDER BY aid LIMIT 100
#              (each shard returns its first 100 rows, the proxy k-way merges
#              400 rows into 100)
#   fan-big    the same with LIMIT 20000 (80000 rows merged into 20000 per
#              query: the proxy's memory must not grow with it)
#
# printing tps, latency, rows merged per second, the proxy's CPU per query
# and its memory (VmRSS after, VmHWM = peak).
#
# Usage: scripts/bench-proxy.sh [BIN]
#   env: DURATION=8 (s per path per round) ROUNDS=3 CLIENTS=16 MODE=extended
#        ROWS=100000 KEEP=0 (1 keeps the cluster in $DIR)
#        PROXY_PROCS= (proxy.procs of the proxies; default: the config's, 1;
#          0 = Go's default; a BASE_BIN older than proxy.procs refuses it)
#        PROXY_GOMAXPROCS= (GOMAXPROCS of the proxies: honoured only with
#          PROXY_PROCS=0 or by a BASE_BIN older than proxy.procs)
#        BASE_BIN= (another pgshard binary to compare on the keyed path)
#        FANOUT=1 (0 skips the fan-out benchmark) FAN_CLIENTS=8 FAN_ROUNDS=2
#        PROXY_CPUPROFILE= (a directory: each proxy writes a CPU profile of
#          its whole run there, <proxy>.pprof, px_direct being the pgshard
#          path's; read with go tool pprof -top bin/pgshard FILE)
set -euo pipefail
bin=${1:-bin/pgshard}
duration=${DURATION:-8}
rounds=${ROUNDS:-3}
clients=${CLIENTS:-16}
mode=${MODE:-extended}
rows=${ROWS:-100000}
dir=${DIR:-$(mktemp -d /tmp/pgshard-bench-XXXXXX)}
chmod 755 "$dir" # the servers run as postgres when this runs as root
pgbench=$(command -v pgbench || echo /usr/lib/postgresql/15/bin/pgbench)
psql=$(command -v psql)
py=/usr/bin/python3

# shellcheck source=bench-lib.sh
. "$(dirname "$0")/bench-lib.sh" # pids, cleanup on EXIT

echo "bench-proxy: ${clients} clients, pgbench -M ${mode}, ${rounds} rounds x ${duration}s per path, ${rows} rows; state in ${dir}"
# The start's output is kept: on failure it says why (which server, its
# log's last lines).
"$bin" dev up --dir "$dir" --shards 2 --fsync=false >"$dir/devup.log" 2>&1 || { echo "dev up failed:"; cat "$dir/devup.log"; exit 1; }
status=$("$bin" dev status --dir "$dir" --json)
field() { $py -c "import json,sys; d=json.loads(sys.argv[1]); print(d['shards'][int(sys.argv[2])][sys.argv[3]])" "$status" "$1" "$2"; }
dsn0=$(field 0 dsn); dsn1=$(field 1 dsn); pool0=$(field 0 pooler_dsn)
hostport() { $py -c "import sys,urllib.parse as u; p=u.urlparse(sys.argv[1]); print(p.hostname, p.port)" "$1"; }
read -r h0 p0 <<<"$(hostport "$dsn0")"
read -r h1 p1 <<<"$(hostport "$dsn1")"
read -r hb0 pb0 <<<"$(hostport "$pool0")"

# Databases: bench1 on shard0 holds every row (1-shard map); bench2 spreads
# the rows over both shards by bucket (2-shard map).
for db in bench1 bench2; do
	for port in "$p0" "$p1"; do
		$psql -q -h "$h0" -p "$port" -U postgres -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
	done
done
write_map() { # name shards...
	local out=$1; shift
	{
		echo "epoch: 1"
		echo "buckets: 4096"
		echo "shards:"
		local i=0
		for s in "$@"; do
			read -r name dsn pdsn <<<"$s"
			echo "  - {name: $name, ordinal: $i, dsn: \"$dsn\", pooler_dsn: \"$pdsn\"}"
			i=$((i + 1))
		done
		echo "ranges:"
		if [ $# -eq 1 ]; then
			echo "  - {lo: 0, hi: 4095, shard: shard0}"
		else
			echo "  - {lo: 0, hi: 2047, shard: shard0}"
			echo "  - {lo: 2048, hi: 4095, shard: shard1}"
		fi
	} >"$out"
}
pooldsn() { echo "$1" | sed "s/:$2\//:$3\//"; }
b1dsn0=${dsn0/\/pgshard\?/\/bench1?}
b2dsn0=${dsn0/\/pgshard\?/\/bench2?}
b2dsn1=${dsn1/\/pgshard\?/\/bench2?}
b1pool0=${pool0/\/pgshard\?/\/bench1?}
b2pool0=${pool0/\/pgshard\?/\/bench2?}
b2pool1=$(field 1 pooler_dsn); b2pool1=${b2pool1/\/pgshard\?/\/bench2?}
write_map "$dir/map1.yaml" "shard0 $b1dsn0 $b1pool0"
write_map "$dir/map2.yaml" "shard0 $b2dsn0 $b2pool0" "shard1 $b2dsn1 $b2pool1"
"$bin" migrate --config <(echo "shardmap_file: $dir/map1.yaml") >/dev/null
"$bin" migrate --config <(echo "shardmap_file: $dir/map2.yaml") >/dev/null
ddl="CREATE TABLE pgbench_accounts (aid int8 PRIMARY KEY, bid int, abalance int NOT NULL DEFAULT 0, filler char(84))"
$psql -q "$b1dsn0" -c "$ddl" -c "INSERT INTO pgbench_accounts SELECT g, 1, 0, '' FROM generate_series(1, $rows) g" -c "VACUUM ANALYZE pgbench_accounts"
$psql -q "$b2dsn0" -c "$ddl" -c "INSERT INTO pgbench_accounts SELECT g, 1, 0, '' FROM generate_series(1, $rows) g WHERE pgshard_bucket(g::int8, 4096) <= 2047" -c "VACUUM ANALYZE pgbench_accounts"
$psql -q "$b2dsn1" -c "$ddl" -c "INSERT INTO pgbench_accounts SELECT g, 1, 0, '' FROM generate_series(1, $rows) g WHERE pgshard_bucket(g::int8, 4096) > 2047" -c "VACUUM ANALYZE pgbench_accounts"

# Three proxies.
start_proxy() { # name map use_pooler [bin]
	local cfg="$dir/$1.yaml" pbin=${4:-$bin}
	cat >"$cfg" <<EOF
shardmap_file: $2
proxy:
  use_pooler: $3
  pool_size: $((clients + 4))
  users: [{name: postgres, trust: true}]
  # The default configuration's features on (as dev up writes them): the
  # admin console and the metrics endpoint.
  admin_users: [postgres]
  metrics_listen: 127.0.0.1:0
${PROXY_PROCS:+  procs: $PROXY_PROCS}
  schema:
    tables:
      - {table: executions, column: id, type: text, position: 1}
      - {table: pgbench_accounts, column: aid, type: int8, position: 1}
EOF
	local prof=()
	if [ -n "${PROXY_CPUPROFILE:-}" ]; then
		mkdir -p "$PROXY_CPUPROFILE"
		prof=(--cpuprofile "$PROXY_CPUPROFILE/$1.pprof")
	fi
	GOMAXPROCS=${PROXY_GOMAXPROCS:-} "$pbin" proxy --config "$cfg" --listen 127.0.0.1:0 --ready-file "$dir/$1.ready" --log-level warn "${prof[@]}" >"$dir/$1.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 200); do [ -s "$dir/$1.ready" ] && break; sleep 0.05; done
	[ -s "$dir/$1.ready" ] || { echo "proxy $1 did not start:"; cat "$dir/$1.log"; exit 1; }
}
start_proxy px_direct "$dir/map1.yaml" false
start_proxy px_pooler "$dir/map1.yaml" true
start_proxy px_two "$dir/map2.yaml" false
if [ -n "${BASE_BIN:-}" ]; then
	start_proxy px_base "$dir/map1.yaml" false "$BASE_BIN"
fi
readyaddr() { $py -c "import json,sys; print(json.load(open(sys.argv[1]))['addr'])" "$1"; }
readypid() { $py -c "import json,sys; print(json.load(open(sys.argv[1]))['pid'])" "$1"; }
pxdsn() { local a; a=$(readyaddr "$dir/$1.ready"); echo "postgres://postgres@${a}/$2?sslmode=disable"; }
bouncer_pid=$(cat "$dir/shard0/pgbouncer.pid")

paths=(direct pgbouncer pgshard pgshard+pgbouncer pgshard-2shards)
[ -n "${BASE_BIN:-}" ] && paths+=("pgshard(base)")
declare -A dsn mid
dsn[direct]=$b1dsn0;                       mid[direct]=""
dsn[pgbouncer]=$b1pool0;                   mid[pgbouncer]=$bouncer_pid
dsn[pgshard]=$(pxdsn px_direct bench1);    mid[pgshard]=$(readypid "$dir/px_direct.ready")
dsn[pgshard+pgbouncer]=$(pxdsn px_pooler bench1); mid[pgshard+pgbouncer]="$(readypid "$dir/px_pooler.ready") $bouncer_pid"
dsn[pgshard-2shards]=$(pxdsn px_two bench2); mid[pgshard-2shards]=$(readypid "$dir/px_two.ready")
if [ -n "${BASE_BIN:-}" ]; then
	dsn["pgshard(base)"]=$(pxdsn px_base bench1); mid["pgshard(base)"]=$(readypid "$dir/px_base.ready")
fi

printf '\\set aid random(1, %d)\nSELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n' "$rows" >"$dir/select.sql"
ticks() { local t=0; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo $t; }
hz=$(getconf CLK_TCK)

mkdir -p "$dir/logs"
# Warm up every path (connections, caches).
for p in "${paths[@]}"; do
	"$pgbench" -n -M "$mode" -c "$clients" -j 2 -T 2 -f "$dir/select.sql" "${dsn[$p]}" >/dev/null 2>&1 || { echo "warm-up of $p failed"; "$pgbench" -n -M "$mode" -c 1 -t 1 -f "$dir/select.sql" "${dsn[$p]}"; exit 1; }
done
for r in $(seq 1 "$rounds"); do
	# Each round starts at another path, so no path always runs first or last.
	order=()
	for k in "${!paths[@]}"; do order+=("${paths[$(((k + r - 1) % ${#paths[@]}))]}"); done
	for p in "${order[@]}"; do
		t0=0; [ -n "${mid[$p]}" ] && t0=$(ticks ${mid[$p]})
		out=$("$pgbench" -n -M "$mode" -c "$clients" -j 2 -T "$duration" -f "$dir/select.sql" -l --log-prefix "$dir/logs/${p}_r${r}" "${dsn[$p]}" 2>&1) || { echo "$out"; exit 1; }
		t1=0; [ -n "${mid[$p]}" ] && t1=$(ticks ${mid[$p]})
		n=$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
		failed=$(echo "$out" | sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p')
		echo "$p $r $n ${failed:-0} $((t1 - t0))" >>"$dir/results.txt"
	done
done

$py - "$dir" "$duration" "$hz" "${paths[@]}" <<'PY'
import glob, os, sys
d, dur, hz = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
paths = sys.argv[4:]
res = {}
for line in open(os.path.join(d, "results.txt")):
    p, r, n, failed, ticks = line.split()
    a = res.setdefault(p, {"n": 0, "rounds": 0, "failed": 0, "ticks": 0})
    a["n"] += int(n); a["rounds"] += 1; a["failed"] += int(failed); a["ticks"] += int(ticks)
rows = []
for p in paths:
    lat = []
    for f in glob.glob(os.path.join(d, "logs", p + "_r*")):
        for line in open(f):
            parts = line.split()
            if len(parts) >= 3:
                lat.append(int(parts[2]))
    lat.sort()
    q = lambda x: lat[min(len(lat) - 1, int(x * len(lat)))] / 1000.0 if lat else float("nan")
    a = res[p]
    tps = a["n"] / (a["rounds"] * dur)
    cpu = (a["ticks"] / hz * 1e6 / a["n"]) if a["ticks"] and a["n"] else None
    rows.append((p, tps, q(0.50), q(0.99), a["failed"], cpu))
base = rows[0][1]
bouncer = dict((r[0], r[1]) for r in rows)["pgbouncer"]
print()
print("%-20s %10s %9s %9s %8s %8s %13s" % ("path", "tps", "p50 ms", "p99 ms", "vs direct", "failed", "mid CPU us/tx"))
for p, tps, p50, p99, failed, cpu in rows:
    print("%-20s %10.0f %9.3f %9.3f %8.2fx %8d %13s" % (p, tps, p50, p99, tps / base, failed, "-" if cpu is None else "%.1f" % cpu))
px = dict((r[0], r[1]) for r in rows)
print()
print("pgshard -> Postgres:            %.2fx direct (target >= 0.95x)" % (px["pgshard"] / base))
print("PgBouncer -> Postgres:          %.2fx direct" % (bouncer / base))
print("pgshard -> PgBouncer -> Postgres: %.2fx direct" % (px["pgshard+pgbouncer"] / base))
print("pgshard (direct) vs PgBouncer:  %.2fx" % (px["pgshard"] / bouncer))
if "pgshard(base)" in px:
    print("pgshard vs pgshard(base):        %.2fx" % (px["pgshard"] / px["pgshard(base)"]))
print("(mid CPU: CPU time of the proxy and/or PgBouncer process per transaction, measured in the same runs)")
PY

[ "${FANOUT:-1}" = 1 ] || exit 0

# ---- fan-out: a key-less ORDER BY + LIMIT merged over 4 shards ----
fan_clients=${FAN_CLIENTS:-8}
fan_rounds=${FAN_ROUNDS:-2}
echo
echo "fan-out: ${fan_clients} clients, ${fan_rounds} rounds x ${duration}s, 4 shards (4 databases on 2 servers) vs one database"
for db in bench4a bench4c; do $psql -q -h "$h0" -p "$p0" -U postgres -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"; done
for db in bench4b bench4d; do $psql -q -h "$h1" -p "$p1" -U postgres -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"; done
f0=${dsn0/\/pgshard\?/\/bench4a?}; f1=${dsn1/\/pgshard\?/\/bench4b?}; f2=${dsn0/\/pgshard\?/\/bench4c?}; f3=${dsn1/\/pgshard\?/\/bench4d?}
{
	echo "epoch: 1"; echo "buckets: 4096"; echo "shards:"
	echo "  - {name: shard0, ordinal: 0, dsn: \"$f0\"}"
	echo "  - {name: shard1, ordinal: 1, dsn: \"$f1\"}"
	echo "  - {name: shard2, ordinal: 2, dsn: \"$f2\"}"
	echo "  - {name: shard3, ordinal: 3, dsn: \"$f3\"}"
	echo "ranges:"
	echo "  - {lo: 0, hi: 1023, shard: shard0}"
	echo "  - {lo: 1024, hi: 2047, shard: shard1}"
	echo "  - {lo: 2048, hi: 3071, shard: shard2}"
	echo "  - {lo: 3072, hi: 4095, shard: shard3}"
} >"$dir/map4.yaml"
"$bin" migrate --config <(echo "shardmap_file: $dir/map4.yaml") >/dev/null
i=0
for f in "$f0" "$f1" "$f2" "$f3"; do
	lo=$((i * 1024)); hi=$((lo + 1023))
	$psql -q "$f" -c "$ddl" -c "INSERT INTO pgbench_accounts SELECT g, 1, g % 1000, '' FROM generate_series(1, $rows) g WHERE pgshard_bucket(g::int8, 4096) BETWEEN $lo AND $hi" -c "VACUUM ANALYZE pgbench_accounts"
	i=$((i + 1))
done
$psql -q "$b1dsn0" -c "UPDATE pgbench_accounts SET abalance = aid % 1000" -c "VACUUM ANALYZE pgbench_accounts"
start_proxy px_four "$dir/map4.yaml" false
four_pid=$(readypid "$dir/px_four.ready")
four_dsn=$(pxdsn px_four bench4a)
printf '\\set start random(0, %d)\nSELECT aid, abalance FROM pgbench_accounts WHERE aid > :start ORDER BY aid LIMIT 100;\n' "$((rows - 200))" >"$dir/fan_small.sql"
printf '\\set start random(0, %d)\nSELECT aid, abalance FROM pgbench_accounts WHERE aid > :start ORDER BY aid LIMIT 20000;\n' "$((rows / 2))" >"$dir/fan_big.sql"
# The merge is right: the same rows as one database.
for q in "SELECT aid, abalance FROM pgbench_accounts WHERE aid > 777 ORDER BY aid LIMIT 100" "SELECT sum(abalance), count(*) FROM pgbench_accounts"; do
	a=$($psql -XAt "$b1dsn0" -c "$q" | md5sum); b=$($psql -XAt "$four_dsn" -c "$q" | md5sum)
	[ "$a" = "$b" ] || { echo "fan-out answer differs from one database's: $q"; exit 1; }
done
rss() { awk '/^VmRSS/{r=$2} /^VmHWM/{h=$2} END{printf "%d %d", r, h}' "/proc/$1/status"; }
read -r rss0 _ <<<"$(rss "$four_pid")"
for w in fan_small fan_big; do
	c=$fan_clients
	[ "$w" = fan_big ] && c=$(( fan_clients < 4 ? fan_clients : 4 ))
	"$pgbench" -n -M "$mode" -c "$c" -j 2 -T 2 -f "$dir/$w.sql" "$four_dsn" >/dev/null 2>&1 || { echo "warm-up of $w failed"; exit 1; }
	for r in $(seq 1 "$fan_rounds"); do
		for p in one-database pgshard-4shards; do
			target=$b1dsn0; pid=""
			[ "$p" = pgshard-4shards ] && { target=$four_dsn; pid=$four_pid; }
			t0=0; [ -n "$pid" ] && t0=$(ticks "$pid")
			out=$("$pgbench" -n -M "$mode" -c "$c" -j 2 -T "$duration" -f "$dir/$w.sql" -l --log-prefix "$dir/logs/${w}_${p}_r${r}" "$target" 2>&1) || { echo "$out"; exit 1; }
			t1=0; [ -n "$pid" ] && t1=$(ticks "$pid")
			n=$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
			echo "$w $p $r $n $((t1 - t0))" >>"$dir/fan_results.txt"
		done
	done
done
read -r rss1 hwm1 <<<"$(rss "$four_pid")"
$py - "$dir" "$duration" "$hz" "$rss0" "$rss1" "$hwm1" <<'PY'
import glob, os, sys
d, dur, hz = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rss0, rss1, hwm = (int(x) for x in sys.argv[4:7])
res = {}
for line in open(os.path.join(d, "fan_results.txt")):
    w, p, r, n, ticks = line.split()
    a = res.setdefault((w, p), {"n": 0, "rounds": 0, "ticks": 0})
    a["n"] += int(n); a["rounds"] += 1; a["ticks"] += int(ticks)
print()
print("%-10s %-16s %9s %9s %9s %9s %14s %14s %12s" % ("workload", "path", "tps", "p50 ms", "p99 ms", "vs one db", "rows read/s", "rows out/s", "proxy us/q"))
for w, limit in (("fan_small", 100), ("fan_big", 20000)):
    base = None
    for p in ("one-database", "pgshard-4shards"):
        a = res[(w, p)]
        lat = []
        for f in glob.glob(os.path.join(d, "logs", "%s_%s_r*" % (w, p))):
            for line in open(f):
                parts = line.split()
                if len(parts) >= 3:
                    lat.append(int(parts[2]))
        lat.sort()
        q = lambda x: lat[min(len(lat) - 1, int(x * len(lat)))] / 1000.0 if lat else float("nan")
        tps = a["n"] / (a["rounds"] * dur)
        base = base or tps
        shards = 4 if p == "pgshard-4shards" else 1
        cpu = "%.0f" % (a["ticks"] / hz * 1e6 / a["n"]) if a["ticks"] and a["n"] else "-"
        print("%-10s %-16s %9.0f %9.3f %9.3f %8.2fx %14.0f %14.0f %12s" % (w, p, tps, q(0.5), q(0.99), tps / base, tps * limit * shards, tps * limit, cpu))
print()
print("proxy memory (4-shard proxy): VmRSS %.1f MiB before the fan-out runs, %.1f MiB after; peak (VmHWM) %.1f MiB" % (rss0 / 1024, rss1 / 1024, hwm / 1024))
print("(rows read/s: rows the proxy k-way merged, rows out/s: rows it sent; the proxy holds one row per shard)")
PY
