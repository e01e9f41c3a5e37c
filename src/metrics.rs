//! Prometheus metric families (OpenMetrics text on `/metrics`). Label sets are bounded: no
//! Browser names, only verbs, resources, HTTP codes, reasons, startup stages, the
//! namespace / browser / version / phase of Browsers that exist, and the names of
//! BrowserConfigs with pre-pull DaemonSets.
//!
//! Counters and histograms are updated as things happen. The Browser, BrowserConfig and
//! pre-pull gauges are derived from the watch caches at scrape time, so they are exact after a
//! restart and never drift from what the cluster holds.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use jiff::Timestamp;
use kube::Resource;
use kube::api::DynamicObject;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets_range};
use prometheus_client::registry::Registry;
use serde_json::Value;

use crate::api::browser::{BrowserStatus, Phase};
use crate::config::lookup;
use crate::controller::cached::CachedBrowser;
use crate::pod::names;
use crate::prepull::progress;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    verb: &'static str,
    resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    stage: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventTypeLabels {
    r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct BrowserLabels {
    namespace: String,
    browser: String,
    version: String,
    phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct NamespaceLabels {
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct ConfigLabels {
    namespace: String,
    browserconfig: String,
}

/// The startup stages of a Browser, each observed at most once per Browser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Browser `creationTimestamp` → the operator sends the pod create.
    PodCreated,
    /// Pod `creationTimestamp` → its `PodScheduled` condition turned `True`.
    Scheduled,
    /// Browser `creationTimestamp` → the operator publishes `Running` with the pod IP.
    Running,
}

impl Stage {
    fn label(self) -> &'static str {
        match self {
            Stage::PodCreated => "pod_created",
            Stage::Scheduled => "scheduled",
            Stage::Running => "running",
        }
    }
}

/// 10 ms … 10 min in 20 exponential buckets (each about 1.8× the previous one).
fn startup_histogram() -> Histogram {
    Histogram::new(exponential_buckets_range(0.01, 600.0, 20))
}

/// 100 ms … 10 min: from a blip to a long control-plane outage.
fn resync_histogram() -> Histogram {
    Histogram::new(exponential_buckets_range(0.1, 600.0, 16))
}

/// The operator's metrics; cheap to update from any task.
pub struct Metrics {
    registry: Registry,
    reconciles: Counter,
    reconcile_errors: Family<KindLabels, Counter>,
    reconcile_duration: Histogram,
    in_flight: Gauge,
    writes: Family<WriteLabels, Counter>,
    pod_create_errors: Family<CodeLabels, Counter>,
    failures: Family<ReasonLabels, Counter>,
    startup: Family<StageLabels, Histogram, fn() -> Histogram>,
    deletions: Family<ReasonLabels, Counter>,
    watch_errors: Family<ResourceLabels, Counter>,
    watch_restarts: Family<ResourceLabels, Counter>,
    watch_resync: Family<ResourceLabels, Histogram, fn() -> Histogram>,
    events_dropped: Family<EventTypeLabels, Counter>,
    caches: Arc<Caches>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("browser_controller");
        let reconciles = Counter::default();
        registry.register("reconciles", "Browser reconciles run", reconciles.clone());
        let reconcile_errors = Family::<KindLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Browser reconciles that failed, by error kind",
            reconcile_errors.clone(),
        );
        // 1 ms … 10 min: reconciles are fast; the upper end catches stuck API calls.
        let reconcile_duration = Histogram::new(exponential_buckets_range(0.001, 600.0, 20));
        registry.register(
            "reconcile_duration_seconds",
            "Duration of Browser reconciles",
            reconcile_duration.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "reconciles_in_flight",
            "Browser reconciles running now",
            in_flight.clone(),
        );
        let writes = Family::<WriteLabels, Counter>::default();
        registry.register(
            "api_writes",
            "API writes issued, by verb and resource",
            writes.clone(),
        );
        let pod_create_errors = Family::<CodeLabels, Counter>::default();
        registry.register(
            "pod_create_errors",
            "Pod creates rejected by the API, by HTTP status",
            pod_create_errors.clone(),
        );
        let failures = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "browser_failures",
            "Browsers failed, by reason",
            failures.clone(),
        );
        let startup: Family<StageLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(startup_histogram);
        registry.register(
            "startup_seconds",
            "Browser startup latency by stage: pod_created (Browser created to pod create sent), scheduled (pod created to PodScheduled), running (Browser created to Running with pod IP published)",
            startup.clone(),
        );
        let deletions = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "browser_deletions",
            "Browsers the operator let go (finalizer released or Browser deleted), by the Browser's outcome: its failure reason, Succeeded, or external",
            deletions.clone(),
        );
        let watch_errors = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "watch_errors",
            "Watch errors (each followed by a restart with backoff), by resource",
            watch_errors.clone(),
        );
        let watch_restarts = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "watch_restarts",
            "Watches that listed again after their first list (expired or failed), by resource",
            watch_restarts.clone(),
        );
        let watch_resync: Family<ResourceLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(resync_histogram);
        registry.register(
            "watch_resync_seconds",
            "Time from a watch's first error to its cache being current again (relisted or delivering events), by resource",
            watch_resync.clone(),
        );
        let events_dropped = Family::<EventTypeLabels, Counter>::default();
        registry.register(
            "events_dropped",
            "Events not published because the publishing queue was full (Events go out at a bounded rate), by type",
            events_dropped.clone(),
        );
        let caches = Arc::new(Caches::default());
        registry.register_collector(Box::new(CacheGauges(caches.clone())));
        Self {
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            in_flight,
            writes,
            pod_create_errors,
            failures,
            startup,
            deletions,
            watch_errors,
            watch_restarts,
            watch_resync,
            events_dropped,
            caches,
        }
    }

    /// Counts one API write.
    pub fn write(&self, verb: &'static str, resource: &'static str) {
        self.writes
            .get_or_create(&WriteLabels { verb, resource })
            .inc();
    }

    pub fn pod_create_error(&self, code: u16) {
        self.pod_create_errors
            .get_or_create(&CodeLabels { code })
            .inc();
    }

    pub fn failure(&self, reason: &str) {
        self.failures
            .get_or_create(&ReasonLabels {
                reason: reason.to_string(),
            })
            .inc();
    }

    pub fn reconcile_error(&self, kind: &'static str) {
        self.reconcile_errors
            .get_or_create(&KindLabels { kind })
            .inc();
    }

    /// Observes one startup stage that began at `from` and completed at `to`. A negative
    /// span (clock skew between API server and operator) counts as zero.
    pub fn startup(&self, stage: Stage, from: Timestamp, to: Timestamp) {
        let seconds = Duration::try_from(to.duration_since(from)).map_or(0.0, |d| d.as_secs_f64());
        self.startup
            .get_or_create(&StageLabels {
                stage: stage.label(),
            })
            .observe(seconds);
    }

    /// Counts a Browser the operator let go, labelled by [`deletion_reason`].
    pub fn deletion(&self, reason: &str) {
        self.deletions
            .get_or_create(&ReasonLabels {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Counts one watch error of `resource`.
    pub fn watch_error(&self, resource: &'static str) {
        self.watch_errors
            .get_or_create(&ResourceLabels { resource })
            .inc();
    }

    /// Counts one relist of `resource` after its first list.
    pub fn watch_restart(&self, resource: &'static str) {
        self.watch_restarts
            .get_or_create(&ResourceLabels { resource })
            .inc();
    }

    /// Observes how long a watch of `resource` was failing before it delivered again.
    pub fn watch_resync(&self, resource: &'static str, down: Duration) {
        self.watch_resync
            .get_or_create(&ResourceLabels { resource })
            .observe(down.as_secs_f64());
    }

    /// Counts an Event dropped because the publishing queue was full.
    pub fn event_dropped(&self, warning: bool) {
        let r#type = if warning { "Warning" } else { "Normal" };
        self.events_dropped
            .get_or_create(&EventTypeLabels { r#type })
            .inc();
    }

    /// Derives `browsers` from this Browser cache until the registration drops.
    pub fn observe_browsers(&self, store: Store<CachedBrowser>) -> CacheRegistration {
        self.caches.add(Source::Browsers(store))
    }

    /// Derives `browserconfig_entries` and `browserconfig_conflicts` from this BrowserConfig
    /// cache until the registration drops.
    pub fn observe_configs(&self, store: Store<DynamicObject>) -> CacheRegistration {
        self.caches.add(Source::Configs(store))
    }

    /// Derives `prepull_images` and `prepull_nodes_pending` from this cache of pre-pull
    /// DaemonSets until the registration drops.
    pub fn observe_prepull(&self, store: Store<DynamicObject>) -> CacheRegistration {
        self.caches.add(Source::DaemonSets(store))
    }

    /// Whether a reconcile is running or waiting for a worker now.
    pub fn reconciling(&self) -> bool {
        self.in_flight.get() > 0
    }

    /// Marks a reconcile as running until the guard drops, then records its duration.
    pub fn reconcile_started(&self) -> ReconcileGuard<'_> {
        self.reconciles.inc();
        self.in_flight.inc();
        ReconcileGuard {
            metrics: self,
            start: std::time::Instant::now(),
        }
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// Drop guard measuring one reconcile.
pub struct ReconcileGuard<'a> {
    metrics: &'a Metrics,
    start: std::time::Instant,
}

impl Drop for ReconcileGuard<'_> {
    fn drop(&mut self) {
        self.metrics.in_flight.dec();
        let elapsed: Duration = self.start.elapsed();
        self.metrics
            .reconcile_duration
            .observe(elapsed.as_secs_f64());
    }
}

/// Why the operator let a Browser go, from its status: the failure reason of a `Failed`
/// Browser, `Succeeded`, or `external` when someone deleted it before it ended.
pub fn deletion_reason(browser_status: &Value) -> &str {
    let status = BrowserStatus::new(browser_status);
    match status.phase() {
        Some(Phase::Failed) => status
            .reason()
            .filter(|r| !r.is_empty() && names::check_label_value(r).is_ok())
            .unwrap_or(Phase::Failed.as_str()),
        Some(Phase::Succeeded) => Phase::Succeeded.as_str(),
        _ => "external",
    }
}

/// Whether writing `desired` over `current` publishes `Running` for the first time: the
/// transition from no phase or `Pending`, which happens once per Browser.
pub fn publishes_running(current: &Value, desired: &Value) -> bool {
    let (current, desired) = (BrowserStatus::new(current), BrowserStatus::new(desired));
    desired.phase() == Some(Phase::Running)
        && (current.phase_as_written().is_none() || current.phase() == Some(Phase::Pending))
}

/// When the pod's `PodScheduled` condition turned `True`.
fn scheduled_at(pod: &DynamicObject) -> Option<Timestamp> {
    pod.data
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| {
            c.get("type").and_then(Value::as_str) == Some("PodScheduled")
                && c.get("status").and_then(Value::as_str) == Some("True")
        })?
        .get("lastTransitionTime")?
        .as_str()?
        .parse()
        .ok()
}

/// The (pod created, pod scheduled) times when a live watch event shows `after` scheduled
/// and the cache's `before` (the same pod, if known) was not: the first sighting.
pub fn first_scheduled(
    before: Option<&DynamicObject>,
    after: &DynamicObject,
) -> Option<(Timestamp, Timestamp)> {
    let scheduled = scheduled_at(after)?;
    let seen_before = before
        .filter(|b| b.metadata.uid == after.metadata.uid)
        .and_then(scheduled_at)
        .is_some();
    if seen_before {
        return None;
    }
    let created = after.metadata.creation_timestamp.as_ref()?.0;
    Some((created, scheduled))
}

/// The `phase` label: the Browser's phase, `None` before the operator wrote one, `Unknown`
/// for anything outside the documented phases.
fn phase_label(browser: &CachedBrowser) -> String {
    browser
        .phase()
        .map_or("None", |p| {
            Phase::parse(p).unwrap_or(Phase::Unknown).as_str()
        })
        .into()
}

/// Browsers by namespace, browser, version and phase.
fn browser_counts<'a>(
    browsers: impl IntoIterator<Item = &'a CachedBrowser>,
) -> BTreeMap<BrowserLabels, i64> {
    let mut counts = BTreeMap::new();
    for browser in browsers {
        let labels = BrowserLabels {
            namespace: browser.metadata.namespace.clone().unwrap_or_default(),
            // Empty when not valid (the CRD requires a label value): no odd input makes an
            // unbounded label.
            browser: browser.browser_name().unwrap_or_default().into(),
            version: browser.browser_version().unwrap_or_default().into(),
            phase: phase_label(browser),
        };
        *counts.entry(labels).or_insert(0) += 1;
    }
    counts
}

/// What one namespace's BrowserConfigs offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ConfigCounts {
    /// Distinct browser/version entries that resolve.
    entries: i64,
    /// Definitions ignored because an older BrowserConfig defines the same entry.
    conflicts: i64,
}

