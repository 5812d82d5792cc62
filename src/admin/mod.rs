//! The admin HTTP server (actix-web): health, metrics, the JSON API (`api`) and the web UI
//! (`ui`). Both change state only through [`actions`] and read through the same `crate::db`
//! functions; only their transport differs. [`routes`] lists every route in one place.

pub mod actions;
pub mod api;
pub mod auth;
pub mod caller;
pub mod counts;
pub mod health;
pub mod throttle;
pub mod ui;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{web, App, HttpServer};
use metrics_exporter_prometheus::PrometheusHandle;

use actix::Recipient;

use crate::db::Db;
use crate::publish::Publisher;
use crate::relay::health::Health;
use crate::relay::messages::Wake;
use auth::Tokens;

/// What handlers share.
#[derive(Clone)]
pub struct AdminState {
    /// The shared pool (reads only, plus steering writes).
    pub db: Db,
    /// For stream inspection.
    pub publisher: Publisher,
    /// Relay health flags, read by the probes.
    pub health: Arc<Health>,
    /// `relay.stall_after`: `/healthz` fails when the claim loop is silent for longer.
    pub stall_after: Duration,
    /// Renders `/metrics`.
    pub metrics: Option<PrometheusHandle>,
    /// The accepted tokens and their roles.
    pub tokens: Tokens,
    /// Wrong tokens per client address (shared by the API and the login page).
    pub throttle: Arc<throttle::Throttle>,
    /// Wakes this replica's claimer after an action that makes events publishable (retry,
    /// resume), so they go out now rather than at the next poll.
    pub wake: Option<Recipient<Wake>>,
    /// `relay.heartbeat_interval`: a replica silent for a few of these is not alive.
    pub heartbeat_interval: Duration,
    /// Published counts per topic, shared by every page and request of this replica.
    pub published: Arc<counts::PublishedCache>,
    /// `admin.max_response_bytes`: the payload and header bytes one list page may hold.
    pub max_response_bytes: i64,
}

impl AdminState {
    /// The state-changing operations, on this state's pool and claimer.
    pub fn actions(&self) -> actions::Actions<'_> {
        actions::Actions::new(&self.db, self.wake.as_ref())
    }
}

/// Every route of the admin server.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(health::healthz))
        .route("/readyz", web::get().to(health::readyz))
        .route("/metrics", web::get().to(health::metrics))
        .configure(api::routes)
        .configure(ui::routes);
}

/// Binds the server; it runs until its handle is stopped (signals are handled by the app).
/// With port 0 the system picks a free port, and the server logs `admin listening on
/// <addr>` once bound: whoever started the process reads its address there, with no window in
/// which another process could take a port picked in advance.
pub fn serve(state: AdminState, addr: SocketAddr) -> std::io::Result<actix_web::dev::Server> {
    let data = web::Data::new(state);
    let server = HttpServer::new(move || App::new().app_data(data.clone()).configure(routes))
        .workers(1)
        .disable_signals()
        .shutdown_timeout(2)
        .bind(addr)?;
    if addr.port() == 0 {
        for bound in server.addrs() {
            tracing::info!("admin listening on {bound}");
        }
    }
    Ok(server.run())
}
