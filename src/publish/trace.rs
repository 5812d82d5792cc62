//! Publish spans: an event whose headers hold a W3C `traceparent` is sent in a span of that
//! trace (OpenTelemetry's messaging conventions: kind producer, `messaging.destination.name`
//! the stream key), and its entry's headers carry the span's own `traceparent`, so that the
//! consumer's processing span is the publish span's child. Only while traces are exported
//! (the publisher's `PublisherConfig::traced`); otherwise no span is made and the headers go
//! out as the producer wrote them, its `traceparent` included.

use outbox_core::trace::{self, TRACEPARENT};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{Outcome, PublishError, StreamEvent};
use crate::publish::script::Reply;

/// The spans of one script call's traced events, and their rewritten headers.
#[derive(Default)]
pub(crate) struct Spans {
    /// Per event sent: its span, and its headers with the span's `traceparent`.
    traced: Vec<Option<(tracing::Span, Option<String>)>>,
}

impl Spans {
    /// Starts a span for each event of `sent` that carries a trace context, when `traced`
    /// (spans are exported).
    /// `partition`: the stream's partition of a partitioned topic.
    pub(crate) fn start(
        stream: &str,
        partition: Option<u32>,
        sent: &[(&StreamEvent, usize)],
        traced: bool,
    ) -> Spans {
        if !traced {
            return Spans::default();
        }
        let traced = sent
            .iter()
            .map(|(event, _)| start_one(stream, partition, event))
            .collect();
        Spans { traced }
    }

    /// The headers to send for event `index` of the call: rewritten when it is traced.
    pub(crate) fn headers<'a>(&'a self, index: usize, event: &'a StreamEvent) -> &'a str {
        self.rewritten(index).unwrap_or(event.headers.as_str())
    }

    /// The rewritten headers of event `index`, when it is traced.
    pub(crate) fn rewritten(&self, index: usize) -> Option<&str> {
        match self.traced.get(index) {
            Some(Some((_, Some(headers)))) => Some(headers),
            _ => None,
        }
    }

    /// Ends the spans with the call's result: an error status for an event that failed, was
    /// skipped behind its key's failure, or met an outage.
    pub(crate) fn finish(self, result: &Result<Reply, PublishError>) {
        for (index, traced) in self.traced.into_iter().enumerate() {
            let Some((span, _)) = traced else { continue };
            // `error.type`: the class of the failure, never the message (low cardinality).
            let error: Option<(&'static str, String)> = match result {
                Ok(Reply::Done(outcomes, _)) => match outcomes.get(index) {
                    Some(Outcome::Published) => None,
                    Some(Outcome::Duplicate) => {
                        span.set_attribute("outbox.duplicate", true);
                        None
                    }
                    Some(Outcome::Failed(e)) => Some(("event_refused", e.clone())),
                    Some(Outcome::Skipped) | None => Some((
                        "key_blocked",
                        "not sent: an earlier event of its key failed".to_string(),
                    )),
                },
                Ok(Reply::Behind { .. }) => Some((
                    "stream_lost_entries",
                    "not sent: the stream lost entries (see the relay's log)".to_string(),
                )),
                Err(e) => Some(("redis_unavailable", e.to_string())),
            };
            // One line inside the span, so a log pipeline finds the event's trace from it
            // (JSON lines carry the span's ids); debug: the cycle logs failures already.
            span.in_scope(|| match &error {
                Some((kind, message)) => {
                    tracing::debug!(error.type = kind, "traced event not sent: {message}")
                }
                None => tracing::debug!("traced event sent"),
            });
            match error {
                Some((kind, message)) => trace::set_error(&span, kind, &message),
                None => trace::set_status(&span, None),
            }
        }
    }
}

/// The span of one event, and its headers naming that span, if it carries a trace context.
fn start_one(
    stream: &str,
    partition: Option<u32>,
    event: &StreamEvent,
) -> Option<(tracing::Span, Option<String>)> {
    if !event.headers.contains(TRACEPARENT) {
        return None;
    }
    let context: TraceHeaders = serde_json::from_str(&event.headers).ok()?;
    let traceparent = context.traceparent?;
    let tracestate = context.tracestate.as_ref().and_then(|s| s.as_str());
    let parent = trace::parse(traceparent.as_str()?, tracestate)?;
    let span = outbox_core::messaging_span!(
        "send",
        "producer",
        stream,
        messaging.message.id = %event.id,
        outbox.topic = %event.topic,
    );
    if let Some(partition) = partition {
        trace::set_partition(&span, partition);
    }
    trace::set_parent(&span, parent.clone());
    let rewritten = trace::traceparent_of(&span)
        .and_then(|own| replace_traceparent(&event.headers, traceparent.as_str()?, &own));
    Some((span, rewritten))
}

/// The trace context of an event's headers. Only these two values are parsed (the others are
/// skipped unread), so a header holding a number no `f64` holds does not hide the context.
#[derive(serde::Deserialize)]
struct TraceHeaders {
    traceparent: Option<serde_json::Value>,
    tracestate: Option<serde_json::Value>,
}

/// `headers` (JSON text) with the value `old` of its `traceparent` replaced by `new`, the rest
/// byte for byte as the producer wrote it; `None` when the value is not spelled plainly.
fn replace_traceparent(headers: &str, old: &str, new: &str) -> Option<String> {
    let key = headers.find(&format!("\"{TRACEPARENT}\""))?;
    let quoted = format!("\"{old}\"");
    let at = key + headers[key..].find(&quoted)?;
    Some(format!(
        "{}\"{new}\"{}",
        &headers[..at],
        &headers[at + quoted.len()..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const NEW: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01";

    #[test]
    fn only_the_traceparent_value_changes() {
        let headers = format!(r#"{{"a": "{OLD}", "n": 1e400, "traceparent": "{OLD}"}}"#);
        assert_eq!(
            replace_traceparent(&headers, OLD, NEW).as_deref(),
            Some(format!(r#"{{"a": "{OLD}", "n": 1e400, "traceparent": "{NEW}"}}"#).as_str())
        );
        assert_eq!(replace_traceparent(r#"{"x": 1}"#, OLD, NEW), None);
    }

    #[test]
    fn the_context_is_read_beside_values_no_f64_holds() {
        let headers = format!(r#"{{"n": 1e400, "traceparent": "{OLD}", "tracestate": "a=b"}}"#);
        let context: TraceHeaders = serde_json::from_str(&headers).expect("parses");
        assert_eq!(context.traceparent, Some(serde_json::json!(OLD)));
        assert_eq!(context.tracestate, Some(serde_json::json!("a=b")));
    }
}
