//! A certificate authority for tests and benchmarks of TLS, made in process with rcgen: a CA
//! certificate, and server, cluster node or client certificates it signs (EC P-256, valid two
//! days), as PEM files in a directory the caller owns. The CA's key stays in memory: only what
//! a server or a client is handed gets written.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use time::{Duration, OffsetDateTime};

/// How long a certificate is valid: any test or bench run is shorter, and files left behind
/// in a temp dir soon stop being trusted anywhere.
const VALID_FOR: Duration = Duration::days(2);

/// How far back validity starts: a verifier whose clock lags a little (a container, another
/// host) still accepts a certificate made a moment ago.
const BACKDATED: Duration = Duration::hours(1);

/// A CA whose files are in `dir`.
pub struct Ca {
    dir: PathBuf,
    /// The CA's certificate: what a client trusts.
    pub cert: PathBuf,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("dir", &self.dir)
            .field("cert", &self.cert)
            .finish_non_exhaustive()
    }
}

/// A certificate and its private key.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8), readable by its owner only.
    pub key: PathBuf,
}

impl Ca {
    /// A new CA named `name`, its certificate written to `ca.crt` in `dir` (which must exist).
    pub fn new(dir: &Path, name: &str) -> anyhow::Result<Ca> {
        let mut params = CertificateParams::default();
        params.distinguished_name = common_name(name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        set_validity(&mut params);
        let key = KeyPair::generate().context("generate the CA's key")?;
        let issuer = CertifiedIssuer::self_signed(params, key).context("sign the CA")?;
        let cert = dir.join("ca.crt");
        write_file(&cert, issuer.pem().as_bytes(), 0o644)?;
        Ok(Ca {
            dir: dir.to_path_buf(),
            cert,
            issuer,
        })
    }

    /// A server certificate for `host`, a host name or an IP address (its only subject
    /// alternative name).
    pub fn server(&self, name: &str, host: &str) -> anyhow::Result<Issued> {
        self.issue(name, name, &[host], &[ExtendedKeyUsagePurpose::ServerAuth])
    }

    /// A Redis Cluster node's certificate: it names `localhost` and `127.0.0.1` (what the
    /// nodes announce), and serves as a client certificate on the cluster bus too.
    pub fn cluster_node(&self, name: &str) -> anyhow::Result<Issued> {
        let usages = [
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        self.issue(name, name, &["localhost", "127.0.0.1"], &usages)
    }

    /// A client certificate whose common name is `cn` (the user name Postgres maps it to).
    pub fn client(&self, name: &str, cn: &str) -> anyhow::Result<Issued> {
        self.issue(name, cn, &[], &[ExtendedKeyUsagePurpose::ClientAuth])
    }

    /// Signs a new key's certificate and writes both as `<name>.crt` and `<name>.key`.
    fn issue(
        &self,
        name: &str,
        cn: &str,
        hosts: &[&str],
        usages: &[ExtendedKeyUsagePurpose],
    ) -> anyhow::Result<Issued> {
        let sans: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        let mut params = CertificateParams::new(sans)
            .with_context(|| format!("subject alternative names {hosts:?}"))?;
        params.distinguished_name = common_name(cn);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = usages.to_vec();
        params.use_authority_key_identifier_extension = true;
        set_validity(&mut params);
        let key = KeyPair::generate().with_context(|| format!("generate {name}'s key"))?;
        let cert = params
            .signed_by(&key, &*self.issuer)
            .with_context(|| format!("sign {name}'s certificate"))?;
        let issued = Issued {
            cert: self.dir.join(format!("{name}.crt")),
            key: self.dir.join(format!("{name}.key")),
        };
        write_file(&issued.cert, cert.pem().as_bytes(), 0o644)?;
        // Postgres refuses a key that others can read.
        write_file(&issued.key, key.serialize_pem().as_bytes(), 0o600)?;
        Ok(issued)
    }
}

fn common_name(cn: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, cn);
    name
}

fn set_validity(params: &mut CertificateParams) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - BACKDATED;
    params.not_after = now + VALID_FOR;
}

