//! The consumer loop: this consumer's pending entries first (its own failures, what it held
//! when it last stopped, what it claimed from dead consumers), then new entries; each batch
//! split into lanes by partition key; acknowledgement only after the handler succeeded;
//! dead letters after `max_deliveries`; outages waited out.
//!
//! Delivery counting. Redis counts a delivery when XREADGROUP hands out a new entry and when
//! it is claimed without JUSTID. This consumer reads its pending entries with XRANGE (no
//! count) and, just before handling one again, sets the group's counter to the delivery it
//! is about to make (`XCLAIM ... RETRYCOUNT n JUSTID`). So an entry held back behind an
//! earlier failure of its key is not charged for deliveries it never had, and the counter
//! survives a crash: a consumer that claims an entry whose counter already reached
//! `max_deliveries` knows its holders kept dying on it and dead-letters it unhandled.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::time::{Duration, Instant};

use futures::future::FusedFuture;
use futures::{FutureExt, StreamExt};
use redis::aio::ConnectionManager;
use uuid::Uuid;

use crate::config::{ConfigError, ConsumerConfig};
use crate::entry::{Entry, EntryError};
use crate::lanes::{self, Keyed};
use crate::retry::{self, ErrorLog};
use crate::stream::{self, ConnectError, RawEntry};

/// Why a consumer could not be built. Nothing after that is fatal: outages are retried.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// A setting is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The Redis client could not be set up (bad URL, unreadable TLS file).
    #[error(transparent)]
    Connect(#[from] ConnectError),
}

/// What a [`Consumer::run`] did before it returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Entries handled successfully and acknowledged.
    pub handled: u64,
    /// Handler failures that left the entry for a later delivery (a failure that sends it
    /// to the dead stream counts in `dead_lettered` instead).
    pub failed: u64,
    /// Entries moved to the dead stream.
    pub dead_lettered: u64,
}

/// A member of a consumer group on one topic's stream. Build it with [`Consumer::new`], then
/// call one of the `run` methods with a handler and a shutdown future.
pub struct Consumer {
    config: ConsumerConfig,
    conn: ConnectionManager,
    key: String,
}

impl Consumer {
    /// Checks the settings and prepares the connection (lazy: nothing connects before `run`).
    pub fn new(config: ConsumerConfig) -> Result<Consumer, ConsumerError> {
        config.validate()?;
        let conn = stream::connect(&config)?;
        let key = config.stream_key();
        Ok(Consumer { config, conn, key })
    }

    /// The settings in use.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// Runs until `shutdown` completes, calling `handler` once per entry: entries of one
    /// partition key one after another in stream order, different keys (and unkeyed
    /// entries) up to `concurrency` at once. An entry is acknowledged after its handler
    /// returned `Ok`; after an `Err` it is retried (later entries of its key wait), and dead-
    /// lettered after `max_deliveries`. On shutdown, handlers in flight finish and their
    /// entries are acknowledged before this returns.
    pub async fn run<H, Fut, E>(&self, handler: H, shutdown: impl Future<Output = ()>) -> RunStats
    where
        H: Fn(Entry) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Display,
    {
        self.run_with(&Each::new(handler), shutdown).await
    }

    /// Runs until `shutdown` completes, calling `handler` with each batch's entries (in
    /// stream order; keeping per-key order inside a batch is the handler's part). A batch is
    /// all or nothing: `Ok` acknowledges every entry, `Err` retries every entry, and each
    /// one is dead-lettered after `max_deliveries`. Use [`Consumer::run`] when one bad entry
    /// must not take its batch to the dead stream.
    pub async fn run_batches<H, Fut, E>(
        &self,
        handler: H,
        shutdown: impl Future<Output = ()>,
    ) -> RunStats
    where
        H: Fn(Vec<Entry>) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Display,
    {
        self.run_with(&Batch(handler), shutdown).await
    }

