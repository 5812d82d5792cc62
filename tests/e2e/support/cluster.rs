//! A Redis Cluster of the test's own: three masters (no replicas) of redis-server on free
//! ports, each in a temp dir with its `nodes.conf` and an append-only file synced on every
//! write, so a master killed with SIGKILL comes back with its identity, its slots and every
//! write it acknowledged. The cluster keeps
//! serving the other masters' slots while one is down (`cluster-require-full-coverage no`).
//! Every node is killed on drop.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::Rng;

use super::TestRedis;

/// One redis-server of the cluster.
struct Node {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

/// A local cluster of masters.
pub struct OwnCluster {
    nodes: Vec<Node>,
}

/// A port `p` where both `p` and its cluster bus port `p + 10000` are free.
fn free_cluster_port() -> u16 {
    let mut rng = rand::rng();
    for _ in 0..1000 {
        let port: u16 = rng.random_range(20_000..30_000);
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10_000) {
            return port;
        }
    }
    panic!("no free port pair for a cluster node");
}

/// `redis-cli -p port args...`, its output; panics when it fails.
fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && !text.starts_with("ERR"),
        "redis-cli -p {port} {args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

impl Node {
    fn start(&mut self) {
        let port = self.port.to_string();
        let conf = format!("nodes-{port}.conf");
        let child = Command::new("redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes", "--cluster-config-file", &conf])
            .args(["--cluster-node-timeout", "2000"])
            .args(["--cluster-require-full-coverage", "no"])
            // Every write on disk before its reply: with `everysec`, a master killed with
            // SIGKILL may lose up to two seconds of writes it has acknowledged (Redis
            // postpones the AOF write while a background fsync runs), which the relay has
            // then marked published. That is Redis's durability, not what these tests check.
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "cluster node did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl OwnCluster {
    /// Starts `masters` nodes, joins them into a cluster with every slot assigned, and waits
    /// until each node reports `cluster_state:ok`.
    pub fn start(masters: usize) -> OwnCluster {
        let mut nodes: Vec<Node> = (0..masters)
            .map(|_| Node {
                port: free_cluster_port(),
                dir: tempfile::tempdir().expect("tempdir"),
                child: None,
            })
            .collect();
        for node in &mut nodes {
            node.start();
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = OwnCluster { nodes };
        cluster.wait_ok(Duration::from_secs(30));
        cluster
    }

    /// The seed list for `REDIS_URL`: every node, `redis://127.0.0.1:P`, comma-separated.
    pub fn seeds(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A key prefix of its own on this cluster.
    pub fn test_redis(&self) -> TestRedis {
        TestRedis::cluster(&self.seeds())
    }

    /// The port of node `i`.
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn keyslot(&self, key: &str) -> u16 {
        cli(self.nodes[0].port, &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .expect("a slot number")
    }

    /// The index of the node that owns `slot`, as the first live node sees it
    /// (`CLUSTER NODES`).
    pub fn owner(&self, slot: u16) -> usize {
        let live = self
            .nodes
            .iter()
            .find(|n| n.child.is_some())
            .expect("a live node");
        let table = cli(live.port, &["CLUSTER", "NODES"]);
        for line in table.lines() {
            // <id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
            let fields: Vec<&str> = line.split_whitespace().collect();
            let Some(port) = fields
                .get(1)
                .and_then(|a| a.split('@').next()?.rsplit(':').next()?.parse::<u16>().ok())
            else {
                continue;
            };
            let owns = fields.iter().skip(8).any(|range| {
                let mut ends = range.splitn(2, '-').map(|n| n.parse::<u16>());
                match (ends.next(), ends.next()) {
                    (Some(Ok(a)), Some(Ok(b))) => (a..=b).contains(&slot),
                    (Some(Ok(a)), None) => a == slot,
                    _ => false, // `[slot->-id]`: migration markers
                }
            });
            if owns {
                return self
                    .nodes
                    .iter()
                    .position(|n| n.port == port)
                    .expect("a node of this cluster");
            }
        }
        panic!("no owner of slot {slot} in {table}");
    }

    /// The node that owns `key`'s slot.
    pub fn owner_of(&self, key: &str) -> usize {
        self.owner(self.keyslot(key))
    }

    /// Kills node `i` with SIGKILL.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts node `i` again (same port, same dir: same identity, slots and data) and waits
    /// until the whole cluster is ok.
    pub fn restart(&mut self, i: usize) {
        self.nodes[i].start();
        self.wait_ok(Duration::from_secs(30));
    }

    /// Waits until every live node reports `cluster_state:ok` and knows every master.
    pub fn wait_ok(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let masters = self.nodes.len();
        loop {
            let ok = self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
                let info = Command::new("redis-cli")
                    .args(["-p", &n.port.to_string(), "CLUSTER", "INFO"])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{masters}"))
                    && info.contains("cluster_slots_ok:16384")
            });
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "cluster not ok in {timeout:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Moves `slot` from its owner to node `to` by hand, as `redis-cli --cluster reshard`
    /// does: `SETSLOT IMPORTING` on the target, `MIGRATING` on the source, `MIGRATE` of its
    /// keys in batches, then `SETSLOT NODE` on both and on the others. `pause` is slept between
    /// batches, and between the migration and its end, so traffic meets every stage.
    pub fn migrate_slot(&self, slot: u16, to: usize, pause: Duration) {
        let from = self.owner(slot);
        assert_ne!(from, to, "slot {slot} is already on node {to}");
        let (src, dst) = (self.nodes[from].port, self.nodes[to].port);
        let id = |port: u16| cli(port, &["CLUSTER", "MYID"]).trim().to_string();
        let (src_id, dst_id) = (id(src), id(dst));
        let slot_arg = slot.to_string();
        cli(
            dst,
            &["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &src_id],
        );
        cli(
            src,
            &["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &dst_id],
        );
        std::thread::sleep(pause);
        loop {
            let keys = cli(src, &["CLUSTER", "GETKEYSINSLOT", &slot_arg, "2"]);
            let keys: Vec<&str> = keys
                .lines()
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .collect();
            if keys.is_empty() {
                break;
            }
            let dst_port = dst.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &dst_port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().copied());
            cli(src, &args);
            std::thread::sleep(pause);
        }
        for node in &self.nodes {
            cli(
                node.port,
                &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &dst_id],
            );
        }
        assert_eq!(self.owner(slot), to, "slot {slot} moved");
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
    }
}
