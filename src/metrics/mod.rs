//! Prometheus metric families (OpenMetrics text on `/metrics`). Label sets are bounded: no
//! Browser names, only verbs, resources, HTTP codes, reasons, startup stages, the
//! namespace / browser / version / phase of Browsers that exist, and the names of
//! BrowserConfigs with pre-pull DaemonSets.
//!
//! Counters and histograms are updated as things happen; their label values known ahead (error
//! kinds, writes, stages, reasons, watched resources …) start at 0, so that every family is in
//! the first scrape. The Browser, BrowserConfig and pre-pull gauges are derived from the watch
//! caches at scrape time (`cache_gauges`), so they are exact after a restart and never drift
//! from what the cluster holds.

mod cache_gauges;

use crate::lifecycle::lane::Lane;
use crate::lifecycle::milestones;
use crate::lifecycle::plan::LeftLine;
use crate::lifecycle::reason::Reason;
use crate::lifecycle::rejection::FAILING_CODES;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::api::DynamicObject;
use kube::runtime::reflector::Store;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets_range};
use prometheus_client::registry::{Metric, Registry};

use crate::cached::CachedBrowser;
pub use cache_gauges::CacheRegistration;
use cache_gauges::{CacheGauges, Caches, Source};

/// A set of one label (`[("kind", "write")]`): each family names its label where it takes it.
type Label<V = &'static str> = [(&'static str, V); 1];

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
    pub const ALL: [Stage; 3] = [Stage::PodCreated, Stage::Scheduled, Stage::Running];

    fn label(self) -> Label {
        let stage = match self {
            Stage::PodCreated => "pod_created",
            Stage::Scheduled => "scheduled",
            Stage::Running => "running",
        };
        [("stage", stage)]
    }
}

/// What went wrong in a reconcile that failed and is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// An API write failed.
    Write,
    /// The Browser or its pod could not be read.
    Read,
    /// A watch cache closed.
    Store,
    /// An object could not be serialised.
    Serialize,
    /// A pod was rejected for a field the cluster's Pod schema lacks.
    Schema,
    /// Each decision was overtaken by what its writes found.
    Unsettled,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 6] = [
        ErrorKind::Write,
        ErrorKind::Read,
        ErrorKind::Store,
        ErrorKind::Serialize,
        ErrorKind::Schema,
        ErrorKind::Unsettled,
    ];

    fn label(self) -> Label {
        let kind = match self {
            ErrorKind::Write => "write",
            ErrorKind::Read => "read",
            ErrorKind::Store => "store",
            ErrorKind::Serialize => "serialize",
            ErrorKind::Schema => "schema",
            ErrorKind::Unsettled => "unsettled",
        };
        [("kind", kind)]
    }
}

/// An API write the operator issues, counted by verb and resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiWrite {
    ApplyPod,
    /// The server-side dry run of a BrowserConfig entry's pod.
    DryRunPod,
    DeletePod,
    ApplyBrowser,
    ApplyBrowserStatus,
    PatchBrowser,
    DeleteBrowser,
    ApplyConfigStatus,
    /// The release of the Go controller's finalizer from a deleted BrowserConfig.
    PatchBrowserConfig,
    ApplyDaemonSet,
    DeleteDaemonSet,
    CreateEvent,
}

impl ApiWrite {
    pub const ALL: [ApiWrite; 12] = [
        ApiWrite::ApplyPod,
        ApiWrite::DryRunPod,
        ApiWrite::DeletePod,
        ApiWrite::ApplyBrowser,
        ApiWrite::ApplyBrowserStatus,
        ApiWrite::PatchBrowser,
        ApiWrite::DeleteBrowser,
        ApiWrite::ApplyConfigStatus,
        ApiWrite::PatchBrowserConfig,
        ApiWrite::ApplyDaemonSet,
        ApiWrite::DeleteDaemonSet,
        ApiWrite::CreateEvent,
    ];

