//! Secrets read from files: `DATABASE_URL_FILE`, `REDIS_URL_FILE` and
//! `OUTBOX__SECTION__KEY_FILE` for each setting that holds a secret, so a Kubernetes Secret
//! mounted as files (or a Docker secret) never has to pass through the environment. A value
//! and its file both set is a bad setting: the relay would otherwise have to guess.
//!
//! Only the secret settings take a file: other settings ending in `_file` (`redis.ca_file`)
//! are paths already.

use std::path::Path;

use super::ConfigError;

/// A secret setting and the environment variables that may give it, the value's first.
struct Secret {
    setting: &'static str,
    value_vars: &'static [&'static str],
    file_vars: &'static [&'static str],
}

const SECRETS: [Secret; 5] = [
    Secret {
        setting: "database.url",
        value_vars: &["DATABASE_URL", "OUTBOX__DATABASE__URL"],
        file_vars: &["DATABASE_URL_FILE", "OUTBOX__DATABASE__URL_FILE"],
    },
    Secret {
        setting: "redis.url",
        value_vars: &["REDIS_URL", "OUTBOX__REDIS__URL"],
        file_vars: &["REDIS_URL_FILE", "OUTBOX__REDIS__URL_FILE"],
    },
    Secret {
        setting: "redis.sentinel_password",
        value_vars: &["OUTBOX__REDIS__SENTINEL_PASSWORD"],
        file_vars: &["OUTBOX__REDIS__SENTINEL_PASSWORD_FILE"],
    },
    Secret {
        setting: "admin.token",
        value_vars: &["OUTBOX__ADMIN__TOKEN"],
        file_vars: &["OUTBOX__ADMIN__TOKEN_FILE"],
    },
    Secret {
        setting: "admin.read_only_token",
        value_vars: &["OUTBOX__ADMIN__READ_ONLY_TOKEN"],
        file_vars: &["OUTBOX__ADMIN__READ_ONLY_TOKEN_FILE"],
    },
];

/// Whether `var` names a secret's file (the environment layer leaves these out: they are
/// not settings).
pub(super) fn is_file_var(var: &str) -> bool {
    SECRETS
        .iter()
        .any(|s| s.file_vars.iter().any(|f| f.eq_ignore_ascii_case(var)))
}

/// The secrets given as files in the environment `env`, as (setting, value).
pub(super) fn from_files(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(&'static str, String)>, ConfigError> {
    let mut found = Vec::new();
    for secret in &SECRETS {
        let files: Vec<(&str, String)> = secret
            .file_vars
            .iter()
            .filter_map(|var| env(var).map(|path| (*var, path)))
            .collect();
        let Some((file_var, path)) = files.first() else {
            continue;
        };
        if let Some((other, _)) = files.get(1) {
            return Err(ConfigError::new(
                secret.setting,
                format!("{file_var} and {other} are both set; keep one"),
            ));
        }
        if let Some(value_var) = secret.value_vars.iter().find(|v| env(v).is_some()) {
            return Err(ConfigError::new(
                secret.setting,
                format!("{value_var} and {file_var} are both set; keep one"),
            ));
        }
        found.push((
            secret.setting,
            read(file_var, Path::new(path), secret.setting)?,
        ));
    }
    Ok(found)
}

/// The file's text without one trailing newline (as `echo` and most editors leave it).
fn read(var: &str, path: &Path, setting: &str) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new(
            setting,
            format!("{var}: cannot read {}: {e}", path.display()),
        )
    })?;
    let text = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn a_file_gives_the_secret_without_its_last_newline() {
        let dir = tempfile::tempdir().expect("dir");
        let token = dir.path().join("token");
        std::fs::write(&token, "s3cret\n").expect("write");
        let url = dir.path().join("url");
        std::fs::write(&url, "postgres://u:p@db/app").expect("write");
        let token_path = token.display().to_string();
        let url_path = url.display().to_string();
        let got = from_files(&env(&[
            ("OUTBOX__ADMIN__TOKEN_FILE", &token_path),
            ("DATABASE_URL_FILE", &url_path),
        ]))
        .expect("read");
        assert!(got.contains(&("admin.token", "s3cret".into())));
        assert!(got.contains(&("database.url", "postgres://u:p@db/app".into())));
        assert!(is_file_var("outbox__admin__token_file"));
        assert!(
            !is_file_var("OUTBOX__REDIS__CA_FILE"),
            "a path setting, not a secret"
        );
    }

    #[test]
    fn a_value_and_its_file_together_or_a_missing_file_are_refused() {
        let err = from_files(&env(&[
            ("REDIS_URL", "redis://h"),
            ("REDIS_URL_FILE", "/x"),
        ]))
        .expect_err("both");
        assert_eq!(err.setting, "redis.url");
        assert!(
            err.message.contains("REDIS_URL and REDIS_URL_FILE"),
            "{}",
            err.message
        );
        let err = from_files(&env(&[("OUTBOX__ADMIN__TOKEN_FILE", "/no/such/file")]))
            .expect_err("missing");
        assert!(err.message.contains("/no/such/file"), "{}", err.message);
    }
}
