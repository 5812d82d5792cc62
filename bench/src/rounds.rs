//! The throughput scenarios, run in rounds rather than each scenario repeated in a row: a slow
//! minute of the machine then falls on every scenario alike, and the ratios between them stay
//! fair. Each scenario is reported by its median round, with every round's events/s.

use outbox_testkit::cluster::{LocalCluster, Persistence};

use crate::harness::{self, BenchEnv, Drain, Shape};
use crate::replicated::Replicated;
use crate::standbys::Standbys;
use crate::tls::TlsServers;
use crate::{endtoend, reference, BenchOptions, Figure, Report};

/// The ceiling scenario's name.
const CEILING: &str = "ceiling: relay SQL, no Redis";
/// The TLS scenario's two sides.
const TLS_OFF: &str = "tls: off (own Redis, sslmode=disable)";
const TLS_ON: &str = "tls: on (rediss, sslmode=require)";
/// The standbys scenario's two sides, on a Postgres of its own with one streaming standby.
const STANDBYS_OFF: &str = "standbys: no wait (own Postgres + 1 standby)";
const STANDBYS_ON: &str = "standbys: wait_standbys = 1 (own Postgres + 1 standby)";
const NO_WAIT: &str = "durability: no wait (own Redis + 1 replica)";
const WAIT_ONE: &str = "durability: wait_replicas = 1 (own Redis + 1 replica)";

/// The end-to-end drain's name: producer commit to consumer effect, inbox on.
const E2E_DRAIN: &str = "end to end: drain to inbox consumers";

/// The adoption scenario's drains and producer rates.
pub const ADOPTED_PLAIN: &str = "adopted table: drain, plain inserts";
/// Its insert-then-delete drain.
pub const ADOPTED_DELETE: &str = "adopted table: drain, insert-then-delete";
/// A producer's inserts into the table before adoption.
pub const PRODUCER_NATIVE: &str = "producer inserts: table not adopted";
/// The same into the adopted table.
pub const PRODUCER_ADOPTED: &str = "producer inserts: adopted table";
/// The same while a relay announces it is busy (NOTIFY skipped), as while a relay drains.
pub const PRODUCER_BUSY: &str = "producer inserts: adopted, relay busy";
/// The same with the producer's `outbox.notify = off`.
pub const PRODUCER_QUIET: &str = "producer inserts: adopted, NOTIFY off";
/// The native producer's: single-row inserts into `outbox`.
pub const PRODUCER_OUTBOX: &str = "producer inserts: into outbox";

/// The keep-rows drain with every topic written as CloudEvents.
pub const CLOUDEVENTS: &str = "cloudevents: drain (keep rows)";

/// The keep-rows drain with `park_on_dead` on every topic (nothing dead: the probe's cost).
pub const PARKING: &str = "parking: drain, park_on_dead";
/// The end-to-end drain with the consumers parking keys (nothing parked: the lookup's cost).
pub const PARKING_E2E: &str = "parking: end to end, park_keys";

/// The fleet scenario's drains: relay only, then to the consumers dividing the partitions.
const FLEET_RELAY: &str = "fleet: relay-only drain, 8 partitions";
const FLEET_E2E: &str = "fleet: drain to 3 inbox consumers, 8 partitions";

/// The cluster scenario's name: the keep-rows drain on a local cluster of this many masters.
const CLUSTER: &str = "redis cluster: 3 masters";

/// Masters of the cluster scenario's local cluster.
const CLUSTER_MASTERS: usize = 3;

/// Runs every round of the selected throughput scenarios and records each scenario's median.
pub async fn run(options: &BenchOptions, env: &BenchEnv, report: &mut Report) {
    let rigs = Rigs::start(options, env);
    let mut runs = Runs::default();
    for round in 0..options.repeat.max(1) {
        one_round(round, options, env, &rigs, &mut runs).await;
    }
    for (name, results) in runs.drains {
        report.record(
            &name,
            median(results).map(|(d, all)| d.figure(&name).with_runs(all)),
        );
    }
    for (name, results) in runs.rates {
        report.record(&name, median_figure(results));
    }
}

