//! The SQL of adopted tables (contract section 12): on each table listed in `[[tables]]`, a
//! statement trigger whose function copies every row the statement inserted into `outbox`, in
//! the inserting transaction. A row the transaction deletes again is copied all the same (the
//! trigger runs at the end of the `INSERT`, before the `DELETE`), a rolled-back one never is,
//! and rows already in the table are not (nothing is copied before the trigger exists). Bad
//! rows (a null payload or id, a topic that breaks the topic rule) fail the producer's
//! statement with an error naming the column. The registry `outbox_adopted_tables` records
//! what `migrate` prepared, so that `run` can refuse settings that differ.
//!
//! The function runs as the role that ran `migrate` (`SECURITY DEFINER`, with the search path
//! `migrate` had): a producer needs no grant on `outbox`, only its usual one on its own table.
//!
//! [`sync`] runs inside `migrate`'s transaction; [`drift`] is `run`'s check. Releasing a table
//! is only ever explicit (`migrate --release TABLE`).

use std::collections::HashMap;

use diesel::connection::LoadConnection;
use diesel::pg::Pg;
use diesel::sql_types::{Jsonb, Text};
use diesel::{Connection, QueryableByName, RunQueryDsl};

use crate::adopt::{TableSpec, TOPIC_PLACEHOLDER};

/// The trigger's name on every adopted table.
const TRIGGER: &str = "outbox_relay_adopt";

/// The transition table of the inserted rows, inside the trigger's function.
const NEW_ROWS: &str = "outbox_adopted_new";

/// Why a table could not be adopted, or released.
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    /// The table does not exist, or lacks a column, or a column has a type that cannot serve.
    #[error("[[tables]] `{table}`: {message}")]
    Table {
        /// The table as configured.
        table: String,
        /// What is wrong, naming the column.
        message: String,
    },
    /// A statement failed.
    #[error("adopting tables failed: {0}")]
    Query(#[from] diesel::result::Error),
}

/// One column of a table: its name and its type (`format_type`).
#[derive(Debug, Clone, QueryableByName)]
struct Column {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    ty: String,
}

/// A table's schema-qualified name as Postgres resolves it.
#[derive(Debug, QueryableByName)]
struct Resolved {
    #[diesel(sql_type = Text)]
    qualified: String,
    #[diesel(sql_type = Text)]
    function_name: String,
}

/// A registry row.
#[derive(Debug, QueryableByName)]
struct Registered {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Jsonb)]
    spec: serde_json::Value,
    #[diesel(sql_type = Text)]
    function_name: String,
}

/// What [`sync`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Synced {
    /// Tables prepared (new or changed).
    pub adopted: Vec<String>,
    /// Tables released on request, whose trigger and function were removed.
    pub released: Vec<String>,
    /// Tables adopted before, missing from the configuration and not asked to be released:
    /// they stay adopted.
    pub kept: Vec<String>,
    /// Tables asked to be released that were not adopted.
    pub not_adopted: Vec<String>,
}

/// Makes the database match `tables` and `release`: each listed table gets its trigger and
/// function (made again when its entry changed); each table named in `release` loses them.
/// A table adopted before and missing from `tables` is kept as it is: a `migrate` that was
/// not given the configuration (an init container, a command typed by hand) must never stop
/// a team's rows from being published, so releasing is only ever explicit. Never touches a
/// table's own columns or rows.
pub fn sync<C>(c: &mut C, tables: &[TableSpec], release: &[String]) -> Result<Synced, AdoptError>
where
    C: Connection<Backend = Pg> + LoadConnection,
{
    let mut synced = Synced::default();
    if let Some(both) = release
        .iter()
        .find(|name| tables.iter().any(|t| &t.name == *name))
    {
        return Err(AdoptError::Table {
            table: both.clone(),
            message: "is asked to be released (--release) and is still listed: remove it from \
                      [[tables]] first"
                .into(),
        });
    }
    let registered: Vec<Registered> = diesel::sql_query(
        "SELECT name, spec, function_name FROM outbox_adopted_tables ORDER BY name",
    )
    .load(c)?;
    for name in release {
        match registered.iter().find(|r| &r.name == name) {
            Some(old) => {
                release_table(c, &old.name, &old.function_name)?;
                synced.released.push(old.name.clone());
            }
            None => synced.not_adopted.push(name.clone()),
        }
    }
    for old in &registered {
        if !tables.iter().any(|t| t.name == old.name) && !release.contains(&old.name) {
            synced.kept.push(old.name.clone());
        }
    }
    for table in tables {
        let spec = spec_json(table);
        if registered
            .iter()
            .any(|r| r.name == table.name && r.spec == spec)
        {
            continue;
        }
        adopt(c, table, &spec)?;
        synced.adopted.push(table.name.clone());
    }
    Ok(synced)
}

