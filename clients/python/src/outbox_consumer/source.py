"""Where the loop's entries come from and what it may do with them: plain stream commands on a
topic with one stream, the protocol's lease-checked scripts on a partition the fleet divides
(docs/protocol.md, "Reading and acknowledging under a lease")."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import _redis, keys
from ._redis import RawEntry, Redis
from .config import ConsumerConfig
from .entry import Lease
from .fleet import RELEASE, Fleet

log = logging.getLogger("outbox_consumer")

EntryRef = tuple[str, str]


class CheckKind(enum.Enum):
    ANYONE = "anyone"
    HELD = "held"
    NOT_MINE = "not_mine"


@dataclass
class Check:
    kind: CheckKind
    lease: Lease | None = None


@dataclass
class NewEntries:
    entries: list[RawEntry] = field(default_factory=list)
    #: Streams where this consumer still has older pending entries: those come first.
    held: list[str] = field(default_factory=list)
    #: Entries read from a ``held`` stream in the same round trip: never attempted.
    early: list[EntryRef] = field(default_factory=list)


@dataclass
class Rebalanced:
    released: list[str] = field(default_factory=list)
    taken: list[str] = field(default_factory=list)


def by_stream(refs: Sequence[EntryRef]) -> list[tuple[str, list[str]]]:
    """The ids of ``refs`` per stream, streams in order of first appearance."""
    out: dict[str, list[str]] = {}
    for stream, stream_id in refs:
        out.setdefault(stream, []).append(stream_id)
    return list(out.items())


def _add_acks(pipe: _redis.Pipeline, group: str, refs: Sequence[EntryRef]) -> None:
    for stream, ids in by_stream(refs):
        _redis.queue(pipe, "XACK", stream, group, *ids)


class Source:
    """The group as the loop sees it; partitions of divided topics go through the fleet."""

    def __init__(self, config: ConsumerConfig, fleet: Fleet) -> None:
        self.config = config
        self.fleet = fleet

    @property
    def fenced(self) -> bool:
        return self.fleet.is_active()

    def readable(self, streams: Sequence[str]) -> list[str]:
        return self.fleet.readable(streams)

    def check(self, stream: str) -> Check:
        if self.fleet.owner_key(stream) is None:
            return Check(CheckKind.ANYONE)
        lease = self.fleet.lease_in_hand(stream)
        if lease is None:
            return Check(CheckKind.NOT_MINE)
        return Check(CheckKind.HELD, lease)

    def fenced_out(self, stream: str) -> None:
        self.fleet.forget(stream)

    def releasing(self) -> bool:
        return bool(self.fleet.to_release())

    async def rebalance(self, conn: Redis) -> Rebalanced:
        """Between batches: gives up partitions no longer targets, takes over new ones."""
        c = self.config
        changes = Rebalanced()
        for stream, owner, epoch in self.fleet.to_release():
            await _redis.run_script(conn, "lease", [owner, epoch], [c.consumer, 0, RELEASE])
            self.fleet.forget(stream)
            log.info("gave up partition %s for a rebalance", stream)
            changes.released.append(stream)
        for stream, owner, lease in self.fleet.to_hand_over():
            taken = int(
                await _redis.run_script(conn, "hand_over", [stream, owner], [c.group, c.consumer])
            )
            if taken >= 0:
                self.fleet.handed(stream)
                log.info(
                    "partition %s handed over (partition %d, epoch %d, %d entries taken): "
                    "its unacknowledged entries first, in order",
                    stream,
                    lease.partition,
                    lease.epoch,
                    taken,
                )
                changes.taken.append(stream)
            else:
                self.fleet.forget(stream)
        return changes

    async def read_new(
        self, conn: Redis, streams: Sequence[str], acks: Sequence[EntryRef]
    ) -> NewEntries:
        """New entries (acknowledging ``acks`` in the same round trip); with nothing new,
        waits up to ``block`` for one to arrive."""
        if not streams:
            await self.ack(conn, acks)
            await asyncio.sleep(min(self.config.block, 0.05))
            return NewEntries()
        if self.fenced:
            read, last = await self._read_fenced(conn, streams, acks)
            if not read.entries and not read.held and last:
                await _redis.call(
                    conn,
                    "XREAD",
                    "COUNT",
                    1,
                    "BLOCK",
                    max(int(self.config.block * 1000), 1),
                    "STREAMS",
                    *[s for s, _ in last],
                    *[i for _, i in last],
                )
            elif not read.entries and not read.held:
                await asyncio.sleep(min(self.config.block, 0.05))
            return read
        read = await self._read_unless_held(conn, streams, acks)
        if read.entries or read.held:
            return read
        reply = await _redis.call(conn, *self._xreadgroup(streams, self.config.block))
        return NewEntries(entries=_redis.parse_read_reply(reply))

    def _xreadgroup(self, streams: Sequence[str], block: float | None) -> list[Any]:
        c = self.config
        cmd: list[Any] = ["XREADGROUP", "GROUP", c.group, c.consumer, "COUNT", c.batch_size]
        if block is not None:
            cmd += ["BLOCK", max(int(block * 1000), 1)]
        return [*cmd, "STREAMS", *streams, *([">"] * len(streams))]

    async def _read_unless_held(
        self, conn: Redis, streams: Sequence[str], acks: Sequence[EntryRef]
    ) -> NewEntries:
        c = self.config
        pipe = conn.pipeline(transaction=False)
        _add_acks(pipe, c.group, acks)
        for s in streams:
            _redis.queue(pipe, "XPENDING", s, c.group, "-", "+", 1, c.consumer)
        _redis.queue(pipe, *self._xreadgroup(streams, None))
        replies = await _redis.execute(pipe)
        body = replies[-1]
        pending = replies[len(replies) - 1 - len(streams) : -1]
        held = [s for s, p in zip(streams, pending) if isinstance(p, list) and p]
        read = NewEntries(held=held)
        for entry in _redis.parse_read_reply(body):
            if entry.stream in held:
                read.early.append(entry.at())
            else:
                read.entries.append(entry)
        return read

    async def _read_fenced(
        self, conn: Redis, streams: Sequence[str], acks: Sequence[EntryRef]
    ) -> tuple[NewEntries, list[tuple[str, str]]]:
        c = self.config
        pipe = conn.pipeline(transaction=False)
        _add_acks(pipe, c.group, acks)
        owners: list[str] = []
        indexes: list[int] = []
        for s in streams:
            owner = self.fleet.owner_key(s)
            if owner is None:
                indexes.append(0)
            else:
                owners.append(owner)
                indexes.append(len(owners))
        _redis.add_script(
            pipe,
            "read",
            [*streams, *owners],
            [c.group, c.consumer, c.batch_size, *indexes],
        )
        reply = (await _redis.execute(pipe))[-1]
        read = NewEntries()
        last: list[tuple[str, str]] = []
        if not isinstance(reply, list) or not reply:
            return read, last
        tag = _redis.text(reply[0])
        body = reply[1] if len(reply) > 1 else None
        if tag == "e":
            read.entries = _redis.parse_read_reply(body)
        elif tag == "w" and isinstance(body, list):
            last = [
                (_redis.text(body[i]), _redis.text(body[i + 1])) for i in range(0, len(body) - 1, 2)
            ]
        elif tag == "p" and isinstance(body, list):
            read.held = [_redis.text(s) for s in body]
        return read, last

    async def pending_mine(self, conn: Redis, stream: str) -> list[tuple[str, int]]:
        """This consumer's pending entries of ``stream``, oldest first, with delivery counts."""
        c = self.config
        reply = await _redis.call(
            conn, "XPENDING", stream, c.group, "-", "+", c.batch_size, c.consumer
        )
        return [(_redis.text(p[0]), int(p[3])) for p in reply or []]

    async def fetch(self, conn: Redis, stream: str, ids: Sequence[str]) -> list[RawEntry | None]:
        """The entries with these ids (``None``: no longer in the stream)."""
        if not ids:
            return []
        pipe = conn.pipeline(transaction=False)
        for i in ids:
            _redis.queue(pipe, "XRANGE", stream, i, i)
        out: list[RawEntry | None] = []
        for reply in await _redis.execute(pipe):
            found = _redis.parse_entries(stream, reply)
            out.append(found[0] if found else None)
        return out

    async def claim_abandoned(self, conn: Redis, stream: str) -> int:
        """Claims entries idle longer than ``claim_idle`` (XAUTOCLAIM JUSTID); a divided
        partition's entries are taken over by its new owner instead."""
        if self.fleet.owner_key(stream) is not None:
            return 0
        c = self.config
        cursor = "0-0"
        claimed = 0
        for _ in range(10):
            reply = await _redis.call(
                conn,
                "XAUTOCLAIM",
                stream,
                c.group,
                c.consumer,
                int(c.claim_idle * 1000),
                cursor,
                "COUNT",
                c.batch_size,
                "JUSTID",
            )
            if not isinstance(reply, list) or len(reply) < 2:
                break
            claimed += len(reply[1] or [])
            cursor = _redis.text(reply[0])
            if cursor == "0-0" or claimed >= c.batch_size:
                break
        return claimed

    async def take(self, conn: Redis, stream: str, stream_id: str, deliveries: int) -> bool:
        """Takes pending entry ``stream_id`` for delivery number ``deliveries`` (XCLAIM ...
        RETRYCOUNT n JUSTID, lease-checked on a divided partition): false when it is no longer
        this consumer's."""
        c = self.config
        args = [0, stream_id, "RETRYCOUNT", max(deliveries, 0), "JUSTID"]
        owner = self.fleet.owner_key(stream)
        if owner is None:
            ids = await _redis.call(conn, "XCLAIM", stream, c.group, c.consumer, *args)
            return bool(ids)
        reply = await _redis.run_script(
            conn, "claim", [stream, owner], [c.group, c.consumer, *args]
        )
        return isinstance(reply, list) and bool(reply)

    async def keep_in_hand(self, conn: Redis, refs: Sequence[EntryRef], min_idle: float) -> None:
        """Restarts the idle time of the entries in hand (idle at least ``min_idle``)."""
        c = self.config
        pipe = conn.pipeline(transaction=False)
        for stream, ids in by_stream(refs):
            owner = self.fleet.owner_key(stream)
            args = [int(min_idle * 1000), *ids, "JUSTID"]
            if owner is None:
                _redis.queue(pipe, "XCLAIM", stream, c.group, c.consumer, *args)
            else:
                _redis.add_script(pipe, "claim", [stream, owner], [c.group, c.consumer, *args])
        if len(pipe):
            await _redis.execute(pipe)

    async def ack(self, conn: Redis, refs: Sequence[EntryRef]) -> None:
        if not refs:
            return
        pipe = conn.pipeline(transaction=False)
        _add_acks(pipe, self.config.group, refs)
        await _redis.execute(pipe)


async def resolve_partitions(conn: Redis, config: ConsumerConfig) -> list[tuple[str, list[str]]]:
    """Each topic's streams: its one stream, or its N partitions' when ``<prefix>partitions``
    says N > 1."""
    out = []
    for topic in config.topic_list:
        count = await _redis.call(conn, "HGET", keys.partitions_hash(config.stream_prefix), topic)
        n = int(count) if count is not None else 1
        out.append((topic, keys.partition_keys(config.stream_prefix, topic, n)))
    return out


async def ensure_group(conn: Redis, stream: str, group: str) -> None:
    """``XGROUP CREATE stream group 0 MKSTREAM``; an existing group is left as it is."""
    try:
        await _redis.call(conn, "XGROUP", "CREATE", stream, group, "0", "MKSTREAM")
    except Exception as e:
        if "BUSYGROUP" not in str(e):
            raise
