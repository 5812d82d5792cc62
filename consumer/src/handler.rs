//! What users write: a [`Handler`] for one entry at a time, or a [`BatchHandler`] for whole
//! batches (run through the [`Batches`] wrapper), each returning a [`HandlerError`] that says
//! what should become of a failed entry: retried later, dead-lettered now, or retried without
//! counting a delivery because the failure was an outage. Closures are handlers; wrappers such
//! as the inbox implement the same traits.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;

use crate::Entry;

/// What should become of an entry whose handler failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Deliver it again after a backoff; after `max_deliveries` deliveries it goes to the
    /// dead stream. What `?` on any error gives.
    Retry,
    /// Move it to the dead stream now: no delivery will ever succeed (a payload that does not
    /// parse, a business rule that refuses it).
    DeadLetter,
    /// Not the entry's fault (a database or service the handler needs is away): deliver it
    /// again after a pause without counting this delivery, so an outage never dead-letters.
    Outage,
    /// This consumer no longer owns the entry's partition: a newer owner (a higher
    /// [`Lease`](crate::Lease) epoch) has taken it, so the effect was refused. The entry is
    /// left to that owner, uncounted, and this consumer stops handling the partition. What
    /// the inbox returns when its fence refuses a commit; return it from your own fenced
    /// effects too.
    Fenced,
}

/// A handler's failure: what should become of the entry ([`ErrorKind`]) and why. Any error
/// type converts into one with [`ErrorKind::Retry`], so `?` works in handlers; the
/// constructors choose another kind.
pub struct HandlerError {
    kind: ErrorKind,
    error: Box<dyn StdError + Send + Sync>,
}

impl HandlerError {
    /// Retry later (counted; dead-lettered after `max_deliveries`).
    pub fn retry(error: impl Into<Box<dyn StdError + Send + Sync>>) -> HandlerError {
        HandlerError::new(ErrorKind::Retry, error)
    }

    /// Dead-letter now.
    pub fn dead_letter(error: impl Into<Box<dyn StdError + Send + Sync>>) -> HandlerError {
        HandlerError::new(ErrorKind::DeadLetter, error)
    }

    /// An outage: retry after a pause, this delivery not counted.
    pub fn outage(error: impl Into<Box<dyn StdError + Send + Sync>>) -> HandlerError {
        HandlerError::new(ErrorKind::Outage, error)
    }

    /// The effect was refused because a newer owner holds the entry's partition.
    pub fn fenced(error: impl Into<Box<dyn StdError + Send + Sync>>) -> HandlerError {
        HandlerError::new(ErrorKind::Fenced, error)
    }

    /// A failure of the given kind.
    pub fn new(kind: ErrorKind, error: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        HandlerError {
            kind,
            error: error.into(),
        }
    }

    /// What should become of the entry.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The underlying error.
    pub fn into_inner(self) -> Box<dyn StdError + Send + Sync> {
        self.error
    }
}

// No `std::error::Error` impl: it would collide with this blanket conversion (as with
// `anyhow::Error`), which is what lets `?` work on any error inside a handler.
impl<E: StdError + Send + Sync + 'static> From<E> for HandlerError {
    fn from(error: E) -> Self {
        HandlerError::retry(error)
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("kind", &self.kind)
            .field("error", &self.error)
            .finish()
    }
}

/// Handles one entry. Entries of one partition key (per topic) are handed over one after
/// another in stream order; different keys, and unkeyed entries, up to `concurrency` at once.
/// The entry is acknowledged after `Ok`. A panic counts as [`ErrorKind::Retry`].
///
/// A closure `Fn(Entry) -> impl Future<Output = Result<(), E>>` is a handler for any `E` that
/// converts into a [`HandlerError`] (every error type, and `HandlerError` itself).
pub trait Handler {
    /// Handles `entry`.
    fn handle(&self, entry: Entry) -> impl Future<Output = Result<(), HandlerError>>;

    /// Work the handler needs done beside handling for as long as the consumer of `group`
    /// runs (the inbox's retention); it is dropped when the consumer stops. None by default.
    fn maintain(&self, group: &str) -> impl Future<Output = ()> {
        let _ = group;
        std::future::pending()
    }
}

impl<F, Fut, E> Handler for F
where
    F: Fn(Entry) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Into<HandlerError>,
{
    async fn handle(&self, entry: Entry) -> Result<(), HandlerError> {
        self(entry).await.map_err(Into::into)
    }
}

/// Handles a whole batch, all or nothing: `Ok` acknowledges every entry; an error applies its
/// kind to every entry of the batch. Entries come in stream order (the topics' entries merged
/// by stream id); keeping one key's entries in order inside the batch is the handler's part.
/// Run one through [`Batches`].
///
/// A closure `Fn(Vec<Entry>) -> impl Future<Output = Result<(), E>>` is a batch handler for
/// any `E` that converts into a [`HandlerError`].
pub trait BatchHandler {
    /// Handles `entries`.
    fn handle_batch(&self, entries: Vec<Entry>) -> impl Future<Output = Result<(), HandlerError>>;

    /// As [`Handler::maintain`].
    fn maintain(&self, group: &str) -> impl Future<Output = ()> {
        let _ = group;
        std::future::pending()
    }
}

impl<F, Fut, E> BatchHandler for F
where
    F: Fn(Vec<Entry>) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Into<HandlerError>,
{
    async fn handle_batch(&self, entries: Vec<Entry>) -> Result<(), HandlerError> {
        self(entries).await.map_err(Into::into)
    }
}

/// Runs a [`BatchHandler`]: `consumer.run(Batches(handler), shutdown)`. Use it where one
/// transaction per batch is what keeps up (the inbox's batches); use a per-entry [`Handler`]
/// where one bad entry must not take its batch along.
#[derive(Debug, Clone)]
pub struct Batches<B>(pub B);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_error_is_a_retry_and_constructors_choose_the_kind() {
        let io = std::io::Error::other("disk");
        let e: HandlerError = io.into();
        assert_eq!(e.kind(), ErrorKind::Retry);
        assert_eq!(e.to_string(), "disk");
        assert_eq!(
            HandlerError::dead_letter("bad payload").kind(),
            ErrorKind::DeadLetter
        );
        assert_eq!(HandlerError::outage("db away").kind(), ErrorKind::Outage);
        assert_eq!(
            HandlerError::outage("db away").into_inner().to_string(),
            "db away"
        );
    }
}
