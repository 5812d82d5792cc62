"""The Redis key names the relay and every consumer share (docs/protocol.md, "Keys")."""

from __future__ import annotations


def stream_key(prefix: str, topic: str) -> str:
    """``<prefix><topic>``: a topic's one stream."""
    return f"{prefix}{topic}"


def partition_keys(prefix: str, topic: str, partitions: int) -> list[str]:
    """The streams of a topic with ``partitions`` partitions: ``<prefix><topic>:<p>``, or the
    topic's one stream for a count of 0 or 1."""
    if partitions <= 1:
        return [stream_key(prefix, topic)]
    return [f"{prefix}{topic}:{p}" for p in range(partitions)]


def partitions_hash(prefix: str) -> str:
    """``<prefix>partitions``: topic -> partition count."""
    return f"{prefix}partitions"


def dead_key(prefix: str, topic: str) -> str:
    """``<prefix><topic>:dead``: a topic's dead stream (one for all its partitions)."""
    return f"{prefix}{topic}:dead"


def slot_tag(key: str) -> str:
    """``key`` itself when it has a non-empty hash tag, else ``{key}``: a key that shares
    ``key``'s cluster slot."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key
    return "{" + key + "}"


def fleet_members(prefix: str, topic: str, group: str) -> str:
    """``<prefix><topic>:{<group>}:members``: the group's live members (sorted set)."""
    return f"{prefix}{topic}:{{{group}}}:members"


def partition_owner(stream: str, group: str) -> str:
    """``{<stream>}:owner:<group>``: a partition's lease (the owner's name)."""
    return f"{slot_tag(stream)}:owner:{group}"


def partition_epoch(stream: str, group: str) -> str:
    """``{<stream>}:epoch:<group>``: a partition's fencing epoch counter."""
    return f"{slot_tag(stream)}:epoch:{group}"


def parked_key(prefix: str, topic: str, group: str) -> str:
    """``<prefix><topic>:{<group>}:parked``: a group's parked keys of a topic (hash)."""
    return f"{prefix}{topic}:{{{group}}}:parked"


def held_key(prefix: str, topic: str, group: str, key: str) -> str:
    """``<prefix><topic>:{<group>}:held:<key>``: the entries held behind a parked key."""
    return f"{prefix}{topic}:{{{group}}}:held:{key}"


def drain_lock_key(held: str) -> str:
    """``<held list>:drain``: which consumer drains a released key now."""
    return f"{held}:drain"
