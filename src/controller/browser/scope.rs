//! One watched scope of the Browser controller (all namespaces, or one `--namespace`): its
//! four watch caches (Browsers, the operator's pods, BrowserConfigs, ResourceQuotas), each
//! with its reflector, and its index (`index::Index`) beside them. Every watch event goes
//! into its cache, then to the index, and the keys it makes into the work queue; a reconcile
//! begins and ends through the index.

use std::future::{Future, ready};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::{Stream, StreamExt};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tracing::{info, warn};

use super::super::Shared;
use super::super::watch::{self, scoped_api};
use crate::api::{keys, kinds};
use crate::cached::{CachedBrowser, CachedPod};
use crate::decoded::{Decoded, FromIdentity, Undecodable};
use crate::index::{self, Begun, Cache, Index, Key, Work};
use crate::lifecycle::lane::Lane;
use crate::lifecycle::milestones;
use crate::lifecycle::plan::Event;
use crate::lifecycle::reason::Reason;
use crate::lifecycle::reconcile::Done;
use crate::metrics::{Stage, Watched};

/// Undecodable objects remembered as reported at most; then the memory starts afresh.
const REPORTED_MAX: usize = 4096;

pub struct Scope {
    pub shared: Arc<Shared>,
    namespace: Option<String>,
    browsers: Store<CachedBrowser>,
    pods: Store<CachedPod>,
    configs: Store<DynamicObject>,
    quotas: Store<DynamicObject>,
    index: Mutex<Index>,
}

/// The index's view of a watch event.
fn event<K>(event: &watcher::Event<K>) -> index::Event<'_, K> {
    match event {
        watcher::Event::Apply(object) => index::Event::Applied(object),
        watcher::Event::Delete(object) => index::Event::Deleted(object),
        watcher::Event::Init => index::Event::Listing,
        watcher::Event::InitApply(object) => index::Event::Listed(object),
        watcher::Event::InitDone => index::Event::ListDone,
    }
}

impl Scope {
    /// The scope of `namespace` (all for `None`), and the future that runs its watches.
    pub fn watch(
        shared: Arc<Shared>,
        namespace: Option<String>,
    ) -> (Arc<Self>, impl Future<Output = ()> + Send) {
        let (cached, health) = (&shared.cached, |watched| shared.watch_health(watched));
        let browsers = watch::Cache::new(cached.browser.clone(), health(Watched::Browsers));
        let pods = watch::Cache::new(cached.pod.clone(), health(Watched::Pods));
        let configs = watch::Cache::new(
            shared.kinds.browserconfig.clone(),
            health(Watched::BrowserConfigs),
        );
        let quotas = watch::Cache::new(kinds::resource_quotas(), health(Watched::ResourceQuotas));
        let scope = Arc::new(Scope {
            shared: shared.clone(),
            namespace,
            browsers: browsers.reader.clone(),
            pods: pods.reader.clone(),
            configs: configs.reader.clone(),
            quotas: quotas.reader.clone(),
            index: Mutex::new(Index::new(cached.clone())),
        });
        let browsers = scope.watch_browsers(browsers);
        let pods = scope.watch_pods(pods);
        let configs = scope.watch_configs(configs);
        let quotas = scope.watch_quotas(quotas);
        // Held while the watches run: the `browsers` gauge reads this cache at scrape time.
        let gauges = shared.metrics.observe_browsers(scope.browsers.clone());
        info!(
            namespace = scope.namespace.as_deref().unwrap_or("<all>"),
            "watching Browsers"
        );
        let run = async move {
            let _gauges = gauges;
            futures::join!(drain(browsers), drain(pods), drain(configs), drain(quotas));
        };
        (scope, run)
    }

    /// The API of `resource` in this scope.
    fn api<K>(&self, resource: &K::DynamicType) -> kube::Api<K>
    where
        K: kube::Resource<Scope = kube::core::DynamicResourceScope>,
    {
        scoped_api(&self.shared.client, self.namespace.as_deref(), resource)
    }

    /// Browsers, listed in pages where lists are not streamed; one the client cannot decode
    /// is reported and left out.
    fn watch_browsers(
        self: &Arc<Self>,
        cache: watch::Cache<CachedBrowser>,
    ) -> impl Stream + Send + use<> {
        let shared = &self.shared;
        let api = self.api::<Decoded<CachedBrowser>>(&shared.cached.browser);
        let config = watch::list_in_pages(watcher::Config::default());
        let watched = cache.watch(api, config, &shared.link);
        let scope = self.clone();
        cache.fill_with(
            watch::skip_undecodable(watched, undecodable_browsers(shared.clone())),
            move |e| scope.on_browser(e),
            || {},
        )
    }