    pub(crate) async fn run_with<P: Process>(
        &self,
        process: &P,
        shutdown: impl Future<Output = ()>,
    ) -> RunStats {
        let mut shutdown = pin!(shutdown.fuse());
        let mut state = LoopState::new();
        let ctx = Ctx {
            config: &self.config,
            key: &self.key,
            conn: self.conn.clone(),
        };
        tracing::info!(
            stream = %self.key, group = %self.config.group, consumer = %self.config.consumer,
            "consumer started"
        );
        loop {
            if shutdown.is_terminated() || (&mut shutdown).now_or_never().is_some() {
                break;
            }
            let mut conn = self.conn.clone();
            let wait = match self.turn(&ctx, &mut conn, &mut state, process).await {
                Ok(Turn::Again) => {
                    state.redis_ok();
                    continue;
                }
                Ok(Turn::Wait(until)) => {
                    state.redis_ok();
                    until.saturating_duration_since(Instant::now())
                }
                Err(e) => {
                    if stream::is_nogroup(&e) {
                        state.group_ready = false;
                    }
                    state.redis_failed(&self.config, &e)
                }
            };
            if !wait.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = &mut shutdown => break,
                }
            }
        }
        // Whatever was handled but could not be acknowledged gets one more try.
        if !state.unacked.is_empty() {
            let mut conn = self.conn.clone();
            if let Err(e) = stream::ack(&mut conn, &self.config, &self.key, &state.unacked).await {
                tracing::warn!(error = %e, count = state.unacked.len(), "acknowledgements lost at shutdown: those entries will be redelivered");
            }
        }
        tracing::info!(
            stream = %self.key, group = %self.config.group, consumer = %self.config.consumer,
            handled = state.stats.handled, "consumer stopped"
        );
        state.stats
    }

    /// One step of the loop: flush acknowledgements, claim from dead consumers when due,
    /// then handle own pending entries, or else read new ones.
    async fn turn<P: Process>(
        &self,
        ctx: &Ctx<'_>,
        conn: &mut ConnectionManager,
        state: &mut LoopState,
        process: &P,
    ) -> redis::RedisResult<Turn> {
        let config = &self.config;
        if !state.group_ready {
            stream::ensure_group(conn, &self.key, &config.group).await?;
            state.group_ready = true;
        }
        if !state.unacked.is_empty() {
            stream::ack(conn, config, &self.key, &state.unacked).await?;
            state.stats.handled += state.unacked.len() as u64;
            state.unacked.clear();
        }
        let now = Instant::now();
        if now >= state.next_claim {
            let claimed = stream::claim_abandoned(conn, config, &self.key).await?;
            state.next_claim = now + claim_every(config);
            if claimed > 0 {
                tracing::info!(claimed, stream = %self.key, "claimed entries idle longer than claim_idle from other consumers");
                state.maybe_pending = true;
            }
        }
        if state.maybe_pending {
            let pending = stream::pending_mine(conn, config, &self.key).await?;
            if !pending.is_empty() {
                return self.pending_turn(ctx, conn, state, process, pending).await;
            }
            state.maybe_pending = false;
            state.retry_at.clear();
            state.fresh_unattempted.clear();
        }
        let raw = stream::read_new(conn, config, &self.key).await?;
        if raw.is_empty() {
            return Ok(Turn::Again);
        }
        let deliveries: Vec<Delivery> = raw
            .into_iter()
            .map(|raw| Delivery::new(raw, 1, false))
            .collect();
        self.handle(ctx, conn, state, process, lanes::group(deliveries))
            .await?;
        Ok(Turn::Again)
    }

    /// Handles this consumer's pending entries: the lanes whose entries are not waiting out
    /// a retry delay; or says how long to wait when all of them are.
    async fn pending_turn<P: Process>(
        &self,
        ctx: &Ctx<'_>,
        conn: &mut ConnectionManager,
        state: &mut LoopState,
        process: &P,
        pending: Vec<(String, u64)>,
    ) -> redis::RedisResult<Turn> {
        let ids: Vec<String> = pending.iter().map(|(id, _)| id.clone()).collect();
        let fetched = stream::fetch(conn, &self.key, &ids).await?;
        let mut gone = Vec::new();
        let mut deliveries = Vec::new();
        for ((id, count), raw) in pending.into_iter().zip(fetched) {
            let Some(raw) = raw else {
                gone.push(id);
                continue;
            };
            // Read with `>` and held back behind its key, never handled: not a new delivery.
            let fresh = count == 1 && state.fresh_unattempted.contains(&id);
            let delivery = if fresh { 1 } else { count + 1 };
            deliveries.push(Delivery::new(raw, delivery, !fresh));
        }
        if !gone.is_empty() {
            tracing::warn!(count = gone.len(), stream = %self.key, "pending entries no longer in the stream (trimmed or deleted): acknowledged without handling");
            stream::ack(conn, &self.config, &self.key, &gone).await?;
        }
        let now = Instant::now();
        let (ready, waiting): (Vec<Vec<Delivery>>, Vec<Vec<Delivery>>) =
            lanes::group(deliveries).into_iter().partition(|lane| {
                lane.iter().all(|d| {
                    state
                        .retry_at
                        .get(&d.raw.stream_id)
                        .is_none_or(|t| *t <= now)
                })
            });
        if ready.is_empty() {
            let earliest = waiting
                .iter()
                .flatten()
                .filter_map(|d| state.retry_at.get(&d.raw.stream_id))
                .min()
                .copied()
                .unwrap_or(now);
            return Ok(Turn::Wait(earliest.min(state.next_claim)));
        }
        self.handle(ctx, conn, state, process, ready).await?;
        Ok(Turn::Again)
    }

    /// Runs the lanes, then acknowledges the successes in one call and records the rest.
    async fn handle<P: Process>(
        &self,
        ctx: &Ctx<'_>,
        conn: &mut ConnectionManager,
        state: &mut LoopState,
        process: &P,
        lanes: Vec<Vec<Delivery>>,
    ) -> redis::RedisResult<()> {
        let in_hand: Vec<String> = lanes
            .iter()
            .flatten()
            .map(|d| d.raw.stream_id.clone())
            .collect();
        let outcomes = tokio::select! {
            biased;
            outcomes = process.process(ctx, lanes) => outcomes,
            never = keep_claimed(&self.config, &self.key, self.conn.clone(), in_hand) => match never {},
        };
        let mut done = Vec::new();
        let mut redis_error = None;
        let mut outage_error = None;
        for outcome in outcomes {
            match outcome.fate {
                Fate::Done => done.push(outcome.stream_id),
                Fate::DeadLettered => {
                    state.stats.dead_lettered += 1;
                    state.retry_at.remove(&outcome.stream_id);
                }
                Fate::Failed { delivery } => {
                    state.stats.failed += 1;
                    state.maybe_pending = true;
                    let delay = retry::retry_delay(
                        delivery,
                        self.config.retry_base,
                        self.config.retry_max,
                        retry::jitter(),
                    );
                    state
                        .retry_at
                        .insert(outcome.stream_id, Instant::now() + delay);
                }
                Fate::Outage(error) => {
                    state.maybe_pending = true;
                    outage_error = Some(error);
                    let delay = retry::outage_delay(1).max(Duration::from_secs(1));
                    state
                        .retry_at
                        .insert(outcome.stream_id, Instant::now() + delay);
                }
                Fate::HeldBack { fresh } => {
                    state.maybe_pending = true;
                    if fresh {
                        state.fresh_unattempted.insert(outcome.stream_id);
                    }
                }
                Fate::Lost(e) => {
                    state.maybe_pending = true;
                    if let Some(e) = e {
                        redis_error = Some(e);
                    }
                }
            }
        }
        for id in &done {
            state.retry_at.remove(id);
            state.fresh_unattempted.remove(id);
        }
        if let Err(e) = stream::ack(conn, &self.config, &self.key, &done).await {
            // Handled already: acknowledge at the next turn (a redelivery meanwhile is what
            // the inbox is for).
            state.unacked.extend(done);
            state.maybe_pending = true;
            return Err(e);
        }
        state.stats.handled += done.len() as u64;
        if let Some(error) = outage_error {
            if let Some(suppressed) = state.handler_outages.admit(Instant::now()) {
                tracing::warn!(
                    error,
                    suppressed,
                    "handler failed on an outage; retrying without counting deliveries"
                );
            }
        } else {
            state.handler_outages.reset();
        }
        match redis_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// While a batch's handlers run, restarts the idle time of its entries every third of
/// `claim_idle`, so that a handler slower than `claim_idle` does not get its entries claimed
/// by another consumer (which would handle them a second time, and out of key order).
async fn keep_claimed(
    config: &ConsumerConfig,
    key: &str,
    mut conn: ConnectionManager,
    ids: Vec<String>,
) -> Infallible {
    let every = config.claim_idle / 3;
    let mut failures = ErrorLog::new(Duration::from_secs(30));
    loop {
        tokio::time::sleep(every).await;
        // Entries idle less than half a period were just claimed by someone else: leave them.
        if let Err(e) = stream::keep_idle_low(&mut conn, config, key, &ids, every / 2).await {
            if let Some(suppressed) = failures.admit(Instant::now()) {
                tracing::warn!(error = %e, suppressed, "could not refresh the entries in hand; another consumer may claim them");
            }
        }
    }
}

/// How often to look for entries abandoned by dead consumers.
fn claim_every(config: &ConsumerConfig) -> Duration {
    (config.claim_idle / 2).clamp(Duration::from_millis(100), Duration::from_secs(30))
}

enum Turn {
    /// Go on at once.
    Again,
    /// Nothing to do before this instant (a retry delay, or the next claim round).
    Wait(Instant),
}

/// What the loop remembers between turns.
struct LoopState {
    group_ready: bool,
    /// This consumer may have pending entries: look before reading new ones.
    maybe_pending: bool,
    /// Handled, not yet acknowledged (the XACK failed).
    unacked: Vec<String>,
    /// When each failed entry may be delivered again.
    retry_at: HashMap<String, Instant>,
    /// Read with `>`, then held back behind an earlier failure of their key.
    fresh_unattempted: HashSet<String>,
    next_claim: Instant,
    outage_failures: u32,
    errors: ErrorLog,
    handler_outages: ErrorLog,
    stats: RunStats,
}

impl LoopState {
    fn new() -> LoopState {
        LoopState {
            group_ready: false,
            // A restart under the same name finishes what it held first.
            maybe_pending: true,
            unacked: Vec::new(),
            retry_at: HashMap::new(),
            fresh_unattempted: HashSet::new(),
            next_claim: Instant::now(),
            outage_failures: 0,
            errors: ErrorLog::new(Duration::from_secs(30)),
            handler_outages: ErrorLog::new(Duration::from_secs(30)),
            stats: RunStats::default(),
        }
    }

    fn redis_ok(&mut self) {
        if self.outage_failures > 0 {
            tracing::info!(
                failures = self.outage_failures,
                "redis answers again: consuming"
            );
        }
        self.outage_failures = 0;
        self.errors.reset();
    }

    /// Logs (rate-limited) and returns how long to wait before the next turn.
    fn redis_failed(&mut self, config: &ConsumerConfig, e: &redis::RedisError) -> Duration {
        self.outage_failures = self.outage_failures.saturating_add(1);
        self.maybe_pending = true;
        if let Some(suppressed) = self.errors.admit(Instant::now()) {
            tracing::warn!(
                error = %e, suppressed, group = %config.group, consumer = %config.consumer,
                "redis command failed; retrying with backoff"
            );
        }
        retry::outage_delay(self.outage_failures)
    }
}

/// What the lanes share.
pub(crate) struct Ctx<'a> {
    config: &'a ConsumerConfig,
    key: &'a str,
    conn: ConnectionManager,
}

