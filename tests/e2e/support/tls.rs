//! A certificate authority of the test's own (`outbox_testkit::certs`, made in process), its
//! files in a temp dir that lives as long as it does.

use outbox_testkit::certs::Ca;
pub use outbox_testkit::certs::Issued;

/// A CA and the directory its files live in.
pub struct TestCa {
    _dir: tempfile::TempDir,
    ca: Ca,
    /// The CA's certificate (PEM): what a client trusts.
    pub cert: std::path::PathBuf,
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> TestCa {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new(dir.path(), name).expect("make a CA");
        TestCa {
            cert: ca.cert.clone(),
            _dir: dir,
            ca,
        }
    }

    /// A server certificate for `host` (a host name or an IP address).
    pub fn server(&self, name: &str, host: &str) -> Issued {
        self.ca
            .server(name, host)
            .expect("issue a server certificate")
    }

    /// A Redis Cluster node's certificate: it names `localhost` and `127.0.0.1` (what the
    /// nodes announce), and serves as a client certificate on the cluster bus too.
    pub fn cluster_node(&self, name: &str) -> Issued {
        self.ca
            .cluster_node(name)
            .expect("issue a cluster node certificate")
    }

    /// A client certificate whose common name is `cn`.
    pub fn client(&self, name: &str, cn: &str) -> Issued {
        self.ca
            .client(name, cn)
            .expect("issue a client certificate")
    }
}