/// Every round's result of each scenario, scenarios in the order they first ran: drains, and
/// rates measured otherwise (a producer's inserts).
#[derive(Default)]
struct Runs {
    drains: Vec<(String, Vec<anyhow::Result<Drain>>)>,
    rates: Vec<(String, Vec<anyhow::Result<Figure>>)>,
}

impl Runs {
    fn add(&mut self, name: &str, result: anyhow::Result<Drain>) {
        push(&mut self.drains, name, result);
    }

    fn add_figure(&mut self, name: &str, result: anyhow::Result<Figure>) {
        push(&mut self.rates, name, result);
    }
}

/// Adds `result` to `name`'s results.
fn push<T>(all: &mut Vec<(String, Vec<T>)>, name: &str, result: T) {
    match all.iter_mut().find(|(n, _)| n == name) {
        Some((_, results)) => results.push(result),
        None => all.push((name.to_string(), vec![result])),
    }
}

/// The median round of figures by events/s, with every round's events/s.
fn median_figure(results: Vec<anyhow::Result<Figure>>) -> anyhow::Result<Figure> {
    let mut figures = results
        .into_iter()
        .collect::<anyhow::Result<Vec<Figure>>>()?;
    anyhow::ensure!(!figures.is_empty(), "no round ran");
    let rate = |f: &Figure| f.events_per_sec.unwrap_or(0.0);
    let all: Vec<f64> = figures.iter().map(rate).collect();
    figures.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
    let middle = figures.swap_remove(figures.len() / 2);
    Ok(middle.with_runs(all))
}

/// The median round by events/s, and every round's events/s; a failed round fails the
/// scenario (a failure is never averaged away).
fn median(results: Vec<anyhow::Result<Drain>>) -> anyhow::Result<(Drain, Vec<f64>)> {
    let mut drains = results
        .into_iter()
        .collect::<anyhow::Result<Vec<Drain>>>()?;
    anyhow::ensure!(!drains.is_empty(), "no round ran");
    let rate = |d: &Drain| d.rate();
    let all: Vec<f64> = drains.iter().map(rate).collect();
    drains.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
    let middle = drains.swap_remove(drains.len() / 2);
    Ok((middle, all))
}

/// The adoption scenario, right after the native drain: the same backlog written into an
/// adopted table (plain inserts, then insert-then-delete), and a producer's single-row inserts
/// into the table without and with adoption (NOTIFY on, skipped for a busy relay, and off),
/// and into `outbox`
/// itself (4 connections of 5,000 inserts each, fewer for a backlog under 100,000).
async fn adoption(env: &BenchEnv, n: u64, runs: &mut Runs) {
    let tables = [("OUTBOX__TABLES", crate::adopted::TABLES_SETTING)];
    for (name, delete) in [(ADOPTED_PLAIN, false), (ADOPTED_DELETE, true)] {
        let r = harness::drain(env, n, 1, Shape::Adopted { delete }, &tables).await;
        runs.add(name, r);
    }
    use crate::adopted::{Notify, Producer};
    // Enough inserts for a few seconds per figure at full size, few in a smoke run.
    let per_connection = (n / 20).clamp(100, 5000);
    for (name, producer) in [
        (PRODUCER_NATIVE, Producer::Plain),
        (
            PRODUCER_ADOPTED,
            Producer::Adopted {
                notify: Notify::EveryCommit,
            },
        ),
        (
            PRODUCER_BUSY,
            Producer::Adopted {
                notify: Notify::RelayBusy,
            },
        ),
        (
            PRODUCER_QUIET,
            Producer::Adopted {
                notify: Notify::Off,
            },
        ),
        (PRODUCER_OUTBOX, Producer::Outbox),
    ] {
        let r = crate::adopted::producer_rate(env, producer, 4, per_connection, name).await;
        runs.add_figure(name, r);
    }
}

