//! Traces over OTLP/HTTP into a receiver of the test's own: a producer's `traceparent` is the
//! parent of the relay's publish span, the stream entry names that span, and the example
//! consumer processes the entry in a child span of it; the Rust producer API writes the
//! caller's trace context into the event.

use std::time::Duration;

use crate::support::*;

const PRODUCER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_SPAN: &str = "00f067aa0ba902b7";
/// The trace of a later event whose spans show that the earlier ones' spans have arrived.
const MARKER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";

/// The `traceparent` value in an entry's headers (JSON text).
fn traceparent_in(headers: &str) -> Option<String> {
    let headers: serde_json::Value = serde_json::from_str(headers).ok()?;
    headers.get("traceparent")?.as_str().map(str::to_string)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_producers_trace_runs_through_the_publish_span_to_the_consumers_span() {
    let receiver = OtlpReceiver::start().await;
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let otel = receiver.env();
    let mut env = receiver.relay_env(&db, &redis);
    env.push(("OTEL_SERVICE_NAME".into(), "relay-under-test".into()));
    let _relay = RelayProc::spawn("traces", &env);
    // A traced event (with a vendor's tracestate, and a number an f64 would round beside
    // it), an untraced one, and one whose traceparent is malformed, all of one key.
    db.exec(&format!(
        "INSERT INTO outbox (topic, payload, partition_key, headers) VALUES
         ('t0', '{{\"n\": 1}}', 'k', '{{\"traceparent\": \"00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01\", \"tracestate\": \"congo=t61rcWkgMzE\", \"big\": 12345678901234567890123}}'),
         ('t0', '{{\"n\": 2}}', 'k', '{{}}'),
         ('t0', '{{\"n\": 3}}', 'k', '{{\"traceparent\": \"00-zz-00f067aa0ba902b7-01\"}}')"
    ))
    .await;
    wait_until(Duration::from_secs(30), || async {
        match redis.xlen("t0").await {
            3 => Ok(()),
            n => Err(format!("{n} of 3 published")),
        }
    })
    .await;
    let entries = redis.entries("t0").await;
    let traced = &entries[0];
    let published = traceparent_in(&traced["headers"])
        .unwrap_or_else(|| panic!("the entry names a span: {entries:?}"));
    let parts: Vec<&str> = published.split('-').collect();
    assert_eq!(parts.len(), 4, "{published}");
    assert_eq!(
        parts[1], PRODUCER_TRACE,
        "the entry stays in the producer's trace"
    );
    assert_ne!(
        parts[2], PRODUCER_SPAN,
        "the entry names the publish span, not the producer's"
    );
    let headers: serde_json::Value = serde_json::from_str(&traced["headers"]).expect("headers");
    assert_eq!(headers["tracestate"], "congo=t61rcWkgMzE");
    assert!(
        traced["headers"].contains("12345678901234567890123"),
        "the other headers as written: {}",
        traced["headers"]
    );
    assert_eq!(entries[1]["headers"], "{}");
    assert_eq!(
        traceparent_in(&entries[2]["headers"]).as_deref(),
        Some("00-zz-00f067aa0ba902b7-01"),
        "a malformed traceparent is passed through untouched"
    );
    let stream = redis.stream("t0");
    let publish = receiver.span(|s| s.kind == PRODUCER_KIND).await;
    assert_eq!(publish.service, "relay-under-test");
    assert_eq!(publish.trace_id, PRODUCER_TRACE);
    assert_eq!(publish.parent_span_id, PRODUCER_SPAN);
    assert_eq!(publish.span_id, parts[2], "the entry names this very span");
    assert_eq!(publish.name, format!("send {stream}"));
    assert_eq!(publish.attributes["messaging.destination.name"], stream);
    assert_eq!(publish.attributes["messaging.system"], "redis");
    assert_eq!(publish.attributes["messaging.operation.type"], "send");
    assert_eq!(publish.attributes["messaging.message.id"], traced["id"]);
    assert_eq!(publish.status, 1, "published: ok");

    // The example consumer, exporting to the same receiver.
    let otel_env: Vec<(&str, &str)> = otel.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let _consumer =
        ExampleConsumer::spawn_with_env(&db, &redis, "t0", "traced", "c0", &[], &otel_env);
    let process = receiver.span(|s| s.kind == CONSUMER_KIND).await;
    assert_eq!(process.service, "inbox-consumer");
    assert_eq!(process.trace_id, PRODUCER_TRACE);
    assert_eq!(
        process.parent_span_id, publish.span_id,
        "processed in a child of the publish span"
    );
    assert_eq!(process.name, format!("process {stream}"));
    assert_eq!(
        process.attributes["messaging.consumer.group.name"],
        "traced"
    );
    assert_eq!(process.attributes["messaging.message.id"], traced["id"]);
    // The untraced events were processed too, in spans of traces of their own.
    wait_until(Duration::from_secs(30), || async {
        match db.scalar("SELECT count(*) FROM example_effects").await {
            3 => Ok(()),
            n => Err(format!("{n} of 3 effects")),
        }
    })
    .await;
    // A later traced event of the same key: each process exports its spans in the order they
    // end, so once the marker's publish and process spans are in, every span the three
    // earlier events had (or should not have had) is in too.
    db.exec(&format!(
        "INSERT INTO outbox (topic, payload, partition_key, headers) VALUES
         ('t0', '{{\"n\": 4}}', 'k', '{{\"traceparent\": \"00-{MARKER_TRACE}-b7ad6b7169203331-01\"}}')"
    ))
    .await;
    receiver
        .span(|s| s.kind == PRODUCER_KIND && s.trace_id == MARKER_TRACE)
        .await;
    receiver
        .span(|s| s.kind == CONSUMER_KIND && s.trace_id == MARKER_TRACE)
        .await;
    let spans: Vec<ReceivedSpan> = receiver
        .spans()
        .into_iter()
        .filter(|s| s.trace_id != MARKER_TRACE)
        .collect();
    let publishes: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.kind == PRODUCER_KIND).collect();
    assert_eq!(
        publishes.len(),
        1,
        "only the traced event has a publish span"
    );
    let processed: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.kind == CONSUMER_KIND).collect();
    assert_eq!(
        processed.len(),
        3,
        "each event processed in a span: {processed:?}"
    );
    assert!(processed
        .iter()
        .all(|s| s.trace_id == PRODUCER_TRACE || s.parent_span_id.is_empty()));
    assert!(receiver
        .requests()
        .iter()
        .all(|r| r == "POST /v1/traces application/x-protobuf"));
}

