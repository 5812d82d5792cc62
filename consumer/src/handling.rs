//! Handling one batch: split into lanes by partition key (different keys concurrently, one
//! key's entries one after another, in stream order), the checks before a handler runs
//! (malformed, over the delivery limit, still this consumer's), the handler kinds (per entry
//! in lanes, per batch), and what a failure leads to (a retry, an uncounted retry after an
//! outage, or the dead stream). The loop in [`crate::consumer`] decides what to read; this
//! decides what becomes of each entry it read. The handler runs inside the library's own
//! layers ([`crate::layer`]: panic caught, processing span); the steps here are those that
//! act on the stream, through the entry's source ([`crate::source`]).

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use uuid::Uuid;

use outbox_core::{Entry, EntryError, Lease, RedisConn};

use crate::config::ConsumerConfig;
use crate::handler::{BatchHandler, Batches, ErrorKind, Handler, HandlerError};
use crate::layer::{Borrowed, CatchPanic, CatchPanicLayer, Layer, Traced, TracedLayer};
use crate::source::{Check, Source};
use crate::stream::{self, EntryRef, RawEntry};

/// What the lanes share: the settings, a connection, and the source the entries came from.
pub(crate) struct Ctx<'a, S> {
    pub(crate) config: &'a ConsumerConfig,
    pub(crate) conn: RedisConn,
    pub(crate) source: &'a S,
}

/// One delivery of one entry.
pub(crate) struct Delivery {
    pub(crate) raw: RawEntry,
    pub(crate) parsed: Result<Entry, EntryError>,
    /// This delivery's number (1 the first time).
    pub(crate) delivery: u64,
    /// A pending entry: set the group's delivery counter (and check it is still ours)
    /// before handling it.
    pub(crate) take: bool,
    /// The lane: the stream and the partition key (`None`: a lane of its own). Keys are per
    /// topic, so the same key in two topics makes two lanes.
    lane: Option<String>,
    /// Its key is parked in this group ([`crate::park`]): hold it, do not handle it.
    pub(crate) parked: bool,
    /// It comes from a parked key's held list, being drained (no pending list holds it).
    pub(crate) from_held: bool,
}

impl Delivery {
    /// `topic`: the topic of the entry's stream, which a CloudEvents entry does not name.
    pub(crate) fn new(
        raw: RawEntry,
        topic: Option<&str>,
        group: &Arc<str>,
        delivery: u64,
        take: bool,
    ) -> Delivery {
        let parsed = match topic {
            Some(topic) => Entry::from_pairs_of(topic, raw.stream_id.clone(), &raw.fields),
            None => Entry::from_pairs(raw.stream_id.clone(), &raw.fields),
        };
        let parsed = parsed.map(|mut e| {
            e.deliveries = delivery;
            e.group = group.clone();
            e
        });
        let key = match &parsed {
            Ok(e) => e.key.clone(),
            Err(_) => raw.key_field(),
        };
        // Topics have no whitespace, so the newline cannot occur in the stream's part.
        let lane = key.map(|key| format!("{}\n{key}", raw.stream));
        Delivery {
            raw,
            parsed,
            delivery,
            take,
            lane,
            parked: false,
            from_held: false,
        }
    }

    /// Its topic and partition key, when it is well-formed and keyed.
    pub(crate) fn topic_key(&self) -> Option<(&str, &str)> {
        let entry = self.parsed.as_ref().ok()?;
        Some((entry.topic.as_str(), entry.key.as_deref()?))
    }

    fn event_id(&self) -> Option<Uuid> {
        self.parsed.as_ref().ok().map(|e| e.id)
    }
}

impl Keyed for Delivery {
    fn lane_key(&self) -> Option<&str> {
        self.lane.as_deref()
    }
}

/// What a lane needs to know of an item: its partition key, if any.
pub(crate) trait Keyed {
    /// The partition key; `None` makes the item a lane of its own.
    fn lane_key(&self) -> Option<&str>;
}

