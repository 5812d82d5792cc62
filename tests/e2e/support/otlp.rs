//! An OTLP receiver of the test's own: a real server on a free port that takes traces as the
//! OpenTelemetry exporters send them, over HTTP (`POST /v1/traces`, protobuf) or gRPC
//! (`TraceService/Export` over HTTP/2, the gRPC framing done here), plain or over TLS with a
//! certificate from the test's CA; it decodes every request with the protocol's own message
//! types and keeps the spans for the test to look at.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;

use super::Issued;

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
    https: bool,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    requests: Arc<Mutex<Vec<String>>>,
    refused: Arc<Mutex<Vec<String>>>,
    server: tokio::task::JoinHandle<()>,
}

/// What a receiver speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// OTLP/HTTP, HTTP/1.1.
    Http,
    /// OTLP/gRPC, HTTP/2.
    Grpc,
}

/// A TLS acceptor presenting `issued`, offering the ALPN protocol `wire` needs (gRPC clients
/// insist on `h2`).
fn acceptor(issued: &Issued, wire: Wire) -> tokio_rustls::TlsAcceptor {
    let certs = outbox_core::pem::certs_from(&issued.cert, "cert").expect("server cert");
    let key = outbox_core::pem::key_from(&issued.key, "key").expect("server key");
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server TLS config");
    config.alpn_protocols = match wire {
        Wire::Http => vec![b"http/1.1".to_vec()],
        Wire::Grpc => vec![b"h2".to_vec()],
    };
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// Serves one connection as `wire` says.
async fn serve<I, S>(wire: Wire, io: TokioIo<I>, service: S)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<
            Request<Incoming>,
            Response = Response<OtlpBody>,
            Error = Infallible,
        > + Send
        + 'static,
    S::Future: Send + 'static,
{
    let _ = match wire {
        Wire::Http => {
            hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
        }
        Wire::Grpc => {
            hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .serve_connection(io, service)
                .await
        }
    };
}

/// A response body: the data, then (gRPC) trailers.
type OtlpBody = http_body_util::StreamBody<
    futures::stream::Iter<std::vec::IntoIter<Result<hyper::body::Frame<Bytes>, Infallible>>>,
>;

fn body(frames: Vec<hyper::body::Frame<Bytes>>) -> OtlpBody {
    http_body_util::StreamBody::new(futures::stream::iter(
        frames.into_iter().map(Ok).collect::<Vec<_>>(),
    ))
}

impl OtlpReceiver {
    /// A plain OTLP/HTTP receiver.
    pub async fn start() -> OtlpReceiver {
        OtlpReceiver::start_with(Wire::Http, None).await
    }

    /// A receiver speaking `wire`, over TLS with `tls` (the server's certificate and key)
    /// when given.
    pub async fn start_with(wire: Wire, tls: Option<&Issued>) -> OtlpReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP receiver");
        let port = listener.local_addr().expect("address").port();
        let acceptor = tls.map(|issued| acceptor(issued, wire));
        let spans = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(Mutex::new(Vec::new()));
        let (kept, seen, refusals) = (spans.clone(), requests.clone(), refused.clone());
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (kept, seen) = (kept.clone(), seen.clone());
                let (acceptor, refusals) = (acceptor.clone(), refusals.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let (kept, seen) = (kept.clone(), seen.clone());
                        async move {
                            Ok::<_, Infallible>(match wire {
                                Wire::Http => receive(request, &kept, &seen).await,
                                Wire::Grpc => receive_grpc(request, &kept, &seen).await,
                            })
                        }
                    });
                    match acceptor {
                        None => serve(wire, TokioIo::new(stream), service).await,
                        Some(acceptor) => match acceptor.accept(stream).await {
                            Ok(tls) => serve(wire, TokioIo::new(tls), service).await,
                            Err(e) => refusals.lock().expect("lock").push(e.to_string()),
                        },
                    }
                });
            }
        });
        OtlpReceiver {
            port,
            https: tls.is_some(),
            spans,
            requests,
            refused,
            server,
        }
    }

    /// What `OTEL_EXPORTER_OTLP_ENDPOINT` should say (`localhost`, the name the test
    /// certificates carry, when over TLS).
    pub fn endpoint(&self) -> String {
        match self.https {
            true => format!("https://localhost:{}", self.port),
            false => format!("http://127.0.0.1:{}", self.port),
        }
    }

    /// The TLS handshakes it refused, with why (a client that does not trust its CA).
    pub fn refused(&self) -> Vec<String> {
        self.refused.lock().expect("lock").clone()
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

/// Notes `request` as `METHOD path content-type`.
fn note(request: &Request<Incoming>, seen: &Mutex<Vec<String>>) {
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
}

/// The gRPC method the trace exporters call.
const GRPC_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// One gRPC call: a length-prefixed message in, an empty response and `grpc-status` out.
async fn receive_grpc(
    request: Request<Incoming>,
    kept: &Mutex<Vec<ReceivedSpan>>,
    seen: &Mutex<Vec<String>>,
) -> Response<OtlpBody> {
    note(&request, seen);
    let status = |code: &str, data: Option<Bytes>| {
        let mut trailers = hyper::HeaderMap::new();
        trailers.insert("grpc-status", code.parse().expect("header value"));
        let mut frames: Vec<_> = data.into_iter().map(hyper::body::Frame::data).collect();
        frames.push(hyper::body::Frame::trailers(trailers));
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/grpc")
            .body(body(frames))
            .expect("response")
    };
    if request.uri().path() != GRPC_EXPORT {
        return status("12", None);
    }
    let Ok(collected) = request.into_body().collect().await else {
        return status("13", None);
    };
    let bytes = collected.to_bytes();
    // Uncompressed flag, 4 bytes of length, the message.
    let message = match bytes.as_ref() {
        [0, a, b, c, d, rest @ ..]
            if u32::from_be_bytes([*a, *b, *c, *d]) as usize == rest.len() =>
        {
            bytes.slice(5..)
        }
        _ => return status("3", None),
    };
    let Ok(export) = ExportTraceServiceRequest::decode(message) else {
        return status("3", None);
    };
    keep(export, kept);
    // An empty ExportTraceServiceResponse, framed.
    status("0", Some(Bytes::from_static(&[0, 0, 0, 0, 0])))
}

async fn receive(
    request: Request<Incoming>,
    kept: &Mutex<Vec<ReceivedSpan>>,
    seen: &Mutex<Vec<String>>,
) -> Response<OtlpBody> {
    note(&request, seen);
    let answer = |status: StatusCode| {
        Response::builder()
            .status(status)
            .header("content-type", "application/x-protobuf")
            .body(body(vec![]))
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
    keep(export, kept);
    // An empty ExportTraceServiceResponse: everything accepted.
    answer(StatusCode::OK)
}

/// Keeps the spans of one export request.
fn keep(export: ExportTraceServiceRequest, kept: &Mutex<Vec<ReceivedSpan>>) {
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
