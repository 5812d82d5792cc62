//! The `outbox-relay` binary: parses the command line, loads the settings, hands over to
//! `commands`, and turns the result into an exit status (2: a bad setting, in one line; 70: an
//! actor died and the replica must be restarted; 1: any other failure).

use std::process::ExitCode;

use clap::Parser;
use outbox_relay::app::ActorLost;
use outbox_relay::cli::Cli;
use outbox_relay::commands;
use outbox_relay::config::ConfigError;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // One TLS implementation for Postgres and Redis; installing it cannot fail but once.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = match commands::settings_for(&cli.command) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("outbox-relay: {error}");
            return ExitCode::from(2);
        }
    };
    let traces = match outbox_relay::telemetry::install(settings.log.format, "outbox-relay") {
        Ok(exporting) => exporting,
        Err(error) => {
            eprintln!("outbox-relay: {error}");
            return ExitCode::from(2);
        }
    };
    let system = actix_rt::System::new();
    match system.block_on(commands::execute(cli.command, settings, traces.is_active())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("outbox-relay: {error:#}");
            if error.downcast_ref::<ActorLost>().is_some() {
                ExitCode::from(ActorLost::EXIT_CODE)
            } else if error.downcast_ref::<ConfigError>().is_some() {
                // Settings that only the database can refuse (partition counts).
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
