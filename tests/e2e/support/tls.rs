//! A certificate authority of the test's own, made with `openssl`: a CA certificate, and
//! server or client certificates it signs (EC P-256, valid two days), in a temp dir.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A CA and the directory its files live in.
pub struct TestCa {
    dir: tempfile::TempDir,
    /// The CA's certificate (PEM): what a client trusts.
    pub cert: PathBuf,
}

/// A certificate and its private key (PEM files).
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> TestCa {
        let dir = tempfile::tempdir().expect("tempdir");
        let subject = format!("/CN={name}");
        openssl(
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                &subject,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
            dir.path(),
        );
        TestCa {
            cert: dir.path().join("ca.crt"),
            dir,
        }
    }

    /// A server certificate for host name `dns` (its only subject alternative name).
    pub fn server(&self, name: &str, dns: &str) -> Issued {
        let extensions = format!("subjectAltName=DNS:{dns}\nextendedKeyUsage=serverAuth");
        self.issue(name, name, &extensions)
    }

    /// A Redis Cluster node's certificate: it names `localhost` and `127.0.0.1` (what the
    /// nodes announce), and serves as a client certificate on the cluster bus too.
    pub fn cluster_node(&self, name: &str) -> Issued {
        let extensions =
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth";
        self.issue(name, name, extensions)
    }

    /// A client certificate whose common name is `cn`.
    pub fn client(&self, name: &str, cn: &str) -> Issued {
        self.issue(name, cn, "extendedKeyUsage=clientAuth")
    }

    fn issue(&self, name: &str, cn: &str, extensions: &str) -> Issued {
        let dir = self.dir.path();
        let ext = dir.join(format!("{name}.ext"));
        std::fs::write(
            &ext,
            format!("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n{extensions}\n"),
        )
        .expect("write extensions");
        let (key, csr, cert) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        openssl(
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={cn}"),
            ],
            dir,
        );
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &cert,
                "-days",
                "2",
                "-extfile",
                &ext.display().to_string(),
            ],
            dir,
        );
        Issued {
            cert: dir.join(cert),
            key: dir.join(key),
        }
    }
}
