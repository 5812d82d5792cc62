"""The inbox on the real Postgres: the effect and the inbox row in one transaction, a
redelivered entry skipped, failures as outages or as the effect says, fences."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from outbox_consumer import Entry, Fenced, Lease, Outage
from outbox_consumer.inbox import Inbox, apply_once, ensure_table, raise_fence

from .conftest import Producer
from .helpers import Running, eventually, make


def entry(group: str, lease: Lease | None = None, topic: str = "t") -> Entry:
    return Entry(
        stream_id="1-0",
        id=uuid.uuid4(),
        topic=topic,
        key="k",
        payload={},
        headers={},
        created_at=datetime.now(timezone.utc),
        group=group,
        lease=lease,
    )


@pytest.fixture
async def tables(pool: AsyncConnectionPool[Any]) -> AsyncConnectionPool[Any]:
    async with pool.connection() as conn:
        await ensure_table(conn)
        await ensure_table(conn)  # twice is fine
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS effects (event_id uuid NOT NULL, grp text NOT NULL)"
        )
        await conn.commit()
    return pool


async def effects(pool: AsyncConnectionPool[Any], group: str) -> list[uuid.UUID]:
    async with pool.connection() as conn:
        rows = await (
            await conn.execute("SELECT event_id FROM effects WHERE grp = %s", (group,))
        ).fetchall()
        return [r[0] for r in rows]


def effect_for(group: str) -> Any:
    async def effect(conn: psycopg.AsyncConnection[Any], e: Entry) -> None:
        await conn.execute("INSERT INTO effects (event_id, grp) VALUES (%s, %s)", (e.id, group))

    return effect


async def test_a_redelivered_entry_takes_effect_once(tables: AsyncConnectionPool[Any]) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    inbox = Inbox(tables, effect_for(group))
    e = entry(group)
    await inbox(e)
    await inbox(e)
    assert await effects(tables, group) == [e.id]
    async with tables.connection() as conn:
        row = await (
            await conn.execute(
                "SELECT topic FROM outbox_inbox WHERE consumer_group = %s AND event_id = %s",
                (group, e.id),
            )
        ).fetchone()
        assert row == ("t",)


async def test_a_failing_effect_rolls_back_its_inbox_row_and_keeps_its_kind(
    tables: AsyncConnectionPool[Any],
) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"

    async def failing(conn: psycopg.AsyncConnection[Any], e: Entry) -> None:
        await effect_for(group)(conn, e)
        await conn.execute("SELECT 1/0")

    e = entry(group)
    with pytest.raises(psycopg.errors.DivisionByZero):
        await Inbox(tables, failing)(e)
    assert await effects(tables, group) == []
    await Inbox(tables, effect_for(group))(e)
    assert await effects(tables, group) == [e.id]


async def test_no_database_is_an_outage() -> None:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        "postgresql://postgres@127.0.0.1:1/none", min_size=0, max_size=1, open=False, timeout=0.5
    )
    await pool.open()
    try:
        with pytest.raises(Outage):
            await Inbox(pool, effect_for("g"))(entry("g"))
    finally:
        await pool.close()


async def test_an_older_epoch_is_fenced_out(tables: AsyncConnectionPool[Any]) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    old = Inbox(tables, effect_for(group))
    await old(entry(group, Lease(3, 1)))
    new = Inbox(tables, effect_for(group))
    await new(entry(group, Lease(3, 2)))
    late = entry(group, Lease(3, 1))
    with pytest.raises(Fenced):
        await old(late)
    assert late.id not in await effects(tables, group)
    assert len(await effects(tables, group)) == 2
    async with tables.connection() as conn:
        assert await raise_fence(conn, group, "t", 3, 1) == 2
        await conn.commit()
        # An effect whose transaction checks after a raise rolls back.
        stale = entry(group, Lease(3, 1))
        with pytest.raises(Fenced):
            await apply_once(conn, group, stale, effect_for(group))
    assert stale.id not in await effects(tables, group)


async def test_the_inbox_under_a_consumer_applies_each_event_once(
    producer: Producer, prefix: str, tables: AsyncConnectionPool[Any]
) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    ids = [await producer.publish("t", {"n": i}, key=f"k{i % 4}") for i in range(20)]
    # One event delivered twice: published again under the same id.
    await producer.publish("t", {"n": 0}, key="k0", event_id=ids[0])
    run = Running(make(prefix, group=group), Inbox(tables, effect_for(group)))

    async def all_there() -> bool:
        return len(await effects(tables, group)) == 20

    await eventually(all_there, what="20 effects")
    stats = await run.stop()
    assert stats.handled == 21
    assert sorted(await effects(tables, group)) == sorted(ids)
