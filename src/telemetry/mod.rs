//! Telemetry as functions: each event of interest logs and counts in one place, so logs and
//! metrics never drift apart. Metrics use the `metrics` facade with the Prometheus exporter
//! (rendered by `/metrics`; no extra HTTP listener). The functions take plain values (and the
//! types defined here: [`ActorName`], [`RedisLoss`]), so this module depends on no other part
//! of the crate but the settings' `log.format`.

use std::collections::HashMap;
use std::fmt::Display;
use std::time::Duration;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use uuid::Uuid;

use crate::config::LogFormat;

pub mod actors;
pub mod families;
pub mod trace_ids;
pub mod traces;

pub use actors::ActorName;

const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The jobs whose failures are counted (`outbox_job_failures_total{task}`): the periodic
/// actors and the listener.
pub(crate) const JOBS: [ActorName; 9] = [
    ActorName::Listener,
    ActorName::Marks,
    ActorName::Registrar,
    ActorName::Sweeper,
    ActorName::Retention,
    ActorName::Heartbeat,
    ActorName::Backlog,
    ActorName::Readiness,
    ActorName::Groups,
];

/// How often recorded histogram samples are folded into their buckets.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Folds histogram samples into their buckets on a timer, on the actix system's runtime. The
/// exporter keeps every sample until a scrape of `/metrics` renders it or upkeep runs, and
/// `install_recorder` leaves upkeep to its caller: without it, a relay nobody scrapes grows
/// with every event it publishes.
pub fn spawn_upkeep(handle: PrometheusHandle) {
    actix::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            handle.run_upkeep();
        }
    });
}

/// Logs to stderr as `log.format` says, filtered by `RUST_LOG` (default `info`), and traces
/// over OTLP when the environment asks for them ([`traces`]); `service` is the default
/// `service.name`. Shared by the relay's binary, the benchmark's and the example consumer, so
/// all read the same filter and the same OpenTelemetry variables the same way. Keep the
/// returned [`traces::Exporting`] until the program ends.
pub fn install(format: LogFormat, service: &str) -> Result<traces::Exporting, traces::TracesError> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;

    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
        // The event's fields at the top level beside `message` (what log pipelines index),
        // the spans it happened in with theirs, and the trace it belongs to.
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(trace_ids::WithTraceIds(
                tracing_subscriber::fmt::format()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(true),
            ))
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let registry = tracing_subscriber::registry().with(logs.with_filter(filter));
    let (spans, exporting) = traces::layer(service)?;
    registry.with(spans).init();
    Ok(exporting)
}

