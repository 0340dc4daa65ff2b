# bench-lib.sh: what the bench scripts share; sourced, never run. The
# caller sets bin (the pgshard binary) and dir (the cluster's state
# directory) and appends the PIDs of the servers it starts to pids; the
# EXIT trap stops them (waiting up to 5 s each) and takes the dev cluster
# down with its files unless KEEP=1.
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
