//! A TCP proxy the test holds: the relay connects through it to a Redis the test can swap (a
//! failover without Sentinel: the old master's clients land on the promoted replica), and a
//! replica replicates through one the test can hold back (its link cut and refused: it lags
//! behind its master for real, not only in a stopped process's socket buffers).

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Forwards every connection on `port` to the current upstream port on loopback.
pub struct Proxy {
    pub port: u16,
    upstream: Arc<AtomicU16>,
    /// While set, connections are cut and new ones refused.
    held: Arc<AtomicBool>,
    /// Bumped on a switch: connections to the old upstream close.
    generation: watch::Sender<u64>,
    /// Connections accepted so far, whether or not the upstream took them.
    accepted: Arc<AtomicU64>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts forwarding to `upstream` (inside a tokio runtime).
    pub async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let upstream = Arc::new(AtomicU16::new(upstream));
        let (generation, _) = watch::channel(0u64);
        let held = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let (to, gen, holding) = (upstream.clone(), generation.clone(), held.clone());
        let counted = accepted.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                if holding.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let target = to.load(Ordering::SeqCst);
                let mut changed = gen.subscribe();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    let (mut client, mut server) = (client, server);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = changed.changed() => {}
                    }
                });
            }
        });
        Proxy {
            port,
            upstream,
            held,
            generation,
            accepted,
            accept,
        }
    }

    /// Connections accepted so far (a client trying again shows here while its server is
    /// down).
    pub fn connections(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// New connections go to `upstream`; open ones are cut.
    pub fn switch(&self, upstream: u16) {
        self.upstream.store(upstream, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Cuts every connection and refuses new ones until [`Proxy::release`].
    pub fn hold(&self) {
        self.held.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Lets connections through again.
    pub fn release(&self) {
        self.held.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
