//! HTTP endpoints (docs/operations.md, "Endpoints"): `/healthz` and `/readyz` on the probe
//! address, `/metrics` on the metrics address (one listener serves both when the addresses are
//! equal).

use std::io::ErrorKind;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use futures::Future;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::watch;
use tracing::info;

use crate::cli::ListenAddr;
use crate::controller::Shared;
use crate::leader::Role;
use crate::metrics::Metrics;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why an endpoint could not be served.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct ServeError {
    pub addr: ListenAddr,
    #[source]
    pub source: std::io::Error,
}

/// What the endpoints read.
#[derive(Clone)]
pub struct Probes {
    /// Set once start-up reached the API server (discovery and the permission check passed).
    pub started: Arc<OnceLock<Arc<Shared>>>,
    pub metrics: Arc<Metrics>,
    pub role: watch::Receiver<Role>,
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(probes): State<Probes>) -> impl IntoResponse {
    let Some(shared) = probes.started.get() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "starting: waiting for the API server",
        );
    };
    let role = *probes.role.borrow();
    match role {
        // Ready but idle: a rollout may proceed while this replica waits for the Lease.
        Role::Standby => (StatusCode::OK, "standby: waiting for the leader Lease"),
        Role::Leader if shared.is_ready() => (StatusCode::OK, "ok"),
        Role::Leader => (StatusCode::SERVICE_UNAVAILABLE, "caches not synced"),
    }
}

async fn metrics(State(probes): State<Probes>) -> impl IntoResponse {
    probes
        .metrics
        .leader(*probes.role.borrow() == crate::leader::Role::Leader);
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

/// Pending connections per listener.
const BACKLOG: i32 = 1024;

fn listen_on(addr: SocketAddr, dual_stack: bool) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if dual_stack {
        // Explicit: the system default (net.ipv6.bindv6only) may be IPv6 only.
        socket.set_only_v6(false)?;
    }
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// A listener on `addr`. `:port` is one dual-stack socket on `[::]` that takes IPv4
/// connections too; on a host without IPv6 it is `0.0.0.0` instead.
fn listener(addr: ListenAddr) -> std::io::Result<std::net::TcpListener> {
    match addr {
        ListenAddr::At(addr) => listen_on(addr, false),
        ListenAddr::AllAddresses(port) => {
            match listen_on(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)), true) {
                Ok(listener) => Ok(listener),
                // The port is what fails; IPv4 would fail the same way.
                Err(e)
                    if matches!(e.kind(), ErrorKind::AddrInUse | ErrorKind::PermissionDenied) =>
                {
                    Err(e)
                }
                Err(e) => {
                    info!(port, error = %e, "no IPv6 on this host: listening on IPv4 only");
                    listen_on(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)), false)
                }
            }
        }
        ListenAddr::Off => Err(std::io::Error::new(
            ErrorKind::InvalidInput,
            "the endpoint is switched off",
        )),
    }
}

/// Binds `addr` now (so a taken port fails start-up) and returns the server future.
pub async fn bind(
    addr: ListenAddr,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<impl Future<Output = std::io::Result<()>>, ServeError> {
    let listener = listener(addr)
        .and_then(tokio::net::TcpListener::from_std)
        .map_err(|source| ServeError { addr, source })?;
    Ok(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
    })
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{IpAddr, TcpStream};

    use super::*;

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap()
    }

    fn healthz(ip: IpAddr, port: u16) -> String {
        let mut stream = TcpStream::connect((ip, port)).unwrap();
        write!(
            stream,
            "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }

    fn has_ipv6_loopback() -> bool {
        std::net::TcpListener::bind("[::1]:0").is_ok()
    }

    #[tokio::test]
    async fn all_addresses_serve_ipv4_and_ipv6_on_one_port() {
        let port = free_port();
        let router = Router::new().route("/healthz", get(healthz_handler));
        let served = bind(
            ListenAddr::AllAddresses(port),
            router,
            std::future::pending(),
        )
        .await
        .unwrap();
        let server = tokio::spawn(served);
        let v4 = tokio::task::spawn_blocking(move || healthz(IpAddr::from([127, 0, 0, 1]), port));
        assert!(v4.await.unwrap().starts_with("HTTP/1.1 200"));
        if has_ipv6_loopback() {
            let v6 = tokio::task::spawn_blocking(move || {
                healthz(IpAddr::from(Ipv6Addr::LOCALHOST), port)
            });
            assert!(v6.await.unwrap().starts_with("HTTP/1.1 200"));
        } else {
            println!("no IPv6 loopback on this host: the IPv6 half is not checked");
        }
        server.abort();
    }

    #[tokio::test]
    async fn a_taken_port_is_an_error_naming_the_address() {
        let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let err = bind(
            ListenAddr::AllAddresses(port),
            Router::new(),
            std::future::pending(),
        )
        .await
        .err()
        .unwrap();
        assert_eq!(
            err.to_string().split(": ").next(),
            Some(format!("cannot listen on :{port}").as_str())
        );
        assert_eq!(err.source.kind(), ErrorKind::AddrInUse);
    }

    async fn healthz_handler() -> &'static str {
        "ok"
    }
}
