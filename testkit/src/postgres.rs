//! A PostgreSQL server of its own (initdb in a temp dir, a free port) and streaming standbys of
//! it (`pg_basebackup -R`), from the Debian packages under `/usr/lib/postgresql`: what a test
//! or a benchmark can stop, promote and restart without touching the shared server.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::Context as _;

/// A server of its own, stopped (like a crash) on drop.
pub struct LocalPostgres {
    port: u16,
    dir: tempfile::TempDir,
    bin: PathBuf,
    /// Server options beyond the port and socket (`-c name=value ...`).
    options: String,
}

/// True when running as root, where Postgres' programs (and pgbouncer) refuse to run.
pub fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false)
}

/// `program`, run as the `postgres` user when running as root (initdb and postgres refuse
/// root).
fn as_postgres_user(program: &Path) -> Command {
    if running_as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Fails with the program's stderr unless it succeeded.
fn succeeded(what: &str, out: std::io::Result<Output>) -> anyhow::Result<()> {
    let out = out.with_context(|| format!("run {what}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A temp dir the `postgres` user may write (when running as root).
fn own_dir() -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir().context("tempdir")?;
    if running_as_root() {
        succeeded(
            "chown postgres",
            Command::new("chown")
                .arg("postgres")
                .arg(dir.path())
                .output(),
        )?;
    }
    Ok(dir)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl LocalPostgres {
    /// Initialises and starts a server with `options` (`-c name=value ...`, may be empty).
    pub fn start(options: &str) -> anyhow::Result<LocalPostgres> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .context("postgres installed under /usr/lib/postgresql")?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin"))
            .filter(|p| p.join("initdb").exists())
            .max()
            .context("no initdb under /usr/lib/postgresql")?;
        let dir = own_dir()?;
        let data = dir.path().join("data");
        succeeded(
            "initdb",
            as_postgres_user(&bin.join("initdb"))
                .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
                .arg(&data)
                .output(),
        )?;
        let me = LocalPostgres {
            port: free_port()?,
            dir,
            bin,
            options: options.to_string(),
        };
        me.restart()?;
        Ok(me)
    }

    /// A streaming standby of this server (`pg_basebackup -R`), started on a port of its own,
    /// its replication connection to `port` (this server's, or a proxy's in front of it).
    pub fn standby_through(&self, port: u16) -> anyhow::Result<LocalPostgres> {
        self.standby_with(port, &self.options)
    }

    /// [`LocalPostgres::standby_through`], the standby started with `options` of its own (a
    /// certificate of its own, say) instead of this server's.
    pub fn standby_with(&self, port: u16, options: &str) -> anyhow::Result<LocalPostgres> {
        let dir = own_dir()?;
        let data = dir.path().join("data");
        succeeded(
            "pg_basebackup",
            as_postgres_user(&self.bin.join("pg_basebackup"))
                .args(["-h", "127.0.0.1", "-U", "postgres", "-R", "-X", "stream"])
                .args(["--no-sync", "-p", &self.port.to_string(), "-D"])
                .arg(&data)
                .output(),
        )?;
        // The last setting wins over the one `-R` wrote.
        let auto = data.join("postgresql.auto.conf");
        let mut conf = std::fs::read_to_string(&auto).context("postgresql.auto.conf")?;
        conf.push_str(&format!(
            "primary_conninfo = 'host=127.0.0.1 port={port} user=postgres'\n"
        ));
        std::fs::write(&auto, conf).context("write postgresql.auto.conf")?;
        let me = LocalPostgres {
            port: free_port()?,
            dir,
            bin: self.bin.clone(),
            options: options.to_string(),
        };
        me.restart()?;
        Ok(me)
    }

    /// Promotes a standby to primary; returns once it accepts writes.
    pub fn promote(&self) -> anyhow::Result<()> {
        succeeded(
            "pg_ctl promote",
            self.pg_ctl().args(["-w", "promote"]).output(),
        )
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its `postgres` database as the `postgres` user.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts it (again); returns once it accepts connections.
    pub fn restart(&self) -> anyhow::Result<()> {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off {}",
            self.port,
            self.dir.path().display(),
            self.options
        );
        succeeded(
            "pg_ctl start",
            self.pg_ctl()
                .args(["-o", &opts, "-w", "-l"])
                .arg(self.dir.path().join("log"))
                .arg("start")
                .output(),
        )
    }

    /// Stops like a crash: no checkpoint, connections cut. Quiet when it is stopped already.
    pub fn stop(&self) {
        let _ = self
            .pg_ctl()
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }

    /// `pg_ctl -D <data>`.
    fn pg_ctl(&self) -> Command {
        let mut c = as_postgres_user(&self.bin.join("pg_ctl"));
        c.arg("-D").arg(self.dir.path().join("data"));
        c
    }
}

impl Drop for LocalPostgres {
    fn drop(&mut self) {
        self.stop();
    }
}
