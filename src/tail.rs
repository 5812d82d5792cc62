//! `outbox-relay tail TOPIC`: prints a topic's stream entries as they arrive, one JSON object per
//! line (`{"stream_id","id","topic","key","payload","headers","created_at"}`, payload and
//! headers as JSON values), the `kcat` of this product. Plain reads (`XREAD`) change nothing in
//! Redis; with `--group G` it reads as a member of group G (created if missing) and
//! acknowledges each entry once printed.

use std::io::Write;
use std::time::Duration;

use outbox_core::{Entry, EntryError};
use redis::Value;

use crate::config::Settings;
use crate::publish::connect::{self, RedisConn};
use crate::publish::keys;

/// Longest one read blocks, so a signal or `--count` is noticed soon.
const BLOCK: Duration = Duration::from_millis(1000);
/// Entries per read.
const COUNT: usize = 100;

/// Why `tail` stopped early.
#[derive(Debug, thiserror::Error)]
pub enum TailError {
    /// A TLS file could not be used.
    #[error("{0}")]
    Tls(#[from] outbox_core::pem::TlsSettingError),
    /// Redis refused or could not be reached.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// `--from` is neither `0` nor `$`.
    #[error("--from must be 0 or $, not {0}")]
    From(String),
}

/// What `tail` reads.
#[derive(Debug, Clone)]
pub struct TailOptions {
    /// The topic.
    pub topic: String,
    /// `0` (every entry still in the stream) or `$` (only new ones).
    pub from: String,
    /// Read as a member of this group, and acknowledge what was printed.
    pub group: Option<String>,
    /// Stop after this many entries.
    pub count: Option<u64>,
}

/// Tails until `--count` entries were printed, SIGINT/SIGTERM, or stdout closes.
pub async fn run(settings: &Settings, options: TailOptions) -> Result<(), TailError> {
    if options.from != "0" && options.from != "$" {
        return Err(TailError::From(options.from));
    }
    let tls = connect::tls_files(&settings.redis)?;
    let mut redis_settings = settings.redis.clone();
    // A blocking read must end before the client gives up on it.
    redis_settings.timeout = redis_settings.timeout.max(BLOCK * 3);
    let mut conn = connect::connect(&redis_settings, tls.as_ref())?;
    let key = keys::stream_key(&settings.redis.stream_prefix, &options.topic);
    let mut reader = match &options.group {
        Some(group) => Reader::group(&mut conn, &key, group, &options.from).await?,
        None => Reader::plain(&mut conn, &key, &options.from).await?,
    };
    match &reader {
        Reader::Plain { after, .. } => tracing::info!(stream = %key, after = %after, "tailing"),
        Reader::Group {
            group, consumer, ..
        } => tracing::info!(stream = %key, %group, %consumer, "tailing"),
    }
    let stop = shutdown();
    tokio::pin!(stop);
    let mut printed = 0u64;
    loop {
        if options.count.is_some_and(|n| printed >= n) {
            return Ok(());
        }
        let reply = tokio::select! {
            _ = &mut stop => return Ok(()),
            // Never more than --count still wants: a group member acknowledges all it reads.
            reply = reader.read(&mut conn, options.count.map_or(COUNT, |n| ((n - printed) as usize).min(COUNT))) => reply?,
        };
        let mut done = Vec::new();
        for (stream_id, entry) in Entry::from_read_reply(reply)? {
            if options.count.is_some_and(|n| printed >= n) {
                break;
            }
            reader.seen(&stream_id);
            if !print(&stream_id, entry) {
                // Whoever read our output went away (`| head`): nothing more to do.
                return Ok(());
            }
            printed += 1;
            done.push(stream_id);
        }
        reader.ack(&mut conn, &done).await?;
    }
}

/// Prints one entry (a malformed one as a warning on stderr); false once stdout is closed.
fn print(stream_id: &str, entry: Result<Entry, EntryError>) -> bool {
    let line = match entry {
        Ok(entry) => entry.to_json().to_string(),
        Err(error) => {
            tracing::warn!(%stream_id, "not an outbox event: {error}");
            serde_json::json!({ "stream_id": stream_id, "error": error.to_string() }).to_string()
        }
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
}

/// Where the next read starts.
enum Reader {
    /// `XREAD` after this id.
    Plain { key: String, after: String },
    /// `XREADGROUP` as `consumer` of `group`.
    Group {
        key: String,
        group: String,
        consumer: String,
    },
}

impl Reader {
    /// Plain reads from the start, or from the stream's last entry as it is now (`$` would
    /// miss what arrives between two reads).
    async fn plain(conn: &mut RedisConn, key: &str, from: &str) -> Result<Reader, TailError> {
        let after = match from {
            "0" => "0-0".to_string(),
            _ => {
                let last: redis::streams::StreamRangeReply = redis::cmd("XREVRANGE")
                    .arg(key)
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(1)
                    .query_async(conn)
                    .await?;
                last.ids
                    .first()
                    .map_or_else(|| "0-0".to_string(), |e| e.id.clone())
            }
        };
        Ok(Reader::Plain {
            key: key.to_string(),
            after,
        })
    }

    /// A member of `group`, which is created at `from` if it does not exist.
    async fn group(
        conn: &mut RedisConn,
        key: &str,
        group: &str,
        from: &str,
    ) -> Result<Reader, TailError> {
        outbox_core::groups::create(conn, key, group, from).await?;
        Ok(Reader::Group {
            key: key.to_string(),
            group: group.to_string(),
            consumer: format!("tail-{}", std::process::id()),
        })
    }

    async fn read(&self, conn: &mut RedisConn, count: usize) -> Result<Value, TailError> {
        let block = BLOCK.as_millis() as u64;
        let mut cmd = match self {
            Reader::Plain { .. } => redis::cmd("XREAD"),
            Reader::Group {
                group, consumer, ..
            } => {
                let mut cmd = redis::cmd("XREADGROUP");
                cmd.arg("GROUP").arg(group).arg(consumer);
                cmd
            }
        };
        cmd.arg("COUNT").arg(count).arg("BLOCK").arg(block);
        match self {
            Reader::Plain { key, after } => cmd.arg("STREAMS").arg(key).arg(after),
            Reader::Group { key, .. } => cmd.arg("STREAMS").arg(key).arg(">"),
        };
        Ok(cmd.query_async(conn).await?)
    }

    fn seen(&mut self, stream_id: &str) {
        if let Reader::Plain { after, .. } = self {
            *after = stream_id.to_string();
        }
    }

    async fn ack(&self, conn: &mut RedisConn, ids: &[String]) -> Result<(), TailError> {
        if let (Reader::Group { key, group, .. }, false) = (self, ids.is_empty()) {
            let _: u64 = redis::cmd("XACK")
                .arg(key)
                .arg(group)
                .arg(ids)
                .query_async(conn)
                .await?;
        }
        Ok(())
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
