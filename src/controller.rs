//! Watches, stores, triggers and concurrency: the kube-runtime pipeline that feeds the pure
//! decision (`lifecycle::decide`) and runs its plans (`lifecycle::execute`).
//!
//! Per watched scope (all namespaces, or each `--namespace`) one Controller runs over:
//! a Browser reflector (the trigger), a Pod reflector selected by the operator's label,
//! and a BrowserConfig reflector whose readiness gates reconciles. `managedFields` are
//! stripped before objects enter a store; pods are cut down to what decisions read.

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
use tokio::sync::{mpsc, watch};
use tracing::{Instrument, debug, info, info_span, warn};

use crate::api::discovery::Kinds;
use crate::api::error::describe;
use crate::api::keys;
use crate::api::openapi::PodSchemas;
use crate::config_controller::Verdicts;
use crate::lifecycle::decide::{self, Event, Observed, Settings};
use crate::lifecycle::desired;
use crate::lifecycle::execute::{
    CreateOutcome, ExecuteError, Target, classify_create_error, to_runtime_event,
};
use crate::metrics::{self, Metrics, Stage};

/// Why a reconcile failed; it is retried with per-object exponential backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Execute(#[from] ExecuteError),
    #[error("reading pod {name}: {}", describe(.source))]
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
    synced: Mutex<Vec<watch::Receiver<bool>>>,
}

/// Events are published by a background task so that a reconcile never waits on them.
const EVENT_QUEUE: usize = 4096;

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
            synced: Mutex::new(Vec::new()),
        })
    }

    /// True once every store of every scope has completed its first list.
    pub fn is_ready(&self) -> bool {
        let synced = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        !synced.is_empty() && synced.iter().all(|s| *s.borrow())
    }

    fn register_store(&self) -> (watch::Sender<bool>, watch::Receiver<bool>) {
        let (tx, rx) = watch::channel(false);
        self.synced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(rx.clone());
        (tx, rx)
    }
}

/// Marks a store synced when its watcher completes the first list. (kube-runtime's
/// `Store::wait_until_ready` wakes only its last waiter, so concurrent reconciles wait
/// on this signal instead.)
fn mark_synced<K>(
    synced: watch::Sender<bool>,
) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) {
    move |event| {
        if let Ok(watcher::Event::InitDone) = event {
            synced.send_replace(true);
        }
    }
}

/// Counts and logs watcher errors before the backoff retries them.
fn count_watch_errors<K>(
    metrics: Arc<Metrics>,
    resource: &'static str,
) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) {
    move |event| {
        if let Err(error) = event {
            metrics.watch_error(resource);
            warn!(resource, %error, "watch failed; retrying with backoff");
        }
    }
}

/// Observes the `scheduled` startup stage on the first live watch event that shows a pod
/// scheduled; `pods` still holds the previous state. A relist (start-up, watch gap) is not a
/// first sighting: the pod may have been seen before, so it is never counted twice.
fn observe_scheduling(
    pods: Store<DynamicObject>,
    pod_resource: kube::core::ApiResource,
    metrics: Arc<Metrics>,
) -> impl FnMut(&Result<watcher::Event<DynamicObject>, watcher::Error>) {
    move |event| {
        if let Ok(watcher::Event::Apply(pod)) = event {
            let before = pods.get(&ObjectRef::from_obj_with(pod, pod_resource.clone()));
            if let Some((created, scheduled)) = metrics::first_scheduled(before.as_deref(), pod) {
                metrics.startup(Stage::Scheduled, created, scheduled);
            }
        }
    }
}

/// Waits until a store is synced.
async fn until_synced(mut synced: watch::Receiver<bool>) -> bool {
    synced.wait_for(|s| *s).await.is_ok()
}

/// The newest state of an object the operator itself wrote, kept until the cache catches
/// up, so that a reconcile triggered by another object's event never acts on a stale copy
/// (which would repeat a write).
#[derive(Clone)]
enum Known {
    Object(Arc<DynamicObject>),
    Deleted { uid: String },
}

