#!/usr/bin/env bash
# bench-idle: what an idle client costs the middle layer, side by side in
# one run. STEPS client connections (default 5,000 then 10,000) are opened
# to each server in turn — each completes startup and authentication, then
# sends nothing — and the server process's resident memory (VmRSS) is read
# after each step (internal/tools/idleclients):
#
#   pgshard    the proxy with the dev cluster's default configuration
#              (`pgshard dev up --proxy`: console, metrics, route
#              statistics on; max_clients raised to hold the clients)
#   pgbouncer  PgBouncer 1.18 in transaction mode, max_client_conn raised
#              likewise, its file-descriptor limit too (the anchor: about
#              1 KiB per client measured here)
#
# Twice: clients that never send anything after startup ("idle"), then
# clients that run one query first ("query": an application's pooled
# connection that has been used). Each server is started fresh for each
# measurement (a process that held clients before keeps part of that
# memory). Prints KiB per client at each step, failed connections and
# pgshard/PgBouncer, and fails if a connection failed (holding 10,000
# clients without errors is part of the result). The goal (≤ 8 KiB per
# idle client at 5,000) is printed beside the figure, never asserted.
#
# Usage: scripts/bench-idle.sh [BIN]
#   env: STEPS=5000,10000  QUERY='SELECT 1'  SETTLE=2s (wait before each
#        reading; 130s lets Go's periodic GC, every 2 minutes, run first)
#        DIR=state dir  KEEP=1 (leave the cluster up)
set -euo pipefail
bin=${1:-bin/pgshard}
steps=${STEPS:-5000,10000}
query=${QUERY:-SELECT 1}
settle=${SETTLE:-2s}
max=${steps##*,}
dir=${DIR:-$(mktemp -d /tmp/pgshard-idle-XXXXXX)}
chmod 755 "$dir" # the servers run as postgres when this runs as root
py=/usr/bin/python3
tool=$dir/idleclients
go build -o "$tool" ./internal/tools/idleclients

# shellcheck source=bench-lib.sh
. "$(dirname "$0")/bench-lib.sh" # pids, cleanup on EXIT

# Every client is a file descriptor here and in the server measured.
need=$((max + 200))
if [ "$(ulimit -n)" -lt "$need" ]; then
	ulimit -n "$need" 2>/dev/null || { echo "bench-idle: needs $need file descriptors (ulimit -n is $(ulimit -n), hard $(ulimit -Hn)): raise the limit (as PgBouncer's docs say for max_client_conn)"; exit 1; }
fi

echo "bench-idle: idle clients held in steps of ${steps}; state in ${dir}"
"$bin" dev up --dir "$dir" --shards 1 --proxy --fsync=false >"$dir/devup.log" 2>&1 || { echo "dev up failed:"; cat "$dir/devup.log"; exit 1; }
status=$("$bin" dev status --dir "$dir" --json)
jget() { $py -c "import json,sys; d=json.loads(sys.argv[1]); print(eval(sys.argv[2], {}, {'d': d}))" "$1" "$2"; }
dsn0=$(jget "$status" "d['shards'][0]['dsn']")
read -r h0 p0 <<<"$($py -c "import sys,urllib.parse as u; p=u.urlparse(sys.argv[1]); print(p.hostname, p.port)" "$dsn0")"
freeport() { $py -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }

# rc collects the measurements' failures (connections refused or timed
# out); the table is printed either way.
rc=0
measure() { # NAME PID DSN MODE
	local q=()
	if [ "$4" = query ]; then q=(-query "$query"); fi
	"$tool" -dsn "$3" -pid "$2" -steps "$steps" -label "$1/$4" -json "$dir/$1-$4.json" -settle "$settle" "${q[@]}" || rc=1
}
stop() { # PID: ends a server started here and waits (bounded) for it to exit
	kill "$1" 2>/dev/null || true
	for _ in $(seq 1 200); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done
}

# pgshard: a proxy of its own from the dev cluster's configuration (the
# dev proxy's), on a free port.
run_pgshard() { # MODE
	rm -f "$dir/px.ready"
	PGSHARD_PROXY_MAX_CLIENTS=$need "$bin" proxy --config "$dir/pgshard.yaml" --listen 127.0.0.1:0 \
		--trust-user postgres --ready-file "$dir/px.ready" --log-level warn >"$dir/px-$1.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 200); do [ -s "$dir/px.ready" ] && break; sleep 0.05; done
	[ -s "$dir/px.ready" ] || { echo "the proxy did not start:"; cat "$dir/px-$1.log"; exit 1; }
	local addr pid
	addr=$(jget "$(cat "$dir/px.ready")" "d['addr']")
	pid=$(jget "$(cat "$dir/px.ready")" "d['pid']")
	measure pgshard "$pid" "postgres://postgres@${addr}/pgshard?sslmode=disable" "$1"
	stop "$pid"
}

# PgBouncer: one of its own in front of the same shard, transaction mode.
mkdir -p "$dir/bouncer"
bport=$(freeport)
cat >"$dir/bouncer/pgbouncer.ini" <<INI
[databases]
* = host=$h0 port=$p0
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = trust
auth_file = $dir/bouncer/userlist.txt
pool_mode = transaction
max_client_conn = $need
default_pool_size = 20
logfile = $dir/bouncer/pgbouncer.log
pidfile = $dir/bouncer/pgbouncer.pid
INI
echo '"postgres" ""' >"$dir/bouncer/userlist.txt"
pgb=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
if [ "$(id -u)" = 0 ]; then chown -R postgres "$dir/bouncer"; fi
run_pgbouncer() { # MODE
	rm -f "$dir/bouncer/pgbouncer.pid"
	# PgBouncer holds a descriptor per client and per server connection
	# and stops accepting (clients then wait in the listen backlog until
	# they time out) once it reaches its limit: its docs say to raise
	# `ulimit -n` above max_client_conn + the pools' server connections,
	# done here in the shell that starts it (runuser starts a login
	# session whose soft limit is PAM's default, 1024, whatever this
	# shell's is).
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- bash -c 'ulimit -n "$1" && exec "$2" "$3"' _ "$need" "$pgb" "$dir/bouncer/pgbouncer.ini" >>"$dir/bouncer/stderr.log" 2>&1 &
	else
		"$pgb" "$dir/bouncer/pgbouncer.ini" >>"$dir/bouncer/stderr.log" 2>&1 &
	fi
	pids+=($!)
	for _ in $(seq 1 200); do [ -s "$dir/bouncer/pgbouncer.pid" ] && break; sleep 0.05; done
	[ -s "$dir/bouncer/pgbouncer.pid" ] || { echo "pgbouncer did not start:"; cat "$dir/bouncer/stderr.log" "$dir/bouncer/pgbouncer.log"; exit 1; }
	local pid nofile
	pid=$(cat "$dir/bouncer/pgbouncer.pid")
	pids+=("$pid")
	nofile=$(awk '/^Max open files/ {print $4}' "/proc/$pid/limits")
	if [ "$nofile" -lt "$need" ]; then
		echo "bench-idle: pgbouncer may open only $nofile files, $need needed: raise the limit (ulimit -n, or LimitNOFILE= in its systemd unit)"
		exit 1
	fi
	measure pgbouncer "$pid" "postgres://postgres@127.0.0.1:${bport}/pgshard?sslmode=disable" "$1"
	stop "$pid"
}

for mode in idle query; do
	run_pgshard "$mode"
	run_pgbouncer "$mode"
done

$py - "$dir" "$query" <<'PY'
import json, os, sys
d, query = sys.argv[1], sys.argv[2]
def load(name):
    try:
        return json.load(open(os.path.join(d, name + ".json")))["steps"]
    except (OSError, ValueError, KeyError):
        return []
print()
print("%-6s  %8s  %15s  %6s  %17s  %6s  %9s" % ("mode", "clients", "pgshard KiB/cl", "failed", "pgbouncer KiB/cl", "failed", "pgs/pgb"))
for mode in ("idle", "query"):
    for x, y in zip(load("pgshard-" + mode), load("pgbouncer-" + mode)):
        r = x["kib_per_client"] / y["kib_per_client"] if y["kib_per_client"] > 0 else float("nan")
        print("%-6s  %8d  %15.2f  %6d  %17.2f  %6d  %8.2fx" % (mode, x["clients"], x["kib_per_client"], x["failed"], y["kib_per_client"], y["failed"], r))
print("idle: connected, then sent nothing; query: ran %r once, then sent nothing" % query)
a = load("pgshard-idle")
if a:
    at = next((x for x in a if x["clients"] >= 5000), a[0])
    print("goal: pgshard <= 8 KiB per idle client at 5,000 clients: %.2f KiB at %d (%.2fx the goal)" % (at["kib_per_client"], at["clients"], at["kib_per_client"] / 8))
PY
exit $rc
