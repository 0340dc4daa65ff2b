#!/usr/bin/env bash
# make compat: pgx's and lib/pq's own test suites and PostgreSQL's regression suite through
# pgshard (and, for comparison, directly and through PgBouncer in session and
# transaction pooling), with a scoreboard and thresholds.
#
# Usage: scripts/compat.sh PGSHARD_BIN OUT_DIR [THRESHOLDS]
#
# COMPAT_TARGETS (comma-separated; default: every target) narrows the run;
# COMPAT_TIMEOUT (a Go duration; default 35m) is the hard bound of the
# whole run. COMPAT_CI=1 (.ci/run) leaves out the PgBouncer reference
# targets, which no threshold reads (the full run, without it, is the one
# the README's scoreboard comes from).
#
# It installs what it needs, skipping what is present: postgresql-server-dev
# of the installed server's exact version (pg_regress, headers to build
# regress.so), dpkg-dev, and the server's Debian source package (the
# regression tests and their expected output) through a deb-src entry it
# adds for Debian's own archive. The drivers' suites are fetched by `go` at
# the versions internal/tools/compat asks for (no vendoring).
set -euo pipefail
bin=$1
out=$2
thresholds=${3:-}
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

# The server's exact package version: the regression suite's expected
# output and pg_regress must match the server that runs it.
ver=$(dpkg-query -W -f='${Version}' postgresql-15 2>/dev/null || true)
if [ -z "$ver" ]; then
	echo "compat: postgresql-15 is not installed (run make deps)" >&2
	exit 2
fi
upstream=${ver%%-*}

need=()
for p in "postgresql-server-dev-15=$ver" "libpq-dev=$ver" dpkg-dev make gcc; do
	name=${p%%=*}
	want=${p#*=}
	have=$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null || true)
	if [[ "$have" != "install ok installed"* ]] || { [ "$want" != "$p" ] && [[ "$have" != *" $want" ]]; }; then
		need+=("$p")
	fi
done
srcdir=${COMPAT_SRC:-/var/cache/pgshard-compat}
regress="$srcdir/postgresql-$upstream/src/test/regress"
if ((${#need[@]} > 0)) || [ ! -f "$regress/parallel_schedule" ]; then
	if ! grep -rqs "^Types: deb-src" /etc/apt/sources.list.d/ && ! grep -qs "^deb-src" /etc/apt/sources.list; then
		# apt-get source needs deb-src entries; Debian's own archive only.
		$sudo tee /etc/apt/sources.list.d/pgshard-compat-src.sources >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
	fi
	$sudo apt-get update -qq
fi
if ((${#need[@]} > 0)); then
	echo "compat: installing ${need[*]}"
	# --allow-downgrades: the dev package must be the server's version, never
	# an upgrade that would replace the server under other users.
	$sudo apt-get install -y -qq --no-install-recommends --allow-downgrades "${need[@]}" >/dev/null
fi
if [ ! -f "$regress/parallel_schedule" ]; then
	$sudo mkdir -p "$srcdir"
	echo "compat: fetching the source package postgresql-15=$ver"
	(cd "$srcdir" && $sudo apt-get source --download-only -qq "postgresql-15=$ver" 2>&1 | grep -v "unsandboxed" || true)
	tarballs=("$srcdir"/postgresql-15_"$upstream".orig.tar.*)
	tarball=""
	[ -e "${tarballs[0]}" ] && tarball=${tarballs[0]}
	if [ -z "$tarball" ]; then
		echo "compat: apt-get source postgresql-15=$ver fetched nothing: the regression suite cannot run" >&2
		exit 2
	fi
	$sudo tar -xf "$tarball" -C "$srcdir" "postgresql-$upstream/src/test/regress"
fi
# regress.so, built against the installed server with PGXS (no server build);
# the triggers test also loads contrib's autoinc.so and refint.so.
lib="$srcdir/regresslib-$upstream"
if [ ! -f "$lib/regress.so" ]; then
	$sudo mkdir -p "$lib"
	$sudo cp "$regress/regress.c" "$lib/"
	printf 'MODULES = regress\nPG_CONFIG = pg_config\nPGXS := $(shell $(PG_CONFIG) --pgxs)\ninclude $(PGXS)\n' | $sudo tee "$lib/Makefile" >/dev/null
	$sudo make -s -C "$lib" >/dev/null
fi
pglib=$(pg_config --pkglibdir)
for so in autoinc.so refint.so; do
	[ -e "$lib/$so" ] || $sudo ln -sf "$pglib/$so" "$lib/$so"
done

go build -o bin/compat ./internal/tools/compat
args=(-pgshard "$bin" -out "$out" -regress-src "$regress" -regress-lib "$lib" -pg-regress "$pglib/pgxs/src/test/regress/pg_regress")
if [ -n "$thresholds" ]; then args+=(-thresholds "$thresholds"); fi
targets=${COMPAT_TARGETS:-}
if [ -z "$targets" ] && [ "${COMPAT_CI:-}" = 1 ]; then
	targets=direct,pgshard-session,pgshard-transaction,pgshard-session-2shards,pgshard-transaction-2shards
fi
if [ -n "$targets" ]; then args+=(-targets "$targets"); fi
args+=(-timeout "${COMPAT_TIMEOUT:-35m}")
exec bin/compat "${args[@]}"