/// [`ConfigCounts`] by namespace.
fn config_counts(configs: &[Arc<DynamicObject>]) -> BTreeMap<String, ConfigCounts> {
    let mut by_namespace: BTreeMap<String, Vec<Arc<DynamicObject>>> = BTreeMap::new();
    for config in configs {
        by_namespace
            .entry(config.metadata.namespace.clone().unwrap_or_default())
            .or_default()
            .push(config.clone());
    }
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    by_namespace
        .into_iter()
        .map(|(ns, configs)| {
            let entries: BTreeSet<(String, String)> = configs
                .iter()
                .flat_map(|c| lookup::resolvable_entries(c))
                .map(|(b, v)| (b.to_lowercase(), v.to_lowercase()))
                .collect();
            let counts = ConfigCounts {
                entries: count(entries.len()),
                conflicts: count(lookup::conflicts(&configs).len()),
            };
            (ns, counts)
        })
        .collect()
}

/// Per BrowserConfig: distinct images its pre-pull DaemonSets pull, and nodes where they
/// are not all pulled yet.
fn prepull_counts(daemon_sets: &[Arc<DynamicObject>]) -> BTreeMap<ConfigLabels, (i64, i64)> {
    let mut by_config: BTreeMap<ConfigLabels, Vec<&DynamicObject>> = BTreeMap::new();
    for ds in daemon_sets {
        if let Some((config, _)) = progress::owner(ds) {
            let labels = ConfigLabels {
                namespace: ds.metadata.namespace.clone().unwrap_or_default(),
                browserconfig: config.to_string(),
            };
            by_config.entry(labels).or_default().push(ds);
        }
    }
    by_config
        .into_iter()
        .map(|(labels, daemon_sets)| (labels, progress::totals(daemon_sets)))
        .collect()
}

