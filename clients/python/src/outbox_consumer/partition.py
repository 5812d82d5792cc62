"""Which partition of a topic an event goes to: ``(murmur2(key as UTF-8) & 0x7fffffff) % N``,
with the murmur2 of Kafka's default partitioner (seed ``0x9747b28c``), as the relay computes it
(docs/protocol.md, "The partition function")."""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: MurmurHash2, 32 bits, the tail read little-endian. Returns
    the signed 32-bit value, as Java's ``int``."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = data[whole:]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: str | bytes, partitions: int) -> int:
    """The partition of ``key`` among ``partitions`` (a count of 0 is taken as 1): Kafka's
    ``toPositive(murmur2(key)) % partitions``. A ``str`` key is hashed as UTF-8."""
    data = key.encode("utf-8") if isinstance(key, str) else key
    return (murmur2(data) & 0x7FFFFFFF) % max(partitions, 1)
