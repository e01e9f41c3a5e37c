//! Prometheus metric families (OpenMetrics text on `/metrics`). Label sets are bounded: no
//! Browser names, only verbs, resources, HTTP codes and failure reasons.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets_range};
use prometheus_client::registry::Registry;

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
        Self {
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            in_flight,
            writes,
            pod_create_errors,
            failures,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_appear_with_their_values() {
        let m = Metrics::new();
        m.write("apply", "pods");
        m.write("apply", "pods");
        m.pod_create_error(403);
        m.failure("ConfigNotFound");
        {
            let _g = m.reconcile_started();
        }
        let text = m.encode().unwrap();
        assert!(
            text.contains(
                "browser_controller_api_writes_total{verb=\"apply\",resource=\"pods\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("browser_controller_pod_create_errors_total{code=\"403\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("browser_controller_browser_failures_total{reason=\"ConfigNotFound\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("browser_controller_reconciles_total 1"),
            "{text}"
        );
        assert!(
            text.contains("browser_controller_reconciles_in_flight 0"),
            "{text}"
        );
        assert!(
            text.contains("browser_controller_reconcile_duration_seconds_count 1"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }
}
