//! A consumer group's fleet on a partitioned topic: `examples/inbox_consumer` processes divide
//! the partitions (at most one owner each, counts within one of each other after joins and
//! leaves), and keep each key's events in commit order through SIGKILLs, freezes past the
//! lease (SIGSTOP, SIGCONT), scale-up and scale-down; the inbox's fence refuses the commit of
//! a consumer whose partition has a newer owner.
//!
//! Order is judged by commit order: a trigger on `example_effects` refuses (raises) an
//! effect whose key has an earlier event without a committed effect, so an effect out of
//! order, or two of one key at once, shows as "ORDER VIOLATION" in a consumer's log.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::AsyncCommands;

use crate::support::*;

const PARTITIONS: u32 = 8;

/// The fleet's consumers: the chaos run's (a short lease, so freezes and kills are felt
/// within seconds).
const FLEET_ARGS: &[&str] = CHAOS_ARGS;

fn relay_env(db: &TestDb, redis: &TestRedis) -> Vec<(String, String)> {
    relay_env_with(db, redis, PARTITIONS)
}

fn relay_env_with(db: &TestDb, redis: &TestRedis, partitions: u32) -> Vec<(String, String)> {
    let mut env = base_env(db, redis);
    env.push(("OUTBOX__TOPICS".into(), format!("t0:{partitions}")));
    env.push(("OUTBOX__GROUPS".into(), format!("t0:{EFFECTS_GROUP}")));
    env
}

fn spawn(db: &TestDb, redis: &TestRedis, name: &str) -> ExampleConsumer {
    ExampleConsumer::spawn(db, redis, "t0", EFFECTS_GROUP, name, FLEET_ARGS)
}

/// Each partition's owner in the example consumers' group, from its lease key.
async fn owners(redis: &TestRedis) -> Vec<Option<String>> {
    owners_of(redis, EFFECTS_GROUP, PARTITIONS).await
}

async fn owners_of(redis: &TestRedis, group: &str, partitions: u32) -> Vec<Option<String>> {
    let mut c = redis.reader().await;
    let mut out = Vec::new();
    for p in 0..partitions {
        let key = outbox_core::keys::partition_owner(&redis.stream(&format!("t0:{p}")), group);
        out.push(c.get(key).await.expect("get owner"));
    }
    out
}

/// Every partition owned, by live consumers only, counts within one of each other.
fn balanced(owners: &[Option<String>], live: &[String]) -> Result<(), String> {
    let mut counts: HashMap<&str, usize> = live.iter().map(|n| (n.as_str(), 0)).collect();
    for (p, owner) in owners.iter().enumerate() {
        let Some(owner) = owner else {
            return Err(format!("partition {p} has no owner: {owners:?}"));
        };
        match counts.get_mut(owner.as_str()) {
            Some(n) => *n += 1,
            None => {
                return Err(format!(
                    "partition {p} owned by {owner}, not live: {owners:?}"
                ))
            }
        }
    }
    let (lo, hi) = (counts.values().min(), counts.values().max());
    match lo.zip(hi) {
        Some((lo, hi)) if hi - lo <= 1 => Ok(()),
        _ => Err(format!("unbalanced {counts:?}")),
    }
}

/// The partitions `name` owns.
fn owned_by(owners: &[Option<String>], name: &str) -> Vec<usize> {
    (0..owners.len())
        .filter(|p| owners[*p].as_deref() == Some(name))
        .collect()
}

async fn wait_balanced(redis: &TestRedis, live: &[String], within: Duration) -> Duration {
    let start = Instant::now();
    wait_until(within, || async { balanced(&owners(redis).await, live) }).await;
    start.elapsed()
}