/// Installs the global metrics recorder; returns the handle `/metrics` renders.
pub fn install_metrics() -> Option<PrometheusHandle> {
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("outbox_publish_duration_seconds".into()),
            LATENCY_BUCKETS,
        )
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full("outbox_event_latency_seconds".into()),
                LATENCY_BUCKETS,
            )
        });
    let handle = builder.ok()?.install_recorder().ok()?;
    metrics::describe_counter!(
        "outbox_events_published_total",
        "Events appended to their stream"
    );
    metrics::describe_gauge!(
        "outbox_events_pending",
        "Events not yet published and not dead"
    );
    metrics::describe_gauge!("outbox_events_dead", "Dead-lettered events");
    metrics::describe_counter!(
        "outbox_postgres_wait_standbys_timeouts_total",
        "Batches that waited in vain for database.wait_standbys standbys (back to pending, no attempt)"
    );
    metrics::describe_gauge!(
        "outbox_postgres_standbys",
        "Standbys streaming from the primary the relay is on (pg_stat_replication)"
    );
    metrics::describe_gauge!(
        "outbox_parked_keys",
        "Keys a declared consumer group parks behind a dead-lettered entry"
    );
    metrics::describe_gauge!(
        "outbox_parked_key_oldest_age_seconds",
        "How long the oldest key a declared consumer group parks has been parked"
    );
    metrics::describe_gauge!(
        "outbox_parked_events",
        "Pending events held behind a dead event of their key (topics with park_on_dead)"
    );
    metrics::describe_gauge!(
        "outbox_oldest_pending_age_seconds",
        "Age of the oldest pending event"
    );
    metrics::describe_histogram!(
        "outbox_publish_duration_seconds",
        "Duration of one claim-publish-commit transaction"
    );
    metrics::describe_histogram!(
        "outbox_event_latency_seconds",
        "From the event's insert to its stream entry"
    );
    metrics::describe_gauge!(
        "outbox_producers_quiet",
        "1 while this replica claims continuously and has asked producers not to NOTIFY"
    );
    metrics::describe_counter!(
        "outbox_actor_panics_total",
        "Panics caught in an actor's work; the actor was restarted"
    );
    metrics::describe_counter!(
        "outbox_outage_cycles_total",
        "Claim cycles rolled back by an outage (no attempt consumed)"
    );
    metrics::describe_counter!(
        "outbox_claim_cycles_total",
        "Claim cycles committed, those that found nothing (or were held) included"
    );
    describe_the_rest();
    process().describe();
    gauge!("outbox_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    // Every metric a dashboard or an absent() alert relies on is in the first scrape.
    gauge!("outbox_producers_quiet").set(0.0);
    gauge!("outbox_events_pending").set(0.0);
    gauge!("outbox_events_dead").set(0.0);
    gauge!("outbox_oldest_pending_age_seconds").set(0.0);
    let _ = histogram!("outbox_publish_duration_seconds");
    let _ = histogram!("outbox_event_latency_seconds");
    counter!("outbox_outage_cycles_total").absolute(0);
    counter!("outbox_claim_cycles_total").absolute(0);
    // Sampled gauges are in the first scrape too: unknown (NaN) until their first sample
    // where 0 would be a claim (no standby, no memory limit), 0 where it is the state (not
    // holding), and the per-standby family with no series until a standby is seen.
    gauge!("outbox_postgres_standbys").set(f64::NAN);
    gauge!("outbox_redis_memory_ratio").set(f64::NAN);
    gauge!("outbox_redis_memory_held").set(0.0);
    standby_lags(&[]);
    for name in [
        "outbox_events_failed_total",
        "outbox_events_dead_lettered_total",
        "outbox_postgres_wait_standbys_timeouts_total",
        "outbox_events_duplicate_total",
        "outbox_retention_deleted_total",
    ] {
        counter!(name).absolute(0);
    }
    for actor in ActorName::ALL {
        counter!("outbox_actor_panics_total", "actor" => actor.as_str()).absolute(0);
    }
    for job in JOBS {
        counter!("outbox_job_failures_total", "task" => job.as_str()).absolute(0);
    }
    Some(handle)
}

/// The `topic` label of the topics beyond `admin.max_metric_topics`.
pub const OTHER_TOPICS: &str = "_other";

/// The topics with a label of their own, and how many may have one.
struct TopicLabels {
    max: usize,
    named: std::collections::HashSet<String>,
}

fn topic_labels() -> &'static std::sync::Mutex<TopicLabels> {
    static LABELS: std::sync::OnceLock<std::sync::Mutex<TopicLabels>> = std::sync::OnceLock::new();
    LABELS.get_or_init(|| {
        std::sync::Mutex::new(TopicLabels {
            max: 500,
            named: std::collections::HashSet::new(),
        })
    })
}

/// Sets `admin.max_metric_topics`.
pub fn set_max_metric_topics(max: usize) {
    topic_labels().lock().unwrap_or_else(|e| e.into_inner()).max = max;
}

/// The `topic` label of `topic`: its name while fewer than `admin.max_metric_topics` topics
/// have one (the first ones this process meets keep theirs), else [`OTHER_TOPICS`]. Known
/// topics are met at start, so declared topics keep their names.
fn topic_label(topic: &str) -> String {
    topic_labels()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .label(topic)
}

