#!/usr/bin/env bash
# The CI chaos suite behind `make chaos`: a dedicated 3-shard cluster
# (PostgreSQL + PgBouncer per shard, and a catalog server of its own: the
# runs with moves make their catalog there, so every shard may crash), the
# ci scenario (every fault kind, through PgBouncer and the proxy at once)
# verified, the recovery scenario (each kind alone: time to recover per
# kind), the reshard scenario (bucket ranges moved online and the mover
# killed at its journal steps, shards crashed in a move's catch-up,
# beside every fault kind on every shard:
# >= 20 moves done, >= 3 mover kills resolved), then the
# mutant runs (the control must pass, every deliberately broken store must
# be caught): the store's mutants, then the resharding mutants (broken
# movers, shards that do not fence, a client that ignores the fence), then
# the lease mutants (a proxy, a router, that serves through a catalog cut
# past its lease).
# Usage: scripts/chaos.sh BIN DIR OUT
set -euo pipefail
bin=${1:-bin/pgshard}
dir=${2:-.pgshard-chaos}
out=${3:-chaos-out}
start=$(date +%s)

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "A 3-shard cluster with PgBouncer and a catalog server in $dir"
# A fresh one each run: a former run's moves left the shards' fences at
# their last map's epoch, which the static map cannot set back (and the
# cluster belongs to this suite alone).
if [ -e "$dir" ]; then "$bin" dev down --dir "$dir" --purge >/dev/null; fi
"$bin" dev up --dir "$dir" --shards 3 --catalog-server >/dev/null
trap '"$bin" dev down --dir "$dir" >/dev/null' EXIT
"$bin" dev status --dir "$dir"

step "The ci scenario (configs/chaos/ci.yaml), verified"
rm -rf "$out/ci" "$out/reshard" "$out/mutants"
"$bin" chaos run --config "$dir/pgshard.yaml" --scenario configs/chaos/ci.yaml --out "$out/ci"
t1=$(date +%s)

step "Recovery per fault kind: each kind alone (configs/chaos/recovery.yaml), verified"
rm -rf "$out/recovery"
"$bin" chaos run --config "$dir/pgshard.yaml" --scenario configs/chaos/recovery.yaml --out "$out/recovery"
t2=$(date +%s)

step "Resharding: online range moves and mover kills beside every fault kind (configs/chaos/reshard.yaml), verified"
"$bin" chaos run --config "$dir/pgshard.yaml" --scenario configs/chaos/reshard.yaml --out "$out/reshard"
t3=$(date +%s)

step "Proof of power: every mutant against configs/chaos/mutants.yaml"
"$bin" chaos mutants --config "$dir/pgshard.yaml" --scenario configs/chaos/mutants.yaml --out "$out/mutants"
t4=$(date +%s)

step "Proof of power for resharding: the resharding mutants against configs/chaos/mutants-reshard.yaml"
rm -rf "$out/mutants-reshard"
"$bin" chaos mutants --config "$dir/pgshard.yaml" --scenario configs/chaos/mutants-reshard.yaml --only reshard --out "$out/mutants-reshard"
t5=$(date +%s)

step "Proof of power for the catalog lease: the lease mutants against configs/chaos/mutants-lease.yaml"
rm -rf "$out/mutants-lease"
"$bin" chaos mutants --config "$dir/pgshard.yaml" --scenario configs/chaos/mutants-lease.yaml --only proxy-ignores-lease,router-ignores-lease --out "$out/mutants-lease"

printf '\nchaos: ci scenario %ds, recovery %ds, reshard %ds, mutants %ds, resharding mutants %ds, lease mutants %ds, %ds in all; reports in %s (ci/report.html, recovery/report.html, reshard/report.html, mutants/*/report.html, mutants-reshard/*/report.html, mutants-lease/*/report.html)\n' \
	$((t1 - start)) $((t2 - t1)) $((t3 - t2)) $((t4 - t3)) $((t5 - t4)) $(($(date +%s) - t5)) $(($(date +%s) - start)) "$out"