    fn labels(self) -> [(&'static str, &'static str); 2] {
        let (verb, resource) = match self {
            ApiWrite::ApplyPod => ("apply", "pods"),
            ApiWrite::DryRunPod => ("apply-dry-run", "pods"),
            ApiWrite::DeletePod => ("delete", "pods"),
            ApiWrite::ApplyBrowser => ("apply", "browsers"),
            ApiWrite::ApplyBrowserStatus => ("apply", "browsers/status"),
            ApiWrite::PatchBrowser => ("patch", "browsers"),
            ApiWrite::DeleteBrowser => ("delete", "browsers"),
            ApiWrite::ApplyConfigStatus => ("apply", "browserconfigs/status"),
            ApiWrite::PatchBrowserConfig => ("patch", "browserconfigs"),
            ApiWrite::ApplyDaemonSet => ("apply", "daemonsets"),
            ApiWrite::DeleteDaemonSet => ("delete", "daemonsets"),
            ApiWrite::CreateEvent => ("create", "events"),
        };
        [("verb", verb), ("resource", resource)]
    }
}

/// A resource the operator watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watched {
    Browsers,
    Pods,
    BrowserConfigs,
    ResourceQuotas,
    /// Pre-pull DaemonSets (with `--enable-prepull`).
    DaemonSets,
}

impl Watched {
    pub const ALL: [Watched; 5] = [
        Watched::Browsers,
        Watched::Pods,
        Watched::BrowserConfigs,
        Watched::ResourceQuotas,
        Watched::DaemonSets,
    ];

    /// The resource's plural name, as metrics and logs name it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Watched::Browsers => "browsers",
            Watched::Pods => "pods",
            Watched::BrowserConfigs => "browserconfigs",
            Watched::ResourceQuotas => "resourcequotas",
            Watched::DaemonSets => "daemonsets",
        }
    }

    fn label(self) -> Label {
        [("resource", self.as_str())]
    }
}

/// How a Browser left its line for quota, as `queue_wait_seconds` labels it.
fn outcome(left: LeftLine) -> Label {
    match left {
        LeftLine::Admitted(_) => [("outcome", "admitted")],
        LeftLine::TimedOut(_) => [("outcome", "timed_out")],
    }
}

fn event_type(warning: bool) -> Label {
    [("type", if warning { "Warning" } else { "Normal" })]
}

fn lane(lane: Lane) -> Label {
    [("lane", lane.as_str())]
}

fn reason(reason: &str) -> Label<String> {
    [("reason", reason.to_string())]
}

/// Creates the series of `labels` in `family`, at 0.
fn zero<S: Clone + Hash + Eq, M, C: MetricConstructor<M>>(
    family: &Family<S, M, C>,
    labels: impl IntoIterator<Item = S>,
) {
    for labels in labels {
        drop(family.get_or_create(&labels));
    }
}

fn inc<S: Clone + Hash + Eq>(family: &Family<S, Counter>, labels: S) {
    family.get_or_create(&labels).inc();
}

fn observe<S: Clone + Hash + Eq>(
    family: &Family<S, Histogram, fn() -> Histogram>,
    labels: S,
    value: f64,
) {
    family.get_or_create(&labels).observe(value);
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
    reconciling: Reconciles,
    outcomes: Outcomes,
    health: Health,
    caches: Arc<Caches>,
}

/// Metric families of the reconciling.
struct Reconciles {
    reconciles: Counter,
    reconcile_errors: Family<Label, Counter>,
    reconcile_duration: Histogram,
    in_flight: Gauge,
    waiting: Family<Label, Gauge>,
}