/// The entry as the registry keeps it.
fn spec_json(table: &TableSpec) -> serde_json::Value {
    serde_json::to_value(table).unwrap_or(serde_json::Value::Null)
}

fn adopt<C>(c: &mut C, table: &TableSpec, spec: &serde_json::Value) -> Result<(), AdoptError>
where
    C: Connection<Backend = Pg> + LoadConnection,
{
    let refused = |message: String| AdoptError::Table {
        table: table.name.clone(),
        message,
    };
    let resolved: Vec<Resolved> = diesel::sql_query(
        "SELECT format('%I.%I', n.nspname, c.relname) AS qualified, \
                'outbox_adopt_' || left(encode(sha256(convert_to($2, 'UTF8')), 'hex'), 16) \
                  AS function_name \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE c.oid = to_regclass($1) AND c.relkind IN ('r', 'p')",
    )
    .bind::<Text, _>(qualified_name(table))
    .bind::<Text, _>(&table.name)
    .load(c)?;
    let Some(resolved) = resolved.into_iter().next() else {
        return Err(refused("no such table".into()));
    };
    let columns: Vec<Column> = diesel::sql_query(
        "SELECT attname::text AS name, format_type(atttypid, atttypmod) AS ty \
         FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped",
    )
    .bind::<Text, _>(qualified_name(table))
    .load(c)?;
    let types: HashMap<&str, &str> = columns
        .iter()
        .map(|col| (col.name.as_str(), col.ty.as_str()))
        .collect();
    let function = capture_function(table, &resolved, &types).map_err(refused)?;
    c.batch_execute(&function)?;
    c.batch_execute(&format!(
        "DROP TRIGGER IF EXISTS {TRIGGER} ON {table}; \
         CREATE TRIGGER {TRIGGER} AFTER INSERT ON {table} \
         REFERENCING NEW TABLE AS {NEW_ROWS} FOR EACH STATEMENT EXECUTE FUNCTION {function}()",
        table = resolved.qualified,
        function = ident(&resolved.function_name),
    ))?;
    diesel::sql_query(
        "INSERT INTO outbox_adopted_tables (name, spec, function_name) VALUES ($1, $2, $3) \
         ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, \
           function_name = EXCLUDED.function_name, adopted_at = now()",
    )
    .bind::<Text, _>(&table.name)
    .bind::<Jsonb, _>(spec)
    .bind::<Text, _>(&resolved.function_name)
    .execute(c)?;
    Ok(())
}

/// Removes a table's trigger (if the table still exists), its function and its registry row.
fn release_table<C>(c: &mut C, name: &str, function_name: &str) -> Result<(), AdoptError>
where
    C: Connection<Backend = Pg> + LoadConnection,
{
    let qualified = match name.split_once('.') {
        Some((schema, table)) => format!("{}.{}", ident(schema), ident(table)),
        None => ident(name),
    };
    c.batch_execute(&format!(
        "DO $release$ BEGIN \
           IF to_regclass({name}) IS NOT NULL THEN \
             EXECUTE 'DROP TRIGGER IF EXISTS {TRIGGER} ON ' || {table}; \
           END IF; \
         END $release$; \
         DROP FUNCTION IF EXISTS {function}();",
        name = literal(&qualified),
        table = literal(&qualified),
        function = ident(function_name),
    ))?;
    diesel::sql_query("DELETE FROM outbox_adopted_tables WHERE name = $1")
        .bind::<Text, _>(name)
        .execute(c)?;
    Ok(())
}

