//! Raw SQL that a connection keeps prepared: the relay's hot-path statements and the consumer
//! library's inbox statements.
//!
//! diesel's `sql_query` declares itself unsafe to cache (its text might be built from input,
//! and a cache keyed by text would then grow without bound). diesel-async honours that by
//! preparing the statement anew on every run: a Parse/Describe round trip and a fresh plan
//! before the Bind/Execute round trip. A claim cycle runs several such statements, so at low
//! rates those extra round trips would be a large share of commit-to-stream latency.
//!
//! [`prepared`] wraps a `sql_query` whose text is a constant (or built only from constants)
//! and lets diesel-async cache it per connection, keyed by its text and bind types: later
//! runs send only Bind/Execute. Whether a connection caches at all is the connection's own
//! setting: behind a pooler in transaction mode (PgBouncer) a statement prepared on one server
//! connection is missing on the next, so such a connection has its cache turned off
//! (`set_prepared_statement_cache_size(CacheSize::Disabled)`, which the relay does for
//! `database.prepared_statements = false`), and then these statements are parsed on every run
//! like any `sql_query`. Never wrap a statement whose text carries input: every distinct text is
//! a cache entry.

use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::QueryResult;

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
        Ok(true)
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
    fn a_wrapped_statement_may_be_cached() {
        let raw = diesel::sql_query("SELECT 1");
        assert_eq!(raw.is_safe_to_cache_prepared(&Pg).ok(), Some(false));
        let query = prepared(diesel::sql_query("SELECT 1"));
        assert_eq!(query.is_safe_to_cache_prepared(&Pg).ok(), Some(true));
    }
}