impl Reconciles {
    fn register(r: &mut Registry) -> Self {
        Self {
            reconciles: registered(r, "reconciles", "Browser reconciles run"),
            reconcile_errors: registered(
                r,
                "reconcile_errors",
                "Browser reconciles that failed, by error kind",
            ),
            // 1 ms … 10 min: reconciles are fast; the upper end catches stuck API calls.
            reconcile_duration: registered_as(
                r,
                "reconcile_duration_seconds",
                "Duration of Browser reconciles",
                Histogram::new(exponential_buckets_range(0.001, 600.0, 20)),
            ),
            in_flight: registered(r, "reconciles_in_flight", "Browser reconciles running now"),
            waiting: registered(
                r,
                "reconciles_waiting",
                "Browser reconciles waiting for a worker (--max-workers), by lane: status, create, cleanup",
            ),
        }
    }
}

/// Metric families of the outcomes.
struct Outcomes {
    writes: Family<[(&'static str, &'static str); 2], Counter>,
    pod_create_errors: Family<Label<u16>, Counter>,
    failures: Family<Label<String>, Counter>,
    startup: Family<Label, Histogram, fn() -> Histogram>,
    queue_wait: Family<Label, Histogram, fn() -> Histogram>,
    queue_timeout: Gauge,
    deletions: Family<Label<String>, Counter>,
    events_dropped: Family<Label, Counter>,
}

impl Outcomes {
    fn register(r: &mut Registry) -> Self {
        Self {
            writes: registered(r, "api_writes", "API writes issued, by verb and resource"),
            pod_create_errors: registered(
                r,
                "pod_create_errors",
                "Pod creates rejected by the API, by HTTP status",
            ),
            failures: registered(r, "browser_failures", "Browsers failed, by reason"),
            startup: registered_as(
                r,
                "startup_seconds",
                "Browser startup latency by stage: pod_created (Browser created to pod create sent), scheduled (pod created to PodScheduled), running (Browser created to Running with pod IP published)",
                Family::new_with_constructor(startup_histogram),
            ),
            queue_wait: registered_as(
                r,
                "queue_wait_seconds",
                "How long Browsers waited in line for quota, by how they left it: admitted (got their pod) or timed_out (failed after --queue-timeout)",
                Family::new_with_constructor(startup_histogram),
            ),
            queue_timeout: registered(
                r,
                "queue_timeout_seconds",
                "The --queue-timeout the operator runs with (0: Browsers the quota has no room for fail at once)",
            ),
            deletions: registered(
                r,
                "browser_deletions",
                "Browsers the operator let go (finalizer released or Browser deleted), by the Browser's outcome: its failure reason, Succeeded, or external",
            ),
            events_dropped: registered(
                r,
                "events_dropped",
                "Events not published because too many waited to go out (Events go out at a bounded rate), by type",
            ),
        }
    }
}

/// Metric families of the health.
struct Health {
    watch_errors: Family<Label, Counter>,
    watch_restarts: Family<Label, Counter>,
    watch_resync: Family<Label, Histogram, fn() -> Histogram>,
    api_reachable: Gauge,
    api_unreachable: Counter,
    leader: Gauge,
}

impl Health {
    fn register(r: &mut Registry) -> Self {
        let api_reachable: Gauge = registered(
            r,
            "api_reachable",
            "1 while the API server answers the operator's probes, 0 while it does not",
        );
        api_reachable.set(1);
        Self {
            watch_errors: registered(
                r,
                "watch_errors",
                "Watch errors (each followed by a restart with backoff), by resource",
            ),
            watch_restarts: registered(
                r,
                "watch_restarts",
                "Watches that listed again after their first list (expired or failed), by resource",
            ),
            watch_resync: registered_as(
                r,
                "watch_resync_seconds",
                "Time from a watch's first error to its cache being current again (relisted or delivering events), by resource",
                Family::new_with_constructor(resync_histogram),
            ),
            api_reachable,
            api_unreachable: registered(
                r,
                "api_unreachable",
                "Times the API server stopped answering the operator's probes",
            ),
            leader: registered(
                r,
                "leader",
                "1 while this replica reconciles (it holds the Lease, or runs without leader election), 0 while it stands by",
            ),
        }
    }
}

