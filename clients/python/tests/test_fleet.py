"""Partitioned topics in a fleet: consumers divide the partitions with leases and epochs (the
shared scripts and keys), per-key order holds across the fleet, a crashed member's partitions
are taken over with their pending entries, a clean stop hands them over at once."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict

from outbox_consumer import Entry, partition_for_key

from .conftest import Producer, RedisClient
from .helpers import Running, eventually, make

PARTITIONS = 4


def keyed_order_ok(seen: list[tuple[str, int]]) -> bool:
    """Per key, the first handlings come in publish order (a redelivery may repeat one)."""
    firsts: dict[str, list[int]] = defaultdict(list)
    for key, n in seen:
        if n not in firsts[key]:
            firsts[key].append(n)
    return all(ns == sorted(ns) for ns in firsts.values())


async def publish_keyed(producer: Producer, start: int, count: int, keys: int = 12) -> None:
    for i in range(start, start + count):
        await producer.publish("p", {"n": i}, key=f"key-{i % keys}", partitions=PARTITIONS)


async def owners(client: RedisClient, prefix: str) -> dict[int, str | None]:
    return {p: await client.get(f"{{{prefix}p:{p}}}:owner:g") for p in range(PARTITIONS)}


async def test_two_consumers_divide_the_partitions_and_keep_key_order(
    producer: Producer, redis_client: RedisClient, prefix: str
) -> None:
    await producer.partition("p", PARTITIONS)
    seen: list[tuple[str, int]] = []
    by: dict[str, set[int]] = defaultdict(set)

    def handler(name: str) -> object:
        async def handle(entry: Entry) -> None:
            assert entry.lease is not None
            assert entry.lease.partition == partition_for_key(entry.key or "", PARTITIONS)
            by[name].add(entry.lease.partition)
            await asyncio.sleep(0.002)
            seen.append((entry.key or "", entry.payload["n"]))

        return handle

    a = Running(make(prefix, topic="p", consumer="a", claim_idle=1.5), handler("a"))
    b = Running(make(prefix, topic="p", consumer="b", claim_idle=1.5), handler("b"))

    async def divided() -> bool:
        o = await owners(redis_client, prefix)
        return sorted(v for v in o.values() if v) == ["a", "a", "b", "b"]

    await eventually(divided, timeout=15, what="partitions divided two and two")
    await publish_keyed(producer, 0, 120)
    await eventually(lambda: len({n for _, n in seen}) == 120, timeout=20, what="120 events")
    assert keyed_order_ok(seen)
    assert by["a"] and by["b"] and not (by["a"] & by["b"])
    members = await redis_client.zrange(f"{prefix}p:{{g}}:members", 0, -1)
    assert sorted(members) == ["a", "b"]
    epochs = [int(await redis_client.get(f"{{{prefix}p:{p}}}:epoch:g")) for p in range(4)]
    assert all(e >= 1 for e in epochs)
    # A clean stop leaves the members set and releases the leases: b takes everything.
    await a.stop()
    assert await redis_client.zrange(f"{prefix}p:{{g}}:members", 0, -1) == ["b"]

    async def all_b() -> bool:
        return set((await owners(redis_client, prefix)).values()) == {"b"}

    await eventually(all_b, timeout=10, what="b owns every partition")
    await publish_keyed(producer, 120, 40)
    await eventually(lambda: len({n for _, n in seen}) == 160, timeout=20, what="160 events")
    await b.stop()
    assert keyed_order_ok(seen)


async def test_a_crashed_members_partitions_are_taken_over_with_their_pending_entries(
    producer: Producer, redis_client: RedisClient, prefix: str
) -> None:
    await producer.partition("p", PARTITIONS)
    seen: list[tuple[str, int]] = []
    stuck = asyncio.Event()

    async def slow(entry: Entry) -> None:
        await stuck.wait()  # never returns: its entries stay pending when it crashes

    async def fine(entry: Entry) -> None:
        seen.append((entry.key or "", entry.payload["n"]))

    a = Running(make(prefix, topic="p", consumer="a", claim_idle=1.0), slow)
    b = Running(make(prefix, topic="p", consumer="b", claim_idle=1.0), fine)

    async def divided() -> bool:
        o = await owners(redis_client, prefix)
        return sorted(v for v in o.values() if v) == ["a", "a", "b", "b"]

    await eventually(divided, timeout=15, what="partitions divided")
    await publish_keyed(producer, 0, 60)
    await asyncio.sleep(0.5)
    await a.crash()
    epochs_before = {p: int(await redis_client.get(f"{{{prefix}p:{p}}}:epoch:g")) for p in range(4)}
    await eventually(lambda: len({n for _, n in seen}) == 60, timeout=20, what="60 events")
    await b.stop()
    assert keyed_order_ok(seen)
    epochs_after = {p: int(await redis_client.get(f"{{{prefix}p:{p}}}:epoch:g")) for p in range(4)}
    assert any(epochs_after[p] > epochs_before[p] for p in range(4)), "a took-over partition"
    assert (await redis_client.xpending(f"{prefix}p:0", "g"))["pending"] == 0


async def test_a_topic_partitioned_later_switches_to_the_fleet(
    producer: Producer, redis_client: RedisClient, prefix: str
) -> None:
    seen: list[Entry] = []
    run = Running(make(prefix, topic="p", consumer="solo", claim_idle=1.0), seen.append)
    await producer.publish("p", {"n": 0}, key="x")
    await eventually(lambda: len(seen) == 1)
    assert seen[0].lease is None
    await producer.partition("p", PARTITIONS)
    event = uuid.uuid4()
    await producer.publish("p", {"n": 1}, key="x", partitions=PARTITIONS, event_id=event)
    await eventually(lambda: len(seen) == 2, timeout=15, what="the partitioned entry")
    await run.stop()
    assert seen[1].id == event and seen[1].lease is not None


async def test_scale_up_gives_partitions_away_after_the_batch_in_hand_and_lost_leases_return(
    producer: Producer, redis_client: RedisClient, prefix: str
) -> None:
    await producer.partition("p", PARTITIONS)
    seen: list[tuple[str, int]] = []

    async def handle(entry: Entry) -> None:
        await asyncio.sleep(0.001)
        seen.append((entry.key or "", entry.payload["n"]))

    a = Running(make(prefix, topic="p", consumer="a", claim_idle=1.5), handle)

    async def all_a() -> bool:
        return set((await owners(redis_client, prefix)).values()) == {"a"}

    await eventually(all_a, timeout=15, what="a owns every partition")
    await publish_keyed(producer, 0, 60)
    b = Running(make(prefix, topic="p", consumer="b", claim_idle=1.5), handle)

    async def divided() -> bool:
        o = await owners(redis_client, prefix)
        return sorted(v for v in o.values() if v) == ["a", "a", "b", "b"]

    await eventually(divided, timeout=15, what="a gives two partitions to b")
    await publish_keyed(producer, 60, 60)
    await eventually(lambda: len({n for _, n in seen}) == 120, timeout=20, what="120 events")
    # Redis loses the leases (a restart without them): they are taken again, higher epochs.
    epochs = [int(await redis_client.get(f"{{{prefix}p:{p}}}:epoch:g")) for p in range(4)]
    for p in range(PARTITIONS):
        await redis_client.delete(f"{{{prefix}p:{p}}}:owner:g")
    await eventually(divided, timeout=15, what="the leases taken again")
    again = [int(await redis_client.get(f"{{{prefix}p:{p}}}:epoch:g")) for p in range(4)]
    assert all(e2 > e1 for e1, e2 in zip(epochs, again)), (epochs, again)
    await publish_keyed(producer, 120, 40)
    await eventually(lambda: len({n for _, n in seen}) == 160, timeout=20, what="160 events")
    await a.stop()
    await b.stop()
    assert keyed_order_ok(seen)
