//! `outbox-relay tail TOPIC`: prints a topic's stream entries as they arrive, one JSON object per
//! line (`{"stream_id","id","topic","key","payload","headers","created_at"}`, payload and
//! headers as JSON values; an entry of a CloudEvents topic also has `cloudevent`, its
//! attributes), the `kcat` of this product. A partitioned topic is read on all its
//! streams (by the count in `<prefix>partitions`), or on one with `--partition P`. Plain reads
//! (`XREAD`) change nothing in Redis; with `--group G` it reads as a member of group G (created
//! if missing on each stream) and acknowledges each entry once printed.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use outbox_core::{Entry, EntryError};
use redis::cluster_routing::Slot;
use redis::streams::StreamReadReply;

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
    /// `--partition` names no partition of the topic.
    #[error("--partition {partition}: {topic} has {partitions} partition(s), 0 to {}", partitions - 1)]
    Partition {
        /// The topic.
        topic: String,
        /// The partition asked for.
        partition: u32,
        /// The topic's count.
        partitions: u32,
    },
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
    /// Read this partition only (a partitioned topic).
    pub partition: Option<u32>,
}

/// Tails until `--count` entries were printed, SIGINT/SIGTERM, or stdout closes.
pub async fn run(settings: &Settings, options: TailOptions) -> Result<(), TailError> {
    if options.from != "0" && options.from != "$" {
        return Err(TailError::From(options.from));
    }
    let tls = settings.redis.tls_files()?;
    let mut redis_settings = settings.redis.clone();
    // A blocking read must end before the client gives up on it.
    redis_settings.timeout = redis_settings.timeout.max(BLOCK * 3);
    let mut conn = connect::connect(&redis_settings, tls.as_ref())?;
    let streams = streams(&mut conn, settings, &options).await?;
    let mut reader = Reader::new(&mut conn, streams, &options).await?;
    tracing::info!(streams = %reader.keys().join(","), group = ?options.group, "tailing");
    let stop = shutdown();
    tokio::pin!(stop);
    let mut printed = 0u64;
    loop {
        if options.count.is_some_and(|n| printed >= n) {
            return Ok(());
        }
        // Never more than --count still wants: a group member acknowledges all it reads.
        let want = options
            .count
            .map_or(COUNT, |n| ((n - printed) as usize).min(COUNT));
        let entries = tokio::select! {
            _ = &mut stop => return Ok(()),
            read = reader.read(&mut conn, want) => read?,
        };
        let mut done: HashMap<String, Vec<String>> = HashMap::new();
        for (stream, stream_id, entry) in entries {
            if options.count.is_some_and(|n| printed >= n) {
                break;
            }
            reader.seen(&stream, &stream_id);
            if !print(&stream_id, entry) {
                // Whoever read our output went away (`| head`): nothing more to do.
                return Ok(());
            }
            printed += 1;
            done.entry(stream).or_default().push(stream_id);
        }
        reader.ack(&mut conn, &done).await?;
    }
}

