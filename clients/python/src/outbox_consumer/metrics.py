"""Prometheus metrics (extra ``metrics``), registered on first use in prometheus_client's
default registry (or the one given to :func:`enable`). Names:

- ``outbox_consumer_entries_total{topic,group,outcome}``: entries settled, ``outcome`` one of
  ``handled``, ``failed`` (left for a retry), ``dead_lettered``, ``outage``, ``parked``;
- ``outbox_consumer_handler_duration_seconds{topic,group}``: how long handler calls took.

Without prometheus_client installed, every call here does nothing."""

from __future__ import annotations

from typing import Any

try:
    import prometheus_client as _prom

    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised without the extra
    AVAILABLE = False

_entries: Any = None
_seconds: Any = None


def enable(registry: Any = None) -> bool:
    """Registers the metrics (once); false without prometheus_client."""
    global _entries, _seconds
    if not AVAILABLE:
        return False
    if _entries is None:
        kwargs = {} if registry is None else {"registry": registry}
        _entries = _prom.Counter(
            "outbox_consumer_entries_total",
            "Entries settled by the consumer, by outcome.",
            ["topic", "group", "outcome"],
            **kwargs,
        )
        _seconds = _prom.Histogram(
            "outbox_consumer_handler_duration_seconds",
            "How long handler calls took.",
            ["topic", "group"],
            **kwargs,
        )
    return True


def entry(topic: str, group: str, outcome: str) -> None:
    if _entries is not None:
        _entries.labels(topic, group, outcome).inc()


def handler_time(topic: str, group: str, seconds: float) -> None:
    if _seconds is not None:
        _seconds.labels(topic, group).observe(seconds)