/// A new metric, registered in `registry` as `name` with `help`.
fn registered<M: Default + Clone + Metric>(registry: &mut Registry, name: &str, help: &str) -> M {
    registered_as(registry, name, help, M::default())
}

/// `metric`, registered in `registry` as `name` with `help`.
fn registered_as<M: Clone + Metric>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("browser_controller");
        let caches = Arc::new(Caches::default());
        registry.register_collector(Box::new(CacheGauges(caches.clone())));
        let metrics = Self {
            reconciling: Reconciles::register(&mut registry),
            outcomes: Outcomes::register(&mut registry),
            health: Health::register(&mut registry),
            caches: caches.clone(),
            registry,
        };
        metrics.start_at_zero();
        metrics
    }

    /// Creates the series of every label value known ahead at 0. The client library leaves a
    /// family without samples out of the scrape, so otherwise a fresh operator would lack
    /// families until their first event: dashboards would show "No data" and `rate()` would
    /// have no series to work on. Label values known only later (namespaces, a failed pod's
    /// own reason, other HTTP codes) appear with their first sample.
    fn start_at_zero(&self) {
        let (reconciling, outcomes, health) = (&self.reconciling, &self.outcomes, &self.health);
        zero(
            &reconciling.reconcile_errors,
            ErrorKind::ALL.map(ErrorKind::label),
        );
        zero(&reconciling.waiting, Lane::ALL.map(lane));
        zero(&outcomes.writes, ApiWrite::ALL.map(ApiWrite::labels));
        zero(
            &outcomes.pod_create_errors,
            FAILING_CODES.map(|code| [("code", code)]),
        );
        zero(&outcomes.failures, Reason::failures().map(reason));
        zero(
            &outcomes.deletions,
            milestones::deletion_reasons().map(reason),
        );
        zero(&outcomes.startup, Stage::ALL.map(Stage::label));
        let left = [
            LeftLine::Admitted(Duration::ZERO),
            LeftLine::TimedOut(Duration::ZERO),
        ];
        zero(&outcomes.queue_wait, left.map(outcome));
        zero(&health.watch_errors, Watched::ALL.map(Watched::label));
        zero(&health.watch_restarts, Watched::ALL.map(Watched::label));
        zero(&health.watch_resync, Watched::ALL.map(Watched::label));
        zero(&outcomes.events_dropped, [false, true].map(event_type));
    }

    /// Counts one API write.
    pub fn write(&self, write: ApiWrite) {
        inc(&self.outcomes.writes, write.labels());
    }

    pub fn pod_create_error(&self, code: u16) {
        inc(&self.outcomes.pod_create_errors, [("code", code)]);
    }

    pub fn failure(&self, reason: &str) {
        inc(&self.outcomes.failures, self::reason(reason));
    }

    pub fn reconcile_error(&self, kind: ErrorKind) {
        inc(&self.reconciling.reconcile_errors, kind.label());
    }

    /// Observes one startup stage that began at `from` and completed at `to`. A negative
    /// span (clock skew between API server and operator) counts as zero.
    pub fn startup(&self, stage: Stage, from: Timestamp, to: Timestamp) {
        let seconds = Duration::try_from(to.duration_since(from)).map_or(0.0, |d| d.as_secs_f64());
        observe(&self.outcomes.startup, stage.label(), seconds);
    }

    /// A Browser left its line for quota ([`LeftLine`]).
    pub fn left_line(&self, left: LeftLine) {
        let (LeftLine::Admitted(waited) | LeftLine::TimedOut(waited)) = left;
        observe(
            &self.outcomes.queue_wait,
            outcome(left),
            waited.as_secs_f64(),
        );
    }

    /// The `--queue-timeout` in effect.
    pub fn set_queue_timeout(&self, timeout: Duration) {
        self.outcomes
            .queue_timeout
            .set(i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX));
    }

    /// Counts a Browser the operator let go, labelled by
    /// [`deletion_reason`](crate::lifecycle::milestones::deletion_reason).
    pub fn deletion(&self, reason: &str) {
        inc(&self.outcomes.deletions, self::reason(reason));
    }

    /// Counts one watch error of `resource`.
    pub fn watch_error(&self, resource: Watched) {
        inc(&self.health.watch_errors, resource.label());
    }

    /// Counts one relist of `resource` after its first list.
    pub fn watch_restart(&self, resource: Watched) {
        inc(&self.health.watch_restarts, resource.label());
    }

    /// Observes how long a watch of `resource` was failing before it delivered again.
    pub fn watch_resync(&self, resource: Watched, down: Duration) {
        observe(
            &self.health.watch_resync,
            resource.label(),
            down.as_secs_f64(),
        );
    }

    /// How many reconciles wait for a worker in `lane` now.
    pub fn waiting(&self, lane: Lane, waiting: usize) {
        let waiting = i64::try_from(waiting).unwrap_or(i64::MAX);
        self.reconciling
            .waiting
            .get_or_create(&self::lane(lane))
            .set(waiting);
    }

    /// Whether this replica reconciles now; set at each scrape.
    pub fn leader(&self, leads: bool) {
        self.health.leader.set(i64::from(leads));
    }

    /// Records whether the API server answers the link's probes; a loss is counted.
    pub fn api_reachable(&self, reachable: bool) {
        self.health.api_reachable.set(i64::from(reachable));
        if !reachable {
            self.health.api_unreachable.inc();
        }
    }

    /// Counts an Event dropped because the publishing queue was full.
    pub fn event_dropped(&self, warning: bool) {
        inc(&self.outcomes.events_dropped, event_type(warning));
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
        self.reconciling.in_flight.get() > 0
    }

    /// Marks a reconcile as running until the guard drops, then records its duration.
    pub fn reconcile_started(&self) -> ReconcileGuard<'_> {
        self.reconciling.reconciles.inc();
        self.reconciling.in_flight.inc();
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
        self.metrics.reconciling.in_flight.dec();
        let elapsed: Duration = self.start.elapsed();
        let duration = &self.metrics.reconciling.reconcile_duration;
        duration.observe(elapsed.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn sample(text: &str, prefix: &str) -> Option<String> {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_string)
    }

    #[test]
    fn label_values_known_ahead_start_at_zero() {
        let text = Metrics::new().encode().unwrap();
        for expected in [
            "browser_controller_reconcile_errors_total{kind=\"unsettled\"} 0",
            "browser_controller_reconciles_waiting{lane=\"cleanup\"} 0",
            "browser_controller_api_writes_total{verb=\"create\",resource=\"events\"} 0",
            "browser_controller_pod_create_errors_total{code=\"422\"} 0",
            "browser_controller_browser_failures_total{reason=\"PodCreationTimeout\"} 0",
            "browser_controller_browser_deletions_total{reason=\"external\"} 0",
            "browser_controller_browser_deletions_total{reason=\"Succeeded\"} 0",
            "browser_controller_startup_seconds_count{stage=\"scheduled\"} 0",
            "browser_controller_queue_wait_seconds_count{outcome=\"timed_out\"} 0",
            "browser_controller_watch_errors_total{resource=\"daemonsets\"} 0",
            "browser_controller_watch_restarts_total{resource=\"resourcequotas\"} 0",
            "browser_controller_watch_resync_seconds_count{resource=\"browsers\"} 0",
            "browser_controller_events_dropped_total{type=\"Warning\"} 0",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
        // Only the operator's own reasons: not those of Events or of a Browser that waits.
        assert!(!text.contains("reason=\"Queued\""), "{text}");
    }

    #[test]
    fn families_appear_with_their_values() {
        let m = Metrics::new();
        m.write(ApiWrite::ApplyPod);
        m.write(ApiWrite::ApplyPod);
        m.pod_create_error(403);
        m.failure("ConfigNotFound");
        m.deletion("ConfigNotFound");
        m.watch_error(Watched::Pods);
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
}
