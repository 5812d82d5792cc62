#!/usr/bin/env bash
# Makes sure the local services the product and its tests need are running:
# PostgreSQL on 127.0.0.1:5432 (trust auth, user postgres), or else a private cluster of the
# project's (scripts/private-pg.sh), and Redis on 127.0.0.1:6379.
# Starts them when stopped, installs them with apt when absent. Never stops or flushes them.
# Also installs PgBouncer when absent, but does not run it: the tests start their own.
set -euo pipefail

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@"
}

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }

if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
  echo "services: installing PostgreSQL"
  apt_install postgresql postgresql-client
fi
if ! pg_up; then
  echo "services: starting PostgreSQL"
  ver=$(ls /etc/postgresql | sort -V | tail -n1)
  as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
fi
pg_up || { echo "services: PostgreSQL is not reachable on 127.0.0.1:5432" >&2; exit 1; }
# The demo and the tests connect as postgres over TCP without a password. A system server that
# does not let them in is left as it is: they get a private cluster of their own instead
# (scripts/private-pg.sh; OUTBOX_PRIVATE_PG=1 asks for it anyway).
if [ "${OUTBOX_PRIVATE_PG:-0}" = 1 ] || ! psql -h 127.0.0.1 -U postgres -d postgres -tAc 'select 1' >/dev/null 2>&1; then
  echo "services: the system PostgreSQL does not let postgres in over TCP without a password (or OUTBOX_PRIVATE_PG=1): using a private cluster"
  bash scripts/private-pg.sh
else
  rm -f "${PRIVATE_PG_DIR:-$PWD/target/pg}/addr"
fi

if ! command -v redis-server >/dev/null 2>&1; then
  echo "services: installing Redis"
  apt_install redis-server
fi
if ! redis_up; then
  echo "services: starting Redis"
  mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 30); do redis_up && break; sleep 0.5; done
fi
redis_up || { echo "services: Redis is not reachable on 127.0.0.1:6379" >&2; exit 1; }

# PgBouncer: only its binary (Debian puts it in /usr/sbin). The `pgbouncer` tests start private
# instances in transaction pooling mode (tests/e2e/support/pgbouncer.rs); the packaged service,
# which the package enables where systemd runs, is switched off right after installing.
if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
  echo "services: installing PgBouncer (its service stays off: the tests start their own)"
  apt_install pgbouncer
  if [ -d /run/systemd/system ]; then
    as_root systemctl disable --now pgbouncer >/dev/null 2>&1 || true
  fi
fi
echo "services: PostgreSQL and Redis are up, PgBouncer installed"
