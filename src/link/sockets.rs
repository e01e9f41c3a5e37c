//! TCP connections to the API server that find out within seconds that the other end is gone
//! (docs/operations.md, "Network partitions"), and that leave nothing behind when they close.
//!
//! - Keep-alive probes start after [`KEEPALIVE_IDLE`] of silence, [`KEEPALIVE_INTERVAL`] apart;
//!   [`KEEPALIVE_PROBES`] unanswered ones end the connection: an idle watch or a request
//!   waiting for its answer on a dead connection fails in about 5 s.
//! - `TCP_USER_TIMEOUT` ends a connection whose sent data has gone unacknowledged for
//!   [`USER_TIMEOUT`], where keep-alive does not apply (a request still being sent).
//! - A closed connection is reset (`SO_LINGER` 0): what was still queued is discarded, never
//!   delivered after the heal of a partition, so a write the operator gave up on (a replica
//!   that lost its Lease, a request abandoned) cannot reach the API server later.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower::Service;
use tracing::debug;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(2);
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
pub const KEEPALIVE_PROBES: u32 = 3;
pub const USER_TIMEOUT: Duration = Duration::from_secs(5);
/// TCP connect; the TLS handshake on top is bounded by the keep-alive and the user timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The plain TCP connector under the client's TLS, with the options above.
#[derive(Clone)]
pub struct Connector {
    http: HttpConnector,
}

impl Connector {
    pub fn new() -> Self {
        let mut http = HttpConnector::new();
        // The scheme is TLS's business, one layer up.
        http.enforce_http(false);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_keepalive(Some(KEEPALIVE_IDLE));
        http.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
        http.set_keepalive_retries(Some(KEEPALIVE_PROBES));
        Self { http }
    }
}

impl Default for Connector {
    fn default() -> Self {
        Self::new()
    }
}

/// Sets the options `HttpConnector` has no setting for.
fn tune(stream: &TcpStream) -> std::io::Result<()> {
    let socket = socket2::SockRef::from(stream);
    socket.set_linger(Some(Duration::ZERO))?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    socket.set_tcp_user_timeout(Some(USER_TIMEOUT))?;
    Ok(())
}

impl Service<Uri> for Connector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.http.call(uri);
        Box::pin(async move {
            let stream = connecting.await?;
            // A socket that keeps the kernel's defaults still works; it only notices a dead
            // peer later.
            if let Err(error) = tune(stream.inner()) {
                debug!(%error, "cannot set TCP options on the API server connection");
            }
            Ok(stream)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_carry_keepalive_user_timeout_and_reset_on_close() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let uri: Uri = format!("http://127.0.0.1:{port}").parse().unwrap();
        let stream = Connector::new().call(uri).await.unwrap();
        let socket = socket2::SockRef::from(stream.inner());
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.tcp_keepalive_time().unwrap(), KEEPALIVE_IDLE);
        assert_eq!(socket.tcp_keepalive_interval().unwrap(), KEEPALIVE_INTERVAL);
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), KEEPALIVE_PROBES);
        assert_eq!(socket.linger().unwrap(), Some(Duration::ZERO));
        #[cfg(target_os = "linux")]
        assert_eq!(socket.tcp_user_timeout().unwrap(), Some(USER_TIMEOUT));
    }
}
