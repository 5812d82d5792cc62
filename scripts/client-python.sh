#!/usr/bin/env bash
# The Python consumer client (clients/python, distribution outbox-consumer): installs it with
# its dev extras into a virtualenv of its own, target/tools/python-client-venv/ (never the
# system's Python: a stock Debian's pip is PEP 668-locked), then checks that its copies of the
# protocol files match the repository's (scripts/sync_protocol.sh --check python),
# runs ruff, mypy --strict and pytest: unit tests on the golden data, integration tests on the
# local Redis (127.0.0.1:6379, or OUTBOX_TEST_REDIS_URL) and Postgres (127.0.0.1:5432, or
# OUTBOX_TEST_PG_ADDR), and end-to-end tests with target/debug/outbox-relay (and the Rust
# example, for a mixed fleet) when they are built. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/tools/python-client-venv
pkg=clients/python

if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "client-python: installing python3-venv with apt" >&2
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd=sudo
  $sudo_cmd apt-get install -y -qq python3-venv >/dev/null
fi
if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
fi
# Reinstalled when the package's metadata changed (an editable install follows the sources).
stamp="$venv/.outbox-consumer-pyproject"
if ! cmp -s "$pkg/pyproject.toml" "$stamp" 2>/dev/null; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check -e "./$pkg[dev]"
  cp "$pkg/pyproject.toml" "$stamp"
fi

if [[ -x scripts/sync_protocol.sh ]] || [[ -f scripts/sync_protocol.sh ]]; then
  echo "client-python: protocol files in sync"
  bash scripts/sync_protocol.sh --check python
else
  echo "client-python: scripts/sync_protocol.sh not there yet: protocol copies not checked" >&2
fi

cd "$pkg"
echo "client-python: ruff"
"../../$venv/bin/ruff" check .
"../../$venv/bin/ruff" format --check .
echo "client-python: mypy --strict"
"../../$venv/bin/mypy" --strict
echo "client-python: pytest"
"../../$venv/bin/pytest" -q -p no:cacheprovider "$@"