/// One delivery of one entry.
pub(crate) struct Delivery {
    raw: RawEntry,
    parsed: Result<Entry, EntryError>,
    /// This delivery's number (1 the first time).
    delivery: u64,
    /// A pending entry: set the group's delivery counter (and check it is still ours)
    /// before handling it.
    take: bool,
    key: Option<String>,
}

impl Delivery {
    fn new(raw: RawEntry, delivery: u64, take: bool) -> Delivery {
        let parsed = Entry::from_pairs(raw.stream_id.clone(), &raw.fields).map(|mut e| {
            e.deliveries = delivery;
            e
        });
        let key = match &parsed {
            Ok(e) => e.key.clone(),
            Err(_) => raw.key_field(),
        };
        Delivery {
            raw,
            parsed,
            delivery,
            take,
            key,
        }
    }

    fn event_id(&self) -> Option<Uuid> {
        self.parsed.as_ref().ok().map(|e| e.id)
    }
}

impl Keyed for Delivery {
    fn lane_key(&self) -> Option<&str> {
        self.key.as_deref()
    }
}

pub(crate) struct Outcome {
    stream_id: String,
    fate: Fate,
}

pub(crate) enum Fate {
    /// Handled: acknowledge.
    Done,
    /// Moved to the dead stream and acknowledged.
    DeadLettered,
    /// The handler failed this delivery; retry later.
    Failed { delivery: u64 },
    /// The handler met an outage (not the entry's fault): retry later, uncounted.
    Outage(String),
    /// Not handled: an earlier entry of its key did not succeed. `fresh`: read with `>`.
    HeldBack { fresh: bool },
    /// No longer this consumer's, or Redis failed before it could be handled.
    Lost(Option<redis::RedisError>),
}

