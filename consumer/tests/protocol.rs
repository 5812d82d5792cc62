//! The protocol's shared files agree with this library (docs/protocol.md): the golden vectors
//! in `consumer/protocol/golden/` (partitions, entries and their parse) are what
//! `outbox-core` computes, the field values marked as the relay's are what it writes, every
//! script in `consumer/protocol/scripts/` and `core/protocol/scripts/` carries the header the
//! other clients follow, and docs/protocol.md names every one of those files and the inbox's
//! SQL. The Python and TypeScript clients read the same files, so a vector that passes here
//! and fails there is a bug of that client.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use chrono::{DateTime, SecondsFormat, Utc};
use redis::Value;
use serde_json::Value as Json;
use uuid::Uuid;

use outbox_core::cloudevent::{self, ReadError};
use outbox_core::partition;
use outbox_core::{Entry, EntryError};

/// The protocol's version, as every shared file names it.
const PROTOCOL: &str = "outbox consumer protocol 1";

fn consumer_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn golden(name: &str) -> Json {
    let path = consumer_dir().join("protocol/golden").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let json: Json =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(json["protocol"], PROTOCOL, "{name}: protocol version");
    json
}

fn text<'a>(json: &'a Json, what: &str) -> &'a str {
    json.as_str()
        .unwrap_or_else(|| panic!("{what}: not a string: {json}"))
}

#[test]
fn partition_vectors_are_what_core_computes() {
    let doc = golden("partitions.json");
    let vectors = doc["vectors"].as_array().expect("vectors");
    let counts: Vec<u64> = doc["counts"]
        .as_array()
        .expect("counts")
        .iter()
        .map(|n| n.as_u64().expect("a count"))
        .collect();
    assert!(counts.contains(&1) && counts.contains(&1024) && counts.contains(&1000));
    let mut negative = 0;
    let mut long = 0;
    let mut multibyte = 0;
    for v in vectors {
        let key = text(&v["key"], "key");
        let bytes = key.as_bytes();
        assert_eq!(
            v["utf8_bytes"].as_u64(),
            Some(bytes.len() as u64),
            "{key:?}: utf8_bytes"
        );
        let hash = partition::murmur2(bytes);
        assert_eq!(
            v["murmur2"].as_i64(),
            Some(i64::from(hash)),
            "{key:?}: murmur2"
        );
        negative += usize::from(hash < 0);
        long += usize::from(bytes.len() > 1024);
        multibyte += usize::from(bytes.len() > key.chars().count());
        let partitions = v["partitions"].as_object().expect("partitions");
        assert_eq!(partitions.len(), counts.len(), "{key:?}: one per count");
        for n in &counts {
            let want = partitions[&n.to_string()].as_u64();
            let got = partition::for_key(key, u32::try_from(*n).expect("count"));
            assert_eq!(want, Some(u64::from(got)), "{key:?} over {n} partitions");
        }
    }
    assert!(
        negative >= 3 && long >= 3 && multibyte >= 5,
        "the cases asked for"
    );
    // The contract's (section 15), which are Kafka's own.
    for (key, want) in [("", 681), ("a", 524), ("abc", 107), ("123456789", 566)] {
        let v = vectors
            .iter()
            .find(|v| v["key"] == key)
            .unwrap_or_else(|| panic!("Kafka's vector {key:?} is missing"));
        assert_eq!(v["partitions"]["1000"], want, "{key:?}");
    }
}

/// A field value of a case: text, or `{"hex": ...}` for bytes that are not UTF-8.
fn field_value(json: &Json) -> Value {
    match json {
        Json::String(s) => Value::BulkString(s.as_bytes().to_vec()),
        Json::Object(o) => {
            let hex = text(&o["hex"], "hex");
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect();
            Value::BulkString(bytes)
        }
        other => panic!("a field value: {other}"),
    }
}