/// Splits `items` (in stream order) into lanes: one per partition key holding that key's
/// items in their original order, and one per item without a key. Lanes come in the order of
/// their first item, so a batch with concurrency 1 runs in stream order.
pub(crate) fn lanes<T: Keyed>(items: Vec<T>) -> Vec<Vec<T>> {
    let mut lanes: Vec<Vec<T>> = Vec::new();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for item in items {
        match item.lane_key() {
            None => lanes.push(vec![item]),
            Some(key) => match by_key.get(key) {
                Some(&lane) => lanes[lane].push(item),
                None => {
                    by_key.insert(key.to_string(), lanes.len());
                    lanes.push(vec![item]);
                }
            },
        }
    }
    lanes
}

pub(crate) struct Outcome {
    pub(crate) at: EntryRef,
    pub(crate) fate: Fate,
}

pub(crate) enum Fate {
    /// Handled: acknowledge.
    Done,
    /// Moved to the dead stream and acknowledged.
    DeadLettered,
    /// Its key is parked: appended to the key's held list; acknowledge it.
    Parked,
    /// The handler failed this delivery; retry later.
    Failed { delivery: u64 },
    /// The handler met an outage (not the entry's fault): retry later, uncounted.
    Outage(String),
    /// Not handled: an earlier entry of its key did not succeed. `fresh`: read with `>`.
    HeldBack { fresh: bool },
    /// No longer this consumer's, or Redis failed before it could be handled.
    Lost(Option<redis::RedisError>),
}

/// The part that differs between handler kinds: running a batch's lanes, and the handler's
/// own work beside them.
pub(crate) trait Process {
    async fn process<S: Source>(&self, ctx: &Ctx<'_, S>, lanes: Vec<Vec<Delivery>>)
        -> Vec<Outcome>;
    async fn maintain(&self, group: &str);
}

/// What [`crate::Consumer::run`] takes: a [`Handler`], or [`Batches`] of a [`BatchHandler`].
/// Implemented for those only. It sits beside [`Process`], its sealed supertrait, so the
/// handler traits (`crate::handler`) import nothing of the handling.
#[allow(private_bounds)]
pub trait Processing: Process {}

impl<H: Handler> Processing for H {}

impl<B: BatchHandler> Processing for Batches<B> {}

/// Checks that need no handler: an entry of a partition this consumer no longer holds is left
/// alone; a malformed entry, or one already delivered more than `max_deliveries` times, goes
/// to the dead stream; a pending entry is taken for this delivery. `Ok`: hand it to the
/// handler, under this lease (for a divided partition).
async fn before_handling<S: Source>(
    ctx: &Ctx<'_, S>,
    conn: &mut RedisConn,
    d: &Delivery,
) -> Result<Option<Lease>, Fate> {
    let lease = match ctx.source.check(&d.raw.stream) {
        Check::Anyone => None,
        Check::Held(lease) => Some(lease),
        Check::NotMine => return Err(Fate::Lost(None)),
    };
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
        return Err(dead_letter(ctx, conn, d, &error, deliveries).await);
    }
    if d.take {
        match take(ctx, conn, d, d.delivery).await {
            Ok(true) => {}
            Ok(false) => return Err(Fate::Lost(None)),
            Err(e) => return Err(Fate::Lost(Some(e))),
        }
    }
    Ok(lease)
}

/// Takes `d`'s entry for delivery number `deliveries` (lease-checked on a divided partition):
/// false when it is no longer this consumer's.
async fn take<S: Source>(
    ctx: &Ctx<'_, S>,
    conn: &mut RedisConn,
    d: &Delivery,
    deliveries: u64,
) -> redis::RedisResult<bool> {
    let (stream, id) = (&d.raw.stream, &d.raw.stream_id);
    ctx.source
        .take(conn, ctx.config, stream, id, deliveries)
        .await
}

