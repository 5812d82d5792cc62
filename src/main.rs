//! The `outbox-relay` binary: parses the command line and settings, then hands over to `app`.
//! A bad setting exits with status 2 and one line naming it.

use std::process::ExitCode;

use clap::Parser;
use outbox_relay::cli::{Cli, Command};
use outbox_relay::config::{ConfigError, Settings};
use outbox_relay::{app, demo};

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn config_exit(error: &ConfigError) -> ExitCode {
    eprintln!("outbox-relay: {error}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (base, common) = match &cli.command {
        Command::Migrate(c) | Command::Run(c) => (Settings::default(), c.clone()),
        Command::Demo(d) => (demo::default_settings(), d.common.clone()),
        Command::Bench(b) => (Settings::default(), b.common.clone()),
    };
    let settings = match Settings::load(base, common.config.as_deref(), &common.overrides()) {
        Ok(s) => s,
        Err(e) => return config_exit(&e),
    };
    let required = match &cli.command {
        Command::Migrate(_) => settings.database_url().map(|_| ()),
        Command::Run(_) => settings
            .database_url()
            .map(|_| ())
            .and_then(|_| app::check_admin_exposure(&settings)),
        Command::Demo(_) | Command::Bench(_) => app::check_admin_exposure(&settings),
    };
    if let Err(e) = required {
        return config_exit(&e);
    }
    init_tracing();
    let system = actix_rt::System::new();
    let result = match cli.command {
        Command::Migrate(_) => system.block_on(app::migrate(&settings)),
        Command::Run(_) => system.block_on(app::run(settings)),
        Command::Demo(d) => system.block_on(demo::run(settings, d.rate)),
        Command::Bench(b) => system.block_on(async move {
            let options = outbox_relay::bench::BenchOptions {
                events: b.events,
                rates: b.rates,
                polled_rates: b.polled_rates,
                notify_always_rates: b.notify_always_rates,
                bloat_rows: b.bloat_rows,
                soak_rate: b.soak_rate,
                soak_duration: b.soak_duration,
                soak_vacuum: b.soak_vacuum,
                soak_delete: b.soak_delete,
                repeat: b.repeat,
                duration: b.duration,
                only: b.only,
                out_dir: b.out,
                postgres_url: settings
                    .database
                    .url
                    .clone()
                    .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".into()),
                redis_url: settings.redis.url.clone(),
            };
            outbox_relay::bench::run(options).await.map(|_| ())
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("outbox-relay: {e:#}");
            ExitCode::FAILURE
        }
    }
}
