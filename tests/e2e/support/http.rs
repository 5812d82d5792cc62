//! The one HTTP client of the end-to-end tests, on `ureq`: admin API calls with a bearer
//! token, UI pages with a session cookie, forms and their redirects, and the health and
//! metrics endpoints. A response is what the server sent, whatever its status: redirects are
//! not followed (tests read `Location`) and a 4xx or 5xx is a [`Resp`], not an error.
//! Responses keep their headers as sent (`Set-Cookie`, `Location`, `Retry-After`), and their
//! body both as text and, when it is JSON, parsed.

use std::time::Duration;

use ureq::http;

use super::eventually;

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
        let value = self.body[at..].split('"').next();
        value.expect("a quoted csrf value").to_string()
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

    /// The status of GET `path`; panics when nothing answers.
    pub fn status(&self, path: &str) -> u16 {
        self.get(path).status
    }

    /// Waits until GET `path` answers `status` (nothing answering yet is not it); panics after
    /// `timeout`.
    pub async fn wait_status(&self, path: &str, status: u16, timeout: Duration) {
        let what = format!("127.0.0.1:{}{path} to answer {status}", self.port);
        eventually(timeout, &what, || async {
            match self.try_send("GET", path, Body::Empty) {
                Some(r) if r.status == status => Ok(()),
                Some(r) => Err(format!("answered {}", r.status)),
                None => Err("no answer".into()),
            }
        })
        .await
    }

    /// The `/metrics` page; panics when nothing answers.
    pub fn metrics(&self) -> String {
        let res = self.get("/metrics");
        assert_eq!(res.status, 200, "/metrics: {}", res.body);
        res.body
    }

    /// The value of one series of `/metrics`, named as the page prints it (with its labels,
    /// if any: `outbox_events_published_total{topic="t0"}`); `None` while it is not there.
    /// Panics when nothing answers.
    pub fn metric(&self, series: &str) -> Option<f64> {
        series_value(&self.metrics(), series)
    }

    /// The value of a counter: 0 while the series is not there (a counter appears at its first
    /// increment). Panics when nothing answers.
    pub fn counter(&self, series: &str) -> f64 {
        self.metric(series).unwrap_or(0.0)
    }

    /// Waits until the series `series` of `/metrics` (absent counts as 0) satisfies `want`
    /// and returns its value; panics after `timeout` (nothing answering yet is not it).
    pub async fn wait_metric(
        &self,
        series: &str,
        want: impl Fn(f64) -> bool,
        timeout: Duration,
    ) -> f64 {
        let what = format!("{series} to get where the test waits for");
        eventually(timeout, &what, || async {
            let res = self
                .try_send("GET", "/metrics", Body::Empty)
                .ok_or("no answer")?;
            let got = series_value(&res.body, series).unwrap_or(0.0);
            match want(got) {
                true => Ok(got),
                false => Err(format!("last {got}")),
            }
        })
        .await
    }

    /// Waits until the counter `series` rises above its value now: the relay did what it
    /// counts at least once more, after this call.
    pub async fn wait_counter_rise(&self, series: &str, timeout: Duration) -> f64 {
        let before = self.counter(series);
        self.wait_metric(series, |got| got > before, timeout).await
    }
}

/// One series' value on a `/metrics` page.
fn series_value(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

/// Form-encodes pairs.
pub fn form(pairs: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

/// An admin server that does not answer is not one without the series.
#[test]
#[should_panic(expected = "no answer")]
fn metrics_panic_when_nothing_answers() {
    Http::new(super::free_port()).metric("outbox_claim_cycles_total");
}