impl TopicLabels {
    fn label(&mut self, topic: &str) -> String {
        if self.named.contains(topic) {
            return topic.to_string();
        }
        if self.named.len() < self.max {
            self.named.insert(topic.to_string());
            return topic.to_string();
        }
        OTHER_TOPICS.to_string()
    }
}

/// The HELP lines of the metrics not described beside their first set above.
fn describe_the_rest() {
    metrics::describe_counter!("outbox_events_dead_lettered_total", "Events dead-lettered");
    metrics::describe_counter!(
        "outbox_events_duplicate_total",
        "Events found already in their stream (a second XADD refused)"
    );
    metrics::describe_counter!(
        "outbox_events_failed_total",
        "Event failures that will be retried"
    );
    metrics::describe_gauge!(
        "outbox_group_lag",
        "Entries of the stream a declared consumer group has not read yet"
    );
    metrics::describe_gauge!(
        "outbox_group_members",
        "Live consumers of a declared group's fleet on a partitioned topic"
    );
    metrics::describe_gauge!("outbox_group_oldest_pending_age_seconds", "Age of a declared group's oldest unacknowledged entry, from when it was appended (its id's time)");
    metrics::describe_gauge!("outbox_group_oldest_pending_idle_seconds", "Time since a declared group's oldest unacknowledged entry was last delivered to a consumer");
    metrics::describe_gauge!(
        "outbox_group_pending",
        "Entries a declared group read and has not acknowledged"
    );
    metrics::describe_counter!(
        "outbox_job_failures_total",
        "Failed runs of a periodic job or the listener"
    );
    metrics::describe_gauge!(
        "outbox_partition_lag",
        "Entries of a partition's stream a declared group has not read yet"
    );
    metrics::describe_gauge!(
        "outbox_partition_owned",
        "1 while a consumer of the group holds the partition's lease, 0 while none does"
    );
    metrics::describe_gauge!(
        "outbox_partition_pending",
        "Entries of a partition's stream a declared group read and has not acknowledged"
    );
    metrics::describe_counter!(
        "outbox_redis_lost_entries_total",
        "Entries Redis lost after the relay had appended them (published again)"
    );
    metrics::describe_gauge!(
        "outbox_redis_memory_held",
        "1 while publishing holds because Redis is above redis.max_memory_ratio"
    );
    metrics::describe_gauge!(
        "outbox_redis_memory_ratio",
        "used_memory / maxmemory of the Redis the relay writes to (0 without a maxmemory)"
    );
    metrics::describe_counter!(
        "outbox_retention_deleted_total",
        "Published rows deleted by retention"
    );
    metrics::describe_counter!(
        "outbox_stream_trimmed_total",
        "Stream entries removed by redis.trim_acked"
    );
    metrics::describe_gauge!(
        "outbox_topic_down",
        "1 while the topic's publishes fail as a whole on this replica and its events wait"
    );
    metrics::describe_counter!(
        "outbox_topic_outages_total",
        "Publishes of the topic that failed as a whole (no attempt spent)"
    );
    metrics::describe_gauge!(
        "outbox_build_info",
        "The relay's version, as a label; always 1"
    );
}

/// The process's own metrics (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
/// `process_open_fds`, ...), as Prometheus' client libraries name them.
fn process() -> &'static metrics_process::Collector {
    static COLLECTOR: std::sync::OnceLock<metrics_process::Collector> = std::sync::OnceLock::new();
    COLLECTOR.get_or_init(metrics_process::Collector::default)
}

/// The text `/metrics` serves: the process's metrics read now, the recorder's, and the
/// families replaced whole per sample.
pub fn scrape(handle: &PrometheusHandle) -> String {
    process().collect();
    handle.render() + &families::render()
}

