//! Every page at desktop (1280x800) and phone (390x844) width, on data that stretches them (a
//! parked key, an audit entry whose target is an event id and whose detail is long): the page
//! renders its heading and the navigation (Replay in it), the document never scrolls sideways
//! (a wide table scrolls inside its own container), every field a person types in carries the
//! UI's input style, and the Audit page wraps its Detail JSON inside the table while an event
//! id stays on one line.

use std::time::Duration;

use super::browser::Browser;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(15);

/// `orders` parks its keys; one attempt, so a failure is dead at once.
const PARKING: &str = r#"
[retry]
max_attempts = 1

[[topics]]
name = "orders"
park_on_dead = true
"#;

/// The widths checked, with their heights.
const SIZES: &[(&str, u32, u32)] = &[("desktop", 1280, 800), ("phone", 390, 844)];

/// What the page itself reports: how wide the document is against the window, and the
/// fields whose style is the browser's own (identified by name or type).
const LAYOUT_JS: &str = r#"
const fields = [...document.querySelectorAll('input, select, textarea')].filter(el =>
    !['hidden', 'checkbox', 'radio', 'submit', 'button'].includes(el.type));
const unstyled = fields.filter(el => {
    const s = getComputedStyle(el);
    return s.borderTopLeftRadius !== '6px' || s.borderTopStyle !== 'solid';
}).map(el => (el.name || el.id) + ':' + el.type);
return {
    scroll: document.scrollingElement.scrollWidth,
    width: window.innerWidth,
    fields: fields.length,
    unstyled: unstyled,
    nav: [...document.querySelectorAll('header nav a')].map(a => a.getAttribute('href')),
    h1: (document.querySelector('main h1') || {}).textContent || '',
};
"#;

/// The Audit table's cells: how many lines the event-id target takes, and whether the Detail
/// JSON ends inside the table's container (no sideways scroll needed to read it).
const AUDIT_JS: &str = r#"
const target = document.querySelector('#audit td a.mono');
const line = parseFloat(getComputedStyle(target).lineHeight);
const box = document.querySelector('#audit').closest('.scroll');
const detail = document.querySelector('#audit tbody tr td:nth-child(5) code');
return {
    target_lines: Math.round(target.getBoundingClientRect().height / line),
    detail_shown: detail.getClientRects().length > 0,
    detail_right: detail.getBoundingClientRect().right,
    box_right: box.getBoundingClientRect().right,
    box_scrolls: box.scrollWidth > box.clientWidth,
};
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_fits_desktop_and_phone_widths_with_styled_fields() {
    let (_dir, config) = config_file(PARKING);
    let ui = TokenRelay::start("ui", &[("OUTBOX_CONFIG", config.as_str())]).await;
    ui.db
        .exec(
            "INSERT INTO outbox (topic, payload, partition_key)
             SELECT (ARRAY['order.created','payment.captured'])[1 + i % 2],
                    jsonb_build_object('order_id', 'ord-' || i), 'ord-' || (i % 5)
             FROM generate_series(1, 20) AS i",
        )
        .await;
    // A dead event of key k1 on the parking topic, and one event held behind it.
    let dead = ui
        .db
        .dead_event(
            "orders",
            Some("k1"),
            "'{}'",
            "WRONGTYPE Operation against a key",
        )
        .await;
    ui.db
        .exec("INSERT INTO outbox (topic, payload, partition_key) VALUES ('orders', '{}', 'k1')")
        .await;
    let admin = ui.admin();
    eventually(WAIT, "k1 parked with one event held", || async {
        let parked = admin.get("/api/v1/topics/orders/parked").json;
        (parked["keys"][0]["held"] == 1)
            .then_some(())
            .ok_or(parked.to_string())
    })
    .await;
    // An audit entry naming an event (its id is the target) with a long detail.
    let long_key = "customer-4711/order-2026-12-04/line-items-batch-0001-of-0003-eu-west";
    let res = admin
        .with(
            "Idempotency-Key",
            "checkout-4711-2026-12-04T10:00:00Z-line-items-batch-0001",
        )
        .post(
            "/api/v1/events",
            Some(&format!(
                r#"{{"topic":"order.created","payload":{{}},"partition_key":"{long_key}"}}"#
            )),
        );
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(
        admin
            .post("/api/v1/topics/payment.captured/pause", None)
            .status,
        200
    );

    let b = Browser::start().await;
    let base = ui.base();
    let pages = [
        ("/", "Overview"),
        ("/events", "Events"),
        (&format!("/events/{dead}") as &str, "Event"),
        ("/dead", "Dead letters"),
        ("/streams", "Streams"),
        ("/replicas", "Replicas"),
        ("/audit", "Audit log"),
        ("/replay?topic=order.created&since=1h", "Replay"),
    ];
    for &(size, width, height) in SIZES {
        b.client
            .set_window_size(width, height)
            .await
            .expect("window size");
        b.client.delete_all_cookies().await.expect("log out");
        b.goto(&format!("{base}/login")).await;
        b.find("#token").await;
        check_layout(&b, size, "/login", "Log in").await;
        b.login(&base, ADMIN_TOKEN).await;
        for &(path, title) in &pages {
            b.goto(&format!("{base}{path}")).await;
            b.wait_text(title, WAIT).await;
            check_layout(&b, size, path, title).await;
        }
        b.goto(&format!("{base}/dead")).await;
        assert!(
            b.text("#parked").await.contains("k1"),
            "{size}: the parked key on the Dead letters page"
        );
        b.goto(&format!("{base}/audit")).await;
        b.find("#audit tbody tr td a.mono").await;
        let audit = b.client.execute(AUDIT_JS, vec![]).await.expect("audit js");
        assert_eq!(
            audit["target_lines"], 1,
            "{size}: the event id on one line: {audit}"
        );
        if size == "desktop" {
            assert_eq!(audit["detail_shown"], true, "{audit}");
            assert!(
                audit["detail_right"].as_f64() <= audit["box_right"].as_f64(),
                "{size}: the Detail JSON ends inside the table: {audit}"
            );
            assert_eq!(
                audit["box_scrolls"], false,
                "{size}: nothing to scroll to: {audit}"
            );
        }
    }
    b.close().await;
}

/// One page at the current size: its heading, the navigation with Replay in it, no sideways
/// scroll of the document, and no field left with the browser's own style.
async fn check_layout(b: &Browser, size: &str, path: &str, title: &str) {
    let got = b
        .client
        .execute(LAYOUT_JS, vec![])
        .await
        .expect("layout js");
    let at = format!("{path} at {size} width: {got}");
    assert_eq!(
        got["h1"].as_str().map(str::trim),
        Some(title),
        "heading of {at}"
    );
    assert!(
        got["scroll"].as_u64() <= got["width"].as_u64(),
        "the document scrolls sideways: {at}"
    );
    assert_eq!(
        got["unstyled"],
        serde_json::json!([]),
        "unstyled fields: {at}"
    );
    if path != "/login" {
        let nav = got["nav"].as_array().map(Vec::len).unwrap_or(0);
        assert!(nav >= 7, "the navigation: {at}");
        assert!(
            got["nav"]
                .as_array()
                .is_some_and(|links| links.iter().any(|l| l == "/replay")),
            "Replay in the navigation: {at}"
        );
    }
}
