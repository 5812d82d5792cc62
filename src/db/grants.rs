//! The runtime role's rights (`database.runtime_role`): `migrate`, run by a role that may change
//! the schema, grants a separate role what `run`, `replay` and `repartition` need on the relay's
//! tables and nothing more (rows of the `outbox*` tables, their sequences, the schema's usage).
//! Granted in the migration's transaction, so the rights always match the tables.

use diesel::connection::LoadConnection;
use diesel::pg::Pg;
use diesel::sql_types::Text;
use diesel::{Connection, QueryableByName, RunQueryDsl};

#[derive(QueryableByName)]
struct Statement {
    #[diesel(sql_type = Text)]
    statement: String,
}

/// The GRANT statements for `role` (quoted by Postgres' `%I`), one per table and sequence of
/// the relay in the current schema.
const STATEMENTS: &str = "
SELECT format('GRANT USAGE ON SCHEMA %I TO %I', current_schema(), $1) AS statement
UNION ALL
SELECT format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %I.%I TO %I',
              schemaname, tablename, $1)
  FROM pg_tables
 WHERE schemaname = current_schema() AND (tablename = 'outbox' OR tablename LIKE 'outbox\\_%')
UNION ALL
SELECT format('GRANT USAGE, SELECT, UPDATE ON SEQUENCE %I.%I TO %I',
              schemaname, sequencename, $1)
  FROM pg_sequences
 WHERE schemaname = current_schema() AND sequencename LIKE 'outbox\\_%'";

/// Grants `role` the relay's runtime rights; the number of statements run. A role that does
/// not exist fails (with Postgres' message naming it).
pub fn grant<C>(c: &mut C, role: &str) -> Result<usize, diesel::result::Error>
where
    C: Connection<Backend = Pg> + LoadConnection,
{
    let statements: Vec<Statement> = diesel::sql_query(STATEMENTS)
        .bind::<Text, _>(role)
        .load(c)?;
    for s in &statements {
        diesel::sql_query(&s.statement).execute(c)?;
    }
    Ok(statements.len())
}
