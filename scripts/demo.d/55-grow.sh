# Part of scripts/demo.sh (sourced): grow the cluster online — one more
# shard, and ranges of buckets moved to it while load runs through the
# proxy, which follows the catalog.
#
# On a cluster an earlier run already grew (no empty shard, more shards
# than asked for), the newest shard's ranges first move back to the
# others (reshard plan --remove-shard) and then onto it again: each run
# shows the same moves, and the cluster never grows past one extra shard.
#
# The goal is 0 failed transactions: the proxy retries a statement the
# fence refused before it had any effect, so a client whose range moved
# sees its answer from the new owner. A failed transaction fails the step
# (DEMO_GROW_ALLOW_FAILED=1 only reports them); DEMO_GROW_FAIL_IF adds a
# loadgen threshold of your own, e.g. DEMO_GROW_FAIL_IF='errors>0'.
grow_fail_if=${DEMO_GROW_FAIL_IF:-}
# The measured load: long enough to cover the moves on a busy 2-core
# machine (four moves take 10-40 s there); twice that when ranges move
# back and forth. DEMO_GROW_LOAD sets it.
grow_load=${DEMO_GROW_LOAD:-45s}
grow_out=loadgen-out/grow
grow_log=$dir/grow-loadgen.log

# The registered shards: NAME<TAB>BUCKETS (0 for an empty one).
grow_shards() {
	"$bin" dev status --dir "$dir" --json | python3 -c '
import json, sys
for s in json.load(sys.stdin)["shards"]:
    if not s.get("unregistered"):
        print("%s\t%d" % (s["name"], sum(hi - lo + 1 for lo, hi in s["ranges"])))'
}

# reshard plan + apply: the freezes of each move are in apply's lines.
grow_move() {
	"$bin" reshard plan --config "$cfg" "$@"
	printf '\n'
	"$bin" reshard apply --config "$cfg" --freeze-budget 100ms
}

step "Grow online: one more shard gets its share of the buckets while loadgen drives the store's hot path through the proxy (report in $grow_out)"
# A move interrupted by an earlier run (Ctrl-C) is finished first: a plan is
# refused while one is unfinished.
# (Outputs are captured before a reader that may stop early reads them: a
# writer killed by SIGPIPE would fail the demo under pipefail.)
pending=$("$bin" reshard status --config "$cfg")
if ! grep -q ': 0 moves$' <<<"$pending"; then
	echo "finishing the moves an earlier run left unfinished:"
	"$bin" reshard apply --config "$cfg" --freeze-budget 100ms
fi

shards_now=$(grow_shards)
target=$(awk -F'\t' '$2 == 0 {print $1; exit}' <<<"$shards_now")
registered=$(wc -l <<<"$shards_now")
back=
if [ -n "$target" ]; then
	echo "$target is registered and owns no buckets (an earlier run left it empty): no shard to add"
elif [ "$registered" -gt "$shards" ]; then
	target=$(tail -n 1 <<<"$shards_now" | cut -f1)
	back=1
	[ -n "${DEMO_GROW_LOAD:-}" ] || grow_load=90s
	echo "the cluster already grew on an earlier run ($registered shards): under the load, $target's ranges move back to the others, then onto it again"
else
	# Before the load: starting a PostgreSQL and a PgBouncer and migrating
	# them takes from 10 s to a minute on a busy 2-core machine; the load
	# is for the moves, which are what clients feel.
	printf '\n$ pgshard dev add-shard --dir %s\n' "$dir"
	"$bin" dev add-shard --dir "$dir"
	shards_now=$(grow_shards)
	target=$(awk -F'\t' '$2 == 0 {print $1; exit}' <<<"$shards_now")
	[ -n "$target" ] || { echo "dev add-shard left no empty shard" >&2; exit 1; }
fi

rm -rf "$grow_out"
grow_pid=
grow_stop() { [ -z "$grow_pid" ] || kill "$grow_pid" 2>/dev/null || true; }
trap grow_stop EXIT
# The load: bounded (its own --duration, after a setup that creates its
# executions), in the background, its output in a log (the summary is
# printed below), a report of its own.
fail_args=()
[ -z "$grow_fail_if" ] || fail_args=(--fail-if "$grow_fail_if")
"$bin" loadgen run --config "$cfg" --profile configs/loadgen-demo.yaml --dsn "$pdsn" \
	--warmup 0s --duration "$grow_load" --concurrency 4 --executions 1000 --out "$grow_out" \
	"${fail_args[@]}" >"$grow_log" 2>&1 &
