"""Fixtures of the integration tests: the local Redis (127.0.0.1:6379, or OUTBOX_TEST_REDIS_URL)
under a key prefix of the test's own, deleted after (never a FLUSH), and the local Postgres
(127.0.0.1:5432, or OUTBOX_TEST_PG_ADDR) with a database of the session's own, dropped after."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest
import redis.asyncio as aioredis
from psycopg_pool import AsyncConnectionPool

from outbox_consumer import partition_for_key
from outbox_consumer.entry import created_at_text

REDIS_URL = os.environ.get("OUTBOX_TEST_REDIS_URL", "redis://127.0.0.1:6379")
#: redis-py's asyncio client, loosely typed in the tests (its stubs type replies as unions).
RedisClient = Any

PG_ADDR = os.environ.get("OUTBOX_TEST_PG_ADDR") or "127.0.0.1:5432"


def pg_url(database: str) -> str:
    return f"postgresql://postgres@{PG_ADDR}/{database}"


@pytest.fixture
async def redis_client() -> AsyncIterator[RedisClient]:
    client = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        await client.ping()
    except Exception as e:
        pytest.skip(f"no Redis at {REDIS_URL}: {e}")
    yield client
    await client.aclose()


#: Consumers a test started and has not stopped (tests.helpers.Running adds them): crashed
#: before the test's keys are deleted, so none re-creates a stream afterwards.
LIVE: list[Any] = []


@pytest.fixture
async def prefix(redis_client: RedisClient) -> AsyncIterator[str]:
    """A stream prefix of this test's own; every key containing it is deleted after."""
    p = f"pytest-{uuid.uuid4().hex[:12]}:"
    yield p
    while LIVE:
        await LIVE.pop().crash()
    async for key in redis_client.scan_iter(match=f"*{p}*", count=1000):
        await redis_client.delete(key)


@pytest.fixture(scope="session")
def database() -> Iterator[str]:
    """A database of this session's own, dropped after."""
    name = f"outbox_pyclient_{uuid.uuid4().hex[:10]}"
    try:
        admin = psycopg.connect(pg_url("postgres"), autocommit=True, connect_timeout=5)
    except psycopg.Error as e:
        pytest.skip(f"no Postgres at {PG_ADDR}: {e}")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield pg_url(name)
    with psycopg.connect(pg_url("postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def pool(database: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    p: AsyncConnectionPool[Any] = AsyncConnectionPool(
        database, min_size=1, max_size=8, open=False, timeout=5
    )
    await p.open(wait=True)
    yield p
    await p.close()


class Producer:
    """Writes entries exactly as the relay's publish script does (src/publish/script.rs):
    ``id topic payload headers created_at [key]``, or ``id cloudevent``."""

    def __init__(self, client: RedisClient, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    async def partition(self, topic: str, partitions: int) -> None:
        await self.client.hset(f"{self.prefix}partitions", topic, partitions)

    async def publish(
        self,
        topic: str,
        payload: Any,
        key: str | None = None,
        headers: dict[str, Any] | None = None,
        partitions: int = 1,
        event_id: uuid.UUID | None = None,
    ) -> uuid.UUID:
        event_id = event_id or uuid.uuid4()
        stream = f"{self.prefix}{topic}"
        if partitions > 1:
            stream += f":{partition_for_key(key, partitions) if key is not None else 0}"
        fields: dict[str, str] = {
            "id": str(event_id),
            "topic": topic,
            "payload": json.dumps(payload),
            "headers": json.dumps(headers or {}),
            "created_at": created_at_text(datetime.now(timezone.utc)),
        }
        if key is not None:
            fields["key"] = key
        await self.client.xadd(stream, fields)
        return event_id

    async def raw(self, topic: str, fields: dict[str, str]) -> None:
        await self.client.xadd(f"{self.prefix}{topic}", fields)


@pytest.fixture
def producer(redis_client: RedisClient, prefix: str) -> Producer:
    return Producer(redis_client, prefix)