/// The part that differs between handler kinds: running a batch's lanes.
pub(crate) trait Process {
    async fn process(&self, ctx: &Ctx<'_>, lanes: Vec<Vec<Delivery>>) -> Vec<Outcome>;
}

/// Checks that need no handler: a malformed entry, or one already delivered more than
/// `max_deliveries` times, goes to the dead stream; a pending entry is taken for this
/// delivery. `None`: hand it to the handler.
async fn before_handling(
    ctx: &Ctx<'_>,
    conn: &mut ConnectionManager,
    d: &Delivery,
) -> Option<Fate> {
    let max = ctx.config.max_deliveries;
    let verdict = match &d.parsed {
        Err(e) => Some((format!("malformed entry: {e}"), d.delivery)),
        Ok(_) if d.delivery > max => Some((
            format!(
                "delivered {} times without being acknowledged (max_deliveries {max}): the consumers holding it stopped before finishing it; not handled again",
                d.delivery - 1
            ),
            d.delivery - 1,
        )),
        Ok(_) => None,
    };
    if let Some((error, deliveries)) = verdict {
        return Some(dead_letter(ctx, conn, d, &error, deliveries).await);
    }
    if d.take {
        match stream::take_for_delivery(conn, ctx.config, ctx.key, &d.raw.stream_id, d.delivery)
            .await
        {
            Ok(true) => {}
            Ok(false) => return Some(Fate::Lost(None)),
            Err(e) => return Some(Fate::Lost(Some(e))),
        }
    }
    None
}

/// The handler failed delivery `d`: retry, or dead-letter at `max_deliveries`.
async fn after_failure(
    ctx: &Ctx<'_>,
    conn: &mut ConnectionManager,
    d: &Delivery,
    error: &str,
) -> Fate {
    tracing::warn!(
        stream_id = %d.raw.stream_id, event_id = %d.event_id().map(|id| id.to_string()).unwrap_or_default(), delivery = d.delivery,
        max_deliveries = ctx.config.max_deliveries, error, "handler failed"
    );
    if d.delivery >= ctx.config.max_deliveries {
        match dead_letter(ctx, conn, d, error, d.delivery).await {
            Fate::DeadLettered => Fate::DeadLettered,
            // Still pending: its next delivery finds it over the limit and dead-letters it.
            other => other,
        }
    } else {
        Fate::Failed {
            delivery: d.delivery,
        }
    }
}

async fn dead_letter(
    ctx: &Ctx<'_>,
    conn: &mut ConnectionManager,
    d: &Delivery,
    error: &str,
    deliveries: u64,
) -> Fate {
    match stream::dead_letter(conn, ctx.config, ctx.key, &d.raw, error, deliveries).await {
        Ok(false) => Fate::Lost(None),
        Ok(true) => {
            tracing::warn!(
                stream_id = %d.raw.stream_id, event_id = %d.event_id().map(|id| id.to_string()).unwrap_or_default(), deliveries, error,
                dead_stream = %ctx.config.dead_key(), "entry dead-lettered"
            );
            Fate::DeadLettered
        }
        Err(e) => Fate::Lost(Some(e)),
    }
}

/// One handler call per entry, lanes concurrently.
pub(crate) struct Each<H, E> {
    handler: H,
    /// Whether a handler error is an outage (its database away), not the entry's fault:
    /// such a failure is not counted as a delivery.
    outage: fn(&E) -> bool,
}

impl<H, Fut, E> Each<H, E>
where
    H: Fn(Entry) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    fn new(handler: H) -> Self {
        Each {
            handler,
            outage: |_| false,
        }
    }

