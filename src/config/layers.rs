//! Loading: the layers, lowest first, built-in defaults < `--config` TOML file < environment
//! (`OUTBOX__SECTION__KEY`, plus `DATABASE_URL` and `REDIS_URL`, and the secrets' `_FILE`
//! variables of [`secrets`]) < command-line flags. figment
//! does the layering (it keeps track of which layer a bad value came from, and its errors
//! carry the key path, which is what our one-line error needs); humantime-serde parses the
//! human durations (`250ms`, `30s`, `7d`).

use std::path::Path;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;

use super::relay::MIN_STALL_AFTER;
use super::{rules, secrets, ConfigError, Settings};

/// Values given on the command line; they override every other layer.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--database-url`
    pub database_url: Option<String>,
    /// `--redis-url`
    pub redis_url: Option<String>,
    /// `--admin-addr`
    pub admin_addr: Option<String>,
    /// `--instance-id`
    pub instance_id: Option<String>,
}

impl Settings {
    /// Loads the layers and validates the result. `base` is the bottom layer (the built-in
    /// defaults, or the demo's defaults).
    pub fn load(
        base: Settings,
        file: Option<&Path>,
        overrides: &Overrides,
    ) -> Result<Settings, ConfigError> {
        // The layers above the defaults alone, to tell which settings the user gave.
        let mut upper = Figment::new();
        if let Some(path) = file {
            if !path.exists() {
                return Err(ConfigError::new(
                    "--config",
                    format!("file {} does not exist", path.display()),
                ));
            }
            upper = upper.merge(Toml::file(path));
        }
        upper = upper
            .merge(
                Env::prefixed("OUTBOX__")
                    .filter(|k| !secrets::is_file_var(&format!("OUTBOX__{k}")))
                    .split("__"),
            )
            .merge(
                Env::raw()
                    .only(&["DATABASE_URL"])
                    .map(|_| "database.url".into()),
            )
            .merge(Env::raw().only(&["REDIS_URL"]).map(|_| "redis.url".into()));
        for (setting, value) in secrets::from_files(&|var| std::env::var(var).ok())? {
            upper = upper.merge(Serialized::default(setting, value));
        }
        let flags = [
            ("database.url", &overrides.database_url),
            ("redis.url", &overrides.redis_url),
            ("admin.addr", &overrides.admin_addr),
            ("instance_id", &overrides.instance_id),
        ];
        for (key, value) in flags {
            if let Some(value) = value {
                upper = upper.merge(Serialized::default(key, value));
            }
        }
        let figment = Figment::from(Serialized::defaults(base)).merge(upper.clone());
        let mut settings: Settings = figment.extract().map_err(from_figment)?;
        let given = |key: &str| upper.contains(key);
        settings.follow_lease(&given);
        rules::check(&settings, &given)?;
        Ok(settings)
    }

    /// Checks what serde cannot: URLs, ranges and relations between settings. A broken rule
    /// names its first setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        rules::check(self, &|_| true)
    }

    /// Defaults that depend on `relay.lease` follow it, unless the user set them: a Redis round
    /// trip must end well within the lease, the dedup window must outlast two leases (a claim
    /// abandoned by a crashed replica is retaken within one), and a claim loop is stalled only
    /// when it has been silent for longer than a cycle may take or the poll may wait.
    fn follow_lease(&mut self, given: &dyn Fn(&str) -> bool) {
        let lease = self.relay.lease;
        if !given("redis.timeout") {
            self.redis.timeout = self.redis.timeout.min(lease / 2);
        }
        if !given("redis.dedup_window") {
            self.redis.dedup_window = self.redis.dedup_window.max(lease * 2);
        }
        if !given("relay.stall_after") {
            let cycle_gap = lease.max(self.relay.poll_interval);
            self.relay.stall_after = (cycle_gap * 2).max(MIN_STALL_AFTER);
        }
    }
}

