"""A group consumer against the real Redis: order, acknowledgement, retries, delivery counting,
outages, dead letters, malformed entries, claims, a clean stop."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from outbox_consumer import DeadLetter, Entry, Outage

from .conftest import Producer, RedisClient
from .helpers import Running, eventually, make


async def test_entries_are_handled_in_key_order_and_acknowledged(
    producer: Producer, redis_client: RedisClient, prefix: str
) -> None:
    ids = []
    for i in range(30):
        ids.append(await producer.publish("t", {"n": i}, key=f"k{i % 3}"))
    seen: list[Entry] = []

    async def handle(entry: Entry) -> None:
        await asyncio.sleep(0.001)
        seen.append(entry)

    run = Running(make(prefix, concurrency=4), handle)
    await eventually(lambda: len(seen) == 30, what="30 entries")
    stats = await run.stop()
    assert stats.handled == 30
    for k in range(3):
        ns = [e.payload["n"] for e in seen if e.key == f"k{k}"]
        assert ns == sorted(ns)
    assert {e.id for e in seen} == set(ids)
    assert all(e.deliveries == 1 and e.group == "g" for e in seen)
    pending = await redis_client.xpending(f"{prefix}t", "g")
    assert pending["pending"] == 0


async def test_a_sync_handler_works_too(producer: Producer, prefix: str) -> None:
    await producer.publish("t", {"n": 1})
    seen: list[Entry] = []
    run = Running(make(prefix), seen.append)
    await eventually(lambda: len(seen) == 1)
    assert (await run.stop()).handled == 1


async def test_a_failing_entry_is_retried_counted_then_dead_lettered_holding_its_key(
    producer: Producer, redis_client: RedisClient, prefix: str
) -> None:
    bad = await producer.publish("t", {"n": 0}, key="k", headers={"h": 1})
    await producer.publish("t", {"n": 1}, key="k")
    await producer.publish("t", {"n": 2}, key="other")
    calls: list[tuple[int, int]] = []

    async def handle(entry: Entry) -> None:
        calls.append((entry.payload["n"], entry.deliveries))
        if entry.id == bad:
            raise RuntimeError("boom")

    run = Running(make(prefix, max_deliveries=3), handle)
    await eventually(lambda: (1, 1) in calls, what="the key's next entry after the dead one")
    stats = await run.stop()
    assert [d for n, d in calls if n == 0] == [1, 2, 3]
    assert calls.index((1, 1)) > calls.index((0, 3)), "the key's later entry waited"
    assert stats.dead_lettered == 1 and stats.failed == 2
    dead = await redis_client.xrange(f"{prefix}t:dead")
    assert len(dead) == 1
    fields = dead[0][1]
    assert list(fields) == [
        "id",
        "topic",
        "payload",
        "headers",
        "created_at",
        "key",
        "error",
        "group",
        "deliveries",
    ]
    assert fields["id"] == str(bad)
    assert fields["error"] == "boom"
    assert fields["group"] == "g"
    assert fields["deliveries"] == "3"
    assert json.loads(fields["headers"]) == {"h": 1}
    assert (await redis_client.xpending(f"{prefix}t", "g"))["pending"] == 0


async def test_an_outage_is_not_a_delivery(producer: Producer, prefix: str) -> None:
    await producer.publish("t", {"n": 0}, key="k")
    deliveries: list[int] = []

    async def handle(entry: Entry) -> None:
        deliveries.append(entry.deliveries)
        if len(deliveries) <= 3:
            raise Outage("db away")

    run = Running(make(prefix, max_deliveries=2), handle)
    await eventually(lambda: len(deliveries) == 4, timeout=20, what="4 calls")
    stats = await run.stop()
    assert deliveries == [1, 1, 1, 1]
    assert stats.handled == 1 and stats.dead_lettered == 0


async def test_dead_letter_now_and_malformed_entries_go_to_the_dead_stream_with_the_reason(
    producer: Producer, redis_client: RedisClient, prefix: str
) -> None:
    await producer.raw(
        "t",
        {
            "id": "nope",
            "topic": "t",
            "payload": "{}",
            "headers": "{}",
            "created_at": "2026-12-02T13:57:01.123456Z",
        },
    )
    await producer.raw(
        "t",
        {
            "id": "6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d",
            "topic": "t",
            "payload": "{nope",
            "headers": "{}",
            "created_at": "2026-12-02T13:57:01.123456Z",
            "key": "k",
        },
    )
    refused = await producer.publish("t", {"refuse": True})
    handled: list[Entry] = []

    async def handle(entry: Entry) -> None:
        if entry.payload.get("refuse"):
            raise DeadLetter("refused by rule")
        handled.append(entry)

    run = Running(make(prefix), handle)
    await eventually(lambda: redis_client.xlen(f"{prefix}t:dead"), what="dead letters")
    await eventually(
        lambda: _xlen_is(redis_client, f"{prefix}t:dead", 3), what="three dead letters"
    )
    stats = await run.stop()
    assert handled == []
    assert stats.dead_lettered == 3
    # Different lanes run concurrently: the dead stream's order is theirs.
    dead = {f["id"]: f for _, f in await redis_client.xrange(f"{prefix}t:dead")}
    assert dead["nope"]["error"] == "malformed entry: field `id` is not a uuid: nope"
    assert dead["nope"]["deliveries"] == "1"
    bad_json = dead["6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d"]
    assert bad_json["error"].startswith("malformed entry: field `payload` is not JSON: ")
    assert bad_json["payload"] == "{nope" and bad_json["key"] == "k"
    assert dead[str(refused)]["error"] == "refused by rule"


async def _xlen_is(client: RedisClient, key: str, n: int) -> bool:
    return int(await client.xlen(key)) == n


async def test_entries_of_a_dead_consumer_are_claimed_after_claim_idle(
    producer: Producer, redis_client: RedisClient, prefix: str
) -> None:
    stream = f"{prefix}t"
    await producer.publish("t", {"n": 0}, key="k")
    await redis_client.xgroup_create(stream, "g", id="0", mkstream=True)
    got = await redis_client.xreadgroup("g", "dead-one", {stream: ">"}, count=10)
    assert got
    seen: list[Entry] = []

    async def handle(entry: Entry) -> None:
        seen.append(entry)

    run = Running(make(prefix, claim_idle=0.3), handle)
    await eventually(lambda: len(seen) == 1, what="the claimed entry")
    await run.stop()
    assert seen[0].deliveries == 2


async def test_a_claimed_entry_already_at_the_limit_is_dead_lettered_unhandled(
    producer: Producer, redis_client: RedisClient, prefix: str
) -> None:
    stream = f"{prefix}t"
    event = await producer.publish("t", {"n": 0})
    await redis_client.xgroup_create(stream, "g", id="0", mkstream=True)
    entries = await redis_client.xreadgroup("g", "dead-one", {stream: ">"}, count=10)
    stream_id = entries[0][1][0][0]
    await redis_client.xclaim(stream, "g", "dead-one", 0, [stream_id], retrycount=3, justid=True)
    seen: list[Entry] = []

    async def handle(entry: Entry) -> None:
        seen.append(entry)

    run = Running(make(prefix, claim_idle=0.3, max_deliveries=3), handle)
    await eventually(lambda: _xlen_is(redis_client, f"{stream}:dead", 1), what="dead")
    await run.stop()
    assert seen == []
    ((_, fields),) = await redis_client.xrange(f"{stream}:dead")
    assert fields["id"] == str(event) and fields["deliveries"] == "3"
    assert "delivered 3 times without being acknowledged" in fields["error"]


async def test_a_restart_under_the_same_name_finishes_its_own_pending_entries_first(
    producer: Producer, redis_client: RedisClient, prefix: str
) -> None:
    stream = f"{prefix}t"
    await producer.publish("t", {"n": 0}, key="k")
    await redis_client.xgroup_create(stream, "g", id="0", mkstream=True)
    await redis_client.xreadgroup("g", "c1", {stream: ">"}, count=10)
    await producer.publish("t", {"n": 1}, key="k")
    seen: list[tuple[int, int]] = []

    async def handle(entry: Entry) -> None:
        seen.append((entry.payload["n"], entry.deliveries))

    run = Running(make(prefix), handle)
    await eventually(lambda: len(seen) == 2)
    await run.stop()
    assert seen == [(0, 2), (1, 1)]


async def test_stop_finishes_the_entries_in_hand_and_acknowledges_them(
    producer: Producer, redis_client: RedisClient, prefix: str
) -> None:
    for i in range(5):
        await producer.publish("t", {"n": i}, key=f"k{i}")
    started: list[int] = []
    finished: list[int] = []

    async def handle(entry: Entry) -> None:
        started.append(entry.payload["n"])
        await asyncio.sleep(0.5)
        finished.append(entry.payload["n"])

    run = Running(make(prefix), handle)
    await eventually(lambda: len(started) == 5)
    stats = await run.stop()
    assert sorted(finished) == [0, 1, 2, 3, 4]
    assert stats.handled == 5
    assert (await redis_client.xpending(f"{prefix}t", "g"))["pending"] == 0


async def test_a_cloudevents_topic(redis_client: RedisClient, prefix: str) -> None:
    event: dict[str, Any] = {
        "specversion": "1.0",
        "id": "6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d",
        "source": "/outbox-relay",
        "type": "ce",
        "time": "2026-12-02T13:57:01.123456Z",
        "datacontenttype": "application/json",
        "data": {"order_id": 42},
        "partitionkey": "k",
    }
    await redis_client.xadd(f"{prefix}ce", {"id": event["id"], "cloudevent": json.dumps(event)})
    seen: list[Entry] = []
    run = Running(make(prefix, topic="ce"), seen.append)
    await eventually(lambda: len(seen) == 1)
    await run.stop()
    assert seen[0].topic == "ce" and seen[0].key == "k"
    assert seen[0].payload == {"order_id": 42}
    assert seen[0].cloudevent is not None and seen[0].cloudevent.source == "/outbox-relay"
