//! Telemetry as functions: each event of interest logs and counts in one place, so logs and
//! metrics never drift apart. Metrics use the `metrics` facade with the Prometheus exporter
//! (rendered by `/metrics`; no extra HTTP listener).

use std::time::Duration;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use uuid::Uuid;

use crate::db::outbox::Backlog;
use crate::db::DbError;
use crate::relay::cycle::{CycleError, CycleReport};

const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// How often recorded histogram samples are folded into their buckets.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Folds histogram samples into their buckets on a timer, on the actix system's runtime. The
/// exporter keeps every sample until a scrape of `/metrics` renders it or upkeep runs, and
/// `install_recorder` leaves upkeep to its caller: a relay nobody scraped grew by about 43 kB
/// a second at 2,000 events/s (two samples per cycle and event), without bound.
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
    gauge!("outbox_producers_quiet").set(0.0);
    gauge!("outbox_events_pending").set(0.0);
    gauge!("outbox_events_dead").set(0.0);
    gauge!("outbox_oldest_pending_age_seconds").set(0.0);
    Some(handle)
}

/// A claim cycle committed.
pub fn cycle_done(report: &CycleReport) {
    if report.claimed == 0 {
        return;
    }
    histogram!("outbox_publish_duration_seconds").record(report.elapsed.as_secs_f64());
    let published: u64 = report.published.values().sum();
    crate::relay::throughput::GLOBAL.record(published, 0);
    for (topic, n) in &report.published {
        counter!("outbox_events_published_total", "topic" => topic.clone()).increment(*n);
    }
    // One registry lookup per cycle, not per event.
    let latency = histogram!("outbox_event_latency_seconds");
    for at in &report.latencies {
        latency.record(at.as_secs_f64());
    }
    if report.duplicates > 0 {
        counter!("outbox_events_duplicate_total").increment(report.duplicates as u64);
    }
    tracing::debug!(
        claimed = report.claimed,
        failed = report.failed,
        deferred = report.deferred,
        duplicates = report.duplicates,
        elapsed_ms = report.elapsed.as_millis() as u64,
        "batch committed"
    );
}

/// A claim cycle rolled back (an outage: no attempt consumed).
pub fn cycle_failed(error: &CycleError, streak: u32) {
    counter!("outbox_outage_cycles_total").increment(1);
    if streak == 1 || streak.is_power_of_two() {
        tracing::warn!(streak, "claim cycle failed, backing off: {error}");
    }
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
    crate::relay::throughput::GLOBAL.record(0, 1);
    tracing::warn!(event = %id, retry_in_ms = delay.as_millis() as u64, "publish failed: {error}");
}

/// An event was dead-lettered.
pub fn event_dead(id: &Uuid, error: &str) {
    counter!("outbox_events_dead_lettered_total").increment(1);
    crate::relay::throughput::GLOBAL.record(0, 1);
    tracing::error!(event = %id, "event dead-lettered: {error}");
}

/// A maintenance job failed; it runs again on its next tick.
pub fn job_failed(job: &'static str, error: &DbError) {
    counter!("outbox_job_failures_total", "job" => job).increment(1);
    tracing::warn!(job, "{error}");
}

/// Retention removed rows.
pub fn retention_deleted(rows: usize) {
    counter!("outbox_retention_deleted_total").increment(rows as u64);
    tracing::debug!(rows, "retention deleted published rows");
}

/// A fresh backlog sample.
pub fn backlog(b: &Backlog) {
    gauge!("outbox_events_pending").set(b.pending as f64);
    gauge!("outbox_events_dead").set(b.dead as f64);
    gauge!("outbox_oldest_pending_age_seconds").set(b.oldest_pending_age_seconds);
}
