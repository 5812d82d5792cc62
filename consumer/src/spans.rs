//! Processing spans: each handler call runs in a span of target [`outbox_core::trace::TARGET`]
//! (OpenTelemetry's messaging conventions: kind consumer, operation `process`), so the
//! handler's own log lines and spans sit inside it. With the `otel` feature, an entry's span is
//! a child of the publish span its `traceparent` header names, and a batch's span is linked to
//! each entry's trace; a failure sets the span's error status.

use outbox_core::Entry;
use tracing::Span;

/// The span of one entry's handling, read from `stream`.
pub(crate) fn for_entry(stream: &str, entry: &Entry) -> Span {
    let span = outbox_core::messaging_span!(
        "process",
        "consumer",
        stream,
        messaging.consumer.group.name = %entry.group,
        messaging.message.id = %entry.id,
        outbox.stream_id = %entry.stream_id,
        outbox.delivery = entry.deliveries,
    );
    #[cfg(feature = "otel")]
    {
        if let Some(lease) = &entry.lease {
            outbox_core::trace::set_partition(&span, lease.partition);
        }
        if let Some(parent) = outbox_core::trace::from_headers(&entry.headers) {
            outbox_core::trace::set_parent(&span, parent);
        }
    }
    span
}

/// The span of one batch's handling, named for the first entry's stream.
pub(crate) fn for_batch(entries: &[Entry], first_stream: &str) -> Span {
    let group = entries
        .first()
        .map(|e| e.group.as_ref())
        .unwrap_or_default();
    let span = outbox_core::messaging_span!(
        "process",
        "consumer",
        first_stream,
        messaging.consumer.group.name = %group,
        messaging.batch.message_count = entries.len(),
    );
    #[cfg(feature = "otel")]
    for entry in entries {
        if let Some(context) = outbox_core::trace::from_headers(&entry.headers) {
            outbox_core::trace::add_link(&span, context);
        }
    }
    span
}

/// Marks `span` failed with `error`.
pub(crate) fn failed(span: &Span, error: &str) {
    #[cfg(feature = "otel")]
    outbox_core::trace::set_error(span, "handler_failed", error);
    #[cfg(not(feature = "otel"))]
    let _ = (span, error);
}