#[derive(Default)]
struct Fresher {
    entries: Mutex<HashMap<(bool, String, String), Known>>,
}

fn rv(object: &DynamicObject) -> Option<u64> {
    object.metadata.resource_version.as_deref()?.parse().ok()
}

impl Fresher {
    fn key(is_pod: bool, ns: &str, name: &str) -> (bool, String, String) {
        (is_pod, ns.to_string(), name.to_string())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(bool, String, String), Known>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn remember(&self, is_pod: bool, ns: &str, name: &str, known: Known) {
        self.lock().insert(Self::key(is_pod, ns, name), known);
    }

    fn forget(&self, ns: &str, name: &str) {
        let mut entries = self.lock();
        entries.remove(&Self::key(false, ns, name));
        entries.remove(&Self::key(true, ns, name));
    }

    /// The fresher of the cached object and what we last wrote; `None` when the cache has
    /// nothing or still shows a pod we deleted, so that the caller confirms with a read.
    fn pick(
        &self,
        is_pod: bool,
        ns: &str,
        name: &str,
        cached: Option<Arc<DynamicObject>>,
    ) -> Option<Arc<DynamicObject>> {
        let key = Self::key(is_pod, ns, name);
        let mut entries = self.lock();
        let Some(known) = entries.get(&key).cloned() else {
            return cached;
        };
        match (known, cached) {
            // Absent from the cache: just created or already gone; the caller reads it.
            (Known::Object(_), None) => {
                entries.remove(&key);
                None
            }
            (Known::Object(ours), Some(cached)) => match (rv(&ours), rv(&cached)) {
                (Some(a), Some(b)) if a > b => Some(ours),
                _ => {
                    entries.remove(&key);
                    Some(cached)
                }
            },
            (Known::Deleted { uid }, Some(cached))
                if cached.metadata.uid.as_deref() == Some(&uid) =>
            {
                None
            }
            (Known::Deleted { .. }, cached) => {
                entries.remove(&key);
                cached
            }
        }
    }
}

/// One watched scope: all namespaces (`None`) or one namespace.
pub struct Scope {
    shared: Arc<Shared>,
    pods: Store<DynamicObject>,
    configs: Store<DynamicObject>,
    pods_synced: watch::Receiver<bool>,
    configs_synced: watch::Receiver<bool>,
    fresher: Fresher,
    failures: Mutex<HashMap<(String, String), u32>>,
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
        Duration::from_millis(250 * (1u64 << exp)).min(Duration::from_secs(300))
    }

