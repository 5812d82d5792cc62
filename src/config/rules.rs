//! The validation rules of the settings, as a list: each names the settings it reads and says,
//! for a person, what would work instead. A relation between two settings is reported under
//! the one the user set, so nobody is told to fix a setting they never touched.

use std::time::Duration;

use super::{ConfigError, Settings};
use outbox_core::redis_conn::Topology;

/// One rule: the settings it reads (the first is named unless the user set only another) and
/// the check, which returns what is wrong.
struct Rule {
    settings: &'static [&'static str],
    check: fn(&Settings) -> Result<(), String>,
}

/// Checks every rule in order; the first broken one is the error.
pub(super) fn check(settings: &Settings, given: &dyn Fn(&str) -> bool) -> Result<(), ConfigError> {
    for rule in RULES {
        if let Err(message) = (rule.check)(settings) {
            let named = rule
                .settings
                .iter()
                .find(|name| given(name))
                .unwrap_or(&rule.settings[0]);
            return Err(ConfigError::new(named, message));
        }
    }
    Ok(())
}

fn within<T: PartialOrd + std::fmt::Display>(value: T, low: T, high: T) -> Result<(), String> {
    if value < low || value > high {
        return Err(format!("must be {low}..={high}, not {value}"));
    }
    Ok(())
}

fn at_least_one(value: u64) -> Result<(), String> {
    if value == 0 {
        return Err("must be at least 1".into());
    }
    Ok(())
}

fn positive(value: Duration) -> Result<(), String> {
    if value.is_zero() {
        return Err("must be longer than 0s".into());
    }
    Ok(())
}