enum Source {
    Browsers(Store<CachedBrowser>),
    Configs(Store<DynamicObject>),
    DaemonSets(Store<DynamicObject>),
}

/// Every cached object once, by kind.
#[derive(Default)]
struct Snapshot {
    browsers: Vec<Arc<CachedBrowser>>,
    configs: Vec<Arc<DynamicObject>>,
    daemon_sets: Vec<Arc<DynamicObject>>,
}

/// The watch caches the gauges are derived from, one per watched scope.
#[derive(Default)]
struct Caches {
    sources: Mutex<(u64, Vec<(u64, Source)>)>,
}

impl Caches {
    fn lock(&self) -> MutexGuard<'_, (u64, Vec<(u64, Source)>)> {
        self.sources.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(self: &Arc<Self>, source: Source) -> CacheRegistration {
        let mut sources = self.lock();
        sources.0 += 1;
        let id = sources.0;
        sources.1.push((id, source));
        CacheRegistration {
            caches: self.clone(),
            id,
        }
    }

    /// Every cached object once, even if two scopes overlap.
    fn snapshot(&self) -> Snapshot {
        let sources = self.lock();
        let mut out = Snapshot::default();
        let (mut seen_browsers, mut seen_configs, mut seen_daemon_sets) =
            (HashSet::new(), HashSet::new(), HashSet::new());
        for (_, source) in &sources.1 {
            match source {
                Source::Browsers(s) => once_each(s, &mut seen_browsers, &mut out.browsers),
                Source::Configs(s) => once_each(s, &mut seen_configs, &mut out.configs),
                Source::DaemonSets(s) => {
                    once_each(s, &mut seen_daemon_sets, &mut out.daemon_sets);
                }
            }
        }
        out
    }
}

