//! outbox-relay: publishes a Postgres transactional outbox to Redis Streams.
//!
//! Map of the crate:
//! - [`cli`], [`config`]: the command line and the layered, validated settings.
//! - [`commands`]: what each command needs and runs.
//! - [`app`]: wiring of pools, actors, admin server, signals, graceful shutdown.
//! - [`db`]: the pool, embedded migrations, and all SQL, one module per table.
//! - [`adopt`]: an adopted table's `[[tables]]` entry (an existing outbox table the relay
//!   publishes from), which `config` reads and `db::adopted` prepares.
//! - [`pgurl`]: a `DATABASE_URL` as libpq reads it (TLS parameters checked), which `config`
//!   checks and `db` connects with.
//! - [`relay`]: the supervised actors: claimer, dispatchers, retry scheduler, cleaner,
//!   heartbeat, listener; the claim cycle in stages; the pure policies (backoff, ordering,
//!   retry plan, settling outcomes); what a panic does (`relay::supervision`).
//! - [`publish`]: the Redis Streams publisher (deduplicating Lua script, error verdicts).
//! - [`admin`]: the HTTP server: health, metrics, API, UI.
//! - [`producer`]: the Rust API to enqueue events in the caller's transaction.
//! - [`demo`]: the self-contained demo.
//! - [`repartition`]: `outbox-relay repartition TOPIC N`, a topic's partition count changed
//!   without breaking per-key order for its declared groups.
//! - [`tail`]: `outbox-relay tail`, a topic's entries as JSON lines (the consumer side itself is
//!   the `outbox-consumer` crate in `consumer/`).
//! - [`telemetry`]: logs and metrics, one function per event.
//!
//! Not shipped here: the benchmark (the `outbox-bench` binary, `bench/`) and the test rigs
//! (local Redis Cluster, test CA: `outbox-testkit`, `testkit/`) are crates of their own.

pub mod admin;
pub mod adopt;
pub mod app;
pub mod cli;
pub mod commands;
pub mod config;
pub mod db;
pub mod demo;
pub mod pgurl;
pub mod producer;
pub mod publish;
pub mod relay;
pub mod repartition;
pub mod tail;
pub mod telemetry;

/// This binary's version, reported in heartbeats.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// The crate modules `module`'s source names as `crate::<name>`, itself aside.
    fn imports(module: &str) -> Vec<String> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files: Vec<PathBuf> = vec![src.join(format!("{module}.rs"))];
        let mut dirs = vec![src.join(module)];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                match path.is_dir() {
                    true => dirs.push(path),
                    false => files.push(path),
                }
            }
        }
        let mut found: Vec<String> = Vec::new();
        for file in files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        {
            let Ok(text) = std::fs::read_to_string(file) else {
                continue;
            };
            for (at, _) in text.match_indices("crate::") {
                let name: String = text[at + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name != module && !found.contains(&name) {
                    found.push(name);
                }
            }
        }
        found.sort();
        found
    }

    /// config and db are leaves (docs/development.md, "Layers"): what they share with the
    /// rest is in `outbox_core`, `pgurl` or `adopt`, and conversions are in `app`.
    #[test]
    fn the_base_modules_are_leaves() {
        assert_eq!(imports("config"), ["adopt", "pgurl"]);
        assert_eq!(imports("db"), ["adopt", "pgurl"]);
        assert!(imports("pgurl").is_empty());
        assert!(imports("adopt").is_empty());
    }
}
