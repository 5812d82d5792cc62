//! `outbox-relay repartition TOPIC N`: changes a topic's partition count without breaking
//! per-key order for its declared consumer groups. A key's partition depends on the count, so
//! its next events will land in another stream than its earlier ones; a consumer must not see
//! the new before it finished the old. So: pause the topic (no replica publishes it once the
//! pause returns), wait until every declared group has read and acknowledged everything in the
//! old streams, record the new count (the relays' next batches use it), create the declared
//! groups on the new streams and the count in `<prefix>partitions`, and resume.
//!
//! It says on stderr what it does and, while it waits, what it waits for.
//!
//! Groups that are not declared to the relay are not waited for: their consumers may see a
//! key's new events before its old ones.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::config::{ConfigError, GroupSpec, Settings};
use crate::db::pool::{ConnectLog, Drivers};
use crate::db::{self, topics};
use crate::publish::Publisher;
use outbox_core::keys;
use outbox_core::partition::MAX_PARTITIONS;

/// Who the audit log names for the repartition's own pause, count and resume.
const WHO: &str = "repartition";
/// How often the wait looks at the old streams (and says what it waits for).
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Repartitions `topic` to `partitions`; prints what it does and waits for.
pub async fn run(settings: &Settings, topic: &str, partitions: u32) -> anyhow::Result<()> {
    if !outbox_core::topic::is_valid(topic) {
        return Err(ConfigError {
            setting: "TOPIC".into(),
            message: format!("`{topic}`: {}", outbox_core::topic::RULE),
        }
        .into());
    }
    if !(1..=MAX_PARTITIONS).contains(&partitions) {
        return Err(ConfigError {
            setting: "N".into(),
            message: format!("partitions must be 1 to {MAX_PARTITIONS}, not {partitions}"),
        }
        .into());
    }
    let url = settings.database_url()?;
    let session = crate::app::db_session(settings);
    let db = db::pool::build(url, 2, session, Drivers::Caller, &ConnectLog::default());
    let publisher = crate::app::open_publisher(settings, false)?;
    let (old, was_paused) = db
        .unit(async |c| topics::partitions_and_pause(c, topic).await)
        .await
        .context("reading the topic's partitions")?;
    if old == partitions {
        eprintln!("{topic} has {partitions} partitions already: nothing to do");
        return Ok(());
    }
    eprintln!("{topic}: {old} -> {partitions} partitions");
    db.unit(async |c| topics::set_paused(c, topic, true, WHO).await)
        .await
        .context("pausing the topic")?;
    eprintln!("{topic} paused: no replica publishes it until the repartition ends");
    let groups: Vec<GroupSpec> = settings
        .groups
        .iter()
        .filter(|g| g.topic == topic)
        .cloned()
        .collect();
    wait_for_groups(&publisher, settings, topic, old, &groups).await?;
    db.unit(async |c| topics::set_partitions(c, topic, partitions, WHO).await)
        .await
        .context("recording the new count")?;
    publisher
        .ensure_groups(topic, &groups, partitions)
        .await
        .context("creating the declared groups on the new streams")?;
    publisher
        .record_partitions(topic, partitions)
        .await
        .context("recording the count in the partitions hash")?;
    eprintln!("{topic} now has {partitions} partitions");
    if !was_paused {
        db.unit(async |c| topics::set_paused(c, topic, false, WHO).await)
            .await
            .context("resuming the topic")?;
        eprintln!("{topic} resumed");
    }
    Ok(())
}

/// Waits until each of `groups` has read and acknowledged every entry of the topic's `old`
/// streams, printing what is left when it changes.
async fn wait_for_groups(
    publisher: &Publisher,
    settings: &Settings,
    topic: &str,
    old: u32,
    groups: &[GroupSpec],
) -> anyhow::Result<()> {
    if groups.is_empty() {
        eprintln!("{topic} has no declared groups: nothing to wait for");
        return Ok(());
    }
    let streams = keys::partition_keys(&settings.redis.stream_prefix, topic, old);
    let started = Instant::now();
    let mut said = String::new();
    loop {
        let mut waiting = Vec::new();
        for stream in &streams {
            let info = publisher
                .inspect_stream(topic, stream)
                .await
                .with_context(|| format!("looking at {stream}"))?;
            for group in groups {
                let Some(g) = info.groups.iter().find(|g| g.name == group.name) else {
                    continue;
                };
                // Unknown lag (after deletions) counts as not caught up until it is known.
                let unread = g.lag.unwrap_or(1);
                if unread > 0 || g.pending > 0 {
                    let lag = g.lag.map_or("?".to_string(), |l| l.to_string());
                    waiting.push(format!(
                        "group {} on {stream}: {lag} not read, {} not acknowledged",
                        group.name, g.pending
                    ));
                }
            }
        }
        if waiting.is_empty() {
            eprintln!("every declared group has acknowledged the old streams");
            return Ok(());
        }
        let now = waiting.join("; ");
        if now != said {
            eprintln!("waiting ({}s) for {now}", started.elapsed().as_secs());
            said = now;
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}
