//! Gauge families replaced whole by each sample and rendered after the exporter's text by
//! `/metrics`. The `metrics` facade cannot remove a series, so a gauge about something that went
//! away (a standby that disconnected) would freeze at its last value and look healthy; a family
//! here shows exactly the series of its latest sample, and a vanished subject has none.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Mutex, OnceLock};

/// One family: its help text and its series (labels, value) of the latest sample.
struct Family {
    help: &'static str,
    series: Vec<(Vec<(&'static str, String)>, f64)>,
}

fn families() -> &'static Mutex<BTreeMap<&'static str, Family>> {
    static FAMILIES: OnceLock<Mutex<BTreeMap<&'static str, Family>>> = OnceLock::new();
    FAMILIES.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// Replaces every series of gauge `name` with `series`.
pub fn replace(
    name: &'static str,
    help: &'static str,
    series: Vec<(Vec<(&'static str, String)>, f64)>,
) {
    // A poisoned lock only means a panic while replacing: the map is still whole.
    let mut all = families().lock().unwrap_or_else(|e| e.into_inner());
    all.insert(name, Family { help, series });
}

/// Escapes a label value as the text exposition format requires.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The families in the Prometheus text format, a HELP and TYPE line each.
pub fn render() -> String {
    let all = families().lock().unwrap_or_else(|e| e.into_inner());
    let mut out = String::new();
    for (name, family) in all.iter() {
        let _ = writeln!(out, "# HELP {name} {}", family.help);
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (labels, value) in &family.series {
            let labels: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = writeln!(out, "{name}{{{}}} {value}", labels.join(","));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_sample_drops_the_series_of_the_last_one() {
        replace(
            "outbox_test_family",
            "A test family",
            vec![(vec![("standby", "a\"b".into())], 5.0)],
        );
        assert!(render().contains("outbox_test_family{standby=\"a\\\"b\"} 5\n"));
        replace(
            "outbox_test_family",
            "A test family",
            vec![(vec![("standby", "c".into())], 7.0)],
        );
        let text = render();
        assert!(text.contains("# HELP outbox_test_family A test family\n"));
        assert!(text.contains("outbox_test_family{standby=\"c\"} 7\n"));
        assert!(!text.contains("a\\\"b"), "{text}");
    }
}
