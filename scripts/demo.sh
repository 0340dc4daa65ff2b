#!/usr/bin/env bash
# The demo behind `make demo`: a local sharded store from nothing.
# Usage: scripts/demo.sh BIN DIR SHARDS
set -euo pipefail
bin=${1:-bin/pgshard}
dir=${2:-.pgshard}
shards=${3:-4}
cfg="$dir/pgshard.yaml"

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "Start (or reuse) a ${shards}-shard cluster: PostgreSQL + PgBouncer (transaction mode) per shard, the shard map's catalog, and the pgshard proxy following it (admin console, metrics, TLS with a local CA), in $dir"
# --shards sizes a new cluster; a reused one keeps what it has (a later step
# grows it to one more shard, and the next run reuses that).
up() { "$bin" dev up --dir "$dir" --shards "$shards" --proxy --tls --catalog; }
if ! up; then
	# A move an earlier run left unfinished (interrupted, or given up after
	# its freezes were abandoned) makes migrate refuse the shards it
	# touches: finish it (the shards are up now), then start again.
	pending=$([ -f "$cfg" ] && "$bin" reshard status --config "$cfg" 2>/dev/null) || pending=
	if [ -z "$pending" ] || grep -q ': 0 moves$' <<<"$pending"; then
		exit 1
	fi
	printf '\nAn earlier run left moves unfinished; finishing them: pgshard reshard apply\n'
	"$bin" reshard apply --config "$cfg" --freeze-budget 100ms --freeze-attempts 60
	up
fi

step "Migrate every shard again: idempotent, each shard's ledger and identity verified"
"$bin" migrate --config "$cfg"

step "The shard map (the catalog's, named by catalog.dsn in $cfg)"
"$bin" map show --config "$cfg"

step "Where sample execution ids land (KEY, BUCKET, SHARD)"
keys=(
	0a1b2c3d4e5f60718293a4b5c6d7e8f9
	7f3e9a1c2b4d5e6f708192a3b4c5d6e7
	c0ffee00c0ffee00c0ffee00c0ffee00
	deadbeefdeadbeefdeadbeefdeadbeef
	00000000000000000000000000000001
	order-42
)
"$bin" map bucket --config "$cfg" "${keys[@]}"

step "The shards agree: SELECT pgshard_bucket(key) on each owning shard"
"$bin" map bucket --config "$cfg" "${keys[@]}" | while IFS=$'\t' read -r key bucket shard; do
	dsn=$("$bin" dev status --dir "$dir" --json | python3 -c "import json,sys; print([s['dsn'] for s in json.load(sys.stdin)['shards'] if s['name']=='$shard'][0])")
	got=$(psql "$dsn" -Atc "SELECT pgshard_bucket('$key')")
	printf '%-34s go=%-5s %s=%s\n' "$key" "$bucket" "$shard" "$got"
	[ "$got" = "$bucket" ] || { echo "MISMATCH" >&2; exit 1; }
done

for extra in scripts/demo.d/*.sh; do
	[ -e "$extra" ] || continue
	# shellcheck source=/dev/null
	. "$extra"
done

printf '\n\033[1mThe cluster keeps running.\033[0m Status: %s dev status --dir %s\n' "$bin" "$dir"
printf 'Stop everything it started:  make down   (or: %s dev down --dir %s)\n' "$bin" "$dir"
