//! The one HTTP client of the end-to-end tests, on `ureq`: admin API calls with a bearer
//! token, UI pages with a session cookie, forms and their redirects, and the health and
//! metrics endpoints. A response is what the server sent, whatever its status: redirects are
//! not followed (tests read `Location`) and a 4xx or 5xx is a [`Resp`], not an error.
//! Responses keep their headers as sent (`Set-Cookie`, `Location`, `Retry-After`), and their
//! body both as text and, when it is JSON, parsed.

use std::time::{Duration, Instant};

use ureq::http;

/// A client for one admin server; the headers it sends with every request (a token, a
/// session cookie) are part of it, so a test holds one per identity.
#[derive(Clone, Debug)]
pub struct Http {
    port: u16,
    headers: Vec<(String, String)>,
    agent: ureq::Agent,
}

/// A request body, sent with its `Content-Type`.
#[derive(Clone, Copy, Debug)]
pub enum Body<'a> {
    /// No body (`Content-Length: 0`, no `Content-Type`).
    Empty,
    /// `application/json`.
    Json(&'a str),
    /// `application/x-www-form-urlencoded` (see [`form`]).
    Form(&'a str),
}

impl<'a> Body<'a> {
    /// A JSON body, or none.
    pub fn json(body: Option<&'a str>) -> Body<'a> {
        body.map_or(Body::Empty, Body::Json)
    }
}

/// A response: status, headers, and the body as text and as JSON (`Null` when it is not).
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub json: serde_json::Value,
}

impl Resp {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The value of the hidden `csrf` field of this page.
    pub fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .expect("a csrf field")
            + 19;
        self.body[at..]
            .split('"')
            .next()
            .unwrap_or_default()
            .to_string()
    }

    /// `name=value` of the session cookie set by this response.
    pub fn session_cookie(&self) -> Option<String> {
        self.header("set-cookie")
            .and_then(|c| c.split(';').next())
            .map(str::to_string)
    }
}

impl Http {
    /// A client without credentials for the admin server on `port` (loopback).
    pub fn new(port: u16) -> Http {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .max_redirects_will_error(false)
            // A fresh connection per request, as a restarted server on the same port must
            // not meet a connection to its predecessor.
            .max_idle_connections(0)
            .max_idle_connections_per_host(0)
            .timeout_connect(Some(Duration::from_secs(2)))
            .timeout_recv_response(Some(Duration::from_secs(20)))
            .timeout_recv_body(Some(Duration::from_secs(20)))
            .build()
            .into();
        Http {
            port,
            headers: Vec::new(),
            agent,
        }
    }

    /// The same client, also sending `name: value`.
    pub fn with(&self, name: &str, value: &str) -> Http {
        let mut more = self.clone();
        more.headers.push((name.to_string(), value.to_string()));
        more
    }

    /// The same client with `Authorization: Bearer <token>` (the API's credentials).
    pub fn bearer(&self, token: &str) -> Http {
        self.with("Authorization", &format!("Bearer {token}"))
    }

    /// The same client with a `Cookie` header (a UI session; see [`Resp::session_cookie`]).
    pub fn cookie(&self, cookie: &str) -> Http {
        self.with("Cookie", cookie)
    }

    /// Sends one request; `None` when nothing answers (no server, or no HTTP response).
    pub fn try_send(&self, method: &str, path: &str, body: Body<'_>) -> Option<Resp> {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("http://127.0.0.1:{}{path}", self.port));
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        let (content_type, bytes) = match body {
            Body::Empty => (None, ""),
            Body::Json(b) => (Some("application/json"), b),
            Body::Form(b) => (Some("application/x-www-form-urlencoded"), b),
        };
        if let Some(t) = content_type {
            req = req.header(http::header::CONTENT_TYPE, t);
        }
        let req = req
            .body(bytes.as_bytes())
            .unwrap_or_else(|e| panic!("{method} {path}: not a request this client can send: {e}"));
        let mut res = self.agent.run(req).ok()?;
        let headers = res
            .headers()
            .iter()
            .map(|(k, v)| {
                let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
                (k.as_str().to_string(), v)
            })
            .collect();
        let status = res.status().as_u16();
        let raw = res
            .body_mut()
            .with_config()
            .limit(64 * 1024 * 1024)
            .read_to_vec()
            .ok()?;
        let body = String::from_utf8_lossy(&raw).into_owned();
        Some(Resp {
            status,
            headers,
            json: serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
            body,
        })
    }

    /// Sends one request; panics when nothing answers.
    pub fn send(&self, method: &str, path: &str, body: Body<'_>) -> Resp {
        self.try_send(method, path, body)
            .unwrap_or_else(|| panic!("{method} {path} on port {}: no answer", self.port))
    }

    /// A request with a JSON body or none (the API's).
    pub fn call(&self, method: &str, path: &str, json: Option<&str>) -> Resp {
        self.send(method, path, Body::json(json))
    }

    pub fn get(&self, path: &str) -> Resp {
        self.send("GET", path, Body::Empty)
    }

    /// A POST with a JSON body or none.
    pub fn post(&self, path: &str, json: Option<&str>) -> Resp {
        self.call("POST", path, json)
    }

    /// A POST of a form (see [`form`]).
    pub fn post_form(&self, path: &str, form: &str) -> Resp {
        self.send("POST", path, Body::Form(form))
    }

    /// The status of GET `path`, or 0 when nothing answers.
    pub fn status(&self, path: &str) -> u16 {
        self.try_send("GET", path, Body::Empty)
            .map_or(0, |r| r.status)
    }

    /// Waits until GET `path` answers `status`; panics after `timeout`.
    pub async fn wait_status(&self, path: &str, status: u16, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.status(path);
            if got == status {
                return;
            }
            if Instant::now() > deadline {
                panic!("127.0.0.1:{}{path}: wanted {status}, last {got}", self.port);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The `/metrics` page (empty when nothing answers).
    pub fn metrics(&self) -> String {
        self.try_send("GET", "/metrics", Body::Empty)
            .map(|r| r.body)
            .unwrap_or_default()
    }

    /// The value of one series of `/metrics`, named as the page prints it (with its labels,
    /// if any: `outbox_events_published_total{topic="t0"}`); `None` while it is not there.
    pub fn metric(&self, series: &str) -> Option<f64> {
        self.metrics().lines().find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok()).flatten()
        })
    }

    /// Waits until the series `series` of `/metrics` (absent counts as 0) satisfies `want`;
    /// panics after `timeout`.
    pub async fn wait_metric(&self, series: &str, want: impl Fn(f64) -> bool, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.metric(series).unwrap_or(0.0);
            if want(got) {
                return;
            }
            if Instant::now() > deadline {
                panic!("{series} never got where the test waited for; last {got}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Form-encodes pairs.
pub fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}