/// The table's name, each part quoted, as `to_regclass` reads it.
fn qualified_name(table: &TableSpec) -> String {
    match table.schema_and_table() {
        (Some(schema), name) => format!("{}.{}", ident(schema), ident(name)),
        (None, name) => ident(name),
    }
}

/// `name` as a quoted SQL identifier.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `text` as an SQL string literal (standard conforming strings).
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The trigger function that copies the inserted rows of `table` into `outbox`, given its
/// columns' types; or what is wrong, naming the column.
fn capture_function(
    table: &TableSpec,
    resolved: &Resolved,
    types: &HashMap<&str, &str>,
) -> Result<String, String> {
    for (key, column) in table.columns() {
        if !types.contains_key(column) {
            return Err(format!(
                "{key} names column `{column}`, which the table lacks"
            ));
        }
    }
    let col = |name: &str| format!("r.{}", ident(name));
    let id = if types.get(table.id.as_str()) == Some(&"uuid") {
        col(&table.id)
    } else {
        format!(
            "outbox_derived_uuid({}, {}::text)",
            literal(&resolved.qualified),
            col(&table.id)
        )
    };
    let payload = match types.get(table.payload.as_str()).copied().unwrap_or("") {
        "jsonb" => col(&table.payload),
        "json" => format!("{}::jsonb", col(&table.payload)),
        ty if ty == "text" || ty.starts_with("character") => {
            format!("outbox_text_payload({}::text)", col(&table.payload))
        }
        other => {
            return Err(format!(
                "payload column `{}` is {other}: it must be jsonb, json or text",
                table.payload
            ))
        }
    };
    let (prefix, suffix) = table
        .topic_format
        .split_once(TOPIC_PLACEHOLDER)
        .unwrap_or((table.topic_format.as_str(), ""));
    let topic = format!(
        "{} || {}::text || {}",
        literal(prefix),
        col(&table.topic),
        literal(suffix)
    );
    let key = match &table.key {
        Some(k) => format!("{}::text", col(k)),
        None => "NULL::text".into(),
    };
    let headers = if table.headers.is_empty() {
        "'{}'::jsonb".to_string()
    } else {
        let pairs: Vec<String> = table
            .headers
            .iter()
            .map(|(h, c)| format!("{}, {}::text", literal(h), col(c)))
            .collect();
        format!(
            "jsonb_strip_nulls(jsonb_build_object({}))",
            pairs.join(", ")
        )
    };
    let created = match &table.created_at {
        Some(c) => {
            let ty = types.get(c.as_str()).copied().unwrap_or("");
            if ty != "timestamp with time zone" {
                return Err(format!(
                    "created_at column `{c}` is {ty}: it must be timestamptz"
                ));
            }
            format!("coalesce({}, now())", col(c))
        }
        None => "now()".into(),
    };
    let refused = |column: &str, reason: &str| {
        literal(&format!(
            "outbox-relay: adopted table {}: column {column} {reason}",
            table.name
        ))
    };
    let source = literal(&resolved.qualified);
    // One statement over the new rows: a bad value calls `outbox_refuse_adopted_row`, which
    // raises naming the column, so good rows cost no second pass. The payload comes first so
    // that a row both without payload and without id is refused for its payload.
    Ok(format!(
        r#"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $outbox_adopt$
BEGIN
    INSERT INTO outbox (payload, id, topic, partition_key, headers, created_at, source_table)
    SELECT CASE WHEN {payload_raw} IS NULL
                THEN outbox_refuse_adopted_row({no_payload}, '23502', {payload_col}, NULL::jsonb)
                ELSE {payload} END,
           CASE WHEN {id_raw} IS NULL
                THEN outbox_refuse_adopted_row({no_id}, '23502', {id_col}, NULL::uuid)
                ELSE {id} END,
           CASE WHEN t.topic IS NULL OR char_length(t.topic) NOT BETWEEN 1 AND 255
                     OR t.topic ~ '[[:space:][:cntrl:]]'
                THEN outbox_refuse_adopted_row({bad_topic_before} || coalesce(quote_literal(t.topic), 'NULL')
                                         || {bad_topic_after}, '23514', {topic_col}, t.topic)
                ELSE t.topic END,
           {key}, {headers}, {created}, {source}
    FROM {NEW_ROWS} AS r CROSS JOIN LATERAL (SELECT {topic} AS topic) AS t;
    RETURN NULL;
END
$outbox_adopt$"#,
        function = ident(&resolved.function_name),
        payload_raw = col(&table.payload),
        id_raw = col(&table.id),
        no_payload = refused(&table.payload, "is null: an event needs a payload"),
        no_id = refused(&table.id, "is null: an event needs an id"),
        bad_topic_before = refused(&table.topic, "makes the topic "),
        bad_topic_after = literal(
            ", which breaks the topic rule (1 to 255 characters, no whitespace or control characters)"
        ),
        payload_col = literal(&table.payload),
        id_col = literal(&table.id),
        topic_col = literal(&table.topic),
    ))
}

