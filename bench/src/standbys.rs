//! The standbys scenario's Postgres: a primary of its own with one streaming standby (both
//! `fsync=off`, like the machine's shared server in CI), so the drains and steady runs with and
//! without `database.wait_standbys = 1` differ only by the wait: the standby streams the same
//! WAL in both.

use outbox_testkit::postgres::LocalPostgres;

use crate::BenchEnv;

/// The relay setting the scenario turns on.
pub const WAIT: (&str, &str) = ("OUTBOX__DATABASE__WAIT_STANDBYS", "1");

/// The primary and its standby, stopped on drop.
pub struct Standbys {
    primary: LocalPostgres,
    _standby: LocalPostgres,
}

impl Standbys {
    /// Starts the primary and a standby streaming from it.
    pub fn start() -> anyhow::Result<Standbys> {
        let primary = LocalPostgres::start("")?;
        let standby = primary.standby_through(primary.port())?;
        Ok(Standbys {
            primary,
            _standby: standby,
        })
    }

    /// `base` on this primary, the relays waiting for its standby when `wait`.
    pub fn env(&self, base: &BenchEnv, wait: bool) -> BenchEnv {
        let env = base.on_postgres(&self.primary.url());
        match wait {
            true => env.with_relay_env(WAIT.0, WAIT.1),
            false => env,
        }
    }
}
