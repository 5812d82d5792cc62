//! Traces over OTLP, set up from the standard OpenTelemetry environment: exported when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (HTTP: to its `/v1/traces`) or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (as it is) is set and `OTEL_TRACES_EXPORTER` is not
//! `none`; over HTTP with protobuf, or gRPC when `OTEL_EXPORTER_OTLP_PROTOCOL` (or
//! `..._TRACES_PROTOCOL`) is `grpc`; to an `https://` endpoint with the system's CAs, or those
//! of the PEM file `OTEL_EXPORTER_OTLP_CERTIFICATE` (or `..._TRACES_CERTIFICATE`). The
//! resource's `service.name` is `OTEL_SERVICE_NAME` or the program's default, with
//! `OTEL_RESOURCE_ATTRIBUTES` beside it; `OTEL_EXPORTER_OTLP_HEADERS`, `..._TIMEOUT` and the
//! batch processor's `OTEL_BSP_*` are read by the SDK itself.
//!
//! Only spans of target [`outbox_core::trace::TARGET`] are exported (the publish spans here,
//! the processing spans of the consumer library), whatever `RUST_LOG` lets through to the
//! logs. While nothing is exported ([`Exporting::is_active`] is false) the relay makes no span
//! at all: the publisher is told so in its configuration.

use std::path::PathBuf;
use std::sync::Arc;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};
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

/// Keeps the exporter until the program ends: dropping it sends the spans still queued (then
/// stops the gRPC exporter's runtime, if any).
#[must_use = "dropping it stops the export"]
pub struct Exporting(Option<SdkTracerProvider>, Option<tokio::runtime::Runtime>);

impl Exporting {
    /// Nothing exported.
    pub fn none() -> Exporting {
        Exporting(None, None)
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
        if let Some(runtime) = self.1.take() {
            runtime.shutdown_background();
        }
    }
}

/// The OTLP transport the environment asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    /// `http/protobuf`, the default.
    HttpProtobuf,
    /// `grpc`.
    Grpc,
}

/// `OTEL_EXPORTER_OTLP_TRACES_<name>`, else `OTEL_EXPORTER_OTLP_<name>`.
fn otlp_var(name: &str) -> Option<(String, String)> {
    [
        format!("OTEL_EXPORTER_OTLP_TRACES_{name}"),
        format!("OTEL_EXPORTER_OTLP_{name}"),
    ]
    .into_iter()
    .find_map(|var_name| var(&var_name).map(|value| (var_name, value)))
}

fn transport() -> Result<Transport, TracesError> {
    match otlp_var("PROTOCOL") {
        None => Ok(Transport::HttpProtobuf),
        Some((_, v)) if v.trim() == "http/protobuf" => Ok(Transport::HttpProtobuf),
        Some((_, v)) if v.trim() == "grpc" => Ok(Transport::Grpc),
        Some((name, v)) => Err(TracesError(format!(
            "{name} = {v:?} is not supported: http/protobuf or grpc"
        ))),
    }
}

/// The CA file of `OTEL_EXPORTER_OTLP_CERTIFICATE`, if set: (variable, path).
fn certificate() -> Option<(String, PathBuf)> {
    otlp_var("CERTIFICATE").map(|(name, path)| (name, PathBuf::from(path)))
}

/// The rustls configuration of an HTTPS export: the CAs of the certificate file, or the
/// system's.
fn client_config() -> Result<rustls::ClientConfig, TracesError> {
    let roots = match certificate() {
        Some((name, path)) => {
            outbox_core::pem::roots_from(&path, &name).map_err(|e| TracesError(e.to_string()))?
        }
        None => crate::pgurl::system_roots("OTEL_EXPORTER_OTLP_CERTIFICATE")
            .map_err(|e| TracesError(e.to_string()))?,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TracesError(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// The HTTP exporter, its client on our TLS configuration. The blocking client is built on a
/// thread of its own: building one inside an async runtime panics.
fn http_exporter() -> Result<SpanExporter, TracesError> {
    let tls = client_config()?;
    let client = std::thread::spawn(move || {
        reqwest::blocking::Client::builder()
            .tls_backend_preconfigured(tls)
            .build()
    })
    .join()
    .map_err(|_| TracesError("the HTTP client's thread panicked".into()))?
    .map_err(|e| TracesError(e.to_string()))?;
    SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_http_client(client)
        .build()
        .map_err(|e| TracesError(e.to_string()))
}

/// The gRPC exporter, built and driven on `runtime`: tonic's channel needs a Tokio runtime,
/// and the SDK's batch processor exports from a plain thread.
fn grpc_exporter(runtime: &tokio::runtime::Runtime) -> Result<OnRuntime, TracesError> {
    use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig};
    use opentelemetry_otlp::WithTonicConfig;
    let tls = match certificate() {
        Some((name, path)) => {
            let pem = std::fs::read(&path)
                .map_err(|e| TracesError(format!("{name} {}: {e}", path.display())))?;
            ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem))
        }
        None => ClientTlsConfig::new().with_enabled_roots(),
    };
    let https = otlp_var("ENDPOINT").is_some_and(|(_, e)| e.trim().starts_with("https://"));
    let _entered = runtime.enter();
    let builder = SpanExporter::builder().with_tonic();
    let builder = if https {
        builder.with_tls_config(tls)
    } else {
        builder
    };
    let inner = builder.build().map_err(|e| TracesError(e.to_string()))?;
    Ok(OnRuntime {
        inner,
        runtime: runtime.handle().clone(),
    })
}

/// An exporter whose exports run on a Tokio runtime of its own (the gRPC one).
#[derive(Debug)]
struct OnRuntime {
    inner: SpanExporter,
    runtime: tokio::runtime::Handle,
}

impl opentelemetry_sdk::trace::SpanExporter for OnRuntime {
    fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> impl std::future::Future<Output = opentelemetry_sdk::error::OTelSdkResult> + Send {
        let export = self.inner.export(batch);
        let runtime = self.runtime.clone();
        // The batch processor's thread is not a runtime's: blocking on ours is allowed.
        async move { runtime.block_on(export) }
    }

    fn shutdown_with_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
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
    let name = var("OTEL_SERVICE_NAME").unwrap_or_else(|| service.to_string());
    let provider = SdkTracerProvider::builder()
        .with_resource(Resource::builder().with_service_name(name).build());
    let (provider, runtime) = match transport()? {
        Transport::HttpProtobuf => (provider.with_batch_exporter(http_exporter()?), None),
        Transport::Grpc => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("otlp-grpc")
                .enable_all()
                .build()
                .map_err(|e| TracesError(format!("the gRPC exporter's runtime: {e}")))?;
            let exporter = grpc_exporter(&runtime)?;
            (provider.with_batch_exporter(exporter), Some(runtime))
        }
    };
    let provider = provider.build();
    let tracer = provider.tracer(env!("CARGO_PKG_NAME"));
    let only_ours = Targets::new().with_target(outbox_core::trace::TARGET, tracing::Level::TRACE);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(only_ours);
    Ok((Some(layer), Exporting(Some(provider), runtime)))
}
