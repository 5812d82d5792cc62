//! The bench's results: one [`Figure`] per scenario, printed as a table and written as JSON.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::BenchOptions;

/// One scenario's figures. Absent numbers do not apply to the scenario.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Figure {
    /// Scenario name.
    pub scenario: String,
    /// Events moved.
    pub events: u64,
    /// Wall time of the drain, seconds.
    pub seconds: Option<f64>,
    /// Events per second (for drains: from the first entry to the last).
    pub events_per_sec: Option<f64>,
    /// For drains: milliseconds from starting the relays to their first entries.
    pub start_up_ms: Option<f64>,
    /// Commit-to-stream latency percentiles, milliseconds.
    pub p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub p99_ms: Option<f64>,
    /// 99.9th percentile, ms.
    pub p999_ms: Option<f64>,
    /// Maximum, ms.
    pub max_ms: Option<f64>,
    /// Relay CPU seconds (all relay processes).
    pub cpu_seconds: Option<f64>,
    /// Peak resident memory of the largest relay process, MB.
    pub peak_rss_mb: Option<f64>,
    /// Postgres WAL bytes per event.
    pub wal_bytes_per_event: Option<f64>,
    /// CPU seconds of the Redis server during the span.
    pub redis_cpu_seconds: Option<f64>,
    /// Average cores busy on the whole machine during the span (of the machine's cores).
    pub busy_cores: Option<f64>,
    /// Latency per window of a long steady run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<crate::latency::WindowFigure>,
    /// The outbox table after a long steady run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<crate::latency::TableFigure>,
    /// Events/s of every round, in run order, when the scenario ran more than once.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rounds_events_per_sec: Vec<f64>,
    /// Why the scenario produced no figures.
    pub error: Option<String>,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// When it ran (RFC 3339).
    pub started_at: String,
    /// The version of the relay crate this bench was built with.
    pub version: String,
    /// Preloaded events per drain.
    pub events: u64,
    /// Figures in run order.
    pub figures: Vec<Figure>,
    /// Our drain against the other scenarios of this run (see [`Report::compare`]).
    pub ratios: Vec<Ratio>,
}

/// One scenario's events/s over another's, both from this run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ratio {
    /// What over what, e.g. `drain / ceiling`.
    pub name: String,
    /// The median of the rounds' ratios; after a single round, the ratio of the two figures.
    pub value: f64,
    /// Each round's ratio in run order, when there were several rounds.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<f64>,
}

impl Ratio {
    /// `num` over `den`, round by round when both ran the same rounds: a ratio of medians
    /// would divide figures taken minutes apart, on a machine whose speed drifts between them.
    pub fn between(name: &str, num: &Figure, den: &Figure) -> Option<Ratio> {
        let (n, d) = (&num.rounds_events_per_sec, &den.rounds_events_per_sec);
        if n.len() > 1 && n.len() == d.len() {
            let rounds: Vec<f64> = n.iter().zip(d).map(|(n, d)| n / d).collect();
            let mut sorted = rounds.clone();
            sorted.sort_by(f64::total_cmp);
            let mid = sorted.len() / 2;
            let value = if sorted.len().is_multiple_of(2) {
                (sorted[mid - 1] + sorted[mid]) / 2.0
            } else {
                sorted[mid]
            };
            return Some(Ratio {
                name: name.into(),
                value,
                rounds,
            });
        }
        Some(Ratio {
            name: name.into(),
            value: num.events_per_sec? / den.events_per_sec?,
            rounds: Vec::new(),
        })
    }
}

impl Figure {
    /// With the events/s of every round (kept only when there was more than one).
    pub fn with_runs(mut self, rounds: Vec<f64>) -> Self {
        if rounds.len() > 1 {
            self.rounds_events_per_sec = rounds;
        }
        self
    }
}

impl Report {
    /// An empty report for `options`.
    pub fn new(options: &BenchOptions) -> Self {
        Report {
            started_at: chrono::Utc::now().to_rfc3339(),
            version: outbox_relay::VERSION.to_string(),
            events: options.events,
            figures: Vec::new(),
            ratios: Vec::new(),
        }
    }

    /// Adds a figure and prints it at once (a long run shows progress).
    pub fn push(&mut self, figure: Figure) {
        eprintln!("bench: {} done", figure.scenario);
        self.figures.push(figure);
    }

