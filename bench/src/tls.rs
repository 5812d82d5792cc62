//! The TLS scenario: the same drain with Postgres and Redis over TLS and without, in the same
//! round. Two redis-servers of its own, started alike (one plain, one TLS-only with a
//! certificate from a CA of `outbox_testkit::certs`), and the local Postgres with
//! `sslmode=require` against `sslmode=disable` (Debian's server has TLS on, with its snakeoil
//! certificate).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_testkit::certs::Ca;

use crate::BenchEnv;

/// The two redis-servers and the CA, removed on drop.
pub struct TlsServers {
    dir: PathBuf,
    /// The CA's certificate, which the TLS side trusts.
    ca_cert: PathBuf,
    servers: Vec<Child>,
    plain_port: u16,
    tls_port: u16,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn redis_server(dir: &Path, args: &[String]) -> anyhow::Result<Child> {
    Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start redis-server")
}

impl TlsServers {
    /// Makes the certificates and starts both servers.
    pub fn start() -> anyhow::Result<TlsServers> {
        let dir = std::env::temp_dir().join(format!("outbox-bench-tls-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir)?;
        let ca = Ca::new(&dir, "bench-ca")?;
        let server = ca.server("server", "localhost")?;
        let (plain_port, tls_port) = (free_port()?, free_port()?);
        let plain = redis_server(&dir, &["--port".into(), plain_port.to_string()])?;
        let tls = redis_server(
            &dir,
            &[
                "--port".into(),
                "0".into(),
                "--tls-port".into(),
                tls_port.to_string(),
                "--tls-cert-file".into(),
                server.cert.display().to_string(),
                "--tls-key-file".into(),
                server.key.display().to_string(),
                "--tls-auth-clients".into(),
                "no".into(),
            ],
        )?;
        let me = TlsServers {
            dir,
            ca_cert: ca.cert,
            servers: vec![plain, tls],
            plain_port,
            tls_port,
        };
        for port in [plain_port, tls_port] {
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "redis-server on {port} did not start"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(me)
    }

    /// The bench environment of one side: over TLS or not, both ends.
    pub fn env(&self, base: &BenchEnv, tls: bool) -> anyhow::Result<BenchEnv> {
        let mut postgres = url::Url::parse(&base.postgres_url).context("postgres url")?;
        let kept: Vec<(String, String)> = postgres
            .query_pairs()
            .filter(|(k, _)| k != "sslmode")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let mode = if tls { "require" } else { "disable" };
        postgres
            .query_pairs_mut()
            .clear()
            .extend_pairs(kept)
            .append_pair("sslmode", mode);
        Ok(BenchEnv {
            postgres_url: postgres.to_string(),
            redis_url: if tls {
                format!("rediss://localhost:{}", self.tls_port)
            } else {
                format!("redis://127.0.0.1:{}", self.plain_port)
            },
            redis_ca: tls.then(|| self.ca_cert.clone()),
            cluster: false,
            ..base.clone()
        })
    }
}

impl Drop for TlsServers {
    fn drop(&mut self) {
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
