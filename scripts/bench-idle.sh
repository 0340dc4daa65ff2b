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
#              likewise (the anchor: ~2 KiB per client)
#
# Each server is started fresh for its measurement (a process that held
# clients before keeps part of that memory). Prints KiB per client at each
# step and pgshard/PgBouncer, and fails if a connection failed (holding
# 10,000 clients without errors is part of the result). The goal (≤ 8 KiB
# per client at 5,000) is printed beside the figure, never asserted.
#
# Usage: scripts/bench-idle.sh [BIN]     env: STEPS=5000,10000 KEEP=0
set -euo pipefail
bin=${1:-bin/pgshard}
steps=${STEPS:-5000,10000}
max=${steps##*,}
dir=${DIR:-$(mktemp -d /tmp/pgshard-idle-XXXXXX)}
chmod 755 "$dir" # the servers run as postgres when this runs as root
py=/usr/bin/python3
tool=$dir/idleclients
go build -o "$tool" ./internal/tools/idleclients

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
	done
	if [ "${KEEP:-0}" != 1 ]; then
		"$bin" dev down --dir "$dir" --purge >/dev/null 2>&1 || true
	fi
}
trap cleanup EXIT

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

# pgshard: a proxy of its own from the dev cluster's configuration (the
# dev proxy's), on a free port.
PGSHARD_PROXY_MAX_CLIENTS=$need "$bin" proxy --config "$dir/pgshard.yaml" --listen 127.0.0.1:0 \
	--trust-user postgres --ready-file "$dir/px.ready" --log-level warn >"$dir/px.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do [ -s "$dir/px.ready" ] && break; sleep 0.05; done
[ -s "$dir/px.ready" ] || { echo "the proxy did not start:"; cat "$dir/px.log"; exit 1; }
px_addr=$(jget "$(cat "$dir/px.ready")" "d['addr']")
px_pid=$(jget "$(cat "$dir/px.ready")" "d['pid']")
"$tool" -dsn "postgres://postgres@${px_addr}/pgshard?sslmode=disable" -pid "$px_pid" -steps "$steps" -label pgshard -json "$dir/pgshard.json"
kill "$px_pid"

# PgBouncer: one of its own in front of the same shard, transaction mode.
mkdir -p "$dir/bouncer"
bport=$(freeport)
cat >"$dir/bouncer/pgbouncer.ini" <<EOF
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
EOF
echo '"postgres" ""' >"$dir/bouncer/userlist.txt"
pgb=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
# PgBouncer holds a descriptor per client and per server connection and
# stops accepting (clients then wait in the listen backlog until they time
# out) once it reaches its limit: its docs say to raise `ulimit -n` above
# max_client_conn + the pools' server connections, which is done here in
# the shell that starts it (runuser starts a login session whose soft
# limit is PAM's default, 1024, whatever this shell's is).
if [ "$(id -u)" = 0 ]; then
	chown -R postgres "$dir/bouncer"
	runuser -u postgres -- bash -c 'ulimit -n "$1" && exec "$2" "$3"' _ "$need" "$pgb" "$dir/bouncer/pgbouncer.ini" >"$dir/bouncer/stderr.log" 2>&1 &
else
	"$pgb" "$dir/bouncer/pgbouncer.ini" >"$dir/bouncer/stderr.log" 2>&1 &
fi
pids+=($!)
for _ in $(seq 1 200); do [ -s "$dir/bouncer/pgbouncer.pid" ] && break; sleep 0.05; done
[ -s "$dir/bouncer/pgbouncer.pid" ] || { echo "pgbouncer did not start:"; cat "$dir/bouncer/pgbouncer.log"; exit 1; }
b_pid=$(cat "$dir/bouncer/pgbouncer.pid")
pids+=("$b_pid")
b_nofile=$(awk '/^Max open files/ {print $4}' "/proc/$b_pid/limits")
if [ "$b_nofile" -lt "$need" ]; then
	echo "bench-idle: pgbouncer may open only $b_nofile files, $need needed: raise the limit (ulimit -n, or LimitNOFILE= in its systemd unit)"
	exit 1
fi
"$tool" -dsn "postgres://postgres@127.0.0.1:${bport}/pgshard?sslmode=disable" -pid "$b_pid" -steps "$steps" -label pgbouncer -json "$dir/pgbouncer.json"

$py - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
a = json.load(open(os.path.join(d, "pgshard.json")))["steps"]
b = json.load(open(os.path.join(d, "pgbouncer.json")))["steps"]
print()
print("%8s  %16s  %16s  %8s" % ("clients", "pgshard KiB/cl", "pgbouncer KiB/cl", "ratio"))
for x, y in zip(a, b):
    r = x["kib_per_client"] / y["kib_per_client"] if y["kib_per_client"] > 0 else float("nan")
    print("%8d  %16.2f  %16.2f  %7.2fx" % (x["clients"], x["kib_per_client"], y["kib_per_client"], r))
first = a[0]
print("goal: pgshard <= 8 KiB per idle client at 5,000 clients: %.2f KiB at %d (%.2fx the goal)" % (first["kib_per_client"], first["clients"], first["kib_per_client"] / 8))
PY
