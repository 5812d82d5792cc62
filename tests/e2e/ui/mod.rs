//! The web UI end to end: the real binary with its admin server ([`TokenRelay`]), a real
//! headless Chromium (WebDriver), real Postgres and Redis. Plain HTTP tests check what a
//! browser hides: the cookie attributes, redirects, and refusals of forged POSTs.
//!
//! [`TokenRelay`]: crate::support::TokenRelay

mod actions;
pub mod browser;
mod login;
mod pages;
mod screenshots;
