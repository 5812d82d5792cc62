//! A Redis Sentinel of the test's own (`redis-server --sentinel`) on a free port, watching a
//! master of the test's under the name [`MASTER`]; quick to decide (a master silent for a
//! second is down), so a failover takes a few seconds.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{eventually_blocking, free_port, OwnRedis};

/// The name the Sentinel monitors the master under.
pub const MASTER: &str = "testmaster";

/// A Sentinel process (killed on drop).
pub struct OwnSentinel {
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
    /// What the Sentinel wants from its clients.
    password: Option<String>,
}

impl OwnSentinel {
    /// Starts a Sentinel monitoring `master` with a quorum of one.
    pub fn watching(master: &OwnRedis) -> OwnSentinel {
        OwnSentinel::watching_with(master, None, None)
    }

    /// As [`OwnSentinel::watching`], for a master that wants `master_password`, the
    /// Sentinel itself wanting `own_password` from its clients.
    pub fn watching_with(
        master: &OwnRedis,
        master_password: Option<&str>,
        own_password: Option<&str>,
    ) -> OwnSentinel {
        let port = free_port();
        let mut auth = String::new();
        if let Some(pw) = master_password {
            auth.push_str(&format!("sentinel auth-pass {MASTER} {pw}\n"));
        }
        if let Some(pw) = own_password {
            auth.push_str(&format!("requirepass {pw}\n"));
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {master} 1\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 5000\n\
                 sentinel parallel-syncs {MASTER} 2\n{auth}",
                dir = dir.path().display(),
                master = master.port,
            ),
        )
        .expect("write sentinel.conf");
        let child = Command::new(super::server_binary())
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server --sentinel");
        let me = OwnSentinel {
            port,
            child,
            _dir: dir,
            password: own_password.map(str::to_string),
        };
        me.wait_master(master.port);
        me
    }

    /// Waits until the Sentinel knows `n` replicas of the master (it needs them to fail over).
    pub fn wait_replicas(&self, n: usize) {
        let what = format!("the Sentinel to know {n} replicas");
        eventually_blocking(Duration::from_secs(30), &what, || {
            let replicas: Vec<redis::Value> = redis::cmd("SENTINEL")
                .arg("replicas")
                .arg(MASTER)
                .query(&mut self.conn()?)
                .map_err(|e| format!("SENTINEL replicas: {e}"))?;
            match replicas.len() {
                known if known >= n => Ok(()),
                known => Err(format!("it knows {known}")),
            }
        })
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A connection to the Sentinel, authenticated if it wants a password.
    fn conn(&self) -> Result<redis::Connection, String> {
        let url = match &self.password {
            Some(pw) => format!("redis://:{pw}@127.0.0.1:{}", self.port),
            None => self.url(),
        };
        redis::Client::open(url)
            .and_then(|c| c.get_connection())
            .map_err(|e| format!("connect to the Sentinel on {}: {e}", self.port))
    }

    /// The master's port as this Sentinel names it, or why it does not answer.
    pub fn master_port(&self) -> Result<u16, String> {
        let addr: Vec<String> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER)
            .query(&mut self.conn()?)
            .map_err(|e| format!("SENTINEL get-master-addr-by-name: {e}"))?;
        let port = addr.get(1).ok_or(format!("no master address: {addr:?}"))?;
        port.parse().map_err(|e| format!("port {port:?}: {e}"))
    }

    /// Waits until the Sentinel names the master on `port` (after a failover: the promoted
    /// replica's).
    pub fn wait_master(&self, port: u16) {
        let what = format!("the Sentinel to name port {port} as master");
        eventually_blocking(Duration::from_secs(30), &what, || {
            match self.master_port()? {
                named if named == port => Ok(()),
                named => Err(format!("it names {named}")),
            }
        })
    }

    /// Waits until the Sentinel names a master other than the one on `old`; returns its port.
    pub fn wait_failover(&self, old: u16) -> u16 {
        let what = format!("a failover away from {old}");
        eventually_blocking(Duration::from_secs(30), &what, || {
            match self.master_port()? {
                named if named != old => Ok(named),
                _ => Err(format!("it still names {old}")),
            }
        })
    }
}

impl Drop for OwnSentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
