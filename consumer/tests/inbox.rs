//! The inbox through the library's public API, on a real Postgres (and Redis where a consumer
//! runs): an effect takes place once however often its entry is delivered, a failed effect
//! leaves no inbox row behind, a consumer whose partition has a newer owner cannot commit, and
//! the batch inbox skips what an earlier batch (or the same batch) recorded.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_consumer::inbox::{self, Inbox};
use outbox_consumer::{
    BatchHandler, Consumer, ConsumerConfig, Entry, ErrorKind, Handler, HandlerError, Lease,
};

use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_redelivered_entry_takes_effect_once() {
    let t = setup().await;
    let inbox = Inbox::new(t.pool.clone(), insert_effect);
    let first = entry(EntryOpts::default());
    let mut again = first.clone();
    again.deliveries = 2;
    again.stream_id = "2-0".into();

    inbox.handle(first.clone()).await.expect("first delivery");
    inbox.handle(again).await.expect("redelivery: acknowledged");
    assert_eq!(t.db.effects_of(first.id).await, 1);
    assert_eq!(
        t.db.scalar("SELECT count(*) FROM outbox_inbox WHERE consumer_group = 'g'")
            .await,
        1
    );
    // Another group is another reader: its inbox row is its own, and so is its effect.
    let other = Entry {
        group: "h".into(),
        ..first.clone()
    };
    inbox.handle(other).await.expect("group h");
    assert_eq!(t.db.effects_of(first.id).await, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_effect_leaves_no_inbox_row_and_the_retry_applies_it() {
    let t = setup().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let inbox = Inbox::new(t.pool.clone(), move |conn, entry: &Entry| {
        let call = counted.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            // The row goes in first, then the effect fails: both must roll back.
            insert_effect(conn, entry)
                .await
                .map_err(HandlerError::retry)?;
            match call {
                0 => Err(HandlerError::retry("the first attempt fails")),
                _ => Ok(()),
            }
        })
    });
    let e = entry(EntryOpts::default());

    let failed = inbox.handle(e.clone()).await.expect_err("first attempt");
    assert_eq!(failed.kind(), ErrorKind::Retry, "the effect's own kind");
    assert_eq!(t.db.effects_of(e.id).await, 0, "rolled back");
    assert_eq!(t.db.scalar("SELECT count(*) FROM outbox_inbox").await, 0);

    inbox.handle(e.clone()).await.expect("retry");
    inbox.handle(e.clone()).await.expect("redelivery");
    assert_eq!(t.db.effects_of(e.id).await, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the redelivery skipped it");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_letter_from_the_effect_stays_a_dead_letter() {
    let t = setup().await;
    let inbox = Inbox::new(t.pool.clone(), |_conn, _entry: &Entry| {
        Box::pin(async { Err(HandlerError::dead_letter("refused by a business rule")) })
    });
    let failed = inbox
        .handle(entry(EntryOpts::default()))
        .await
        .expect_err("refused");
    assert_eq!(failed.kind(), ErrorKind::DeadLetter);
    assert_eq!(t.db.scalar("SELECT count(*) FROM outbox_inbox").await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_consumers_handed_the_same_entry_at_once_apply_it_once() {
    let t = setup().await;
    // Two consumers (one claimed the entry from the other), each with its own pool.
    let a = Inbox::new(t.db.pool(2).await, slow_effect);
    let b = Inbox::new(t.db.pool(2).await, slow_effect);
    let e = entry(EntryOpts::default());
    let (ra, rb) = tokio::join!(a.handle(e.clone()), b.handle(e.clone()));
    ra.expect("consumer a");
    rb.expect("consumer b");
    assert_eq!(t.db.effects_of(e.id).await, 1);
}

/// [`insert_effect`], then the transaction held open a while: long enough for another
/// consumer's insert of the same inbox row to wait on this one's.
fn slow_effect<'r>(
    conn: &'r mut diesel_async::AsyncPgConnection,
    entry: &'r Entry,
) -> futures::future::BoxFuture<'r, Result<(), diesel::result::Error>> {
    Box::pin(async move {
        insert_effect(conn, entry).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(())
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn fencing_refuses_the_commit_of_a_stale_epoch() {
    let t = setup().await;
    // Two consumers of group g, each with its own inbox: `old` held partition 3 under epoch 1,
    // `new` took it over under epoch 2.
    let old = Inbox::new(t.pool.clone(), insert_effect);
    let new = Inbox::new(t.pool.clone(), insert_effect);
    let under = |epoch| {
        entry(EntryOpts {
            lease: Some(Lease {
                partition: 3,
                epoch,
            }),
            ..EntryOpts::default()
        })
    };

    let before = under(1);
    old.handle(before.clone())
        .await
        .expect("the owner at epoch 1 commits");
    let taken_over = under(2);
    new.handle(taken_over.clone())
        .await
        .expect("the owner at epoch 2 commits");

    // The old owner resumes with an entry still in hand: refused, nothing applied.
    let stale = under(1);
    let refused = old.handle(stale.clone()).await.expect_err("stale epoch");
    assert_eq!(refused.kind(), ErrorKind::Fenced);
    assert_eq!(t.db.effects_of(stale.id).await, 0);
    assert_eq!(
        t.db.scalar(&format!(
            "SELECT count(*) FROM outbox_inbox WHERE event_id = '{}'",
            stale.id
        ))
        .await,
        0
    );
    // The same entry under the new owner's lease goes through, once.
    let mut redelivered = stale.clone();
    redelivered.lease = Some(Lease {
        partition: 3,
        epoch: 2,
    });
    new.handle(redelivered.clone()).await.expect("new owner");
    new.handle(redelivered).await.expect("new owner again");
    assert_eq!(t.db.effects_of(stale.id).await, 1);
    // Another partition's fence is its own.
    let elsewhere = entry(EntryOpts {
        lease: Some(Lease {
            partition: 4,
            epoch: 1,
        }),
        ..EntryOpts::default()
    });
    old.handle(elsewhere.clone())
        .await
        .expect("partition 4 at epoch 1");
    assert_eq!(t.db.effects_of(elsewhere.id).await, 1);
    assert_eq!(
        t.db.scalar(
            "SELECT epoch FROM outbox_inbox_fences WHERE consumer_group = 'g' AND partition = 3"
        )
        .await,
        2
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_batch_inbox_applies_only_what_no_batch_recorded_before() {
    let t = setup().await;
    let handed = Arc::new(AtomicUsize::new(0));
    let counted = handed.clone();
    let inbox = Inbox::for_batches(t.pool.clone(), move |conn, entries: &[Entry]| {
        counted.fetch_add(entries.len(), Ordering::SeqCst);
        insert_effects(conn, entries)
    });
    let a = entry(EntryOpts {
        key: Some("k"),
        n: 1,
        ..EntryOpts::default()
    });
    let b = entry(EntryOpts {
        key: Some("k"),
        n: 2,
        ..EntryOpts::default()
    });
    let c = entry(EntryOpts {
        n: 3,
        ..EntryOpts::default()
    });
    // An event id twice in one batch (the relay appended it twice): applied once.
    inbox
        .handle_batch(vec![a.clone(), b.clone(), a.clone()])
        .await
        .expect("first batch");
    assert_eq!(handed.load(Ordering::SeqCst), 2);
    // A redelivered batch with one new entry: only that one reaches the effect.
    inbox
        .handle_batch(vec![a.clone(), b.clone(), c.clone()])
        .await
        .expect("second batch");
    assert_eq!(handed.load(Ordering::SeqCst), 3);
    for e in [&a, &b, &c] {
        assert_eq!(t.db.effects_of(e.id).await, 1);
    }
    // In the order given.
    assert_eq!(
        t.db.scalar("SELECT string_agg(n::text, '' ORDER BY ctid)::bigint FROM effects")
            .await,
        123
    );
    inbox
        .handle_batch(Vec::new())
        .await
        .expect("an empty batch is nothing to do");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_batch_rolls_back_whole_and_a_stale_batch_is_fenced() {
    let t = setup().await;
    let fail = Arc::new(AtomicUsize::new(1));
    let failing = fail.clone();
    let inbox = Inbox::for_batches(t.pool.clone(), move |conn, entries: &[Entry]| {
        let fail_now = failing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        Box::pin(async move {
            insert_effects(conn, entries)
                .await
                .map_err(HandlerError::retry)?;
            if fail_now {
                return Err(HandlerError::outage("the effect's service is away"));
            }
            Ok(())
        })
    });
    let lease = |epoch| {
        Some(Lease {
            partition: 0,
            epoch,
        })
    };
    let batch: Vec<Entry> = (0..3)
        .map(|n| {
            entry(EntryOpts {
                n,
                lease: lease(1),
                ..EntryOpts::default()
            })
        })
        .collect();
    let failed = inbox
        .handle_batch(batch.clone())
        .await
        .expect_err("first try");
    assert_eq!(failed.kind(), ErrorKind::Outage);
    assert_eq!(t.db.scalar("SELECT count(*) FROM effects").await, 0);
    assert_eq!(t.db.scalar("SELECT count(*) FROM outbox_inbox").await, 0);
    inbox.handle_batch(batch.clone()).await.expect("retried");
    assert_eq!(t.db.scalar("SELECT count(*) FROM effects").await, 3);

    // A newer owner of partition 0 (another consumer's inbox) commits under epoch 2; this
    // inbox's next batch under epoch 1 is refused whole.
    let newer = Inbox::for_batches(t.pool.clone(), insert_effects);
    newer
        .handle_batch(vec![entry(EntryOpts {
            lease: lease(2),
            ..EntryOpts::default()
        })])
        .await
        .expect("newer owner");
    let stale: Vec<Entry> = (0..2)
        .map(|n| {
            entry(EntryOpts {
                n,
                lease: lease(1),
                ..EntryOpts::default()
            })
        })
        .collect();
    let refused = inbox.handle_batch(stale).await.expect_err("stale batch");
    assert_eq!(refused.kind(), ErrorKind::Fenced);
    assert_eq!(t.db.scalar("SELECT count(*) FROM effects").await, 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn consumers_starting_together_create_the_tables_once() {
    let db = TestDb::new().await;
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(db.conn().await);
    }
    let created = futures::future::join_all(conns.iter_mut().map(inbox::ensure_table)).await;
    for result in created {
        result.expect("ensure_table");
    }
    assert_eq!(
        db.scalar(
            "SELECT count(*) FROM pg_tables WHERE tablename IN ('outbox_inbox', 'outbox_inbox_fences')"
        )
        .await,
        2
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_with_the_inbox_applies_each_event_once_when_the_group_reads_it_again() {
    let t = setup().await;
    let mut events = Vec::new();
    for n in 0..20 {
        let e = entry(EntryOpts {
            topic: "orders",
            key: Some(if n % 2 == 0 { "even" } else { "odd" }),
            n,
            ..EntryOpts::default()
        });
        t.redis.xadd(&e).await;
        events.push(e);
    }
    let last_id = {
        let ids: Vec<String> = {
            let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                .arg(t.redis.stream("orders"))
                .arg("-")
                .arg("+")
                .query_async(&mut t.redis.conn().await)
                .await
                .expect("xrange");
            reply.ids.into_iter().map(|e| e.id).collect()
        };
        ids.last().cloned().expect("entries")
    };

    let run = |name: &'static str| {
        let config = ConsumerConfig::new(&t.redis.url, "orders", "g")
            .stream_prefix(&t.redis.prefix)
            .consumer(name)
            .block(Duration::from_millis(50));
        let consumer = Consumer::new(config).expect("consumer");
        let inbox = Inbox::new(t.pool.clone(), insert_effect);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            consumer
                .run(inbox, async {
                    let _ = stopped.await;
                })
                .await
        });
        (stop, task)
    };

    // Every entry read and acknowledged.
    let caught_up = async || {
        eventually(Duration::from_secs(20), || async {
            match t.redis.group_state("orders", "g").await {
                Some((last, 0)) if last == last_id => Ok(()),
                other => Err(format!("group at {other:?}")),
            }
        })
        .await
    };
    let (stop, task) = run("c1");
    caught_up().await;
    let _ = stop.send(());
    let stats = task.await.expect("first consumer");
    assert_eq!(stats.handled, 20);
    assert_eq!(t.db.scalar("SELECT count(*) FROM effects").await, 20);

    // The group reads the whole stream again (as after a restore of Redis from a backup).
    redis::cmd("XGROUP")
        .arg("SETID")
        .arg(t.redis.stream("orders"))
        .arg("g")
        .arg("0")
        .query_async::<()>(&mut t.redis.conn().await)
        .await
        .expect("xgroup setid");
    let (stop, task) = run("c2");
    caught_up().await;
    let _ = stop.send(());
    let stats = task.await.expect("second consumer");
    assert_eq!(
        stats.handled, 20,
        "every entry handled (and acknowledged) again"
    );
    for e in &events {
        assert_eq!(t.db.effects_of(e.id).await, 1, "event {}", e.payload["n"]);
    }
}

/// A consumer starting while another is inside an effect transaction (or frozen there) is
/// not held up by it: the inbox's tables exist, so nothing that locks them runs.
#[tokio::test(flavor = "multi_thread")]
async fn ensure_table_does_not_wait_for_an_effect_in_flight() {
    use diesel_async::SimpleAsyncConnection;
    let t = setup().await;
    let mut busy = t.pool.get().await.expect("a connection");
    busy.batch_execute(
        "BEGIN; INSERT INTO outbox_inbox (consumer_group, event_id, topic)
         VALUES ('g', gen_random_uuid(), 't')",
    )
    .await
    .expect("an effect transaction left open");
    let mut starting = t.pool.get().await.expect("another connection");
    tokio::time::timeout(Duration::from_secs(5), inbox::ensure_table(&mut starting))
        .await
        .expect("ensure_table waited for the open effect transaction")
        .expect("ensure_table");
    busy.batch_execute("ROLLBACK").await.expect("rollback");
}
