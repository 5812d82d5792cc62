#!/usr/bin/env bash
# Copies the consumer protocol's shared files (docs/protocol.md) into the clients in other
# languages, which ship them in their packages, so that every client runs the same bytes:
#
#   consumer/protocol/scripts/*.lua, core/protocol/scripts/*.lua  ->  <client>/scripts/
#   consumer/protocol/golden/*.json                               ->  <client>/golden/
#   consumer/sql/*.sql                                             ->  <client>/sql/
#
# where <client> is clients/python/src/outbox_consumer/protocol and
# clients/typescript/protocol. The repository's files are the originals: edit those, then
# run this.
#
#   scripts/sync_protocol.sh [python|typescript ...]          copy (creating the folders)
#   scripts/sync_protocol.sh --check [python|typescript ...]  compare: exit 1 naming every
#                                                              copy that differs, is missing,
#                                                              or has no original any more
#
# Without client names: both. --check skips a client whose folder (clients/python,
# clients/typescript) does not exist, so it holds on a checkout without that client.
set -euo pipefail
shopt -s nullglob

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

check=0
clients=()
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    python | typescript) clients+=("$arg") ;;
    -h | --help)
      sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "sync_protocol.sh: unknown argument '$arg' (--check, python, typescript)" >&2
      exit 2
      ;;
  esac
done
[ ${#clients[@]} -gt 0 ] || clients=(python typescript)

# Each original, as "<subfolder> <path>".
originals() {
  local f
  for f in consumer/protocol/scripts/*.lua core/protocol/scripts/*.lua; do echo "scripts $f"; done
  for f in consumer/protocol/golden/*.json; do echo "golden $f"; done
  for f in consumer/sql/*.sql; do echo "sql $f"; done
}

client_root() { # the client's folder (whether it exists), then where its copies go
  case "$1" in
    python) echo "clients/python clients/python/src/outbox_consumer/protocol" ;;
    typescript) echo "clients/typescript clients/typescript/protocol" ;;
  esac
}

# Two originals by one name would overwrite each other in a client's flat folder.
dups="$(originals | awk '{n=split($2, p, "/"); print $1 "/" p[n]}' | sort | uniq -d)"
if [ -n "$dups" ]; then
  echo "sync_protocol.sh: two originals would be copied to the same place: $dups" >&2
  exit 2
fi

failed=0
for client in "${clients[@]}"; do
  read -r home dest < <(client_root "$client")
  if [ "$check" = 1 ] && [ ! -d "$home" ]; then
    continue
  fi
  expected=""
  while read -r sub src; do
    copy="$dest/$sub/$(basename "$src")"
    expected+="$copy"$'\n'
    if [ "$check" = 1 ]; then
      if [ ! -f "$copy" ]; then
        echo "$copy: missing (the copy of $src; run scripts/sync_protocol.sh)" >&2
        failed=1
      elif ! cmp -s "$src" "$copy"; then
        echo "$copy: differs from $src (run scripts/sync_protocol.sh)" >&2
        failed=1
      fi
    else
      mkdir -p "$dest/$sub"
      cmp -s "$src" "$copy" 2>/dev/null || cp "$src" "$copy"
    fi
  done < <(originals)
  # A copy whose original is gone would still ship: it goes too.
  for sub in scripts golden sql; do
    [ -d "$dest/$sub" ] || continue
    for copy in "$dest/$sub"/*; do
      [ -e "$copy" ] || continue
      if ! grep -qxF "$copy" <<<"$expected"; then
        if [ "$check" = 1 ]; then
          echo "$copy: no original in the repository any more (run scripts/sync_protocol.sh)" >&2
          failed=1
        else
          rm -f "$copy"
        fi
      fi
    done
  done
done

if [ "$check" = 1 ] && [ "$failed" = 1 ]; then
  exit 1
fi
