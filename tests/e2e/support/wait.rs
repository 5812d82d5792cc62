//! Waiting for something to become true: [`eventually`] polls a check until it passes and
//! panics with what it was waiting for (and the check's last word) when it does not in time;
//! [`holds_for`] checks that something stays true for a while.
//! Every wait of the tests goes through it, so none can end quietly at a deadline and let a
//! test go on as if the thing had happened.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often [`eventually`] polls.
const EVERY: Duration = Duration::from_millis(50);

/// What a check polled by [`eventually`] answers: done (with a value) or not yet (with why).
pub trait Check {
    /// What [`eventually`] returns once the check passes.
    type Value;
    /// `Ok` when the check passed; `Err` says what it saw instead.
    fn outcome(self) -> Result<Self::Value, String>;
}

impl Check for bool {
    type Value = ();
    fn outcome(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err("still false".into())
        }
    }
}

impl<T> Check for Option<T> {
    type Value = T;
    fn outcome(self) -> Result<T, String> {
        self.ok_or_else(|| "still nothing".into())
    }
}

impl<T> Check for Result<T, String> {
    type Value = T;
    fn outcome(self) -> Result<T, String> {
        self
    }
}

/// Polls `check` every 50 ms until it passes and returns its value; panics after `timeout`
/// with `what` and the check's last answer. A check that hangs past the timeout panics too.
pub async fn eventually<F, Fut>(
    timeout: Duration,
    what: &str,
    check: F,
) -> <Fut::Output as Check>::Value
where
    F: FnMut() -> Fut,
    Fut: Future,
    Fut::Output: Check,
{
    eventually_every(timeout, EVERY, what, check).await
}

/// [`eventually`], polling every `every` (short, to catch a passing state; long, to spare a
/// server).
pub async fn eventually_every<F, Fut>(
    timeout: Duration,
    every: Duration,
    what: &str,
    mut check: F,
) -> <Fut::Output as Check>::Value
where
    F: FnMut() -> Fut,
    Fut: Future,
    Fut::Output: Check,
{
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        // One poll may take a moment past the deadline (a query on a loaded machine), never
        // forever.
        let answer = tokio::time::timeout(left.max(Duration::from_secs(5)), check())
            .await
            .unwrap_or_else(|_| {
                panic!("timed out after {timeout:?} waiting for {what}: the check itself hung")
            });
        let last = match answer.outcome() {
            Ok(value) => return value,
            Err(last) => last,
        };
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}: {last}");
        }
        tokio::time::sleep(every).await;
    }
}

/// [`eventually`] for code outside the async runtime (a helper that must not be async, such
/// as a `Drop` or a blocking start): polls `check` every 50 ms on this thread.
pub fn eventually_blocking<C: Check>(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> C,
) -> C::Value {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check().outcome() {
            Ok(value) => return value,
            Err(last) => last,
        };
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}: {last}");
        }
        std::thread::sleep(EVERY);
    }
}

/// Polls `check` every `every` for all of `span` and panics at its first failure: for a state
/// that must last (a gauge a periodic job must not reset), where [`eventually`] waits for one
/// to come.
pub async fn holds_for<F, Fut>(span: Duration, every: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future,
    Fut::Output: Check,
{
    let until = Instant::now() + span;
    while Instant::now() < until {
        if let Err(saw) = check().await.outcome() {
            panic!("{what} stopped holding: {saw}");
        }
        tokio::time::sleep(every).await;
    }
}

#[tokio::test]
async fn eventually_returns_the_value_of_the_first_passing_poll() {
    let mut polls = 0;
    let got = eventually(Duration::from_secs(5), "the third poll", || {
        polls += 1;
        let n = polls;
        async move { (n >= 3).then_some(n) }
    })
    .await;
    assert_eq!(got, 3);
}

#[tokio::test]
#[should_panic(expected = "waiting for a thing that never comes: it is late")]
async fn eventually_panics_with_what_it_waited_for_and_the_last_answer() {
    eventually(
        Duration::from_millis(200),
        "a thing that never comes",
        || async { Err::<(), _>("it is late".to_string()) },
    )
    .await;
}

#[tokio::test]
#[should_panic(expected = "stopped holding: still false")]
async fn holds_for_panics_at_the_first_failure() {
    let mut polls = 0;
    holds_for(
        Duration::from_secs(5),
        Duration::from_millis(10),
        "the first two polls",
        || {
            polls += 1;
            let n = polls;
            async move { n <= 2 }
        },
    )
    .await;
}
