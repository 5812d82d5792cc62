//! The durability scenario's servers: a redis-server of its own and one replica of it, both
//! without persistence like the bench's Redis, so the drains with and without
//! `redis.wait_replicas = 1` differ only by the wait.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::BenchEnv;

/// The master and its replica, killed on drop.
pub struct Replicated {
    dir: PathBuf,
    servers: Vec<Child>,
    master_port: u16,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn server(dir: &std::path::Path, port: u16, args: &[String]) -> anyhow::Result<Child> {
    let dir = dir.join(port.to_string());
    std::fs::create_dir_all(&dir)?;
    Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--port")
        .arg(port.to_string())
        .arg("--dir")
        .arg(&dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start redis-server")
}

fn query(port: u16, cmd: &redis::Cmd) -> anyhow::Result<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let mut conn = client.get_connection()?;
    Ok(cmd.query::<String>(&mut conn)?)
}

impl Replicated {
    /// Starts both and waits until the replica is in sync.
    pub fn start() -> anyhow::Result<Replicated> {
        let dir =
            std::env::temp_dir().join(format!("outbox-bench-replica-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir)?;
        let (master_port, replica_port) = (free_port()?, free_port()?);
        let master = server(&dir, master_port, &[])?;
        let mut me = Replicated {
            dir,
            servers: vec![master],
            master_port,
        };
        let replica = server(
            &me.dir,
            replica_port,
            &[
                "--replicaof".into(),
                "127.0.0.1".into(),
                master_port.to_string(),
                "--repl-diskless-sync-delay".into(),
                "0".into(),
            ],
        )?;
        me.servers.push(replica);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let info = query(replica_port, redis::cmd("INFO").arg("replication"));
            if info.is_ok_and(|i| i.contains("master_link_status:up")) {
                return Ok(me);
            }
            anyhow::ensure!(Instant::now() < deadline, "the replica never got in sync");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The bench environment on the master.
    pub fn env(&self, base: &BenchEnv) -> BenchEnv {
        BenchEnv {
            redis_url: format!("redis://127.0.0.1:{}", self.master_port),
            redis_ca: None,
            cluster: false,
            ..base.clone()
        }
    }
}

impl Drop for Replicated {
    fn drop(&mut self) {
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
