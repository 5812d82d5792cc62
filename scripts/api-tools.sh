#!/usr/bin/env bash
# Installs the API's outside checkers into a virtualenv of their own, target/tools/api-venv/,
# where the tests look for them: schemathesis (fuzzes the relay against its OpenAPI document)
# and openapi-python-client (generates a client from that document; python-dateutil is what
# the generated client needs besides httpx and attrs), and the CloudEvents Python SDK
# (`cloudevents`: reads the entries of CloudEvents topics as any consumer would). Pinned, so a CI run
# generates the same requests as the last one; nothing is installed system-wide.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/tools/api-venv
pins=(schemathesis==4.32.5 openapi-python-client==0.29.1 python-dateutil==2.9.0.post0 cloudevents==2.2.0)
stamp="$venv/.pins"
if [[ -x $venv/bin/schemathesis && -x $venv/bin/openapi-python-client ]] \
  && [[ "$(cat "$stamp" 2>/dev/null)" == "${pins[*]}" ]]; then
  exit 0
fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "api-tools: installing python3-venv with apt" >&2
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd=sudo
  $sudo_cmd apt-get install -y -qq python3-venv >/dev/null
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}"
echo "${pins[*]}" > "$stamp"
"$venv/bin/schemathesis" --version
"$venv/bin/openapi-python-client" --version
"$venv/bin/python" -c 'import cloudevents.core.formats.json'
