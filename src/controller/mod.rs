//! Watches, stores, triggers and concurrency: the kube-runtime pipeline that feeds the pure
//! decision (`lifecycle::decide`) and runs its plans (`lifecycle::execute`).
//!
//! Per watched scope (all namespaces, or each `--namespace`) one Controller runs over:
//! a Browser reflector (the trigger), a Pod reflector selected by the operator's label,
//! and a BrowserConfig reflector whose readiness gates reconciles. `managedFields` are
//! stripped before objects enter a store; pods are cut down to what decisions read.
//! Every completed list (the first, and each relist after a watch expired or failed)
//! reconciles every Browser of the scope once the list is in the cache.

mod fresher;
mod stages;
pub mod watch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Future, StreamExt};
use jiff::Timestamp;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::api::discovery::Kinds;
use crate::api::keys;
use crate::api::openapi::PodSchemas;
use crate::config_controller::Verdicts;
use crate::lifecycle::decide::{self, Event, Observed, PodCreation, Settings};
use crate::lifecycle::desired;
use crate::lifecycle::execute::{
    CreateOutcome, ExecuteError, Executed, Target, classify_create_error, to_runtime_event,
};
use crate::metrics::{self, Metrics, Stage};
use fresher::{Fresher, Known};
use watch::WatchHealth;

/// Why a reconcile failed; it is retried with per-object exponential backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Execute(#[from] ExecuteError),
    #[error("reading pod {name}: {source}")]
    ReadPod {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the {0} cache was closed")]
    StoreClosed(&'static str),
    #[error("cannot read the pod as JSON: {0}")]
    Serialize(#[source] serde_json::Error),
    /// The pod was rejected for a field the cluster does not know, and the cluster's Pod
    /// schema has changed since the pod was pruned: the next attempt prunes anew.
    #[error(
        "the cluster rejected the pod for fields its schema lacks; retrying with its new schema: {0}"
    )]
    StaleSchema(String),
}

impl ReconcileError {
    fn kind(&self) -> &'static str {
        match self {
            ReconcileError::Execute(_) => "write",
            ReconcileError::ReadPod { .. } => "read",
            ReconcileError::StoreClosed(_) => "store",
            ReconcileError::Serialize(_) => "serialize",
            ReconcileError::StaleSchema(_) => "schema",
        }
    }
}

/// What every scope shares: the client, kinds, settings, metrics and the event sink.
pub struct Shared {
    pub client: Client,
    pub kinds: Kinds,
    pub settings: Settings,
    pub max_workers: u16,
    pub metrics: Arc<Metrics>,
    pub verdicts: Arc<Verdicts>,
    /// The cluster's Pod schema, which rendered pods are pruned to.
    pub schemas: Arc<PodSchemas>,
    events: mpsc::Sender<(Event, k8s_openapi::api::core::v1::ObjectReference)>,
    watches: Mutex<Vec<Arc<WatchHealth>>>,
}

/// Events are published by a background task so that a reconcile never waits on them.
const EVENT_QUEUE: usize = 4096;

/// The longest wait before a failed reconcile is retried. Short enough that Browsers do not
/// wait long after an API outage that broke no watch (a relist retries them all at once).
const RETRY_MAX: Duration = Duration::from_secs(30);