    /// A handler whose errors `outage` says are outages are retried without counting.
    #[cfg_attr(not(feature = "inbox"), allow(dead_code))]
    pub(crate) fn with_outages(handler: H, outage: fn(&E) -> bool) -> Self {
        Each { handler, outage }
    }

    async fn lane(&self, ctx: &Ctx<'_>, lane: Vec<Delivery>) -> Vec<Outcome> {
        let mut conn = ctx.conn.clone();
        let mut out = Vec::with_capacity(lane.len());
        let mut blocked = false;
        for d in lane {
            let fate = if blocked {
                Fate::HeldBack { fresh: !d.take }
            } else {
                self.one(ctx, &mut conn, &d).await
            };
            if !matches!(fate, Fate::Done | Fate::DeadLettered) {
                // Later entries of this key wait: handling them now would reorder the key.
                blocked = true;
            }
            out.push(Outcome {
                stream_id: d.raw.stream_id,
                fate,
            });
        }
        out
    }

    async fn one(&self, ctx: &Ctx<'_>, conn: &mut ConnectionManager, d: &Delivery) -> Fate {
        if let Some(fate) = before_handling(ctx, conn, d).await {
            return fate;
        }
        let Ok(entry) = &d.parsed else {
            return Fate::Lost(None);
        };
        let handled = AssertUnwindSafe((self.handler)(entry.clone()))
            .catch_unwind()
            .await;
        let handled = match handled {
            Ok(result) => result,
            Err(panic) => {
                return after_failure(ctx, conn, d, &panic_message(panic.as_ref())).await;
            }
        };
        match handled {
            Ok(()) => Fate::Done,
            Err(e) if (self.outage)(&e) => {
                tracing::debug!(stream_id = %d.raw.stream_id, error = %e, "handler hit an outage: not counted as a delivery");
                // Give the delivery back: the next one gets this number again.
                let back = d.delivery - 1;
                match stream::take_for_delivery(conn, ctx.config, ctx.key, &d.raw.stream_id, back)
                    .await
                {
                    Ok(_) => Fate::Outage(e.to_string()),
                    Err(redis) => Fate::Lost(Some(redis)),
                }
            }
            Err(e) => after_failure(ctx, conn, d, &e.to_string()).await,
        }
    }
}

