//! What each command needs and does: its settings (the demo has its own defaults), the
//! settings it cannot run without, and the call that runs it. `main` only parses the command
//! line, reports errors and picks the exit status.

use crate::cli::Command;
use crate::config::{ConfigError, Settings};
use crate::tail;
use crate::{app, demo};

/// Loads and checks the settings `command` runs with.
pub fn settings_for(command: &Command) -> Result<Settings, ConfigError> {
    let (base, common) = match command {
        Command::Run(c) | Command::Config(c) => (Settings::default(), c),
        Command::Migrate(m) => (Settings::default(), &m.common),
        Command::Demo(d) => (demo::default_settings(), &d.common),
        Command::Tail(t) => (Settings::default(), &t.common),
        Command::Repartition(r) => (Settings::default(), &r.common),
        Command::Replay(r) => (Settings::default(), &r.common),
    };
    let settings = Settings::load(base, common.config.as_deref(), &common.overrides())?;
    match command {
        Command::Migrate(_) | Command::Repartition(_) | Command::Replay(_) => {
            settings.database_url()?;
        }
        Command::Run(_) | Command::Config(_) => {
            settings.database_url()?;
            app::check_admin_exposure(&settings)?;
        }
        Command::Demo(_) => app::check_admin_exposure(&settings)?,
        Command::Tail(_) => {}
    }
    Ok(settings)
}

/// Runs `command` to its end; `traced`: spans are exported, so the publisher makes them.
pub async fn execute(command: Command, settings: Settings, traced: bool) -> anyhow::Result<()> {
    match command {
        Command::Migrate(m) => app::migrate(&settings, m.wait, &m.release).await,
        Command::Run(_) => app::run(settings, traced).await,
        Command::Demo(d) => demo::run(settings, d.rate, traced).await,
        Command::Tail(t) => {
            let options = tail::TailOptions {
                topic: t.topic,
                from: t.from,
                group: t.group,
                count: t.count,
                partition: t.partition,
            };
            Ok(tail::run(&settings, options).await?)
        }
        Command::Repartition(r) => crate::repartition::run(&settings, &r.topic, r.partitions).await,
        Command::Replay(r) => replay(&settings, &r).await,
        Command::Config(_) => {
            print!("{}", crate::config::show::masked_toml(&settings)?);
            Ok(())
        }
    }
}

/// `replay`: the admin's replay action, recorded in the audit log as done by `cli`. A time
/// that is neither RFC 3339 nor a duration, or an empty range, exits 2.
async fn replay(settings: &Settings, args: &crate::cli::ReplayArgs) -> anyhow::Result<()> {
    use crate::admin::actions::{ActionError, Actions, ReplayRange};
    let range = ReplayRange::parse(&args.since, args.until.as_deref()).map_err(|e| {
        let setting = match &e {
            ActionError::BadTime { field, .. } => format!("--{field}"),
            _ => "--until".to_string(),
        };
        ConfigError {
            setting,
            message: e.to_string(),
        }
    })?;
    if let Err(e) = crate::admin::actions::check_topic(&args.topic) {
        return Err(ConfigError {
            setting: "TOPIC".into(),
            message: e.to_string(),
        }
        .into());
    }
    let url = settings.database_url()?;
    let db = crate::db::pool::build(
        url,
        2,
        app::db_session(settings),
        crate::db::pool::Drivers::Caller,
        &crate::db::pool::ConnectLog::default(),
    );
    let publisher = app::open_publisher(settings, false)?;
    let replayed = Actions::new(&db, None)
        .replay(&publisher, "cli", &args.topic, range)
        .await?;
    println!("{}", serde_json::json!({ "replayed": replayed }));
    Ok(())
}