impl Shared {
    /// Creates the shared state and spawns the event publisher.
    pub fn new(
        client: Client,
        kinds: Kinds,
        settings: Settings,
        max_workers: u16,
        metrics: Arc<Metrics>,
        schemas: Arc<PodSchemas>,
        instance: String,
    ) -> Arc<Self> {
        let (events, mut rx) =
            mpsc::channel::<(Event, k8s_openapi::api::core::v1::ObjectReference)>(EVENT_QUEUE);
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: keys::MANAGER.into(),
                instance: Some(instance),
            },
        );
        let publisher_metrics = metrics.clone();
        tokio::spawn(async move {
            while let Some((event, reference)) = rx.recv().await {
                publisher_metrics.write("create", "events");
                if let Err(e) = recorder
                    .publish(&to_runtime_event(&event), &reference)
                    .await
                {
                    debug!(error = %e, reason = %event.reason, "publishing event failed");
                }
            }
        });
        Arc::new(Self {
            client,
            kinds,
            settings,
            max_workers,
            metrics,
            verdicts: Arc::new(Verdicts::default()),
            schemas,
            events,
            watches: Mutex::new(Vec::new()),
        })
    }

    /// True when every watch of every scope has its list in the cache and is not failing.
    pub fn is_ready(&self) -> bool {
        let watches = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        !watches.is_empty() && watches.iter().all(|w| w.is_up())
    }

    fn watch_health(&self, resource: &'static str) -> Arc<WatchHealth> {
        let health = WatchHealth::new(resource, self.metrics.clone());
        self.watches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(health.clone());
        health
    }
}

/// One watched scope: all namespaces (`None`) or one namespace.
pub struct Scope {
    shared: Arc<Shared>,
    pods: Store<DynamicObject>,
    configs: Store<DynamicObject>,
    pods_health: Arc<WatchHealth>,
    configs_health: Arc<WatchHealth>,
    fresher: Arc<Fresher>,
    failures: Arc<Mutex<HashMap<(String, String), u32>>>,
}

impl Scope {
    fn api(&self, resource: &kube::core::ApiResource, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.shared.client.clone(), ns, resource)
    }

    fn backoff(&self, key: (String, String)) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let count = failures.entry(key).or_insert(0);
        *count = count.saturating_add(1);
        let exp = (*count).min(10);
        Duration::from_millis(250 * (1u64 << exp)).min(RETRY_MAX)
    }

    fn succeeded(&self, key: &(String, String)) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

