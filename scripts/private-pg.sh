#!/usr/bin/env bash
# Starts (creating it the first time) the project's private PostgreSQL cluster: initdb into
# $PRIVATE_PG_DIR/data (default target/pg/data), listening on 127.0.0.1:$PRIVATE_PG_PORT only
# (default 55432), user postgres with trust auth, like the server the tests expect. Writes its
# address to $PRIVATE_PG_DIR/addr, which `make demo` and `make test` read. Run by
# scripts/services.sh when the system's PostgreSQL does not let `postgres` in over TCP (or when
# OUTBOX_PRIVATE_PG=1), so that nobody's pg_hba.conf is ever edited. `--stop` stops it.
# As root the cluster belongs to the `postgres` user (initdb refuses root).
set -euo pipefail

dir=${PRIVATE_PG_DIR:-$PWD/target/pg}
port=${PRIVATE_PG_PORT:-55432}
data=$dir/data

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
[ -n "$bin" ] || { echo "private-pg: no PostgreSQL binaries in /usr/lib/postgresql" >&2; exit 1; }
run=()
if [ "$(id -u)" = 0 ]; then run=(runuser -u postgres --); fi

if [ "${1:-}" = "--stop" ]; then
  [ -f "$data/postmaster.pid" ] && "${run[@]}" "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
  rm -f "$dir/addr"
  exit 0
fi

mkdir -p "$dir"
if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
if [ ! -f "$data/PG_VERSION" ]; then
  echo "private-pg: creating a private PostgreSQL cluster in $data"
  "${run[@]}" "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
fi
if ! pg_isready -h 127.0.0.1 -p "$port" -q 2>/dev/null; then
  echo "private-pg: starting it on 127.0.0.1:$port"
  "${run[@]}" "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 start \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200" >/dev/null \
    || { tail -n 20 "$dir/server.log" >&2; exit 1; }
fi
psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc 'select 1' >/dev/null
echo "127.0.0.1:$port" >"$dir/addr"
echo "private-pg: PostgreSQL for the demo and the tests on 127.0.0.1:$port ($data)"
