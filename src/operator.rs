//! Running the operator (docs/operations.md, "Start-up"): logging, client, discovery,
//! endpoints, leader election, one controller per watched scope, and a graceful stop on
//! SIGTERM/SIGINT: in-flight reconciles finish (bounded), the Lease is released, the endpoints
//! stop; a second signal exits at once.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::FutureExt;
use futures::future::Either;
use futures::future::{BoxFuture, Shared as SharedFuture};
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::api::kinds::Kinds;
use crate::api::{keys, owner};
use crate::cli::{ListenAddr, RunArgs};
use crate::controller::config::Validation;
use crate::controller::discovery::{self, DiscoveryError};
use crate::controller::openapi::PodSchemas;
use crate::controller::{self, Shared, SharedParts};
use crate::leader::{Election, LeaderError, LostLease, Role};
use crate::lifecycle::plan::Settings;
use crate::link::error::{self as api_error, describe};
use crate::link::{self, Link};
use crate::metrics::Metrics;
use crate::permissions::{self, PermissionError};
use crate::server::{self, Probes, ServeError};
use crate::startup::{self, Failure, Next};

/// Why the operator could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(
        "cannot configure the Kubernetes client (in-cluster, KUBECONFIG or ~/.kube/config): {0}"
    )]
    Config(#[source] kube::config::InferConfigError),
    #[error("cannot configure the Kubernetes client for {url}: {}", describe(.source))]
    Client {
        url: String,
        #[source]
        source: kube::Error,
    },
    /// A request got no answer at all: the address is what the reader needs to check.
    #[error("cannot reach the Kubernetes API server at {url}: {error}")]
    Unreachable {
        url: String,
        #[source]
        error: Box<RunError>,
    },
    /// A start-up attempt got no answer in time: the connection went silent.
    #[error("no answer within {}", crate::duration::format(*.0))]
    NoAnswer(Duration),
    /// Start-up waited `--startup-timeout` for an API server that kept failing.
    #[error("{error} (still failing after --startup-timeout={})", crate::duration::format(*.timeout))]
    StartupTimeout {
        timeout: Duration,
        #[source]
        error: Box<RunError>,
    },
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error(transparent)]
    Permissions(#[from] PermissionError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error(transparent)]
    Leader(LeaderError),
    /// Reconciling stopped the moment the Lease was lost; a restart rejoins as a standby.
    #[error("{0}; exiting so that a restart rejoins as a standby")]
    LostLease(LostLease),
}

impl From<LeaderError> for RunError {
    fn from(e: LeaderError) -> Self {
        match e {
            LeaderError::Lost(lost) => RunError::LostLease(lost),
            other => RunError::Leader(other),
        }
    }
}

impl From<&RunArgs> for Settings {
    fn from(args: &RunArgs) -> Self {
        Settings {
            creation_timeout: args.browser_pod_creation_timeout,
            deletion_timeout: args.browser_pod_deletion_timeout,
            max_lifetime: (!args.browser_max_lifetime.is_zero())
                .then_some(args.browser_max_lifetime),
            failed_retention: args.failed_browser_retention,
            outage_retention: args.outage_retention,
            queue_timeout: args.queue_timeout,
            policy: args.policy.policy(),
            ..Settings::default()
        }
    }
}

/// On-demand refetches of the cluster's Pod schema happen at most this often.
const SCHEMA_REFETCH_INTERVAL: Duration = Duration::from_secs(60);

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

impl RunError {
    /// This error and its causes, outermost first.
    fn chain(&self) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
        std::iter::successors(Some(self as &(dyn std::error::Error + 'static)), |e| {
            e.source()
        })
    }

    /// Whether the error comes from a request that got no answer from the API server.
    fn is_transport(&self) -> bool {
        self.chain().any(|e| {
            let lost = e.downcast_ref().is_some_and(api_error::is_transport);
            lost || matches!(e.downcast_ref(), Some(RunError::NoAnswer(_)))
        })
    }

    /// Whether a retry may succeed: no answer, a timeout, or an answer of the moment (5xx,
    /// 429) anywhere in the chain of causes.
    fn failure(&self) -> Failure {
        let of_the_moment = |e: &(dyn std::error::Error + 'static)| match e.downcast_ref() {
            Some(kube::Error::Api(status)) => status.code >= 500 || status.code == 429,
            Some(_) => false,
            None => matches!(e.downcast_ref(), Some(PermissionError::Timeout(_))),
        };
        if self.is_transport() || self.chain().any(of_the_moment) {
            Failure::OfTheMoment
        } else {
            Failure::Lasting
        }
    }

    /// This error, naming the API server's address when the server could not be reached.
    pub fn naming_server(self, url: &str) -> RunError {
        if self.is_transport() {
            RunError::Unreachable {
                url: url.to_string(),
                error: Box::new(self),
            }
        } else {
            self
        }
    }
}

