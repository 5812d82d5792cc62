"""Batch handlers: whole batches in stream order, all or nothing; the batch inbox applies each
event once in one transaction per batch."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from outbox_consumer import Batches, Entry
from outbox_consumer.inbox import BatchInbox, ensure_table

from .conftest import Producer, RedisClient
from .helpers import Running, eventually, make


async def test_batches_in_stream_order_retried_whole(
    producer: Producer, redis_client: RedisClient, prefix: str
) -> None:
    for i in range(10):
        await producer.publish("t", {"n": i}, key=f"k{i % 3}")
    calls: list[list[tuple[int, int]]] = []

    async def handle(entries: list[Entry]) -> None:
        calls.append([(e.payload["n"], e.deliveries) for e in entries])
        if len(calls) == 1:
            raise RuntimeError("the first try fails")

    run = Running(make(prefix, batch_size=100), Batches(handle))
    await eventually(
        lambda: sum(len(c) for c in calls[1:]) == 10, what="a retry of the whole batch"
    )
    stats = await run.stop()
    assert [n for n, _ in calls[0]] == list(range(10))
    assert calls[1] == [(n, 2) for n in range(10)]
    assert stats.handled == 10 and stats.failed == 10
    assert (await redis_client.xpending(f"{prefix}t", "g"))["pending"] == 0


async def test_the_batch_inbox_applies_each_event_once(
    producer: Producer, prefix: str, pool: AsyncConnectionPool[Any]
) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    async with pool.connection() as conn:
        await ensure_table(conn)
        await conn.execute("CREATE TABLE IF NOT EXISTS batch_effects (event_id uuid, grp text)")
        await conn.commit()
    ids = [await producer.publish("t", {"n": i}, key=f"k{i % 4}") for i in range(30)]
    await producer.publish("t", {"n": 0}, key="k0", event_id=ids[0])  # a duplicate
    sizes: list[int] = []

    async def effect(conn: psycopg.AsyncConnection[Any], entries: list[Entry]) -> None:
        sizes.append(len(entries))
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO batch_effects VALUES (%s, %s)", [(e.id, group) for e in entries]
            )

    run = Running(make(prefix, group=group), Batches(BatchInbox(pool, effect)))

    async def rows() -> list[uuid.UUID]:
        async with pool.connection() as conn:
            found = await (
                await conn.execute("SELECT event_id FROM batch_effects WHERE grp = %s", (group,))
            ).fetchall()
        return [r[0] for r in found]

    async def all_there() -> bool:
        return len(await rows()) >= 30

    await eventually(all_there, what="30 effects")
    stats = await run.stop()
    assert sorted(await rows()) == sorted(ids)
    assert stats.handled == 31
    assert sum(sizes) == 30