/// The API of `resource` over one namespace, or all namespaces for `None`.
pub(crate) fn scoped_api(
    client: &Client,
    ns: Option<&str>,
    resource: &kube::core::ApiResource,
) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// Runs the controller of one scope until `shutdown` resolves.
pub async fn run_scope(
    shared: Arc<Shared>,
    namespace: Option<String>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let client = &shared.client;
    let kinds = shared.kinds.clone();
    let ns = namespace.as_deref();
    let fresher = Arc::new(Fresher::default());
    let failures = Arc::new(Mutex::new(HashMap::new()));

    // Each completed list reconciles every Browser of the scope; retries that grew while the
    // API was away start small again.
    let (listed_tx, listed_rx) = futures::channel::mpsc::unbounded::<()>();
    let listed = |failures: Arc<Mutex<HashMap<(String, String), u32>>>| {
        let tx = listed_tx.clone();
        move || {
            failures.lock().unwrap_or_else(|e| e.into_inner()).clear();
            let _ = tx.unbounded_send(());
        }
    };

    let browsers_health = shared.watch_health("browsers");
    let browser_writer = Writer::<DynamicObject>::new(kinds.browser.clone());
    let browser_reader = browser_writer.as_reader();
    let forget_deleted = {
        let (fresher, reader) = (fresher.clone(), browser_reader.clone());
        move |item: &Result<watcher::Event<DynamicObject>, watcher::Error>| match item {
            Ok(watcher::Event::Delete(b)) => {
                if let (Some(ns), Some(name), Some(uid)) = (
                    b.metadata.namespace.as_deref(),
                    b.metadata.name.as_deref(),
                    b.metadata.uid.as_deref(),
                ) {
                    fresher.forget(ns, name, uid);
                }
            }
            Ok(watcher::Event::InitDone) => {
                let kept = reader.state();
                let present: std::collections::HashSet<(&str, &str)> = kept
                    .iter()
                    .filter_map(|b| {
                        Some((
                            b.metadata.namespace.as_deref()?,
                            b.metadata.name.as_deref()?,
                        ))
                    })
                    .collect();
                fresher.retain(|ns, name| present.contains(&(ns, name)));
            }
            _ => {}
        }
    };
    let browsers = watch::watch(
        scoped_api(client, ns, &kinds.browser),
        watcher::Config::default().any_semantic(),
        browsers_health.clone(),
    )
    .modify(stages::strip_managed_fields)
    .reflect(browser_writer)
    .inspect(forget_deleted)
    .inspect(watch::observe(browsers_health, listed(failures.clone())));
    let browsers = watch::live_changes(browsers, false);

    let pods_health = shared.watch_health("pods");
    let pod_writer = Writer::<DynamicObject>::new(kinds.pod.clone());
    let pod_reader = pod_writer.as_reader();
    let pods = watch::watch(
        scoped_api(client, ns, &kinds.pod),
        watcher::Config::default()
            .labels(&keys::managed_pods_selector())
            .any_semantic(),
        pods_health.clone(),
    )
    .modify(stages::prune_pod)
    .inspect(stages::observe_scheduling(
        pod_reader.clone(),
        kinds.pod.clone(),
        shared.metrics.clone(),
    ))
    .reflect(pod_writer)
    .inspect(watch::observe(
        pods_health.clone(),
        listed(failures.clone()),
    ));
    let pods = watch::live_changes(pods, true);

    let configs_health = shared.watch_health("browserconfigs");
    let config_writer = Writer::<DynamicObject>::new(kinds.browserconfig.clone());
    let config_reader = config_writer.as_reader();
    let configs = watch::watch(
        scoped_api(client, ns, &kinds.browserconfig),
        watcher::Config::default().any_semantic(),
        configs_health.clone(),
    )
    .modify(stages::strip_managed_fields)
    .reflect(config_writer)
    .inspect(watch::observe(
        configs_health.clone(),
        listed(failures.clone()),
    ));
    let configs = watch::live_changes(configs, true);

    let scope = Arc::new(Scope {
        shared: shared.clone(),
        pods: pod_reader,
        configs: config_reader,
        pods_health,
        configs_health,
        fresher,
        failures,
    });

    let browser_ar = kinds.browser.clone();
    let pod_mapper_ar = kinds.browser.clone();
    let waiting_reader = browser_reader.clone();
    // Held until the scope stops: the `browsers` gauge reads this cache at scrape time.
    let _gauge_source = shared.metrics.observe_browsers(browser_reader.clone());
    info!(namespace = ns.unwrap_or("<all>"), "watching Browsers");
    Controller::for_stream_with(browsers, browser_reader, browser_ar)
        .watches_stream_with(
            pods,
            move |pod| stages::browser_of_pod(&pod, &pod_mapper_ar),
            kinds.pod.clone(),
        )
        .watches_stream_with(
            configs,
            move |config| match config.metadata.namespace.as_deref() {
                Some(ns) => stages::waiting_browsers(&waiting_reader, ns, &kinds.browser),
                None => Vec::new(),
            },
            kinds.browserconfig.clone(),
        )
        .reconcile_all_on(listed_rx)
        .with_config(ControllerConfig::default().concurrency(shared.max_workers))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, scope)
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "controller event");
            }
        })
        .await;
}

fn error_policy(browser: Arc<DynamicObject>, error: &ReconcileError, scope: Arc<Scope>) -> Action {
    scope.shared.metrics.reconcile_error(error.kind());
    let key = (browser.namespace().unwrap_or_default(), browser.name_any());
    let wait = scope.backoff(key);
    warn!(namespace = %browser.namespace().unwrap_or_default(), name = %browser.name_any(), error = %error, retry_in = ?wait, "reconcile failed");
    Action::requeue(wait)
}

async fn reconcile(
    browser: Arc<DynamicObject>,
    scope: Arc<Scope>,
) -> Result<Action, ReconcileError> {
    let ns = browser.namespace().unwrap_or_default();
    let name = browser.name_any();
    let span = info_span!("reconcile", namespace = %ns, name = %name);
    async move {
        let _guard = scope.shared.metrics.reconcile_started();
        let key = (ns.clone(), name.clone());
        let result = reconcile_inner(browser, &scope, &ns, &name).await;
        if result.is_ok() {
            scope.succeeded(&key);
        }
        result
    }
    .instrument(span)
    .await
}