/// Ends a spawned task when dropped: a helper task of one run ends with it, whatever path
/// the run leaves by.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs the operator with a client inferred like kube-rs does, until a signal stops it.
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    let config = kube::Config::infer().await.map_err(RunError::Config)?;
    let url = config.cluster_url.to_string();
    let link = Link::new();
    let client = link.client(config).map_err(|source| RunError::Client {
        url: url.clone(),
        source,
    })?;
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(signals(stop_tx));
    run_with_client(
        client,
        link,
        args,
        Arc::new(Metrics::new()),
        stop_future(&stop_rx),
    )
    .await
    .map_err(|e| e.naming_server(&url))
}

/// The Browser controller and the BrowserConfig validator of every watched scope until
/// `stop` resolves; then in-flight reconciles get `grace` to finish.
///
/// Two cases do not wait: kube-runtime never ends a controller that is stopped before its
/// cache completed the first list, so a stop before the caches are synced ends at once (a
/// reconcile writes nothing before its caches are synced), and the validators are not waited
/// for once the Browser controllers have drained (a validation is a dry run and one
/// idempotent status apply, repeated by whoever runs next).
async fn reconcile_until_stopped(
    shared: Arc<Shared>,
    config_events: Recorder,
    args: &RunArgs,
    stop: Stop,
) {
    let (namespaces, grace) = (&args.namespaces, args.shutdown_timeout);
    let scopes: Vec<Option<String>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().cloned().map(Some).collect()
    };
    let validation = Validation {
        shared: shared.clone(),
        events: config_events,
        prepull: args.enable_prepull.then(|| args.prepull_images.images()),
    };
    let validators = futures::future::join_all(
        scopes
            .iter()
            .cloned()
            .map(|ns| controller::config::run_scope(validation.clone(), ns, stop.clone())),
    );
    let controllers = controller::run(shared.clone(), scopes, stop.clone());
    let work = async {
        if let Either::Right((_, controllers)) =
            futures::future::select(Box::pin(controllers), Box::pin(validators)).await
        {
            controllers.await;
        }
    };
    tokio::pin!(work);
    tokio::select! {
        () = &mut work => return,
        () = stop => {}
    }
    if !shared.is_ready() {
        info!("stopping before the caches were synced: nothing to finish");
        return;
    }
    if tokio::time::timeout(grace, work).await.is_err() {
        warn!(
            timeout = %crate::duration::format(grace),
            "in-flight reconciles did not finish within --shutdown-timeout; stopping anyway"
        );
    }
}

/// Discovery and the permission check, once: the kinds to watch.
async fn reach_once(
    client: &Client,
    args: &RunArgs,
    election: Option<&Election>,
) -> Result<Kinds, RunError> {
    let kinds = discovery::resolve(
        client,
        args.browser_api_group.as_deref(),
        args.browserconfig_api_group.as_deref(),
    )
    .await?;
    // Fail at start with every missing RBAC rule rather than later inside a watch or a write.
    let mut needed = permissions::required(&kinds, &args.namespaces);
    if args.enable_prepull {
        needed.extend(permissions::prepull(&args.namespaces));
    }
    if let Some(election) = election {
        needed.extend(permissions::lease(&election.namespace));
    }
    permissions::check_accesses(client, needed, permissions::CHECK_TIMEOUT).await?;
    Ok(kinds)
}

/// [`reach_once`] until it succeeds, a lasting error, `--startup-timeout`, or `stop` (then
/// `None`). Not ready meanwhile; each failed attempt is logged.
async fn reach(
    client: &Client,
    link: &Link,
    args: &RunArgs,
    election: Option<&Election>,
    stop: Stop,
) -> Result<Option<Kinds>, RunError> {
    let began = tokio::time::Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let since = if attempts == 1 {
            Duration::ZERO
        } else {
            began.elapsed()
        };
        let limit = startup::attempt_limit(since, args.startup_timeout);
        let error = match tokio::time::timeout(limit, reach_once(client, args, election)).await {
            Ok(Ok(kinds)) => return Ok(Some(kinds)),
            Ok(Err(e)) => e,
            Err(_) => RunError::NoAnswer(limit),
        };
        let waited = began.elapsed();
        let mut failure = error.failure();
        // A kube-apiserver that is starting already answers, before its CRDs and RBAC are
        // loaded: a missing CRD or permission lasts only once it says it is ready.
        if failure == Failure::Lasting && !link::api_ready(client).await {
            failure = Failure::OfTheMoment;
        }
        match startup::after_failure(failure, attempts, waited, args.startup_timeout) {
            Next::GiveUp if attempts > 1 => {
                return Err(RunError::StartupTimeout {
                    timeout: args.startup_timeout,
                    error: Box::new(error),
                });
            }
            Next::GiveUp => return Err(error),
            Next::RetryIn(delay) => {
                warn!(
                    server = link.server(),
                    error = %error,
                    retry_in = %crate::duration::format(delay),
                    "the API server is not answering yet: waiting for it (--startup-timeout)"
                );
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = stop.clone() => return Ok(None),
                }
            }
        }
    }
}

