//! Connections to Postgres, plain or over TLS, as the URL asks ([`crate::pgurl`] reads it
//! with libpq's meaning of `sslmode`, `sslrootcert`, `sslcert` and `sslkey`). A server that
//! fails verification is never sent a byte of a query: the handshake fails and the connection
//! error says why.

use diesel::ConnectionError;
use diesel_async::AsyncPgConnection;
use tokio_postgres::config::SslMode;

use super::pooler::SessionMode;
use crate::pgurl::{Target, TlsMode};

/// Opens a dedicated connection to `url`, a session of its own (migrations, the benchmark);
/// see [`Target`].
pub async fn connect(url: &str) -> Result<AsyncPgConnection, ConnectionError> {
    connect_in(url, SessionMode::Direct).await
}

/// Opens a connection to `url` for a pool whose connections are in `mode`.
pub async fn connect_in(
    url: &str,
    mode: SessionMode,
) -> Result<AsyncPgConnection, ConnectionError> {
    let target = Target::parse(url).map_err(|e| ConnectionError::InvalidConnectionUrl(e.0))?;
    open(&target, mode).await
}

/// Opens a connection as `target` says (adopted as `mode` requires); its driver task runs on
/// the current runtime.
pub async fn open(
    target: &Target,
    mode: SessionMode,
) -> Result<AsyncPgConnection, ConnectionError> {
    let bad = |e: tokio_postgres::Error| ConnectionError::BadConnection(tls_reason(&e));
    if target.mode() == TlsMode::Disable {
        let (client, conn) = target
            .config()
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(bad)?;
        return super::pooler::adopt(client, conn, mode).await;
    }
    let tls = target
        .client_config()
        .map_err(|e| ConnectionError::BadConnection(e.0))?;
    let mut config = target.config().clone();
    config.ssl_mode(if target.mode() == TlsMode::Prefer {
        SslMode::Prefer
    } else {
        SslMode::Require
    });
    let connector = tokio_postgres_rustls::MakeRustlsConnect::new(tls);
    let (client, conn) = config.connect(connector).await.map_err(bad)?;
    super::pooler::adopt(client, conn, mode).await
}

/// The error with its causes, so a refused certificate says why in one line.
fn tls_reason(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
