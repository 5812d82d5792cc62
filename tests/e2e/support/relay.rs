//! Real `outbox-relay run` processes: spawned with quick test settings, waited on until they
//! answer, killed with SIGKILL (or stopped with SIGTERM); and [`TokenRelay`], a relay with
//! admin tokens on a database and key prefix of its own, for the API and UI tests.

use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::process::Logged;
use super::{eventually_blocking, form, setup_with, Bundle, Http, TestDb, TestRedis};

pub const BIN: &str = env!("CARGO_BIN_EXE_outbox-relay");

const OUTAGE_CYCLES: &str = "outbox_outage_cycles_total";
const CLAIM_CYCLES: &str = "outbox_claim_cycles_total";

/// `admin.token` of a [`TokenRelay`]: full rights.
pub const ADMIN_TOKEN: &str = "s3cret-admin";
/// `admin.read_only_token` of a [`TokenRelay`]: a viewer.
pub const READ_ONLY_TOKEN: &str = "l00k-only";

/// A running `outbox-relay run` process.
pub struct RelayProc {
    /// Its admin server's port, once read from its log.
    admin_port: OnceLock<u16>,
    process: Logged,
}

/// What the relay logs once its admin server is bound to the port the system picked.
const LISTENING: &str = "admin listening on ";

impl std::ops::Deref for RelayProc {
    type Target = Logged;
    fn deref(&self) -> &Logged {
        &self.process
    }
}

impl std::ops::DerefMut for RelayProc {
    fn deref_mut(&mut self) -> &mut Logged {
        &mut self.process
    }
}

/// A configuration file holding `toml`, kept as long as the returned directory.
pub fn config_file(toml: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("relay.toml");
    std::fs::write(&path, toml).expect("write config");
    let path = path.to_string_lossy().into_owned();
    (dir, path)
}

/// Settings every test relay gets, tuned for quick tests.
pub fn base_env(db: &TestDb, redis: &TestRedis) -> Vec<(String, String)> {
    let cluster = redis
        .cluster
        .then(|| ("OUTBOX__REDIS__CLUSTER".into(), "true".into()));
    let mut env = vec![
        ("DATABASE_URL".into(), db.url.clone()),
        ("REDIS_URL".into(), redis.url.clone()),
        ("OUTBOX__REDIS__STREAM_PREFIX".into(), redis.prefix.clone()),
        ("OUTBOX__RELAY__POLL_INTERVAL".into(), "200ms".into()),
        ("OUTBOX__RELAY__HEARTBEAT_INTERVAL".into(), "1s".into()),
        ("OUTBOX__RELAY__LEASE".into(), "5s".into()),
        ("OUTBOX__REDIS__TIMEOUT".into(), "2s".into()),
        ("OUTBOX__RETRY__BASE".into(), "100ms".into()),
        ("OUTBOX__RETRY__MAX".into(), "1s".into()),
        ("RUST_LOG".into(), "warn,outbox_relay=info".into()),
    ];
    env.extend(cluster);
    env
}

impl RelayProc {
    /// Starts `outbox-relay run` as replica `name` with `env` only, its admin server on a
    /// port the system picks (`127.0.0.1:0`: no port picked here that another process could
    /// take before the relay binds it), its log in the temp dir (`relay-<name>-<uuid>.log`).
    pub fn spawn(name: &str, env: &[(String, String)]) -> RelayProc {
        let log = std::env::temp_dir().join(format!(
            "relay-{name}-{}.log",
            uuid::Uuid::new_v4().simple()
        ));
        let mut cmd = Command::new(BIN);
        cmd.arg("run")
            .env_clear()
            .env("PATH", std::env::var("PATH").expect("PATH"))
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("OUTBOX__ADMIN__ADDR", "127.0.0.1:0")
            .env("OUTBOX__INSTANCE_ID", name);
        RelayProc {
            admin_port: OnceLock::new(),
            process: Logged::spawn(cmd, log),
        }
    }

    /// [`RelayProc::spawn`] with the TOML configuration file at `config` (`OUTBOX_CONFIG`).
    pub fn spawn_with_config(name: &str, env: &[(String, String)], config: &str) -> RelayProc {
        let mut env = env.to_vec();
        env.push(("OUTBOX_CONFIG".into(), config.into()));
        RelayProc::spawn(name, &env)
    }

    /// Logs in to the UI with `token` over plain HTTP; returns a client with the session
    /// cookie and the CSRF token of the page it landed on.
    pub fn login(&self, token: &str) -> (Http, String) {
        let res = self
            .http()
            .post_form("/login", &form(&[("token", token), ("next", "/")]));
        assert_eq!(res.status, 303, "login: {}", res.body);
        let session = self
            .http()
            .cookie(&res.session_cookie().expect("a session cookie"));
        let page = session.get("/");
        assert_eq!(page.status, 200);
        (session, page.csrf())
    }