    /// Adds a scenario's figure, or its failure: one failing scenario does not lose the rest.
    pub fn record(&mut self, name: &str, result: anyhow::Result<Figure>) {
        match result {
            Ok(figure) => self.push(figure),
            Err(e) => {
                eprintln!("bench: {name} failed: {e:#}");
                self.figures.push(Figure {
                    scenario: name.into(),
                    error: Some(format!("{e:#}")),
                    ..Figure::default()
                });
            }
        }
    }

    /// True when some scenario failed.
    pub fn failed(&self) -> bool {
        self.figures.iter().any(|f| f.error.is_some())
    }

    fn find(&self, prefix: &str) -> Option<&Figure> {
        self.figures
            .iter()
            .find(|f| f.scenario.starts_with(prefix) && f.error.is_none())
    }

    /// The ratio `name` of the scenarios named `num...` and `den...`, when both ran.
    fn ratio_of(&self, name: &str, num: &str, den: &str) -> Option<Ratio> {
        Ratio::between(name, self.find(num)?, self.find(den)?)
    }

    /// Works out the keep-rows drain's ratios to the bloat, seed, ceiling and cluster
    /// scenarios.
    pub fn compare(&mut self) {
        let tls = self.ratio_of("TLS / plain drain", "tls: on", "tls: off");
        let fleet = self.ratio_of(
            "fleet: end to end / relay-only drain",
            "fleet: drain",
            "fleet: relay-only",
        );
        let durability = self.ratio_of(
            "wait_replicas=1 / no wait drain",
            "durability: wait_replicas",
            "durability: no wait",
        );
        let standbys = self.ratio_of(
            "wait_standbys=1 / no wait drain",
            "standbys: wait_standbys",
            "standbys: no wait",
        );
        let park_keys = self.ratio_of(
            "park_keys / default end to end",
            "parking: end to end",
            "end to end: drain",
        );
        self.ratios = tls
            .into_iter()
            .chain(fleet)
            .chain(durability)
            .chain(standbys)
            .chain(park_keys)
            .collect();
        let Some(ours) = self.find("drain (keep") else {
            return;
        };
        let ratios = [
            ("bloat / clean drain", "bloat", true),
            ("drain / seed algorithm", "baseline", false),
            ("drain / ceiling", "ceiling", false),
            ("cluster / single node", "redis cluster", true),
            ("end to end / relay-only drain", "end to end: drain", true),
            (
                "cloudevents / default envelope drain",
                "cloudevents: drain",
                true,
            ),
            ("park_on_dead / default drain", "parking: drain", true),
            (
                "adopted / native drain",
                "adopted table: drain, plain",
                true,
            ),
            (
                "adopted insert-then-delete / native drain",
                "adopted table: drain, insert-then-delete",
                true,
            ),
        ]
        .into_iter()
        .filter_map(|(name, other, other_on_top)| {
            let other = self.find(other)?;
            match other_on_top {
                true => Ratio::between(name, other, ours),
                false => Ratio::between(name, ours, other),
            }
        })
        .collect::<Vec<_>>();
        self.ratios.extend(ratios);
        let producer = [
            (
                "producer inserts: adopted / not adopted",
                "producer inserts: adopted table",
                "producer inserts: table not adopted",
            ),
            (
                "producer inserts: adopted, relay busy / not adopted",
                "producer inserts: adopted, relay busy",
                "producer inserts: table not adopted",
            ),
            (
                "producer inserts: adopted, NOTIFY off / not adopted",
                "producer inserts: adopted, NOTIFY off",
                "producer inserts: table not adopted",
            ),
            (
                "producer inserts: adopted / into outbox",
                "producer inserts: adopted table",
                "producer inserts: into outbox",
            ),
        ]
        .into_iter()
        .filter_map(|(name, num, den)| self.ratio_of(name, num, den))
        .collect::<Vec<_>>();
        self.ratios.extend(producer);
    }

