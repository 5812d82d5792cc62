//! `[admin]`: the admin HTTP server (health, metrics, API, UI): where it listens and who may
//! use it.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::lenient;
use super::rule::Rule;
use super::{ConfigError, Settings};

/// Admin server settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminSettings {
    /// Listen address, `host:port`.
    pub addr: String,
    /// Bearer token for the API and the UI login; without one, only loopback is served.
    #[serde(deserialize_with = "lenient::opt_string")]
    pub token: Option<String>,
    /// A second token that may look at everything (API reads, UI pages) but change nothing.
    #[serde(deserialize_with = "lenient::opt_string")]
    pub read_only_token: Option<String>,
    /// Wrong tokens one client address may present per minute (API or login page) before
    /// it is refused with 429 for the rest of that minute; 0 turns the limit off.
    pub failed_logins_per_minute: u32,
    /// The payload and header bytes one page of events may hold (API and UI lists): a page
    /// stops short of its `limit` there, its `next` cursor going on.
    pub max_response_bytes: u64,
    /// Topics that get a `topic` label of their own on `/metrics`; the events of any topic
    /// beyond them are counted under `topic="_other"`, so that producers writing many topic
    /// names cannot grow the scrape without bound.
    pub max_metric_topics: usize,
}

impl Default for AdminSettings {
    fn default() -> Self {
        AdminSettings {
            addr: "127.0.0.1:8080".into(),
            token: None,
            read_only_token: None,
            failed_logins_per_minute: 10,
            max_response_bytes: 4 * 1024 * 1024,
            max_metric_topics: 500,
        }
    }
}

impl Settings {
    /// The parsed admin listen address.
    pub fn admin_addr(&self) -> Result<SocketAddr, ConfigError> {
        let addr = &self.admin.addr;
        if let Ok(ip) = addr.parse() {
            return Ok(ip);
        }
        // A host name (`localhost:8080`): its first address, as a listener binds one.
        std::net::ToSocketAddrs::to_socket_addrs(addr.as_str())
            .ok()
            .and_then(|mut addrs| addrs.next())
            .ok_or_else(|| {
                ConfigError::new(
                    "admin.addr",
                    format!(
                        "{addr:?} is not host:port (127.0.0.1:8080, [::1]:8080, localhost:8080)"
                    ),
                )
            })
    }
}

/// The checks of `[admin]`.
pub(super) const RULES: &[Rule<Settings>] = &[
    Rule {
        settings: &["admin.max_metric_topics"],
        check: |s| match s.admin.max_metric_topics {
            0 => Err("must be at least 1".to_string()),
            _ => Ok(()),
        },
    },
    Rule {
        settings: &["admin.max_response_bytes"],
        check: |s| match s.admin.max_response_bytes {
            n if n < 65_536 => Err(format!("must be at least 65536 (64 KiB), got {n}")),
            _ => Ok(()),
        },
    },
    Rule {
        settings: &["admin.addr"],
        check: |s| s.admin_addr().map(|_| ()).map_err(|e| e.message),
    },
    Rule {
        settings: &["admin.read_only_token"],
        check: |s| {
            let token = s.admin.token.as_deref().unwrap_or("");
            match s.admin.read_only_token.as_deref() {
                Some(ro) if !ro.is_empty() && token.is_empty() => {
                    Err("needs admin.token too (without a token the admin is open to all)".into())
                }
                Some(ro) if ro == token => Err("must differ from admin.token".into()),
                _ => Ok(()),
            }
        },
    },
];

#[cfg(test)]
mod tests {
    use super::super::rules::check;
    use super::*;

    #[test]
    fn the_admin_address_may_name_a_host() {
        let mut s = Settings::default();
        for (addr, loopback) in [
            ("127.0.0.1:9090", true),
            ("[::1]:9090", true),
            ("localhost:9090", true),
            ("0.0.0.0:8080", false),
        ] {
            s.admin.addr = addr.into();
            let got = s.admin_addr().expect(addr);
            assert_eq!(got.port(), if addr.ends_with("8080") { 8080 } else { 9090 });
            assert_eq!(got.ip().is_loopback(), loopback, "{addr}");
        }
        for bad in [
            "localhost",
            ":8080",
            "no such host.invalid:80",
            "127.0.0.1:99999",
        ] {
            s.admin.addr = bad.into();
            let err = check(&s, &|k| k == "admin.addr").expect_err(bad);
            assert!(err.message.contains("host:port"), "{bad}: {}", err.message);
        }
    }
}
