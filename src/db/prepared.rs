//! Raw SQL that a connection keeps prepared: the claim cycle's hot-path statements. The
//! wrapper lives in the consumer library (`outbox_consumer::prepared`), whose inbox uses it
//! too; `database.prepared_statements = false` turns it off ([`enable`]). The claim
//! transaction still has each run planned anew (`outbox::tune_relay_transaction`): a cached
//! generic plan outlives the table size it was made for.

pub use outbox_consumer::prepared::{enable, prepared, Prepared};
