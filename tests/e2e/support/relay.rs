//! Real `outbox-relay run` processes: spawned with quick test settings, waited on until they
//! answer, killed with SIGKILL (or stopped with SIGTERM).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, http_get, TestDb, TestRedis};

pub const BIN: &str = env!("CARGO_BIN_EXE_outbox-relay");

/// A running `outbox-relay run` process.
pub struct RelayProc {
    pub admin_port: u16,
    pub child: Child,
    pub name: String,
}

/// Settings every test relay gets, tuned for quick tests.
pub fn base_env(db: &TestDb, redis: &TestRedis) -> Vec<(String, String)> {
    vec![
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
    ]
}

impl RelayProc {
    pub fn spawn(name: &str, env: &[(String, String)]) -> RelayProc {
        let admin_port = free_port();
        let log = std::fs::File::create(
            std::env::temp_dir().join(format!("relay-{name}-{admin_port}.log")),
        )
        .expect("log file");
        let child = Command::new(BIN)
            .arg("run")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("OUTBOX__ADMIN__ADDR", format!("127.0.0.1:{admin_port}"))
            .env("OUTBOX__INSTANCE_ID", name)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn relay");
        RelayProc {
            admin_port,
            child,
            name: name.into(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.admin_port, path)
    }

    /// HTTP status of GET `path`, or 0 when nothing answers.
    pub fn status(&self, path: &str) -> u16 {
        http_get(self.admin_port, path).map(|(s, _)| s).unwrap_or(0)
    }

    pub fn body(&self, path: &str) -> String {
        http_get(self.admin_port, path)
            .map(|(_, b)| b)
            .unwrap_or_default()
    }

    /// Waits until `path` answers `status`.
    pub async fn wait_status(&self, path: &str, status: u16, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.status(path);
            if got == status {
                return;
            }
            if Instant::now() > deadline {
                panic!("{} {path}: wanted {status}, last {got}", self.name);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn terminate(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    /// Waits for exit; returns the exit code (None on timeout or signal).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for RelayProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
