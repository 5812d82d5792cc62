//! The inbox's fence: a consumer whose partition has a newer owner cannot commit its
//! effect.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn the_inbox_refuses_the_commit_of_a_consumer_whose_partition_has_a_newer_owner() {
    use diesel_async::RunQueryDsl;
    use outbox_consumer::inbox;
    use outbox_consumer::{Entry, Lease};

    let db = TestDb::empty().await;
    let mut a = db.conn().await;
    let mut b = db.conn().await;
    inbox::ensure_table(&mut a).await.expect("tables");
    db.exec("CREATE TABLE effects (event_id uuid NOT NULL)")
        .await;
    let fields: Vec<(String, redis::Value)> = [
        ("id", uuid::Uuid::new_v4().to_string()),
        ("topic", "t0".to_string()),
        ("payload", "{}".to_string()),
        ("headers", "{}".to_string()),
        ("created_at", "2026-12-05T10:00:00.000000Z".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), redis::Value::BulkString(v.into_bytes())))
    .collect();
    let mut entry = Entry::from_pairs("1-0", &fields).expect("entry");
    let old = Lease {
        partition: 3,
        epoch: 1,
    };
    let new = Lease {
        partition: 3,
        epoch: 2,
    };
    // Applied directly, under a lease whose fence nobody raised: refused, saying what to do.
    entry.lease = Some(old);
    let nothing = as_effect(|_, _| Box::pin(async { Ok(()) }));
    let unraised = inbox::apply_once(&mut a, "g", &entry, &nothing).await;
    assert!(
        matches!(unraised, Err(inbox::InboxError::NotRaised { epoch: 1, .. })),
        "{:?}",
        unraised.map_err(|e| e.to_string())
    );
    assert_eq!(
        inbox::raise_fence(&mut a, "g", "t0", old)
            .await
            .expect("raise"),
        1
    );
    entry.lease = Some(old);

    // The old owner's effect runs while the new owner raises the fence.
    let (raised_tx, raised_rx) = tokio::sync::oneshot::channel::<()>();
    let raised_rx = std::sync::Mutex::new(Some(raised_rx));
    let effect = as_effect(|conn, entry| {
        let wait = raised_rx.lock().expect("lock").take();
        let id = entry.id;
        Box::pin(async move {
            diesel::sql_query("INSERT INTO effects VALUES ($1)")
                .bind::<diesel::sql_types::Uuid, _>(id)
                .execute(conn)
                .await?;
            if let Some(wait) = wait {
                let _ = wait.await;
            }
            Ok::<(), diesel::result::Error>(())
        })
    });
    let stale = inbox::apply_once(&mut a, "g", &entry, &effect);
    let raise = async {
        let fence = inbox::raise_fence(&mut b, "g", "t0", new)
            .await
            .expect("raise");
        let _ = raised_tx.send(());
        fence
    };
    let (stale, fence) = tokio::join!(stale, raise);
    assert_eq!(fence, 2, "the new owner raised the fence without waiting");
    match stale {
        Err(inbox::InboxError::Fenced {
            fence: 2, epoch: 1, ..
        }) => {}
        other => panic!(
            "the stale owner committed: {:?}",
            other.map_err(|e| e.to_string())
        ),
    }
    assert_eq!(db.scalar("SELECT count(*) FROM effects").await, 0);
    assert_eq!(db.scalar("SELECT count(*) FROM outbox_inbox").await, 0);
    // A stale owner cannot lower the fence; the new owner applies the event once.
    assert_eq!(
        inbox::raise_fence(&mut a, "g", "t0", old)
            .await
            .expect("raise"),
        2
    );
    entry.lease = Some(new);
    let applied = inbox::apply_once(&mut b, "g", &entry, &effect).await;
    assert!(matches!(applied, Ok(inbox::Applied::Applied)));
    let again = inbox::apply_once(&mut a, "g", &entry, &effect).await;
    assert!(matches!(again, Ok(inbox::Applied::AlreadyDone)));
    assert_eq!(db.scalar("SELECT count(*) FROM effects").await, 1);
}

/// Gives a closure the effect's signature (higher-ranked over the connection's lifetime).
fn as_effect<F>(f: F) -> F
where
    F: for<'r> Fn(
        &'r mut diesel_async::AsyncPgConnection,
        &'r outbox_consumer::Entry,
    ) -> futures::future::BoxFuture<'r, Result<(), diesel::result::Error>>,
{
    f
}