grow_pid=$!
grow_t0=$SECONDS
printf '\nloadgen (pid %s) setting up 1000 executions through the proxy %s, then %s of load...\n' "$grow_pid" "$pdsn" "$grow_load"
# The moves start once the measured load runs (its per-second progress
# lines say "run"), waited for at most 2 minutes.
until grep -q ' run  ' "$grow_log" 2>/dev/null; do
	if ! kill -0 "$grow_pid" 2>/dev/null || [ $((SECONDS - grow_t0)) -gt 120 ]; then
		cat "$grow_log" >&2
		echo "loadgen did not start its measured load" >&2
		exit 1
	fi
	sleep 1
done
echo "load running ($((SECONDS - grow_t0))s after its start)"
grow_m0=$SECONDS
if [ -n "$back" ]; then
	printf '\n$ pgshard reshard plan --remove-shard %s; pgshard reshard apply --freeze-budget 100ms\n' "$target"
	grow_move --remove-shard "$target"
fi
printf '\n$ pgshard reshard plan --add-shard %s; pgshard reshard apply --freeze-budget 100ms\n' "$target"
grow_move --add-shard "$target"
echo "moves done $((SECONDS - grow_m0))s into the measured load"
if ! kill -0 "$grow_pid" 2>/dev/null; then
	echo "WARNING: the load ended before the moves did, so it measured only part of them: raise DEMO_GROW_LOAD (now $grow_load)"
fi

printf '\n$ pgshard reshard status --all\n'
"$bin" reshard status --config "$cfg" --all
printf '\n$ pgshard map show\n'
"$bin" map show --config "$cfg"

echo
echo "waiting for the load to end ($grow_load of measured load)..."
grow_rc=0
wait "$grow_pid" || grow_rc=$?
grow_pid=
trap - EXIT
# The config's copy of the map follows the catalog (later steps and
# commands that read the map from the file use it).
if ! up_out=$("$bin" dev up --dir "$dir" 2>&1); then
	echo "$up_out" >&2
	exit 1
fi
grep -E '^reused ' <<<"$up_out" || true

step "The load during the move (loadgen through the proxy; goal: 0 failed transactions)"
if [ ! -f "$grow_out/result.json" ]; then
	cat "$grow_log"
	echo "loadgen wrote no result (exit $grow_rc)" >&2
	exit 1
fi
if python3 - "$grow_out/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
o, errs = r.get("outcomes", {}), r.get("errors", {})
failed = o.get("error", 0)
print("operations: %d in %.1f s (%.0f/s), commits %.0f/s" % (r["ops"], r["measured_seconds"], r["throughput"], r["commit_rate"]))
print("failed transactions: %d%s" % (failed, "" if failed else " (goal met)"))
# What clients felt at the freezes: the per-second windows a freeze or the
# second after it overlaps (where its refused clients are served by the new
# owner) against the others (a window's t is its end, 1 s long).
fz, ws = r.get("freezes") or [], r.get("windows") or []
def overlaps(w):
    return any(f.get("start_s") is not None and w["t"] - 1 <= f["start_s"] + f.get("duration_ms", 0) / 1000 + 1 and w["t"] >= f["start_s"] for f in fz)
hit = [w for w in ws if overlaps(w)]
rest = [w for w in ws if not overlaps(w) and w.get("ops_per_s")]
if hit and rest:
    print("operations in the %d seconds of a freeze or just after: p99 up to %.0f ms, slowest %.0f ms; in the other %d seconds: p99 up to %.0f ms, slowest %.0f ms" % (
        len(hit), max(w["p99_ms"] for w in hit), max(w["max_ms"] for w in hit),
        len(rest), max(w["p99_ms"] for w in rest), max(w["max_ms"] for w in rest)))
rel = r.get("relays", {})
print("errors by kind (failed operations and the outbox/timer relays' errors, %d of them):" % rel.get("errors", 0) if errs else "errors: 0")
for k in sorted(errs):
    print("  %s: %d" % (k, errs[k]))
if failed or errs:
    print("first errors seen:")
    for s in r.get("error_samples", [])[:5]:
        print("  " + s.replace("\n", " ")[:400])
    if "sqlstate_PS" in errs:
        print("PS001 is the shard's fence refusing a range that moved while a transaction routed by the old map ran. "
              "The proxy retries a statement refused before it had any effect; a transaction already under way "
              "gets PS001 (its HINT says to retry).")
sys.exit(4 if failed else 0)
PY
then grow_failed=0; else grow_failed=$?; fi
printf 'report: %s\n' "$(pwd)/$grow_out/report.html"
if [ "$grow_failed" -ne 0 ] && [ -z "${DEMO_GROW_ALLOW_FAILED:-}" ]; then
	echo "the load had failed transactions while ranges moved (goal 0; DEMO_GROW_ALLOW_FAILED=1 reports them without failing)" >&2
	exit 1
fi
case $grow_rc in
0) ;;
3) echo "loadgen: the threshold --fail-if '$grow_fail_if' held (exit 3)" >&2; exit 1 ;;
*) echo "loadgen failed (exit $grow_rc):" >&2; cat "$grow_log" >&2; exit 1 ;;
esac
