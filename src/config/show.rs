//! `outbox-relay config`: the effective settings as TOML, secrets replaced by `***`, so an
//! operator can see what a replica runs with (every layer applied, the defaults that follow
//! `relay.lease` resolved) and paste it into a ticket.

use super::{ConfigError, Settings};

/// What a secret is shown as.
pub const MASK: &str = "***";

/// `settings` as TOML with passwords in URLs and tokens masked.
pub fn masked_toml(settings: &Settings) -> Result<String, ConfigError> {
    let mut shown = settings.clone();
    shown.database.url = shown.database.url.as_deref().map(mask_urls);
    shown.redis.url = mask_urls(&shown.redis.url);
    for secret in [
        &mut shown.redis.sentinel_password,
        &mut shown.admin.token,
        &mut shown.admin.read_only_token,
    ] {
        if secret.is_some() {
            *secret = Some(MASK.into());
        }
    }
    toml::to_string(&shown).map_err(|e| ConfigError::new("configuration", e.to_string()))
}

/// Every URL of a comma-separated list with its password (`user:PASSWORD@`, `:PASSWORD@`,
/// `?password=...`) masked; the rest kept, so the hosts and options stay readable.
pub fn mask_urls(urls: &str) -> String {
    urls.split(',').map(mask_url).collect::<Vec<_>>().join(",")
}

fn mask_url(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest = scheme_end + 3;
        let authority_end = out[rest..].find(['/', '?']).map_or(out.len(), |i| rest + i);
        if let Some(at) = out[rest..authority_end].rfind('@').map(|i| rest + i) {
            if let Some(colon) = out[rest..at].find(':').map(|i| rest + i) {
                out.replace_range(colon + 1..at, MASK);
            }
        }
    }
    if let Some(query) = out.find('?') {
        let (head, params) = out.split_at(query + 1);
        let params: Vec<String> = params
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}={MASK}"),
                _ => p.to_string(),
            })
            .collect();
        out = format!("{head}{}", params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_and_the_rest_kept() {
        for (url, shown) in [
            (
                "postgres://app:pw@db:5432/app",
                "postgres://app:***@db:5432/app",
            ),
            ("postgres://app@db/app", "postgres://app@db/app"),
            (
                "postgres://db/app?user=a&password=pw&sslmode=verify-full",
                "postgres://db/app?user=a&password=***&sslmode=verify-full",
            ),
            ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
            ("rediss://u:p@s@h:6380", "rediss://u:***@h:6380"),
            (
                "redis://h1:7000,redis://:pw@h2:7001",
                "redis://h1:7000,redis://:***@h2:7001",
            ),
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
        ] {
            assert_eq!(mask_urls(url), shown);
        }
    }

    #[test]
    fn every_setting_is_in_the_configuration_docs() {
        let docs = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/configuration.md"
        ));
        let all = serde_json::to_value(Settings::default()).expect("json");
        let mut missing = Vec::new();
        for (section, value) in all.as_object().expect("settings") {
            let keys: Vec<String> = match value.as_object() {
                Some(table) => table.keys().map(|k| format!("{section}.{k}")).collect(),
                None => vec![section.clone()],
            };
            for key in keys {
                let env = format!("OUTBOX__{}", key.to_uppercase().replace('.', "__"));
                if !docs.contains(&format!("`{key}`")) || !docs.contains(&format!("`{env}`")) {
                    missing.push(key);
                }
            }
        }
        assert!(
            missing.is_empty(),
            "settings without a row in docs/configuration.md: {missing:?}"
        );
    }

    #[test]
    fn the_toml_holds_every_section_and_no_secret() {
        let mut s = Settings::default();
        s.database.url = Some("postgres://app:hunter2@db/app".into());
        s.redis.url = "redis://:hunter2@r:6379".into();
        s.admin.token = Some("hunter2".into());
        s.admin.read_only_token = Some("hunter2".into());
        s.redis.sentinel_password = Some("hunter2".into());
        let text = masked_toml(&s).expect("toml");
        assert!(!text.contains("hunter2"), "{text}");
        for section in [
            "[database]",
            "[redis]",
            "[relay]",
            "[retry]",
            "[retention]",
            "[admin]",
        ] {
            assert!(text.contains(section), "{section} in {text}");
        }
        // It reads back as a configuration file.
        let back: Settings = toml::from_str(&text).expect("reads back");
        assert_eq!(back.relay.lease, s.relay.lease);
        assert_eq!(back.admin.token.as_deref(), Some(MASK));
    }
}
