//! A certificate authority made with `openssl` for benchmarks and tests of TLS: a CA
//! certificate, and server or client certificates it signs (EC P-256, valid two days), as PEM
//! files in a directory the caller owns.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;

/// A CA whose files are in `dir`.
#[derive(Debug, Clone)]
pub struct Ca {
    dir: PathBuf,
    /// The CA's certificate: what a client trusts.
    pub cert: PathBuf,
}

/// A certificate and its private key.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

const EC: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

fn openssl(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .context("run openssl")?;
    anyhow::ensure!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

impl Ca {
    /// A new CA named `name`, its files in `dir` (which must exist).
    pub fn new(dir: &Path, name: &str) -> anyhow::Result<Ca> {
        let subject = format!("/CN={name}");
        let args = [
            &["req", "-x509"][..],
            &EC,
            &[
                "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", &subject,
            ],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ]
        .concat();
        openssl(dir, &args)?;
        Ok(Ca {
            dir: dir.to_path_buf(),
            cert: dir.join("ca.crt"),
        })
    }

    /// A server certificate for host name `dns` (its only subject alternative name).
    pub fn server(&self, name: &str, dns: &str) -> anyhow::Result<Issued> {
        let extensions = format!("subjectAltName=DNS:{dns}\nextendedKeyUsage=serverAuth");
        self.issue(name, name, &extensions)
    }

    /// A Redis Cluster node's certificate: it names `localhost` and `127.0.0.1` (what the
    /// nodes announce), and serves as a client certificate on the cluster bus too.
    pub fn cluster_node(&self, name: &str) -> anyhow::Result<Issued> {
        let extensions =
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth";
        self.issue(name, name, extensions)
    }

    /// A client certificate whose common name is `cn`.
    pub fn client(&self, name: &str, cn: &str) -> anyhow::Result<Issued> {
        self.issue(name, cn, "extendedKeyUsage=clientAuth")
    }

    fn issue(&self, name: &str, cn: &str, extensions: &str) -> anyhow::Result<Issued> {
        let ext = format!("{name}.ext");
        std::fs::write(
            self.dir.join(&ext),
            format!("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n{extensions}\n"),
        )?;
        let (key, csr, cert) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        let subject = format!("/CN={cn}");
        let request = [
            &["req"][..],
            &EC,
            &["-keyout", &key, "-out", &csr, "-subj", &subject],
        ]
        .concat();
        openssl(&self.dir, &request)?;
        openssl(
            &self.dir,
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
                &ext,
            ],
        )?;
        Ok(Issued {
            cert: self.dir.join(cert),
            key: self.dir.join(key),
        })
    }
}
