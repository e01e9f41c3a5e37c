//! Running the operator (SPEC §6): logging, client, discovery, endpoints, one controller per
//! watched scope, and a graceful stop on SIGTERM/SIGINT (a second signal exits at once).

use std::sync::Arc;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared as SharedFuture};
use kube::Client;
use tokio::sync::watch;
use tracing::{error, info};
use tracing_subscriber::EnvFilter;

use crate::api::discovery::{self, DiscoveryError};
use crate::cli::{LogFormat, RunArgs};
use crate::config_controller;
use crate::controller::{self, Shared};
use crate::lifecycle::decide::Settings;
use crate::metrics::Metrics;
use crate::permissions::{self, PermissionError};
use crate::server::{self, Probes, ServeError};

/// Why the operator could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(
        "cannot configure the Kubernetes client (in-cluster, KUBECONFIG or ~/.kube/config): {0}"
    )]
    Client(#[source] kube::Error),
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error(transparent)]
    Permissions(#[from] PermissionError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("invalid --log-level: {0}")]
    LogLevel(String),
}

/// Sets up `tracing`: RUST_LOG wins over `--log-level`; text or JSON lines on stderr.
pub fn init_logging(format: LogFormat, level: &str) -> Result<(), RunError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if !env.is_empty() => EnvFilter::try_new(env),
        _ => EnvFilter::try_new(level),
    }
    .map_err(|e| RunError::LogLevel(e.to_string()))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second initialisation (tests) keeps the first subscriber.
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
    Ok(())
}

impl From<&RunArgs> for Settings {
    fn from(args: &RunArgs) -> Self {
        Settings {
            creation_timeout: args.browser_pod_creation_timeout,
            deletion_timeout: args.browser_pod_deletion_timeout,
            max_lifetime: (!args.browser_max_lifetime.is_zero())
                .then_some(args.browser_max_lifetime),
            failed_retention: args.failed_browser_retention,
            ..Settings::default()
        }
    }
}

type Stop = SharedFuture<BoxFuture<'static, ()>>;

fn stop_future(rx: &watch::Receiver<bool>) -> Stop {
    let mut rx = rx.clone();
    async move {
        let _ = rx.wait_for(|stop| *stop).await;
    }
    .boxed()
    .shared()
}

/// Waits for SIGTERM or SIGINT; a second one exits the process at once.
async fn signals(stop: watch::Sender<bool>) {
    wait_for_signal().await;
    info!("stopping: finishing in-flight reconciles");
    let _ = stop.send(true);
    wait_for_signal().await;
    error!("second signal: exiting now");
    std::process::exit(1);
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {},
                _ = int.recv() => {},
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}

/// Runs the operator with a client inferred like kube-rs does, until a signal stops it.
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    let client = Client::try_default().await.map_err(RunError::Client)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(signals(stop_tx));
    run_with_client(
        client,
        args,
        Arc::new(Metrics::new()),
        stop_future(&stop_rx),
    )
    .await
}

/// Runs the operator on `client` until `stop` resolves, recording into `metrics`; used by
/// `run` and by tests.
pub async fn run_with_client(
    client: Client,
    args: RunArgs,
    metrics: Arc<Metrics>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let stop: Stop = stop.boxed().shared();
    let kinds = discovery::resolve(
        &client,
        args.browser_api_group.as_deref(),
        args.browserconfig_api_group.as_deref(),
    )
    .await?;
    info!(browser = %kinds.browser.api_version, browserconfig = %kinds.browserconfig.api_version, "resolved kinds");
    // Fail at start with every missing RBAC rule rather than later inside a watch or a write.
    permissions::check(&client, &kinds, &args.namespaces).await?;
    let instance = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "browser-controller".into());
    let shared = Shared::new(
        client,
        kinds,
        Settings::from(&args),
        args.max_workers,
        metrics.clone(),
        instance,
    );
    let probes = Probes {
        shared: shared.clone(),
        metrics,
    };

    let mut servers = Vec::new();
    match (args.health_probe_bind_address.0, args.metrics_addr.0) {
        (Some(health), Some(metrics)) if health == metrics => {
            let router =
                server::health_routes(probes.clone()).merge(server::metrics_routes(probes));
            servers.push(server::bind(health, router, stop.clone()).await?.boxed());
        }
        (health, metrics) => {
            if let Some(addr) = health {
                let router = server::health_routes(probes.clone());
                servers.push(server::bind(addr, router, stop.clone()).await?.boxed());
            }
            if let Some(addr) = metrics {
                let router = server::metrics_routes(probes);
                servers.push(server::bind(addr, router, stop.clone()).await?.boxed());
            }
        }
    }
    let servers = futures::future::join_all(servers.into_iter().map(tokio::spawn));

    let scopes: Vec<Option<String>> = if args.namespaces.is_empty() {
        vec![None]
    } else {
        args.namespaces.iter().cloned().map(Some).collect()
    };
    let validators = scopes.iter().cloned().map(|ns| {
        config_controller::run_scope(
            shared.client.clone(),
            shared.kinds.clone(),
            ns,
            shared.verdicts.clone(),
            shared.metrics.clone(),
            stop.clone(),
        )
    });
    let validators = futures::future::join_all(validators);
    let controllers = scopes
        .into_iter()
        .map(|ns| controller::run_scope(shared.clone(), ns, stop.clone()));
    futures::future::join(futures::future::join_all(controllers), validators).await;
    for result in servers.await {
        if let Ok(Err(e)) = result {
            error!(error = %e, "endpoint server failed");
        }
    }
    info!("stopped");
    Ok(())
}