    /// The operator's pods (its label), listed in pages where lists are not streamed.
    fn watch_pods(self: &Arc<Self>, cache: watch::Cache<CachedPod>) -> impl Stream + Send + use<> {
        let shared = &self.shared;
        let api = self.api::<CachedPod>(&shared.cached.pod);
        let config = watcher::Config::default().labels(&keys::managed_pods_selector());
        let watched = cache.watch(api, watch::list_in_pages(config), &shared.link);
        let (scope, observed) = (self.clone(), self.clone());
        cache.fill_with(
            watched.inspect(move |e| observed.observe_scheduling(e)),
            move |e| scope.on_pod(e),
            || {},
        )
    }

    /// BrowserConfigs; one the client cannot decode is reported by the BrowserConfig
    /// controller, and here only left out.
    fn watch_configs(
        self: &Arc<Self>,
        cache: watch::Cache<DynamicObject>,
    ) -> impl Stream + Send + use<> {
        let shared = &self.shared;
        let api = self.api::<Decoded<DynamicObject>>(&shared.kinds.browserconfig);
        let config = watcher::Config::default().any_semantic();
        let watched = cache.watch(api, config, &shared.link);
        let scope = self.clone();
        cache.fill_with(
            watch::skip_undecodable(watched, |_| {}).modify(strip_managed_fields),
            move |e| scope.on_config(e),
            || {},
        )
    }