fn from_figment(error: figment::Error) -> ConfigError {
    use figment::error::Kind;
    let mut path = error.path.join(".");
    let message = match &error.kind {
        Kind::UnknownField(field, _) => {
            if error.path.last().is_none_or(|last| last != field) {
                path = if path.is_empty() {
                    field.clone()
                } else {
                    format!("{path}.{field}")
                };
            }
            "unknown setting".to_string()
        }
        other => other.to_string(),
    };
    let source = error
        .metadata
        .as_ref()
        .map(|m| format!(" (from {})", m.name))
        .unwrap_or_default();
    if path.is_empty() {
        path = "configuration".into();
    }
    ConfigError {
        setting: path,
        message: format!("{message}{source}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GroupSpec;
    use std::time::Duration;

    #[test]
    fn defaults_are_the_contracts() {
        let s = Settings::default();
        assert_eq!(s.redis.url, "redis://127.0.0.1:6379");
        assert_eq!(s.redis.stream_prefix, "outbox:");
        assert_eq!(s.admin.addr, "127.0.0.1:8080");
        assert_eq!(s.retry.max_attempts, 10);
        assert_eq!(s.retry.base, Duration::from_secs(1));
        assert_eq!(s.retry.max, Duration::from_secs(600));
        assert_eq!(s.retention.published_for, Duration::from_secs(7 * 86400));
        assert_eq!(s.retention.interval, Duration::from_secs(60));
        assert_eq!(s.relay.lease, Duration::from_secs(30));
        assert_eq!(s.redis.dedup_window, Duration::from_secs(900));
        assert!(s.validate().is_ok());
    }

    #[test]
    fn toml_file_layers_under_flags() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "[retry]\nbase = \"250ms\"\nmax_attempts = 3\n[database]\nurl = \"postgres://a@h/db\"\n",
        )
        .expect("write");
        let overrides = Overrides {
            database_url: Some("postgres://b@h/db".into()),
            ..Default::default()
        };
        let s = Settings::load(Settings::default(), Some(&path), &overrides).expect("load");
        assert_eq!(s.retry.base, Duration::from_millis(250));
        assert_eq!(s.retry.max_attempts, 3);
        assert_eq!(s.database.url.as_deref(), Some("postgres://b@h/db"));
    }

    #[test]
    fn unknown_key_names_the_setting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[retry]\nbasee = \"1s\"\n").expect("write");
        let err = Settings::load(Settings::default(), Some(&path), &Overrides::default())
            .expect_err("must fail");
        assert_eq!(err.setting, "retry.basee");
    }

    #[test]
    fn numeric_text_settings_are_text() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "instance_id = 42\n[admin]\ntoken = 123456\n").expect("write");
        let s =
            Settings::load(Settings::default(), Some(&path), &Overrides::default()).expect("load");
        assert_eq!(s.instance_id.as_deref(), Some("42"));
        assert_eq!(s.admin.token.as_deref(), Some("123456"));
    }

    fn load_toml(text: &str) -> Result<Settings, ConfigError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).expect("write");
        Settings::load(Settings::default(), Some(&path), &Overrides::default())
    }

    #[test]
    fn groups_come_as_toml_tables() {
        let s = load_toml(
            "[[groups]]\ntopic = \"orders\"\nname = \"billing\"\n\n[[groups]]\ntopic = \"orders\"\nname = \"audit\"\nstart = \"$\"\n",
        )
        .expect("two groups");
        assert_eq!(s.groups.len(), 2);
        assert_eq!(s.groups[0], GroupSpec::new("orders", "billing"));
        assert_eq!(s.groups[1].start, "$");
        let err = load_toml("[[groups]]\ntopic = \"orders\"\nname = \"a\"\nstart = \"1\"\n")
            .expect_err("a bad start");
        assert_eq!(err.setting, "groups");
    }

    #[test]
    fn defaults_follow_a_short_lease() {
        let s = load_toml("[relay]\nlease = \"3s\"\n").expect("a short lease alone is valid");
        assert_eq!(s.redis.timeout, Duration::from_millis(1500));
        assert_eq!(s.redis.dedup_window, Duration::from_secs(900));
        assert_eq!(s.relay.stall_after, Duration::from_secs(10));
    }

    #[test]
    fn defaults_follow_a_long_lease() {
        let s = load_toml("[relay]\nlease = \"10m\"\n").expect("a long lease alone is valid");
        assert_eq!(s.redis.timeout, Duration::from_secs(5));
        assert_eq!(s.redis.dedup_window, Duration::from_secs(1200));
        assert_eq!(s.relay.stall_after, Duration::from_secs(1200));
    }

    #[test]
    fn a_slow_poll_lengthens_the_stall_limit() {
        let s =
            load_toml("[relay]\npoll_interval = \"60s\"\n").expect("a slow poll alone is valid");
        assert_eq!(s.relay.stall_after, Duration::from_secs(120));
    }

    #[test]
    fn a_given_value_is_kept_and_a_conflict_names_it() {
        let s = load_toml("[relay]\nlease = \"3s\"\n[redis]\ntimeout = \"2s\"\n").expect("valid");
        assert_eq!(s.redis.timeout, Duration::from_secs(2));
        let err = load_toml("[relay]\nlease = \"3s\"\n[redis]\ntimeout = \"4s\"\n")
            .expect_err("timeout above the lease");
        assert_eq!(err.setting, "redis.timeout");
        assert!(err.message.contains("below 3s"), "{}", err.message);
    }

    #[test]
    fn bad_duration_names_the_setting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[relay]\nlease = \"soon\"\n").expect("write");
        let err = Settings::load(Settings::default(), Some(&path), &Overrides::default())
            .expect_err("must fail");
        assert_eq!(err.setting, "relay.lease");
    }
}
