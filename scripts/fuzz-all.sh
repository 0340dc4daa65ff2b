#!/usr/bin/env bash
# Runs every fuzz target in the module for FUZZTIME each (default 20s).
# New crashers land in the package's testdata/fuzz/ and fail `make test`
# until fixed. Usage: scripts/fuzz-all.sh [FUZZTIME]
set -euo pipefail
fuzztime=${1:-20s}
cd "$(dirname "$0")/.."
status=0
while IFS= read -r pkgdir; do
	pkg="./${pkgdir#./}"
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$pkgdir"/*_test.go | sed 's/^func //' | sort -u); do
		echo "== $pkg $target ($fuzztime)"
		if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"; then
			status=1
		fi
	done
done < <(grep -l '^func Fuzz' $(git ls-files '*_test.go') | xargs -n1 dirname | sort -u)
exit $status