    fn succeeded(&self, key: &(String, String)) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

fn strip_managed_fields(object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
}

/// Of each container, what the operator reads from a pod's spec: names and ports (the
/// Browser's `containerStatuses[].ports`), and the restart policy of init containers
/// (sidecars). With `spec.nodeName`, that is everything it reads of the spec.
const KEPT_CONTAINER_FIELDS: [(&str, &[&str]); 2] = [
    ("containers", &["name", "ports"]),
    ("initContainers", &["name", "restartPolicy"]),
];

/// What decisions, the Browser status and the startup metrics read of a pod's status.
const KEPT_STATUS_FIELDS: [&str; 5] = ["phase", "podIP", "startTime", "reason", "message"];

/// Lists of the pod status and the fields kept of each item.
const KEPT_STATUS_LISTS: [(&str, &[&str]); 3] = [
    (
        "conditions",
        &["type", "status", "reason", "message", "lastTransitionTime"],
    ),
    (
        "containerStatuses",
        &["name", "state", "image", "restartCount"],
    ),
    (
        "initContainerStatuses",
        &["name", "state", "image", "restartCount"],
    ),
];

/// The only pod condition anything reads: why a pod is unschedulable, and when it was
/// scheduled (startup metrics). A kubelet reports four more.
const KEPT_CONDITION: &str = "PodScheduled";

/// Cuts a pod down to what decisions read before it enters the cache: no managedFields, no
/// annotations, and of spec and status only the fields above. Env, resources, volumes and
/// the like, and what kubelets add to statuses (image and container IDs, last states,
/// resources, volume mounts, host IPs …), are most of a cached pod's memory and never read.
fn prune_pod(pod: &mut DynamicObject) {
    strip_managed_fields(pod);
    pod.metadata.annotations = None;
    if let Some(Value::Object(spec)) = pod.data.get_mut("spec") {
        let mut full = std::mem::take(spec);
        keep_lists(&mut full, spec, &KEPT_CONTAINER_FIELDS);
        if let Some(node) = full.remove("nodeName") {
            spec.insert("nodeName".to_string(), node);
        }
    }
    if let Some(Value::Object(status)) = pod.data.get_mut("status") {
        let mut full = std::mem::take(status);
        for field in KEPT_STATUS_FIELDS {
            if let Some(value) = full.remove(field) {
                status.insert(field.to_string(), value);
            }
        }
        keep_lists(&mut full, status, &KEPT_STATUS_LISTS);
        if let Some(Value::Array(conditions)) = status.get_mut("conditions") {
            conditions.retain(|c| c.get("type").and_then(Value::as_str) == Some(KEPT_CONDITION));
        }
    }
}

/// Moves each listed array from `full` to `kept`, keeping only the given fields of its items.
fn keep_lists(
    full: &mut serde_json::Map<String, Value>,
    kept: &mut serde_json::Map<String, Value>,
    lists: &[(&str, &[&str])],
) {
    for (list, fields) in lists {
        if let Some(Value::Array(items)) = full.remove(*list) {
            let items = items
                .into_iter()
                .map(|item| match item {
                    Value::Object(mut c) => Value::Object(
                        fields
                            .iter()
                            .filter_map(|f| Some((f.to_string(), c.remove(*f)?)))
                            .collect(),
                    ),
                    other => other,
                })
                .collect();
            kept.insert(list.to_string(), Value::Array(items));
        }
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

/// The Browser a pod belongs to: by our label, else by its controller owner reference
/// name (so pods written under another group/version of the Browser kind still map).
fn browser_of_pod(
    pod: &DynamicObject,
    browser: &kube::core::ApiResource,
) -> Option<ObjectRef<DynamicObject>> {
    let ns = pod.metadata.namespace.as_deref()?;
    let name = pod.labels().get(keys::LABEL_BROWSER).cloned().or_else(|| {
        pod.owner_references()
            .iter()
            .find(|r| r.controller == Some(true) && r.kind == keys::BROWSER_KIND)
            .map(|r| r.name.clone())
    })?;
    Some(ObjectRef::new_with(&name, browser.clone()).within(ns))
}

/// Browsers of a namespace still waiting for their pod: a BrowserConfig change may now
/// resolve them (SPEC §4.4).
fn waiting_browsers(
    browsers: &Store<DynamicObject>,
    ns: &str,
    browser: &kube::core::ApiResource,
) -> Vec<ObjectRef<DynamicObject>> {
    browsers
        .state()
        .iter()
        .filter(|b| b.metadata.namespace.as_deref() == Some(ns))
        .filter(|b| b.metadata.deletion_timestamp.is_none())
        .filter(|b| b.data.pointer("/status/phase").is_none())
        .filter_map(|b| {
            Some(ObjectRef::new_with(b.metadata.name.as_deref()?, browser.clone()).within(ns))
        })
        .collect()
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

    let (browsers_synced_tx, _) = shared.register_store();
    let (pods_synced_tx, pods_synced) = shared.register_store();
    let (configs_synced_tx, configs_synced) = shared.register_store();

    let browser_writer = Writer::<DynamicObject>::new(kinds.browser.clone());
    let browser_reader = browser_writer.as_reader();
    let browsers = watcher(
        scoped_api(client, ns, &kinds.browser),
        watcher::Config::default().any_semantic(),
    )
    .inspect(count_watch_errors(shared.metrics.clone(), "browsers"))
    .default_backoff()
    .modify(strip_managed_fields)
    .reflect(browser_writer)
    .inspect(mark_synced(browsers_synced_tx))
    .applied_objects();

    let pod_writer = Writer::<DynamicObject>::new(kinds.pod.clone());
    let pod_reader = pod_writer.as_reader();
    let pods = watcher(
        scoped_api(client, ns, &kinds.pod),
        watcher::Config::default()
            .labels(&keys::managed_pods_selector())
            .any_semantic(),
    )
    .inspect(count_watch_errors(shared.metrics.clone(), "pods"))
    .default_backoff()
    .modify(prune_pod)
    .inspect(observe_scheduling(
        pod_reader.clone(),
        kinds.pod.clone(),
        shared.metrics.clone(),
    ))
    .reflect(pod_writer)
    .inspect(mark_synced(pods_synced_tx))
    .touched_objects();

    let config_writer = Writer::<DynamicObject>::new(kinds.browserconfig.clone());
    let config_reader = config_writer.as_reader();
    let configs = watcher(
        scoped_api(client, ns, &kinds.browserconfig),
        watcher::Config::default().any_semantic(),
    )
    .inspect(count_watch_errors(shared.metrics.clone(), "browserconfigs"))
    .default_backoff()
    .modify(strip_managed_fields)
    .reflect(config_writer)
    .inspect(mark_synced(configs_synced_tx))
    .touched_objects();

    let scope = Arc::new(Scope {
        shared: shared.clone(),
        pods: pod_reader,
        configs: config_reader,
        pods_synced,
        configs_synced,
        fresher: Fresher::default(),
        failures: Mutex::new(HashMap::new()),
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
            move |pod| browser_of_pod(&pod, &pod_mapper_ar),
            kinds.pod.clone(),
        )
        .watches_stream_with(
            configs,
            move |config| match config.metadata.namespace.as_deref() {
                Some(ns) => waiting_browsers(&waiting_reader, ns, &kinds.browser),
                None => Vec::new(),
            },
            kinds.browserconfig.clone(),
        )
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
    if !until_synced(scope.configs_synced.clone()).await {
        return Err(ReconcileError::StoreClosed("BrowserConfig"));
    }
    if !until_synced(scope.pods_synced.clone()).await {
        return Err(ReconcileError::StoreClosed("Pod"));
    }

    let browser = scope
        .fresher
        .pick(false, ns, name, Some(browser.clone()))
        .unwrap_or(browser);
    let pod_ref = ObjectRef::new_with(name, shared.kinds.pod.clone()).within(ns);
    let pods_api = scope.api(&shared.kinds.pod, ns);
    let pod = match scope.fresher.pick(true, ns, name, scope.pods.get(&pod_ref)) {
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
                strip_managed_fields(&mut p);
                Arc::new(p)
            }),
    };
    let pod_json = pod
        .as_deref()
        .map(serde_json::to_value)
        .transpose()
        .map_err(ReconcileError::Serialize)?;
    let observed = Observed {
        browser: &browser,
        pod: pod_json.as_ref(),
        now: Timestamp::now(),
    };
    let schema = shared.schemas.current();
    let plan = decide::decide(&observed, &shared.settings, || {
        let configs: Vec<Arc<DynamicObject>> = scope
            .configs
            .state()
            .into_iter()
            .filter(|c| c.metadata.namespace.as_deref() == Some(ns))
            .collect();
        desired::pod_for(
            &browser,
            &configs,
            &shared.kinds.browser,
            schema.as_deref(),
            |config, name, version| shared.verdicts.rejection(ns, config, name, version),
        )
    });

    log_plan(&plan);

    let browsers_api = scope.api(&shared.kinds.browser, ns);
    let target = Target {
        browsers: &browsers_api,
        pods: &pods_api,
        browser_resource: &shared.kinds.browser,
        browser: &browser,
        metrics: &shared.metrics,
    };
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
    if let Some(failure) = executed.create_rejected {
        let rejected = decide::create_rejected(&observed, &shared.settings, failure);
        log_plan(&rejected);
        let executed_rejection = target.execute(&rejected).await?;
        remember(scope, ns, name, &executed_rejection);
        events = rejected.events.clone();
        requeue = rejected.requeue_after;
        publish_failures(shared, &rejected);
    } else {
        remember(scope, ns, name, &executed);
        publish_failures(shared, &plan);
        observe_running(shared, &browser, &plan);
    }
    if plan.delete_browser || plan.release_finalizer {
        scope.fresher.forget(ns, name);
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

fn remember(scope: &Scope, ns: &str, name: &str, executed: &crate::lifecycle::execute::Executed) {
    if let Some(browser) = &executed.browser {
        scope
            .fresher
            .remember(false, ns, name, Known::Object(Arc::new(browser.clone())));
    }
    if let Some(pod) = &executed.pod {
        scope
            .fresher
            .remember(true, ns, name, Known::Object(Arc::new(pod.clone())));
    }
    if let Some(uid) = &executed.pod_deleted {
        scope
            .fresher
            .remember(true, ns, name, Known::Deleted { uid: uid.clone() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(rv: &str, uid: &str) -> Arc<DynamicObject> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "s1", "namespace": "ns", "uid": uid, "resourceVersion": rv}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn fresher_prefers_our_newer_write_until_the_cache_catches_up() {
        let f = Fresher::default();
        f.remember(false, "ns", "s1", Known::Object(obj("10", "u")));
        let picked = f.pick(false, "ns", "s1", Some(obj("9", "u"))).unwrap();
        assert_eq!(picked.metadata.resource_version.as_deref(), Some("10"));
        let picked = f.pick(false, "ns", "s1", Some(obj("11", "u"))).unwrap();
        assert_eq!(picked.metadata.resource_version.as_deref(), Some("11"));
        // The entry is gone once the cache caught up.
        let picked = f.pick(false, "ns", "s1", Some(obj("9", "u"))).unwrap();
        assert_eq!(picked.metadata.resource_version.as_deref(), Some("9"));
    }

    #[test]
    fn fresher_never_invents_an_object_the_cache_lacks() {
        let f = Fresher::default();
        f.remember(true, "ns", "s1", Known::Object(obj("10", "u")));
        assert!(f.pick(true, "ns", "s1", None).is_none());
    }

    #[test]
    fn fresher_hides_a_pod_we_deleted_but_not_a_new_one() {
        let f = Fresher::default();
        f.remember(true, "ns", "s1", Known::Deleted { uid: "old".into() });
        assert!(f.pick(true, "ns", "s1", Some(obj("5", "old"))).is_none());
        assert!(f.pick(true, "ns", "s1", Some(obj("6", "new"))).is_some());
    }

    fn golden_pod(text: &str) -> Value {
        crate::manifest::parse(text, std::path::Path::new("golden"))
            .unwrap()
            .remove(0)
    }

    fn goldens() -> Vec<Value> {
        vec![
            golden_pod(include_str!("../testdata/golden/chrome.pod.yaml")),
            golden_pod(include_str!("../testdata/golden/playwright.pod.yaml")),
        ]
    }

    fn names(pod: &Value, list: &str) -> Vec<String> {
        pod["spec"][list]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(String::from))
            .collect()
    }

    /// Pod states as a kubelet reports them, for every container of `pod`.
    fn pod_states(pod: &Value) -> Vec<Value> {
        let containers = names(pod, "containers");
        let inits = names(pod, "initContainers");
        let each = |list: &[String], state: &dyn Fn(usize) -> Value| -> Value {
            list.iter()
                .enumerate()
                .map(|(i, name)| json!({"name": name, "image": "img", "ready": true, "restartCount": 0, "state": state(i),
                    "imageID": "docker.io/img@sha256:0123", "containerID": format!("containerd://{i}"), "started": true,
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}, "user": {"linux": {"uid": 1000, "gid": 1000}},
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}], "resources": {"limits": {"memory": "1Gi"}}}))
                .collect()
        };
        let running = json!({"running": {"startedAt": "2026-11-22T10:00:03Z"}});
        let done = json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": "2026-11-22T10:00:02Z", "finishedAt": "2026-11-22T10:00:03Z"}});
        let conditions = json!([{"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-22T10:00:01Z"},
                                {"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-22T10:00:03Z"}]);
        let mut states = vec![
            json!({"phase": "Pending"}),
            json!({"phase": "Pending", "startTime": "2026-11-22T10:00:01Z"}),
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}]}),
            json!({"phase": "Pending", "startTime": "2026-11-22T10:00:01Z", "conditions": conditions,
                   "initContainerStatuses": each(&inits, &|_| done.clone()),
                   "containerStatuses": each(&containers, &|_| json!({"waiting": {"reason": "PodInitializing"}}))}),
            json!({"phase": "Pending", "startTime": "2026-11-22T10:00:01Z", "conditions": conditions,
                   "initContainerStatuses": each(&inits, &|_| json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}})),
                   "containerStatuses": each(&containers, &|_| json!({"waiting": {"reason": "PodInitializing"}}))}),
            json!({"phase": "Running", "podIP": "10.1.2.3", "startTime": "2026-11-22T10:00:01Z", "conditions": conditions,
                   "initContainerStatuses": each(&inits, &|_| done.clone()),
                   "containerStatuses": each(&containers, &|_| running.clone())}),
            json!({"phase": "Running", "podIP": "10.1.2.3", "startTime": "2026-11-22T10:00:01Z", "conditions": conditions,
                   "initContainerStatuses": each(&inits, &|_| running.clone()),
                   "containerStatuses": each(&containers, &|i| if i == 0 { done.clone() } else { running.clone() })}),
            json!({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory.",
                   "startTime": "2026-11-22T10:00:01Z", "conditions": conditions,
                   "containerStatuses": each(&containers, &|_| done.clone())}),
        ];
        // What a kubelet adds that no decision reads.
        for state in &mut states {
            state["hostIP"] = json!("10.0.0.2");
            state["hostIPs"] = json!([{"ip": "10.0.0.2"}]);
            state["qosClass"] = json!("Burstable");
            if let Some(ip) = state.get("podIP").cloned() {
                state["podIPs"] = json!([{"ip": ip}]);
            }
        }
        states
    }

    #[test]
    fn pruned_pods_lead_to_the_same_decisions_as_full_ones() {
        let mut cases = 0;
        for golden in goldens() {
            // The same pod with its init containers as sidecars (restartPolicy Always).
            let mut sidecars = golden.clone();
            if let Some(inits) = sidecars["spec"]["initContainers"].as_array_mut() {
                for c in inits {
                    c["restartPolicy"] = json!("Always");
                }
            }
            for base in [golden, sidecars] {
                for state in pod_states(&base) {
                    let mut pod = base.clone();
                    if state["phase"] == "Running" || state.get("startTime").is_some() {
                        pod["spec"]["nodeName"] = json!("node-1");
                    }
                    pod["metadata"]["uid"] = json!("pod-uid");
                    pod["metadata"]["creationTimestamp"] = json!("2026-11-22T10:00:01Z");
                    pod["status"] = state;
                    let owner = &pod["metadata"]["ownerReferences"][0];
                    for browser_status in [
                        json!({}),
                        json!({"phase": "Pending"}),
                        json!({"phase": "Running", "podIP": "10.1.2.3", "startTime": "2026-11-22T10:00:01Z"}),
                    ] {
                        let browser: DynamicObject = serde_json::from_value(json!({
                            "apiVersion": "selenosis.io/v1", "kind": "Browser",
                            "metadata": {"name": owner["name"], "namespace": "selenosis", "uid": owner["uid"],
                                "creationTimestamp": "2026-11-22T10:00:00Z", "finalizers": [keys::FINALIZER],
                                "labels": pod["metadata"]["labels"]},
                            "spec": {"browserName": "chrome", "browserVersion": "139.0"},
                            "status": browser_status,
                        }))
                        .unwrap();
                        let mut pruned: DynamicObject =
                            serde_json::from_value(pod.clone()).unwrap();
                        prune_pod(&mut pruned);
                        let pruned = serde_json::to_value(&pruned).unwrap();
                        // Early, and past the pod creation timeout.
                        for now in ["2026-11-22T10:00:05Z", "2026-11-22T10:10:00Z"] {
                            let plan = |pod: &Value| {
                                let observed = Observed {
                                    browser: &browser,
                                    pod: Some(pod),
                                    now: now.parse().unwrap(),
                                };
                                decide::decide(&observed, &Settings::default(), || {
                                    unreachable!("the pod exists")
                                })
                            };
                            assert_eq!(plan(&pod), plan(&pruned), "{pod:#}");
                            cases += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(cases, 2 * 2 * 8 * 3 * 2);
    }

    #[test]
    fn pruned_pods_keep_names_ports_restart_policies_node_and_the_status_decisions_read() {
        let mut pod = golden_pod(include_str!("../testdata/golden/playwright.pod.yaml"));
        pod["spec"]["nodeName"] = json!("node-1");
        pod["spec"]["initContainers"][0]["restartPolicy"] = json!("Always");
        let state = |extra: Value| {
            let mut status = json!({"name": "browser", "state": {"running": {}}, "image": "i", "restartCount": 0});
            status
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            status
        };
        let kubelet = json!({"imageID": "i@sha256:1", "containerID": "c://1", "ready": true, "started": true, "lastState": {}});
        pod["status"] = json!({"phase": "Running", "podIP": "10.1.2.3", "podIPs": [{"ip": "10.1.2.3"}], "hostIP": "10.0.0.2",
            "qosClass": "Burstable", "startTime": "2026-11-22T10:00:01Z", "reason": "R", "message": "M",
            "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-22T10:00:03Z", "reason": "R", "message": "M"},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-22T10:00:01Z", "reason": "R", "message": "M"}],
            "containerStatuses": [state(kubelet.clone())], "initContainerStatuses": [state(kubelet)]});
        let mut object: DynamicObject = serde_json::from_value(pod.clone()).unwrap();
        prune_pod(&mut object);
        assert_eq!(
            object.data["status"],
            json!({"phase": "Running", "podIP": "10.1.2.3", "startTime": "2026-11-22T10:00:01Z", "reason": "R", "message": "M",
                "conditions": [{"type": "PodScheduled", "status": "True", "reason": "R", "message": "M", "lastTransitionTime": "2026-11-22T10:00:01Z"}],
                "containerStatuses": [state(json!({}))], "initContainerStatuses": [state(json!({}))]})
        );
        assert!(object.metadata.annotations.is_none());
        assert_eq!(
            object.metadata.labels,
            serde_json::from_value(pod["metadata"]["labels"].clone()).unwrap()
        );
        assert!(object.metadata.owner_references.is_some());
        let spec = object.data["spec"].as_object().unwrap();
        let mut keys: Vec<&String> = spec.keys().collect();
        keys.sort();
        assert_eq!(keys, ["containers", "initContainers", "nodeName"]);
        assert_eq!(
            object.data["spec"]["containers"][0],
            json!({"name": "browser", "ports": pod["spec"]["containers"][0]["ports"]})
        );
        assert_eq!(
            object.data["spec"]["initContainers"][0],
            json!({"name": "install-playwright-core", "restartPolicy": "Always"})
        );
        // What is dropped is most of the pod.
        let before = serde_json::to_string(&pod).unwrap().len();
        let after = serde_json::to_string(&object).unwrap().len();
        assert!(after * 2 < before, "{after} of {before} bytes kept");
    }

    #[test]
    fn pods_map_to_browsers_by_label_then_owner() {
        let ar = kube::core::ApiResource {
            group: "selenosis.io".into(),
            version: "v1".into(),
            api_version: "selenosis.io/v1".into(),
            kind: "Browser".into(),
            plural: "browsers".into(),
        };
        let labelled: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"selenosis.io/browser": "s1"}}
        }))
        .unwrap();
        assert_eq!(browser_of_pod(&labelled, &ar).unwrap().name, "s1");
        let owned: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "browser.selenosis.io/v1", "kind": "Browser", "name": "s2", "uid": "u", "controller": true}
            ]}
        }))
        .unwrap();
        assert_eq!(browser_of_pod(&owned, &ar).unwrap().name, "s2");
    }
}
