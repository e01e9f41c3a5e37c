//! The operator's link to the API server (docs/operations.md, "Network partitions").
//!
//! A partition leaves connections open while packets stop: requests and watches would wait
//! on them until some long timeout. Two things find out within seconds instead:
//!
//! - every connection carries TCP keep-alive, a user timeout and reset-on-close
//!   ([`sockets`]), so a dead one fails by itself;
//! - a probe asks the API server for `/readyz` every second ([`probe`]); two probes without any
//!   answer mark the link lost ([`reach`]), and the first answer regains it. Each change moves
//!   the link's epoch on: requests still waiting are abandoned ([`abort`]), every watch starts
//!   anew and relists, `/readyz` reports not ready while the link is lost.
//!
//! A relist reconciles every Browser of its scope, so a healed partition is caught up as a
//! restart of the API server is.

pub mod abort;
pub mod error;
pub mod sockets;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::client::ConfigExt;
use kube::{Client, Config};
use tokio::sync::watch;
use tower::ServiceBuilder;
use tracing::{info, warn};

use crate::metrics::Metrics;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
use crate::reach::{self, Change, Reach};
use abort::AbortLayer;

/// What requests and watches follow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkState {
    pub reachable: bool,
    /// Moves on at every change of `reachable`.
    pub epoch: u64,
    /// When the API server last answered again after the link was lost.
    pub regained: Option<jiff::Timestamp>,
}

/// The link's state, shared by the client, the watches, `/readyz` and the probe.
#[derive(Clone)]
pub struct Link {
    state: Arc<watch::Sender<LinkState>>,
    /// The API server's address, once a client for it was made: logs name it.
    server: Arc<std::sync::OnceLock<String>>,
}

impl Default for Link {
    fn default() -> Self {
        Self::new()
    }
}

impl Link {
    /// A link taken as reachable: the operator starts once discovery has answered.
    pub fn new() -> Self {
        Self {
            state: Arc::new(watch::Sender::new(LinkState {
                reachable: true,
                epoch: 0,
                regained: None,
            })),
            server: Arc::default(),
        }
    }

    /// The API server's address (`the API server` for a client made elsewhere).
    pub fn server(&self) -> &str {
        self.server.get().map_or("the API server", String::as_str)
    }

    pub fn state(&self) -> LinkState {
        *self.state.borrow()
    }

    pub fn is_reachable(&self) -> bool {
        self.state().reachable
    }

    /// Changes of the state, for watches that start anew at each epoch.
    pub fn subscribe(&self) -> watch::Receiver<LinkState> {
        self.state.subscribe()
    }

    /// The layer that abandons a client's waiting requests when the epoch moves on.
    pub fn abort_layer(&self) -> AbortLayer {
        AbortLayer::new(self.subscribe())
    }

    fn publish(&self, reach: &Reach, change: Change) {
        let regained = match change {
            Change::Regained => Some(jiff::Timestamp::now()),
            Change::Lost => self.state().regained,
        };
        self.state.send_replace(LinkState {
            reachable: reach.reachable(),
            epoch: reach.epoch(),
            regained,
        });
    }

    /// The operator's client for `config`: connections from [`sockets`], requests that follow
    /// this link's epochs, and none of the kube client's own retry of 429, 503 and 504 answers
    /// (it retries one request up to 15 times with delays growing towards minutes, holding a
    /// watch or a reconcile long after the server is back; the operator retries on its own
    /// terms: a watch backoff of a few seconds and per-Browser requeues).
    pub fn client(&self, mut config: Config) -> Result<Client, kube::Error> {
        let _ = self.server.set(config.cluster_url.to_string());
        config.default_retry = false;
        if config.proxy_url.is_some() {
            // kube's own stack serves (or refuses) a proxy; the epochs still apply.
            return Ok(kube::client::ClientBuilder::try_from(config)?
                .with_layer(&self.abort_layer())
                .build());
        }
        let https = config.rustls_https_connector_with_connector(sockets::Connector::new())?;
        let http =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(https);
        let service = ServiceBuilder::new()
            .layer(self.abort_layer())
            .layer(config.base_uri_layer())
            .option_layer(config.auth_layer()?)
            .layer(config.extra_headers_layer()?)
            .map_err(BoxError::from)
            .service(http);
        Ok(Client::new(service, config.default_namespace))
    }

    /// Probes the API server through `client` until the process ends, publishing each change
    /// (`timeout`: how long a probe may wait for its answer while the link is up). While the
    /// link is up, one probe at a time; while it is lost, a new one every
    /// [`reach::PROBE_EVERY_WHILE_LOST`] without waiting for the earlier ones, which hang on
    /// connection attempts into the partition: the first after the heal is answered at once.
    pub async fn probe(self, client: Client, timeout: Duration, metrics: Arc<Metrics>) {
        let mut reach = Reach::default();
        let mut probes = futures::stream::FuturesUnordered::new();
        let mut next = tokio::time::Instant::now() + reach::PROBE_EVERY;
        loop {
            let (pause, wait) = reach.next_probe(timeout);
            let launch = !reach.reachable() || probes.is_empty();
            tokio::select! {
                () = tokio::time::sleep_until(next), if launch => {
                    let client = client.clone();
                    probes.push(async move {
                        tokio::time::timeout(wait, readyz(&client)).await.unwrap_or(false)
                    });
                    next = tokio::time::Instant::now() + pause;
                }
                Some(answered) = probes.next() => {
                    if reach.reachable() {
                        next = tokio::time::Instant::now() + pause;
                    }
                    let Some(change) = reach.observe(answered) else {
                        continue;
                    };
                    match change {
                        Change::Lost => warn!(
                            "the API server stopped answering: abandoning waiting requests, restarting watches, not ready until it answers again"
                        ),
                        Change::Regained => {
                            // The probes still waiting went into the partition.
                            probes.clear();
                            info!("the API server answers again: restarting watches and relisting");
                        }
                    }
                    next = tokio::time::Instant::now() + reach.next_probe(timeout).0;
                    metrics.api_reachable(reach.reachable());
                    self.publish(&reach, change);
                }
            }
        }
    }
}

/// Whether the API server says it is ready: `GET /readyz` answers, and not with a 5xx (it
/// answers 500 while starting). A server that does not let this identity read it (403) or does
/// not serve it (404) is taken as ready: nothing says otherwise.
pub async fn api_ready(client: &Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return true;
    };
    match client.request_text(request).await {
        Err(kube::Error::Api(status)) => status.code < 500,
        Ok(_) | Err(_) => true,
    }
}

/// Whether the API server gave any answer to `GET /readyz` (exempt from API Priority and
/// Fairness, and readable by every identity): an error status is an answer too.
async fn readyz(client: &Client) -> bool {
    let request = match http::Request::get("/readyz").body(Vec::new()) {
        Ok(request) => request,
        Err(_) => return false,
    };
    match client.request_text(request).await {
        Ok(_) | Err(kube::Error::Api(_)) => true,
        Err(_) => false,
    }
}
