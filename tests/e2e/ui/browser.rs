//! A real headless Chromium driven over WebDriver (fantoccini + chromedriver), one browser
//! per test: its own chromedriver on a free port and its own profile directory.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};

use crate::support::{eventually, free_port};

pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A browser session; the driver and its browser are killed on drop.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> Browser {
        assert!(
            std::path::Path::new(CHROMEDRIVER).exists(),
            "{CHROMEDRIVER} missing: run `bash scripts/browser.sh` (make test does)"
        );
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, so drop can kill the driver and every browser process.
            .process_group(0)
            .spawn()
            .expect("start chromedriver");
        let profile = tempfile::tempdir().expect("profile dir");
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), "chrome".into());
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": CHROMIUM,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1280,900",
                    "--hide-scrollbars",
                    format!("--user-data-dir={}", profile.path().display()),
                ]
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let client = eventually(Duration::from_secs(20), "a webdriver session", || async {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&url)
                .await
                .map_err(|e| e.to_string())
        })
        .await;
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("goto");
    }

    /// The text of the first element matching `css`. htmx swaps the live regions every few
    /// seconds and a form post replaces the whole document, so an element found just before
    /// may be gone when it is read (stale, or "does not belong to the document"): then it is
    /// looked up again, a few times, before the failure counts.
    pub async fn text(&self, css: &str) -> String {
        let mut tries = 0;
        loop {
            match self.find(css).await.text().await {
                Ok(text) => return text,
                Err(e) if tries < 5 => {
                    tries += 1;
                    eprintln!("reading {css} again after: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("text of {css}: {e}"),
            }
        }
    }

    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
    }

    pub async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map(|v| v.len())
            .unwrap_or_else(|e| panic!("find {css}: {e}"))
    }

    /// Clicks the first element matching `css`, looking it up again if a swap replaced it.
    pub async fn click(&self, css: &str) {
        let mut tries = 0;
        loop {
            match self.find(css).await.click().await {
                Ok(_) => return,
                // A click on a node that is no longer in the page did nothing: retry it.
                Err(e) if node_replaced(&e) && tries < 5 => tries += 1,
                Err(e) => panic!("click {css}: {e}"),
            }
        }
    }

    pub async fn fill(&self, css: &str, value: &str) {
        let el = self.find(css).await;
        el.clear().await.expect("clear");
        el.send_keys(value).await.expect("type");
    }

    /// The page's visible text.
    pub async fn body_text(&self) -> String {
        self.text("body").await
    }

    pub async fn path(&self) -> String {
        let url = self.client.current_url().await.expect("url");
        match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        }
    }

    /// Waits until the body text contains `needle` (htmx refreshes, redirects).
    pub async fn wait_text(&self, needle: &str, timeout: Duration) {
        let what = format!("the page to show {needle:?}");
        eventually(timeout, &what, || async {
            let body = self.body_text().await;
            body.contains(needle)
                .then_some(())
                .ok_or(format!("it shows:\n{body}"))
        })
        .await
    }

    /// Logs in at `base` with `token`.
    /// Logs in with `token`, and waits for the signed-in page (its logout form): a `goto`
    /// right after the click could otherwise leave before the session cookie is set.
    pub async fn login(&self, base: &str, token: &str) {
        self.goto(&format!("{base}/login")).await;
        self.fill("#token", token).await;
        self.click("form.login button").await;
        self.find("form[action='/logout']").await;
    }

    pub async fn screenshot(&self, path: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        if let Some(dir) = std::path::Path::new(path).parent() {
            std::fs::create_dir_all(dir).expect("screenshot dir");
        }
        std::fs::write(path, png).expect("write screenshot");
    }

    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.driver.id())])
            .status();
        let _ = self.driver.wait();
    }
}

/// True when a command failed because its element left the page (an htmx swap or a new
/// document), which Chromium reports either as a stale element or as an inspector error.
fn node_replaced(e: &fantoccini::error::CmdError) -> bool {
    e.is_stale_element_reference() || e.to_string().contains("does not belong to the document")
}
