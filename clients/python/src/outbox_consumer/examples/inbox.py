"""``outbox-inbox-example``: the Python twin of the Rust ``inbox_consumer`` example. Reads a
topic as a member of a consumer group and, for each entry, inserts one row into
``example_effects`` in the same transaction as the event's inbox record, then acknowledges it;
a redelivered entry is skipped, so every event has exactly one row whatever crashes happen.

A payload with ``"poison": true`` makes the effect fail; after ``--max-deliveries`` it goes to
``<stream_prefix><topic>:dead``. SIGTERM or SIGINT stops it after the entries in hand.

    DATABASE_URL=postgres://postgres@127.0.0.1/app REDIS_URL=redis://127.0.0.1:6379 \\
      outbox-inbox-example --topic order.created --group billing
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from outbox_consumer import ConfigError, Consumer, ConsumerConfig, Entry
from outbox_consumer.inbox import Inbox, ensure_table

EFFECTS_TABLE = """CREATE TABLE IF NOT EXISTS example_effects (
    event_id uuid NOT NULL,
    topic text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""

#: The advisory lock that serializes the creation of example_effects ("example-" in ASCII),
#: the Rust example's.
EFFECTS_DDL_LOCK = 0x6578616D706C652D

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "us": 1e-6}


def duration(text: str) -> float:
    """``30s``, ``200ms``, ``1m30s``, ``2h`` (humantime's forms the example takes) or bare
    seconds, as seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*(ms|us|min|s|m|h)", text)
    if not parts or re.sub(r"(\d+(?:\.\d+)?)\s*(ms|us|min|s|m|h)|\s+", "", text):
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30s, 200ms, 1m)")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="outbox-inbox-example",
        description="Consume an outbox topic into example_effects, exactly once, with the inbox",
    )
    p.add_argument("--topic", required=True, help="the topic to consume")
    p.add_argument("--group", required=True, help="the consumer group")
    p.add_argument("--consumer", help="this consumer's name in the group (default hostname-pid)")
    p.add_argument("--claim-idle", type=duration, default=30.0, help="default 30s")
    p.add_argument("--max-deliveries", type=int, default=5)
    p.add_argument(
        "--park-keys",
        action="store_true",
        help="hold a dead entry's key until an operator discards or redrives it",
    )
    p.add_argument(
        "--stream-prefix", default=os.environ.get("OUTBOX__REDIS__STREAM_PREFIX", "outbox:")
    )
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--retry-base", type=duration, default=0.2, help="default 200ms")
    p.add_argument("--database-url", default=os.environ.get("DATABASE_URL"))
    p.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
    p.add_argument("--effect-delay", type=duration, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.database_url:
        p.error("DATABASE_URL (or --database-url) is required")
    return args


class PoisonEvent(Exception):
    def __init__(self) -> None:
        super().__init__('poison event: its payload says "poison": true')


async def run(args: argparse.Namespace) -> int:
    retry_max = max(min(args.claim_idle / 2, 10.0), args.retry_base)
    kwargs: dict[str, Any] = {}
    if args.consumer:
        kwargs["consumer"] = args.consumer
    config = ConsumerConfig(
        redis_url=args.redis_url,
        topics=args.topic,
        group=args.group,
        stream_prefix=args.stream_prefix,
        claim_idle=args.claim_idle,
        max_deliveries=args.max_deliveries,
        park_keys=args.park_keys,
        batch_size=args.batch_size,
        concurrency=args.concurrency,
        retry_base=args.retry_base,
        retry_max=retry_max,
        **kwargs,
    )
    consumer = Consumer(config)
    consumer.stop_on_signals()
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        args.database_url,
        min_size=1,
        max_size=min(max(args.concurrency, 2), 32),
        timeout=5.0,
        open=False,
    )
    await pool.open(wait=True, timeout=30.0)
    try:
        async with pool.connection() as conn:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (EFFECTS_DDL_LOCK,))
                await conn.execute(EFFECTS_TABLE)
            await ensure_table(conn)
        delay = args.effect_delay

        async def effect(conn: psycopg.AsyncConnection[Any], entry: Entry) -> None:
            if isinstance(entry.payload, dict) and entry.payload.get("poison") is True:
                raise PoisonEvent()
            if delay:
                await asyncio.sleep(delay)
            await conn.execute(
                "INSERT INTO example_effects (event_id, topic) VALUES (%s, %s)",
                (entry.id, entry.topic),
            )

        stats = await consumer.run(Inbox(pool, effect))
        logging.getLogger("outbox_consumer").info(
            "stopped: handled %d, failed %d, dead-lettered %d",
            stats.handled,
            stats.failed,
            stats.dead_lettered,
        )
    finally:
        await pool.close()
        await consumer.close()
    return 0


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    args = parse_args(argv)
    try:
        code = asyncio.run(run(args))
    except ConfigError as e:
        print(f"outbox-inbox-example: {e}", file=sys.stderr)
        code = 2
    except (OSError, psycopg.Error) as e:
        print(f"outbox-inbox-example: {e}", file=sys.stderr)
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
