#!/usr/bin/env python3
"""The consumer protocol's shared files hold together, without a build (docs/protocol.md):

- docs/protocol.md names its version and every shared file: each script in
  consumer/protocol/scripts/ and core/protocol/scripts/, each golden file in
  consumer/protocol/golden/, each inbox SQL file in consumer/sql/;
- every script starts with the header the other clients follow (the version and its own
  name on the first line; KEYS, ARGV, what it returns; a pointer to docs/protocol.md), and
  no two scripts share a name (the clients copy them into one folder);
- every golden file is JSON naming the same version;
- the clients' copies are the same bytes (scripts/sync_protocol.sh --check).

Exits 1 with one line per problem. The Rust test consumer/tests/protocol.rs checks the
golden data against the library itself.
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTOCOL = "outbox consumer protocol 1"
SCRIPT_DIRS = ["consumer/protocol/scripts", "core/protocol/scripts"]
GOLDEN_DIR = "consumer/protocol/golden"
SQL_DIR = "consumer/sql"


def main() -> int:
    problems: list[str] = []
    doc_path = ROOT / "docs/protocol.md"
    doc = doc_path.read_text(encoding="utf-8") if doc_path.exists() else ""
    if not doc:
        problems.append("docs/protocol.md: missing or empty")
    elif PROTOCOL not in doc:
        problems.append(f"docs/protocol.md: does not name its version ({PROTOCOL!r})")

    shared: list[str] = []
    seen: dict[str, str] = {}
    for folder in SCRIPT_DIRS:
        for path in sorted((ROOT / folder).glob("*.lua")):
            name = f"{folder}/{path.name}"
            shared.append(name)
            if path.name in seen:
                problems.append(f"{name}: same file name as {seen[path.name]}")
            seen[path.name] = name
            header = []
            for line in path.read_text(encoding="utf-8").splitlines():
                if not line.startswith("--"):
                    break
                header.append(line)
            if not header or header[0] != f"-- {PROTOCOL}: {path.name}":
                problems.append(f"{name}: first line is not '-- {PROTOCOL}: {path.name}'")
            text = "\n".join(header)
            for part in ["KEYS[1]", "ARGV[1]", "Returns", "docs/protocol.md"]:
                if part not in text:
                    problems.append(f"{name}: the header says nothing of {part}")
    if not shared:
        problems.append("no scripts found in " + ", ".join(SCRIPT_DIRS))

    for path in sorted((ROOT / GOLDEN_DIR).glob("*.json")):
        name = f"{GOLDEN_DIR}/{path.name}"
        shared.append(name)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as e:
            problems.append(f"{name}: not JSON: {e}")
            continue
        if not isinstance(data, dict) or data.get("protocol") != PROTOCOL:
            problems.append(f"{name}: \"protocol\" is not {PROTOCOL!r}")
    for path in sorted((ROOT / SQL_DIR).glob("*.sql")):
        shared.append(f"{SQL_DIR}/{path.name}")

    if doc:
        for name in shared:
            if name not in doc:
                problems.append(f"docs/protocol.md: does not name {name}")

    sync = subprocess.run(
        ["bash", str(ROOT / "scripts/sync_protocol.sh"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if sync.returncode != 0:
        lines = (sync.stderr or sync.stdout).strip().splitlines()
        problems.extend(lines or [f"scripts/sync_protocol.sh --check: exit {sync.returncode}"])

    for p in problems:
        print(f"protocol_check: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