fn fields_of(case: &Json) -> Vec<(String, Value)> {
    case["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .map(|pair| (text(&pair[0], "field").to_string(), field_value(&pair[1])))
        .collect()
}

/// The stable code of a parse error, with the field (and attribute) it names: what every
/// client reports for the same entry.
fn code_of(error: &EntryError) -> (&'static str, &'static str, Option<&'static str>) {
    let (field, attribute) = match error {
        EntryError::Missing(field) => (*field, None),
        EntryError::NotText(field) => (leak(field), None),
        EntryError::Id(_) => ("id", None),
        EntryError::Json { field, .. } => (*field, None),
        EntryError::CreatedAt(_) => ("created_at", None),
        EntryError::CloudEventId { .. } => ("cloudevent", Some("id")),
        EntryError::CloudEvent(read) => match read {
            ReadError::Missing(attribute) => ("cloudevent", Some(*attribute)),
            ReadError::Time(_) => ("cloudevent", Some("time")),
            ReadError::Binary => ("cloudevent", Some("data_base64")),
            ReadError::Json(_) | ReadError::Version(_) => ("cloudevent", None),
        },
    };
    (error.code(), field, attribute)
}

/// The field names a test knows, as `'static` (the error holds its field as a `String`).
fn leak(field: &str) -> &'static str {
    [
        "id",
        "topic",
        "key",
        "payload",
        "headers",
        "created_at",
        "cloudevent",
    ]
    .into_iter()
    .find(|f| *f == field)
    .unwrap_or_else(|| panic!("an unknown field {field:?}"))
}

fn micros(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// The parsed entry as the golden file spells it.
fn as_golden(entry: &Entry) -> Json {
    let cloudevent = entry.cloudevent.as_deref().map(|a| {
        serde_json::json!({
            "specversion": a.specversion,
            "id": a.id,
            "source": a.source,
            "type": a.ty,
            "datacontenttype": a.datacontenttype,
            "subject": a.subject,
            "partitionkey": a.partitionkey,
            "traceparent": a.traceparent,
            "tracestate": a.tracestate,
            "extensions": a.extensions,
        })
    });
    if let Some(a) = entry.cloudevent.as_deref() {
        assert_eq!(
            a.time,
            Some(entry.created_at),
            "a CloudEvent's time is created_at"
        );
    }
    serde_json::json!({
        "id": entry.id.to_string(),
        "topic": entry.topic,
        "key": entry.key,
        "payload": entry.payload,
        "headers": entry.headers,
        "created_at": micros(&entry.created_at),
        "traceparent": entry.headers.get("traceparent").and_then(Json::as_str),
        "cloudevent": cloudevent,
    })
}

#[test]
fn entries_parse_as_the_golden_file_says() {
    let doc = golden("entries.json");
    let codes = doc["error_codes"].as_object().expect("error_codes");
    let cases = doc["cases"].as_array().expect("cases");
    let mut names = BTreeSet::new();
    let mut seen_codes = BTreeSet::new();
    // Every disagreement at once: a client author fixing a vector wants the whole list.
    let mut wrong = Vec::new();
    for case in cases {
        let name = text(&case["name"], "name");
        assert!(names.insert(name), "two cases named {name:?}");
        let topic = text(&case["stream_topic"], "stream_topic");
        let stream_id = text(&case["stream_id"], "stream_id");
        let parsed = Entry::from_pairs_of(topic, stream_id, &fields_of(case));
        match (parsed, case.get("expect"), case.get("error")) {
            (Ok(entry), Some(expect), None) => {
                let got = as_golden(&entry);
                if entry.stream_id != stream_id || &got != expect {
                    wrong.push(format!("{name}:\n  parsed {got}\n  golden {expect}"));
                }
            }
            (Err(e), None, Some(want)) => {
                let (code, field, attribute) = code_of(&e);
                assert!(codes.contains_key(code), "{name}: code {code} not listed");
                seen_codes.insert(code);
                let message = e.to_string();
                let mut got = serde_json::json!({
                    "code": code,
                    "field": field,
                    "message": message,
                    "message_prefix": want["message_prefix"],
                });
                if let (Some(attribute), Some(o)) = (attribute, got.as_object_mut()) {
                    o.insert("attribute".into(), attribute.into());
                }
                let prefix = text(&want["message_prefix"], "message_prefix");
                if &got != want || !message.starts_with(prefix) {
                    wrong.push(format!("{name}:\n  error  {got}\n  golden {want}"));
                }
            }
            (got, expect, error) => wrong.push(format!(
                "{name}:\n  parsed {got:?}\n  golden expect {expect:?} error {error:?}"
            )),
        }
    }
    assert!(
        wrong.is_empty(),
        "entries.json disagrees with the library:\n{}",
        wrong.join("\n")
    );
    let listed: BTreeSet<&str> = codes.keys().map(String::as_str).collect();
    assert_eq!(
        seen_codes, listed,
        "every error code has a case, every case's code is listed"
    );
}

#[test]
fn the_relays_fields_are_the_golden_ones() {
    let doc = golden("entries.json");
    let mut checked = (0, 0);
    for case in doc["cases"].as_array().expect("cases") {
        let Some(event) = case.get("written_by_relay") else {
            continue;
        };
        let name = text(&case["name"], "name");
        let id = Uuid::parse_str(text(&event["id"], "id")).expect("uuid");
        let topic = text(&event["topic"], "topic");
        let key = event["key"].as_str();
        let payload = text(&event["payload"], "payload");
        let headers = text(&event["headers"], "headers");
        let created_at = DateTime::parse_from_rfc3339(text(&event["created_at"], "created_at"))
            .expect("created_at")
            .with_timezone(&Utc);
        // The relay's field order (src/publish): id, topic, payload, headers, created_at, key.
        let written: Vec<(String, String)> = match text(&event["envelope"], "envelope") {
            "fields" => {
                checked.0 += 1;
                let mut f = vec![
                    ("id".into(), id.to_string()),
                    ("topic".into(), topic.into()),
                    ("payload".into(), payload.into()),
                    ("headers".into(), headers.into()),
                    ("created_at".into(), micros(&created_at)),
                ];
                if let Some(key) = key {
                    f.push(("key".into(), key.into()));
                }
                f
            }
            "cloudevents" => {
                checked.1 += 1;
                let body = cloudevent::to_json(&cloudevent::Event {
                    id,
                    source: text(&event["source"], "source"),
                    topic,
                    key,
                    payload,
                    headers,
                    created_at: &created_at,
                })
                .expect("written");
                vec![("id".into(), id.to_string()), ("cloudevent".into(), body)]
            }
            other => panic!("{name}: envelope {other}"),
        };
        let golden: Vec<(String, String)> = case["fields"]
            .as_array()
            .expect("fields")
            .iter()
            .map(|p| (text(&p[0], "field").into(), text(&p[1], "value").into()))
            .collect();
        assert_eq!(written, golden, "{name}");
    }
    assert!(
        checked.0 >= 2 && checked.1 >= 2,
        "both envelopes: {checked:?}"
    );
}

/// Every `.lua` file of a protocol scripts directory.
fn scripts_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "lua"))
        .collect();
    files.sort();
    files
}

