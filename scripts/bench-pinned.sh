#!/usr/bin/env bash
# Runs `outbox-bench` with the local Postgres on CPU 0 and everything else (Redis, the
# relays, the bench's producers) on CPU 1: what a drain looks like when Postgres has a core of
# its own, as it does when Redis and the relay run on other hosts. Restores both servers'
# affinity to all CPUs on exit, whatever happens. Needs 2+ CPUs and permission to change the
# servers' affinity (root, or the servers' owner).
#   scripts/bench-pinned.sh --only drain,ceiling --repeat 2
# Build both binaries first: cargo build --release --bins -p outbox-relay-server -p outbox-bench
# (outbox-bench runs the outbox-relay beside it).
set -euo pipefail
bin="${BENCH_BIN:-./target/release/outbox-bench}"
all=$(printf '%x' $(( (1 << $(nproc)) - 1 )))
restore() {
  for p in $(pgrep postgres || true); do taskset -p "$all" "$p" >/dev/null 2>&1 || true; done
  for p in $(pgrep redis-server || true); do taskset -a -p "$all" "$p" >/dev/null 2>&1 || true; done
}
trap restore EXIT
# New backends fork from the postmaster and inherit its affinity.
for p in $(pgrep postgres); do taskset -p 1 "$p" >/dev/null; done
for p in $(pgrep redis-server); do taskset -a -p 2 "$p" >/dev/null; done
taskset -c 1 "$bin" "$@"
