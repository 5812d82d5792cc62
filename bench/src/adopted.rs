//! The adoption scenarios (contract section 12): the drain of a backlog written into an
//! adopted Debezium-layout table (plain inserts, and insert-then-delete transactions), beside
//! the native drain of the same backlog written into `outbox`; and what the adoption costs a
//! producer: single-row inserts per second into the table, without and then with the trigger
//! `migrate` installs.

use std::time::Instant;

use diesel_async::SimpleAsyncConnection;
use outbox_relay::config::TableSpec;

use crate::harness::{BenchEnv, Scratch, TOPICS};
use crate::machine::Meter;
use crate::report::Figure;

/// The adopted table's name.
const TABLE: &str = "outboxevent";

/// Debezium's outbox layout, with a nullable aggregate id so that half the backlog is
/// unkeyed as in the native one.
const TABLE_SQL: &str = "CREATE TABLE outboxevent (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregatetype varchar(255) NOT NULL,
    aggregateid varchar(255),
    type varchar(255) NOT NULL,
    payload jsonb
)";

/// The `[[tables]]` entry, as `OUTBOX__TABLES` (the relay refuses to run without it once
/// the table is adopted): `aggregatetype` `topic3` goes to `bench.topic3`.
pub const TABLES_SETTING: &str = r#"[{name="outboxevent", id="id", topic="aggregatetype", topic_format="bench.{}", key="aggregateid", payload="payload", headers={type="type"}}]"#;

/// Rows per producer transaction of the preloaded backlog.
const ROWS_PER_TRANSACTION: u64 = 1000;

/// The entry of [`TABLES_SETTING`].
fn spec() -> TableSpec {
    let mut spec = TableSpec::new(TABLE, "id", "aggregatetype", "payload");
    spec.topic_format = "bench.{}".into();
    spec.key = Some("aggregateid".into());
    spec.headers.insert("type".into(), "type".into());
    spec
}

/// Creates the table in `scratch`, and adopts it when `adopt`.
async fn create(scratch: &Scratch, adopt: bool) -> anyhow::Result<()> {
    scratch.conn().await?.batch_execute(TABLE_SQL).await?;
    if adopt {
        outbox_relay::db::migrate::prepare(&scratch.url, Some(&[spec()])).await?;
    }
    Ok(())
}

/// Preloads `n` events (the native backlog's shape) through the adopted table, in
/// transactions of [`ROWS_PER_TRANSACTION`] rows; with `delete`, each transaction deletes its
/// rows again before it commits.
pub async fn preload(scratch: &Scratch, n: u64, delete: bool) -> anyhow::Result<()> {
    create(scratch, true).await?;
    let mut conn = scratch.conn().await?;
    let mut from = 1;
    while from <= n {
        let to = (from + ROWS_PER_TRANSACTION - 1).min(n);
        let insert = format!(
            "INSERT INTO {TABLE} (aggregatetype, aggregateid, type, payload)
             SELECT 'topic' || (i % {TOPICS}), CASE WHEN i % 2 = 0 THEN 'key-' || (i % 1000) END,
                    'Changed', jsonb_build_object('n', i, 'pad', repeat('x', 220))
             FROM generate_series({from}, {to}) AS i ORDER BY i"
        );
        let sql = if delete {
            format!("BEGIN; {insert}; DELETE FROM {TABLE}; COMMIT;")
        } else {
            insert
        };
        conn.batch_execute(&sql).await?;
        from = to + 1;
    }
    conn.batch_execute("VACUUM ANALYZE outbox").await?;
    Ok(())
}

/// Where a producer's single-row transactions go, for [`producer_rate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Producer {
    /// Into the table, not adopted: the cost without the relay.
    Plain,
    /// Into the adopted table, its `outbox` copy notifying as `notify` says.
    Adopted {
        /// Whether the commits notify.
        notify: Notify,
    },
    /// Into `outbox` itself (NOTIFY on), the native producer's cost.
    Outbox,
}

/// What the `outbox` trigger does at each producer commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    /// Notifies: no relay is busy.
    EveryCommit,
    /// Skips NOTIFY because a relay announced it is busy (`outbox_wake.busy_until` ahead), as
    /// while a relay drains above `relay.quiet_above`.
    RelayBusy,
    /// Skips NOTIFY because the producer set `outbox.notify = off`.
    Off,
}

/// Producers on `connections` connections inserting `per_connection` single-row
/// transactions each as `producer` says: rows per second.
pub async fn producer_rate(
    env: &BenchEnv,
    producer: Producer,
    connections: usize,
    per_connection: u64,
    name: &str,
) -> anyhow::Result<Figure> {
    let scratch = Scratch::new(env).await?;
    let result = async {
        create(&scratch, matches!(producer, Producer::Adopted { .. })).await?;
        if let Producer::Adopted {
            notify: Notify::RelayBusy,
        } = producer
        {
            // What a draining relay writes (a second ahead, renewed), held for the whole run.
            scratch
                .conn()
                .await?
                .batch_execute(
                    "UPDATE outbox_wake SET busy_until = clock_timestamp() + interval '1 hour'",
                )
                .await?;
        }
        let mut conns = Vec::with_capacity(connections);
        for _ in 0..connections {
            let mut conn = scratch.conn().await?;
            if let Producer::Adopted {
                notify: Notify::Off,
            } = producer
            {
                conn.batch_execute("SET outbox.notify = off").await?;
            }
            conns.push(conn);
        }
        let mut redis = crate::harness::redis_link(env)?;
        let meter = Meter::start(&mut redis).await;
        let started = Instant::now();
        let producers = conns
            .into_iter()
            .enumerate()
            .map(|(c, mut conn)| async move {
                for i in 0..per_connection {
                    let topic = i % TOPICS;
                    let key = (c as u64 * per_connection + i) % 1000;
                    let sql = match producer {
                        Producer::Outbox => format!(
                            "INSERT INTO outbox (topic, partition_key, headers, payload) \
                         VALUES ('bench.topic{topic}', 'key-{key}', '{{\"type\": \"Changed\"}}', \
                         jsonb_build_object('n', {i}, 'pad', repeat('x', 220)))"
                        ),
                        _ => format!(
                            "INSERT INTO {TABLE} (aggregatetype, aggregateid, type, payload) \
                         VALUES ('topic{topic}', 'key-{key}', 'Changed', \
                         jsonb_build_object('n', {i}, 'pad', repeat('x', 220)))"
                        ),
                    };
                    conn.batch_execute(&sql).await?;
                }
                Ok::<_, anyhow::Error>(())
            });
        futures::future::try_join_all(producers).await?;
        let seconds = started.elapsed().as_secs_f64();
        let load = meter.stop(&mut redis).await;
        let rows = connections as u64 * per_connection;
        Ok(Figure {
            scenario: name.into(),
            events: rows,
            seconds: Some(seconds),
            events_per_sec: Some(rows as f64 / seconds),
            redis_cpu_seconds: load.redis_cpu,
            busy_cores: load.busy_cores,
            ..Figure::default()
        })
    }
    .await;
    scratch.cleanup().await;
    result
}
