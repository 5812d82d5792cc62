"""A partition owner cut off from Redis (its heartbeat stalls) while an effect is open: its
lease runs out, a new owner takes the partition with a higher epoch and raises the fence, and
the old owner's late commit is refused by the fence check; the event takes effect once, by the
new owner. And a consumer whose Redis is away backs off and still stops cleanly."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from outbox_consumer import Entry, partition_for_key
from outbox_consumer._redis import connect
from outbox_consumer.inbox import Inbox, ensure_table

from .conftest import Producer, RedisClient
from .helpers import Running, eventually, make


async def test_a_stale_owners_late_effect_is_refused_by_the_fence(
    producer: Producer, redis_client: RedisClient, prefix: str, pool: AsyncConnectionPool[Any]
) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    async with pool.connection() as conn:
        await ensure_table(conn)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS fenced_effects (event_id uuid, by text, epoch bigint)"
        )
        await conn.commit()
    await producer.partition("p", 2)
    entered = asyncio.Event()
    gate = asyncio.Event()

    def effect(name: str) -> Any:
        async def run(conn: psycopg.AsyncConnection[Any], entry: Entry) -> None:
            assert entry.lease is not None
            await conn.execute(
                "INSERT INTO fenced_effects VALUES (%s, %s, %s)",
                (entry.id, name, entry.lease.epoch),
            )
            if name == "a":
                entered.set()
                await gate.wait()

        return run

    a = Running(
        make(prefix, topic="p", group=group, consumer="a", claim_idle=1.0), Inbox(pool, effect("a"))
    )
    owner = f"{{{prefix}p:0}}:owner:{group}"

    async def a_owns_all() -> bool:
        owners = [await redis_client.get(f"{{{prefix}p:{p}}}:owner:{group}") for p in (0, 1)]
        return owners == ["a", "a"]

    await eventually(a_owns_all, timeout=15, what="a owns both partitions")
    key = next(k for k in (f"k{i}" for i in range(100)) if _partition(k) == 0)
    event = await producer.publish("p", {"n": 1}, key=key, partitions=2)
    await asyncio.wait_for(entered.wait(), 10)

    async def stalled(conn: Any) -> bool:  # a's heartbeat can no longer reach Redis
        await asyncio.Event().wait()
        return False

    a.consumer.fleet.beat = stalled  # type: ignore[method-assign]
    b = Running(
        make(prefix, topic="p", group=group, consumer="b", claim_idle=1.0), Inbox(pool, effect("b"))
    )

    async def b_owns_p0() -> bool:
        return bool(await redis_client.get(owner) == "b")

    await eventually(b_owns_p0, timeout=15, what="b takes partition 0")
    async with pool.connection() as conn:

        async def raised() -> bool:
            row = await (
                await conn.execute(
                    "SELECT epoch FROM outbox_inbox_fences WHERE consumer_group = %s "
                    "AND topic = 'p' AND partition = 0",
                    (group,),
                )
            ).fetchone()
            await conn.commit()
            return row is not None and int(row[0]) >= 2

        await eventually(raised, timeout=15, what="b raises the fence")
    gate.set()  # a's effect goes on to its fence check, after the raise

    async def applied_once() -> bool:
        async with pool.connection() as conn:
            rows = await (
                await conn.execute(
                    "SELECT by, epoch FROM fenced_effects WHERE event_id = %s", (event,)
                )
            ).fetchall()
        return bool(rows)

    await eventually(applied_once, timeout=15, what="the effect")
    await asyncio.sleep(0.5)
    await b.stop()
    await a.crash()
    async with pool.connection() as conn:
        rows = await (
            await conn.execute("SELECT by, epoch FROM fenced_effects WHERE event_id = %s", (event,))
        ).fetchall()
        inbox = await (
            await conn.execute(
                "SELECT count(*) FROM outbox_inbox WHERE consumer_group = %s AND event_id = %s",
                (group, event),
            )
        ).fetchone()
    assert len(rows) == 1 and rows[0][0] == "b" and rows[0][1] >= 2, rows
    assert inbox == (1,)


def _partition(key: str) -> int:
    return partition_for_key(key, 2)


async def test_a_consumer_whose_redis_is_away_backs_off_and_stops_cleanly(prefix: str) -> None:
    consumer = make(prefix)
    consumer.redis = connect("redis://127.0.0.1:1", 1.0)
    seen: list[Entry] = []
    run = Running(consumer, seen.append)
    await asyncio.sleep(1.0)
    stats = await run.stop()
    assert stats.handled == 0 and seen == []
