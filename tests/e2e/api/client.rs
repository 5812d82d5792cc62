//! A minimal HTTP client for the admin API (std only: HTTP/1.0, one request per
//! connection) and `setup`, which starts a relay with tokens on its own database and prefix.

use std::io::{Read, Write};
use std::time::Duration;

use crate::support::*;

pub const TOKEN: &str = "s3cret-admin";
pub const READ_ONLY: &str = "l00k-only";

/// A response: status and body (parsed as JSON when it is JSON, else `Null`).
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub head: String,
    pub json: serde_json::Value,
}

/// Sends one request; `headers` are extra lines like `("Idempotency-Key", "k1")`.
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Resp {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect admin");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: localhost\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    match body {
        Some(body) => req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        )),
        // HTTP/1.0 has no other way to say "no body" for a POST.
        None => req.push_str("Content-Length: 0\r\n"),
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("send head");
    if let Some(body) = body {
        // A large body may be refused before it is all sent: that is the test's point.
        let _ = s.write_all(body.as_bytes());
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Resp {
        status,
        head: head.to_string(),
        json: serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    }
}

/// A relay with `admin.token` and `admin.read_only_token` set, and a client for it.
pub struct Api {
    pub db: TestDb,
    pub redis: TestRedis,
    pub relay: RelayProc,
}

impl Api {
    pub async fn start(name: &str) -> Api {
        Api::start_with(name, &[]).await
    }

    pub async fn start_with(name: &str, extra: &[(&str, &str)]) -> Api {
        let db = TestDb::new().await;
        let redis = TestRedis::shared();
        let mut env = base_env(&db, &redis);
        env.push(("OUTBOX__ADMIN__TOKEN".into(), TOKEN.into()));
        env.push(("OUTBOX__ADMIN__READ_ONLY_TOKEN".into(), READ_ONLY.into()));
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let relay = RelayProc::spawn(name, &env);
        relay
            .wait_status("/readyz", 200, Duration::from_secs(30))
            .await;
        Api { db, redis, relay }
    }

    /// A request with the admin token.
    pub fn call(&self, method: &str, path: &str, body: Option<&str>) -> Resp {
        self.call_as(TOKEN, method, path, &[], body)
    }

    pub fn get(&self, path: &str) -> Resp {
        self.call("GET", path, None)
    }

    pub fn post(&self, path: &str, body: Option<&str>) -> Resp {
        self.call("POST", path, body)
    }

    /// A request with `token` and extra headers.
    pub fn call_as(
        &self,
        token: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> Resp {
        let auth = format!("Bearer {token}");
        let mut all = vec![("Authorization", auth.as_str())];
        all.extend_from_slice(headers);
        request(self.relay.admin_port, method, path, &all, body)
    }

    /// Inserts a dead event directly (as the relay would leave it) and returns its id.
    pub async fn dead_event(&self, topic: &str, key: Option<&str>, error: &str) -> String {
        let key = key.map_or("NULL".to_string(), |k| format!("'{k}'"));
        self.db
            .exec(&format!(
                "INSERT INTO outbox (topic, payload, partition_key, attempts, last_error, dead_at)
                 VALUES ('{topic}', '{{\"dead\": true}}', {key}, 10, '{error}', now())"
            ))
            .await;
        let rows = self.get(&format!("/api/v1/events?status=dead&topic={topic}&limit=1"));
        rows.json["events"][0]["id"]
            .as_str()
            .expect("the dead event")
            .to_string()
    }

    /// Waits until `n` events of `topic` are published (rows marked in Postgres).
    pub async fn wait_published(&self, topic: &str, n: i64) {
        self.db
            .wait_for(
                &format!(
                    "SELECT count(*) FROM outbox WHERE topic = '{topic}' AND published_at IS NOT NULL"
                ),
                n,
                Duration::from_secs(20),
            )
            .await;
    }

    /// The audit actions, oldest first.
    pub fn audit_actions(&self) -> Vec<String> {
        let page = self.get("/api/v1/audit?limit=1000");
        let mut actions: Vec<String> = page.json["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| e["action"].as_str().unwrap_or_default().to_string())
            .collect();
        actions.reverse();
        actions
    }
}
