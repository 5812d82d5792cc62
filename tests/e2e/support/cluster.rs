//! A Redis Cluster of the test's own: the testkit's [`LocalCluster`] (three masters, no
//! replicas), with an append-only file synced on every write, so a master killed with SIGKILL
//! comes back with its identity, its slots and every write it acknowledged; the other masters
//! keep serving their slots meanwhile. Here: who owns a slot, and moving a slot by hand.

use std::time::Duration;

use outbox_testkit::cluster::{LocalCluster, NodeTls, Persistence};

use super::{TestCa, TestRedis};

/// A local cluster of masters, killed on drop.
pub struct OwnCluster {
    inner: LocalCluster,
}

impl OwnCluster {
    /// Starts `masters` nodes with every slot assigned, and waits until the cluster is ok.
    pub fn start(masters: usize) -> OwnCluster {
        OwnCluster {
            inner: LocalCluster::start(masters, Persistence::Synced).expect("a local cluster"),
        }
    }

    /// As [`OwnCluster::start`], the nodes speaking only TLS with a certificate of `ca`.
    pub fn start_tls(masters: usize, ca: &TestCa) -> OwnCluster {
        let node = ca.cluster_node("cluster-node");
        let tls = NodeTls {
            cert: node.cert,
            key: node.key,
            ca: ca.cert.clone(),
        };
        OwnCluster {
            inner: LocalCluster::start_with(masters, Persistence::Synced, Some(tls))
                .expect("a local TLS cluster"),
        }
    }

    /// `XLEN key`, asked of the key's master.
    pub fn xlen(&self, key: &str) -> i64 {
        let port = self.inner.port(self.owner_of(key));
        self.cli(port, &["XLEN", key])
            .trim()
            .parse()
            .expect("a length")
    }

    /// A key prefix of its own on this cluster.
    pub fn test_redis(&self) -> TestRedis {
        TestRedis::cluster(&self.inner.seeds())
    }

    fn cli(&self, port: u16, args: &[&str]) -> String {
        self.inner.cli(port, args).unwrap_or_else(|e| panic!("{e}"))
    }

    fn any_port(&self) -> u16 {
        self.inner.live_ports().next().expect("a live node")
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn keyslot(&self, key: &str) -> u16 {
        self.cli(self.any_port(), &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .expect("a slot number")
    }

    /// The index of the node that owns `slot`, as a live node sees it (`CLUSTER NODES`).
    pub fn owner(&self, slot: u16) -> usize {
        let table = self.cli(self.any_port(), &["CLUSTER", "NODES"]);
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
                    .inner
                    .ports()
                    .position(|p| p == port)
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
        self.inner.kill(i);
    }

    /// Starts node `i` again and waits until the whole cluster is ok.
    pub fn restart(&mut self, i: usize) {
        self.inner.restart(i).expect("node restarted");
    }

    /// Moves `slot` from its owner to node `to` by hand, as `redis-cli --cluster reshard`
    /// does: `SETSLOT IMPORTING` on the target, `MIGRATING` on the source, `MIGRATE` of its
    /// keys in batches, then `SETSLOT NODE` on every node. `pause` is slept between the
    /// stages, so traffic meets each of them.
    pub fn migrate_slot(&self, slot: u16, to: usize, pause: Duration) {
        let from = self.owner(slot);
        assert_ne!(from, to, "slot {slot} is already on node {to}");
        let (src, dst) = (self.inner.port(from), self.inner.port(to));
        let id = |port: u16| self.cli(port, &["CLUSTER", "MYID"]).trim().to_string();
        let (src_id, dst_id) = (id(src), id(dst));
        let slot_arg = slot.to_string();
        self.cli(
            dst,
            &["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &src_id],
        );
        self.cli(
            src,
            &["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &dst_id],
        );
        std::thread::sleep(pause);
        let dst_port = dst.to_string();
        loop {
            let keys = self.cli(src, &["CLUSTER", "GETKEYSINSLOT", &slot_arg, "2"]);
            let keys: Vec<&str> = keys
                .lines()
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .collect();
            if keys.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &dst_port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().copied());
            self.cli(src, &args);
            std::thread::sleep(pause);
        }
        for port in self.inner.live_ports() {
            self.cli(port, &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &dst_id]);
        }
        assert_eq!(self.owner(slot), to, "slot {slot} moved");
    }
}
