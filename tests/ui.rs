//! The web UI end to end: the real binary with its admin server, a real headless Chromium
//! (WebDriver), real Postgres and Redis. Plain HTTP tests check what a browser hides: the
//! cookie attributes, redirects, and refusals of forged POSTs.
#![allow(unreachable_pub)]

#[path = "ui/action_tests.rs"]
mod action_tests;
#[path = "ui/browser.rs"]
mod browser;
mod common;
#[path = "ui/http.rs"]
mod http;
#[path = "ui/login_tests.rs"]
mod login_tests;
#[path = "ui/screenshots.rs"]
mod screenshots;
