//! W3C trace context across an event's hops: the `traceparent` (and `tracestate`) a producer
//! puts in the event's headers becomes the parent of the relay's publish span, the stream
//! entry's headers carry the publish span's own `traceparent`, and the consumer's processing
//! span is its child. Spans are `tracing` spans; the layer of `tracing-opentelemetry` (the
//! same version as this crate's) exports them with these parents, and without that layer
//! nothing here has any effect.
//!
//! The header is parsed here rather than by an SDK propagator so that the consumer library
//! needs only the OpenTelemetry API; everything but the names needs the `otel` feature.

/// The header naming the parent span.
pub const TRACEPARENT: &str = "traceparent";
/// The vendors' part of the trace context, passed along unchanged.
pub const TRACESTATE: &str = "tracestate";
/// The `tracing` target of the spans meant for export (publish and process): an application's
/// OpenTelemetry layer can select exactly these.
pub const TARGET: &str = "outbox::trace";

/// A `tracing` span of target [`TARGET`] as OpenTelemetry's messaging conventions name one:
/// `otel.name` is `"<operation> <destination>"`, `otel.kind` the given kind, `messaging.system`
/// `redis`, the operation's type and name, `messaging.destination.name`; more fields after.
#[macro_export]
macro_rules! messaging_span {
    ($operation:literal, $kind:literal, $destination:expr $(, $($fields:tt)*)?) => {
        ::tracing::info_span!(
            target: $crate::trace::TARGET,
            $operation,
            otel.name = %format!("{} {}", $operation, $destination),
            otel.kind = $kind,
            messaging.system = "redis",
            messaging.operation.type = $operation,
            messaging.operation.name = $operation,
            messaging.destination.name = %$destination,
            $($($fields)*)?
        )
    };
}

#[cfg(feature = "otel")]
mod context;
#[cfg(feature = "otel")]
pub use context::*;