fn signal(consumer: &ExampleConsumer, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &consumer.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// The group's pending entries over all partitions.
async fn pending(redis: &TestRedis) -> usize {
    pending_of(redis, PARTITIONS).await
}

async fn pending_of(redis: &TestRedis, partitions: u32) -> usize {
    let mut total = 0;
    for p in 0..partitions {
        // The relay declares the group on every partition: a missing one is an error.
        total += group_pending(redis, &format!("t0:{p}"), EFFECTS_GROUP)
            .await
            .0;
    }
    total
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_divides_the_partitions_and_rebalances_after_joins_and_leaves() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let relay = RelayProc::spawn("fleet-balance", &relay_env(&db, &redis));
    // Partitions exist once the relay has published the topic.
    produce_rounds(&db.url, 0, 1, 40, 1, 40, Duration::ZERO).await;
    let mut fleet: Vec<ExampleConsumer> = (0..3)
        .map(|i| spawn(&db, &redis, &format!("c{i}")))
        .collect();
    let names =
        |fleet: &[ExampleConsumer]| fleet.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    wait_balanced(&redis, &names(&fleet), Duration::from_secs(30)).await;

    // The relay shows who holds what: on /metrics, and per partition on the Streams page.
    let http = relay.http();
    let series = |p: u32| {
        format!(r#"outbox_partition_owned{{topic="t0",partition="{p}",group="{EFFECTS_GROUP}"}}"#)
    };
    for p in 0..PARTITIONS {
        http.wait_metric(&series(p), |v| v == 1.0, Duration::from_secs(20))
            .await;
    }
    let members = format!(r#"outbox_group_members{{topic="t0",group="{EFFECTS_GROUP}"}}"#);
    http.wait_metric(&members, |v| v == 3.0, Duration::from_secs(20))
        .await;
    let login = http.get("/login?next=%2Fstreams");
    let page = http
        .cookie(&login.session_cookie().expect("a session cookie"))
        .get("/streams");
    assert_eq!(page.status, 200, "{}", page.body);
    let owners_now = owners(&redis).await;
    for (p, owner) in owners_now.iter().enumerate() {
        let owner = owner.as_deref().expect("owned");
        let row = page
            .body
            .split("<tr>")
            .find(|row| row.contains(&format!("partition {p}<")) && row.contains(EFFECTS_GROUP))
            .unwrap_or_else(|| panic!("no group row for partition {p} in {}", page.body));
        assert!(
            row.contains(&format!("<code>{owner}</code>")),
            "partition {p}: {row}"
        );
        assert!(row.contains("epoch "), "{row}");
    }

    // A join: 2 each.
    fleet.push(spawn(&db, &redis, "c3"));
    let join = wait_balanced(&redis, &names(&fleet), Duration::from_secs(30)).await;
    // A clean leave (SIGTERM) gives its partitions back at once.
    let leaving = fleet.remove(0);
    leaving.terminate();
    let leave = wait_balanced(&redis, &names(&fleet), Duration::from_secs(30)).await;
    // A crash: its partitions wait for its lease (2 s) to run out.
    let mut crashed = fleet.remove(0);
    crashed.kill9();
    let crash = wait_balanced(&redis, &names(&fleet), Duration::from_secs(30)).await;
    http.wait_metric(&members, |v| v == 2.0, Duration::from_secs(20))
        .await;
    // With every consumer gone, the partitions have no owner once the leases run out.
    for mut c in fleet.drain(1..) {
        c.kill9();
    }
    let mut last = fleet.remove(0);
    last.terminate();
    last.wait_exit(Duration::from_secs(10));
    for p in 0..PARTITIONS {
        http.wait_metric(&series(p), |v| v == 0.0, Duration::from_secs(20))
            .await;
    }
    http.wait_metric(&members, |v| v == 0.0, Duration::from_secs(20))
        .await;
    eprintln!("balanced again after a join {join:?}, a leave {leave:?}, a crash {crash:?}");
    let epochs_owned: Vec<i64> = {
        let mut c = redis.conn().await;
        let mut e = Vec::new();
        for p in 0..PARTITIONS {
            let key = outbox_core::keys::partition_epoch(
                &redis.stream(&format!("t0:{p}")),
                EFFECTS_GROUP,
            );
            e.push(
                c.get::<_, Option<i64>>(key)
                    .await
                    .expect("epoch")
                    .unwrap_or(0),
            );
        }
        e
    };
    assert!(
        epochs_owned.iter().all(|e| *e >= 1),
        "each owner took an epoch: {epochs_owned:?}"
    );
    assert!(last.log().contains("took partition"), "{}", last.log());
}

/// The trigger that judges order by commit order (see the module's documentation).
const ORDER_CHECK: &str = "
CREATE TABLE example_effects (
    event_id uuid NOT NULL,
    topic text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON example_effects (event_id);
CREATE FUNCTION fleet_order_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE k text; n bigint;
BEGIN
  SELECT partition_key, (payload->>'n')::bigint INTO k, n FROM outbox WHERE id = NEW.event_id;
  IF EXISTS (SELECT 1 FROM outbox o
             WHERE o.topic = NEW.topic AND o.partition_key = k AND (o.payload->>'n')::bigint < n
               AND NOT EXISTS (SELECT 1 FROM example_effects e WHERE e.event_id = o.id)) THEN
    RAISE EXCEPTION 'ORDER VIOLATION: event % of key % before an earlier event of its key', n, k;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER fleet_order_check BEFORE INSERT ON example_effects
  FOR EACH ROW EXECUTE FUNCTION fleet_order_check();
";

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_keeps_each_keys_order_through_kills_freezes_and_scaling() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    db.exec(ORDER_CHECK).await;
    let _relay = RelayProc::spawn("fleet-chaos", &relay_env(&db, &redis));
    let mut fleet: Vec<ExampleConsumer> = (0..3)
        .map(|i| spawn(&db, &redis, &format!("c{i}")))
        .collect();
    let mut logs = Vec::new();
    let (rounds, per_round, keys) = (50usize, 100i64, 40usize);
    let producer = tokio::spawn({
        let url = db.url.clone();
        async move {
            produce_rounds(
                &url,
                0,
                rounds,
                per_round,
                1,
                keys,
                Duration::from_millis(150),
            )
            .await
        }
    });
    let mut next = 3;
    let mut froze = None;
    for step in 0..10 {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        match step % 5 {
            // A crash, restarted under its name (its pending entries are its own at once).
            0 => {
                let mut c = fleet.remove(0);
                c.kill9();
                logs.push(c.log());
                fleet.push(spawn(&db, &redis, &c.name));
            }
            // Frozen past its lease (2 s): the others take its partitions; resumed, it may
            // not read, take or commit anything of them.
            1 => {
                let name = fleet[0].name.clone();
                let held = eventually(
                    Duration::from_secs(30),
                    "the consumer to freeze to own a partition",
                    || async {
                        let owned = owned_by(&owners(&redis).await, &name);
                        (!owned.is_empty()).then_some(owned)
                    },
                )
                .await;
                signal(&fleet[0], "-STOP");
                eventually(
                    Duration::from_secs(30),
                    "the others to take the frozen consumer's partitions",
                    || async {
                        let now = owners(&redis).await;
                        held.iter()
                            .all(|p| now[*p].as_ref().is_some_and(|o| *o != name))
                            .then_some(())
                            .ok_or(format!("{name} held {held:?}; owners now {now:?}"))
                    },
                )
                .await;
                signal(&fleet[0], "-CONT");
                froze = Some(name);
            }
            // Scale up.
            2 => {
                fleet.push(spawn(&db, &redis, &format!("c{next}")));
                next += 1;
            }
            // A crash, replaced under a new name.
            3 => {
                let mut c = fleet.remove(0);
                c.kill9();
                logs.push(c.log());
                fleet.push(spawn(&db, &redis, &format!("c{next}")));
                next += 1;
            }
            // Scale down, cleanly.
            _ => {
                let mut c = fleet.remove(0);
                c.terminate();
                c.wait_exit(Duration::from_secs(10));
                logs.push(c.log());
            }
        }
    }
    producer.await.expect("producer");
    let total = (rounds as i64) * per_round;
    wait_until(Duration::from_secs(120), || async {
        let applied = db
            .scalar("SELECT count(DISTINCT event_id) FROM example_effects")
            .await;
        let pending = pending(&redis).await;
        if applied == total && pending == 0 {
            Ok(())
        } else {
            Err(format!("applied {applied}/{total}, pending {pending}"))
        }
    })
    .await;
    assert_effects_exactly_once(&db, "t0").await;
    assert_eq!(redis.xlen("t0:dead").await, 0, "nothing dead-lettered");
    logs.extend(fleet.iter().map(|c| c.log()));
    for log in &logs {
        assert!(!log.contains("ORDER VIOLATION"), "{log}");
    }
    let names: Vec<String> = fleet.iter().map(|c| c.name.clone()).collect();
    wait_balanced(&redis, &names, Duration::from_secs(30)).await;
    // The frozen consumer found, on waking, that its leases had gone to others.
    let froze = froze.expect("a freeze happened");
    let frozen_log = logs
        .iter()
        .chain(fleet.iter().map(|c| c.log()).collect::<Vec<_>>().iter())
        .filter(|l| l.contains(&format!("consumer={froze}")) || l.contains(&froze))
        .any(|l| l.contains("no longer handled here"));
    assert!(
        frozen_log,
        "the frozen consumer {froze} noticed it lost its partitions"
    );
}

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

/// Handled `(key, n)` pairs in the order their handlers ran, shared by a group's consumers.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, i64)>>>;

/// Each event once, and each key's events in order of `n`.
fn assert_once_in_key_order(seen: &[(String, i64)], total: usize, what: &str) {
    let distinct: std::collections::HashSet<&(String, i64)> = seen.iter().collect();
    assert_eq!(distinct.len(), total, "{what}: every event handled");
    assert_eq!(seen.len(), total, "{what}: none twice");
    let mut last: HashMap<&str, i64> = HashMap::new();
    for (key, n) in seen {
        if let Some(prev) = last.insert(key.as_str(), *n) {
            assert!(*n > prev, "{what}: key {key}: {n} handled after {prev}");
        }
    }
}

fn record(
    seen: &Seen,
    entry: &outbox_consumer::Entry,
) -> Result<(), outbox_consumer::HandlerError> {
    let n = entry.payload["n"].as_i64().unwrap_or(-1);
    let key = entry.key.clone().unwrap_or_default();
    seen.lock()
        .map_err(|_| outbox_consumer::HandlerError::retry("lock"))?
        .push((key, n));
    Ok(())
}

/// Four groups of two consumers each, one group per kind of handler (per entry and per
/// batch, without and with the inbox), divide the 8 partitions; one of each pair stops
/// halfway and the other takes its partitions over. Each group handles every event once,
/// each key in order.
async fn fleets_of_every_handler_kind_divide_and_hand_over(db: &TestDb, redis: &TestRedis) {
    use diesel_async::pooled_connection::AsyncDieselConnectionManager;
    use outbox_consumer::inbox::Inbox;
    use outbox_consumer::{Batches, Consumer, ConsumerConfig, Entry};
    use std::sync::Arc;

    let _relay = RelayProc::spawn("fleet-kinds", &relay_env(db, redis));
    let total = 1200usize;
    // One event per key first: the relay records the partition count as it publishes.
    produce_rounds(&db.url, 0, 1, 30, 1, 30, Duration::from_millis(10)).await;
    let config = |group: &str, name: &str| {
        ConsumerConfig::new(&redis.url, "t0", group)
            .cluster(redis.cluster)
            .stream_prefix(&redis.prefix)
            .consumer(name)
            .claim_idle(Duration::from_secs(2))
            .block(Duration::from_millis(200))
    };
    let pool = bb8::Pool::builder()
        .max_size(8)
        .build(AsyncDieselConnectionManager::<
            diesel_async::AsyncPgConnection,
        >::new(&db.url))
        .await
        .expect("pool");
    const GROUPS: [&str; 4] = ["entries", "batches", "inbox-entries", "inbox-batches"];
    let seen: Vec<Seen> = GROUPS.iter().map(|_| Seen::default()).collect();
    let per_entry = |seen: &Seen| {
        let seen = seen.clone();
        move |entry: Entry| {
            let seen = seen.clone();
            async move { record(&seen, &entry) }
        }
    };
    let per_batch = |seen: &Seen| {
        let seen = seen.clone();
        Batches(move |batch: Vec<Entry>| {
            let seen = seen.clone();
            async move { batch.iter().try_for_each(|entry| record(&seen, entry)) }
        })
    };
    let inbox_entries = |seen: &Seen| {
        let seen = seen.clone();
        Inbox::new(pool.clone(), move |_conn, entry: &Entry| {
            let seen = seen.clone();
            Box::pin(async move { record(&seen, entry) })
        })
    };
    let inbox_batches = |seen: &Seen| {
        let seen = seen.clone();
        Batches(Inbox::for_batches(
            pool.clone(),
            move |_conn, batch: &[Entry]| {
                let seen = seen.clone();
                Box::pin(async move { batch.iter().try_for_each(|entry| record(&seen, entry)) })
            },
        ))
    };
    let stop_early = Arc::new(tokio::sync::Notify::new());
    let stop_all = Arc::new(tokio::sync::Notify::new());
    let notified = |n: &Arc<tokio::sync::Notify>| {
        let n = n.clone();
        async move { n.notified().await }
    };
    let consumers: Vec<[Consumer; 2]> = GROUPS
        .iter()
        .map(|g| [0, 1].map(|i| Consumer::new(config(g, &format!("{g}-{i}"))).expect("config")))
        .collect();
    let runs = async {
        tokio::join!(
            consumers[0][0].run(per_entry(&seen[0]), notified(&stop_early)),
            consumers[0][1].run(per_entry(&seen[0]), notified(&stop_all)),
            consumers[1][0].run(per_batch(&seen[1]), notified(&stop_early)),
            consumers[1][1].run(per_batch(&seen[1]), notified(&stop_all)),
            consumers[2][0].run(inbox_entries(&seen[2]), notified(&stop_early)),
            consumers[2][1].run(inbox_entries(&seen[2]), notified(&stop_all)),
            consumers[3][0].run(inbox_batches(&seen[3]), notified(&stop_early)),
            consumers[3][1].run(inbox_batches(&seen[3]), notified(&stop_all)),
        )
    };
    let handled = |at_least: usize| {
        let seen = &seen;
        move || async move {
            let counts: Vec<usize> = seen
                .iter()
                .map(|s| s.lock().map(|s| s.len()).unwrap_or(0))
                .collect();
            match counts.iter().all(|n| *n >= at_least) {
                true => Ok(()),
                false => Err(format!("handled {counts:?}, waiting for {at_least} each")),
            }
        }
    };
    let steer = async {
        // Every group divided before the bulk comes, so each consumer gets a share.
        for group in GROUPS {
            let live: Vec<String> = (0..2).map(|i| format!("{group}-{i}")).collect();
            wait_until(Duration::from_secs(30), || async {
                balanced(&owners_of(redis, group, PARTITIONS).await, &live)
            })
            .await;
        }
        produce_rounds(&db.url, 30, 39, 30, 1, 30, Duration::from_millis(10)).await;
        wait_until(Duration::from_secs(60), handled(total / 3)).await;
        stop_early.notify_waiters();
        wait_until(Duration::from_secs(60), handled(total)).await;
        stop_all.notify_waiters();
    };
    let (stats, ()) = tokio::join!(runs, steer);
    for (group, seen) in GROUPS.iter().zip(&seen) {
        let seen = seen.lock().expect("lock").clone();
        assert_once_in_key_order(&seen, total, group);
    }
    let pairs = [
        (stats.0, stats.1),
        (stats.2, stats.3),
        (stats.4, stats.5),
        (stats.6, stats.7),
    ];
    for (group, (a, b)) in GROUPS.iter().zip(pairs) {
        assert!(
            a.handled > 0 && b.handled > 0,
            "{group}: both consumers handled some: {a:?} {b:?}"
        );
    }
    let inboxed = db
        .scalar("SELECT count(*) FROM outbox_inbox WHERE consumer_group LIKE 'inbox-%'")
        .await;
    assert_eq!(
        inboxed,
        2 * total as i64,
        "each inbox recorded each event once"
    );
    let fences = db
        .scalar("SELECT count(DISTINCT (consumer_group, partition)) FROM outbox_inbox_fences")
        .await;
    let used: std::collections::HashSet<u32> = (0..30)
        .map(|k| outbox_core::partition::for_key(&format!("k{k}"), PARTITIONS))
        .collect();
    assert_eq!(
        fences,
        2 * used.len() as i64,
        "each inbox fenced each partition its keys are in"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn on_one_redis_fleets_of_every_handler_kind_keep_key_order() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    fleets_of_every_handler_kind_divide_and_hand_over(&db, &redis).await;
}

/// The same on a Redis Cluster, whose 8 partition streams spread over 3 masters.
#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_fleets_of_every_handler_kind_keep_key_order() {
    let cluster = OwnCluster::start(3);
    let db = TestDb::new().await;
    let redis = cluster.test_redis();
    let masters: std::collections::HashSet<usize> = (0..PARTITIONS)
        .map(|p| cluster.owner_of(&redis.stream(&format!("t0:{p}"))))
        .collect();
    assert!(masters.len() > 1, "the partitions spread over the masters");
    fleets_of_every_handler_kind_divide_and_hand_over(&db, &redis).await;
}

/// A consumer starved of CPU (here a handler blocks its runtime's only thread, heartbeat
/// included) past the time it trusts its lease, but not past the lease in Redis: the entries
/// of the key it stopped handling when the lease lapsed locally stay in its pending list, and
/// once the heartbeat renews the lease they are handled before any newer entry of that key.
#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_starved_past_its_lease_handles_a_keys_older_entries_before_newer_ones() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let _relay = RelayProc::spawn("fleet-starved", &relay_env(&db, &redis));
    // Ten events of one key, published before the consumer starts.
    produce_rounds(&db.url, 0, 1, 10, 1, 1, Duration::ZERO).await;
    let partition = outbox_core::partition::for_key("k0", PARTITIONS);
    wait_until(Duration::from_secs(30), || async {
        match redis.xlen(&format!("t0:{partition}")).await {
            10 => Ok(()),
            n => Err(format!("{n} entries published")),
        }
    })
    .await;
    // Lease 6 s: trusted for 4 s after a renewal sent at most 1 s before the block; the
    // 4.5 s block outlasts that trust and ends before the lease runs out in Redis.
    let config = outbox_consumer::ConsumerConfig::new(&redis.url, "t0", "starved")
        .cluster(redis.cluster)
        .stream_prefix(&redis.prefix)
        .consumer("starved-0")
        .claim_idle(Duration::from_secs(6))
        .block(Duration::from_millis(200));
    let consumer = outbox_consumer::Consumer::new(config).expect("config");
    let seen = Seen::default();
    let blocked = Arc::new(AtomicBool::new(false));
    let (unblocked_tx, unblocked_rx) = tokio::sync::oneshot::channel::<()>();
    let unblocked_tx = std::sync::Mutex::new(Some(unblocked_tx));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let handler = {
        let (seen, blocked) = (seen.clone(), blocked.clone());
        move |entry: outbox_consumer::Entry| {
            let (seen, blocked) = (seen.clone(), blocked.clone());
            let unblocked = match blocked.swap(true, Ordering::SeqCst) {
                false => unblocked_tx.lock().ok().and_then(|mut tx| tx.take()),
                true => None,
            };
            async move {
                record(&seen, &entry)?;
                if let Some(unblocked) = unblocked {
                    std::thread::sleep(Duration::from_millis(4500));
                    let _ = unblocked.send(());
                }
                Ok::<(), outbox_consumer::HandlerError>(())
            }
        }
    };
    let runner = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(consumer.run(handler, async {
            let _ = stop_rx.await;
        }))
    });
    tokio::time::timeout(Duration::from_secs(60), unblocked_rx)
        .await
        .expect("the consumer handled its first entry")
        .expect("unblocked");
    // Newer events of the key while the consumer finds its lease lapsed and renews it.
    produce_rounds(&db.url, 10, 1, 10, 1, 1, Duration::ZERO).await;
    wait_until(Duration::from_secs(30), || async {
        let handled = seen.lock().expect("lock").len();
        match handled {
            20 => Ok(()),
            n => Err(format!(
                "{n} of 20 handled: {:?}",
                seen.lock().map(|s| s.clone())
            )),
        }
    })
    .await;
    let _ = stop_tx.send(());
    let stats = runner.join().expect("consumer thread");
    let seen = seen.lock().expect("lock").clone();
    assert_once_in_key_order(&seen, 20, "starved");
    assert_eq!(stats.handled, 20, "{stats:?}");
}

