#!/usr/bin/env bash
# The TypeScript client (clients/typescript, @outbox-relay/consumer): install its locked
# dependencies, build, lint, check that its copies of the protocol's shared files are the
# repository's bytes, and run its tests (unit tests on the golden data; integration tests on
# the local Redis 127.0.0.1:6379 and Postgres 127.0.0.1:5432, each with keys and a database of
# its own; end-to-end tests with target/debug/outbox-relay, skipped when it is not built, and
# with target/debug/examples/inbox_consumer in the mixed fleet when it is).
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
started=$SECONDS

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "client-typescript: node and npm are required (Node 20 or newer)" >&2
  exit 1
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if (( major < 20 )); then
  echo "client-typescript: Node $(node --version) is too old: 20 or newer" >&2
  exit 1
fi

if [[ -x scripts/sync_protocol.sh ]]; then
  echo "client-typescript: scripts/sync_protocol.sh --check"
  scripts/sync_protocol.sh --check
fi

cd clients/typescript
echo "client-typescript: npm ci"
npm ci --no-audit --no-fund --loglevel=error
echo "client-typescript: npm run build"
npm run --silent build
echo "client-typescript: npm run lint"
npm run --silent lint
echo "client-typescript: npm test"
for binary in target/debug/outbox-relay target/debug/examples/inbox_consumer; do
  if [[ ! -x $root/$binary ]]; then
    # `make test` sets OUTBOX_CLIENT_E2E=required: the end-to-end tests must run there.
    if [[ ${OUTBOX_CLIENT_E2E:-} == required ]]; then
      echo "client-typescript: $binary is not built (OUTBOX_CLIENT_E2E=required): run \`make test-build\`" >&2
      exit 1
    fi
    echo "client-typescript: $binary is not built: the end-to-end tests that need it are skipped (cargo build)"
  fi
done
npm test
echo "client-typescript: done in $((SECONDS - started))s"