/// The servers of the TLS and cluster scenarios, started once for every round (each drain
/// has a stream prefix of its own); `None` when the scenario is not selected.
struct Rigs {
    tls: Option<anyhow::Result<TlsServers>>,
    /// A master with one replica, for the durability scenario.
    replicated: Option<anyhow::Result<Replicated>>,
    /// A Postgres primary with one standby, for the standbys scenario.
    standbys: Option<anyhow::Result<Standbys>>,
    /// Fresh redis-servers without persistence, like the bench's Redis, and the bench
    /// environment on them.
    cluster: Option<anyhow::Result<(BenchEnv, LocalCluster)>>,
}

impl Rigs {
    fn start(options: &BenchOptions, env: &BenchEnv) -> Rigs {
        Rigs {
            tls: options.wants("tls").then(TlsServers::start),
            replicated: options.wants("durability").then(Replicated::start),
            standbys: options.wants("standbys").then(Standbys::start),
            cluster: options.wants("cluster").then(|| {
                LocalCluster::start(CLUSTER_MASTERS, Persistence::None)
                    .map(|c| (env.on_cluster(&c.seeds()), c))
            }),
        }
    }

    /// The keep-rows drain on the local cluster.
    async fn cluster_drain(&self, n: u64) -> anyhow::Result<Drain> {
        match &self.cluster {
            Some(Ok((cluster_env, _))) => {
                harness::drain(cluster_env, n, 1, Shape::Mixed, &[]).await
            }
            Some(Err(e)) => Err(anyhow::anyhow!("no local cluster: {e}")),
            None => Err(anyhow::anyhow!("cluster scenario not selected")),
        }
    }

    /// The drain with both ends over TLS (`on`) or both plain, on the TLS scenario's servers.
    async fn tls_drain(
        servers: &anyhow::Result<TlsServers>,
        env: &BenchEnv,
        on: bool,
        n: u64,
    ) -> anyhow::Result<Drain> {
        let servers = servers
            .as_ref()
            .map_err(|e| anyhow::anyhow!("tls servers: {e:#}"))?;
        let side = servers.env(env, on)?;
        harness::drain(&side, n, 1, Shape::Mixed, &[]).await
    }
}

