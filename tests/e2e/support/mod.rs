//! Helpers shared by the end-to-end tests, by concern: [`setup`] starts the common case (a
//! database, a Redis prefix and a relay, as a [`Bundle`]); each test gets its own database
//! ([`TestDb`], dropped after), its own Redis key prefix ([`TestRedis`], deleted after) or its
//! own redis-server ([`OwnRedis`]), and real relay processes ([`RelayProc`], [`TokenRelay`]),
//! reached with the one HTTP client, [`Http`]; a PgBouncer in front of Postgres ([`PgBouncer`]);
//! `consumer/examples/inbox_consumer` processes ([`ExampleConsumer`]); an OTLP receiver ([`OtlpReceiver`]);
//! and one way to wait, [`eventually`]. Helpers fail loudly: a read that cannot reach its
//! server panics rather than answer 0 or nothing.

mod cluster;
mod consumers;
mod db;
mod events;
mod http;
mod otlp;
mod pgbouncer;
mod process;
mod proxy;
mod redis;
mod relay;
mod sentinel;
mod setup;
mod tls;
mod wait;

use std::net::TcpListener;

pub use self::cluster::OwnCluster;
pub use self::consumers::{
    applied_in_order, assert_effects_exactly_once, example_bin, group_pending,
    insert_with_poison_in_k2, sigkill_while_producing, try_group_pending, wait_applied,
    wait_group_parked, wait_settled, wait_until, xadd_event, xadd_event_at, Chaos, ExampleConsumer,
    CHAOS_ARGS, EFFECTS_GROUP, PARK_ARGS,
};
pub use self::db::{pg_addr, pg_url, OwnPostgres, TestDb};
pub use self::events::{
    assert_exactly_once, assert_per_key_order, insert_events, payload_order, produce_rounds,
    Events, Rounds,
};
pub use self::http::{form, Http, Resp};
pub use self::otlp::{OtlpReceiver, ReceivedSpan, Wire, CONSUMER_KIND, PRODUCER_KIND};
pub use self::pgbouncer::PgBouncer;
pub use self::process::Logged;
pub use self::proxy::Proxy;
pub use self::redis::{server_binary, valkey_server, OwnRedis, TestRedis};
pub use self::relay::{
    base_env, config_file, RelayProc, TokenRelay, ADMIN_TOKEN, BIN, READ_ONLY_TOKEN,
};
pub use self::sentinel::{OwnSentinel, MASTER};
pub use self::setup::{setup, setup_on, setup_with, Bundle};
pub use self::tls::{Issued, TestCa};
pub use self::wait::{eventually, eventually_blocking, eventually_every, holds_for, Check};

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    l.local_addr().expect("local addr").port()
}

/// `name` in the virtualenv `make api-tools` fills (target/tools/api-venv/bin): the outside
/// tools (schemathesis, openapi-python-client, the CloudEvents SDK's Python).
pub fn api_tool(name: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/tools/api-venv/bin")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: `make api-tools` installs it (make test does)",
        path.display()
    );
    path
}