/// Appends the objects of `store` not seen yet (by namespace and name).
fn once_each<K: Resource + Clone>(
    store: &Store<K>,
    seen: &mut HashSet<(Option<String>, Option<String>)>,
    out: &mut Vec<Arc<K>>,
) where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    for object in store.state() {
        let meta = object.meta();
        if seen.insert((meta.namespace.clone(), meta.name.clone())) {
            out.push(object);
        }
    }
}

/// Keeps a watch cache feeding the gauges; dropping it (its scope stopped) removes the
/// cache, so a scope started again never counts its objects twice.
#[must_use = "the cache stops feeding the gauges when the registration drops"]
pub struct CacheRegistration {
    caches: Arc<Caches>,
    id: u64,
}

impl Drop for CacheRegistration {
    fn drop(&mut self) {
        self.caches.lock().1.retain(|(id, _)| *id != self.id);
    }
}

/// Encodes the cache-derived gauges at scrape time.
struct CacheGauges(Arc<Caches>);

impl std::fmt::Debug for CacheGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CacheGauges")
    }
}

impl Collector for CacheGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Snapshot {
            browsers,
            configs,
            daemon_sets,
        } = self.0.snapshot();
        let counts = browser_counts(browsers.iter().map(AsRef::as_ref));
        encode_gauges(
            &mut encoder,
            "browsers",
            "Browsers in the watch cache by namespace, browser, version and phase (phase None: not yet handled).",
            counts.iter().map(|(labels, n)| (labels.clone(), *n)),
        )?;
        let per_namespace = config_counts(&configs);
        let namespace = |ns: &String| NamespaceLabels {
            namespace: ns.clone(),
        };
        encode_gauges(
            &mut encoder,
            "browserconfig_entries",
            "Distinct browser/version entries the namespace's BrowserConfigs resolve.",
            per_namespace
                .iter()
                .map(|(ns, c)| (namespace(ns), c.entries)),
        )?;
        encode_gauges(
            &mut encoder,
            "browserconfig_conflicts",
            "Entry definitions ignored because an older BrowserConfig of the namespace defines the same browser and version.",
            per_namespace
                .iter()
                .map(|(ns, c)| (namespace(ns), c.conflicts)),
        )?;
        let prepull = prepull_counts(&daemon_sets);
        encode_gauges(
            &mut encoder,
            "prepull_images",
            "Distinct images the BrowserConfig's pre-pull DaemonSets pull.",
            prepull
                .iter()
                .map(|(labels, (images, _))| (labels.clone(), *images)),
        )?;
        encode_gauges(
            &mut encoder,
            "prepull_nodes_pending",
            "Nodes where the BrowserConfig's pre-pull DaemonSets have not pulled every image yet, as the DaemonSet status reports.",
            prepull
                .iter()
                .map(|(labels, (_, pending))| (labels.clone(), *pending)),
        )
    }
}

