#!/usr/bin/env bash
# Installs what pgshard's demo and tests need on Debian/Ubuntu, skipping what
# is already there: PostgreSQL (server + client + pgbench), PgBouncer, and the
# real client drivers the proxy tests drive (psycopg 3, asyncpg, pgJDBC, node-postgres).
# Usage: scripts/install-deps.sh        (as root, or with sudo available)
set -euo pipefail

packages=(postgresql postgresql-contrib pgbouncer python3-psycopg python3-asyncpg libpostgresql-jdbc-java)

missing=()
for p in "${packages[@]}"; do
	status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	if [ "$status" != "install ok installed" ]; then
		missing+=("$p")
	fi
done

# The proxy's client tests also compile a pgJDBC program (javac) and run
# node-postgres (npm installs pg@8 at test time); checked by command, since
# either may come from outside Debian (e.g. nodesource's nodejs bundles npm).
command -v javac >/dev/null || missing+=(openjdk-17-jdk-headless)
command -v npm >/dev/null || missing+=(nodejs npm)

if ((${#missing[@]} == 0)); then
	echo "deps: all present (${packages[*]})"
else
	echo "deps: installing ${missing[*]}"
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null || { echo "deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
		sudo="sudo"
	fi
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	# policy-rc.d keeps Debian from starting its own postgresql/pgbouncer
	# services: pgshard runs its own servers on free ports.
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
		$sudo chmod +x /usr/sbin/policy-rc.d
		trap '$sudo rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	echo "deps: installed ${missing[*]}"
fi

if ! command -v go >/dev/null; then
	echo "deps: Go is not on PATH (need Go 1.26: https://go.dev/dl/)" >&2
	exit 1
fi
