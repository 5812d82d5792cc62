"""The protocol's Redis scripts, loaded from the ``.lua`` files shipped in this package
(``outbox_consumer/protocol/scripts``): the same bytes as the repository's
``consumer/protocol/scripts`` and ``core/protocol/scripts``, copied by
``scripts/sync_protocol.sh``. Never a copy typed here."""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources

#: The scripts this client runs, by file name (without ``.lua``).
NAMES = (
    "ack_if_mine",
    "claim",
    "dead_letter",
    "hand_over",
    "hold",
    "lease",
    "members",
    "park",
    "pop",
    "read",
    "unlock",
    "unpark",
)


@cache
def source(name: str) -> str:
    """The text of script ``name`` (``read``, ``lease``, ...), as shipped."""
    root = resources.files("outbox_consumer").joinpath("protocol")
    for folder in ("scripts", "."):
        candidate = root.joinpath(folder).joinpath(f"{name}.lua")
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    raise FileNotFoundError(
        f"protocol script {name}.lua is not in the package (run scripts/sync_protocol.sh)"
    )


@cache
def sha1(name: str) -> str:
    """The script's SHA1, what EVALSHA takes."""
    return hashlib.sha1(source(name).encode("utf-8")).hexdigest()
