//! A local Redis Cluster for the benchmark's `cluster` scenario and the end-to-end tests: masters
//! of redis-server on free ports, each in a temp dir of its own, joined with
//! `redis-cli --cluster create` (no replicas), every node killed on drop. Each port `p` is
//! picked with its cluster bus port `p + 10000` free too. With [`NodeTls`] the nodes speak
//! only TLS, to clients and on the cluster bus.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rand::Rng;

/// How the nodes keep their data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// None (`--save '' --appendonly no`), as a bench's single Redis.
    None,
    /// An append-only file synced before every reply, so that a node killed with SIGKILL
    /// comes back with every write it acknowledged.
    Synced,
}

/// TLS files of the nodes (PEM). The certificate serves clients and, as a client, the other
/// nodes on the cluster bus; the nodes announce 127.0.0.1, which it must name.
#[derive(Debug, Clone)]
pub struct NodeTls {
    /// The nodes' certificate.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
    /// The CA that signed it.
    pub ca: PathBuf,
}

/// One redis-server of the cluster.
struct Node {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

/// A local cluster of masters.
pub struct LocalCluster {
    nodes: Vec<Node>,
    persistence: Persistence,
    tls: Option<NodeTls>,
}

/// A port `p` where both `p` and its cluster bus port `p + 10000` are free.
fn free_port_pair() -> anyhow::Result<u16> {
    let mut rng = rand::rng();
    for _ in 0..1000 {
        let port: u16 = rng.random_range(20_000..30_000);
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10_000) {
            return Ok(port);
        }
    }
    anyhow::bail!("no free port pair for a cluster node")
}

impl NodeTls {
    /// `redis-cli`'s flags for these files.
    fn cli_args(&self) -> Vec<String> {
        vec![
            "--tls".into(),
            "--cacert".into(),
            self.ca.display().to_string(),
        ]
    }

    /// `redis-server`'s: TLS only on `port`, and on the cluster bus.
    fn server_args(&self, port: &str) -> Vec<String> {
        let path = |p: &PathBuf| p.display().to_string();
        [
            "--port",
            "0",
            "--tls-port",
            port,
            "--tls-cluster",
            "yes",
            "--tls-auth-clients",
            "no",
        ]
        .into_iter()
        .map(String::from)
        .chain([
            "--tls-cert-file".into(),
            path(&self.cert),
            "--tls-key-file".into(),
            path(&self.key),
            "--tls-ca-cert-file".into(),
            path(&self.ca),
        ])
        .collect()
    }
}

impl Node {
    fn start(&mut self, persistence: Persistence, tls: Option<&NodeTls>) -> anyhow::Result<()> {
        let port = self.port.to_string();
        let conf = format!("nodes-{port}.conf");
        let durability: &[&str] = match persistence {
            Persistence::None => &["--appendonly", "no"],
            // With `everysec`, Redis postpones the AOF write while a background fsync runs
            // and still replies: a SIGKILL then loses writes it acknowledged.
            Persistence::Synced => &["--appendonly", "yes", "--appendfsync", "always"],
        };
        let listen = match tls {
            Some(tls) => tls.server_args(&port),
            None => vec!["--port".into(), port.clone()],
        };
        let child = Command::new(server_binary())
            .args(listen)
            .args(["--bind", "127.0.0.1", "--save", ""])
            .args(["--cluster-enabled", "yes", "--cluster-config-file", &conf])
            .args(["--cluster-node-timeout", "2000"])
            // The other masters keep serving their slots while one is down.
            .args(["--cluster-require-full-coverage", "no"])
            .args(durability)
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start redis-server")?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "cluster node did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl LocalCluster {
    /// Starts `masters` nodes, joins them with every slot assigned, and waits until each
    /// node reports `cluster_state:ok`.
    pub fn start(masters: usize, persistence: Persistence) -> anyhow::Result<LocalCluster> {
        Self::start_with(masters, persistence, None)
    }

    /// As [`LocalCluster::start`], with TLS when `tls` is given.
    pub fn start_with(
        masters: usize,
        persistence: Persistence,
        tls: Option<NodeTls>,
    ) -> anyhow::Result<LocalCluster> {
        let mut cluster = LocalCluster {
            nodes: Vec::with_capacity(masters),
            persistence,
            tls,
        };
        for _ in 0..masters {
            let mut node = Node {
                port: free_port_pair()?,
                dir: tempfile::tempdir()?,
                child: None,
            };
            node.start(persistence, cluster.tls.as_ref())?;
            cluster.nodes.push(node);
        }
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(cluster.tls.iter().flat_map(NodeTls::cli_args))
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .context("redis-cli --cluster create")?;
        anyhow::ensure!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_ok(Duration::from_secs(30))?;
        Ok(cluster)
    }

    /// The seed list for `REDIS_URL`: every node, `redis://127.0.0.1:P` (`rediss://` with
    /// TLS), comma-separated.
    pub fn seeds(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        self.nodes
            .iter()
            .map(|n| format!("{scheme}://127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The port of node `i`.
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// Ports of the nodes, in order.
    pub fn ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.nodes.iter().map(|n| n.port)
    }

    /// Ports of the nodes running now.
    pub fn live_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| n.port)
    }

    /// `redis-cli -p <port> args...`: its output, or what failed.
    pub fn cli(&self, port: u16, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("redis-cli")
            .args(self.tls.iter().flat_map(NodeTls::cli_args))
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .output()
            .context("run redis-cli")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        anyhow::ensure!(
            out.status.success() && !text.starts_with("ERR"),
            "redis-cli -p {port} {args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(text)
    }

    /// Kills node `i` with SIGKILL.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts node `i` again (same port and dir: same identity, slots and, when persistent,
    /// data) and waits until the whole cluster is ok.
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.nodes[i].start(self.persistence, self.tls.as_ref())?;
        self.wait_ok(Duration::from_secs(30))
    }

    /// Waits until every live node reports `cluster_state:ok`, knows every node and sees
    /// every slot served.
    pub fn wait_ok(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let known = format!("cluster_known_nodes:{}", self.nodes.len());
        loop {
            let ok = self.live_ports().all(|port| {
                self.cli(port, &["CLUSTER", "INFO"]).is_ok_and(|info| {
                    info.contains("cluster_state:ok")
                        && info.contains(&known)
                        && info.contains("cluster_slots_ok:16384")
                })
            });
            if ok {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "cluster not ok in {timeout:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
    }
}

/// The server binary the nodes run: `OUTBOX_TEST_REDIS_SERVER` (Valkey's `valkey-server`, for
/// `make test-valkey`) or `redis-server`.
pub fn server_binary() -> String {
    std::env::var("OUTBOX_TEST_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}
