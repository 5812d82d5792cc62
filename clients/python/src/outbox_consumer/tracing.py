"""Processing spans (extra ``otel``): each handler call runs in a span ``process <stream>`` of
kind consumer, a child of the relay's publish span that the entry's ``traceparent`` names,
with OpenTelemetry's messaging attributes. Without opentelemetry-api installed, nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .entry import Entry

try:  # the extra is optional
    from opentelemetry import trace as _trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _PROPAGATOR: Any = TraceContextTextMapPropagator()
    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised without the extra
    AVAILABLE = False

TRACER_NAME = "outbox_consumer"

_provider: Any = None


def use_tracer_provider(provider: Any) -> None:
    """Makes the processing spans come from ``provider`` instead of OpenTelemetry's global
    tracer provider (``None``: the global one again)."""
    global _provider
    _provider = provider


@contextlib.contextmanager
def processing_span(entry: Entry, stream: str) -> Iterator[Any]:
    """The span around one handler call (a no-op without opentelemetry-api). An exception
    raised inside sets the span's error status and goes on."""
    if not AVAILABLE:
        yield None
        return
    carrier: dict[str, str] = {}
    if isinstance(entry.headers, dict):
        for name in ("traceparent", "tracestate"):
            value = entry.headers.get(name)
            if isinstance(value, str):
                carrier[name] = value
    context = _PROPAGATOR.extract(carrier) if carrier else None
    tracer = (_provider or _trace.get_tracer_provider()).get_tracer(TRACER_NAME)
    attributes = {
        "messaging.system": "redis",
        "messaging.operation.type": "process",
        "messaging.destination.name": stream,
        "messaging.consumer.group.name": entry.group,
        "messaging.message.id": str(entry.id),
    }
    with tracer.start_as_current_span(
        f"process {stream}",
        context=context,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=True,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as e:
            span.set_status(Status(StatusCode.ERROR, str(e)))
            raise
