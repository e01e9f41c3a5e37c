//! The Browser controller of one scope: its watches, stores, triggers and concurrency, the
//! kube-runtime pipeline that feeds one reconcile (`reconcile`) and runs its plans
//! (`execute`); which Browser an event concerns (`triggers`), read-your-writes
//! (`fresher`), the workers by lane (`workers`), the reconcile of every Browser after a
//! list (`bulk`), the lines of Browsers waiting for quota (`line`) and the pods left without
//! their Browser (`orphans`).
//!
//! Per watched scope (all namespaces, or each `--namespace`) one Controller runs over:
//! a Browser reflector (the trigger), a Pod reflector selected by the operator's label,
//! a BrowserConfig reflector whose readiness gates reconciles, and a ResourceQuota reflector
//! whose changes wake the first Browser waiting in the namespace's line. `managedFields` are
//! stripped before objects enter a store; pods are cut down to what decisions read.
//! Every completed list (the first of all four caches, and each relist of the Browsers,
//! pods or BrowserConfigs after a watch expired or failed) reconciles every Browser of the
//! scope once the list is in the cache, each handed to the controller as reconciles end
//! (`bulk`); a relist of the ResourceQuotas wakes only the first of each line.

mod bulk;
mod fresher;
mod line;
mod orphans;
mod reconcile;
mod send;
mod triggers;
pub(super) mod workers;

use std::collections::HashMap;
use std::future::ready;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Future, StreamExt};
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::Shared;
use super::decoded::{self, Decoded, FromIdentity, Undecodable};
use super::scope::scoped_api;
use super::watch::{self, WatchHealth};
use crate::api::{keys, kinds};
use crate::cached::{CachedBrowser, CachedPod};
use crate::lifecycle::lane::Lane;
use crate::lifecycle::reconcile::Trouble;
use crate::lifecycle::request;
use crate::metrics::{ErrorKind, Watched};
use fresher::Fresher;
use line::Lines;