/// Runs the operator on `client` until `stop` resolves, recording into `metrics`; used by
/// `run` and by tests.
///
/// The endpoints come up first: `/healthz` answers while start-up waits for an API server
/// that is away, and `/readyz` says not ready. With `--enable-leader-election` the
/// controllers start only once this replica holds the Lease. Losing the Lease drops the
/// controllers at once and returns [`RunError::LostLease`] (the process then exits non-zero
/// and restarts as a standby). After `stop`, in-flight reconciles get `--shutdown-timeout`,
/// the Lease is released, then the endpoints stop.
pub async fn run_with_client(
    client: Client,
    link: Link,
    args: RunArgs,
    metrics: Arc<Metrics>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let stop: Stop = stop.boxed().shared();
    let election = Election::from_args(&args)?;
    let (role_tx, role) = watch::channel(match election {
        Some(_) => Role::Standby,
        None => Role::Leader,
    });
    let started = Arc::new(OnceLock::new());
    let probes = Probes {
        started: started.clone(),
        metrics: metrics.clone(),
        role,
    };

    // The endpoints outlive the controllers: they stop last, after the Lease is released.
    let (halt_tx, halt_rx) = watch::channel(false);
    let halt = stop_future(&halt_rx);
    let mut servers = Vec::new();
    let on = |addr: ListenAddr| (addr != ListenAddr::Off).then_some(addr);
    match (on(args.health_probe_bind_address), on(args.metrics_addr)) {
        (Some(health), Some(metrics)) if health == metrics => {
            let router =
                server::health_routes(probes.clone()).merge(server::metrics_routes(probes));
            servers.push(server::bind(health, router, halt.clone()).await?.boxed());
        }
        (health, metrics) => {
            if let Some(addr) = health {
                let router = server::health_routes(probes.clone());
                servers.push(server::bind(addr, router, halt.clone()).await?.boxed());
            }
            if let Some(addr) = metrics {
                let router = server::metrics_routes(probes);
                servers.push(server::bind(addr, router, halt.clone()).await?.boxed());
            }
        }
    }
    let servers = futures::future::join_all(servers.into_iter().map(tokio::spawn));

    let result = serve(
        client, link, &args, metrics, election, role_tx, started, stop,
    )
    .await;

    let _ = halt_tx.send(true);
    for served in servers.await {
        if let Ok(Err(e)) = served {
            error!(error = %e, "endpoint server failed");
        }
    }
    if result.is_ok() {
        info!("stopped");
    }
    result
}

/// Start-up from discovery on, then the controllers (under the Lease, with leader election)
/// until `stop`.
#[allow(clippy::too_many_arguments)]
async fn serve(
    client: Client,
    link: Link,
    args: &RunArgs,
    metrics: Arc<Metrics>,
    election: Option<Election>,
    role_tx: watch::Sender<Role>,
    started: Arc<OnceLock<Arc<Shared>>>,
    stop: Stop,
) -> Result<(), RunError> {
    let Some(kinds) = reach(&client, &link, args, election.as_ref(), stop.clone()).await? else {
        info!("stopped while waiting for the API server");
        return Ok(());
    };
    let namespaces = match args.namespaces.as_slice() {
        [] => "all".to_string(),
        namespaces => namespaces.join(","),
    };
    info!(
        version = env!("CARGO_PKG_VERSION"),
        server = link.server(),
        browser = %kinds.browser.api_version,
        browserconfig = %kinds.browserconfig.api_version,
        namespaces,
        "started"
    );
    // Discovery answered: from here on the link is watched.
    let probe = tokio::spawn(link.clone().probe(
        client.clone(),
        args.api_probe_timeout,
        metrics.clone(),
    ));
    let _probe = AbortOnDrop(probe);
    let (shared, config_events) = shared(client.clone(), link, kinds, args, metrics).await;
    let _ = started.set(shared.clone());

    let work =
        || reconcile_until_stopped(shared.clone(), config_events.clone(), args, stop.clone());
    match &election {
        None => {
            work().await;
            Ok(())
        }
        Some(election) => election
            .lead(&client, &role_tx, stop.clone(), work)
            .await
            .map_err(RunError::from),
    }
}

/// What the controllers of every scope share, once the kinds are known and the Pod schema
/// read; and the recorder of the Events on BrowserConfigs (rare: a refused validation,
/// pre-pull changes), which are published inline.
async fn shared(
    client: Client,
    link: Link,
    kinds: Kinds,
    args: &RunArgs,
    metrics: Arc<Metrics>,
) -> (Arc<Shared>, Recorder) {
    // Before any Browser is cached: the caches keep each one's owner apart.
    owner::set_label(&args.fair_share_label);
    let instance = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "browser-controller".into());
    // Before any pod is rendered; without a schema pods go out unpruned.
    let schemas = Arc::new(PodSchemas::new(client.clone(), SCHEMA_REFETCH_INTERVAL));
    schemas.load().await;
    let reporter = Reporter {
        controller: keys::MANAGER.into(),
        instance: Some(instance.clone()),
    };
    let config_events = Recorder::new(client.clone(), reporter);
    let shared = Shared::new(SharedParts {
        client,
        link,
        kinds,
        settings: Settings::from(args),
        max_workers: args.max_workers,
        metrics,
        schemas,
        instance,
    });
    (shared, config_events)
}
