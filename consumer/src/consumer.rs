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
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::FusedFuture;
use futures::FutureExt;
use std::pin::Pin;

use outbox_core::backoff::{self, ErrorLog};
use outbox_core::redis_conn::{self, Timeouts};
use outbox_core::{groups, ConnectError, RedisConn};

use crate::config::{ConfigError, ConsumerConfig};
use crate::fleet::{self, Fleet};
use crate::handling::{self, Ctx, Delivery, Fate, Process, Processing};
use crate::source::{self, Fenced, Group, Pending, Source};
use crate::stream::{self, EntryRef};

/// Why a consumer could not be built. Nothing after that is fatal: outages are retried.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// A setting is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The Redis client could not be set up (bad URL, unreadable or mismatched TLS files).
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

/// A member of a consumer group on the streams of one or more topics
/// ([`ConsumerConfig::topics`]). Build it with [`Consumer::new`], then [`Consumer::run`] it
/// with a handler and a shutdown future.
pub struct Consumer {
    config: ConsumerConfig,
    conn: RedisConn,
    /// The heartbeat's own connection: the loop's blocking reads would hold up a renewal.
    fleet_conn: RedisConn,
    fleet: Fleet,
    /// The topics' streams, in the order of `config.topics`.
    keys: Vec<Arc<str>>,
    group: Arc<str>,
}

impl Consumer {
    /// Checks the settings and the TLS files, and prepares the connection (lazy: nothing
    /// connects before `run`).
    pub fn new(config: ConsumerConfig) -> Result<Consumer, ConsumerError> {
        config.validate()?;
        let tls = config.load_tls().map_err(ConnectError::from)?;
        let timeouts = Timeouts {
            connect: Duration::from_secs(2),
            // A blocking read holds its reply for up to `block`.
            response: config.block + Duration::from_secs(10),
        };
        let topology = config.topology();
        let conn = redis_conn::connect(&config.redis_url, &topology, timeouts, tls.as_ref())
            .map_err(ConnectError::from)?;
        let fleet_conn = redis_conn::connect(
            &config.redis_url,
            &topology,
            Timeouts {
                connect: Duration::from_secs(2),
                // A renewal answered later than this could not be trusted for long anyway.
                response: (config.claim_idle / 3).max(Duration::from_millis(500)),
            },
            tls.as_ref(),
        )
        .map_err(ConnectError::from)?;
        let keys = config.stream_keys().into_iter().map(Arc::from).collect();
        let group = Arc::from(config.group.as_str());
        let fleet = Fleet::new(
            &config.consumer,
            &config.group,
            &config.stream_prefix,
            config.claim_idle,
        );
        Ok(Consumer {
            config,
            conn,
            fleet_conn,
            fleet,
            keys,
            group,
        })
    }

    /// The settings in use.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// Runs until `shutdown` completes, handing entries to `handler`: a [`Handler`] (one
    /// entry at a time; one key's entries one after another in stream order, different keys
    /// up to `concurrency` at once) or [`Batches`](crate::Batches) of a
    /// [`BatchHandler`](crate::BatchHandler) (whole batches, all or nothing). An entry is
    /// acknowledged after its handler succeeded; a failure is retried, dead-lettered or
    /// waited out as its [`HandlerError`](crate::HandlerError)'s kind says. On shutdown,
    /// handlers in flight finish and their entries are acknowledged before this returns.
    ///
    /// [`Handler`]: crate::Handler
    pub async fn run<P: Processing>(
        &self,
        handler: P,
        shutdown: impl Future<Output = ()>,
    ) -> RunStats {
        // The handler's own work (the inbox's retention) runs beside, and stops with the run.
        let beside = async {
            handler.maintain(&self.config.group).await;
            std::future::pending::<RunStats>().await
        };
        // Partition leases are renewed beside the loop, for as long as it runs; it is stopped
        // before the consumer leaves the fleet: a renewal after the leave would announce the
        // consumer again, and the others would wait a lease for partitions nobody reads.
        let heartbeat = fleet::heartbeat(&self.fleet, self.fleet_conn.clone());
        let state = tokio::select! {
            biased;
            state = self.consume_until(&handler, shutdown) => state,
            stats = beside => return stats,
            never = heartbeat => match never {},
        };
        self.finish(state).await
    }

