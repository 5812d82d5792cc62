//! Raw SQL that a connection keeps prepared: the inbox's statements here, and the relay's
//! hot-path statements (`outbox-relay` uses this module as its `db::prepared`).
//!
//! diesel's `sql_query` declares itself unsafe to cache (its text might be built from input,
//! and a cache keyed by text would then grow without bound). diesel-async honours that by
//! preparing the statement anew on every run: a Parse/Describe round trip and a fresh plan
//! before the Bind/Execute round trip. A claim cycle runs several such statements, so at low
//! rates those extra round trips would be a large share of commit-to-stream latency.
//!
//! [`prepared`] wraps a `sql_query` whose text is a constant (or built only from constants)
//! and lets diesel-async cache it per connection, keyed by its text and bind types: later
//! runs send only Bind/Execute. Behind a pooler in transaction mode (PgBouncer) a statement
//! prepared on one server connection is missing on the next: turn the caching off there with
//! [`enable`]`(false)` (the relay does for `database.prepared_statements = false`).
//! Never wrap a statement whose text carries input: every distinct text is a cache entry.

use std::sync::atomic::{AtomicBool, Ordering};

use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::QueryResult;

/// Whether [`prepared`] statements are cached. Process-wide because it describes the
/// database path (a pooler in transaction mode or not), the same for every connection.
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns caching on or off; when off, [`prepared`] statements are parsed on every run like
/// any `sql_query`.
pub fn enable(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// A statement diesel-async may keep prepared on its connection; see the module docs.
#[derive(Debug, Clone)]
pub struct Prepared<Q>(Q);

/// Marks `query` (a `sql_query` with constant text and its binds) as cacheable.
pub fn prepared<Q>(query: Q) -> Prepared<Q> {
    Prepared(query)
}

impl<Q: QueryFragment<Pg>> QueryFragment<Pg> for Prepared<Q> {
    fn walk_ast<'b>(&'b self, pass: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        self.0.walk_ast(pass)
    }

    // The one thing this wrapper changes: the inner query's walk says "unsafe", because
    // `sql_query` cannot know its text is constant. Callers promise that it is.
    fn is_safe_to_cache_prepared(&self, _backend: &Pg) -> QueryResult<bool> {
        Ok(ENABLED.load(Ordering::Relaxed))
    }
}

// No static id: the cache then keys the statement by its SQL text and bind types.
impl<Q> QueryId for Prepared<Q> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Q: Query> Query for Prepared<Q> {
    type SqlType = Q::SqlType;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_decides_whether_a_statement_is_cached() {
        let query = prepared(diesel::sql_query("SELECT 1"));
        assert_eq!(
            diesel::sql_query("SELECT 1")
                .is_safe_to_cache_prepared(&Pg)
                .ok(),
            Some(false)
        );
        assert_eq!(query.is_safe_to_cache_prepared(&Pg).ok(), Some(true));
        enable(false);
        let off = query.is_safe_to_cache_prepared(&Pg).ok();
        enable(true);
        assert_eq!(off, Some(false));
    }
}