/// A known topic: its counters exist (at 0) before its first publish, on this replica.
pub fn topic_known(topic: &str) {
    counter!("outbox_events_published_total", "topic" => topic_label(topic)).increment(0);
    counter!("outbox_topic_outages_total", "topic" => topic_label(topic)).increment(0);
    // Made to exist, not set: the backlog sampler calls this every few seconds, and a topic
    // that is down must stay down until a publish succeeds.
    gauge!("outbox_topic_down", "topic" => topic_label(topic)).increment(0.0);
    counter!("outbox_redis_lost_entries_total", "topic" => topic_label(topic)).increment(0);
}

/// What a repaired stream had lost, as [`redis_lost`] reports it.
#[derive(Debug)]
pub struct RedisLoss<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The stream key.
    pub stream: &'a str,
    /// The last entry id the relay had appended there.
    pub appended_up_to: String,
    /// The stream's last generated id when the loss was noticed (or that there is no stream).
    pub ends_at: String,
    /// Events the stream should hold and does not.
    pub lost: usize,
    /// Of those, rows put back to pending.
    pub requeued: usize,
    /// What could not be repaired (rows deleted by retention), for a person.
    pub unrepairable: Option<&'a str>,
}

/// A stream was found to hold less than the relay appended to it, and was repaired as far as
/// retention allows: one line with the topic and the stream ids.
pub fn redis_lost(loss: &RedisLoss<'_>) {
    counter!("outbox_redis_lost_entries_total", "topic" => topic_label(loss.topic))
        .increment(loss.lost as u64);
    tracing::error!(
        topic = %loss.topic,
        stream = %loss.stream,
        appended_up_to = %loss.appended_up_to,
        ends_at = %loss.ends_at,
        lost = loss.lost,
        requeued = loss.requeued,
        unrepairable = loss.unrepairable.unwrap_or("nothing"),
        "redis lost entries the relay had appended; the lost events are published again, in order, before newer ones"
    );
}

/// A declared consumer group: its gauges exist from the first scrape.
pub fn group_known(topic: &str, group: &str) {
    let labels = [("topic", topic_label(topic)), ("group", group.to_string())];
    gauge!("outbox_group_lag", &labels).set(0.0);
    gauge!("outbox_group_pending", &labels).set(0.0);
    gauge!("outbox_group_oldest_pending_age_seconds", &labels).set(0.0);
    gauge!("outbox_group_oldest_pending_idle_seconds", &labels).set(0.0);
    gauge!("outbox_parked_keys", &labels).set(0.0);
    gauge!("outbox_parked_key_oldest_age_seconds", &labels).set(0.0);
    counter!("outbox_stream_trimmed_total", "topic" => topic_label(topic)).increment(0);
}

/// A declared group's parked keys (its consumers park keys): how many, and how long the
/// oldest has been parked.
pub fn parked_keys_sampled(topic: &str, group: &str, keys: usize, oldest: Option<Duration>) {
    let labels = [("topic", topic_label(topic)), ("group", group.to_string())];
    gauge!("outbox_parked_keys", &labels).set(keys as f64);
    gauge!("outbox_parked_key_oldest_age_seconds", &labels)
        .set(oldest.map_or(0.0, |d| d.as_secs_f64()));
}

/// A consumer group as sampled from its streams.
#[derive(Debug, Clone, Copy)]
pub struct GroupSample {
    /// Entries not yet delivered to it, when Redis can tell.
    pub lag: Option<u64>,
    /// Delivered and not acknowledged.
    pub pending: u64,
    /// The age of the oldest of those, since it was appended.
    pub oldest_pending: Option<Duration>,
    /// How long ago that entry was last delivered.
    pub oldest_pending_idle: Option<Duration>,
}

/// A lag gauge's value: NaN while Redis cannot tell (after some deletions), so that no alert
/// reads a stale number as progress or as none.
fn lag_value(lag: Option<u64>) -> f64 {
    lag.map_or(f64::NAN, |lag| lag as f64)
}

