"""The inbox (docs/protocol.md, "The inbox"): exactly-once effects on top of at-least-once
delivery. For each entry, one Postgres transaction records ``(group, event id)`` in
``outbox_inbox`` and runs your effect on the same connection; a redelivered entry finds its
row and skips the effect. On a partitioned topic the transaction also checks, last before its
commit, that the partition's fence in ``outbox_inbox_fences`` still holds this consumer's
lease epoch (``FOR SHARE``), so a consumer that lost its partition cannot commit.

The inbox's own database failures (no connection, the inbox statement, the commit) are
outages: retried without spending a delivery. What your effect raises counts as its kind says.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from .entry import Entry
from .errors import Fenced, HandlerError, Outage, Retry

log = logging.getLogger("outbox_consumer.inbox")

#: An effect: runs inside the inbox's transaction on ``conn``.
Effect = Callable[[psycopg.AsyncConnection[Any], Entry], Awaitable[None]]

#: Advisory lock key held while creating the tables ("inbox-dd" in ASCII), as the Rust library.
DDL_LOCK = 0x696E626F782D6464
#: How long a fenced transaction may sit idle before Postgres ends it.
FENCED_IDLE_TIMEOUT = "30s"
#: Rows deleted per retention statement.
RETENTION_BATCH = 1000


def _sql(name: str) -> str:
    folder = resources.files("outbox_consumer").joinpath("protocol").joinpath("sql")
    return folder.joinpath(name).read_text("utf-8")


#: The tables' DDL: the same files as the Rust library's ``consumer/sql``.
TABLE_SQL = _sql("inbox.sql")
FENCES_SQL = _sql("inbox_fences.sql")

_INSERT = (
    "INSERT INTO outbox_inbox (consumer_group, event_id, topic) VALUES (%s, %s, %s) "
    "ON CONFLICT DO NOTHING"
)
_INSERT_FENCED = (
    "INSERT INTO outbox_inbox (consumer_group, event_id, topic) "
    "SELECT %s, %s, %s FROM (SELECT set_config('idle_in_transaction_session_timeout', %s, true))"
    " AS s ON CONFLICT DO NOTHING"
)
_READ_FENCE = (
    "SELECT epoch FROM outbox_inbox_fences "
    "WHERE consumer_group = %s AND topic = %s AND partition = %s"
)
_RAISE_FENCE = (
    "INSERT INTO outbox_inbox_fences (consumer_group, topic, partition, epoch) "
    "VALUES (%s, %s, %s, %s) ON CONFLICT (consumer_group, topic, partition) DO UPDATE "
    "SET epoch = EXCLUDED.epoch, raised_at = now() "
    "WHERE outbox_inbox_fences.epoch < EXCLUDED.epoch"
)
_CHECK_FENCE = (
    "SELECT epoch FROM outbox_inbox_fences "
    "WHERE consumer_group = %s AND topic = %s AND partition = %s FOR SHARE"
)
_DELETE_OLD = (
    "DELETE FROM outbox_inbox WHERE consumer_group = %s AND event_id IN ("
    "SELECT event_id FROM outbox_inbox WHERE consumer_group = %s "
    "AND processed_at < now() - make_interval(secs => %s) ORDER BY processed_at LIMIT %s)"
)


_PRESENT = (
    "SELECT to_regclass('outbox_inbox') IS NOT NULL"
    " AND to_regclass('outbox_inbox_processed_at') IS NOT NULL"
    " AND to_regclass('outbox_inbox_fences') IS NOT NULL"
)


async def ensure_table(conn: psycopg.AsyncConnection[Any]) -> None:
    """Creates ``outbox_inbox`` and ``outbox_inbox_fences`` if missing (the same SQL as the
    relay's ``migrate``), under an advisory lock so consumers starting together do not race.
    Runs nothing when they exist: ``CREATE INDEX IF NOT EXISTS`` locks the table before it
    finds the index, and would wait behind any effect transaction in flight."""
    cur = await conn.execute(_PRESENT)
    row = await cur.fetchone()
    if row is not None and row[0]:
        return
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (DDL_LOCK,))
        await conn.execute(TABLE_SQL.encode())
        await conn.execute(FENCES_SQL.encode())


def _fenced(topic: str, partition: int, epoch: int, fence: int) -> Fenced:
    return Fenced(
        f"inbox: partition {partition} of `{topic}` is fenced at epoch {fence}, above this "
        f"consumer's {epoch}: a newer owner holds it"
    )


class _EffectFailed(Exception):
    def __init__(self, inner: BaseException) -> None:
        super().__init__(str(inner))
        self.inner = inner


async def raise_fence(
    conn: psycopg.AsyncConnection[Any], group: str, topic: str, partition: int, epoch: int
) -> int:
    """Raises the fence of ``topic``'s partition for ``group`` to ``epoch`` unless it is there
    or higher (a plain read first); returns the fence's epoch afterwards."""
    async with conn.transaction():
        row = await (await conn.execute(_READ_FENCE, (group, topic, partition))).fetchone()
        fence = int(row[0]) if row else 0
        if fence >= epoch:
            return fence
        await conn.execute(_RAISE_FENCE, (group, topic, partition, epoch))
        row = await (await conn.execute(_READ_FENCE, (group, topic, partition))).fetchone()
        return int(row[0]) if row else 0


async def apply_once(
    conn: psycopg.AsyncConnection[Any], group: str, entry: Entry, effect: Effect
) -> bool:
    """In one transaction on ``conn``: records ``entry`` in the inbox and, unless it was there,
    runs ``effect``; with a lease, checks the fence last. True when the effect ran. Raises
    :class:`Outage` for the inbox's own database failures, :class:`Fenced` when a newer owner
    raised the fence, and what ``effect`` raised (rolled back)."""
    try:
        return await _apply(conn, group, entry, effect)
    except _EffectFailed as e:
        raise e.inner from None


async def _apply(
    conn: psycopg.AsyncConnection[Any], group: str, entry: Entry, effect: Effect
) -> bool:
    """:func:`apply_once`, the effect's exception wrapped in :class:`_EffectFailed`.

    In one transaction on ``conn``: records ``entry`` in the inbox and, unless it was there,
    runs ``effect``; with a lease, checks the fence last. True when the effect ran. Raises
    :class:`Outage` for the inbox's own database failures, :class:`Fenced` when a newer owner
    raised the fence, and what ``effect`` raised (rolled back)."""
    try:
        async with conn.transaction():
            if entry.lease is None:
                cur = await conn.execute(_INSERT, (group, entry.id, entry.topic))
            else:
                cur = await conn.execute(
                    _INSERT_FENCED, (group, entry.id, entry.topic, FENCED_IDLE_TIMEOUT)
                )
            if cur.rowcount == 0:
                return False
            try:
                await effect(conn, entry)
            except Exception as e:
                raise _EffectFailed(e) from e
            if entry.lease is not None:
                lease = entry.lease
                row = await (
                    await conn.execute(_CHECK_FENCE, (group, entry.topic, lease.partition))
                ).fetchone()
                fence = int(row[0]) if row else 0
                if fence < lease.epoch:
                    raise Retry(
                        f"inbox: partition {lease.partition} of `{entry.topic}` was not fenced "
                        f"at this consumer's epoch {lease.epoch}: raise the fence first"
                    )
                if fence != lease.epoch:
                    raise _fenced(entry.topic, lease.partition, lease.epoch, fence)
        return True
    except (_EffectFailed, HandlerError):
        raise
    except (psycopg.Error, OSError) as e:
        raise Outage(f"inbox: database error: {e}") from e


class Inbox:
    """A handler that runs ``effect`` once per event: in a transaction on a connection from
    ``pool`` that also records the event in ``outbox_inbox``. Pass it to
    :meth:`Consumer.run <outbox_consumer.Consumer.run>`. While the consumer runs, the group's
    rows older than ``retention`` seconds are deleted every ``cleanup_interval`` seconds."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        effect: Effect,
        *,
        retention: float = 7 * 24 * 3600.0,
        cleanup_interval: float = 60.0,
    ) -> None:
        self.pool = pool
        self.effect = effect
        self.retention = retention
        self.cleanup_interval = max(cleanup_interval, 0.001)
        self._raised: dict[tuple[str, int], int] = {}

    async def __call__(self, entry: Entry) -> None:
        try:
            async with self.pool.connection() as conn:
                lease = entry.lease
                if lease is not None:
                    slot = (entry.topic, lease.partition)
                    if self._raised.get(slot) != lease.epoch:
                        try:
                            fence = await raise_fence(
                                conn, entry.group, entry.topic, lease.partition, lease.epoch
                            )
                        except (psycopg.Error, OSError) as e:
                            raise Outage(f"inbox: raising the fence: {e}") from e
                        if fence != lease.epoch:
                            raise _fenced(entry.topic, lease.partition, lease.epoch, fence)
                        self._raised[slot] = lease.epoch
                applied = await _apply(conn, entry.group, entry, self.effect)
                if not applied:
                    log.debug("event %s already in the inbox: effect skipped", entry.id)
        except _EffectFailed as e:
            raise e.inner from None
        except HandlerError:
            raise
        except (psycopg.Error, OSError) as e:  # no connection from the pool
            raise Outage(f"inbox: no database connection: {e}") from e
        except Exception as e:
            if type(e).__module__.startswith("psycopg_pool"):
                raise Outage(f"inbox: no database connection: {e}") from e
            raise

    async def maintain(self, group: str) -> None:
        """The retention loop (run beside the consumer, cancelled when it stops)."""
        last_error = 0.0
        while True:
            await asyncio.sleep(self.cleanup_interval)
            try:
                async with self.pool.connection() as conn:
                    while True:
                        cur = await conn.execute(
                            _DELETE_OLD, (group, group, self.retention, RETENTION_BATCH)
                        )
                        await conn.commit()
                        if cur.rowcount < RETENTION_BATCH:
                            break
            except Exception as e:
                now = time.monotonic()
                if now - last_error > 60:
                    log.warning("inbox retention failed; retrying next round: %s", e)
                    last_error = now


#: A batch effect: runs once per batch inside the inbox's transaction, on the entries not
#: applied before (in stream order, an event id that appears twice only once).
BatchEffect = Callable[[psycopg.AsyncConnection[Any], list[Entry]], Awaitable[None]]

_INSERT_BATCH = (
    "INSERT INTO outbox_inbox (consumer_group, event_id, topic) "
    "SELECT %s, id, topic FROM unnest(%s::uuid[], %s::text[]) AS t(id, topic) "
    "ON CONFLICT DO NOTHING RETURNING event_id"
)
_CHECK_FENCES = (
    "SELECT topic, partition, epoch FROM outbox_inbox_fences WHERE consumer_group = %s "
    "AND (topic, partition) IN (SELECT * FROM unnest(%s::text[], %s::int[])) FOR SHARE"
)


async def apply_batch_once(
    conn: psycopg.AsyncConnection[Any], group: str, entries: list[Entry], effect: BatchEffect
) -> int:
    """In one transaction on ``conn``: records every entry in the inbox and runs ``effect``
    once on those not recorded before; with leases, checks their fences last. Returns how many
    were new. Raises as :func:`apply_once` does."""
    try:
        return await _apply_batch(conn, group, entries, effect)
    except _EffectFailed as e:
        raise e.inner from None


def _leases_of(entries: list[Entry]) -> list[tuple[str, int, int]]:
    return sorted(
        {(e.topic, e.lease.partition, e.lease.epoch) for e in entries if e.lease is not None}
    )


async def _apply_batch(
    conn: psycopg.AsyncConnection[Any], group: str, entries: list[Entry], effect: BatchEffect
) -> int:
    leases = _leases_of(entries)
    try:
        async with conn.transaction():
            if leases:
                await conn.execute(
                    "SELECT set_config('idle_in_transaction_session_timeout', %s, true)",
                    (FENCED_IDLE_TIMEOUT,),
                )
            cur = await conn.execute(
                _INSERT_BATCH, (group, [e.id for e in entries], [e.topic for e in entries])
            )
            new = {row[0] for row in await cur.fetchall()}
            fresh = []
            for e in entries:
                if e.id in new:
                    new.discard(e.id)
                    fresh.append(e)
            if fresh:
                try:
                    await effect(conn, fresh)
                except Exception as e:
                    raise _EffectFailed(e) from e
            if leases:
                rows = await (
                    await conn.execute(
                        _CHECK_FENCES,
                        (group, [t for t, _, _ in leases], [p for _, p, _ in leases]),
                    )
                ).fetchall()
                fences = {(str(r[0]), int(r[1])): int(r[2]) for r in rows}
                for topic, partition, epoch in leases:
                    fence = fences.get((topic, partition), 0)
                    if fence < epoch:
                        raise Retry(
                            f"inbox: partition {partition} of `{topic}` was not fenced at this "
                            f"consumer's epoch {epoch}: raise the fence first"
                        )
                    if fence != epoch:
                        raise _fenced(topic, partition, epoch, fence)
        return len(fresh)
    except (_EffectFailed, HandlerError):
        raise
    except (psycopg.Error, OSError) as e:
        raise Outage(f"inbox: database error: {e}") from e


class BatchInbox(Inbox):
    """The inbox for batch handlers: ``consumer.run(Batches(BatchInbox(pool, effect)))``. One
    transaction per batch (its inbox rows, your effect on the entries not applied before, the
    fence checks): one commit per batch instead of one per event. A failing batch is retried
    whole, and dead-lettered whole after ``max_deliveries``."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        effect: BatchEffect,
        *,
        retention: float = 7 * 24 * 3600.0,
        cleanup_interval: float = 60.0,
    ) -> None:
        super().__init__(pool, _never, retention=retention, cleanup_interval=cleanup_interval)
        self.batch_effect = effect

    async def __call__(self, entries: list[Entry]) -> None:  # type: ignore[override]
        if not entries:
            return
        group = entries[0].group
        try:
            async with self.pool.connection() as conn:
                for topic, partition, epoch in _leases_of(entries):
                    slot = (topic, partition)
                    if self._raised.get(slot) == epoch:
                        continue
                    try:
                        fence = await raise_fence(conn, group, topic, partition, epoch)
                    except (psycopg.Error, OSError) as e:
                        raise Outage(f"inbox: raising the fence: {e}") from e
                    if fence != epoch:
                        raise _fenced(topic, partition, epoch, fence)
                    self._raised[slot] = epoch
                applied = await _apply_batch(conn, group, entries, self.batch_effect)
                if applied < len(entries):
                    log.debug("%d events already in the inbox: skipped", len(entries) - applied)
        except _EffectFailed as e:
            raise e.inner from None
        except HandlerError:
            raise
        except (psycopg.Error, OSError) as e:
            raise Outage(f"inbox: no database connection: {e}") from e
        except Exception as e:
            if type(e).__module__.startswith("psycopg_pool"):
                raise Outage(f"inbox: no database connection: {e}") from e
            raise


async def _never(conn: psycopg.AsyncConnection[Any], entry: Entry) -> None:
    raise RuntimeError("a BatchInbox handles batches: run it through Batches")
