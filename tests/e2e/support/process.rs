//! A process a test started, its stderr in a log file: SIGKILL, SIGTERM, waiting for its exit,
//! killed when dropped. Relay processes and example consumers are both one of these.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process logging to `log`.
pub struct Logged {
    pub child: Child,
    log: PathBuf,
}

impl Logged {
    /// Starts `cmd`, stdout discarded, stderr into a new file at `log`.
    pub fn spawn(mut cmd: Command, log: PathBuf) -> Logged {
        let file = std::fs::File::create(&log).expect("log file");
        let child = cmd
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {:?}: {e}", cmd.get_program()));
        Logged { child, log }
    }

    /// What it has written to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log)
            .unwrap_or_else(|e| panic!("read the log {}: {e}", self.log.display()))
    }

    /// Where its stderr goes.
    pub fn log_path(&self) -> &std::path::Path {
        &self.log
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

    /// Waits for exit; the exit code (None on timeout or signal).
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

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
