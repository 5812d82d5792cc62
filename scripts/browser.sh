#!/usr/bin/env bash
# Makes sure the headless browser the UI tests drive is installed: Debian's chromium and
# chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver). Installs them with apt when
# absent; does nothing when they are there.
set -euo pipefail

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
echo "browser: installing chromium and chromium-driver"
as_root apt-get update -qq
DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq chromium chromium-driver
/usr/bin/chromedriver --version