/// `enqueue` inside a span recorded by OpenTelemetry (an SDK tracer, no exporter needed) writes
/// that span's `traceparent`; an event naming its own keeps it; outside any span nothing is
/// added.
#[tokio::test(flavor = "multi_thread")]
async fn the_rust_producer_api_writes_the_callers_trace_context() {
    use opentelemetry::trace::TracerProvider as _;
    use outbox_relay::producer::{enqueue, NewEvent};
    use tracing_subscriber::layer::SubscriberExt;

    let db = TestDb::new().await;
    let url = db.url.clone();
    let (expected, own) = std::thread::spawn(move || {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let _default = tracing::subscriber::set_default(subscriber);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            use diesel_async::AsyncConnection;
            let mut conn = diesel_async::AsyncPgConnection::establish(&url)
                .await
                .expect("connect");
            let span = tracing::info_span!("checkout");
            let expected = outbox_core::trace::traceparent_of(&span).expect("recorded");
            let own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
            tracing::Instrument::instrument(
                async {
                    enqueue(&mut conn, &NewEvent::new("t0", serde_json::json!({"n": 1})))
                        .await
                        .expect("enqueue");
                    let mine = NewEvent::new("t0", serde_json::json!({"n": 2}))
                        .headers(serde_json::json!({"traceparent": own}));
                    enqueue(&mut conn, &mine).await.expect("enqueue");
                },
                span,
            )
            .await;
            enqueue(&mut conn, &NewEvent::new("t0", serde_json::json!({"n": 3})))
                .await
                .expect("enqueue");
            (expected, own.to_string())
        })
    })
    .join()
    .expect("producer thread");
    let headers = |n: i64| {
        let db = &db;
        async move {
            db.text(&format!(
                "SELECT headers::text FROM outbox WHERE payload->>'n' = '{n}'"
            ))
            .await
        }
    };
    assert_eq!(
        traceparent_in(&headers(1).await).as_deref(),
        Some(expected.as_str())
    );
    assert_eq!(traceparent_in(&headers(2).await), Some(own));
    assert_eq!(headers(3).await, "{}");
}

