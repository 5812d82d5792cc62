"""Parked keys: a dead entry parks its key, the key's later entries are held while other keys
flow, and an operator's release (the admin's release.lua) drains them in order."""

from __future__ import annotations

import json

from outbox_consumer import Entry, scripts

from .conftest import Producer, RedisClient
from .helpers import Running, eventually, make


async def release(client: RedisClient, prefix: str, topic: str, group: str, key: str) -> int:
    """What the relay's admin does on `POST .../parked/{key}/discard`."""
    return int(
        await client.eval(
            scripts.source("release"),
            2,
            f"{prefix}{topic}:{{{group}}}:parked",
            f"{prefix}{topic}:{{{group}}}:held:{key}",
            key,
            "discard",
            "",
        )
    )


async def test_a_dead_entry_parks_its_key_until_released(
    producer: Producer, redis_client: RedisClient, prefix: str
) -> None:
    poison = await producer.publish("t", {"n": 1, "poison": True}, key="A")
    await producer.publish("t", {"n": 2}, key="A")
    await producer.publish("t", {"n": 1}, key="B")
    await producer.publish("t", {"n": 3}, key="A")
    seen: list[tuple[str | None, int]] = []

    async def handle(entry: Entry) -> None:
        if entry.payload.get("poison"):
            raise RuntimeError("poison")
        seen.append((entry.key, entry.payload["n"]))

    run = Running(make(prefix, park_keys=True, max_deliveries=1), handle)
    parked_hash = f"{prefix}t:{{g}}:parked"
    held_list = f"{prefix}t:{{g}}:held:A"

    async def two_held() -> bool:
        return int(await redis_client.llen(held_list)) == 2

    await eventually(two_held, what="A's later entries held")
    await eventually(lambda: ("B", 1) in seen, what="B flows")
    assert [s for s in seen if s[0] == "A"] == []
    state = json.loads(await redis_client.hget(parked_hash, "A"))
    assert state["dead_id"] == str(poison)
    assert state["dead_entry"] and state["stream"] == f"{prefix}t"
    assert state["released"] is False
    ((_, dead),) = await redis_client.xrange(f"{prefix}t:dead")
    assert state["dead_entry"] == (await redis_client.xrange(f"{prefix}t:dead"))[0][0]
    assert dead["error"] == "poison"
    held = [json.loads(h) for h in await redis_client.lrange(held_list, 0, -1)]
    assert [dict(h["fields"])["payload"] for h in held] == ['{"n": 2}', '{"n": 3}']
    assert (await redis_client.xpending(f"{prefix}t", "g"))["pending"] == 0

    assert await release(redis_client, prefix, "t", "g", "A") == 2
    await eventually(lambda: ("A", 3) in seen, what="the held entries drained")

    async def unparked() -> bool:
        return not await redis_client.hexists(parked_hash, "A")

    await eventually(unparked, what="the key forgotten")
    await producer.publish("t", {"n": 4}, key="A")
    await eventually(lambda: ("A", 4) in seen, what="A flows again")
    await run.stop()
    assert [n for k, n in seen if k == "A"] == [2, 3, 4]