    /// Consumes until `shutdown` completes; the entries in hand are handled, not yet all
    /// acknowledged ([`Self::finish`]).
    async fn consume_until<P: Process>(
        &self,
        process: &P,
        shutdown: impl Future<Output = ()>,
    ) -> LoopState {
        let mut shutdown = pin!(shutdown.fuse());
        let mut state = LoopState::new();
        let streams = self.keys.join(",");
        tracing::info!(
            %streams, group = %self.config.group, consumer = %self.config.consumer,
            "consumer started"
        );
        // A plain group until a topic turns out partitioned (at the start, or later when the
        // relay first publishes it at a count or it is repartitioned), then the fleet.
        let mut fenced = false;
        loop {
            let end = if fenced {
                let source = Fenced(&self.fleet);
                self.consume(&source, process, shutdown.as_mut(), &mut state)
                    .await
            } else {
                self.consume(&Group, process, shutdown.as_mut(), &mut state)
                    .await
            };
            match end {
                End::Shutdown => break,
                End::Switch => fenced = !fenced,
            }
        }
        state
    }

    /// After the loop and its heartbeat stopped: acknowledges what was handled and leaves the
    /// fleet.
    async fn finish(&self, mut state: LoopState) -> RunStats {
        let streams = self.keys.join(",");
        // What was handled since the last read, or could not be acknowledged, is now.
        if !state.unacked.is_empty() {
            let mut conn = self.conn.clone();
            match source::ack(&mut conn, &self.config, &state.unacked).await {
                Ok(()) => state.stats.handled += state.unacked.len() as u64,
                Err(e) => {
                    tracing::warn!(error = %e, count = state.unacked.len(), "acknowledgements lost at shutdown: those entries will be redelivered")
                }
            }
        }
        // Leave the group's fleet so the others take the partitions now, not after a lease.
        if self.fleet.is_active() {
            let mut conn = self.fleet_conn.clone();
            if let Err(e) = fleet::leave(&self.fleet, &mut conn).await {
                tracing::warn!(error = %e, "could not give the partitions back at shutdown: the others take them when the leases run out");
            }
        }
        tracing::info!(
            %streams, group = %self.config.group, consumer = %self.config.consumer,
            handled = state.stats.handled, "consumer stopped"
        );
        state.stats
    }