async fn reconcile_inner(
    browser: Arc<DynamicObject>,
    scope: &Scope,
    ns: &str,
    name: &str,
) -> Result<Action, ReconcileError> {
    let shared = &scope.shared;
    // No decision before the stores are complete: no spurious ConfigNotFound at start-up.
    if !scope.configs_health.synced().await {
        return Err(ReconcileError::StoreClosed("BrowserConfig"));
    }
    if !scope.pods_health.synced().await {
        return Err(ReconcileError::StoreClosed("Pod"));
    }
    // Let go of already: the cache still shows it.
    let Some(mut browser) = scope.fresher.pick_browser(ns, name, browser) else {
        return Ok(Action::await_change());
    };
    let pod_ref = ObjectRef::new_with(name, shared.kinds.pod.clone()).within(ns);
    let pods_api = scope.api(&shared.kinds.pod, ns);
    let pod = match scope.fresher.pick_pod(ns, name, scope.pods.get(&pod_ref)) {
        Some(pod) => Some(pod),
        // Absent from the cache: confirm with a direct read before deciding anything.
        None => pods_api
            .get_opt(name)
            .await
            .map_err(|source| ReconcileError::ReadPod {
                name: name.to_string(),
                source,
            })?
            .map(|mut p| {
                stages::strip_managed_fields(&mut p);
                Arc::new(p)
            }),
    };
    let pod_json = pod
        .as_deref()
        .map(serde_json::to_value)
        .transpose()
        .map_err(ReconcileError::Serialize)?;
    let now = Timestamp::now();
    let schema = shared.schemas.current();
    // Rendered at most once, even when the decision is taken again on a fresher Browser.
    let mut rendered: Option<PodCreation> = None;
    let mut decide_on = |browser: &DynamicObject| {
        let observed = Observed {
            browser,
            pod: pod_json.as_ref(),
            now,
        };
        decide::decide(&observed, &shared.settings, || {
            rendered
                .get_or_insert_with(|| {
                    let configs: Vec<Arc<DynamicObject>> = scope
                        .configs
                        .state()
                        .into_iter()
                        .filter(|c| c.metadata.namespace.as_deref() == Some(ns))
                        .collect();
                    desired::pod_for(
                        browser,
                        &configs,
                        &shared.kinds.browser,
                        schema.as_deref(),
                        |config, name, version| {
                            shared.verdicts.rejection(ns, config, name, version)
                        },
                    )
                })
                .clone()
        })
    };
    let mut plan = decide_on(&browser);

    let browsers_api = scope.api(&shared.kinds.browser, ns);
    // A pod is created at most once per Browser, whatever the caches say: the create is
    // decided on the Browser as the API server has it now (the cache may predate its failure,
    // its deletion, or the pod recorded in its status), and the pod is absent by a read above.
    if plan.create_pod.is_some() {
        let current = target(shared, &browsers_api, &pods_api, &browser)
            .current_browser(plan.ensure_metadata)
            .await?;
        match current {
            Some(current) => {
                browser = Arc::new(current);
                scope
                    .fresher
                    .remember_browser(ns, name, Known::Object(browser.clone()));
                plan = decide_on(&browser);
            }
            None => {
                let_go(scope, ns, name, &browser);
                return Ok(Action::await_change());
            }
        }
    }
    log_plan(&plan);

    let observed = Observed {
        browser: &browser,
        pod: pod_json.as_ref(),
        now,
    };
    let target = target(shared, &browsers_api, &pods_api, &browser);
    let mut executed = target.execute(&plan).await?;
    if let Some(status) = executed.create_unknown_fields.take() {
        if shared.schemas.renewed_since(schema.as_deref()).await {
            return Err(ReconcileError::StaleSchema(status.message));
        }
        match classify_create_error(status.code, &status.message) {
            CreateOutcome::Fail(failure) => executed.create_rejected = Some(failure),
            CreateOutcome::Retry => {
                return Err(ExecuteError::Api {
                    action: "create pod",
                    source: kube::Error::Api(status),
                }
                .into());
            }
        }
    }
    let mut events = plan.events.clone();
    let mut requeue = plan.requeue_after;
    if let Some(failure) = executed.create_rejected.take() {
        let rejected = decide::create_rejected(&observed, &shared.settings, failure);
        log_plan(&rejected);
        executed = target.execute(&rejected).await?;
        events = rejected.events.clone();
        requeue = rejected.requeue_after;
        if !executed.vanished {
            publish_failures(shared, &rejected);
        }
    } else if !executed.vanished {
        publish_failures(shared, &plan);
        observe_running(shared, &browser, &plan);
    }
    remember(scope, ns, name, &browser, &executed);
    if executed.vanished {
        // The API answered that the Browser is gone: nothing more for it.
        return Ok(Action::await_change());
    }
    if let Some(reference) = (!events.is_empty()).then(|| browser.object_ref(&shared.kinds.browser))
    {
        for event in events {
            if shared.events.try_send((event, reference.clone())).is_err() {
                debug!("event queue full; event dropped");
            }
        }
    }
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

fn target<'a>(
    shared: &'a Shared,
    browsers: &'a Api<DynamicObject>,
    pods: &'a Api<DynamicObject>,
    browser: &'a DynamicObject,
) -> Target<'a> {
    Target {
        browsers,
        pods,
        browser_resource: &shared.kinds.browser,
        browser,
        metrics: &shared.metrics,
    }
}