impl<H, Fut, E> Process for Each<H, E>
where
    H: Fn(Entry) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    async fn process(&self, ctx: &Ctx<'_>, lanes: Vec<Vec<Delivery>>) -> Vec<Outcome> {
        futures::stream::iter(lanes)
            .map(|lane| self.lane(ctx, lane))
            .buffer_unordered(ctx.config.concurrency)
            .collect::<Vec<Vec<Outcome>>>()
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

/// One handler call per batch, all or nothing.
struct Batch<H>(H);

impl<H, Fut, E> Process for Batch<H>
where
    H: Fn(Vec<Entry>) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    async fn process(&self, ctx: &Ctx<'_>, lanes: Vec<Vec<Delivery>>) -> Vec<Outcome> {
        let mut conn = ctx.conn.clone();
        let mut all: Vec<Delivery> = lanes.into_iter().flatten().collect();
        all.sort_by_key(|d| stream_id_order(&d.raw.stream_id));
        let mut out = Vec::new();
        let mut batch = Vec::new();
        for d in all {
            match before_handling(ctx, &mut conn, &d).await {
                Some(fate) => out.push(Outcome {
                    stream_id: d.raw.stream_id,
                    fate,
                }),
                None => batch.push(d),
            }
        }
        if batch.is_empty() {
            return out;
        }
        let entries: Vec<Entry> = batch
            .iter()
            .filter_map(|d| d.parsed.as_ref().ok().cloned())
            .collect();
        let result = (self.0)(entries).await;
        for d in batch {
            let fate = match &result {
                Ok(()) => Fate::Done,
                Err(e) => after_failure(ctx, &mut conn, &d, &e.to_string()).await,
            };
            out.push(Outcome {
                stream_id: d.raw.stream_id,
                fate,
            });
        }
        out
    }
}

/// A handler's panic, as the error of its failed delivery: a panicking handler fails its
/// entry (retried, then dead-lettered) instead of taking the consumer down.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text payload".to_string());
    format!("handler panicked: {text}")
}

/// A stream id `ms-seq` as a sortable pair (ids that do not parse sort first).
fn stream_id_order(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_sort_numerically() {
        let mut ids = vec!["10-0", "9-1", "9-0", "100-0"];
        ids.sort_by_key(|id| stream_id_order(id));
        assert_eq!(ids, vec!["9-0", "9-1", "10-0", "100-0"]);
    }

    #[test]
    fn claims_run_twice_per_claim_idle_within_bounds() {
        let c = ConsumerConfig::new("redis://x", "t", "g");
        assert_eq!(
            claim_every(&c.clone().claim_idle(Duration::from_secs(30))),
            Duration::from_secs(15)
        );
        assert_eq!(
            claim_every(&c.clone().claim_idle(Duration::from_millis(100))),
            Duration::from_millis(100)
        );
        assert_eq!(
            claim_every(&c.claim_idle(Duration::from_secs(600))),
            Duration::from_secs(30)
        );
    }
}
