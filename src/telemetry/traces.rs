//! Traces over OTLP/HTTP (protobuf), set up from the standard OpenTelemetry environment:
//! exported when `OTEL_EXPORTER_OTLP_ENDPOINT` (to its `/v1/traces`) or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (as it is) is set and `OTEL_TRACES_EXPORTER` is not
//! `none`; the resource's `service.name` is `OTEL_SERVICE_NAME` or the program's default, with
//! `OTEL_RESOURCE_ATTRIBUTES` beside it; `OTEL_EXPORTER_OTLP_HEADERS`, `..._TIMEOUT` and the
//! batch processor's `OTEL_BSP_*` are read by the SDK itself.
//!
//! Only spans of target [`outbox_core::trace::TARGET`] are exported (the publish spans here,
//! the processing spans of the consumer library), whatever `RUST_LOG` lets through to the
//! logs. While nothing is exported ([`Exporting::is_active`] is false) the relay makes no span
//! at all: the publisher is told so in its configuration.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Subscriber;
use tracing_subscriber::filter::{Filtered, Targets};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("OTLP trace exporter: {0}")]
pub struct TracesError(String);

/// Keeps the exporter until the program ends: dropping it sends the spans still queued.
#[must_use = "dropping it stops the export"]
pub struct Exporting(Option<SdkTracerProvider>);

impl Exporting {
    /// Nothing exported.
    pub fn none() -> Exporting {
        Exporting(None)
    }

    /// Whether spans are exported (so worth making).
    pub fn is_active(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for Exporting {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take() {
            if let Err(e) = provider.shutdown() {
                eprintln!("traces: the last spans could not be sent: {e}");
            }
        }
    }
}

/// The environment's variable `name`, unless unset or blank.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether the environment asks for traces.
pub fn configured() -> bool {
    let off = var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
    let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
        || var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
    endpoint && !off
}

/// The OpenTelemetry layer of the subscriber (exported targets only) and the exporter's keeper,
/// when the environment asks for traces; `service` is the default `service.name`.
#[allow(clippy::type_complexity)]
pub fn layer<S>(
    service: &str,
) -> Result<
    (
        Option<
            Filtered<
                tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>,
                Targets,
                S,
            >,
        >,
        Exporting,
    ),
    TracesError,
>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    if !configured() {
        return Ok((None, Exporting::none()));
    }
    let exporter = SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|e| TracesError(e.to_string()))?;
    let name = var("OTEL_SERVICE_NAME").unwrap_or_else(|| service.to_string());
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(name).build())
        .build();
    let tracer = provider.tracer(env!("CARGO_PKG_NAME"));
    let only_ours = Targets::new().with_target(outbox_core::trace::TARGET, tracing::Level::TRACE);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(only_ours);
    Ok((Some(layer), Exporting(Some(provider))))
}