/// A declared consumer group as sampled from its stream (all its partitions).
pub fn group_sampled(topic: &str, group: &str, sample: GroupSample) {
    let labels = [("topic", topic_label(topic)), ("group", group.to_string())];
    let secs = |d: Option<Duration>| d.map_or(0.0, |d| d.as_secs_f64());
    gauge!("outbox_group_lag", &labels).set(lag_value(sample.lag));
    gauge!("outbox_group_pending", &labels).set(sample.pending as f64);
    gauge!("outbox_group_oldest_pending_age_seconds", &labels).set(secs(sample.oldest_pending));
    gauge!("outbox_group_oldest_pending_idle_seconds", &labels)
        .set(secs(sample.oldest_pending_idle));
}

/// A declared group's sample on one partition of a partitioned topic.
pub fn partition_sampled(
    topic: &str,
    partition: usize,
    group: &str,
    lag: Option<u64>,
    pending: u64,
) {
    let labels = [
        ("topic", topic_label(topic)),
        ("partition", partition.to_string()),
        ("group", group.to_string()),
    ];
    gauge!("outbox_partition_lag", &labels).set(lag_value(lag));
    gauge!("outbox_partition_pending", &labels).set(pending as f64);
}

/// A declared group's fleet on a partitioned topic (the consumer library dividing its
/// partitions): how many members are live, and whether each partition has an owner.
pub fn fleet_sampled(topic: &str, group: &str, members: u64, owned: &[bool]) {
    let labels = [("topic", topic_label(topic)), ("group", group.to_string())];
    gauge!("outbox_group_members", &labels).set(members as f64);
    for (partition, owned) in owned.iter().enumerate() {
        let labels = [
            ("topic", topic_label(topic)),
            ("partition", partition.to_string()),
            ("group", group.to_string()),
        ];
        gauge!("outbox_partition_owned", &labels).set(if *owned { 1.0 } else { 0.0 });
    }
}

/// `redis.trim_acked` removed entries every declared group had acknowledged.
pub fn stream_trimmed(topic: &str, removed: u64, minid: &str) {
    counter!("outbox_stream_trimmed_total", "topic" => topic_label(topic)).increment(removed);
    if removed > 0 {
        tracing::debug!(%topic, removed, %minid, "acknowledged entries trimmed");
    }
}

/// What a committed claim cycle did, in plain values.
#[derive(Debug)]
pub struct CycleFigures<'a> {
    /// Events locked.
    pub claimed: usize,
    /// From the first claim statement to commit.
    pub elapsed: Duration,
    /// Newly appended, per topic.
    pub published: &'a HashMap<String, u64>,
    /// Commit-to-stream latency of each newly appended event.
    pub latencies: &'a [Duration],
    /// Found in their stream already.
    pub duplicates: usize,
    /// Failed through their own fault.
    pub failed: usize,
    /// Left for a later cycle.
    pub deferred: usize,
}

/// A claim cycle committed.
pub fn cycle_done(cycle: &CycleFigures<'_>) {
    // Empty cycles count too: a cycle that had its chance and found nothing (or was held) is
    // what shows that something was not published because it must not be.
    counter!("outbox_claim_cycles_total").increment(1);
    if cycle.claimed == 0 {
        return;
    }
    histogram!("outbox_publish_duration_seconds").record(cycle.elapsed.as_secs_f64());
    for (topic, n) in cycle.published {
        counter!("outbox_events_published_total", "topic" => topic_label(topic)).increment(*n);
    }
    // One registry lookup per cycle, not per event.
    let latency = histogram!("outbox_event_latency_seconds");
    for at in cycle.latencies {
        latency.record(at.as_secs_f64());
    }
    if cycle.duplicates > 0 {
        counter!("outbox_events_duplicate_total").increment(cycle.duplicates as u64);
    }
    tracing::debug!(
        claimed = cycle.claimed,
        failed = cycle.failed,
        deferred = cycle.deferred,
        duplicates = cycle.duplicates,
        elapsed_ms = cycle.elapsed.as_millis() as u64,
        "batch committed"
    );
}

