//! The web UI end to end: the real binary with its admin server, a real headless Chromium
//! (WebDriver), real Postgres and Redis. Plain HTTP tests check what a browser hides: the
//! cookie attributes, redirects, and refusals of forged POSTs.

mod actions;
pub mod browser;
pub mod http;
pub mod login;
mod screenshots;