/// The handler failed delivery `d`: retry, or dead-letter at `max_deliveries`.
async fn after_failure<S: Source>(
    ctx: &Ctx<'_, S>,
    conn: &mut RedisConn,
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

async fn dead_letter<S: Source>(
    ctx: &Ctx<'_, S>,
    conn: &mut RedisConn,
    d: &Delivery,
    error: &str,
    deliveries: u64,
) -> Fate {
    let parks = ctx.config.park_keys && d.topic_key().is_some();
    if d.from_held {
        // Drained from a held list: no pending list holds it; its key is parked again.
        return match stream::dead_letter_held(conn, ctx.config, &d.raw, error, deliveries).await {
            Ok(dead_entry) => {
                match crate::park::park_dead(conn, ctx.config, d, &dead_entry).await {
                    Ok(()) => Fate::DeadLettered,
                    Err(e) => Fate::Lost(Some(e)),
                }
            }
            Err(e) => Fate::Lost(Some(e)),
        };
    }
    // Parked before it leaves the pending list: a crash in between leaves it pending and
    // parked, never gone with its key flowing.
    if parks {
        if let Err(e) = crate::park::park_dead(conn, ctx.config, d, "").await {
            return Fate::Lost(Some(e));
        }
    }
    match stream::dead_letter(conn, ctx.config, &d.raw, error, deliveries).await {
        Ok(None) => Fate::Lost(None),
        Ok(Some(dead_entry)) => {
            if parks {
                if let Err(e) = crate::park::park_dead(conn, ctx.config, d, &dead_entry).await {
                    tracing::warn!(error = %e, "the parked key's dead entry not recorded: a redrive will not find it");
                }
            }
            tracing::warn!(
                stream_id = %d.raw.stream_id, event_id = %d.event_id().map(|id| id.to_string()).unwrap_or_default(), deliveries, error,
                dead_stream = %ctx.config.dead_key_of_stream(&d.raw.stream), "entry dead-lettered"
            );
            Fate::DeadLettered
        }
        Err(e) => Fate::Lost(Some(e)),
    }
}

/// A handler failed for an outage (its database away), not through the entry's fault: the
/// delivery is given back, so the next one gets this number again and no attempt is spent.
async fn after_outage<S: Source>(
    ctx: &Ctx<'_, S>,
    conn: &mut RedisConn,
    d: &Delivery,
    error: &str,
) -> Fate {
    tracing::debug!(stream_id = %d.raw.stream_id, %error, "handler hit an outage: not counted as a delivery");
    match take(ctx, conn, d, d.delivery - 1).await {
        Ok(_) => Fate::Outage(error.to_string()),
        Err(redis) => Fate::Lost(Some(redis)),
    }
}

/// What a handler's result means for delivery `d`.
async fn after_handler<S: Source>(
    ctx: &Ctx<'_, S>,
    conn: &mut RedisConn,
    d: &Delivery,
    result: &Result<(), Failure>,
) -> Fate {
    match result {
        Ok(()) => Fate::Done,
        Err(Failure {
            kind: ErrorKind::Outage,
            error,
        }) => after_outage(ctx, conn, d, error).await,
        Err(Failure {
            kind: ErrorKind::Fenced,
            error,
        }) => {
            tracing::warn!(
                stream = %d.raw.stream, stream_id = %d.raw.stream_id, error,
                "a newer owner holds this partition: effect refused, partition no longer handled here"
            );
            ctx.source.fenced_out(&d.raw.stream);
            Fate::Lost(None)
        }
        Err(Failure {
            kind: ErrorKind::DeadLetter,
            error,
        }) => {
            tracing::warn!(
                stream_id = %d.raw.stream_id, event_id = %d.event_id().map(|id| id.to_string()).unwrap_or_default(),
                delivery = d.delivery, error, "handler dead-lettered the entry"
            );
            dead_letter(ctx, conn, d, error, d.delivery).await
        }
        Err(Failure { error, .. }) => after_failure(ctx, conn, d, error).await,
    }
}

/// A handler's failure as the loop keeps it: its kind and its text (a panic is a retry).
struct Failure {
    kind: ErrorKind,
    error: String,
}

impl From<HandlerError> for Failure {
    fn from(e: HandlerError) -> Failure {
        Failure {
            kind: e.kind(),
            error: e.to_string(),
        }
    }
}

/// The user's handler for one call inside the library's own layers: a panic caught (a retry),
/// the call in its processing span, named for `stream`.
fn wrapped<'a, H>(stream: &Arc<str>, handler: &'a H) -> Traced<CatchPanic<Borrowed<'a, H>>> {
    TracedLayer::new(stream.clone()).layer(CatchPanicLayer.layer(Borrowed(handler)))
}

