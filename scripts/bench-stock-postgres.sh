#!/usr/bin/env bash
# Runs `outbox-bench` against a Postgres server of its own, started from the installed
# binaries with their stock settings (autovacuum on), on a free port, and removed on exit
# whatever happens. For the soak: this machine's shared server runs with `autovacuum = off`,
# so only a server like this one shows what autovacuum (and migration 8's thresholds) does
# under a long load. Extra `postgresql.conf` lines can be passed in PG_CONF.
#   scripts/bench-stock-postgres.sh --only soak --soak-duration 10m
# Build both binaries first: cargo build --release --bins -p outbox-relay-server -p outbox-bench
# (outbox-bench runs the outbox-relay beside it).
set -euo pipefail
bin="${BENCH_BIN:-./target/release/outbox-bench}"
pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
dir=$(mktemp -d /tmp/outbox-stock-pg.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
stop() {
  as_pg "$pg_bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT
[ "$(id -u)" = 0 ] && chown postgres "$dir"
as_pg "$pg_bin/initdb" -A trust -U postgres --no-sync -D "$dir/data" >/dev/null
{
  echo "port = $port"
  echo "listen_addresses = '127.0.0.1'"
  echo "unix_socket_directories = '$dir'"
  echo "${PG_CONF:-}"
} >>"$dir/data/postgresql.conf"
as_pg "$pg_bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w start >/dev/null
echo "bench-stock-postgres: Postgres $("$pg_bin/postgres" --version | awk '{print $3}') on port $port," \
  "autovacuum $(as_pg "$pg_bin/psql" -h 127.0.0.1 -p "$port" -U postgres -Atc 'show autovacuum')" >&2
"$bin" --database-url "postgres://postgres@127.0.0.1:$port/postgres" "$@"
