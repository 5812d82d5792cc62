//! Replay: a topic's published events of a time range go out again as new entries, in their
//! original order, through the API, the CLI and the UI, each recorded in the audit log; a time
//! that is neither RFC 3339 nor a duration is refused (400, exit 2).

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use crate::support::*;

/// Each event id's entries in `topic`'s stream, in stream order of their first copy.
async fn copies(redis: &TestRedis, topic: &str) -> HashMap<String, usize> {
    let mut copies = HashMap::new();
    for e in redis.entries(topic).await {
        *copies.entry(e["id"].clone()).or_insert(0) += 1;
    }
    copies
}

/// Waits until `topic`'s stream holds `n` entries.
async fn wait_entries(redis: &TestRedis, topic: &str, n: usize) {
    wait_until(Duration::from_secs(30), || async {
        match redis.xlen(topic).await {
            len if len == n => Ok(()),
            len => Err(format!("{topic} holds {len} entries, not {n}")),
        }
    })
    .await;
}

/// Every event of `topic` is in its stream twice, and the second copies, on their own, keep
/// each key's order.
async fn assert_replayed_once_each(redis: &TestRedis, topic: &str, events: usize) {
    wait_entries(redis, topic, events * 2).await;
    let copies = copies(redis, topic).await;
    assert_eq!(copies.len(), events);
    assert!(copies.values().all(|n| *n == 2), "{copies:?}");
    let entries = redis.entries(topic).await;
    assert_per_key_order(&entries[events..]);
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_through_the_api_the_cli_and_the_ui() {
    let relay = TokenRelay::start("replay", &[]).await;
    insert_events(&relay.db, Events::varied().n(1..=120).topics(3).keys(10)).await;
    relay.db.wait_until_published(Duration::from_secs(30)).await;

    // API.
    let res = relay
        .admin()
        .post("/api/v1/topics/t0/replay", Some(r#"{"since":"1h"}"#));
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(res.body, r#"{"replayed":40}"#);
    assert_replayed_once_each(&relay.redis, "t0", 40).await;
    // A range before the events holds nothing.
    let res = relay.admin().post(
        "/api/v1/topics/t0/replay",
        Some(r#"{"since":"2h","until":"1h"}"#),
    );
    assert_eq!((res.status, res.body.as_str()), (200, r#"{"replayed":0}"#));
    for (body, names) in [
        (r#"{"since":"yesterday"}"#, "since"),
        (r#"{"since":"1h","until":"2h"}"#, "until"),
        (r#"{"since":"1h","extra":1}"#, "extra"),
    ] {
        let res = relay.admin().post("/api/v1/topics/t0/replay", Some(body));
        assert_eq!(res.status, 400, "{body}: {}", res.body);
        assert!(res.body.contains(names), "{body}: {}", res.body);
    }
    let res = relay
        .viewer()
        .post("/api/v1/topics/t0/replay", Some(r#"{"since":"1h"}"#));
    assert_eq!(res.status, 403, "a viewer may not replay");

    // CLI.
    let cli = |args: &[&str]| {
        Command::new(BIN)
            .arg("replay")
            .args(args)
            .env_clear()
            .env("DATABASE_URL", &relay.db.url)
            .env("REDIS_URL", &relay.redis.url)
            .env("OUTBOX__REDIS__STREAM_PREFIX", &relay.redis.prefix)
            .output()
            .expect("run replay")
    };
    let out = cli(&["t1", "--since", "1h"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        r#"{"replayed":40}"#
    );
    assert_replayed_once_each(&relay.redis, "t1", 40).await;
    let out = cli(&["t1", "--since", "last week"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--since"));

    // UI: the dry run counts, the confirmation replays.
    let (session, csrf) = relay.login(ADMIN_TOKEN);
    let page = session.get("/replay?topic=t2&since=1h");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body
            .contains(r#"<strong id="confirm-count">40</strong>"#),
        "{}",
        page.body
    );
    let done = session.post_form(
        "/replay/apply",
        &form(&[
            ("csrf", &csrf),
            ("topic", "t2"),
            ("since", "1h"),
            ("until", ""),
        ]),
    );
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(done.header("location"), Some("/replay?topic=t2&done=40"));
    assert_replayed_once_each(&relay.redis, "t2", 40).await;

    let audited = relay
        .db
        .scalar("SELECT count(*) FROM outbox_audit WHERE action = 'replay'")
        .await;
    assert_eq!(
        audited, 4,
        "every replay is in the audit log, the empty one too"
    );
    assert_eq!(
        relay
            .db
            .scalar("SELECT count(*) FROM outbox_audit WHERE action = 'replay' AND who = 'cli'")
            .await,
        1
    );
}
