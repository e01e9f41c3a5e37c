//! HTTP endpoints (docs/operations.md, "Endpoints"): `/healthz` and `/readyz` on the probe
//! address, `/metrics` on the metrics address (one listener serves both when the addresses are
//! equal).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use futures::Future;
use tokio::sync::watch;

use crate::controller::Shared;
use crate::leader::Role;
use crate::metrics::Metrics;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why an endpoint could not be served.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct ServeError {
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// What the endpoints read.
#[derive(Clone)]
pub struct Probes {
    pub shared: Arc<Shared>,
    pub metrics: Arc<Metrics>,
    pub role: watch::Receiver<Role>,
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(probes): State<Probes>) -> impl IntoResponse {
    let role = *probes.role.borrow();
    match role {
        // Ready but idle: a rollout may proceed while this replica waits for the Lease.
        Role::Standby => (StatusCode::OK, "standby: waiting for the leader Lease"),
        Role::Leader if probes.shared.is_ready() => (StatusCode::OK, "ok"),
        Role::Leader => (StatusCode::SERVICE_UNAVAILABLE, "caches not synced"),
    }
}

async fn metrics(State(probes): State<Probes>) -> impl IntoResponse {
    match probes.metrics.encode() {
        Ok(body) => (StatusCode::OK, [(header::CONTENT_TYPE, OPENMETRICS)], body).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// The probe routes.
pub fn health_routes(probes: Probes) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(probes)
}

/// The metrics route.
pub fn metrics_routes(probes: Probes) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(probes)
}

/// Binds `addr` now (so a taken port fails start-up) and returns the server future.
pub async fn bind(
    addr: SocketAddr,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<impl Future<Output = std::io::Result<()>>, ServeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError { addr, source })?;
    Ok(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
    })
}
