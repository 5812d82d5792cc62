//! Middleware as layers, the shape tower and apalis give it: a [`Layer`] takes a handler and
//! returns another that wraps it (a timeout, a metric, a rate limit, a retry budget), and
//! what it returns is a [`Handler`] or [`BatchHandler`] again, so layers nest and the result
//! runs like any handler: `consumer.run(Timed.layer(handler), shutdown)`.
//!
//! The library wraps every handler in two layers of its own, innermost first: [`CatchPanic`]
//! (a panic becomes a retry, so one bad handler call cannot take the consumer down) and
//! [`Traced`] (the call runs in its processing span, marked failed on an error). What acts on
//! the stream rather than on the call (the partition ownership check, delivery counting, the
//! dead stream) stays in [`crate::handling`]: it needs the entry's stream and the consumer's
//! connection, which a handler never sees.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tracing::Instrument;

use outbox_core::{panic, Entry};

use crate::handler::{BatchHandler, Handler, HandlerError};
use crate::spans;

/// Wraps a handler `H` in another, [`Layer::Handler`].
///
/// ```
/// use outbox_consumer::{Entry, Handler, HandlerError, Layer};
///
/// /// Logs how long each call took.
/// struct Timed;
///
/// struct TimedHandler<H>(H);
///
/// impl<H> Layer<H> for Timed {
///     type Handler = TimedHandler<H>;
///     fn layer(&self, inner: H) -> TimedHandler<H> {
///         TimedHandler(inner)
///     }
/// }
///
/// impl<H: Handler> Handler for TimedHandler<H> {
///     async fn handle(&self, entry: Entry) -> Result<(), HandlerError> {
///         let started = std::time::Instant::now();
///         let id = entry.id;
///         let result = self.0.handle(entry).await;
///         println!("{id}: {:?}", started.elapsed());
///         result
///     }
///
///     // Pass the inner handler's own work on (the inbox's retention, for one).
///     async fn maintain(&self, group: &str) {
///         self.0.maintain(group).await
///     }
/// }
///
/// let handler = Timed.layer(|_entry: Entry| async { Ok::<(), HandlerError>(()) });
/// # fn is_handler(_: &impl Handler) {}
/// # is_handler(&handler);
/// ```
pub trait Layer<H> {
    /// The wrapping handler.
    type Handler;

    /// Wraps `inner`.
    fn layer(&self, inner: H) -> Self::Handler;
}

/// A layer from a function: `layer_fn(|inner| MyHandler { inner })`.
pub fn layer_fn<F>(f: F) -> LayerFn<F> {
    LayerFn(f)
}

/// See [`layer_fn`].
#[derive(Debug, Clone, Copy)]
pub struct LayerFn<F>(F);

impl<F, H, W> Layer<H> for LayerFn<F>
where
    F: Fn(H) -> W,
{
    type Handler = W;

    fn layer(&self, inner: H) -> W {
        (self.0)(inner)
    }
}

/// A handler the library holds by reference while it wraps it for one call.
pub(crate) struct Borrowed<'a, H>(pub(crate) &'a H);

impl<H: Handler> Handler for Borrowed<'_, H> {
    async fn handle(&self, entry: Entry) -> Result<(), HandlerError> {
        self.0.handle(entry).await
    }

    async fn maintain(&self, group: &str) {
        Handler::maintain(self.0, group).await
    }
}

impl<B: BatchHandler> BatchHandler for Borrowed<'_, B> {
    async fn handle_batch(&self, entries: Vec<Entry>) -> Result<(), HandlerError> {
        self.0.handle_batch(entries).await
    }

    async fn maintain(&self, group: &str) {
        BatchHandler::maintain(self.0, group).await
    }
}

/// The layer that turns a handler's panic into [`ErrorKind::Retry`](crate::ErrorKind) with
/// the error `handler panicked: <message>`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CatchPanicLayer;

impl<H> Layer<H> for CatchPanicLayer {
    type Handler = CatchPanic<H>;

    fn layer(&self, inner: H) -> CatchPanic<H> {
        CatchPanic(inner)
    }
}

/// See [`CatchPanicLayer`].
pub(crate) struct CatchPanic<H>(H);

/// A caught panic as the handler's error.
fn panicked(payload: Box<dyn std::any::Any + Send>) -> HandlerError {
    HandlerError::retry(format!(
        "handler panicked: {}",
        panic::message(payload.as_ref())
    ))
}

impl<H: Handler> Handler for CatchPanic<H> {
    async fn handle(&self, entry: Entry) -> Result<(), HandlerError> {
        AssertUnwindSafe(self.0.handle(entry))
            .catch_unwind()
            .await
            .unwrap_or_else(|payload| Err(panicked(payload)))
    }