    /// Prints the table, with the ratios to the references measured in this run.
    pub fn print(&self) {
        fn cell(v: Option<f64>, decimals: usize) -> String {
            v.map(|v| format!("{v:.decimals$}"))
                .unwrap_or_else(|| "-".into())
        }
        println!(
            "{:<36} {:>9} {:>11} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>6}",
            "scenario",
            "events",
            "events/s",
            "p50 ms",
            "p99 ms",
            "p99.9",
            "max ms",
            "cpu s",
            "rss MB",
            "WAL B/ev",
            "redis s",
            "busy"
        );
        for f in &self.figures {
            println!(
                "{:<36} {:>9} {:>11} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>6}",
                f.scenario,
                f.events,
                cell(f.events_per_sec, 0),
                cell(f.p50_ms, 1),
                cell(f.p99_ms, 1),
                cell(f.p999_ms, 1),
                cell(f.max_ms, 1),
                cell(f.cpu_seconds, 2),
                cell(f.peak_rss_mb, 1),
                cell(f.wal_bytes_per_event, 0),
                cell(f.redis_cpu_seconds, 2),
                cell(f.busy_cores, 2),
            );
        }
        for f in &self.figures {
            if !f.rounds_events_per_sec.is_empty() {
                let rounds: Vec<String> = f
                    .rounds_events_per_sec
                    .iter()
                    .map(|r| format!("{r:.0}"))
                    .collect();
                println!("{}: median of rounds {}", f.scenario, rounds.join(", "));
            }
        }
        for f in &self.figures {
            for w in &f.windows {
                println!(
                    "{}: from {:>4} s: {} events, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                    f.scenario, w.from_s, w.events, w.p50_ms, w.p99_ms, w.max_ms
                );
            }
            if let Some(t) = &f.table {
                println!(
                    "{}: table {:.0} MB, {} live rows, {} dead, {} autovacuums, {} vacuums; indexes: {}",
                    f.scenario,
                    t.heap_bytes as f64 / 1e6,
                    t.live_rows,
                    t.dead_rows,
                    t.autovacuums,
                    t.vacuums,
                    t.indexes
                );
            }
        }
        for f in &self.figures {
            if let Some(error) = &f.error {
                println!("{}: FAILED: {error}", f.scenario);
            }
        }
        for ratio in &self.ratios {
            let decimals = if ratio.value >= 10.0 { 1 } else { 2 };
            let times = if decimals == 1 { "x" } else { "" };
            print!("{}: {:.decimals$}{times}", ratio.name, ratio.value);
            if !ratio.rounds.is_empty() {
                let rounds: Vec<String> = ratio
                    .rounds
                    .iter()
                    .map(|r| format!("{r:.decimals$}"))
                    .collect();
                print!(" (median of rounds {})", rounds.join(", "));
            }
            println!();
        }
    }

    /// Writes `bench-<timestamp>.json` and the chart `bench-<timestamp>.svg` under `dir`;
    /// returns the JSON's path.
    pub fn write_json(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
        let path = dir.join(format!("bench-{stamp}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(self)?)?;
        let chart = crate::chart::render(&self.figures, &self.started_at);
        std::fs::write(path.with_extension("svg"), chart)?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(rate: f64, rounds: &[f64]) -> Figure {
        Figure {
            events_per_sec: Some(rate),
            rounds_events_per_sec: rounds.to_vec(),
            ..Figure::default()
        }
    }

    #[test]
    fn a_ratio_is_the_median_of_the_rounds_ratios_not_the_ratio_of_medians() {
        // Two rounds say the drain is half the ceiling (a fast minute, then a slow one), the
        // third 0.6; the medians alone (36 and 60) would report that third round's 0.6.
        let drain = figure(36.0, &[40.0, 20.0, 36.0]);
        let ceiling = figure(60.0, &[80.0, 40.0, 60.0]);
        let ratio = Ratio::between("drain / ceiling", &drain, &ceiling).expect("ratio");
        assert_eq!(ratio.rounds, vec![0.5, 0.5, 0.6]);
        assert_eq!(ratio.value, 0.5);
        let even = Ratio::between("r", &figure(3.0, &[1.0, 3.0]), &figure(1.0, &[1.0, 1.0]));
        assert_eq!(even.map(|r| r.value), Some(2.0));
    }

    #[test]
    fn a_single_round_divides_the_figures() {
        let ratio = Ratio::between("r", &figure(30.0, &[]), &figure(60.0, &[])).expect("ratio");
        assert_eq!((ratio.value, ratio.rounds.len()), (0.5, 0));
        let missing = Figure::default();
        assert_eq!(Ratio::between("r", &missing, &figure(60.0, &[])), None);
    }
}