/// One lane of a per-entry handler: its entries one after another, until one does not succeed
/// (the later ones of its key then wait: handling them now would reorder the key).
async fn lane<H: Handler, S: Source>(
    handler: &H,
    ctx: &Ctx<'_, S>,
    lane: Vec<Delivery>,
) -> Vec<Outcome> {
    let mut conn = ctx.conn.clone();
    let mut out = Vec::with_capacity(lane.len());
    let mut blocked = false;
    for d in lane {
        let fate = if blocked {
            Fate::HeldBack { fresh: !d.take }
        } else if d.parked {
            held(ctx, &mut conn, &d).await
        } else {
            one(handler, ctx, &mut conn, &d).await
        };
        if !passes(ctx.config, &fate) {
            blocked = true;
        }
        out.push(Outcome {
            at: d.raw.at(),
            fate,
        });
    }
    out
}

/// Whether the next entry of a lane may go on after one that met `fate`: after a success, a
/// hold, or a dead entry when keys do not park.
fn passes(config: &ConsumerConfig, fate: &Fate) -> bool {
    match fate {
        Fate::Done | Fate::Parked => true,
        Fate::DeadLettered => !config.park_keys,
        _ => false,
    }
}

/// Holds `d` behind its parked key, if it is still this consumer's to handle.
async fn held<S: Source>(ctx: &Ctx<'_, S>, conn: &mut RedisConn, d: &Delivery) -> Fate {
    if ctx.source.check(&d.raw.stream) == Check::NotMine {
        return Fate::Lost(None);
    }
    match crate::park::hold(conn, ctx.config, d).await {
        Ok(true) => Fate::Parked,
        // Drained and forgotten since the batch looked: it waits for the next turn, which
        // handles it.
        Ok(false) => Fate::HeldBack { fresh: !d.take },
        Err(e) => Fate::Lost(Some(e)),
    }
}

async fn one<H: Handler, S: Source>(
    handler: &H,
    ctx: &Ctx<'_, S>,
    conn: &mut RedisConn,
    d: &Delivery,
) -> Fate {
    let lease = match before_handling(ctx, conn, d).await {
        Ok(lease) => lease,
        Err(fate) => return fate,
    };
    let Ok(entry) = &d.parsed else {
        return Fate::Lost(None);
    };
    let mut entry = entry.clone();
    entry.lease = lease;
    let handler = wrapped(&d.raw.stream, handler);
    let result = handler.handle(entry).await.map_err(Failure::from);
    after_handler(ctx, conn, d, &result).await
}