    async fn maintain(&self, group: &str) {
        Handler::maintain(&self.0, group).await
    }
}

impl<B: BatchHandler> BatchHandler for CatchPanic<B> {
    async fn handle_batch(&self, entries: Vec<Entry>) -> Result<(), HandlerError> {
        AssertUnwindSafe(self.0.handle_batch(entries))
            .catch_unwind()
            .await
            .unwrap_or_else(|payload| Err(panicked(payload)))
    }

    async fn maintain(&self, group: &str) {
        BatchHandler::maintain(&self.0, group).await
    }
}

/// The layer that runs each call in its processing span ([`crate::spans`]), named for the
/// stream the entries were read from, and marks the span failed when the call fails.
#[derive(Debug, Clone)]
pub(crate) struct TracedLayer {
    stream: Arc<str>,
}

impl TracedLayer {
    /// Spans named for `stream` (a batch's: its first entry's stream).
    pub(crate) fn new(stream: Arc<str>) -> TracedLayer {
        TracedLayer { stream }
    }
}

impl<H> Layer<H> for TracedLayer {
    type Handler = Traced<H>;

    fn layer(&self, inner: H) -> Traced<H> {
        Traced {
            stream: self.stream.clone(),
            inner,
        }
    }
}

/// See [`TracedLayer`].
pub(crate) struct Traced<H> {
    stream: Arc<str>,
    inner: H,
}

impl<H: Handler> Handler for Traced<H> {
    async fn handle(&self, entry: Entry) -> Result<(), HandlerError> {
        let span = spans::for_entry(&self.stream, &entry);
        let result = self.inner.handle(entry).instrument(span.clone()).await;
        if let Err(e) = &result {
            spans::failed(&span, &e.to_string());
        }
        result
    }

    async fn maintain(&self, group: &str) {
        Handler::maintain(&self.inner, group).await
    }
}

impl<B: BatchHandler> BatchHandler for Traced<B> {
    async fn handle_batch(&self, entries: Vec<Entry>) -> Result<(), HandlerError> {
        let span = spans::for_batch(&entries, &self.stream);
        let result = self
            .inner
            .handle_batch(entries)
            .instrument(span.clone())
            .await;
        if let Err(e) = &result {
            spans::failed(&span, &e.to_string());
        }
        result
    }

    async fn maintain(&self, group: &str) {
        BatchHandler::maintain(&self.inner, group).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use redis::Value;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn entry() -> Entry {
        let fields: Vec<(String, Value)> = [
            ("id", "5f0c6a1e-0000-4000-8000-000000000001"),
            ("topic", "t"),
            ("payload", "{}"),
            ("headers", "{}"),
            ("created_at", "2026-12-05T10:00:00.000000Z"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Value::BulkString(v.as_bytes().to_vec())))
        .collect();
        Entry::from_pairs("1-0", &fields).expect("entry")
    }

    #[tokio::test]
    async fn a_panic_becomes_a_retry_saying_so() {
        let handler = CatchPanicLayer.layer(|_e: Entry| async {
            if true {
                panic!("boom");
            }
            Ok::<(), HandlerError>(())
        });
        let e = handler.handle(entry()).await.expect_err("caught");
        assert_eq!(e.kind(), ErrorKind::Retry);
        assert_eq!(e.to_string(), "handler panicked: boom");

        let batch = CatchPanicLayer.layer(|_e: Vec<Entry>| async {
            if true {
                panic!("bulk");
            }
            Ok::<(), HandlerError>(())
        });
        let e = batch.handle_batch(vec![entry()]).await.expect_err("caught");
        assert_eq!(e.to_string(), "handler panicked: bulk");
    }

    /// Counts the calls that pass through it.
    struct Counted<'c, H> {
        calls: &'c AtomicUsize,
        inner: H,
    }

    impl<H: Handler> Handler for Counted<'_, H> {
        async fn handle(&self, entry: Entry) -> Result<(), HandlerError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.inner.handle(entry).await
        }
    }

    #[tokio::test]
    async fn layers_nest_and_keep_the_inner_result() {
        let calls = AtomicUsize::new(0);
        let counting = layer_fn(|inner| Counted {
            calls: &calls,
            inner,
        });
        let failing = |_e: Entry| async { Err::<(), _>(HandlerError::dead_letter("no")) };
        let handler = TracedLayer::new("s".into())
            .layer(CatchPanicLayer.layer(counting.layer(Borrowed(&failing))));
        let e = handler.handle(entry()).await.expect_err("inner error");
        assert_eq!(e.kind(), ErrorKind::DeadLetter, "the inner kind, unchanged");
        assert_eq!(e.to_string(), "no");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
