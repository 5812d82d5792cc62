"""The fleet: how the consumers of one group divide a partitioned topic's partitions
(docs/protocol.md, "Membership, leases, epochs"), with the same keys and scripts as every
other client, so a Python consumer joins a fleet of Rust or TypeScript ones.

Each consumer renews itself in the group's members set (``members.lua``); from the sorted live
names every member computes the same targets (partition p goes to member ``p mod m``). It takes
the lease of a free target with the next epoch and renews what it holds (``lease.lua``), and
gives up what it should no longer hold after the batch in hand. A lease is trusted only until
two thirds of ``claim_idle`` after the renewal that set it was sent; every command that moves a
partition's entries checks the lease in the same script."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from . import _redis, keys
from ._redis import Redis
from .entry import Lease

log = logging.getLogger("outbox_consumer.fleet")

RENEW, TAKE, RELEASE = "renew", "take", "release"

#: How soon the heartbeat runs again while a target is another's, or right after joining.
EAGER = 0.1


def targets(members: Iterable[str], me: str, partitions: int) -> list[int]:
    """The partitions of ``0..partitions`` that ``me`` should own among ``members``: partition
    p goes to the member at ``p mod m`` of the m distinct names sorted (by their bytes).
    Empty when ``me`` is not a member."""
    ordered = sorted(set(members), key=lambda name: name.encode("utf-8"))
    if me not in ordered:
        return []
    index = ordered.index(me)
    return [p for p in range(partitions) if p % len(ordered) == index]


def beat_every(lease: float) -> float:
    """How often the heartbeat runs: six times per lease, between 20 ms and 1 s."""
    return min(max(lease / 6, 0.02), 1.0)


@dataclass
class PartitionKeys:
    stream: str
    owner: str
    epoch: str


@dataclass
class FleetTopic:
    topic: str
    members: str
    partitions: list[PartitionKeys]


@dataclass
class Held:
    """A lease this consumer holds."""

    partition: int
    epoch: int
    #: Until when (monotonic) this consumer may act on it.
    valid_until: float
    #: Still a target; false: give it up after the batch in hand.
    keep: bool = True
    #: The previous owner's pending entries were taken over.
    handed_over: bool = False


@dataclass
class Settled:
    changes: list[tuple[str, int, int]] = field(default_factory=list)
    waiting: bool = False


def asks(held: dict[str, Held], streams: Sequence[str], wanted: set[int]) -> list[tuple[int, str]]:
    """The lease calls for one topic: renew every lease held, take every target not held."""
    out: list[tuple[int, str]] = []
    for p, stream in enumerate(streams):
        if stream in held:
            out.append((p, RENEW))
        elif p in wanted:
            out.append((p, TAKE))
    return out


def settle(
    held: dict[str, Held],
    streams: Sequence[str],
    wanted: set[int],
    replies: Sequence[tuple[tuple[int, str], int | None]],
    valid_until: float,
) -> Settled:
    """Applies the lease script's replies (an epoch > 0: held; otherwise refused; ``None``:
    the call failed, nothing changes) to the leases held. ``valid_until`` comes from before
    the calls were sent."""
    settled = Settled()
    for (p, op), reply in replies:
        if p >= len(streams) or reply is None or op == RELEASE:
            continue
        stream = streams[p]
        keep = p in wanted
        if op == RENEW:
            h = held.get(stream)
            if reply > 0:
                if h is None:
                    continue
                if h.epoch != reply:
                    del held[stream]
                    settled.changes.append(("changed_hands", p, reply))
                    continue
                if h.keep and not keep:
                    settled.changes.append(("giving_up", p, h.epoch))
                h.valid_until = valid_until
                h.keep = keep
            elif held.pop(stream, None) is not None:
                settled.changes.append(("lost", p, 0))
        elif op == TAKE:
            if reply > 0:
                settled.changes.append(("took", p, reply))
                held[stream] = Held(p, reply, valid_until)
            else:
                settled.waiting = True
    return settled


class Fleet:
    """The fleet bookkeeping of one consumer, shared by the loop and the heartbeat."""

    def __init__(self, me: str, group: str, prefix: str, lease: float) -> None:
        self.me = me
        self.group = group
        self.prefix = prefix
        self.lease = lease
        self.counts: list[tuple[str, int]] = []
        self.stale = False
        self.topics: list[FleetTopic] = []
        self.owners: dict[str, str] = {}
        self.held: dict[str, Held] = {}
        self.joined: set[str] = set()
        self.changed = asyncio.Event()

    @property
    def lease_ms(self) -> int:
        return max(int(self.lease * 1000), 1)

    def trust(self) -> float:
        """How long a renewal is trusted: a third of the lease short of its end in Redis."""
        return self.lease - self.lease / 3

    def configure(self, topics: Sequence[tuple[str, Sequence[str]]]) -> None:
        """Sets the topics (name, streams); a topic with more than one stream is divided."""
        self.counts = [(topic, max(len(streams), 1)) for topic, streams in topics]
        self.stale = False
        self.topics = [
            FleetTopic(
                topic,
                keys.fleet_members(self.prefix, topic, self.group),
                [
                    PartitionKeys(
                        s,
                        keys.partition_owner(s, self.group),
                        keys.partition_epoch(s, self.group),
                    )
                    for s in streams
                ],
            )
            for topic, streams in topics
            if len(streams) > 1
        ]
        self.owners = {p.stream: p.owner for t in self.topics for p in t.partitions}
        self.held = {s: h for s, h in self.held.items() if s in self.owners}
        divided = {t.topic for t in self.topics}
        self.joined &= divided
        self.changed.set()

    def take_stale(self) -> bool:
        stale, self.stale = self.stale, False
        return stale

    def is_active(self) -> bool:
        return bool(self.topics)

    def owner_key(self, stream: str) -> str | None:
        return self.owners.get(stream)

    def lease_in_hand(self, stream: str) -> Lease | None:
        """The lease under which this consumer may handle ``stream``'s entries now."""
        h = self.held.get(stream)
        if h is None or not h.handed_over or time.monotonic() >= h.valid_until:
            return None
        return Lease(h.partition, h.epoch)

    def readable(self, streams: Sequence[str]) -> list[str]:
        now = time.monotonic()
        out = []
        for s in streams:
            if s not in self.owners:
                out.append(s)
                continue
            h = self.held.get(s)
            if h is not None and h.handed_over and h.keep and now < h.valid_until:
                out.append(s)
        return out

    def to_hand_over(self) -> list[tuple[str, str, Lease]]:
        now = time.monotonic()
        return [
            (s, self.owners[s], Lease(h.partition, h.epoch))
            for s, h in self.held.items()
            if not h.handed_over and now < h.valid_until and s in self.owners
        ]

    def handed(self, stream: str) -> None:
        h = self.held.get(stream)
        if h is not None:
            h.handed_over = True

    def to_release(self) -> list[tuple[str, str, str]]:
        out = []
        for t in self.topics:
            for p in t.partitions:
                h = self.held.get(p.stream)
                if h is not None and not h.keep:
                    out.append((p.stream, p.owner, p.epoch))
        return out

    def forget(self, stream: str) -> None:
        self.held.pop(stream, None)

    async def heartbeat(self, conn: Redis) -> None:
        """Runs forever (cancel it to stop): renews membership and leases, takes targets."""
        every = beat_every(self.lease)
        last_error = 0.0
        while True:
            wait = every
            try:
                if await self.beat(conn):
                    wait = min(every, EAGER)
            except Exception as e:  # an outage: leases lapse locally when their time is up
                now = time.monotonic()
                if now - last_error > 30:
                    log.warning(
                        "could not renew partition leases; partitions whose lease runs out "
                        "stop being handled: %s",
                        e,
                    )
                    last_error = now
            self.changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.changed.wait(), wait)

    async def _check_counts(self, conn: Redis) -> None:
        if not self.counts:
            return
        pipe = conn.pipeline(transaction=False)
        for topic, _ in self.counts:
            _redis.queue(pipe, "HGET", keys.partitions_hash(self.prefix), topic)
        now = await _redis.execute(pipe)
        for (_, was), value in zip(self.counts, now):
            count = int(value) if value is not None else 1
            if max(count, 1) != was:
                log.info("a topic's partition count changed: reading its streams anew")
                self.stale = True
                return

    async def beat(self, conn: Redis) -> bool:
        """One round over every divided topic; true when a target is still another's."""
        await self._check_counts(conn)
        waiting = False
        failure: Exception | None = None
        for topic in list(self.topics):
            sent = time.monotonic()
            reply = await _redis.run_script(
                conn, "members", [topic.members], [self.me, self.lease_ms, "join"]
            )
            members = [_redis.text(m) for m in reply or []]
            if topic.topic not in self.joined:
                self.joined.add(topic.topic)
                waiting = True
                continue
            streams = [p.stream for p in topic.partitions]
            wanted = set(targets(members, self.me, len(streams)))
            calls = asks(self.held, streams, wanted)

            async def call(p: int, op: str, t: FleetTopic = topic) -> int | None:
                k = t.partitions[p]
                return int(
                    await _redis.run_script(
                        conn, "lease", [k.owner, k.epoch], [self.me, self.lease_ms, op]
                    )
                )

            results = await asyncio.gather(
                *(call(p, op) for p, op in calls), return_exceptions=True
            )
            replies: list[tuple[tuple[int, str], int | None]] = []
            for ask, result in zip(calls, results):
                if isinstance(result, BaseException):
                    failure = result if isinstance(result, Exception) else None
                    replies.append((ask, None))
                else:
                    replies.append((ask, result))
            if topic not in self.topics:
                continue  # reconfigured meanwhile
            settled = settle(self.held, streams, wanted, replies, sent + self.trust())
            waiting = waiting or settled.waiting
            for what, p, epoch in settled.changes:
                if what == "took":
                    log.info(
                        "took partition %d of %s (epoch %d, %d members)",
                        p,
                        topic.topic,
                        epoch,
                        len(members),
                    )
                elif what == "giving_up":
                    log.info(
                        "giving up partition %d of %s for a rebalance, after the batch in hand",
                        p,
                        topic.topic,
                    )
                elif what == "lost":
                    log.warning(
                        "partition %d of %s: lease lost (it ran out): no longer handled here",
                        p,
                        topic.topic,
                    )
                else:
                    log.warning(
                        "partition %d of %s: lease changed hands: no longer handled here",
                        p,
                        topic.topic,
                    )
        if failure is not None:
            raise failure
        return waiting

    async def leave(self, conn: Redis) -> None:
        """A clean stop: leaves the members sets, then releases every lease held."""
        for t in self.topics:
            await _redis.run_script(conn, "members", [t.members], [self.me, 0, "leave"])
        for t in self.topics:
            for p in t.partitions:
                if p.stream in self.held:
                    await _redis.run_script(
                        conn, "lease", [p.owner, p.epoch], [self.me, self.lease_ms, RELEASE]
                    )
        self.held.clear()
        self.joined.clear()
