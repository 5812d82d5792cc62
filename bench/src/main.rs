//! The `outbox-bench` binary: parses the flags, loads the settings, and runs
//! [`outbox_bench::run`] on a single-threaded runtime, so that the bench's own producers and
//! stream readers take one core at most and leave the rest to Postgres, Redis and the relay
//! processes it measures. Exit status 2: a bad flag, setting or relay binary, in one line;
//! 1: a scenario failed.

use std::process::ExitCode;

use clap::Parser as _;
use outbox_bench::cli::BenchArgs;

fn main() -> ExitCode {
    let args = BenchArgs::parse();
    // One TLS implementation for Postgres and Redis; installing it cannot fail but once.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let options = match args.settings() {
        Ok(settings) => args.options(&settings),
        Err(error) => Err(error.into()),
    };
    let options = match options {
        Ok(options) => options,
        Err(error) => {
            eprintln!("outbox-bench: {error:#}");
            return ExitCode::from(2);
        }
    };
    let _traces = match outbox_relay::telemetry::install(
        outbox_relay::config::LogFormat::Text,
        "outbox-bench",
    ) {
        Ok(exporting) => exporting,
        Err(error) => {
            eprintln!("outbox-bench: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    match runtime.map(|rt| rt.block_on(outbox_bench::run(options))) {
        Ok(Ok(_report)) => ExitCode::SUCCESS,
        Ok(Err(error)) => {
            eprintln!("outbox-bench: {error:#}");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("outbox-bench: no runtime: {error}");
            ExitCode::FAILURE
        }
    }
}
