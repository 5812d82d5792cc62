"""The consumer's settings, checked when built: a wrong one raises :class:`ConfigError`
naming it."""

from __future__ import annotations

import os
import socket
import unicodedata
from dataclasses import dataclass, field

from . import keys
from .errors import ConfigError


def default_consumer_name() -> str:
    """``<hostname>-<pid>``: unique among running processes, stable for nothing."""
    host = socket.gethostname() or "consumer"
    return f"{host}-{os.getpid()}"


def _bad_name(value: str) -> bool:
    return any(c.isspace() or unicodedata.category(c) == "Cc" for c in value)


def topic_is_valid(topic: str) -> bool:
    """1 to 255 characters, no whitespace or control characters (the relay's rule)."""
    return 1 <= len(topic) <= 255 and not _bad_name(topic)


@dataclass
class ConsumerConfig:
    """Settings of one :class:`~outbox_consumer.Consumer`. Durations are in seconds."""

    #: ``redis://host:port[/db]`` or ``rediss://...``.
    redis_url: str
    #: The topics to consume: one string, or several (one stream each, read together).
    topics: list[str] | str
    #: The consumer group; created from the start of the stream when missing.
    group: str
    #: This consumer's name in the group; keep it across restarts (a pod name).
    consumer: str = field(default_factory=default_consumer_name)
    #: The relay's ``redis.stream_prefix``.
    stream_prefix: str = "outbox:"
    #: Entries read per XREADGROUP (its COUNT, per stream).
    batch_size: int = 100
    #: How long one XREADGROUP waits for new entries (its BLOCK), seconds.
    block: float = 2.0
    #: Entries idle this long in another consumer's hands are claimed; also the partition lease.
    claim_idle: float = 30.0
    #: Deliveries after which a failing entry goes to the dead stream.
    max_deliveries: int = 5
    #: Lanes (partition keys, or unkeyed entries) handled at once.
    concurrency: int = 16
    #: First wait before a failed entry is retried, doubling per delivery with jitter.
    retry_base: float = 0.2
    #: Cap of that wait; keep it below ``claim_idle``.
    retry_max: float = 10.0
    #: Park a key once one of its entries is dead-lettered (docs/protocol.md, "Parked keys").
    park_keys: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.topics, str):
            self.topics = [self.topics]
        else:
            self.topics = list(self.topics)
        self.validate()

    @property
    def topic_list(self) -> list[str]:
        """The topics, as a list."""
        return list(self.topics)

    def validate(self) -> None:
        """Checks every setting; raises :class:`ConfigError` naming the first bad one."""
        url = self.redis_url.strip()
        if not url:
            raise ConfigError("redis_url", "names no server")
        if not (url.startswith("redis://") or url.startswith("rediss://")):
            raise ConfigError("redis_url", "must start with redis:// or rediss://")
        topics = self.topic_list
        if not topics:
            raise ConfigError("topics", "at least one topic")
        for i, topic in enumerate(topics):
            if not isinstance(topic, str) or not topic_is_valid(topic):
                raise ConfigError(
                    "topics", "each 1 to 255 characters, no whitespace or control characters"
                )
            if topic in topics[:i]:
                raise ConfigError("topics", "each topic once")
        for name, value in (("group", self.group), ("consumer", self.consumer)):
            if not isinstance(value, str) or not value or _bad_name(value):
                raise ConfigError(name, "1 or more characters, no whitespace")
        if not isinstance(self.stream_prefix, str):
            raise ConfigError("stream_prefix", "a string")
        for name, number in (
            ("batch_size", self.batch_size),
            ("concurrency", self.concurrency),
            ("max_deliveries", self.max_deliveries),
        ):
            if isinstance(number, bool) or not isinstance(number, int) or number < 1:
                raise ConfigError(name, "at least 1")
        if not self.block > 0:
            raise ConfigError("block", "more than 0")
        if not self.claim_idle >= 0.1:
            raise ConfigError("claim_idle", "at least 100ms")
        if not (self.retry_base > 0 and self.retry_max >= self.retry_base):
            raise ConfigError("retry_base", "more than 0 and at most retry_max")

    def stream_keys(self) -> list[str]:
        """The topics' streams, before partitions are resolved."""
        return [keys.stream_key(self.stream_prefix, t) for t in self.topic_list]

    def dead_key(self, topic: str) -> str:
        """A topic's dead stream."""
        return keys.dead_key(self.stream_prefix, topic)

    def dead_key_of_stream(self, stream: str) -> str:
        """The dead stream of ``stream``: its topic's, also for a partition's stream."""
        for topic in self.topic_list:
            base = keys.stream_key(self.stream_prefix, topic)
            if not stream.startswith(base):
                continue
            rest = stream[len(base) :]
            if rest == "" or (rest.startswith(":") and rest[1:].isdigit() and rest[1:].isascii()):
                return keys.dead_key(self.stream_prefix, topic)
        return f"{stream}:dead"
