//! The smallest consumer: a closure as the handler, no database. It reads a topic as a member
//! of a consumer group, prints each order, and says what becomes of an entry it cannot use.
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p outbox-consumer --example plain_handler -- \
//!     order.created billing
//! ```
//!
//! Delivery is at least once: an entry is acknowledged after the handler returned `Ok`, so a
//! crash in between hands it out again. Printing twice is harmless here; an effect that must
//! happen once belongs in the inbox (`examples/inbox_consumer.rs`). Ctrl-C stops it after the
//! entries in hand.

use std::time::Duration;

use outbox_consumer::{Consumer, ConsumerConfig, Entry, HandlerError};

/// What the producer puts in an `order.created` payload (other fields are ignored).
#[derive(Debug, serde::Deserialize)]
struct Order {
    order_id: u64,
    #[serde(default)]
    amount_cents: u64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let topic = args.next().unwrap_or_else(|| "order.created".to_string());
    let group = args.next().unwrap_or_else(|| "billing".to_string());
    let redis_url =
        std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string());

    let config = ConsumerConfig::new(&redis_url, &topic, &group)
        // The relay's `redis.stream_prefix`.
        .stream_prefix("outbox:")
        // Entries idle this long in a dead consumer's hands are taken over by another.
        .claim_idle(Duration::from_secs(30))
        // A handler that keeps failing sends its entry to `<prefix><topic>:dead` after this.
        .max_deliveries(5)
        // Partition keys handled at once; one key's events always one after another.
        .concurrency(8);
    let consumer = Consumer::new(config)?;

    let stats = consumer
        .run(
            |entry: Entry| async move {
                // A payload that does not parse never will: dead-letter it now rather than
                // spend five deliveries on it.
                let order: Order = entry.payload_as().map_err(HandlerError::dead_letter)?;
                println!(
                    "{} key={} order {} for {} cents (delivery {})",
                    entry.stream_id,
                    entry.key.as_deref().unwrap_or("-"),
                    order.order_id,
                    order.amount_cents,
                    entry.deliveries,
                );
                // Any other error would be retried with backoff (what `?` on it gives), and
                // `HandlerError::outage` waits out a dependency without spending a delivery.
                Ok::<(), HandlerError>(())
            },
            async {
                let _ = tokio::signal::ctrl_c().await;
            },
        )
        .await;
    println!(
        "stopped: {} handled, {} failed, {} dead-lettered",
        stats.handled, stats.failed, stats.dead_lettered
    );
    Ok(())
}