/// Writes `contents` to a file created with `mode` (a file already there keeps its own).
fn write_file(path: &Path, contents: &[u8], mode: u32) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("create {}", path.display()))?;
    file.write_all(contents)
        .with_context(|| format!("write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use rustls::server::WebPkiClientVerifier;
    use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

    use super::*;

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    fn chain(path: &Path) -> Vec<CertificateDer<'static>> {
        CertificateDer::pem_file_iter(path)
            .expect("open a certificate")
            .collect::<Result<_, _>>()
            .expect("parse a certificate")
    }

    fn key(path: &Path) -> PrivateKeyDer<'static> {
        PrivateKeyDer::from_pem_file(path).expect("parse a key")
    }

    fn roots(ca: &Ca) -> Arc<RootCertStore> {
        let mut roots = RootCertStore::empty();
        for cert in chain(&ca.cert) {
            roots.add(cert).expect("a CA certificate rustls accepts");
        }
        Arc::new(roots)
    }

    /// A full handshake in memory: `Ok` when both sides accept each other.
    fn handshake(
        trusted: &Ca,
        server: &Issued,
        host: &str,
        client: Option<(&Ca, &Issued)>,
    ) -> Result<(), rustls::Error> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?;
        let builder = match client {
            Some((client_ca, _)) => builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(roots(client_ca), provider())
                    .build()
                    .expect("a client verifier"),
            ),
            None => builder.with_no_client_auth(),
        };
        let server_config = builder.with_single_cert(chain(&server.cert), key(&server.key))?;
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots(trusted));
        let client_config = match client {
            Some((_, issued)) => {
                builder.with_client_auth_cert(chain(&issued.cert), key(&issued.key))?
            }
            None => builder.with_no_client_auth(),
        };
        let name = ServerName::try_from(host.to_string()).expect("a server name");
        let mut c = ClientConnection::new(Arc::new(client_config), name)?;
        let mut s = ServerConnection::new(Arc::new(server_config))?;
        while c.is_handshaking() || s.is_handshaking() {
            let mut wire = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut wire).expect("client writes");
            }
            s.read_tls(&mut wire.as_slice()).expect("server reads");
            s.process_new_packets()?;
            let mut wire = Vec::new();
            while s.wants_write() {
                s.write_tls(&mut wire).expect("server writes");
            }
            c.read_tls(&mut wire.as_slice()).expect("client reads");
            c.process_new_packets()?;
        }
        Ok(())
    }

    /// A CA in a temp dir (removed when the first value drops) and its `localhost` server.
    fn setup() -> (tempfile::TempDir, Ca, Issued) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new(dir.path(), "test-ca").expect("a CA");
        let server = ca
            .server("server", "localhost")
            .expect("a server certificate");
        (dir, ca, server)
    }

    #[test]
    fn a_client_trusting_the_ca_accepts_its_server_for_the_named_host_only() {
        let (_dir, ca, server) = setup();
        assert!(handshake(&ca, &server, "localhost", None).is_ok());
        assert!(handshake(&ca, &server, "example.org", None).is_err());
        let by_ip = ca.server("by-ip", "127.0.0.1").expect("an IP certificate");
        assert!(handshake(&ca, &by_ip, "127.0.0.1", None).is_ok());
        let other_dir = tempfile::tempdir().expect("tempdir");
        let other = Ca::new(other_dir.path(), "other").expect("another CA");
        assert!(handshake(&other, &server, "localhost", None).is_err());
    }

    #[test]
    fn client_and_cluster_node_certificates_pass_mutual_tls() {
        let (_dir, ca, server) = setup();
        let client = ca
            .client("client", "outbox-relay")
            .expect("a client certificate");
        assert!(handshake(&ca, &server, "localhost", Some((&ca, &client))).is_ok());
        // A cluster node is both ends of the cluster bus, by name or by address.
        let node = ca.cluster_node("node").expect("a node certificate");
        for host in ["localhost", "127.0.0.1"] {
            assert!(
                handshake(&ca, &node, host, Some((&ca, &node))).is_ok(),
                "{host}"
            );
        }
        // A server-only certificate is no client certificate.
        assert!(handshake(&ca, &node, "localhost", Some((&ca, &server))).is_err());
    }

    #[test]
    fn keys_are_readable_by_their_owner_only() {
        use std::os::unix::fs::PermissionsExt as _;
        let (dir, ca, _) = setup();
        let issued = ca
            .client("client", "someone")
            .expect("a client certificate");
        let mode = std::fs::metadata(&issued.key)
            .expect("key file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
        assert_eq!(ca.cert, dir.path().join("ca.crt"));
        assert!(std::fs::read_to_string(&issued.cert)
            .expect("cert file")
            .starts_with("-----BEGIN CERTIFICATE-----"));
    }
}