    /// Its admin server's port, as it logged once bound; waits for that line (panics, with the
    /// log, when it does not come).
    pub fn admin_port(&self) -> u16 {
        *self.admin_port.get_or_init(|| {
            let what = format!(
                "{} to log `{LISTENING}<addr>`",
                self.process.log_path().display()
            );
            eventually_blocking(Duration::from_secs(60), &what, || {
                let log = self.process.log();
                listening_port(&log).ok_or(log)
            })
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.admin_port(), path)
    }

    /// An HTTP client for its admin server, without credentials.
    pub fn http(&self) -> Http {
        Http::new(self.admin_port())
    }

    /// Waits until `/readyz` answers 200: Postgres and Redis reachable, claim loop healthy.
    pub async fn wait_ready(&self, timeout: Duration) {
        self.http().wait_status("/readyz", 200, timeout).await
    }

    /// Claim cycles it has rolled back on an outage so far (`outbox_outage_cycles_total`).
    pub fn outage_cycles(&self) -> f64 {
        self.http().counter(OUTAGE_CYCLES)
    }

    /// Returns once a claim cycle that began after this call has committed (two more have: the
    /// first may have begun before), whether it published or was held. A test waits on this
    /// before asserting that something was *not* published while publishing cannot be
    /// proven by a sentinel event ([`TestDb::wait_for_a_claim_cycle`]), e.g. while it is held.
    pub async fn wait_for_a_claim_cycle(&self, timeout: Duration) {
        let before = self.http().counter(CLAIM_CYCLES);
        self.http()
            .wait_metric(CLAIM_CYCLES, |got| got >= before + 2.0, timeout)
            .await;
    }

    /// Waits until it has rolled back more than `n` claim cycles on an outage.
    pub async fn wait_outage_cycles_over(&self, n: f64, timeout: Duration) {
        self.http()
            .wait_metric(OUTAGE_CYCLES, |got| got > n, timeout)
            .await;
    }
}

/// The port of the first `admin listening on <addr>` line of a log (whole lines only: the
/// process may be writing the last one).
fn listening_port(log: &str) -> Option<u16> {
    let whole = &log[..log.rfind('\n').map_or(0, |end| end + 1)];
    let rest = &whole[whole.find(LISTENING)? + LISTENING.len()..];
    let addr: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']'))
        .collect();
    let addr: std::net::SocketAddr = addr
        .parse()
        .unwrap_or_else(|e| panic!("`{LISTENING}{addr}`: not an address: {e}"));
    Some(addr.port())
}

/// A relay with `admin.token` ([`ADMIN_TOKEN`]) and `admin.read_only_token`
/// ([`READ_ONLY_TOKEN`]) set, on a database and key prefix of its own, ready.
pub struct TokenRelay {
    pub db: TestDb,
    pub redis: TestRedis,
    pub relay: RelayProc,
}

impl TokenRelay {
    /// Starts replica `name` with the base settings, the tokens and `extra`; waits for
    /// `/readyz`.
    pub async fn start(name: &str, extra: &[(&str, &str)]) -> TokenRelay {
        TokenRelay::start_with(name, |db, redis| {
            let mut env = base_env(db, redis);
            env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            env
        })
        .await
    }

    /// Starts replica `name` with the settings `env` gives for its database and key prefix,
    /// and the tokens; waits for `/readyz`.
    pub async fn start_with(
        name: &str,
        env: impl FnOnce(&TestDb, &TestRedis) -> Vec<(String, String)>,
    ) -> TokenRelay {
        let Bundle { relay, redis, db } = setup_with(name, |db, redis| {
            let mut env = env(db, redis);
            env.push(("OUTBOX__ADMIN__TOKEN".into(), ADMIN_TOKEN.into()));
            env.push((
                "OUTBOX__ADMIN__READ_ONLY_TOKEN".into(),
                READ_ONLY_TOKEN.into(),
            ));
            env
        })
        .await;
        TokenRelay { db, redis, relay }
    }

    /// `http://127.0.0.1:<port>`, for the browser.
    pub fn base(&self) -> String {
        self.relay.url("")
    }

    /// A client without credentials.
    pub fn anonymous(&self) -> Http {
        self.relay.http()
    }

    /// A client with the admin token.
    pub fn admin(&self) -> Http {
        self.anonymous().bearer(ADMIN_TOKEN)
    }

    /// A client with the read-only token.
    pub fn viewer(&self) -> Http {
        self.anonymous().bearer(READ_ONLY_TOKEN)
    }

    /// Logs in to the UI with `token` over plain HTTP; returns a client with the session
    /// cookie and a page's CSRF token.
    pub fn login(&self, token: &str) -> (Http, String) {
        self.relay.login(token)
    }
}