/// The consumer's scripts and the parked keys' (which live in `outbox-core`, shared with the
/// relay's admin), with the name each is known by.
fn all_scripts() -> Vec<(String, PathBuf)> {
    let dirs = [
        ("consumer", consumer_dir().join("protocol/scripts")),
        ("core", consumer_dir().join("../core/protocol/scripts")),
    ];
    let mut out = Vec::new();
    for (crate_dir, dir) in dirs {
        for path in scripts_in(&dir) {
            let file = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .to_string();
            out.push((format!("{crate_dir}/protocol/scripts/{file}"), path));
        }
    }
    out
}

#[test]
fn every_script_has_the_header_the_clients_follow() {
    let scripts = all_scripts();
    assert!(scripts.len() >= 13, "{scripts:?}");
    let mut names = BTreeSet::new();
    for (name, path) in &scripts {
        let file = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .to_string();
        assert!(
            names.insert(file.clone()),
            "{file}: two scripts by one name"
        );
        let body = std::fs::read_to_string(path).expect("script");
        let header: Vec<&str> = body.lines().take_while(|l| l.starts_with("--")).collect();
        assert_eq!(
            header.first().copied(),
            Some(format!("-- {PROTOCOL}: {file}").as_str()),
            "{name}: first line"
        );
        let header = header.join("\n");
        for part in ["KEYS[1]", "ARGV[1]", "Returns"] {
            assert!(
                header.contains(part),
                "{name}: the header says nothing of {part}"
            );
        }
        assert!(
            header.contains("docs/protocol.md"),
            "{name}: the header points to the document"
        );
    }
}

#[test]
fn the_protocol_document_names_every_shared_file() {
    let doc_path = consumer_dir().join("../docs/protocol.md");
    let doc = std::fs::read_to_string(&doc_path).expect("docs/protocol.md");
    assert!(doc.contains(PROTOCOL), "docs/protocol.md names its version");
    let mut names: Vec<String> = all_scripts().into_iter().map(|(name, _)| name).collect();
    for (dir, ext) in [("protocol/golden", ".json"), ("sql", ".sql")] {
        for entry in std::fs::read_dir(consumer_dir().join(dir)).expect(dir) {
            let file = entry.expect("entry").file_name();
            let file = file.to_string_lossy();
            if file.ends_with(ext) {
                names.push(format!("consumer/{dir}/{file}"));
            }
        }
    }
    let missing: Vec<&String> = names.iter().filter(|n| !doc.contains(n.as_str())).collect();
    assert!(
        missing.is_empty(),
        "docs/protocol.md does not name {missing:?}"
    );
}
