#!/usr/bin/env bash
# Runs every fuzz target in the module for FUZZTIME each (default 20s), one
# after the other, and fails if any target fails. New crashers land in the
# package's testdata/fuzz/<Target>/ and fail `make test` until fixed.
#
# Targets are found, not listed: every `func FuzzXxx(f *testing.F)` in the
# test files of every package `go list ./...` reports, so a new target is
# run without being named here. A target go test then does not find (a
# build tag, a typo in the signature) fails the run instead of being
# skipped, as does any target that fails.
#
# Usage: scripts/fuzz-all.sh [FUZZTIME]
set -euo pipefail
fuzztime=${1:-20s}
cd "$(dirname "$0")/.."
start=$(date +%s)

targets=()
pkgs=$(go list -f '{{.ImportPath}} {{.Dir}}' ./...)
while read -r pkg dir; do
	for f in "$dir"/*_test.go; do
		[ -e "$f" ] || continue
		names=$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*\*testing\.F).*/\1/p' "$f")
		decls=$(grep -c '^func Fuzz' "$f" || true)
		if [ "$(wc -w <<<"$names")" -ne "$decls" ]; then
			echo "fuzz: $f declares $decls func Fuzz..., of which only [$names] read as fuzz targets" >&2
			exit 1
		fi
		for n in $names; do targets+=("$pkg $dir $n"); done
	done
done <<<"$pkgs"
if ((${#targets[@]} == 0)); then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi

echo "fuzz: ${#targets[@]} targets, ${fuzztime} each"
failed=()
# inputs counts the saved inputs of a target (a failure adds one).
inputs() {
	if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi
}
for t in "${targets[@]}"; do
	read -r pkg dir target <<<"$t"
	corpus="$dir/testdata/fuzz/$target"
	before=$(inputs "$corpus")
	budget=$fuzztime
	limit=()
	for attempt in 1 2; do
		echo "== $pkg $target ($budget)"
		out=$(mktemp)
		rc=0
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$budget" "${limit[@]}" "$pkg" 2>&1 | tee "$out" || rc=$?
		if ((rc == 0)); then
			if grep -q 'no fuzz tests to fuzz' "$out"; then
				echo "fuzz: go test did not find $target in $pkg" >&2
				failed+=("$pkg $target (not found by go test)")
			fi
			rm -f "$out"
			break
		fi
		# Go 1.26's fuzzing coordinator can fail a target at a duration
		# -fuzztime's deadline with a bare "context deadline exceeded" and
		# no input written (golang/go#75804, fixed in Go 1.27): it compares
		# the deadline's context with its child before the child is
		# cancelled. Starved workers on a loaded 2-core machine widen that
		# window enough to lose it twice in a row. A count budget
		# (-fuzztime Nx) has no deadline to race, so such a target runs once
		# more for as many executions as the lost run reached: the same
		# amount of fuzzing in about the same time, bounded by -timeout.
		# Any other failure, or a failure of the count run, fails.
		if ((attempt == 1)) && [ "$(inputs "$corpus")" = "$before" ] && grep -qx '[[:space:]]*context deadline exceeded' "$out"; then
			execs=$(sed -n 's/.*execs: \([0-9][0-9]*\) .*/\1/p' "$out" | tail -1)
			execs=${execs:-0}
			((execs >= 1)) || execs=1
			budget="${execs}x"
			limit=(-timeout 30m)
			echo "fuzz: $target lost the fuzzing coordinator's deadline race (golang/go#75804), no input written: running it again for $budget executions, which has no deadline" >&2
			rm -f "$out"
			continue
		fi
		failed+=("$pkg $target")
		rm -f "$out"
		break
	done
done

took=$(($(date +%s) - start))
if ((${#failed[@]} > 0)); then
	echo
	echo "fuzz: FAIL: ${#failed[@]} of ${#targets[@]} targets failed (${took}s); each failing input is in the package's testdata/fuzz/<Target>/:" >&2
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
echo "fuzz: ok: ${#targets[@]} targets, ${fuzztime} each, ${took}s"
