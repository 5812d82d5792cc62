//! Where the tests' shared Postgres and Redis are, and names of a test's own on them (a
//! database, a key prefix), so tests run side by side without seeing each other's data.

/// Where the tests' Postgres listens: `OUTBOX_TEST_PG_ADDR` (`host:port`; `make test` sets it
/// to the private cluster's when the system's would not let the tests in), else
/// 127.0.0.1:5432.
pub fn pg_addr() -> (String, u16) {
    std::env::var("OUTBOX_TEST_PG_ADDR")
        .ok()
        .and_then(|addr| {
            let (host, port) = addr.rsplit_once(':')?;
            Some((host.to_string(), port.parse().ok()?))
        })
        .unwrap_or_else(|| ("127.0.0.1".to_string(), 5432))
}

/// The URL of database `name` on the tests' Postgres, as user postgres (trust).
pub fn pg_url(name: &str) -> String {
    let (host, port) = pg_addr();
    format!("postgres://postgres@{host}:{port}/{name}")
}

/// The tests' shared Redis: `OUTBOX_TEST_REDIS_URL` (a Valkey, for `make test-valkey`), else
/// the local one on 6379.
pub fn redis_url() -> String {
    std::env::var("OUTBOX_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A name no other test uses: `stem` and 16 random hex digits, lower case (a valid unquoted
/// Postgres identifier when `stem` is one).
pub fn unique_name(stem: &str) -> String {
    format!("{stem}_{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_differ_and_urls_name_the_database() {
        assert_ne!(unique_name("t"), unique_name("t"));
        assert!(unique_name("outbox_t").starts_with("outbox_t_"));
        assert!(pg_url("x").ends_with("/x"));
    }
}