/// `outbox-relay repartition t0 3` while the fleet holds unacknowledged entries of the 2 old
/// partitions: it waits for them, the fleet finishes them, follows the new count and divides
/// the 3 partitions; every event takes effect once, each key in commit order.
#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_follows_a_repartition_that_waits_for_its_unacknowledged_entries() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    db.exec(ORDER_CHECK).await;
    let _relay = RelayProc::spawn("fleet-reparts", &relay_env_with(&db, &redis, 2));
    produce_rounds(&db.url, 0, 4, 100, 1, 20, Duration::from_millis(10)).await;
    let slow: Vec<&str> = FLEET_ARGS
        .iter()
        .copied()
        .chain(["--effect-delay", "40ms"])
        .collect();
    let fleet: Vec<ExampleConsumer> = (0..2)
        .map(|i| ExampleConsumer::spawn(&db, &redis, "t0", EFFECTS_GROUP, &format!("c{i}"), &slow))
        .collect();
    wait_until(Duration::from_secs(30), || async {
        match db.scalar("SELECT count(*) FROM example_effects").await {
            n if n >= 10 => Ok(()),
            n => Err(format!("{n} applied")),
        }
    })
    .await;

    let log = std::env::temp_dir().join(format!(
        "fleet-repartition-{}.log",
        redis.prefix.trim_end_matches(':')
    ));
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(["repartition", "t0", "3"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(
            relay_env_with(&db, &redis, 2)
                .into_iter()
                .filter(|(k, _)| k != "OUTBOX__TOPICS"),
        );
    let mut repartition = Logged::spawn(cmd, log);
    wait_until(Duration::from_secs(10), || async {
        let said = repartition.log();
        match said.contains("waiting") && said.contains(EFFECTS_GROUP) {
            true => Ok(()),
            false => Err(format!("not waiting for the group: {said}")),
        }
    })
    .await;
    produce_rounds(&db.url, 400, 2, 100, 1, 20, Duration::from_millis(10)).await;
    let code = repartition.wait_exit(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{}", repartition.log());

    wait_until(Duration::from_secs(90), || async {
        let applied = db
            .scalar("SELECT count(DISTINCT event_id) FROM example_effects")
            .await;
        let pending = pending_of(&redis, 3).await;
        match (applied, pending) {
            (600, 0) => Ok(()),
            _ => Err(format!("applied {applied}/600, pending {pending}")),
        }
    })
    .await;
    assert_effects_exactly_once(&db, "t0").await;
    for c in &fleet {
        assert!(!c.log().contains("ORDER VIOLATION"), "{}", c.log());
    }
    let names: Vec<String> = fleet.iter().map(|c| c.name.clone()).collect();
    wait_until(Duration::from_secs(30), || async {
        balanced(&owners_of(&redis, EFFECTS_GROUP, 3).await, &names)
    })
    .await;
}