/// A claim cycle rolled back (an outage: no attempt consumed). `logged_elsewhere`: the
/// failure has lines of its own (a wait for standbys), so this one logs nothing. True when it
/// logged.
pub fn cycle_failed(error: &dyn Display, streak: u32, logged_elsewhere: bool) -> bool {
    counter!("outbox_outage_cycles_total").increment(1);
    if !logged_elsewhere && (streak == 1 || streak.is_power_of_two()) {
        tracing::warn!(streak, "claim cycle failed, backing off: {error}");
        return true;
    }
    false
}

/// One topic's publish failed as a whole (its Redis node unreachable): its events wait, the
/// other topics go on. Counted per topic; logged at the first failure and then sparsely.
pub fn topic_outage(topic: &str, error: &dyn Display, streak: u32, retry_in: Duration) {
    counter!("outbox_topic_outages_total", "topic" => topic_label(topic)).increment(1);
    gauge!("outbox_topic_down", "topic" => topic_label(topic)).set(1.0);
    if streak == 1 || streak.is_power_of_two() {
        tracing::warn!(
            %topic,
            streak,
            retry_in_ms = retry_in.as_millis() as u64,
            "topic unreachable in redis, its events wait (no attempt counted): {error}"
        );
    }
}

/// A topic publishes again after an outage of its own.
pub fn topic_outage_over(topic: &str, streak: u32) {
    gauge!("outbox_topic_down", "topic" => topic_label(topic)).set(0.0);
    tracing::info!(%topic, failed_publishes = streak, "topic reachable again");
}

/// How full Redis is (`used_memory / maxmemory` of the fullest master, 0 without a
/// maxmemory), and whether publishing holds for it.
pub fn redis_memory(ratio: f64, held: bool) {
    gauge!("outbox_redis_memory_ratio").set(ratio);
    gauge!("outbox_redis_memory_held").set(if held { 1.0 } else { 0.0 });
}

/// This replica quiets producers' NOTIFY and polls fast (true), or stopped doing so.
pub fn producers_quiet(on: bool) {
    gauge!("outbox_producers_quiet").set(if on { 1.0 } else { 0.0 });
    tracing::debug!(
        on,
        "producers' NOTIFY quieted while this replica claims continuously"
    );
}

/// Cycles succeed again after an outage.
pub fn outage_over(streak: u32) {
    tracing::info!(failed_cycles = streak, "relay recovered");
}

/// An event failed through its own fault and will be retried.
pub fn event_failed(id: &Uuid, error: &str, delay: Duration) {
    counter!("outbox_events_failed_total").increment(1);
    tracing::warn!(event = %id, retry_in_ms = delay.as_millis() as u64, "publish failed: {error}");
}

/// An event whose failure was logged already failed again: counted, logged at DEBUG only.
pub fn event_failed_again(id: &Uuid, error: &str, delay: Duration) {
    counter!("outbox_events_failed_total").increment(1);
    tracing::debug!(event = %id, retry_in_ms = delay.as_millis() as u64, "publish failed again: {error}");
}

/// An event was dead-lettered.
pub fn event_dead(id: &Uuid, error: &str) {
    counter!("outbox_events_dead_lettered_total").increment(1);
    tracing::error!(event = %id, "event dead-lettered: {error}");
}

/// A maintenance job failed; it runs again on its next tick.
pub fn job_failed(job: ActorName, error: &dyn Display) {
    counter!("outbox_job_failures_total", "task" => job.as_str()).increment(1);
    tracing::warn!(job = job.as_str(), "{error}");
}

/// A maintenance job failed for a reason already logged elsewhere; it runs again on its next
/// tick.
pub fn job_failed_quietly(job: ActorName, error: &dyn Display) {
    counter!("outbox_job_failures_total", "task" => job.as_str()).increment(1);
    tracing::debug!(job = job.as_str(), "{error}");
}

