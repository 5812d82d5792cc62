//! Login, sessions and the refusals around them.

use std::time::Duration;

use super::browser::Browser;
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_logs_in_with_the_token_and_a_wrong_token_is_refused() {
    let ui = TokenRelay::start("ui", &[]).await;
    let b = Browser::start().await;
    // A page without a session sends the browser to the login page, remembering the page.
    b.goto(&format!("{}/streams", ui.base())).await;
    assert_eq!(b.path().await, "/login?next=%2Fstreams");
    b.fill("#token", "not-the-token").await;
    b.click("form.login button").await;
    b.wait_text("That token is not accepted", Duration::from_secs(5))
        .await;
    assert!(b.path().await.starts_with("/login"));
    b.login(&ui.base(), ADMIN_TOKEN).await;
    b.wait_text("Overview", Duration::from_secs(5)).await;
    assert_eq!(b.path().await, "/");
    assert_eq!(b.text(".badge").await, "admin");
    // Logging out ends the session: the next page asks for the token again.
    b.click("header form button").await;
    b.wait_text("Log in", Duration::from_secs(5)).await;
    b.goto(&format!("{}/", ui.base())).await;
    assert!(b.path().await.starts_with("/login"));
    b.close().await;
}

#[tokio::test]
async fn the_session_cookie_is_httponly_strict_and_expires() {
    let ui = TokenRelay::start("ui", &[]).await;
    let http = ui.anonymous();
    // Pages redirect to the login page; the health endpoints stay open.
    let res = http.get("/streams?topic=a");
    assert_eq!(res.status, 303);
    assert_eq!(
        res.header("location"),
        Some("/login?next=%2Fstreams%3Ftopic%3Da")
    );
    assert_eq!(http.status("/healthz"), 200);
    assert_eq!(http.status("/login"), 200);
    // A wrong token: 401, no cookie.
    let res = http.post_form("/login", &form(&[("token", "nope")]));
    assert_eq!(res.status, 401);
    assert!(res.header("set-cookie").is_none());
    // The right one: a cookie with the contract's attributes, and a redirect to `next` only
    // when it is a local path.
    let res = http.post_form(
        "/login",
        &form(&[("token", ADMIN_TOKEN), ("next", "https://evil.example/")]),
    );
    assert_eq!(res.status, 303);
    assert_eq!(res.header("location"), Some("/"));
    let set = res.header("set-cookie").expect("set-cookie").to_string();
    assert!(set.starts_with("outbox_session="), "{set}");
    assert!(set.contains("HttpOnly"), "{set}");
    assert!(set.contains("SameSite=Strict"), "{set}");
    assert!(set.contains("Max-Age=43200"), "{set}");
    assert!(set.contains("Path=/"), "{set}");
    let cookie = res.session_cookie().expect("cookie");
    let page = http.cookie(&cookie).get("/");
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-security-policy")
        .is_some_and(|c| c.contains("script-src 'self'")));
    // A tampered cookie is no session.
    let forged = format!("{cookie}x");
    assert_eq!(http.cookie(&forged).get("/").status, 303);
    // htmx polling after the session ended is told to navigate to the login page.
    let res = http.with("HX-Request", "true").get("/");
    assert_eq!(res.header("hx-redirect"), Some("/login"));
    // A login posted from another site is refused (login CSRF).
    let res = http
        .with("Origin", "https://evil.example")
        .post_form("/login", &form(&[("token", ADMIN_TOKEN)]));
    assert_eq!(res.status, 403);
}

#[tokio::test]
async fn a_post_without_the_csrf_token_is_refused() {
    let ui = TokenRelay::start("ui", &[]).await;
    let (session, csrf) = ui.login(ADMIN_TOKEN);
    let res = session.post_form("/logout", "");
    assert_eq!(res.status, 403, "logout without csrf");
    let res = session.post_form("/logout", &form(&[("csrf", "x")]));
    assert_eq!(res.status, 403, "logout with a wrong csrf");
    let res = session.post_form("/logout", &form(&[("csrf", &csrf)]));
    assert_eq!(res.status, 303);
    assert!(res
        .header("set-cookie")
        .is_some_and(|c| c.contains("Max-Age=0")));
}

#[tokio::test]
async fn without_a_token_the_ui_is_open_on_loopback() {
    let Bundle {
        db: _db,
        redis: _redis,
        relay,
    } = setup("open", &[]).await;
    let http = relay.http();
    http.wait_status("/healthz", 200, Duration::from_secs(20))
        .await;
    // No login form: the login page hands out an admin session at once.
    let res = http.get("/login?next=%2Freplicas");
    assert_eq!(res.status, 303);
    assert_eq!(res.header("location"), Some("/replicas"));
    let cookie = res.session_cookie().expect("cookie");
    let page = http.cookie(&cookie).get("/");
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("Log out"));
}

#[tokio::test]
async fn the_login_page_refuses_an_address_after_too_many_wrong_tokens() {
    let ui = TokenRelay::start("ui", &[("OUTBOX__ADMIN__FAILED_LOGINS_PER_MINUTE", "2")]).await;
    let http = ui.anonymous();
    for _ in 0..2 {
        let res = http.post_form("/login", &form(&[("token", "guess")]));
        assert_eq!(res.status, 401);
    }
    let res = http.post_form("/login", &form(&[("token", ADMIN_TOKEN)]));
    assert_eq!(res.status, 429);
    assert!(
        res.header("set-cookie").is_none(),
        "no session while refused"
    );
    assert!(res.header("retry-after").is_some());
    assert!(res.body.contains("Too many wrong tokens"), "{}", res.body);
}