    fn watch_quotas(
        self: &Arc<Self>,
        cache: watch::Cache<DynamicObject>,
    ) -> impl Stream + Send + use<> {
        let shared = &self.shared;
        let api = self.api::<Decoded<DynamicObject>>(&kinds::resource_quotas());
        let config = watcher::Config::default().any_semantic();
        let watched = cache.watch(api, config, &shared.link);
        let scope = self.clone();
        cache.fill_with(
            watch::skip_undecodable(watched, |_| {}).modify(strip_managed_fields),
            move |e| scope.on_quota(e),
            || {},
        )
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the Browser `ns`/`name` is in this scope.
    pub fn covers(&self, ns: &str) -> bool {
        self.namespace.as_deref().is_none_or(|mine| mine == ns)
    }

    fn browser(&self, (ns, name): &Key) -> Option<Arc<CachedBrowser>> {
        self.browsers
            .get(&ObjectRef::new_with(name, self.shared.cached.browser.clone()).within(ns))
    }

    fn pod(&self, (ns, name): &Key) -> Option<Arc<CachedPod>> {
        self.pods
            .get(&ObjectRef::new_with(name, self.shared.cached.pod.clone()).within(ns))
    }

    /// The lane `key`'s reconcile needs now; a Browser gone from the cache has only cleanup
    /// left.
    pub fn lane(&self, key: &Key) -> Lane {
        self.browser(key).map_or(Lane::Cleanup, |browser| {
            browser.lane(self.pod(key).as_deref())
        })
    }

    /// Hands `work` to the work queue: its keys, each in the lane it needs now; for a
    /// completed list, every Browser of the scope and every pod without one (backoffs start
    /// small again: the API server answers).
    fn enqueue(&self, work: Work) {
        let queue = &self.shared.queue;
        if work.everything {
            queue.forget_all();
            let browsers = self.browsers.state().into_iter().filter_map(|b| {
                let key = (b.metadata.namespace.clone()?, b.metadata.name.clone()?);
                let lane = b.lane(self.pod(&key).as_deref());
                Some((key, lane))
            });
            let orphans = self.pods.state().into_iter().filter_map(|pod| {
                let key = (pod.metadata.namespace.clone()?, pod.browser()?.to_string());
                self.browser(&key).is_none().then_some((key, Lane::Cleanup))
            });
            queue.add(browsers.chain(orphans));
        }
        if !work.keys.is_empty() {
            queue.add(work.keys.into_iter().map(|key| {
                let lane = self.lane(&key);
                (key, lane)
            }));
        }
    }

    fn on_browser(&self, item: &Result<watcher::Event<CachedBrowser>, watcher::Error>) {
        if let Ok(e) = item {
            let work = self.index().browser(event(e));
            self.enqueue(work);
        }
    }

    fn on_pod(&self, item: &Result<watcher::Event<CachedPod>, watcher::Error>) {
        if let Ok(e) = item {
            let work = self.index().pod(event(e));
            self.enqueue(work);
        }
    }

    /// A BrowserConfig change may resolve the Browsers of its namespace still waiting for
    /// their pod (docs/behaviour.md, "Normal path").
    fn on_config(&self, item: &Result<watcher::Event<DynamicObject>, watcher::Error>) {
        let work = match item {
            Ok(watcher::Event::Apply(config) | watcher::Event::Delete(config)) => {
                let ns = config.namespace();
                let keys = self
                    .browsers
                    .state()
                    .iter()
                    .filter(|b| b.metadata.namespace == ns && !b.deleting() && b.phase().is_none())
                    .filter_map(|b| Some((ns.clone()?, b.metadata.name.clone()?)))
                    .collect();
                Work {
                    keys,
                    everything: false,
                }
            }
            Ok(watcher::Event::InitDone) => self.index().listed(Cache::BrowserConfigs),
            _ => return,
        };
        if self.index().ready() {
            self.enqueue(work);
        }
    }

    /// A ResourceQuota change may make room for the first Browser waiting in its namespace's
    /// line; after a relist (it may have missed changes) the first of every line looks again.
    fn on_quota(&self, item: &Result<watcher::Event<DynamicObject>, watcher::Error>) {
        let work = match item {
            Ok(watcher::Event::Apply(quota) | watcher::Event::Delete(quota)) => {
                let Some(ns) = quota.namespace() else { return };
                self.index().quota_changed(&ns)
            }
            Ok(watcher::Event::InitDone) => self.index().quotas_listed(),
            _ => return,
        };
        self.enqueue(work);
    }

    /// Observes the `scheduled` startup stage on the first live watch event that shows a pod
    /// scheduled, before the cache holds it (it still holds the previous state). A relist is
    /// not a first sighting: the pod may have been seen before.
    fn observe_scheduling(&self, item: &Result<watcher::Event<CachedPod>, watcher::Error>) {
        if let Ok(watcher::Event::Apply(pod)) = item {
            let kind = &self.shared.cached.pod;
            let before = self
                .pods
                .get(&ObjectRef::from_obj_with(pod, kind.clone()))
                .map(|before| before.to_object(kind));
            let after = pod.to_object(kind);
            if let Some((created, scheduled)) = milestones::first_scheduled(before.as_ref(), &after)
            {
                self.shared
                    .metrics
                    .startup(Stage::Scheduled, created, scheduled);
            }
        }
    }

    /// A reconcile of `key` begins: what it decides on, and its namespace's ResourceQuotas.
    pub fn begin(&self, key: &Key) -> (Begun, Vec<serde_json::Value>) {
        // The caches are read under the index's lock: an event reaches its cache before the
        // index, so a copy read before the lock may be older than an echo the index has just
        // taken as the cache catching up (a repeated write would follow), or than a quota
        // change the index counted as seen by this reconcile.
        let (begun, quotas) = {
            let mut index = self.index();
            let (browser, pod, quotas) = (self.browser(key), self.pod(key), self.quotas(&key.0));
            let begun = index.begin(key, browser.as_deref(), pod.as_deref(), !quotas.is_empty());
            (begun, quotas)
        };
        // Turned into JSON once the lock is let go.
        let quotas = quotas
            .iter()
            .filter_map(|q| serde_json::to_value(q.as_ref()).ok());
        (begun, quotas.collect())
    }

    /// The reconcile of `key` ended with `done`: what its answers taught goes to the index,
    /// and what that asks of the work queue to the queue.
    pub fn end(&self, key: &Key, done: &Done) {
        let work = self.index().end(key, done);
        self.enqueue(work);
    }

    /// The BrowserConfigs of namespace `ns`.
    pub fn configs(&self, ns: &str) -> Vec<Arc<DynamicObject>> {
        let configs = self.configs.state().into_iter();
        configs
            .filter(|c| c.metadata.namespace.as_deref() == Some(ns))
            .collect()
    }

    /// The ResourceQuotas of namespace `ns`.
    fn quotas(&self, ns: &str) -> Vec<Arc<DynamicObject>> {
        let quotas = self.quotas.state().into_iter();
        quotas
            .filter(|q| q.metadata.namespace.as_deref() == Some(ns))
            .collect()
    }
}

/// Runs a watch: what it brings goes into its cache and the index on the way.
async fn drain(watch: impl Stream) {
    watch.for_each(|_| ready(())).await;
}

fn strip_managed_fields(object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
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
        let reference = kube::Resource::object_ref(
            &DynamicObject::from_identity(meta.clone()),
            &shared.kinds.browser,
        );
        shared.events.publish(
            Event {
                warning: true,
                reason: Reason::Undecodable.into(),
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
