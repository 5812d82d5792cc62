"""Parked keys (``park_keys``; docs/protocol.md, "Parked keys"): a batch's parked keys are held
(appended to the key's held list, then acknowledged), a dead-lettered entry parks its key
before it leaves the pending list, and a key an operator released is drained in order by one
consumer at a time (a lock in Redis) that may handle its stream."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from . import _redis, keys
from ._redis import RawEntry, Redis
from .config import ConsumerConfig

if TYPE_CHECKING:
    from .consumer import Delivery

log = logging.getLogger("outbox_consumer.park")


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def held_json(raw: RawEntry) -> str:
    """The held list's form of an entry: ``{"stream","id","fields":[[name,value],...]}``
    (fields that are not text left out)."""
    fields = []
    for name, value in raw.fields:
        try:
            fields.append([name.decode("utf-8"), value.decode("utf-8")])
        except UnicodeDecodeError:
            continue
    return _json({"stream": raw.stream, "id": raw.stream_id, "fields": fields})


def raw_of_held(text: str) -> RawEntry | None:
    """A held entry back as a raw entry; ``None`` when the text is not one."""
    try:
        held = json.loads(text)
        fields = [(str(k).encode("utf-8"), str(v).encode("utf-8")) for k, v in held["fields"]]
        return RawEntry(str(held["stream"]), str(held["id"]), fields)
    except (ValueError, KeyError, TypeError):
        return None


async def mark_parked(conn: Redis, config: ConsumerConfig, deliveries: Sequence[Delivery]) -> None:
    """Marks the deliveries whose key is parked in this group (one HMGET per topic)."""
    by_topic: dict[str, set[str]] = {}
    for d in deliveries:
        tk = d.topic_key()
        if tk is not None:
            by_topic.setdefault(tk[0], set()).add(tk[1])
    parked_now: set[tuple[str, str]] = set()
    for topic, key_set in by_topic.items():
        names = sorted(key_set)
        found = await _redis.call(
            conn, "HMGET", keys.parked_key(config.stream_prefix, topic, config.group), *names
        )
        for name, state in zip(names, found):
            if state is not None:
                parked_now.add((topic, name))
    if not parked_now:
        return
    for d in deliveries:
        tk = d.topic_key()
        d.parked = tk is not None and tk in parked_now


async def hold(conn: Redis, config: ConsumerConfig, d: Delivery) -> bool:
    """Appends ``d``'s entry to its parked key's held list; false when the key is no longer
    parked (handle it instead)."""
    tk = d.topic_key()
    if tk is None:
        return False
    topic, key = tk
    reply = await _redis.run_script(
        conn,
        "hold",
        [
            keys.parked_key(config.stream_prefix, topic, config.group),
            keys.held_key(config.stream_prefix, topic, config.group, key),
        ],
        [key, held_json(d.raw)],
    )
    return int(reply) == 1


async def park_dead(conn: Redis, config: ConsumerConfig, d: Delivery, dead_entry: str) -> None:
    """Parks ``d``'s key behind its dead entry (``dead_entry`` empty while not written yet)."""
    tk = d.topic_key()
    entry = d.entry
    if tk is None or entry is None:
        return
    topic, key = tk
    state = {
        "dead_id": str(entry.id),
        "dead_entry": dead_entry,
        "stream": d.raw.stream,
        "since_ms": int(time.time() * 1000),
        "released": False,
    }
    parked = int(
        await _redis.run_script(
            conn,
            "park",
            [keys.parked_key(config.stream_prefix, topic, config.group)],
            [key, _json(state)],
        )
    )
    if parked == 1 and dead_entry:
        log.warning(
            "key %r of %s parked behind its dead entry %s: its later entries are held until "
            "an operator discards or redrives it",
            key,
            topic,
            entry.id,
        )


#: Handles one held entry: returns its fate's name and, for a failure, its delivery number.
DrainOne = Callable[[RawEntry, str, int], Awaitable[tuple[str, int]]]


async def drain(
    conn: Redis,
    config: ConsumerConfig,
    may_handle: Callable[[str], bool],
    handle_one: DrainOne,
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    """Drains every released key of the consumer's topics that this consumer may handle."""
    from .backoff import retry_delay

    for topic in config.topic_list:
        hash_key = keys.parked_key(config.stream_prefix, topic, config.group)
        flat = await _redis.call(conn, "HGETALL", hash_key)
        states: list[tuple[str, dict[str, Any]]] = []
        for i in range(0, len(flat or []) - 1, 2):
            try:
                state = json.loads(flat[i + 1])
            except ValueError:
                continue
            if isinstance(state, dict):
                states.append((_redis.text(flat[i]), state))
        for key, state in sorted(states, key=lambda s: s[0]):
            if not state.get("released") or not may_handle(str(state.get("stream", ""))):
                continue
            held_list = keys.held_key(config.stream_prefix, topic, config.group, key)
            lock = keys.drain_lock_key(held_list)
            got = await _redis.call(
                conn,
                "SET",
                lock,
                config.consumer,
                "NX",
                "PX",
                max(int(config.claim_idle * 1000), 1),
            )
            if got is None:
                continue
            try:
                await _drain_key(
                    conn, hash_key, held_list, key, topic, config, handle_one, sleep, retry_delay
                )
            finally:
                await _redis.run_script(conn, "unlock", [lock], [config.consumer])


async def _drain_key(
    conn: Redis,
    hash_key: str,
    held_list: str,
    key: str,
    topic: str,
    config: ConsumerConfig,
    handle_one: DrainOne,
    sleep: Callable[[float], Awaitable[None]],
    retry_delay: Callable[[int, float, float], float],
) -> None:
    while True:
        first = await _redis.call(conn, "LINDEX", held_list, 0)
        if first is None:
            if int(await _redis.run_script(conn, "unpark", [hash_key, held_list], [key])) == 1:
                log.info("parked key %r of %s drained: it flows again", key, topic)
            return
        text = first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)
        raw = raw_of_held(text)
        if raw is None:
            log.warning("a held entry of key %r that is not one: dropped", key)
            await _redis.run_script(conn, "pop", [held_list], [first])
            continue
        delivery = 1
        while True:
            fate, n = await handle_one(raw, topic, delivery)
            if fate == "done":
                await _redis.run_script(conn, "pop", [held_list], [first])
                break
            if fate == "dead":
                await _redis.run_script(conn, "pop", [held_list], [first])
                return
            if fate == "failed":
                await sleep(retry_delay(n, config.retry_base, config.retry_max))
                delivery = n + 1
                continue
            return
