"""outbox-consumer: reads the Redis Streams that outbox-relay writes as a member of a consumer
group, with the same protocol as the Rust and TypeScript clients (docs/protocol.md): per-key
order, retries with backoff (an outage is not a delivery), dead letters, parked keys,
CloudEvents entries, a fenced fleet on partitioned topics, and an inbox in Postgres for
exactly-once effects (:mod:`outbox_consumer.inbox`)."""

from .config import ConsumerConfig
from .consumer import Batches, BatchHandler, Consumer, Handler, RunStats
from .entry import CloudEvent, Entry, EntryError, Lease, parse_fields
from .errors import (
    ConfigError,
    DeadLetter,
    ErrorKind,
    Fenced,
    HandlerError,
    Outage,
    Retry,
)
from .partition import murmur2, partition_for_key

__all__ = [
    "BatchHandler",
    "Batches",
    "CloudEvent",
    "ConfigError",
    "Consumer",
    "ConsumerConfig",
    "DeadLetter",
    "Entry",
    "EntryError",
    "ErrorKind",
    "Fenced",
    "Handler",
    "HandlerError",
    "Lease",
    "Outage",
    "Retry",
    "RunStats",
    "murmur2",
    "parse_fields",
    "partition_for_key",
]
__version__ = "0.1.0"