    /// The loop on one source, until shutdown or until the topics need the other source.
    async fn consume<S: Source, P: Process>(
        &self,
        source: &S,
        process: &P,
        mut shutdown: Pin<&mut impl FusedFuture<Output = ()>>,
        state: &mut LoopState,
    ) -> End {
        let ctx = Ctx {
            config: &self.config,
            conn: self.conn.clone(),
            source,
        };
        loop {
            if shutdown.is_terminated() || shutdown.as_mut().now_or_never().is_some() {
                return End::Shutdown;
            }
            let mut conn = self.conn.clone();
            let wait = match self.turn(&ctx, &mut conn, state, process).await {
                Ok(Turn::Again) => {
                    state.redis_ok();
                    continue;
                }
                Ok(Turn::Switch) => {
                    state.redis_ok();
                    return End::Switch;
                }
                Ok(Turn::Wait(until)) => {
                    state.redis_ok();
                    until.saturating_duration_since(Instant::now())
                }
                Err(e) => {
                    if groups::is_nogroup(&e) {
                        state.group_ready = false;
                    }
                    state.redis_failed(&self.config, &e)
                }
            };
            if !wait.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.as_mut() => return End::Shutdown,
                }
            }
        }
    }

    /// One step of the loop: claim from dead consumers when due, then handle own pending
    /// entries, or else read new ones. Entries handled in the last step are acknowledged
    /// in the same round trip as the next read, or before anything that lists pending
    /// entries (which must not find them). What it does when is decided by pure functions
    /// ([`Layout::of`], [`drain_due`], [`Chores::due`], [`to_check`], [`ready_lanes`]); this
    /// runs the commands between them.
    async fn turn<S: Source, P: Process>(
        &self,
        ctx: &Ctx<'_, S>,
        conn: &mut RedisConn,
        state: &mut LoopState,
        process: &P,
    ) -> redis::RedisResult<Turn> {
        if self.fleet.take_stale() {
            state.group_ready = false;
        }
        if !state.group_ready {
            self.set_up(conn, state).await?;
        }
        if self.fleet.is_active() != S::FENCED {
            return Ok(Turn::Switch);
        }
        let streams = self.upkeep(ctx, conn, state, process).await?;
        let mut pending = Vec::new();
        for key in to_check(&streams, &state.maybe_pending) {
            let mine = ctx.source.pending_mine(conn, &self.config, &key).await?;
            if mine.is_empty() {
                state.none_pending(&key);
            } else {
                pending.push((key, mine));
            }
        }
        if !pending.is_empty() {
            return self.pending_turn(ctx, conn, state, process, pending).await;
        }
        self.read_turn(ctx, conn, state, process, &streams).await
    }

    /// Resolves the topics' streams (each topic's, or each of its partitions') and makes the
    /// group on each.
    async fn set_up(&self, conn: &mut RedisConn, state: &mut LoopState) -> redis::RedisResult<()> {
        let topics = stream::resolve_partitions(conn, &self.config).await?;
        let Layout { streams, topic_of } = Layout::of(&topics);
        state.streams = streams;
        state.topic_of = topic_of;
        for key in &state.streams {
            stream::ensure_group(conn, key, &self.config.group).await?;
        }
        self.fleet.configure(&topics);
        // A restart under the same name, or a new set of streams: look at each first.
        state.maybe_pending = state.streams.iter().cloned().collect();
        state.group_ready = true;
        Ok(())
    }

    /// What a turn does between batches, with nothing in hand: streams given up (after
    /// acknowledging what was handled) and taken over, released parked keys drained, entries
    /// abandoned by dead consumers claimed. Returns the streams readable now.
    async fn upkeep<S: Source, P: Process>(
        &self,
        ctx: &Ctx<'_, S>,
        conn: &mut RedisConn,
        state: &mut LoopState,
        process: &P,
    ) -> redis::RedisResult<Vec<Arc<str>>> {
        let (config, source) = (&self.config, ctx.source);
        if source.releasing() {
            state.flush(conn, config, source).await?;
        }
        let changes = source.rebalance(conn, config).await?;
        for stream in &changes.released {
            state.none_pending(stream);
        }
        state.maybe_pending.extend(changes.taken);
        let now = Instant::now();
        if drain_due(config.park_keys, state.next_drain, now) {
            // Keys an operator released: their held entries first, in order.
            crate::park::drain(ctx, conn, &self.group, process).await?;
            state.next_drain = now + DRAIN_EVERY;
        }
        let streams = source.readable(&state.streams);
        let chores = Chores::due(&streams, &state.maybe_pending, state.next_claim, now);
        if chores.flush {
            state.flush(conn, config, source).await?;
        }
        if chores.claim {
            for key in &streams {
                let claimed = source.claim_abandoned(conn, config, key).await?;
                if claimed > 0 {
                    tracing::info!(claimed, stream = %key, "claimed entries idle longer than claim_idle from other consumers");
                    state.maybe_pending.insert(key.clone());
                }
            }
            state.next_claim = now + claim_every(config);
        }
        Ok(streams)
    }

    /// Reads new entries from `streams`, acknowledging what was handled in the same round
    /// trip, and handles them.
    async fn read_turn<S: Source, P: Process>(
        &self,
        ctx: &Ctx<'_, S>,
        conn: &mut RedisConn,
        state: &mut LoopState,
        process: &P,
        streams: &[Arc<str>],
    ) -> redis::RedisResult<Turn> {
        let read = ctx
            .source
            .read_new(conn, &self.config, streams, &state.unacked)
            .await?;
        state.stats.handled += state.unacked.len() as u64;
        state.unacked.clear();
        for key in read.held {
            tracing::info!(stream = %key, "entries of this consumer still pending there: handling them before reading newer ones");
            state.maybe_pending.insert(key);
        }
        state.fresh_unattempted.extend(read.early);
        if read.entries.is_empty() {
            return Ok(Turn::Again);
        }
        let deliveries: Vec<Delivery> = read
            .entries
            .into_iter()
            .map(|raw| {
                let topic = state.topic_of.get(&raw.stream).cloned();
                Delivery::new(raw, topic.as_deref(), &self.group, 1, false)
            })
            .collect();
        self.handle(ctx, state, process, handling::lanes(deliveries))
            .await?;
        Ok(Turn::Again)
    }

    /// Handles this consumer's pending entries (per stream, oldest first): the lanes whose
    /// entries are not waiting out a retry delay; or says how long to wait when all of them
    /// are.
    async fn pending_turn<S: Source, P: Process>(
        &self,
        ctx: &Ctx<'_, S>,
        conn: &mut RedisConn,
        state: &mut LoopState,
        process: &P,
        pending: Vec<(Arc<str>, Vec<Pending>)>,
    ) -> redis::RedisResult<Turn> {
        let mut gone = Vec::new();
        let mut deliveries = Vec::new();
        for (key, mine) in pending {
            let ids: Vec<String> = mine.iter().map(|(id, _)| id.clone()).collect();
            let fetched = ctx.source.fetch(conn, &key, &ids).await?;
            for ((id, count), raw) in mine.into_iter().zip(fetched) {
                let Some(raw) = raw else {
                    gone.push(EntryRef {
                        stream: key.clone(),
                        id,
                    });
                    continue;
                };
                // Read with `>` and held back behind its key, never handled: not a new delivery.
                let fresh = count == 1 && state.fresh_unattempted.contains(&raw.at());
                let delivery = if fresh { 1 } else { count + 1 };
                let topic = state.topic_of.get(&raw.stream).cloned();
                deliveries.push(Delivery::new(
                    raw,
                    topic.as_deref(),
                    &self.group,
                    delivery,
                    !fresh,
                ));
            }
        }
        if !gone.is_empty() {
            tracing::warn!(count = gone.len(), "pending entries no longer in their stream (trimmed or deleted): acknowledged without handling");
            ctx.source.ack(conn, &self.config, &gone).await?;
        }
        let lanes = handling::lanes(deliveries);
        match ready_lanes(lanes, &state.retry_at, Instant::now(), state.next_claim) {
            Ok(ready) => {
                self.handle(ctx, state, process, ready).await?;
                Ok(Turn::Again)
            }
            Err(wake) => Ok(Turn::Wait(wake)),
        }
    }

    /// Runs the lanes, then records the successes for acknowledgement (with the next read)
    /// and the rest for a retry.
    async fn handle<S: Source, P: Process>(
        &self,
        ctx: &Ctx<'_, S>,
        state: &mut LoopState,
        process: &P,
        lanes: Vec<Vec<Delivery>>,
    ) -> redis::RedisResult<()> {
        let mut lanes = lanes;
        if self.config.park_keys {
            let mut conn = self.conn.clone();
            let mut all: Vec<&mut Delivery> = lanes.iter_mut().flatten().collect();
            crate::park::mark_parked(&mut conn, &self.config, &mut all).await?;
        }
        let in_hand: Vec<EntryRef> = lanes.iter().flatten().map(|d| d.raw.at()).collect();
        let outcomes = tokio::select! {
            biased;
            outcomes = process.process(ctx, lanes) => outcomes,
            never = keep_claimed(&self.config, ctx.source, self.conn.clone(), in_hand) => match never {},
        };
        let mut done = Vec::new();
        let mut redis_error = None;
        let mut outage_error = None;
        for outcome in outcomes {
            if !matches!(outcome.fate, Fate::Done | Fate::DeadLettered | Fate::Parked) {
                // Still in this consumer's pending list: handled before anything newer there.
                state.maybe_pending.insert(outcome.at.stream.clone());
            }
            if !matches!(outcome.fate, Fate::HeldBack { .. }) {
                // Attempted now: its next delivery is counted from the group's counter.
                state.fresh_unattempted.remove(&outcome.at);
            }
            match outcome.fate {
                Fate::Done | Fate::Parked => done.push(outcome.at),
                Fate::DeadLettered => {
                    state.stats.dead_lettered += 1;
                    state.retry_at.remove(&outcome.at);
                }
                Fate::Failed { delivery } => {
                    state.stats.failed += 1;
                    let delay = backoff::retry_delay(
                        u32::try_from(delivery).unwrap_or(u32::MAX),
                        self.config.retry_base,
                        self.config.retry_max,
                        backoff::unit(),
                    );
                    state.retry_at.insert(outcome.at, Instant::now() + delay);
                }
                Fate::Outage(error) => {
                    outage_error = Some(error);
                    let delay =
                        backoff::outage_pause(1, backoff::unit()).max(Duration::from_secs(1));
                    state.retry_at.insert(outcome.at, Instant::now() + delay);
                }
                Fate::HeldBack { fresh } => {
                    if fresh {
                        state.fresh_unattempted.insert(outcome.at);
                    }
                }
                Fate::Lost(e) => {
                    if let Some(e) = e {
                        redis_error = Some(e);
                    }
                }
            }
        }
        for id in &done {
            state.retry_at.remove(id);
        }
        state.unacked.extend(done);
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

/// How often a consumer that parks keys looks for keys an operator released.
const DRAIN_EVERY: Duration = Duration::from_secs(1);

/// While a batch's handlers run, restarts the idle time of its entries every third of
/// `claim_idle`, so that a handler slower than `claim_idle` does not get its entries claimed
/// by another consumer (which would handle them a second time, and out of key order).
async fn keep_claimed<S: Source>(
    config: &ConsumerConfig,
    source: &S,
    mut conn: RedisConn,
    refs: Vec<EntryRef>,
) -> Infallible {
    let every = config.claim_idle / 3;
    let mut failures = ErrorLog::new(Duration::from_secs(30));
    loop {
        tokio::time::sleep(every).await;
        // Entries idle less than half a period were just claimed by someone else: leave them.
        if let Err(e) = source
            .keep_in_hand(&mut conn, config, &refs, every / 2)
            .await
        {
            if let Some(suppressed) = failures.admit(Instant::now()) {
                tracing::warn!(error = %e, suppressed, "could not refresh the entries in hand; another consumer may claim them");
            }
        }
    }
}

/// The streams a turn reads and the topic of each: each topic's stream, or each of its
/// partitions', from the topics as resolved with the group.
#[derive(Debug)]
struct Layout {
    streams: Vec<Arc<str>>,
    topic_of: HashMap<Arc<str>, Arc<str>>,
}

impl Layout {
    fn of(topics: &[(String, Vec<Arc<str>>)]) -> Layout {
        Layout {
            streams: topics.iter().flat_map(|(_, s)| s.iter().cloned()).collect(),
            topic_of: topics
                .iter()
                .flat_map(|(topic, streams)| {
                    let topic: Arc<str> = Arc::from(topic.as_str());
                    streams.iter().map(move |s| (s.clone(), topic.clone()))
                })
                .collect(),
        }
    }
}

/// Whether to look for parked keys an operator released: with `park_keys`, once `next` has
/// come.
fn drain_due(park_keys: bool, next: Instant, now: Instant) -> bool {
    park_keys && now >= next
}

/// What a turn does before it looks for its own pending entries.
#[derive(Debug, PartialEq, Eq)]
struct Chores {
    /// Claim the entries other consumers left idle too long, on each readable stream.
    claim: bool,
    /// Acknowledge what was handled first: pending entries are about to be listed (to look
    /// at them, or after a claim), and must not include those.
    flush: bool,
}

impl Chores {
    /// The chores due at `now` on the readable `streams`.
    fn due(
        streams: &[Arc<str>],
        maybe_pending: &HashSet<Arc<str>>,
        next_claim: Instant,
        now: Instant,
    ) -> Chores {
        let claim = now >= next_claim;
        let check = streams.iter().any(|s| maybe_pending.contains(s));
        Chores {
            claim,
            flush: claim || check,
        }
    }
}

/// The readable streams to look for own pending entries in. Only those readable now: a
/// partition whose lease cannot be trusted at the moment keeps its mark until it is readable
/// and found empty, so its older entries still come before anything newer read from it.
fn to_check(streams: &[Arc<str>], maybe_pending: &HashSet<Arc<str>>) -> Vec<Arc<str>> {
    streams
        .iter()
        .filter(|s| maybe_pending.contains(*s))
        .cloned()
        .collect()
}

/// The lanes of own pending entries to handle now: those with no entry waiting out a retry
/// delay. When every lane waits, `Err` with the instant to wake at: the earliest retry, or
/// the next claim round if that comes first.
fn ready_lanes(
    lanes: Vec<Vec<Delivery>>,
    retry_at: &HashMap<EntryRef, Instant>,
    now: Instant,
    next_claim: Instant,
) -> Result<Vec<Vec<Delivery>>, Instant> {
    let (ready, waiting): (Vec<Vec<Delivery>>, Vec<Vec<Delivery>>) =
        lanes.into_iter().partition(|lane| {
            lane.iter()
                .all(|d| retry_at.get(&d.raw.at()).is_none_or(|t| *t <= now))
        });
    if !ready.is_empty() {
        return Ok(ready);
    }
    let earliest = waiting
        .iter()
        .flatten()
        .filter_map(|d| retry_at.get(&d.raw.at()))
        .min()
        .copied()
        .unwrap_or(now);
    Err(earliest.min(next_claim))
}

/// How often to look for entries abandoned by dead consumers.
fn claim_every(config: &ConsumerConfig) -> Duration {
    (config.claim_idle / 2).clamp(Duration::from_millis(100), Duration::from_secs(30))
}

enum Turn {
    /// Go on at once.
    Again,
    /// The topics' partitioning changed: go on with the other source.
    Switch,
    /// Nothing to do before this instant (a retry delay, or the next claim round).
    Wait(Instant),
}

/// Why the loop on one source ended.
enum End {
    Shutdown,
    Switch,
}

/// What the loop remembers between turns.
struct LoopState {
    group_ready: bool,
    /// The streams read: each topic's, or each of its partitions' (resolved with the group).
    streams: Vec<Arc<str>>,
    /// The topic of each stream read: a CloudEvents entry names none of its own.
    topic_of: HashMap<Arc<str>, Arc<str>>,
    /// When to look for released parked keys next (with `park_keys`).
    next_drain: Instant,
    /// Streams where this consumer may have pending entries: looked at (and those handled)
    /// before new entries are read.
    maybe_pending: HashSet<Arc<str>>,
    /// Handled, not yet acknowledged (waiting for the next read, or the XACK failed).
    unacked: Vec<EntryRef>,
    /// When each failed entry may be delivered again.
    retry_at: HashMap<EntryRef, Instant>,
    /// Read with `>`, then held back behind an earlier failure of their key.
    fresh_unattempted: HashSet<EntryRef>,
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
            streams: Vec::new(),
            topic_of: HashMap::new(),
            next_drain: Instant::now(),
            maybe_pending: HashSet::new(),
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

    /// `stream` holds none of this consumer's pending entries (looked at, or given up): its
    /// retry bookkeeping goes too.
    fn none_pending(&mut self, stream: &str) {
        self.maybe_pending.remove(stream);
        self.retry_at.retain(|at, _| at.stream.as_ref() != stream);
        self.fresh_unattempted
            .retain(|at| at.stream.as_ref() != stream);
    }

    /// Acknowledges what was handled since the last read.
    async fn flush<S: Source>(
        &mut self,
        conn: &mut RedisConn,
        config: &ConsumerConfig,
        source: &S,
    ) -> redis::RedisResult<()> {
        if self.unacked.is_empty() {
            return Ok(());
        }
        source.ack(conn, config, &self.unacked).await?;
        self.stats.handled += self.unacked.len() as u64;
        self.unacked.clear();
        Ok(())
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
        self.maybe_pending.extend(self.streams.iter().cloned());
        if let Some(suppressed) = self.errors.admit(Instant::now()) {
            tracing::warn!(
                error = %e, suppressed, group = %config.group, consumer = %config.consumer,
                "redis command failed; retrying with backoff"
            );
        }
        backoff::outage_pause(self.outage_failures, backoff::unit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::RawEntry;

    fn s(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    /// A redelivery (the second) of entry `id` of `stream`, of partition key `key`.
    fn delivery(stream: &str, id: &str, key: &str) -> Delivery {
        let raw = RawEntry {
            stream: s(stream),
            stream_id: id.into(),
            fields: vec![("key".into(), redis::Value::BulkString(key.into()))],
        };
        Delivery::new(raw, Some("t"), &s("g"), 2, true)
    }

    fn at(stream: &str, id: &str) -> EntryRef {
        EntryRef {
            stream: s(stream),
            id: id.into(),
        }
    }

    #[test]
    fn the_layout_reads_every_partition_and_knows_each_streams_topic() {
        let topics = vec![
            (
                "orders".to_string(),
                vec![s("outbox:orders:0"), s("outbox:orders:1")],
            ),
            ("audit".to_string(), vec![s("outbox:audit")]),
        ];
        let layout = Layout::of(&topics);
        assert_eq!(
            layout.streams,
            [
                s("outbox:orders:0"),
                s("outbox:orders:1"),
                s("outbox:audit")
            ]
        );
        let topic = |stream: &str| layout.topic_of.get(stream).map(|t| t.to_string());
        assert_eq!(topic("outbox:orders:1").as_deref(), Some("orders"));
        assert_eq!(topic("outbox:audit").as_deref(), Some("audit"));
    }

    #[test]
    fn handled_entries_are_acknowledged_before_pending_entries_are_listed() {
        let now = Instant::now();
        let later = now + Duration::from_secs(5);
        let streams = [s("a"), s("b")];
        let none = HashSet::new();
        // Nothing may be pending, no claim due: the acknowledgements ride with the next read.
        assert_eq!(
            Chores::due(&streams, &none, later, now),
            Chores {
                claim: false,
                flush: false
            }
        );
        // A readable stream may hold own pending entries: acknowledge, then list them.
        let b = HashSet::from([s("b")]);
        assert_eq!(
            Chores::due(&streams, &b, later, now),
            Chores {
                claim: false,
                flush: true
            }
        );
        // A claim round is due: acknowledge, then claim.
        assert_eq!(
            Chores::due(&streams, &none, now, now),
            Chores {
                claim: true,
                flush: true
            }
        );
        // A stream not readable now (its lease not trusted) is not looked at, so no flush.
        let c = HashSet::from([s("c")]);
        assert_eq!(
            Chores::due(&streams, &c, later, now),
            Chores {
                claim: false,
                flush: false
            }
        );
    }

    #[test]
    fn only_readable_streams_are_looked_at_and_the_others_keep_their_mark() {
        let maybe = HashSet::from([s("a"), s("c")]);
        assert_eq!(to_check(&[s("a"), s("b")], &maybe), [s("a")]);
    }

    #[test]
    fn released_keys_are_drained_once_due_and_only_when_keys_park() {
        let now = Instant::now();
        assert!(drain_due(true, now, now));
        assert!(!drain_due(true, now + DRAIN_EVERY, now));
        assert!(!drain_due(false, now, now));
    }

    #[test]
    fn a_lane_with_an_entry_waiting_out_its_retry_waits_whole_while_the_others_go() {
        let now = Instant::now();
        let lanes = handling::lanes(vec![
            delivery("a", "1-0", "k1"),
            delivery("a", "2-0", "k2"),
            delivery("a", "3-0", "k1"),
        ]);
        // k1's first entry failed and waits 3 s; k2's failure is due again.
        let retry_at = HashMap::from([
            (at("a", "1-0"), now + Duration::from_secs(3)),
            (at("a", "2-0"), now),
        ]);
        let far = now + Duration::from_secs(60);
        let ready = ready_lanes(lanes, &retry_at, now, far).expect("k2's lane is ready");
        let ids: Vec<Vec<&str>> = ready
            .iter()
            .map(|lane| lane.iter().map(|d| d.raw.stream_id.as_str()).collect())
            .collect();
        assert_eq!(ids, [vec!["2-0"]]);
    }

    #[test]
    fn when_every_lane_waits_the_turn_wakes_at_the_earliest_retry_or_the_next_claim() {
        let now = Instant::now();
        let lanes =
            || handling::lanes(vec![delivery("a", "1-0", "k1"), delivery("b", "1-0", "k2")]);
        let retry_at = HashMap::from([
            (at("a", "1-0"), now + Duration::from_secs(3)),
            (at("b", "1-0"), now + Duration::from_secs(1)),
        ]);
        let far = now + Duration::from_secs(60);
        assert_eq!(
            ready_lanes(lanes(), &retry_at, now, far).err(),
            Some(now + Duration::from_secs(1))
        );
        let soon = now + Duration::from_millis(500);
        assert_eq!(ready_lanes(lanes(), &retry_at, now, soon).err(), Some(soon));
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
