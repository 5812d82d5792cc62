"""Running consumers in tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from outbox_consumer import Consumer, ConsumerConfig, RunStats

from .conftest import LIVE, REDIS_URL


def make(prefix: str, topic: str = "t", group: str = "g", **settings: Any) -> Consumer:
    defaults: dict[str, Any] = {
        "consumer": "c1",
        "block": 0.2,
        "claim_idle": 2.0,
        "retry_base": 0.05,
        "retry_max": 0.2,
    }
    defaults.update(settings)
    return Consumer(
        ConsumerConfig(
            redis_url=REDIS_URL, topics=topic, group=group, stream_prefix=prefix, **defaults
        )
    )


async def eventually(check: Callable[[], Any], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.05)


class Running:
    """A consumer running in a task; ``await stop()`` stops it cleanly, ``crash()`` cancels it
    (no acknowledgements, no leave: as a SIGKILL looks to Redis)."""

    def __init__(self, consumer: Consumer, handler: Any) -> None:
        self.consumer = consumer
        self.task: asyncio.Task[RunStats] = asyncio.create_task(consumer.run(handler))
        LIVE.append(self)

    async def stop(self) -> RunStats:
        if self in LIVE:
            LIVE.remove(self)
        self.consumer.stop()
        stats = await asyncio.wait_for(self.task, 20)
        await self.consumer.close()
        return stats

    async def crash(self) -> None:
        if self in LIVE:
            LIVE.remove(self)
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.consumer.close()
