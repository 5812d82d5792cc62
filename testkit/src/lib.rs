//! outbox-testkit: the rigs that the relay's end-to-end tests and the benchmark (`outbox-bench`)
//! start on this machine, kept out of the shipped crate. It depends on no crate of the
//! workspace, so the relay can take it as a dev-dependency.
//!
//! - [`cluster`]: a local Redis Cluster of masters (`redis-server` and `redis-cli` on the
//!   PATH), plain or TLS-only, every node killed on drop.
//! - [`certs`]: a certificate authority made in process (rcgen): server, cluster node and
//!   client certificates as PEM files in a directory.
//! - [`postgres`]: a PostgreSQL server of its own and streaming standbys of it (the
//!   Debian packages' `initdb`, `pg_ctl`, `pg_basebackup`), stopped on drop.
//! - [`services`]: where the shared Postgres and Redis are, and unique names on them.

pub mod certs;
pub mod cluster;
pub mod postgres;
pub mod services;