/// The operator is done with `browser`: whatever the cache still shows of it is ignored.
fn let_go(scope: &Scope, ns: &str, name: &str, browser: &DynamicObject) {
    if let Some(uid) = &browser.metadata.uid {
        scope
            .fresher
            .remember_browser(ns, name, Known::Gone { uid: uid.clone() });
    }
}

/// What a reconcile decided to write, at debug level (cheap: flags and the phase only).
fn log_plan(plan: &decide::Plan) {
    let status = plan.status.as_ref();
    let field = |f: &str| status.and_then(|s| s.get(f)).and_then(Value::as_str);
    debug!(
        ensure_metadata = plan.ensure_metadata,
        adopt_pod = plan.adopt_pod.is_some(),
        create_pod = plan.create_pod.is_some(),
        status_phase = field("phase"),
        status_reason = field("reason"),
        delete_pod_grace = ?plan.delete_pod.as_ref().map(|d| d.grace_seconds),
        delete_browser = plan.delete_browser,
        release_finalizer = plan.release_finalizer,
        requeue_after = ?plan.requeue_after,
        "decided"
    );
}

/// The `running` startup stage, in the one reconcile that first publishes `Running`.
fn observe_running(shared: &Shared, browser: &DynamicObject, plan: &decide::Plan) {
    let current = browser.data.get("status").unwrap_or(&Value::Null);
    if let Some(desired) = &plan.status
        && metrics::publishes_running(current, desired)
        && let Some(created) = &browser.metadata.creation_timestamp
    {
        shared
            .metrics
            .startup(Stage::Running, created.0, Timestamp::now());
    }
}

fn publish_failures(shared: &Shared, plan: &decide::Plan) {
    if let Some(reason) = plan
        .status
        .as_ref()
        .filter(|s| s.get("phase").and_then(Value::as_str) == Some("Failed"))
        .and_then(|s| s.get("reason").and_then(Value::as_str))
    {
        shared.metrics.failure(reason);
    }
}

fn remember(scope: &Scope, ns: &str, name: &str, browser: &DynamicObject, executed: &Executed) {
    if executed.let_go {
        let_go(scope, ns, name, browser);
    } else if let Some(written) = &executed.browser {
        scope
            .fresher
            .remember_browser(ns, name, Known::Object(Arc::new(written.clone())));
    }
    if let Some(pod) = &executed.pod {
        scope
            .fresher
            .remember_pod(ns, name, Known::Object(Arc::new(pod.clone())));
    }
    if let Some(uid) = &executed.pod_deleted {
        scope
            .fresher
            .remember_pod(ns, name, Known::Gone { uid: uid.clone() });
    }
}