fn human(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

const RULES: &[Rule] = &[
    Rule {
        settings: &["groups"],
        check: |s| super::groups::check(&s.groups),
    },
    Rule {
        settings: &["topics"],
        check: |s| super::topics::check(&s.topics),
    },
    Rule {
        settings: &["database.url"],
        check: |s| s.database.url.as_deref().map_or(Ok(()), postgres_url),
    },
    Rule {
        settings: &["database.pool_size", "relay.workers"],
        check: |s| {
            let least = s.relay.workers.max(1) + 2;
            if s.database.pool_size < least {
                return Err(format!(
                    "database.pool_size ({}) must be at least relay.workers + 2 = {least}: the admin server has 2 connections and each claim worker needs one",
                    s.database.pool_size
                ));
            }
            Ok(())
        },
    },
    Rule {
        settings: &["redis.max_memory_ratio"],
        check: |s| {
            let r = s.redis.max_memory_ratio;
            if r > 0.0 && r <= 1.0 {
                Ok(())
            } else {
                Err(format!(
                    "must be above 0 and at most 1 (a share of Redis's maxmemory), not {r}"
                ))
            }
        },
    },
    Rule {
        settings: &["redis.sentinel_master", "redis.cluster"],
        check: |s| {
            match (&s.redis.sentinel_master, s.redis.cluster) {
            (Some(_), true) => Err("a Redis Cluster is not reached through Sentinels: set redis.cluster or redis.sentinel_master, not both".into()),
            _ => Ok(()),
        }
        },
    },
    Rule {
        settings: &["redis.url", "redis.cluster", "redis.sentinel_master"],
        check: |s| redis_url(&s.redis.url, &s.redis.topology()),
    },
    Rule {
        settings: &[
            "redis.ca_file",
            "redis.client_cert_file",
            "redis.client_key_file",
        ],
        check: |s| {
            crate::publish::connect::tls_files(&s.redis)
                .map(|_| ())
                .map_err(|e| e.0)
        },
    },
    Rule {
        settings: &["redis.stream_prefix"],
        check: |s| {
            if s.redis.stream_prefix.chars().any(char::is_whitespace) {
                return Err("must not contain whitespace".into());
            }
            Ok(())
        },
    },
    Rule {
        settings: &["redis.max_payload_bytes"],
        check: |s| at_least_one(s.redis.max_payload_bytes as u64),
    },
    Rule {
        settings: &["redis.timeout"],
        check: |s| positive(s.redis.timeout),
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
    Rule {
        settings: &["retry.max_attempts"],
        check: |s| at_least_one(u64::from(s.retry.max_attempts)),
    },
    Rule {
        settings: &["retry.base"],
        check: |s| positive(s.retry.base),
    },
    Rule {
        settings: &["retry.max", "retry.base"],
        check: |s| {
            if s.retry.max < s.retry.base {
                return Err(format!(
                    "retry.max ({}) must be at least retry.base ({})",
                    human(s.retry.max),
                    human(s.retry.base)
                ));
            }
            Ok(())
        },
    },
    Rule {
        settings: &["relay.lease"],
        check: |s| {
            if s.relay.lease < Duration::from_secs(1) {
                return Err(format!("must be at least 1s, not {}", human(s.relay.lease)));
            }
            Ok(())
        },
    },
    Rule {
        settings: &["redis.dedup_window", "relay.lease"],
        check: |s| {
            if s.redis.dedup_window < s.relay.lease * 2 {
                return Err(format!(
                    "redis.dedup_window ({}) must be at least twice relay.lease ({}): a claim abandoned by a crashed replica is retaken within the lease, and its second XADD must still be refused; use a window of {} or more, or a shorter lease",
                    human(s.redis.dedup_window),
                    human(s.relay.lease),
                    human(s.relay.lease * 2)
                ));
            }
            Ok(())
        },
    },
    Rule {
        settings: &["redis.wait_timeout", "redis.timeout", "relay.lease"],
        check: |s| {
            positive(s.redis.wait_timeout)?;
            let waits = s.redis.wait_replicas > 0 || s.redis.wait_fsync;
            if waits && s.redis.wait_timeout + s.redis.timeout >= s.relay.lease {
                return Err(format!(
                    "redis.wait_timeout ({}) plus redis.timeout ({}) must be shorter than relay.lease ({}): the wait for replicas is part of the publish, which must end within the claim",
                    human(s.redis.wait_timeout),
                    human(s.redis.timeout),
                    human(s.relay.lease)
                ));
            }
            Ok(())
        },
    },
    Rule {
        settings: &["redis.timeout", "relay.lease"],
        check: |s| {
            if s.redis.timeout >= s.relay.lease {
                return Err(format!(
                    "redis.timeout ({}) must be shorter than relay.lease ({}): a publish must end within the claim; use a timeout below {} (half of it is the default), or a longer lease",
                    human(s.redis.timeout),
                    human(s.relay.lease),
                    human(s.relay.lease)
                ));
            }
            Ok(())
        },
    },
    Rule {
        settings: &["relay.stall_after", "relay.lease"],
        check: |s| {
            let least = s.relay.lease.max(s.relay.poll_interval);
            if s.relay.stall_after <= least {
                return Err(format!(
                    "relay.stall_after ({}) must be longer than relay.lease and relay.poll_interval ({}): a healthy cycle may take that long",
                    human(s.relay.stall_after),
                    human(least)
                ));
            }
            Ok(())
        },
    },
    Rule {
        settings: &["relay.batch_size"],
        check: |s| within(s.relay.batch_size, 1, 10_000),
    },
    Rule {
        settings: &["relay.batch_bytes"],
        check: |s| within(s.relay.batch_bytes, 1024, 1024 * 1024 * 1024),
    },
    Rule {
        settings: &["relay.cluster_claims"],
        check: |s| within(s.relay.cluster_claims, 0, 1024),
    },
    Rule {
        settings: &["relay.workers"],
        check: |s| within(s.relay.workers, 1, 32),
    },
    Rule {
        settings: &["relay.poll_interval"],
        check: |s| positive(s.relay.poll_interval),
    },
    Rule {
        settings: &["relay.heartbeat_interval"],
        check: |s| positive(s.relay.heartbeat_interval),
    },
    Rule {
        settings: &["retention.interval"],
        check: |s| positive(s.retention.interval),
    },
    Rule {
        settings: &["retention.batch_size"],
        check: |s| within(s.retention.batch_size, 1, 100_000),
    },
    Rule {
        settings: &["instance_id"],
        check: |s| match &s.instance_id {
            Some(id) if id.is_empty() || id.len() > 255 => {
                Err("must be 1 to 255 characters".into())
            }
            _ => Ok(()),
        },
    },
];

fn redis_url(raw: &str, topology: &Topology) -> Result<(), String> {
    match topology {
        Topology::Cluster => return crate::publish::connect::check_seeds(raw),
        Topology::Sentinel { master, .. } => {
            if master.is_empty() {
                return Err("redis.sentinel_master must name the master".into());
            }
            for url in crate::publish::connect::seeds(raw) {
                redis::Client::open(url.as_str()).map_err(|e| format!("Sentinel {url}: {e}"))?;
            }
            return Ok(());
        }
        Topology::Single => {}
    }
    if raw.contains(',') {
        return Err(format!(
            "holds several nodes ({raw}): a list of seed nodes is for a Redis Cluster (set redis.cluster = true, OUTBOX__REDIS__CLUSTER=true) or of Sentinels (set redis.sentinel_master); or give one redis:// URL"
        ));
    }
    redis::Client::open(raw)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn postgres_url(raw: &str) -> Result<(), String> {
    let parsed = url::Url::parse(raw).map_err(|e| e.to_string())?;
    if !matches!(parsed.scheme(), "postgres" | "postgresql") {
        return Err(format!(
            "scheme must be postgres:// or postgresql://, not {}://",
            parsed.scheme()
        ));
    }
    crate::db::tls::Target::parse(raw)
        .map(|_| ())
        .map_err(|e| e.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn only(key: &'static str) -> impl Fn(&str) -> bool {
        move |k| k == key
    }

    #[test]
    fn a_relation_is_reported_under_the_setting_the_user_gave() {
        let mut s = Settings::default();
        s.redis.timeout = Duration::from_secs(40);
        let err = check(&s, &only("redis.timeout")).expect_err("timeout above lease");
        assert_eq!(err.setting, "redis.timeout");
        let err = check(&s, &only("relay.lease")).expect_err("timeout above lease");
        assert_eq!(err.setting, "relay.lease");
        assert!(err.message.contains("below 30s"), "{}", err.message);
    }

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
            let err = check(&s, &only("admin.addr")).expect_err(bad);
            assert!(err.message.contains("host:port"), "{bad}: {}", err.message);
        }
    }

    #[test]
    fn every_rule_holds_on_the_defaults() {
        assert!(check(&Settings::default(), &|_| false).is_ok());
    }

    #[test]
    fn several_nodes_need_cluster_mode_and_cluster_seeds_are_checked() {
        let mut s = Settings::default();
        s.redis.url = "redis://h1:7000,redis://h2:7001".into();
        let err = check(&s, &only("redis.url")).expect_err("a list without cluster mode");
        assert_eq!(err.setting, "redis.url");
        assert!(
            err.message.contains("redis.cluster = true"),
            "{}",
            err.message
        );
        s.redis.cluster = true;
        assert!(check(&s, &only("redis.url")).is_ok());
        s.redis.url = " h1:7000, h2:7001 ".into();
        assert!(check(&s, &only("redis.url")).is_ok(), "host:port seeds");
        s.redis.url = "redis://127.0.0.1:6379".into();
        assert!(check(&s, &only("redis.cluster")).is_ok(), "one seed");
        for (bad, says) in [
            (" , ", "no seed node"),
            ("redis://h1:7000/2", "database 0"),
            ("http://h1:7000", "redis://"),
            ("redis://h1:7000,rediss://h2:7001", "TLS"),
        ] {
            s.redis.url = bad.into();
            let err = check(&s, &only("redis.url")).expect_err(bad);
            assert!(err.message.contains(says), "{bad}: {}", err.message);
        }
    }

    #[test]
    fn ranges_say_what_works() {
        let mut s = Settings::default();
        s.relay.workers = 0;
        let err = check(&s, &|_| true).expect_err("no workers");
        assert_eq!(err.setting, "relay.workers");
        assert_eq!(err.message, "must be 1..=32, not 0");
    }
}
