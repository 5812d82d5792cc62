"""The Redis connections and the raw replies this client reads: stream commands return their
replies unparsed (redis-py's dict parsing would lose field order and the bytes of a field that
is not text), and scripts run by SHA with the text as a fallback."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from . import scripts

#: Commands whose reply this client parses itself.
_RAW = (
    "XREADGROUP",
    "XREAD",
    "XRANGE",
    "XREVRANGE",
    "XPENDING",
    "XAUTOCLAIM",
    "XCLAIM",
    "XADD",
    "XACK",
    "HGET",
    "HMGET",
    "HGETALL",
    "SET",
    "LINDEX",
)

Redis = aioredis.Redis
Pipeline = aioredis.client.Pipeline


def connect(url: str, response_timeout: float) -> Redis:
    """A client for ``url`` (nothing connects before the first command), bytes in and out,
    RESP2, with the stream commands' replies left raw."""
    client = aioredis.Redis.from_url(
        url,
        decode_responses=False,
        socket_timeout=response_timeout,
        socket_connect_timeout=2.0,
        protocol=2,
        health_check_interval=0,
    )
    for name in _RAW:
        client.response_callbacks.pop(name, None)
    return client


def text(value: Any) -> str:
    """A reply value as text."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


@dataclass
class RawEntry:
    """One entry as Redis returned it: its stream, its id, its fields in order (raw bytes)."""

    stream: str
    stream_id: str
    fields: list[tuple[bytes, bytes]]

    def at(self) -> tuple[str, str]:
        """Where it is: (stream, id)."""
        return (self.stream, self.stream_id)

    def key_field(self) -> str | None:
        """The ``key`` field as text, if present and text."""
        for name, value in self.fields:
            if name == b"key":
                try:
                    return value.decode("utf-8")
                except UnicodeDecodeError:
                    return None
        return None


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


def parse_entries(stream: str, items: Any) -> list[RawEntry]:
    """The entries of an XRANGE-style reply ``[[id, [f, v, ...]], ...]``; an entry whose
    fields are nil (deleted while pending) is left out."""
    out: list[RawEntry] = []
    if not isinstance(items, list):
        return out
    for item in items:
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], list):
            continue
        flat = item[1]
        fields = [(_bytes(flat[i]), _bytes(flat[i + 1])) for i in range(0, len(flat) - 1, 2)]
        out.append(RawEntry(stream, text(item[0]), fields))
    return out


def parse_read_reply(reply: Any) -> list[RawEntry]:
    """The entries of an XREADGROUP/XREAD reply, stream after stream, each in order."""
    out: list[RawEntry] = []
    if not isinstance(reply, list):
        return out
    for pair in reply:
        if isinstance(pair, list) and len(pair) == 2:
            out.extend(parse_entries(text(pair[0]), pair[1]))
    return out


async def call(client: Redis, *args: Any) -> Any:
    """One command, its reply raw (the stream commands') or as redis-py parses it."""
    return await client.execute_command(*args)  # type: ignore[no-untyped-call]


def queue(pipe: Pipeline, *args: Any) -> None:
    """Adds one command to a pipeline."""
    pipe.execute_command(*args)


async def run_script(client: Redis, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
    """Runs protocol script ``name`` (EVALSHA, EVAL when the server does not have it yet)."""
    try:
        return await call(client, "EVALSHA", scripts.sha1(name), len(keys), *keys, *args)
    except NoScriptError:
        return await call(client, "EVAL", scripts.source(name), len(keys), *keys, *args)


def add_script(pipe: Pipeline, name: str, keys: Sequence[str], args: Sequence[Any]) -> None:
    """Adds protocol script ``name`` to a pipeline, as EVAL with its text (no NOSCRIPT can
    break a pipeline)."""
    pipe.execute_command("EVAL", scripts.source(name), len(keys), *keys, *args)


async def execute(pipe: Pipeline) -> list[Any]:
    """Runs a pipeline, raising the first error a command answered."""
    replies: list[Any] = await pipe.execute(raise_on_error=True)
    return replies
