"""The protocol's golden data (``consumer/protocol/golden/*.json``, shipped in the package
under ``outbox_consumer/protocol/golden`` by scripts/sync_protocol.sh), read by the unit
tests of every client."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

import pytest


def golden_dir() -> Any:
    return resources.files("outbox_consumer").joinpath("protocol").joinpath("golden")


def load(name: str) -> Any:
    folder = golden_dir()
    path = folder.joinpath(name)
    if not path.is_file():
        pytest.skip(f"golden data {name} not in the package yet (scripts/sync_protocol.sh)")
    return json.loads(path.read_text("utf-8"))


@dataclass
class PartitionVector:
    key: str
    partitions: int
    partition: int
    murmur2: int | None


def golden_partition_vectors() -> list[PartitionVector]:
    data = load("partitions.json")
    items = data["vectors"] if isinstance(data, dict) else data
    out = []
    for v in items:
        for count, partition in v["partitions"].items():
            out.append(
                PartitionVector(
                    key=v["key"],
                    partitions=int(count),
                    partition=int(partition),
                    murmur2=v.get("murmur2"),
                )
            )
    return out


def golden_entries() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = load("entries.json")["cases"]
    return cases


def field_value(value: Any) -> str | bytes:
    """A golden field value: text, or ``{"hex": ...}`` for raw bytes."""
    if isinstance(value, dict):
        return bytes.fromhex(value["hex"])
    assert isinstance(value, str)
    return value
