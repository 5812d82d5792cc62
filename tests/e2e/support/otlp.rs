//! An OTLP/HTTP receiver of the test's own: a real HTTP server on a free port that takes
//! `POST /v1/traces` as the OpenTelemetry exporters send it (protobuf), decodes every request
//! with the protocol's own message types, and keeps the spans for the test to look at.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;

/// One span as received, ids in lowercase hex (empty parent: a root span).
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// The resource's `service.name`.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    /// OTLP's `SpanKind`: 4 producer, 5 consumer.
    pub kind: i32,
    pub attributes: HashMap<String, String>,
    /// Linked spans: (trace id, span id).
    pub links: Vec<(String, String)>,
    /// OTLP's status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
}

/// OTLP's `SpanKind` of a publish span.
pub const PRODUCER_KIND: i32 = 4;
/// OTLP's `SpanKind` of a processing span.
pub const CONSUMER_KIND: i32 = 5;

pub struct OtlpReceiver {
    pub port: u16,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    requests: Arc<Mutex<Vec<String>>>,
    server: tokio::task::JoinHandle<()>,
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP receiver");
        let port = listener.local_addr().expect("address").port();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (kept, seen) = (spans.clone(), requests.clone());
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (kept, seen) = (kept.clone(), seen.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let (kept, seen) = (kept.clone(), seen.clone());
                        async move { Ok::<_, Infallible>(receive(request, &kept, &seen).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        OtlpReceiver {
            port,
            spans,
            requests,
            server,
        }
    }

    /// What `OTEL_EXPORTER_OTLP_ENDPOINT` should say.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The environment of a process that exports its spans here within 100 ms of their end.
    pub fn env(&self) -> [(&'static str, String); 2] {
        [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", self.endpoint()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_string()),
        ]
    }

    /// A test relay's settings ([`super::base_env`]) exporting its spans here.
    pub fn relay_env(&self, db: &super::TestDb, redis: &super::TestRedis) -> Vec<(String, String)> {
        let mut env = super::base_env(db, redis);
        env.extend(self.env().map(|(k, v)| (k.to_string(), v)));
        env
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().expect("lock").clone()
    }

    /// The first span received that `which` accepts, waited for up to 30 s.
    pub async fn span(&self, which: impl Fn(&ReceivedSpan) -> bool) -> ReceivedSpan {
        super::eventually(Duration::from_secs(30), "such a span", || {
            let found = self.spans().into_iter().find(|s| which(s));
            async move { found }
        })
        .await
    }

    /// Each request as `METHOD path content-type`.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().expect("lock").clone()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn receive(
    request: Request<Incoming>,
    kept: &Mutex<Vec<ReceivedSpan>>,
    seen: &Mutex<Vec<String>>,
) -> Response<Full<Bytes>> {
    let content_type = request
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let line = format!(
        "{} {} {content_type}",
        request.method(),
        request.uri().path()
    );
    seen.lock().expect("lock").push(line);
    let answer = |status: StatusCode| {
        Response::builder()
            .status(status)
            .header("content-type", "application/x-protobuf")
            .body(Full::new(Bytes::new()))
            .expect("response")
    };
    if request.method() != hyper::Method::POST || request.uri().path() != "/v1/traces" {
        return answer(StatusCode::NOT_FOUND);
    }
    let Ok(body) = request.into_body().collect().await else {
        return answer(StatusCode::BAD_REQUEST);
    };
    let Ok(export) = ExportTraceServiceRequest::decode(body.to_bytes()) else {
        return answer(StatusCode::BAD_REQUEST);
    };
    let mut kept = kept.lock().expect("lock");
    for resource_spans in export.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|r| attribute(&r.attributes, "service.name"))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                kept.push(ReceivedSpan {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    kind: span.kind,
                    attributes: span
                        .attributes
                        .iter()
                        .filter_map(|kv| Some((kv.key.clone(), text(kv)?)))
                        .collect(),
                    links: span
                        .links
                        .iter()
                        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                        .collect(),
                    status: span.status.map(|s| s.code).unwrap_or(0),
                });
            }
        }
    }
    // An empty ExportTraceServiceResponse: everything accepted.
    answer(StatusCode::OK)
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes.iter().find(|kv| kv.key == key).and_then(text)
}

/// An attribute's value as text (strings as they are, numbers and booleans printed).
fn text(kv: &KeyValue) -> Option<String> {
    match kv.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        Value::IntValue(i) => Some(i.to_string()),
        Value::BoolValue(b) => Some(b.to_string()),
        Value::DoubleValue(d) => Some(d.to_string()),
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