/// The streams to read: the topic's one, all its partitions, or the one `--partition` names.
async fn streams(
    conn: &mut RedisConn,
    settings: &Settings,
    options: &TailOptions,
) -> Result<Vec<String>, TailError> {
    let prefix = &settings.redis.stream_prefix;
    let count: Option<u32> = redis::cmd("HGET")
        .arg(keys::partitions_hash(prefix))
        .arg(&options.topic)
        .query_async(conn)
        .await?;
    let partitions = count.unwrap_or(1).max(1);
    Ok(match options.partition {
        Some(p) if p >= partitions => {
            return Err(TailError::Partition {
                topic: options.topic.clone(),
                partition: p,
                partitions,
            })
        }
        Some(p) => vec![keys::partition_key(prefix, &options.topic, p, partitions)],
        None => keys::partition_keys(prefix, &options.topic, partitions),
    })
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

/// One entry read: its stream, its id, and the event parsed.
type Read = (String, String, Result<Entry, EntryError>);

/// Where the next read starts, for each stream.
struct Reader {
    /// The streams by cluster slot: one read can only name streams of one slot.
    by_slot: Vec<Vec<String>>,
    /// Plain reads: the last id seen of each stream.
    after: HashMap<String, String>,
    /// Group reads: the group and this member's name.
    group: Option<(String, String)>,
    /// The topic, which a CloudEvents entry does not name.
    topic: String,
}

impl Reader {
    /// Plain reads start at the beginning, or at each stream's last entry as it is now (`$`
    /// would miss what arrives between two reads); a group is created at `--from` where
    /// missing.
    async fn new(
        conn: &mut RedisConn,
        streams: Vec<String>,
        options: &TailOptions,
    ) -> Result<Reader, TailError> {
        let mut after = HashMap::new();
        let group = match &options.group {
            Some(group) => {
                for key in &streams {
                    outbox_core::groups::create(conn, key, group, &options.from).await?;
                }
                Some((group.clone(), format!("tail-{}", std::process::id())))
            }
            None => {
                for key in &streams {
                    after.insert(key.clone(), start_after(conn, key, &options.from).await?);
                }
                None
            }
        };
        let mut by_slot: Vec<(Slot, Vec<String>)> = Vec::new();
        for key in streams {
            let slot = Slot::for_key(key.as_bytes());
            match by_slot.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, keys)) => keys.push(key),
                None => by_slot.push((slot, vec![key])),
            }
        }
        Ok(Reader {
            by_slot: by_slot.into_iter().map(|(_, keys)| keys).collect(),
            after,
            topic: options.topic.clone(),
            group,
        })
    }

    fn keys(&self) -> Vec<String> {
        self.by_slot.iter().flatten().cloned().collect()
    }

    /// One read of each slot's streams; with several slots each blocks briefly, so one quiet
    /// slot does not hold back the others.
    async fn read(&self, conn: &mut RedisConn, count: usize) -> Result<Vec<Read>, TailError> {
        let block = match self.by_slot.len() {
            1 => BLOCK,
            n => BLOCK / n as u32,
        };
        let mut out = Vec::new();
        for keys in &self.by_slot {
            let mut cmd = match &self.group {
                None => redis::cmd("XREAD"),
                Some((group, consumer)) => {
                    let mut cmd = redis::cmd("XREADGROUP");
                    cmd.arg("GROUP").arg(group).arg(consumer);
                    cmd
                }
            };
            cmd.arg("COUNT")
                .arg(count)
                .arg("BLOCK")
                .arg(block.as_millis().max(1) as u64)
                .arg("STREAMS")
                .arg(keys);
            for key in keys {
                match &self.group {
                    None => cmd.arg(self.after.get(key).map_or("0-0", String::as_str)),
                    Some(_) => cmd.arg(">"),
                };
            }
            let reply: Option<StreamReadReply> = cmd.query_async(conn).await?;
            for stream in reply.map(|r| r.keys).unwrap_or_default() {
                for id in stream.ids {
                    let entry = Entry::from_stream_id_of(&self.topic, &id);
                    out.push((stream.key.clone(), id.id, entry));
                }
            }
        }
        Ok(out)
    }

    fn seen(&mut self, stream: &str, stream_id: &str) {
        if self.group.is_none() {
            self.after.insert(stream.to_string(), stream_id.to_string());
        }
    }

    async fn ack(
        &self,
        conn: &mut RedisConn,
        done: &HashMap<String, Vec<String>>,
    ) -> Result<(), TailError> {
        let Some((group, _)) = &self.group else {
            return Ok(());
        };
        for (stream, ids) in done {
            let _: u64 = redis::cmd("XACK")
                .arg(stream)
                .arg(group)
                .arg(ids)
                .query_async(conn)
                .await?;
        }
        Ok(())
    }
}

/// Where a plain read of `key` starts: before the first entry, or at its last entry now.
async fn start_after(conn: &mut RedisConn, key: &str, from: &str) -> Result<String, TailError> {
    if from == "0" {
        return Ok("0-0".to_string());
    }
    let last: redis::streams::StreamRangeReply = redis::cmd("XREVRANGE")
        .arg(key)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(conn)
        .await?;
    Ok(last
        .ids
        .first()
        .map_or_else(|| "0-0".to_string(), |e| e.id.clone()))
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