/// What differs between `tables` and what `migrate` prepared, as one line for a person; `None`
/// when they match.
pub async fn drift(
    c: &mut diesel_async::AsyncPgConnection,
    tables: &[TableSpec],
) -> Result<Option<String>, super::DbError> {
    let query = diesel::sql_query(
        "SELECT name, spec, function_name FROM outbox_adopted_tables ORDER BY name",
    );
    let registered: Vec<Registered> = diesel_async::RunQueryDsl::load(query, c).await?;
    Ok(compare(tables, &registered))
}

fn compare(tables: &[TableSpec], registered: &[Registered]) -> Option<String> {
    for table in tables {
        match registered.iter().find(|r| r.name == table.name) {
            None => {
                return Some(format!(
                    "table `{}` is in [[tables]] but not prepared: run `outbox-relay migrate`",
                    table.name
                ))
            }
            Some(r) if r.spec != spec_json(table) => {
                return Some(format!(
                    "table `{}` is prepared for another [[tables]] entry than the one configured: run `outbox-relay migrate`",
                    table.name
                ))
            }
            Some(_) => {}
        }
    }
    registered
        .iter()
        .find(|r| !tables.iter().any(|t| t.name == r.name))
        .map(|r| {
            format!(
                "table `{}` is still adopted but not in [[tables]]: put it back, or release it with `outbox-relay migrate --release {}`",
                r.name,
                r.name
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved() -> Resolved {
        Resolved {
            qualified: "public.outboxevent".into(),
            function_name: "outbox_adopt_0123".into(),
        }
    }

    #[test]
    fn a_missing_column_or_an_unusable_type_is_named() {
        let table = TableSpec::new("outboxevent", "id", "aggregatetype", "payload");
        let types: HashMap<&str, &str> = [("id", "uuid"), ("aggregatetype", "text")].into();
        let error = capture_function(&table, &resolved(), &types).expect_err("no payload");
        assert!(error.contains("`payload`"), "{error}");
        let types: HashMap<&str, &str> = [
            ("id", "uuid"),
            ("aggregatetype", "text"),
            ("payload", "bytea"),
        ]
        .into();
        let error = capture_function(&table, &resolved(), &types).expect_err("bytea");
        assert!(error.contains("bytea"), "{error}");
    }

    #[test]
    fn drift_names_the_table_both_ways() {
        let table = TableSpec::new("outboxevent", "id", "aggregatetype", "payload");
        let prepared = Registered {
            name: "outboxevent".into(),
            spec: spec_json(&table),
            function_name: "f".into(),
        };
        assert_eq!(compare(std::slice::from_ref(&table), &[prepared]), None);
        let line = compare(std::slice::from_ref(&table), &[]).expect("not prepared");
        assert!(line.contains("`outboxevent`") && line.contains("outbox-relay migrate"));
        let stale = Registered {
            name: "old".into(),
            spec: serde_json::Value::Null,
            function_name: "f".into(),
        };
        let line = compare(&[], &[stale]).expect("kept");
        assert!(
            line.contains("`old`") && line.contains("outbox-relay migrate --release old"),
            "{line}"
        );
    }
}
