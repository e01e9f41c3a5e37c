//! Where the benchmark runs — the in-process API server double, or a cluster named by a
//! kubeconfig — and the operator's client, which notes every request it sends (and when the
//! answers to the writes on a Browser's path to its pod arrive).

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::FutureExt;
use futures::future::BoxFuture;
use http::{Request, header};
use kube::Client;
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::runtime::Handle;
use tower::{BoxError, Layer, Service, ServiceExt};

use crate::BenchError;
use crate::requests::RequestLog;
use crate::support::apiserver::ApiServer;

/// The API the benchmark talks to; cheap to clone into the operator's runtime.
#[derive(Clone)]
pub enum Backend {
    /// The double, whose request handling runs on `serve_on` (the benchmark's runtime), so
    /// that the operator's threads do only the operator's work.
    Double {
        server: ApiServer,
        serve_on: Handle,
    },
    Kubeconfig(Box<kube::Config>),
}

impl Backend {
    pub async fn from_kubeconfig(path: &Path) -> Result<Self, BenchError> {
        let kubeconfig = Kubeconfig::read_from(path).map_err(BenchError::Kubeconfig)?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(BenchError::Kubeconfig)?;
        Ok(Backend::Kubeconfig(Box::new(config)))
    }

    pub fn describe(&self) -> String {
        match self {
            Backend::Double { .. } => {
                "in-process API server double (crates/testkit/src/apiserver), not a kube-apiserver"
                    .to_string()
            }
            Backend::Kubeconfig(config) => format!("cluster at {}", config.cluster_url),
        }
    }

    /// A plain client on the current runtime (the benchmark itself, the kubelet simulator).
    pub fn client(&self) -> Result<Client, BenchError> {
        match self {
            Backend::Double { server, .. } => Ok(server.client()),
            Backend::Kubeconfig(config) => {
                Client::try_from(config.as_ref().clone()).map_err(BenchError::Client)
            }
        }
    }

    /// The operator's client, built on the current runtime (the operator's), noting each
    /// request in `log` as it is sent.
    pub fn operator_client(&self, log: Arc<RequestLog>) -> Result<Client, BenchError> {
        match self {
            Backend::Double { server, serve_on } => {
                let served = ServeOn {
                    router: server.router(),
                    handle: serve_on.clone(),
                };
                Ok(Client::new(Recording { inner: served, log }, "default"))
            }
            Backend::Kubeconfig(config) => Ok(ClientBuilder::try_from(operator_config(config))
                .map_err(BenchError::Client)?
                .with_layer(&RecordingLayer(log))
                .build()),
        }
    }
}

/// Serves each request of the double on another runtime.
#[derive(Clone)]
struct ServeOn {
    router: axum::Router,
    handle: Handle,
}

impl Service<Request<kube::client::Body>> for ServeOn {
    type Response = axum::response::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let task = self.handle.spawn(self.router.clone().oneshot(request));
        async move {
            let served: Result<_, Infallible> = task.await?;
            served.map_err(BoxError::from)
        }
        .boxed()
    }
}

struct RecordingLayer(Arc<RequestLog>);

impl<S> Layer<S> for RecordingLayer {
    type Service = Recording<S>;

    fn layer(&self, inner: S) -> Recording<S> {
        Recording {
            inner,
            log: self.0.clone(),
        }
    }
}

#[derive(Clone)]
struct Recording<S> {
    inner: S,
    log: Arc<RequestLog>,
}

impl<S, B> Service<Request<B>> for Recording<S>
where
    S: Service<Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let apply = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/apply-patch"));
        let pending = self.log.record(request.method(), request.uri(), apply);
        let answer = self.inner.call(request);
        let log = self.log.clone();
        async move {
            let answer = answer.await;
            if let Some(pending) = pending {
                log.answered(pending);
            }
            answer
        }
        .boxed()
    }
}

/// The operator's client configuration without kube's retry, as `Link::client` builds it.
fn operator_config(config: &kube::Config) -> kube::Config {
    let mut config = config.clone();
    config.default_retry = false;
    config
}
