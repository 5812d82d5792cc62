"""The optional extras: the processing span continues the relay's trace (``otel``), and the
metrics count entries by outcome (``metrics``)."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest

from outbox_consumer import Entry, metrics, tracing

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def entry(headers: dict[str, str]) -> Entry:
    return Entry(
        stream_id="1-0",
        id=uuid.uuid4(),
        topic="t",
        key=None,
        payload={},
        headers=headers,
        created_at=datetime.now(timezone.utc),
        group="g",
    )


def test_the_processing_span_is_a_child_of_the_entrys_traceparent() -> None:
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    export = pytest.importorskip("opentelemetry.sdk.trace.export")
    memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
    from opentelemetry.trace import SpanKind, StatusCode

    exporter = memory.InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    try:
        with tracing.processing_span(entry({"traceparent": TRACEPARENT}), "outbox:t"):
            pass
        with (
            pytest.raises(RuntimeError),
            tracing.processing_span(entry({}), "outbox:t"),
        ):
            raise RuntimeError("boom")
    finally:
        tracing.use_tracer_provider(None)
    child, alone = exporter.get_finished_spans()
    assert child.name == "process outbox:t"
    assert child.kind == SpanKind.CONSUMER
    assert child.context.trace_id == int("0af7651916cd43dd8448eb211c80319c", 16)
    assert child.parent is not None and child.parent.span_id == int("b7ad6b7169203331", 16)
    assert child.attributes["messaging.system"] == "redis"
    assert child.attributes["messaging.consumer.group.name"] == "g"
    assert alone.parent is None
    assert alone.status.status_code == StatusCode.ERROR


def test_metrics_count_entries_by_outcome() -> None:
    prom = pytest.importorskip("prometheus_client")
    registry = prom.CollectorRegistry()
    assert metrics.enable(registry)
    metrics.entry("t", "g", "handled")
    metrics.entry("t", "g", "handled")
    metrics.entry("t", "g", "dead_lettered")
    metrics.handler_time("t", "g", 0.01)
    labels = {"topic": "t", "group": "g"}
    get = registry.get_sample_value
    assert get("outbox_consumer_entries_total", {**labels, "outcome": "handled"}) == 2
    assert get("outbox_consumer_entries_total", {**labels, "outcome": "dead_lettered"}) == 1
    assert get("outbox_consumer_handler_duration_seconds_count", labels) == 1
