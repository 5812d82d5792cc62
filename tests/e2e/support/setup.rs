//! The common start of a test, as one call: a migrated database of its own, a key prefix of
//! its own on the shared Redis, and a relay on both, ready. A test that needs something else
//! first (events before the relay starts, its own Redis) builds the pieces itself.

use std::time::Duration;

use super::{base_env, RelayProc, TestDb, TestRedis};

/// What [`setup`] starts. Fields drop in order: the relay stops before its database goes.
pub struct Bundle {
    pub relay: RelayProc,
    pub redis: TestRedis,
    pub db: TestDb,
}

/// Relay `name` with the base settings and `extra` (which win over them), on a database and
/// a key prefix of its own; returns once `/readyz` answers 200.
pub async fn setup(name: &str, extra: &[(&str, &str)]) -> Bundle {
    setup_with(name, |db, redis| {
        let mut env = base_env(db, redis);
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    })
    .await
}

/// [`setup`] with the settings `env` gives for the database and prefix (a module's own base).
pub async fn setup_with(
    name: &str,
    env: impl FnOnce(&TestDb, &TestRedis) -> Vec<(String, String)>,
) -> Bundle {
    setup_on(TestRedis::shared(), name, env).await
}

/// [`setup_with`] on `redis`: a prefix on a server of the test's own (to stop, fill or fail
/// over) or behind a proxy.
pub async fn setup_on(
    redis: TestRedis,
    name: &str,
    env: impl FnOnce(&TestDb, &TestRedis) -> Vec<(String, String)>,
) -> Bundle {
    let db = TestDb::new().await;
    let relay = RelayProc::spawn(name, &env(&db, &redis));
    relay.wait_ready(Duration::from_secs(30)).await;
    Bundle { relay, redis, db }
}