/// A per-entry handler: one call per entry, lanes concurrently.
impl<H: Handler> Process for H {
    async fn process<S: Source>(
        &self,
        ctx: &Ctx<'_, S>,
        lanes: Vec<Vec<Delivery>>,
    ) -> Vec<Outcome> {
        futures::stream::iter(lanes)
            .map(|one_lane| lane(self, ctx, one_lane))
            .buffer_unordered(ctx.config.concurrency)
            .collect::<Vec<Vec<Outcome>>>()
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    async fn maintain(&self, group: &str) {
        Handler::maintain(self, group).await
    }
}

/// A batch handler: one call per batch, all or nothing.
impl<B: BatchHandler> Process for Batches<B> {
    async fn process<S: Source>(
        &self,
        ctx: &Ctx<'_, S>,
        lanes: Vec<Vec<Delivery>>,
    ) -> Vec<Outcome> {
        let mut conn = ctx.conn.clone();
        let mut all: Vec<Delivery> = lanes.into_iter().flatten().collect();
        all.sort_by_key(|d| stream_id_order(&d.raw.stream_id));
        let mut out = Vec::new();
        let mut batch = Vec::new();
        // Keys with an entry left out of the batch: their later entries wait for it.
        let mut blocked = std::collections::HashSet::new();
        for d in all {
            if d.lane.as_ref().is_some_and(|lane| blocked.contains(lane)) {
                out.push(Outcome {
                    at: d.raw.at(),
                    fate: Fate::HeldBack { fresh: !d.take },
                });
                continue;
            }
            if d.parked {
                let fate = held(ctx, &mut conn, &d).await;
                if !passes(ctx.config, &fate) {
                    blocked.extend(d.lane.clone());
                }
                out.push(Outcome {
                    at: d.raw.at(),
                    fate,
                });
                continue;
            }
            match before_handling(ctx, &mut conn, &d).await {
                Err(fate) => {
                    if !passes(ctx.config, &fate) {
                        blocked.extend(d.lane.clone());
                    }
                    out.push(Outcome {
                        at: d.raw.at(),
                        fate,
                    })
                }
                Ok(lease) => batch.push((d, lease)),
            }
        }
        if batch.is_empty() {
            return out;
        }
        let entries: Vec<Entry> = batch
            .iter()
            .filter_map(|(d, lease)| {
                let mut entry = d.parsed.as_ref().ok()?.clone();
                entry.lease = *lease;
                Some(entry)
            })
            .collect();
        let first_stream = batch
            .first()
            .map(|(d, _)| d.raw.stream.clone())
            .unwrap_or_else(|| Arc::from(""));
        let handler = wrapped(&first_stream, &self.0);
        let result = handler.handle_batch(entries).await.map_err(Failure::from);
        for (d, _) in batch {
            let fate = after_handler(ctx, &mut conn, &d, &result).await;
            out.push(Outcome {
                at: d.raw.at(),
                fate,
            });
        }
        out
    }

    async fn maintain(&self, group: &str) {
        self.0.maintain(group).await
    }
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

    #[derive(Debug, PartialEq)]
    struct Item(u32, Option<&'static str>);

    impl Keyed for Item {
        fn lane_key(&self) -> Option<&str> {
            self.1
        }
    }

    #[test]
    fn one_lane_per_key_in_stream_order_and_one_per_unkeyed_item() {
        let items = vec![
            Item(1, Some("a")),
            Item(2, None),
            Item(3, Some("b")),
            Item(4, Some("a")),
            Item(5, None),
            Item(6, Some("b")),
            Item(7, Some("a")),
        ];
        let lanes = lanes(items);
        let ids: Vec<Vec<u32>> = lanes
            .iter()
            .map(|l| l.iter().map(|i| i.0).collect())
            .collect();
        assert_eq!(ids, vec![vec![1, 4, 7], vec![2], vec![3, 6], vec![5]]);
    }

    #[test]
    fn nothing_in_nothing_out() {
        assert!(lanes(Vec::<Item>::new()).is_empty());
    }

    #[test]
    fn every_item_once_and_each_key_in_one_lane_in_order() {
        // A cheap exhaustive-ish check over patterns of 3 keys and unkeyed items.
        let keys = [Some("a"), Some("b"), Some("c"), None];
        for pattern in 0..4u32.pow(6) {
            let items: Vec<Item> = (0..6)
                .map(|i| Item(i, keys[(pattern / 4u32.pow(i) % 4) as usize]))
                .collect();
            let lanes = lanes(items);
            let total: usize = lanes.iter().map(Vec::len).sum();
            assert_eq!(total, 6);
            for lane in &lanes {
                assert!(lane.windows(2).all(|w| w[0].0 < w[1].0), "{lane:?}");
                let key = lane[0].1;
                assert!(lane.iter().all(|i| i.1 == key));
                if key.is_none() {
                    assert_eq!(lane.len(), 1);
                }
            }
            let keyed: Vec<_> = lanes.iter().filter_map(|l| l[0].1).collect();
            let mut dedup = keyed.clone();
            dedup.sort();
            dedup.dedup();
            assert_eq!(keyed.len(), dedup.len(), "a key split over two lanes");
        }
    }
}
