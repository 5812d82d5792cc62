//! The admin JSON API (`/api/v1`) end to end, on a real relay process with tokens set:
//! auth, input validation, keyset pagination, idempotent enqueue, dead-letter steering that
//! really reaches Redis, pause and resume, audit, stats, and the OpenAPI document.

pub mod client;
mod contract;
mod steering;
mod validation;