/// Encodes one gauge family, described even when it has no sample.
fn encode_gauges<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, i64)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in samples {
        family.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::ApiResource;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;
    use serde_json::json;

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    fn browser_value(ns: &str, name: &str, version: &str, phase: Option<&str>) -> Value {
        let mut b = json!({
            "apiVersion": "selenosis.io/v1", "kind": "Browser",
            "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}")},
            "spec": {"browserName": "chrome", "browserVersion": version},
        });
        if let Some(phase) = phase {
            b["status"] = json!({"phase": phase});
        }
        b
    }

    fn browser(ns: &str, name: &str, version: &str, phase: Option<&str>) -> CachedBrowser {
        serde_json::from_value(browser_value(ns, name, version, phase)).unwrap()
    }

    fn config(ns: &str, name: &str, created: &str, browsers: Value) -> DynamicObject {
        object(json!({
            "apiVersion": "selenosis.io/v1", "kind": "BrowserConfig",
            "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}"), "creationTimestamp": created},
            "spec": {"browsers": browsers},
        }))
    }

    fn resource(kind: &str, plural: &str) -> ApiResource {
        ApiResource {
            group: "selenosis.io".into(),
            version: "v1".into(),
            api_version: "selenosis.io/v1".into(),
            kind: kind.into(),
            plural: plural.into(),
        }
    }

    /// A store filled by hand, as a watcher's initial list would fill it.
    fn store<K>(kind: &str, plural: &str, objects: Vec<K>) -> Store<K>
    where
        K: Resource<DynamicType = ApiResource> + Clone + 'static,
    {
        let mut writer = Writer::new(resource(kind, plural));
        writer.apply_watcher_event(&watcher::Event::Init);
        for o in objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(o));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        writer.as_reader()
    }

    fn sample(text: &str, prefix: &str) -> Option<String> {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_string)
    }

    #[test]
    fn families_appear_with_their_values() {
        let m = Metrics::new();
        m.write("apply", "pods");
        m.write("apply", "pods");
        m.pod_create_error(403);
        m.failure("ConfigNotFound");
        m.deletion("ConfigNotFound");
        m.watch_error("pods");
        {
            let _g = m.reconcile_started();
        }
        let text = m.encode().unwrap();
        for expected in [
            "browser_controller_api_writes_total{verb=\"apply\",resource=\"pods\"} 2",
            "browser_controller_pod_create_errors_total{code=\"403\"} 1",
            "browser_controller_browser_failures_total{reason=\"ConfigNotFound\"} 1",
            "browser_controller_browser_deletions_total{reason=\"ConfigNotFound\"} 1",
            "browser_controller_watch_errors_total{resource=\"pods\"} 1",
            "browser_controller_reconciles_total 1",
            "browser_controller_reconciles_in_flight 0",
            "browser_controller_reconcile_duration_seconds_count 1",
            "# TYPE browser_controller_browsers gauge",
            "# TYPE browser_controller_browserconfig_entries gauge",
            "# TYPE browser_controller_browserconfig_conflicts gauge",
            "# TYPE browser_controller_prepull_images gauge",
            "# TYPE browser_controller_prepull_nodes_pending gauge",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn startup_buckets_resolve_ten_milliseconds_to_ten_minutes() {
        let m = Metrics::new();
        let created: Timestamp = "2026-01-01T10:00:00Z".parse().unwrap();
        m.startup(
            Stage::PodCreated,
            created,
            "2026-01-01T10:00:00.02Z".parse().unwrap(),
        );
        m.startup(
            Stage::Running,
            created,
            "2026-01-01T10:05:00Z".parse().unwrap(),
        );
        // Clock skew: the operator's clock behind the API server's.
        m.startup(
            Stage::Scheduled,
            created,
            "2026-01-01T09:59:59Z".parse().unwrap(),
        );
        let text = m.encode().unwrap();
        let stage = |s: &str, suffix: &str| {
            sample(
                &text,
                &format!("browser_controller_startup_seconds_{suffix}{{stage=\"{s}\""),
            )
        };
        assert_eq!(stage("pod_created", "count").as_deref(), Some("1"));
        assert_eq!(stage("running", "sum").as_deref(), Some("300.0"));
        assert_eq!(stage("scheduled", "sum").as_deref(), Some("0.0"));
        let buckets = |s: &str| -> Vec<(f64, u64)> {
            text.lines()
                .filter(|l| l.starts_with("browser_controller_startup_seconds_bucket{"))
                .filter(|l| l.contains(&format!("stage=\"{s}\"")))
                .filter_map(|l| {
                    let le = l.split("le=\"").nth(1)?.split('"').next()?.parse().ok()?;
                    Some((le, l.rsplit(' ').next()?.parse().ok()?))
                })
                .filter(|(le, _): &(f64, u64)| le.is_finite())
                .collect()
        };
        let bounds = buckets("running");
        assert_eq!(bounds.len(), 20, "{text}");
        assert!((bounds[0].0 - 0.01).abs() < 1e-9, "{bounds:?}");
        assert!((bounds[19].0 - 600.0).abs() < 1e-6, "{bounds:?}");
        // 20 ms lands in the third bucket (0.01, 0.018, 0.032, …): resolved, not lumped.
        let (le, _) = buckets("pod_created")
            .into_iter()
            .find(|(_, count)| *count == 1)
            .unwrap();
        assert!(le > 0.02 && le < 0.04, "{le}");
    }

    #[test]
    fn the_browser_gauge_is_derived_from_the_caches_and_stops_with_them() {
        let m = Metrics::new();
        let all = store(
            "Browser",
            "browsers",
            vec![
                browser("a", "s1", "139.0", Some("Running")),
                browser("a", "s2", "139.0", Some("Running")),
                browser("a", "s3", "139.0", None),
                browser("b", "s4", "128.0", Some("Failed")),
                browser("b", "s5", "128.0", Some("Gone fishing")),
            ],
        );
        // An overlapping scope does not count the same Browser twice.
        let overlap = store(
            "Browser",
            "browsers",
            vec![browser("b", "s4", "128.0", Some("Failed"))],
        );
        let first = m.observe_browsers(all);
        let second = m.observe_browsers(overlap);
        let text = m.encode().unwrap();
        let gauge = |ns: &str, version: &str, phase: &str| {
            sample(
                &text,
                &format!(
                    "browser_controller_browsers{{namespace=\"{ns}\",browser=\"chrome\",version=\"{version}\",phase=\"{phase}\"}}"
                ),
            )
        };
        assert_eq!(gauge("a", "139.0", "Running").as_deref(), Some("2"));
        assert_eq!(gauge("a", "139.0", "None").as_deref(), Some("1"));
        assert_eq!(gauge("b", "128.0", "Failed").as_deref(), Some("1"));
        assert_eq!(gauge("b", "128.0", "Unknown").as_deref(), Some("1"));
        assert!(!text.contains("s1"), "no Browser names in labels: {text}");
        drop(first);
        drop(second);
        let text = m.encode().unwrap();
        assert!(
            !text.contains("browser_controller_browsers{"),
            "a stopped scope's cache no longer counts: {text}"
        );
    }

    #[test]
    fn odd_spec_values_do_not_become_labels() {
        let mut b = browser_value("a", "s1", "139.0", Some("Pending"));
        b["spec"]["browserVersion"] = json!("x\"y z".repeat(20));
        let b: CachedBrowser = serde_json::from_value(b).unwrap();
        let counts = browser_counts([&b]);
        let labels = counts.keys().next().unwrap();
        assert_eq!(labels.version, "");
        assert_eq!(labels.browser, "chrome");
    }

    #[test]
    fn config_gauges_count_entries_and_conflicts_per_namespace() {
        let m = Metrics::new();
        let configs = store(
            "BrowserConfig",
            "browserconfigs",
            vec![
                config(
                    "a",
                    "old",
                    "2026-01-01T00:00:00Z",
                    json!({"chrome": {"139.0": {"image": "c:139"}, "138.0": {"image": "c:138"}}}),
                ),
                config(
                    "a",
                    "young",
                    "2026-02-01T00:00:00Z",
                    json!({"Chrome": {"139.0": {"image": "other"}}, "firefox": {"*": {"image": "f:{version}"}}}),
                ),
                // A `*` entry without image resolves nothing on its own.
                config(
                    "b",
                    "defaults",
                    "2026-01-01T00:00:00Z",
                    json!({"chrome": {"*": {"env": []}, "120.0": {"image": "c:120"}}}),
                ),
            ],
        );
        let _registration = m.observe_configs(configs);
        let text = m.encode().unwrap();
        for expected in [
            "browser_controller_browserconfig_entries{namespace=\"a\"} 3",
            "browser_controller_browserconfig_conflicts{namespace=\"a\"} 1",
            "browser_controller_browserconfig_entries{namespace=\"b\"} 1",
            "browser_controller_browserconfig_conflicts{namespace=\"b\"} 0",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
    }

    fn daemon_set(ns: &str, name: &str, owner: &str, images: &[&str], status: Value) -> Value {
        let mut init = vec![json!({"name": "prepull-tools", "image": "busybox"})];
        init.extend(
            images
                .iter()
                .enumerate()
                .map(|(i, image)| json!({"name": format!("pull-{}", i + 1), "image": image})),
        );
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": ns, "generation": 1,
                "ownerReferences": [{"apiVersion": "selenosis.io/v1", "kind": "BrowserConfig", "name": owner, "uid": owner, "controller": true}]},
            "spec": {"template": {"spec": {"initContainers": init}}},
            "status": status,
        })
    }

    #[test]
    fn prepull_gauges_count_images_and_pending_nodes_per_config() {
        let m = Metrics::new();
        let ready = |desired: i64, ready: i64| json!({"observedGeneration": 1, "desiredNumberScheduled": desired, "updatedNumberScheduled": desired, "numberReady": ready});
        let daemon_sets = store(
            "DaemonSet",
            "daemonsets",
            vec![
                object(daemon_set(
                    "a",
                    "ds1",
                    "chrome",
                    &["c:139", "s:2"],
                    ready(3, 1),
                )),
                object(daemon_set(
                    "a",
                    "ds2",
                    "chrome",
                    &["c:140", "s:2"],
                    ready(2, 2),
                )),
                object(daemon_set("b", "ds3", "firefox", &["f:1"], Value::Null)),
            ],
        );
        let _registration = m.observe_prepull(daemon_sets);
        let text = m.encode().unwrap();
        for expected in [
            "browser_controller_prepull_images{namespace=\"a\",browserconfig=\"chrome\"} 3",
            "browser_controller_prepull_nodes_pending{namespace=\"a\",browserconfig=\"chrome\"} 2",
            "browser_controller_prepull_images{namespace=\"b\",browserconfig=\"firefox\"} 1",
            "browser_controller_prepull_nodes_pending{namespace=\"b\",browserconfig=\"firefox\"} 0",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
    }

    #[test]
    fn deletion_reasons_follow_the_outcome() {
        assert_eq!(
            deletion_reason(&json!({"phase": "Failed", "reason": "ConfigNotFound"})),
            "ConfigNotFound"
        );
        assert_eq!(deletion_reason(&json!({"phase": "Failed"})), "Failed");
        assert_eq!(deletion_reason(&json!({"phase": "Succeeded"})), "Succeeded");
        assert_eq!(deletion_reason(&json!({"phase": "Running"})), "external");
        assert_eq!(deletion_reason(&Value::Null), "external");
    }

    #[test]
    fn running_is_published_for_the_first_time_only_from_pending_or_nothing() {
        let running = json!({"phase": "Running", "podIP": "10.0.0.1"});
        assert!(publishes_running(&Value::Null, &running));
        assert!(publishes_running(&json!({"phase": "Pending"}), &running));
        assert!(!publishes_running(&running, &running));
        assert!(!publishes_running(&json!({"phase": "Unknown"}), &running));
        assert!(!publishes_running(
            &json!({"phase": "Pending"}),
            &json!({"phase": "Failed"})
        ));
    }

    fn pod(uid: &str, scheduled: Option<&str>) -> DynamicObject {
        let conditions = match scheduled {
            Some(at) => {
                json!([{"type": "PodScheduled", "status": "True", "lastTransitionTime": at}])
            }
            None => {
                json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": "2026-01-01T10:00:01Z"}])
            }
        };
        object(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "s1", "namespace": "a", "uid": uid, "creationTimestamp": "2026-01-01T10:00:00Z"},
            "status": {"phase": "Pending", "conditions": conditions},
        }))
    }

    #[test]
    fn scheduling_is_measured_on_the_first_sighting_only() {
        let unscheduled = pod("u", None);
        let scheduled = pod("u", Some("2026-01-01T10:00:03Z"));
        let (created, at) = first_scheduled(Some(&unscheduled), &scheduled).unwrap();
        assert_eq!(at.duration_since(created).as_secs(), 3);
        assert!(first_scheduled(None, &scheduled).is_some());
        assert!(first_scheduled(Some(&scheduled), &scheduled).is_none());
        assert!(first_scheduled(Some(&unscheduled), &unscheduled).is_none());
        // A different pod of the same name is a new sighting.
        assert!(
            first_scheduled(Some(&pod("old", Some("2026-01-01T09:00:00Z"))), &scheduled).is_some()
        );
    }
}
