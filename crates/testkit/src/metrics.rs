//! What the operator's `/metrics` exports, read from the text exposition of a `Metrics` with a
//! sample in every family: the names and labels the docs' metrics table and the monitoring
//! files in deploy/monitoring/ are checked against.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use serde_json::{Value, json};

use browser_controller::cached::CachedBrowser;
use browser_controller::lifecycle::plan::LeftLine;
use browser_controller::metrics::{
    ApiWrite, CacheRegistration, ErrorKind, Metrics, Stage, Watched,
};

use super::fixtures::{browser, config};

/// One exported family: its type and the label names its samples carry (`le` aside).
#[derive(Clone, Debug)]
pub struct Family {
    pub kind: String,
    pub labels: BTreeSet<String>,
}

/// Families by the name users query (counters with `_total`).
pub type Families = BTreeMap<String, Family>;

/// A `Metrics` with a sample in every family: each recording method once, and a Browser, a
/// BrowserConfig and a pre-pull DaemonSet in the caches the gauges read.
pub fn with_every_family() -> (Metrics, Vec<CacheRegistration>) {
    let metrics = Metrics::new();
    metrics.write(ApiWrite::ApplyPod);
    metrics.pod_create_error(403);
    metrics.failure("ConfigNotFound");
    metrics.reconcile_error(ErrorKind::Write);
    metrics.deletion("external");
    metrics.watch_error(Watched::Pods);
    metrics.watch_restart(Watched::Pods);
    metrics.event_dropped(false);
    metrics.watch_resync(Watched::Pods, std::time::Duration::from_secs(3));
    drop(metrics.reconcile_started());
    let from: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("timestamp");
    let to: jiff::Timestamp = "2026-01-01T00:00:02Z".parse().expect("timestamp");
    for stage in Stage::ALL {
        metrics.startup(stage, from, to);
    }
    metrics.left_line(LeftLine::Admitted(std::time::Duration::from_secs(3)));
    let resource = |kind: &str, plural: &str| ApiResource {
        group: "selenosis.io".into(),
        version: "v1".into(),
        api_version: "selenosis.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let object =
        |value: Value| -> DynamicObject { serde_json::from_value(value).expect("a valid object") };
    let mut browsers =
        Writer::<CachedBrowser>::new(std::sync::Arc::new(resource("Browser", "browsers")));
    let running = browser("s1").namespace("ns").phase("Running").build();
    let running: CachedBrowser = serde_json::from_value(running).expect("a valid Browser");
    browsers.apply_watcher_event(&watcher::Event::Apply(running));
    let waiting = browser("s2")
        .namespace("ns")
        .created("2026-01-01T00:00:00Z")
        .status(json!({"phase": "Pending", "reason": "Queued"}))
        .build();
    let waiting: CachedBrowser = serde_json::from_value(waiting).expect("a valid Browser");
    browsers.apply_watcher_event(&watcher::Event::Apply(waiting));
    let mut configs = Writer::<DynamicObject>::new(resource("BrowserConfig", "browserconfigs"));
    let config = config("chrome")
        .namespace("ns")
        .spec(json!({"browsers": {"chrome": {"139.0": {"image": "chrome:139"}}}}));
    configs.apply_watcher_event(&watcher::Event::Apply(config.object()));
    let mut daemon_sets = Writer::<DynamicObject>::new(ApiResource {
        group: "apps".into(),
        version: "v1".into(),
        api_version: "apps/v1".into(),
        kind: "DaemonSet".into(),
        plural: "daemonsets".into(),
    });
    daemon_sets.apply_watcher_event(&watcher::Event::Apply(object(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "chrome-prepull-0123456789", "namespace": "ns", "generation": 1,
            "ownerReferences": [{"apiVersion": "selenosis.io/v1", "kind": "BrowserConfig",
                "name": "chrome", "uid": "u1", "controller": true}]},
        "spec": {"template": {"spec": {"initContainers": [{"name": "pull-1", "image": "chrome:139"}]}}},
        "status": {"observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberReady": 1},
    }))));
    let registrations = vec![
        metrics.observe_browsers(browsers.as_reader()),
        metrics.observe_configs(configs.as_reader()),
        metrics.observe_prepull(daemon_sets.as_reader()),
    ];
    (metrics, registrations)
}

/// Label names of one exposition line `name{a="x",b="y"} 1`.
pub fn label_names(sample: &str) -> Vec<String> {
    let Some(open) = sample.find('{') else {
        return Vec::new();
    };
    let mut names = Vec::new();
    let mut rest = &sample[open + 1..];
    while let Some(eq) = rest.find("=\"") {
        names.push(rest[..eq].trim_start_matches(',').to_string());
        let mut escaped = false;
        let value_len = rest[eq + 2..]
            .char_indices()
            .find(|(_, c)| {
                let end = *c == '"' && !escaped;
                escaped = *c == '\\' && !escaped;
                end
            })
            .map_or(rest.len() - eq - 2, |(i, _)| i);
        rest = &rest[eq + 2 + value_len + 1..];
        if rest.starts_with('}') {
            break;
        }
    }
    names
}

/// The name users query a family of the exposition by: a counter's with `_total`.
pub fn queried_name(name: &str, kind: &str) -> String {
    if kind == "counter" {
        format!("{name}_total")
    } else {
        name.to_string()
    }
}

/// What `/metrics` exports, by the name users query.
pub fn exported() -> Families {
    let (metrics, _registrations) = with_every_family();
    let text = metrics.encode().expect("metrics encode");
    let mut families = Families::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
            let queried = queried_name(name, kind);
            let family = Family {
                kind: kind.to_string(),
                labels: BTreeSet::new(),
            };
            families.insert(queried, family);
        }
    }
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let series = line.split(['{', ' ']).next().unwrap_or_default();
        let family = families
            .keys()
            .filter(|f| {
                series == f.as_str()
                    || ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|suffix| series.strip_suffix(suffix) == Some(f.as_str()))
            })
            .max_by_key(|f| f.len())
            .cloned();
        if let Some(family) = family.and_then(|f| families.get_mut(&f)) {
            family
                .labels
                .extend(label_names(line).into_iter().filter(|l| l != "le"));
        }
    }
    families
}
