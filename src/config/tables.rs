//! Adopted tables: TOML `[[tables]]` entries, each an existing outbox table (Debezium's layout,
//! or a team's own) that the relay publishes from besides its own `outbox`. `migrate` prepares
//! each listed table (`db::adopted`) and removes what it prepared for a table no longer
//! listed; `run` refuses a list that differs from what `migrate` prepared.

use super::rule::Rule;
use super::Settings;
pub use crate::adopt::{TableSpec, TOPIC_PLACEHOLDER};

/// Whether `name` can be used as one SQL identifier here: not empty, at most 63 bytes (what
/// Postgres keeps), no NUL. It is always quoted, so any other character is allowed.
fn is_identifier(name: &str) -> bool {
    !name.is_empty() && name.len() <= 63 && !name.contains('\0')
}

/// What is wrong with the adopted tables, if anything.
pub fn check(tables: &[TableSpec]) -> Result<(), String> {
    for (n, t) in tables.iter().enumerate() {
        let (schema, table) = t.schema_and_table();
        if !is_identifier(table) || schema.is_some_and(|s| !is_identifier(s) || table.contains('.'))
        {
            return Err(format!(
                "`{}` is not a table name: `table` or `schema.table`, each part 1 to 63 bytes",
                t.name
            ));
        }
        for (key, column) in t.columns() {
            if !is_identifier(column) {
                return Err(format!(
                    "table `{}`: {key} `{column}` is not a column name (1 to 63 bytes)",
                    t.name
                ));
            }
        }
        if t.topic_format.matches(TOPIC_PLACEHOLDER).count() != 1 {
            return Err(format!(
                "table `{}`: topic_format `{}` must hold `{{}}` exactly once (where the topic column's value goes)",
                t.name, t.topic_format
            ));
        }
        for header in t.headers.keys() {
            if header.is_empty() {
                return Err(format!("table `{}`: a header needs a name", t.name));
            }
        }
        if tables[..n].iter().any(|other| other.name == t.name) {
            return Err(format!("table `{}` is listed twice", t.name));
        }
    }
    Ok(())
}

pub(super) const RULES: &[Rule<Settings>] = &[Rule {
    settings: &["tables"],
    check: |s| check(&s.tables),
}];

#[cfg(test)]
mod tests {
    use super::*;

    fn debezium() -> TableSpec {
        let mut t = TableSpec::new("public.outboxevent", "id", "aggregatetype", "payload");
        t.topic_format = "outbox.event.{}".into();
        t.key = Some("aggregateid".into());
        t.headers.insert("type".into(), "type".into());
        t
    }

    #[test]
    fn a_debezium_layout_passes_and_its_parts_are_named() {
        assert_eq!(check(&[debezium()]), Ok(()));
        assert_eq!(
            debezium().schema_and_table(),
            (Some("public"), "outboxevent")
        );
        let table = debezium();
        let columns: Vec<&str> = table.columns().into_iter().map(|(_, c)| c).collect();
        assert_eq!(
            columns,
            ["id", "aggregatetype", "payload", "aggregateid", "type"]
        );
    }

    #[test]
    fn bad_names_formats_and_repeats_are_refused_naming_the_table() {
        let mut no_placeholder = debezium();
        no_placeholder.topic_format = "orders".into();
        let mut empty_column = debezium();
        empty_column.payload = String::new();
        let mut three_parts = debezium();
        three_parts.name = "a.b.c".into();
        for bad in [
            vec![no_placeholder],
            vec![empty_column],
            vec![three_parts],
            vec![debezium(), debezium()],
        ] {
            let error = check(&bad).expect_err("refused");
            assert!(error.contains('`'), "{error}");
        }
    }
}