/// Retention removed rows.
pub fn retention_deleted(rows: usize) {
    counter!("outbox_retention_deleted_total").increment(rows as u64);
    tracing::debug!(rows, "retention deleted published rows");
}

/// Whether the last batch that waited for `database.wait_standbys` waited in vain: the wait's
/// lines are logged when this flips, not once per batch while a standby stays behind.
static STANDBYS_BEHIND: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A batch waited in vain for `database.wait_standbys` standbys; it goes back to pending.
pub fn wait_standbys_timed_out(why: &dyn Display) {
    counter!("outbox_postgres_wait_standbys_timeouts_total").increment(1);
    if !STANDBYS_BEHIND.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            setting = "database.wait_standbys",
            "{why}; logged again when the standbys catch up"
        );
    }
}

/// A batch's wait for `database.wait_standbys` standbys ended in time.
pub fn wait_standbys_met() {
    if STANDBYS_BEHIND.swap(false, std::sync::atomic::Ordering::Relaxed) {
        tracing::info!(
            setting = "database.wait_standbys",
            "the standbys caught up: batches are published again"
        );
    }
}

/// The standbys of the primary the relay is on (`outbox_postgres_standbys`: how many stream
/// from it), by name, with how many bytes of WAL each has not flushed yet
/// (`outbox_postgres_standby_lag_bytes`). A standby that disconnected has no lag series (its
/// lag is unknown); the count falling is what an alert looks for.
pub fn standbys_sampled(streaming: usize, lags: &[(String, i64)]) {
    gauge!("outbox_postgres_standbys").set(streaming as f64);
    standby_lags(lags);
}

fn standby_lags(lags: &[(String, i64)]) {
    families::replace(
        "outbox_postgres_standby_lag_bytes",
        "Bytes of WAL the primary wrote that each connected standby has not flushed (pg_stat_replication)",
        lags.iter()
            .map(|(name, lag)| (vec![("standby", name.clone())], *lag as f64))
            .collect(),
    );
}

/// Makes a parking topic's held-events gauge exist before its first sample.
pub fn parking_topic_known(topic: &str) {
    gauge!("outbox_parked_events", "topic" => topic_label(topic)).increment(0.0);
}

/// A fresh sample of a parking topic's held events.
pub fn parked_events(topic: &str, held: i64) {
    gauge!("outbox_parked_events", "topic" => topic_label(topic)).set(held as f64);
}

/// A fresh backlog sample.
pub fn backlog(pending: i64, dead: i64, oldest_pending_age_seconds: f64) {
    gauge!("outbox_events_pending").set(pending as f64);
    gauge!("outbox_events_dead").set(dead as f64);
    gauge!("outbox_oldest_pending_age_seconds").set(oldest_pending_age_seconds);
}

/// A panic was caught in an actor's work; the actor is restarted by its supervisor.
pub fn actor_panicked(actor: ActorName, message: &str) {
    counter!("outbox_actor_panics_total", "actor" => actor.as_str()).increment(1);
    tracing::error!(
        actor = actor.as_str(),
        "panic in actor, restarting it: {message}"
    );
}

/// A supervised actor starts again after stopping.
pub fn actor_restarting(actor: ActorName) {
    tracing::warn!(actor = actor.as_str(), "actor restarting");
}

/// An actor is gone and nothing restarts it: the process exits so its orchestrator does.
pub fn actor_lost(actor: ActorName) {
    tracing::error!(
        actor = actor.as_str(),
        "actor died (a panic its supervisor cannot catch); exiting so the orchestrator restarts this replica"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_beyond_the_limit_share_one_label_and_the_first_keep_theirs() {
        let mut labels = TopicLabels {
            max: 2,
            named: Default::default(),
        };
        assert_eq!(labels.label("a"), "a");
        assert_eq!(labels.label("b"), "b");
        assert_eq!(labels.label("c"), OTHER_TOPICS);
        assert_eq!(labels.label("a"), "a");
        assert_eq!(labels.label("d"), OTHER_TOPICS);
    }
}