/// `POST /api/v1/events` from an instrumented HTTP client: the request's `traceparent` (and
/// `tracestate`) become the event's, unless its headers name one; an invalid one is ignored; a
/// retry with the same `Idempotency-Key` and a new span is the same request.
#[tokio::test(flavor = "multi_thread")]
async fn an_api_producers_request_trace_context_goes_into_the_event() {
    let api = TokenRelay::start("traces-api", &[]).await;
    let admin = api.admin();
    let first = format!("00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01");
    let retry = format!("00-{PRODUCER_TRACE}-1111111111111111-01");
    let traced = admin
        .with("traceparent", &first)
        .with("tracestate", "congo=t61rcWkgMzE")
        .with("Idempotency-Key", "trace-1");
    let created = traced.post(
        "/api/v1/events",
        Some(r#"{"topic":"t0","payload":{"n":1}}"#),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.json["id"].as_str().expect("id").to_string();
    let again = admin
        .with("traceparent", &retry)
        .with("Idempotency-Key", "trace-1")
        .post(
            "/api/v1/events",
            Some(r#"{"topic":"t0","payload":{"n":1}}"#),
        );
    assert_eq!(again.status, 200, "a retry with a new span: {}", again.body);
    assert_eq!(again.json["id"], id.as_str());
    let own = admin.with("traceparent", &first).post(
        "/api/v1/events",
        Some(r#"{"topic":"t0","payload":{"n":2},"headers":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}"#),
    );
    assert_eq!(own.status, 201, "{}", own.body);
    let bad = admin.with("traceparent", "00-nonsense").post(
        "/api/v1/events",
        Some(r#"{"topic":"t0","payload":{"n":3}}"#),
    );
    assert_eq!(
        bad.status, 201,
        "an invalid traceparent is ignored: {}",
        bad.body
    );
    let headers = |n: i64| {
        let db = &api.db;
        async move {
            let text = db
                .text(&format!(
                    "SELECT headers::text FROM outbox WHERE payload->>'n' = '{n}'"
                ))
                .await;
            serde_json::from_str::<serde_json::Value>(&text).expect("headers")
        }
    };
    assert_eq!(
        headers(1).await,
        serde_json::json!({"traceparent": first, "tracestate": "congo=t61rcWkgMzE"})
    );
    assert_eq!(
        headers(2).await["traceparent"],
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    );
    assert_eq!(headers(3).await, serde_json::json!({}));
    assert_eq!(
        api.db.scalar("SELECT count(*) FROM outbox").await,
        3,
        "the retry stored nothing"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn spans_name_their_partition_and_failure_class_and_json_lines_their_trace() {
    let receiver = OtlpReceiver::start().await;
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let mut env = receiver.relay_env(&db, &redis);
    env.push(("OUTBOX__TOPICS".into(), "t0:4".into()));
    env.push(("OUTBOX__LOG__FORMAT".into(), "json".into()));
    env.push(("OUTBOX__RETRY__MAX_ATTEMPTS".into(), "1".into()));
    env.retain(|(k, _)| k != "RUST_LOG");
    env.push(("RUST_LOG".into(), "warn,outbox_relay::publish=debug".into()));
    // Topic `bad`'s stream key holds a string: each XADD of its events is refused.
    let mut c = redis.conn().await;
    let _: () = redis::AsyncCommands::set(&mut c, redis.stream("bad"), "not a stream")
        .await
        .expect("set");
    let relay = RelayProc::spawn("trace-attributes", &env);
    let bad_trace = "5bf92f3577b34da6a3ce929d0e0e4736";
    db.exec(&format!(
        "INSERT INTO outbox (topic, payload, partition_key, headers) VALUES
         ('t0', '{{\"n\": 1}}', 'k7', '{{\"traceparent\": \"00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01\"}}'),
         ('bad', '{{\"n\": 2}}', 'k7', '{{\"traceparent\": \"00-{bad_trace}-{PRODUCER_SPAN}-01\"}}')"
    ))
    .await;
    let partition = outbox_core::partition::for_key("k7", 4);
    let sent = receiver
        .span(|s| s.kind == PRODUCER_KIND && s.trace_id == PRODUCER_TRACE)
        .await;
    assert_eq!(
        sent.attributes["messaging.destination.partition.id"],
        partition.to_string()
    );
    assert_eq!(
        sent.attributes["messaging.destination.name"],
        redis.stream(&format!("t0:{partition}"))
    );
    assert_eq!(sent.status, 1);
    assert!(!sent.attributes.contains_key("error.type"));
    let refused = receiver
        .span(|s| s.kind == PRODUCER_KIND && s.trace_id == bad_trace)
        .await;
    assert_eq!(refused.status, 2, "failed: error status");
    assert_eq!(refused.attributes["error.type"], "event_refused");
    assert!(
        !refused
            .attributes
            .contains_key("messaging.destination.partition.id"),
        "topic bad has one stream"
    );

    // The JSON lines logged inside those spans name them.
    let lines = eventually(Duration::from_secs(20), "both spans' log lines", || async {
        let lines: Vec<serde_json::Value> = relay
            .log()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|l: &serde_json::Value| l.get("trace_id").is_some())
            .collect();
        match lines.len() {
            n if n >= 2 => Ok(lines),
            n => Err(format!("{n} lines with a trace_id:\n{}", relay.log())),
        }
    })
    .await;
    let line_of = |trace: &str| {
        lines
            .iter()
            .find(|l| l["trace_id"] == trace)
            .unwrap_or_else(|| panic!("no line of trace {trace}: {lines:?}"))
            .clone()
    };
    let ok = line_of(PRODUCER_TRACE);
    assert_eq!(ok["span_id"], sent.span_id.as_str(), "{ok}");
    assert!(
        ok["message"]
            .as_str()
            .is_some_and(|m| m.contains("traced event sent")),
        "{ok}"
    );
    let bad = line_of(bad_trace);
    assert_eq!(bad["span_id"], refused.span_id.as_str(), "{bad}");
    assert_eq!(bad["error.type"], "event_refused", "{bad}");
    assert!(
        relay
            .log()
            .lines()
            .filter(|l| !l.contains("traced event"))
            .all(|l| !l.contains("\"trace_id\"")),
        "lines outside a traced span carry no trace id"
    );
}

/// A relay exporting to `receiver` with `extra` OpenTelemetry settings, and one traced event
/// of trace `trace` published; returns the relay once the event is in its stream.
async fn traced_relay(
    name: &str,
    receiver: &OtlpReceiver,
    extra: &[(&str, &str)],
    trace: &str,
) -> (RelayProc, TestDb) {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let mut env = receiver.relay_env(&db, &redis);
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let relay = RelayProc::spawn(name, &env);
    db.exec(&format!(
        "INSERT INTO outbox (topic, payload, headers) VALUES
         ('t0', '{{}}', '{{\"traceparent\": \"00-{trace}-{PRODUCER_SPAN}-01\"}}')"
    ))
    .await;
    db.wait_until_published(Duration::from_secs(30)).await;
    (relay, db)
}

#[tokio::test(flavor = "multi_thread")]
async fn traces_reach_a_tls_collector_over_https_or_grpc_trusting_the_named_ca_only() {
    let ca = TestCa::new("otlp-ca");
    let cert = ca.server("otlp", "localhost");
    let ca_file = ca.cert.display().to_string();
    let trusted = [("OTEL_EXPORTER_OTLP_CERTIFICATE", ca_file.as_str())];

    // OTLP/HTTP over TLS.
    let https = OtlpReceiver::start_with(Wire::Http, Some(&cert)).await;
    let (_relay, _db) = traced_relay("otlp-https", &https, &trusted, PRODUCER_TRACE).await;
    let span = https.span(|s| s.trace_id == PRODUCER_TRACE).await;
    assert_eq!(span.kind, PRODUCER_KIND);
    assert!(https
        .requests()
        .iter()
        .all(|r| r == "POST /v1/traces application/x-protobuf"));

    // OTLP/gRPC over TLS, and over plain HTTP/2.
    let grpc = [("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")];
    for tls in [true, false] {
        let receiver = OtlpReceiver::start_with(Wire::Grpc, tls.then_some(&cert)).await;
        let mut extra = grpc.to_vec();
        if tls {
            extra.extend(trusted);
        }
        let trace = if tls {
            MARKER_TRACE
        } else {
            "1af7651916cd43dd8448eb211c80319c"
        };
        let (_relay, _db) = traced_relay("otlp-grpc", &receiver, &extra, trace).await;
        let span = receiver.span(|s| s.trace_id == trace).await;
        assert_eq!(span.kind, PRODUCER_KIND, "tls {tls}");
        assert!(
            receiver.requests().iter().all(|r| r
                == "POST /opentelemetry.proto.collector.trace.v1.TraceService/Export application/grpc"),
            "{:?}",
            receiver.requests()
        );
    }

    // Without the certificate, the system's CAs do not know the test's: the collector is
    // refused at the handshake, no span is sent, and the relay publishes all the same.
    let stranger = OtlpReceiver::start_with(Wire::Http, Some(&cert)).await;
    let other_trace = "2af7651916cd43dd8448eb211c80319c";
    let (_relay, db) = traced_relay("otlp-untrusted", &stranger, &[], other_trace).await;
    eventually(Duration::from_secs(20), "a refused handshake", || async {
        match stranger.refused().len() {
            0 => Err("none yet".to_string()),
            _ => Ok(()),
        }
    })
    .await;
    assert!(stranger.spans().is_empty(), "{:?}", stranger.spans());
    assert!(stranger.requests().is_empty());
    assert_eq!(db.pending().await, 0);
}

#[test]
fn an_unknown_otlp_protocol_is_refused_naming_the_variable() {
    let out = std::process::Command::new(BIN)
        .arg("run")
        .env_clear()
        .env("DATABASE_URL", "postgres://postgres@127.0.0.1:1/none")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .output()
        .expect("run the relay");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && stderr.contains("http/json"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_handling_span_has_its_error_type_and_its_partition() {
    let receiver = OtlpReceiver::start().await;
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let mut env = receiver.relay_env(&db, &redis);
    env.push(("OUTBOX__TOPICS".into(), "t0:2".into()));
    let _relay = RelayProc::spawn("traces-poison", &env);
    db.exec(&format!(
        "INSERT INTO outbox (topic, payload, partition_key, headers) VALUES
         ('t0', '{{\"poison\": true}}', 'k3', '{{\"traceparent\": \"00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01\"}}')"
    ))
    .await;
    db.wait_until_published(Duration::from_secs(30)).await;
    let otel = receiver.env();
    let otel_env: Vec<(&str, &str)> = otel.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let _consumer = ExampleConsumer::spawn_with_env(
        &db,
        &redis,
        "t0",
        "traced",
        "c0",
        &["--max-deliveries", "1"],
        &otel_env,
    );
    let failed = receiver
        .span(|s| s.kind == CONSUMER_KIND && s.trace_id == PRODUCER_TRACE)
        .await;
    assert_eq!(failed.status, 2, "the handler failed: error status");
    assert_eq!(failed.attributes["error.type"], "handler_failed");
    assert_eq!(
        failed.attributes["messaging.destination.partition.id"],
        outbox_core::partition::for_key("k3", 2).to_string()
    );
}
