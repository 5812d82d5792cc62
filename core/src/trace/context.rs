//! The trace context itself: parsing and writing `traceparent`, and the parents and links of
//! `tracing` spans (through tracing-opentelemetry's span extension).

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{TRACEPARENT, TRACESTATE};

/// The remote span a `traceparent` names (W3C Trace Context, version `00`, or a later version
/// read as `00`), with `tracestate` when it parses; `None` when it is malformed or names no
/// span (all-zero ids).
pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    let mut parts = traceparent.trim().split('-');
    let version = parts.next()?;
    let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
    let rest = parts.next();
    let hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    if !hex(version, 2) || version == "ff" || (version == "00" && rest.is_some()) {
        return None;
    }
    if !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let state = tracestate
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
        true,
        state,
    ))
}

/// The `traceparent` naming `context` (version `00`).
pub fn format(context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    )
}

/// The trace context in an event's headers (a JSON object with a `traceparent` string).
pub fn from_headers(headers: &serde_json::Value) -> Option<SpanContext> {
    let traceparent = headers.get(TRACEPARENT)?.as_str()?;
    parse(
        traceparent,
        headers.get(TRACESTATE).and_then(|s| s.as_str()),
    )
}

/// Makes `parent` the parent of `span`, which must not have been entered yet. False when no
/// OpenTelemetry layer records the span.
pub fn set_parent(span: &tracing::Span, parent: SpanContext) -> bool {
    let cx = opentelemetry::Context::new().with_remote_span_context(parent);
    span.set_parent(cx).is_ok()
}

/// Links `span` to `other` (a batch's span to each of its events' traces).
pub fn add_link(span: &tracing::Span, other: SpanContext) {
    span.add_link(other);
}

/// Sets the status of `span`: an error with its description, or ok.
pub fn set_status(span: &tracing::Span, error: Option<&str>) {
    span.set_status(match error {
        Some(e) => opentelemetry::trace::Status::error(e.to_string()),
        None => opentelemetry::trace::Status::Ok,
    });
}

/// Names the partition of a partitioned topic's stream the span's message is in
/// (`messaging.destination.partition.id`, OpenTelemetry's messaging conventions).
pub fn set_partition(span: &tracing::Span, partition: u32) {
    span.set_attribute("messaging.destination.partition.id", partition.to_string());
}

/// Marks `span` failed: its error status with `message`, and `error.type`, the failure's
/// class of low cardinality (OpenTelemetry's convention), by which failures can be grouped.
pub fn set_error(span: &tracing::Span, error_type: &'static str, message: &str) {
    span.set_attribute("error.type", error_type);
    set_status(span, Some(message));
}

/// The `traceparent` of `span` for the next hop; `None` when no OpenTelemetry layer records
/// it (its context is then invalid).
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let cx = span.context();
    let context = cx.span().span_context().clone();
    context.is_valid().then(|| format(&context))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_reads_back_as_written() {
        let context = parse(GOOD, Some("congo=t61rcWkgMzE")).expect("valid");
        assert!(context.is_remote() && context.is_sampled());
        assert_eq!(format(&context), GOOD);
        assert_eq!(context.trace_state().get("congo"), Some("t61rcWkgMzE"));
        let unsampled = GOOD.replace("-01", "-00");
        assert_eq!(format(&parse(&unsampled, None).expect("valid")), unsampled);
    }

    #[test]
    fn malformed_or_empty_traceparents_name_no_parent() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        ] {
            assert!(parse(bad, None).is_none(), "{bad:?}");
        }
        // A later version may carry more fields; its first four are read as version 00's.
        assert!(parse(&format!("01{}-more", &GOOD[2..]), None).is_some());
    }

    #[test]
    fn headers_without_a_string_traceparent_have_no_context() {
        assert!(from_headers(&serde_json::json!({})).is_none());
        assert!(from_headers(&serde_json::json!({"traceparent": 7})).is_none());
        assert!(from_headers(&serde_json::json!({"traceparent": GOOD})).is_some());
    }

    #[test]
    fn without_an_opentelemetry_layer_a_span_has_no_traceparent() {
        let span = tracing::info_span!("publish");
        assert!(traceparent_of(&span).is_none());
        assert!(!set_parent(&span, parse(GOOD, None).expect("valid")));
    }
}