/// Why a reconcile failed; it is retried with per-object exponential backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Trouble(#[from] Trouble),
    #[error("the {0} cache was closed")]
    StoreClosed(&'static str),
    #[error("cannot read the pod as JSON: {0}")]
    Serialize(#[source] serde_json::Error),
}

impl ReconcileError {
    fn kind(&self) -> ErrorKind {
        match self {
            ReconcileError::Trouble(Trouble::Failed {
                action: request::Action::ReadPod | request::Action::ReadBrowser,
                ..
            }) => ErrorKind::Read,
            ReconcileError::Trouble(Trouble::Failed { .. } | Trouble::Refused { .. }) => {
                ErrorKind::Write
            }
            ReconcileError::Trouble(Trouble::StaleSchema(_)) => ErrorKind::Schema,
            ReconcileError::Trouble(Trouble::Unsettled) => ErrorKind::Unsettled,
            ReconcileError::StoreClosed(_) => ErrorKind::Store,
            ReconcileError::Serialize(_) => ErrorKind::Serialize,
        }
    }
}

/// The longest wait before a failed reconcile is retried. Short enough that Browsers do not
/// wait long after an API outage that broke no watch (a relist retries them all at once).
const RETRY_MAX: Duration = Duration::from_secs(30);

/// The wait before a write refused for a reason no rule knows is tried again.
const REFUSAL_RETRY: Duration = Duration::from_secs(1);

/// One watched scope: all namespaces (`None`) or one namespace.
pub struct Scope {
    shared: Arc<Shared>,
    browsers: Store<CachedBrowser>,
    pods: Store<CachedPod>,
    configs: Store<DynamicObject>,
    quotas: Store<DynamicObject>,
    pods_health: Arc<WatchHealth>,
    configs_health: Arc<WatchHealth>,
    quotas_health: Arc<WatchHealth>,
    lines: Arc<Lines>,
    fresher: Arc<Fresher>,
    failures: Arc<Mutex<HashMap<(String, String), u32>>>,
    /// Refusals in a row of each Browser's writes (`rejection::after_refusal`). Apart from
    /// `failures`, which a relist clears: a refusal is counted until a reconcile succeeds.
    refusals: Mutex<HashMap<(String, String), u32>>,
    /// Reconciles under way, which the reconcile of every Browser after a list waits on.
    admission: Arc<bulk::Admission>,
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
        self.refusals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// The lane the reconcile of a Browser waits in for a worker, from the caches as they
    /// are when it starts waiting; a Browser gone from the cache has only cleanup left.
    fn lane(&self, ns: &str, name: &str) -> Lane {
        let browser_ref = ObjectRef::new_with(name, self.shared.cached.browser.clone()).within(ns);
        let Some(browser) = self.browsers.get(&browser_ref) else {
            return Lane::Cleanup;
        };
        let pod_ref = ObjectRef::new_with(name, self.shared.cached.pod.clone()).within(ns);
        triggers::lane_of(&browser, self.pods.get(&pod_ref).as_deref())
    }

    /// The Browser's namespace as the capacity queue sees it: how many wait in line ahead of
    /// it, how many created before it are not handled yet, and the namespace's ResourceQuotas.
    fn line_of(&self, ns: &str, browser: &DynamicObject) -> (usize, usize, Vec<serde_json::Value>) {
        let (ahead, arriving) = match (&browser.metadata.name, &browser.metadata.creation_timestamp)
        {
            (Some(name), Some(created)) => self.lines.ahead(ns, name, created.0),
            _ => (0, 0),
        };
        let quotas = self
            .quotas
            .state()
            .iter()
            .filter(|q| q.metadata.namespace.as_deref() == Some(ns))
            .filter_map(|q| serde_json::to_value(q.as_ref()).ok())
            .collect();
        (ahead, arriving, quotas)
    }

    /// Refusals in a row of the Browser's requests so far.
    fn refusals(&self, key: &(String, String)) -> u32 {
        let refusals = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
        refusals.get(key).copied().unwrap_or(0)
    }

    /// Counts a refusal of one of the Browser's requests.
    fn refused(&self, key: &(String, String)) {
        let mut refusals = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
        let count = refusals.entry(key.clone()).or_insert(0);
        *count = count.saturating_add(1);
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
    let cached = shared.cached.clone();
    let ns = namespace.as_deref();
    let fresher = Arc::new(Fresher::default());
    let failures = Arc::new(Mutex::new(HashMap::new()));

    // Each completed list reconciles every Browser of the scope, once each of the four caches
    // has listed; retries that grew while the API was away start small again.
    // Each round also looks at the pods whose Browser the cache lacks (`sweep_orphan`).
    let (listed_tx, listed_rx) = futures::channel::mpsc::unbounded::<()>();
    let (orphans_tx, orphans_rx) = futures::channel::mpsc::unbounded::<()>();
    let lists = Arc::new(bulk::Lists::new(4));
    let listed = |failures: Arc<Mutex<HashMap<(String, String), u32>>>| {
        let (tx, orphans, lists) = (listed_tx.clone(), orphans_tx.clone(), lists.clone());
        let mut first = true;
        move || {
            failures.lock().unwrap_or_else(|e| e.into_inner()).clear();
            if lists.completed(std::mem::take(&mut first)) {
                let _ = tx.unbounded_send(());
                let _ = orphans.unbounded_send(());
            }
        }
    };

    let browsers = watch::Cache::<CachedBrowser>::new(
        cached.browser.clone(),
        shared.watch_health(Watched::Browsers),
    );
    let browser_reader = browsers.reader.clone();
    let (wake_tx, wake_rx) = futures::channel::mpsc::unbounded();
    let lines = Arc::new(Lines::new(cached.browser.clone(), wake_tx));
    let (candidates_tx, candidates_rx) = futures::channel::mpsc::unbounded::<orphans::Candidate>();
    // Read-your-writes forgets deleted Browsers; the capacity queue's lines follow the watch; a
    // deleted Browser's pod, if the pod cache still has one, is looked at (`orphans`).
    let reflected = {
        let (fresher, reader, lines) = (fresher.clone(), browser_reader.clone(), lines.clone());
        let candidates = candidates_tx.clone();
        move |item: &Result<watcher::Event<CachedBrowser>, watcher::Error>| {
            let Ok(event) = item else {
                return;
            };
            lines.observe(event);
            match event {
                watcher::Event::Delete(b) => {
                    if let (Some(ns), Some(name), Some(uid)) = (
                        b.metadata.namespace.as_deref(),
                        b.metadata.name.as_deref(),
                        b.metadata.uid.as_deref(),
                    ) {
                        fresher.forget(ns, name, uid);
                        let _ = candidates.unbounded_send((ns.to_string(), name.to_string()));
                    }
                }
                watcher::Event::InitDone => {
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
        }
    };
    let watched = browsers.watch(
        scoped_api::<Decoded<CachedBrowser>>(client, ns, &cached.browser),
        watch::list_in_pages(watcher::Config::default()),
        &shared.link,
    );
    let browsers = browsers.fill_with(
        decoded::skip_undecodable(watched, undecodable_browsers(shared.clone())),
        reflected,
        listed(failures.clone()),
    );
    // Echoes of the operator's own writes trigger nothing: they tell it nothing new.
    let echoes = fresher.clone();
    let browsers = watch::live_changes(
        browsers.filter(move |e| ready(!e.as_ref().is_ok_and(|e| echoes.browser_echo(e)))),
        false,
    );

    let pods =
        watch::Cache::<CachedPod>::new(cached.pod.clone(), shared.watch_health(Watched::Pods));
    let (pod_reader, pods_health) = (pods.reader.clone(), pods.health.clone());
    let watched = pods
        .watch(
            scoped_api::<CachedPod>(client, ns, &cached.pod),
            watch::list_in_pages(watcher::Config::default().labels(&keys::managed_pods_selector())),
            &shared.link,
        )
        .inspect(triggers::observe_scheduling(
            pod_reader.clone(),
            cached.pod.clone(),
            shared.metrics.clone(),
        ));
    let pods = pods.fill_with(
        watched,
        triggers::rejudge_lane(
            shared.clone(),
            browser_reader.clone(),
            cached.browser.clone(),
        ),
        listed(failures.clone()),
    );
    // A pod whose Browser the cache lacks is looked at (`orphans`).
    let pods = {
        let (browsers, kind, candidates) = (
            browser_reader.clone(),
            cached.browser.clone(),
            candidates_tx.clone(),
        );
        pods.inspect(move |event| {
            if let Ok(watcher::Event::Apply(pod)) = event
                && let Some(browser_ref) = triggers::browser_of_pod(pod, &kind)
                && browsers.get(&browser_ref).is_none()
            {
                let ns = browser_ref.namespace.clone().unwrap_or_default();
                let _ = candidates.unbounded_send((ns, browser_ref.name));
            }
        })
    };
    let echoes = fresher.clone();
    let pods = watch::live_changes(
        pods.filter(move |e| ready(!e.as_ref().is_ok_and(|e| echoes.pod_echo(e)))),
        true,
    );

    let configs = watch::Cache::<DynamicObject>::new(
        kinds.browserconfig.clone(),
        shared.watch_health(Watched::BrowserConfigs),
    );
    let (config_reader, configs_health) = (configs.reader.clone(), configs.health.clone());
    let watched = configs.watch(
        scoped_api::<Decoded<DynamicObject>>(client, ns, &kinds.browserconfig),
        watcher::Config::default().any_semantic(),
        &shared.link,
    );
    // An undecodable BrowserConfig is reported by the BrowserConfig controller; here it is
    // only left out.
    let configs = configs.fill(
        decoded::skip_undecodable(watched, |_| {}).modify(triggers::strip_managed_fields),
        listed(failures.clone()),
    );
    let configs = watch::live_changes(configs, true);

    // ResourceQuotas: a change may make room for the first Browser waiting in its namespace's
    // line; after a relist (it may have missed changes) every line's first looks again. Its
    // relists reconcile no Browser otherwise.
    let quota_ar = kinds::resource_quotas();
    let quotas = watch::Cache::<DynamicObject>::new(
        quota_ar.clone(),
        shared.watch_health(Watched::ResourceQuotas),
    );
    let (quota_reader, quotas_health) = (quotas.reader.clone(), quotas.health.clone());
    let watched = quotas.watch(
        scoped_api::<Decoded<DynamicObject>>(client, ns, &quota_ar),
        watcher::Config::default().any_semantic(),
        &shared.link,
    );
    let quotas_listed = {
        let (mut first_list, mut first) = (listed(failures.clone()), true);
        let lines = lines.clone();
        move || {
            if std::mem::take(&mut first) {
                first_list();
            } else {
                lines.wake_firsts();
            }
        }
    };
    let quotas = quotas.fill(
        decoded::skip_undecodable(watched, |_| {}).modify(triggers::strip_managed_fields),
        quotas_listed,
    );
    let quotas = watch::live_changes(quotas, true);

    // Room for a second reconcile per worker: workers never wait for the next Browser.
    let admission = Arc::new(bulk::Admission::new(2 * shared.workers.total()));
    let every_browser = bulk::every_browser(
        listed_rx,
        browser_reader.clone(),
        cached.browser.clone(),
        admission.clone(),
    );
    let scope = Arc::new(Scope {
        shared: shared.clone(),
        browsers: browser_reader.clone(),
        pods: pod_reader,
        configs: config_reader,
        quotas: quota_reader,
        pods_health,
        configs_health,
        quotas_health,
        lines: lines.clone(),
        fresher,
        failures,
        refusals: Mutex::new(HashMap::new()),
        admission,
    });

    // After each round's lists, every pod whose Browser the cache lacks is looked at.
    let scans = {
        let (pods, browsers, kind, candidates) = (
            scope.pods.clone(),
            browser_reader.clone(),
            cached.browser.clone(),
            candidates_tx.clone(),
        );
        orphans_rx.for_each(move |()| {
            for browser_ref in triggers::pods_without_browser(&pods, &browsers, &kind) {
                let ns = browser_ref.namespace.clone().unwrap_or_default();
                let _ = candidates.unbounded_send((ns, browser_ref.name));
            }
            ready(())
        })
    };
    let sweeper = futures::future::join(
        scans,
        orphans::run(scope.clone(), candidates_rx, candidates_tx),
    );
    let browser_ar = cached.browser.clone();
    let pod_mapper_ar = cached.browser.clone();
    let waiting_reader = browser_reader.clone();
    // Held until the scope stops: the `browsers` gauge reads this cache at scrape time.
    let _gauge_source = shared.metrics.observe_browsers(browser_reader.clone());
    info!(namespace = ns.unwrap_or("<all>"), "watching Browsers");
    let controller = Controller::for_stream_with(browsers, browser_reader, browser_ar)
        .watches_stream_with(
            pods,
            move |pod| triggers::browser_of_pod(&pod, &pod_mapper_ar),
            cached.pod.clone(),
        )
        .watches_stream_with(
            configs,
            move |config| match config.metadata.namespace.as_deref() {
                Some(ns) => triggers::waiting_browsers(&waiting_reader, ns, &cached.browser),
                None => Vec::new(),
            },
            kinds.browserconfig.clone(),
        )
        .watches_stream_with(
            quotas,
            move |quota| {
                let ns = quota.metadata.namespace.as_deref()?;
                lines.first(ns)
            },
            quota_ar,
        )
        .reconcile_on(every_browser)
        // The new first of a line, when the one before it left.
        .reconcile_on(wake_rx)
        // Every due reconcile starts at once and waits for a worker in the order it came
        // (`Shared::workers`): kube-runtime's own bound picks among waiting reconciles in no
        // particular order, which leaves some Browsers of a burst waiting far longer.
        .with_config(ControllerConfig::default().concurrency(0))
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, error_policy, scope)
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "controller event");
            }
        });
    // The sweeper of left-behind pods runs as long as the controller does.
    futures::future::select(Box::pin(controller), Box::pin(sweeper)).await;
}