/// One round of every selected throughput scenario.
async fn one_round(
    round: u32,
    options: &BenchOptions,
    env: &BenchEnv,
    rigs: &Rigs,
    runs: &mut Runs,
) {
    let n = options.events;
    // The ceiling and the cluster drain run right beside the keep-rows drain, so each round's
    // ratio compares the same minute of a shared machine (its speed drifts from one minute
    // to the next); first in every other round, so neither is always the one that runs on a
    // machine left warm (or busy) by the other.
    let beside_first = round % 2 == 1;
    if beside_first {
        beside_the_drain(options, env, rigs, runs).await;
    }
    if options.wants("drain")
        || options.wants("cluster")
        || options.wants("endtoend")
        || options.wants("adopt")
        || options.wants("cloudevents")
        || options.wants("parking")
    {
        let r = harness::drain(env, n, 1, Shape::Mixed, &[]).await;
        runs.add("drain (keep rows)", r);
    }
    if options.wants("parking") {
        // Right after the default drain, as the envelope's.
        let topics = harness::parking_setting();
        let parking = [("OUTBOX__TOPICS", topics.as_str())];
        let r = harness::drain(env, n, 1, Shape::Mixed, &parking).await;
        runs.add(PARKING, r);
        // The consumers' side: both end-to-end drains, one after the other.
        runs.add(E2E_DRAIN, endtoend::drain(env, n).await);
        runs.add(PARKING_E2E, endtoend::drain(&env.with_park_keys(), n).await);
    }
    if options.wants("cloudevents") || options.wants("adopt") {
        // Right after the default drain: the envelope's ratio compares one minute of the
        // machine.
        let envelope = [("OUTBOX__REDIS__ENVELOPE", "cloudevents")];
        let r = harness::drain(env, n, 1, Shape::Mixed, &envelope).await;
        runs.add(CLOUDEVENTS, r);
    }
    if options.wants("endtoend") && !options.wants("parking") {
        runs.add(E2E_DRAIN, endtoend::drain(env, n).await);
    }
    if options.wants("adopt") {
        adoption(env, n, runs).await;
    }
    if options.wants("fleet") {
        // The two side by side, so their ratio compares one minute of the machine.
        let fleet_env = env.with_fleet(crate::fleet::SHAPE);
        let r = harness::drain(&fleet_env, n, 1, Shape::Mixed, &[]).await;
        runs.add(FLEET_RELAY, r);
        runs.add(FLEET_E2E, endtoend::drain(&fleet_env, n).await);
    }
    if !beside_first {
        beside_the_drain(options, env, rigs, runs).await;
    }
    other_drains(options, env, runs).await;
    if let Some(servers) = &rigs.tls {
        // Both sides in every round, in alternating order, like the ceiling's pair.
        let sides = alternated(round);
        for on in sides {
            let r = Rigs::tls_drain(servers, env, on, n).await;
            runs.add(if on { TLS_ON } else { TLS_OFF }, r);
        }
    }
    if let Some(servers) = &rigs.replicated {
        let sides = alternated(round);
        for wait in sides {
            let r = match servers {
                Ok(servers) => {
                    let extra: &[(&str, &str)] = match wait {
                        true => &[("OUTBOX__REDIS__WAIT_REPLICAS", "1")],
                        false => &[],
                    };
                    harness::drain(&servers.env(env), n, 1, Shape::Mixed, extra).await
                }
                Err(e) => Err(anyhow::anyhow!("replicated servers: {e:#}")),
            };
            runs.add(if wait { WAIT_ONE } else { NO_WAIT }, r);
        }
    }
    if let Some(servers) = &rigs.standbys {
        let sides = alternated(round);
        for wait in sides {
            let r = match servers {
                Ok(servers) => {
                    harness::drain(&servers.env(env, wait), n, 1, Shape::Mixed, &[]).await
                }
                Err(e) => Err(anyhow::anyhow!("postgres with a standby: {e:#}")),
            };
            runs.add(if wait { STANDBYS_ON } else { STANDBYS_OFF }, r);
        }
    }
    if options.wants("baseline") {
        let r = reference::seed_algorithm(env, n.min(20_000)).await;
        runs.add("baseline: seed algorithm, indexed", r);
    }
}

/// A pair's two sides (off, on) in the order round `round` runs them: alternated, so neither
/// always runs on a machine left warm (or busy) by the other.
fn alternated(round: u32) -> [bool; 2] {
    if round.is_multiple_of(2) {
        [false, true]
    } else {
        [true, false]
    }
}

/// The scenarios compared with the keep-rows drain of the same round: the ceiling, the
/// cluster drain.
async fn beside_the_drain(options: &BenchOptions, env: &BenchEnv, rigs: &Rigs, runs: &mut Runs) {
    let n = options.events;
    if options.wants("ceiling") {
        runs.add(CEILING, reference::ceiling(env, n).await);
    }
    if options.wants("cluster") {
        runs.add(CLUSTER, rigs.cluster_drain(n).await);
    }
}

/// The drains of other shapes and settings: delete mode, replicas, bloat, hot key.
async fn other_drains(options: &BenchOptions, env: &BenchEnv, runs: &mut Runs) {
    let n = options.events;
    if options.wants("drain") {
        let delete = [("OUTBOX__RETENTION__PUBLISHED_FOR", "0s")];
        let r = harness::drain(env, n, 1, Shape::Mixed, &delete).await;
        runs.add("drain (delete mode)", r);
    }
    if options.wants("replicas") {
        for replicas in [1, 2, 3] {
            let r = harness::drain(env, n, replicas, Shape::Mixed, &[]).await;
            runs.add(&format!("replicas: {replicas}"), r);
        }
    }
    if options.wants("bloat") {
        let shape = Shape::Bloated(options.bloat_rows);
        let r = harness::drain(env, n, 1, shape, &[]).await;
        let name = format!("bloat: behind {} published rows", options.bloat_rows);
        runs.add(&name, r);
    }
    if options.wants("hotkey") {
        let r = harness::drain(env, n, 1, Shape::HotKey, &[]).await;
        runs.add("hot key (one partition key)", r);
    }
}
