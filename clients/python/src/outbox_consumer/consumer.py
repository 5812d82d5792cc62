"""The consumer loop (docs/protocol.md, "The consumer loop"): this consumer's own pending
entries first, then new ones; each batch split into lanes by partition key (different keys
concurrently, one key's entries in stream order); acknowledgement only after the handler
succeeded; retries with backoff, an outage not counted as a delivery; dead letters; claims of
what dead consumers left; on a partitioned topic, only the partitions this consumer leases."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from redis.exceptions import RedisError

from . import _redis, metrics, park, tracing
from ._redis import RawEntry, Redis
from .backoff import outage_pause, retry_delay
from .config import ConsumerConfig
from .entry import DEAD_FIELDS, Entry, EntryError, Lease, parse_fields
from .errors import ErrorKind, error_text, kind_of
from .fleet import Fleet
from .source import CheckKind, EntryRef, Source, ensure_group, resolve_partitions

log = logging.getLogger("outbox_consumer")

#: A handler: ``async def handle(entry) -> None`` (or a plain function, run in a thread).
#: Raising says what becomes of the entry (see :mod:`outbox_consumer.errors`).
Handler = Callable[[Entry], Awaitable[None] | None]


class _Maintained(Protocol):
    async def maintain(self, group: str) -> None: ...


#: A batch handler: ``async def handle(entries) -> None``, run through :class:`Batches`.
BatchHandler = Callable[[list[Entry]], Awaitable[None] | None]


class Batches:
    """Runs a batch handler: ``consumer.run(Batches(handle))`` hands over each batch at once,
    in stream order; returning acknowledges all of it, an exception applies its kind to all
    of it. Keeping one key's entries in order inside the batch is the handler's part."""

    def __init__(self, handler: BatchHandler) -> None:
        self.handler = handler

    async def maintain(self, group: str) -> None:
        """The inner handler's own work beside the consumer (the batch inbox's retention)."""
        inner = getattr(self.handler, "maintain", None)
        if inner is not None and inspect.iscoroutinefunction(inner):
            await inner(group)


def stream_id_order(stream_id: str) -> tuple[int, int]:
    """A stream id ``ms-seq`` as a sortable pair (ids that do not parse sort first)."""
    ms, _, seq = stream_id.partition("-")
    try:
        return (int(ms), int(seq or "0"))
    except ValueError:
        return (0, 0)


#: How often a consumer that parks keys looks for keys an operator released.
DRAIN_EVERY = 1.0


@dataclass
class RunStats:
    """What a run did before it returned."""

    handled: int = 0
    failed: int = 0
    dead_lettered: int = 0


class Delivery:
    """One delivery of one entry."""

    def __init__(
        self, raw: RawEntry, topic: str | None, group: str, delivery: int, take: bool
    ) -> None:
        self.raw = raw
        self.delivery = delivery
        self.take = take
        self.parked = False
        self.from_held = False
        self.parsed: Entry | EntryError
        try:
            entry = parse_fields(raw.stream_id, raw.fields, topic)
            entry.deliveries = delivery
            entry.group = group
            entry.stream = raw.stream
            self.parsed = entry
        except EntryError as e:
            self.parsed = e
        key = self.parsed.key if isinstance(self.parsed, Entry) else raw.key_field()
        self.lane = None if key is None else f"{raw.stream}\n{key}"

    @property
    def entry(self) -> Entry | None:
        return self.parsed if isinstance(self.parsed, Entry) else None

    def topic_key(self) -> tuple[str, str] | None:
        e = self.entry
        if e is None or e.key is None:
            return None
        return (e.topic, e.key)

    def topic(self) -> str:
        e = self.entry
        return e.topic if e is not None else ""


def lanes(deliveries: Sequence[Delivery]) -> list[list[Delivery]]:
    """One lane per partition key (its entries in order), one per unkeyed entry, lanes in the
    order of their first entry."""
    out: list[list[Delivery]] = []
    by_key: dict[str, int] = {}
    for d in deliveries:
        if d.lane is None:
            out.append([d])
        elif d.lane in by_key:
            out[by_key[d.lane]].append(d)
        else:
            by_key[d.lane] = len(out)
            out.append([d])
    return out


@dataclass
class Fate:
    """What became of a delivery: ``done``, ``dead``, ``parked``, ``failed`` (retry later),
    ``outage`` (retry, uncounted), ``held_back`` (behind its key's failure), ``lost`` (no
    longer this consumer's, or Redis failed)."""

    kind: str
    delivery: int = 0
    error: str = ""
    fresh: bool = False
    redis_error: BaseException | None = None


def _passes(config: ConsumerConfig, fate: Fate) -> bool:
    if fate.kind in ("done", "parked"):
        return True
    return fate.kind == "dead" and not config.park_keys


def dead_fields(config: ConsumerConfig, raw: RawEntry, error: str, deliveries: int) -> list[bytes]:
    """The dead entry's fields and values, alternating: the entry's own (minus any
    ``error``, ``group``, ``deliveries``), then ``error``, ``group``, ``deliveries``."""
    out: list[bytes] = []
    for name, value in raw.fields:
        if name.decode("utf-8", "replace") in DEAD_FIELDS:
            continue
        out += [name, value]
    out += [
        b"error",
        error.encode("utf-8"),
        b"group",
        config.group.encode("utf-8"),
        b"deliveries",
        str(deliveries).encode(),
    ]
    return out


class _Failure(Exception):
    pass


@dataclass
class _State:
    group_ready: bool = False
    streams: list[str] = field(default_factory=list)
    topic_of: dict[str, str] = field(default_factory=dict)
    next_drain: float = 0.0
    maybe_pending: set[str] = field(default_factory=set)
    unacked: list[EntryRef] = field(default_factory=list)
    retry_at: dict[EntryRef, float] = field(default_factory=dict)
    fresh_unattempted: set[EntryRef] = field(default_factory=set)
    next_claim: float = 0.0
    outage_failures: int = 0
    last_error_log: float = 0.0
    stats: RunStats = field(default_factory=RunStats)

    def none_pending(self, stream: str) -> None:
        self.maybe_pending.discard(stream)
        self.retry_at = {at: t for at, t in self.retry_at.items() if at[0] != stream}
        self.fresh_unattempted = {at for at in self.fresh_unattempted if at[0] != stream}


def _is_sync(handler: Any) -> bool:
    if inspect.iscoroutinefunction(handler):
        return False
    call = getattr(handler, "__call__", None)  # noqa: B004
    return not inspect.iscoroutinefunction(call)


class Consumer:
    """A member of a consumer group on the streams of one or more topics. Build it from a
    :class:`ConsumerConfig` (checked here: a wrong setting raises
    :class:`~outbox_consumer.ConfigError`), then :meth:`run` it with a handler."""

    def __init__(self, config: ConsumerConfig) -> None:
        config.validate()
        self.config = config
        try:
            self.redis: Redis = _redis.connect(config.redis_url, config.block + 10.0)
            self.fleet_redis: Redis = _redis.connect(
                config.redis_url, max(config.claim_idle / 3, 0.5)
            )
        except ValueError as e:
            from .errors import ConfigError

            raise ConfigError("redis_url", str(e)) from None
        self.fleet = Fleet(config.consumer, config.group, config.stream_prefix, config.claim_idle)
        self.source = Source(config, self.fleet)
        self._stop = asyncio.Event()
        self._handler: Handler = _no_handler
        self._batch: BatchHandler | None = None
        self._sync = False

    def stop(self) -> None:
        """Asks the run to stop: the entries in hand are finished and acknowledged first."""
        self._stop.set()

    def stop_on_signals(self, *signals: int) -> None:
        """Stops the run at SIGTERM or SIGINT (or the given signals), from the running loop."""
        loop = asyncio.get_running_loop()
        for sig in signals or (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)

    async def close(self) -> None:
        """Closes the Redis connections."""
        await self.redis.aclose()
        await self.fleet_redis.aclose()

    async def run(self, handler: Handler | Batches, stop: asyncio.Event | None = None) -> RunStats:
        """Runs until :meth:`stop` (or ``stop`` is set), handing entries to ``handler``. An
        entry is acknowledged after its handler returned; an exception is retried,
        dead-lettered or waited out as its kind says. On stop, handlers in flight finish and
        their entries are acknowledged before this returns."""
        if stop is not None:
            self._stop = stop
        if isinstance(handler, Batches):
            self._batch = handler.handler
            self._sync = _is_sync(handler.handler)
        else:
            self._handler = handler
            self._batch = None
            self._sync = _is_sync(handler)
        tasks = [asyncio.create_task(self.fleet.heartbeat(self.fleet_redis))]
        maintain = getattr(handler, "maintain", None)
        if maintain is not None and inspect.iscoroutinefunction(maintain):
            tasks.append(asyncio.create_task(maintain(self.config.group)))
        c = self.config
        log.info(
            "consumer started: streams %s, group %s, consumer %s",
            ",".join(c.stream_keys()),
            c.group,
            c.consumer,
        )
        state = _State()
        try:
            await self._loop(state)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if state.unacked:
            try:
                await self.source.ack(self.redis, state.unacked)
                state.stats.handled += len(state.unacked)
            except (RedisError, OSError) as e:
                log.warning(
                    "acknowledgements lost at shutdown (%d entries will be redelivered): %s",
                    len(state.unacked),
                    e,
                )
        if self.fleet.is_active():
            try:
                await self.fleet.leave(self.fleet_redis)
            except (RedisError, OSError) as e:
                log.warning("could not give the partitions back at shutdown: %s", e)
        log.info(
            "consumer stopped: handled %d, failed %d, dead-lettered %d",
            state.stats.handled,
            state.stats.failed,
            state.stats.dead_lettered,
        )
        return state.stats

    async def _loop(self, state: _State) -> None:
        while not self._stop.is_set():
            try:
                wait = await self._turn(state)
                if state.outage_failures:
                    log.info("redis answers again: consuming")
                state.outage_failures = 0
            except (RedisError, OSError, asyncio.TimeoutError) as e:
                if "NOGROUP" in str(e):
                    state.group_ready = False
                state.outage_failures += 1
                state.maybe_pending.update(state.streams)
                now = time.monotonic()
                if now - state.last_error_log > 30:
                    log.warning("redis command failed; retrying with backoff: %s", e)
                    state.last_error_log = now
                wait = outage_pause(state.outage_failures)
            if wait > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), wait)

    async def _turn(self, state: _State) -> float:
        """One step; returns how long to wait before the next."""
        c = self.config
        conn = self.redis
        source = self.source
        if self.fleet.take_stale():
            state.group_ready = False
        if not state.group_ready:
            topics = await resolve_partitions(conn, c)
            state.streams = [s for _, streams in topics for s in streams]
            state.topic_of = {s: t for t, streams in topics for s in streams}
            for s in state.streams:
                await ensure_group(conn, s, c.group)
            self.fleet.configure(topics)
            state.maybe_pending = set(state.streams)
            state.group_ready = True
        if source.releasing():
            await self._flush(state)
        changes = await source.rebalance(conn)
        for s in changes.released:
            state.none_pending(s)
        state.maybe_pending.update(changes.taken)
        now = time.monotonic()
        if c.park_keys and now >= state.next_drain:
            await park.drain(
                conn,
                c,
                lambda stream: source.check(stream).kind != CheckKind.NOT_MINE,
                self._drain_one,
                self._sleep,
            )
            state.next_drain = now + DRAIN_EVERY
        streams = source.readable(state.streams)
        claim_due = now >= state.next_claim
        if claim_due or any(s in state.maybe_pending for s in streams):
            await self._flush(state)
        if claim_due:
            for s in streams:
                claimed = await source.claim_abandoned(conn, s)
                if claimed:
                    log.info("claimed %d entries idle longer than claim_idle on %s", claimed, s)
                    state.maybe_pending.add(s)
            state.next_claim = now + min(max(c.claim_idle / 2, 0.1), 30.0)
        pending: list[tuple[str, list[tuple[str, int]]]] = []
        for s in [s for s in streams if s in state.maybe_pending]:
            mine = await source.pending_mine(conn, s)
            if mine:
                pending.append((s, mine))
            else:
                state.none_pending(s)
        if pending:
            return await self._pending_turn(state, pending)
        read = await source.read_new(conn, streams, state.unacked)
        state.stats.handled += len(state.unacked)
        state.unacked.clear()
        for s in read.held:
            state.maybe_pending.add(s)
        state.fresh_unattempted.update(read.early)
        if not read.entries:
            return 0.0
        deliveries = [
            Delivery(raw, state.topic_of.get(raw.stream), c.group, 1, False) for raw in read.entries
        ]
        await self._handle(state, lanes(deliveries))
        return 0.0

    async def _pending_turn(
        self, state: _State, pending: list[tuple[str, list[tuple[str, int]]]]
    ) -> float:
        c = self.config
        gone: list[EntryRef] = []
        deliveries: list[Delivery] = []
        for stream, mine in pending:
            fetched = await self.source.fetch(self.redis, stream, [i for i, _ in mine])
            for (stream_id, count), raw in zip(mine, fetched):
                if raw is None:
                    gone.append((stream, stream_id))
                    continue
                fresh = count == 1 and raw.at() in state.fresh_unattempted
                number = 1 if fresh else count + 1
                deliveries.append(
                    Delivery(raw, state.topic_of.get(stream), c.group, number, not fresh)
                )
        if gone:
            log.warning(
                "%d pending entries no longer in their stream (trimmed or deleted): "
                "acknowledged without handling",
                len(gone),
            )
            await self.source.ack(self.redis, gone)
        now = time.monotonic()
        ready, waiting = [], []
        for lane in lanes(deliveries):
            if all(state.retry_at.get(d.raw.at(), 0.0) <= now for d in lane):
                ready.append(lane)
            else:
                waiting.append(lane)
        if not ready:
            times = [
                state.retry_at[d.raw.at()]
                for ln in waiting
                for d in ln
                if d.raw.at() in state.retry_at
            ]
            earliest = min(times) if times else now
            return max(min(earliest, state.next_claim) - now, 0.0)
        await self._handle(state, ready)
        return 0.0

    async def _flush(self, state: _State) -> None:
        if state.unacked:
            await self.source.ack(self.redis, state.unacked)
            state.stats.handled += len(state.unacked)
            state.unacked.clear()

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def _handle(self, state: _State, batch: list[list[Delivery]]) -> None:
        c = self.config
        if c.park_keys:
            await park.mark_parked(self.redis, c, [d for lane in batch for d in lane])
        in_hand = [d.raw.at() for lane in batch for d in lane]
        keeper = asyncio.create_task(self._keep_claimed(in_hand))
        try:
            sem = asyncio.Semaphore(c.concurrency)

            async def run_lane(lane: list[Delivery]) -> list[tuple[Delivery, Fate]]:
                async with sem:
                    return await self._lane(lane)

            if self._batch is not None:
                results = [await self._whole_batch(batch)]
            else:
                results = list(await asyncio.gather(*(run_lane(lane) for lane in batch)))
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        redis_error: BaseException | None = None
        outage: str | None = None
        # One jitter draw per batch: entries that failed together are retried together.
        unit = random.random()
        for d, fate in (pair for lane in results for pair in lane):
            at = d.raw.at()
            topic = d.topic() or state.topic_of.get(d.raw.stream, "")
            if fate.kind not in ("done", "dead", "parked"):
                state.maybe_pending.add(d.raw.stream)
            if fate.kind != "held_back":
                state.fresh_unattempted.discard(at)
            if fate.kind in ("done", "parked"):
                state.retry_at.pop(at, None)
                state.unacked.append(at)
                metrics.entry(topic, c.group, "handled" if fate.kind == "done" else "parked")
            elif fate.kind == "dead":
                state.stats.dead_lettered += 1
                state.retry_at.pop(at, None)
                metrics.entry(topic, c.group, "dead_lettered")
            elif fate.kind == "failed":
                state.stats.failed += 1
                state.retry_at[at] = time.monotonic() + retry_delay(
                    fate.delivery, c.retry_base, c.retry_max, unit
                )
                metrics.entry(topic, c.group, "failed")
            elif fate.kind == "outage":
                outage = fate.error
                state.retry_at[at] = time.monotonic() + max(outage_pause(1), 1.0)
                metrics.entry(topic, c.group, "outage")
            elif fate.kind == "held_back":
                if fate.fresh:
                    state.fresh_unattempted.add(at)
            elif fate.kind == "lost" and fate.redis_error is not None:
                redis_error = fate.redis_error
        if log.isEnabledFor(logging.DEBUG):
            kinds: dict[str, int] = {}
            for _, fate in (pair for lane in results for pair in lane):
                kinds[fate.kind] = kinds.get(fate.kind, 0) + 1
            log.debug("batch of %d entries settled: %s", len(in_hand), kinds)
        if outage is not None:
            log.warning(
                "handler failed on an outage; retrying without counting deliveries: %s", outage
            )
        if redis_error is not None:
            raise redis_error

    async def _keep_claimed(self, refs: list[EntryRef]) -> None:
        every = self.config.claim_idle / 3
        while True:
            await asyncio.sleep(every)
            try:
                await self.source.keep_in_hand(self.redis, refs, every / 2)
            except (RedisError, OSError) as e:
                log.warning("could not refresh the entries in hand: %s", e)

    async def _lane(self, lane: list[Delivery]) -> list[tuple[Delivery, Fate]]:
        out: list[tuple[Delivery, Fate]] = []
        blocked = False
        for d in lane:
            if blocked:
                fate = Fate("held_back", fresh=not d.take)
            elif d.parked:
                fate = await self._held(d)
            else:
                fate = await self._one(d)
            if not _passes(self.config, fate):
                blocked = True
            out.append((d, fate))
        return out

    async def _held(self, d: Delivery) -> Fate:
        if self.source.check(d.raw.stream).kind == CheckKind.NOT_MINE:
            return Fate("lost")
        try:
            if await park.hold(self.redis, self.config, d):
                return Fate("parked")
            return Fate("held_back", fresh=not d.take)
        except (RedisError, OSError) as e:
            return Fate("lost", redis_error=e)

    async def _before(self, d: Delivery) -> Lease | Fate | None:
        check = self.source.check(d.raw.stream)
        if check.kind == CheckKind.NOT_MINE:
            return Fate("lost")
        m = self.config.max_deliveries
        verdict: tuple[str, int] | None = None
        if isinstance(d.parsed, EntryError):
            verdict = (f"malformed entry: {d.parsed}", d.delivery)
        elif d.delivery > m:
            verdict = (
                f"delivered {d.delivery - 1} times without being acknowledged "
                f"(max_deliveries {m}): the consumers holding it stopped before finishing it; "
                "not handled again",
                d.delivery - 1,
            )
        if verdict is not None:
            return await self._dead_letter(d, verdict[0], verdict[1])
        if d.take:
            try:
                if not await self.source.take(
                    self.redis, d.raw.stream, d.raw.stream_id, d.delivery
                ):
                    return Fate("lost")
            except (RedisError, OSError) as e:
                return Fate("lost", redis_error=e)
        return check.lease

    async def _one(self, d: Delivery) -> Fate:
        before = await self._before(d)
        if isinstance(before, Fate):
            return before
        entry = d.entry
        if entry is None:
            return Fate("lost")
        entry = replace(entry, lease=before, headers=entry.headers)
        started = time.monotonic()
        error: BaseException | None = None
        try:
            with tracing.processing_span(entry, d.raw.stream):
                if self._sync:
                    result = await asyncio.to_thread(self._handler, entry)
                else:
                    result = self._handler(entry)
                if inspect.isawaitable(result):
                    await result
        except Exception as e:
            error = e
        metrics.handler_time(entry.topic, self.config.group, time.monotonic() - started)
        return await self._after(d, error)

    async def _after(self, d: Delivery, error: BaseException | None) -> Fate:
        if error is None:
            return Fate("done")
        kind = kind_of(error)
        text = error_text(error)
        event_id = d.entry.id if d.entry is not None else ""
        if kind == ErrorKind.OUTAGE:
            log.debug("handler hit an outage on %s: not counted as a delivery", d.raw.stream_id)
            if d.from_held:
                return Fate("outage", error=text)
            try:
                await self.source.take(self.redis, d.raw.stream, d.raw.stream_id, d.delivery - 1)
                return Fate("outage", error=text)
            except (RedisError, OSError) as e:
                return Fate("lost", redis_error=e)
        if kind == ErrorKind.FENCED:
            log.warning(
                "a newer owner holds %s: effect on %s refused, partition no longer handled "
                "here: %s",
                d.raw.stream,
                d.raw.stream_id,
                text,
            )
            self.source.fenced_out(d.raw.stream)
            return Fate("lost")
        if kind == ErrorKind.DEAD_LETTER:
            log.warning(
                "handler dead-lettered entry %s (event %s, delivery %d): %s",
                d.raw.stream_id,
                event_id,
                d.delivery,
                text,
            )
            return await self._dead_letter(d, text, d.delivery)
        log.warning(
            "handler failed on entry %s (event %s, delivery %d of %d): %s",
            d.raw.stream_id,
            event_id,
            d.delivery,
            self.config.max_deliveries,
            text,
        )
        if d.delivery >= self.config.max_deliveries:
            return await self._dead_letter(d, text, d.delivery)
        return Fate("failed", delivery=d.delivery)

    async def _dead_letter(self, d: Delivery, error: str, deliveries: int) -> Fate:
        c = self.config
        conn = self.redis
        dead = c.dead_key_of_stream(d.raw.stream)
        fields = dead_fields(c, d.raw, error, deliveries)
        parks = c.park_keys and d.topic_key() is not None
        try:
            if d.from_held:
                dead_id = _redis.text(await _redis.call(conn, "XADD", dead, "*", *fields))
                await park.park_dead(conn, c, d, dead_id)
                return Fate("dead")
            if parks:
                await park.park_dead(conn, c, d, "")
            written = await _redis.run_script(
                conn,
                "dead_letter",
                [d.raw.stream, dead],
                [c.group, c.consumer, d.raw.stream_id, *fields],
            )
        except (RedisError, OSError) as e:
            return Fate("lost", redis_error=e)
        if isinstance(written, int):
            return Fate("lost")
        dead_id = _redis.text(written)
        if parks:
            try:
                await park.park_dead(conn, c, d, dead_id)
            except (RedisError, OSError) as e:
                log.warning("the parked key's dead entry not recorded: %s", e)
        log.warning(
            "entry %s dead-lettered to %s as %s after %d deliveries: %s",
            d.raw.stream_id,
            dead,
            dead_id,
            deliveries,
            error,
        )
        return Fate("dead")

    async def _whole_batch(self, batch: list[list[Delivery]]) -> list[tuple[Delivery, Fate]]:
        """A batch handler's call: the batch in stream order, less what must wait (a key with
        an earlier entry left out) or is held (a parked key); one call, its result for all."""
        assert self._batch is not None
        deliveries = sorted(
            (d for lane in batch for d in lane), key=lambda d: stream_id_order(d.raw.stream_id)
        )
        out: list[tuple[Delivery, Fate]] = []
        chosen: list[tuple[Delivery, Lease | None]] = []
        blocked: set[str] = set()
        for d in deliveries:
            if d.lane is not None and d.lane in blocked:
                out.append((d, Fate("held_back", fresh=not d.take)))
                continue
            before: Lease | Fate | None
            before = await self._held(d) if d.parked else await self._before(d)
            if isinstance(before, Fate):
                if not _passes(self.config, before) and d.lane is not None:
                    blocked.add(d.lane)
                out.append((d, before))
                continue
            chosen.append((d, before))
        if not chosen:
            return out
        entries = [replace(d.entry, lease=lease) for d, lease in chosen if d.entry is not None]
        error: BaseException | None = None
        started = time.monotonic()
        try:
            with tracing.processing_span(entries[0], chosen[0][0].raw.stream):
                if self._sync:
                    result = await asyncio.to_thread(self._batch, entries)
                else:
                    result = self._batch(entries)
                if inspect.isawaitable(result):
                    await result
        except Exception as e:
            error = e
        metrics.handler_time(entries[0].topic, self.config.group, time.monotonic() - started)
        for d, _ in chosen:
            out.append((d, await self._after(d, error)))
        return out

    async def _drain_one(self, raw: RawEntry, topic: str, delivery: int) -> tuple[str, int]:
        d = Delivery(raw, topic, self.config.group, delivery, False)
        d.from_held = True
        if self._batch is not None:
            fate = (await self._whole_batch([[d]]))[0][1]
        else:
            fate = (await self._lane([d]))[0][1]
        if fate.kind == "done":
            return ("done", 0)
        if fate.kind == "dead":
            return ("dead", 0)
        if fate.kind == "failed":
            return ("failed", fate.delivery)
        if fate.redis_error is not None:
            raise fate.redis_error
        return ("stop", 0)


async def _no_handler(entry: Entry) -> None:
    raise RuntimeError("no handler")