/// Reports a Browser the client cannot decode (the operator never writes such a status, so
/// another writer put it there): a log line with its name and a Warning Event, once per
/// resourceVersion. It is left out of the cache, so it is not reconciled.
fn undecodable_browsers(shared: Arc<Shared>) -> impl FnMut(&Undecodable) + Send {
    let mut reported = std::collections::HashSet::new();
    move |undecodable| {
        let meta = &undecodable.metadata;
        let key = (meta.uid.clone(), meta.resource_version.clone());
        if reported.len() > REPORTED_MAX {
            reported.clear();
        }
        if !reported.insert(key) {
            return;
        }
        warn!(
            namespace = meta.namespace.as_deref().unwrap_or_default(),
            name = meta.name.as_deref().unwrap_or_default(),
            error = %undecodable.error,
            "cannot read this Browser; it is skipped"
        );
        let reference =
            DynamicObject::from_identity(meta.clone()).object_ref(&shared.kinds.browser);
        shared.events.publish(
            crate::lifecycle::plan::Event {
                warning: true,
                reason: crate::lifecycle::reason::Reason::Undecodable.into(),
                note: format!(
                    "the operator cannot read this Browser ({}); it is skipped until it changes",
                    undecodable.error
                ),
                action: "Read",
            },
            reference,
        );
    }
}

/// Undecodable objects remembered as reported at most; then the memory starts afresh.
const REPORTED_MAX: usize = 4096;

fn error_policy(browser: Arc<CachedBrowser>, error: &ReconcileError, scope: Arc<Scope>) -> Action {
    scope.shared.metrics.reconcile_error(error.kind());
    let key = (browser.namespace().unwrap_or_default(), browser.name_any());
    // A refusal will not pass with time: its few tries (`rejection::after_refusal`) come
    // quickly, so that the Browser fails within seconds.
    let wait = if let ReconcileError::Trouble(Trouble::Refused { .. }) = error {
        scope.refused(&key);
        REFUSAL_RETRY
    } else {
        scope.backoff(key)
    };
    warn!(namespace = %browser.namespace().unwrap_or_default(), name = %browser.name_any(), error = %error, retry_in = ?wait, "reconcile failed");
    Action::requeue(wait)
}
