//! The Browser, BrowserConfig and pre-pull gauges: a custom collector that derives them from
//! the registered watch caches at scrape time.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;
use kube::Resource;
use kube::api::DynamicObject;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::MetricType;

use crate::api::browser::Phase;
use crate::cached::CachedBrowser;
use crate::config::lookup;
use crate::prepull::progress;

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct BrowserLabels {
    namespace: String,
    browser: String,
    version: String,
    phase: String,
}

/// The namespace and name of a BrowserConfig.
type ConfigLabels = [(&'static str, String); 2];

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

/// Per namespace: the Browsers waiting in line, and the longest wait at `now` in seconds.
fn queue_counts<'a>(
    browsers: impl IntoIterator<Item = &'a CachedBrowser>,
    now: Timestamp,
) -> BTreeMap<String, Waiting<'a>> {
    let mut waiting: BTreeMap<String, Waiting> = BTreeMap::new();
    for browser in browsers {
        let Some(since) = browser.queued_since() else {
            continue;
        };
        let ns = browser.metadata.namespace.clone().unwrap_or_default();
        let waited = now.duration_since(since).as_secs().max(0);
        let of_ns = waiting.entry(ns).or_default();
        of_ns.browsers += 1;
        of_ns.longest = waited.max(of_ns.longest);
        of_ns.owners.insert(browser.owner());
    }
    waiting
}

/// Who waits in one namespace's line for quota.
#[derive(Debug, Default)]
struct Waiting<'a> {
    browsers: i64,
    /// The longest wait, whole seconds.
    longest: i64,
    /// Their owners (`None`: Browsers without the owner label).
    owners: std::collections::BTreeSet<Option<&'a str>>,
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
            let namespace = ds.metadata.namespace.clone().unwrap_or_default();
            let labels = [("namespace", namespace), ("browserconfig", config.into())];
            by_config.entry(labels).or_default().push(ds);
        }
    }
    by_config
        .into_iter()
        .map(|(labels, daemon_sets)| (labels, progress::totals(daemon_sets)))
        .collect()
}

pub(super) enum Source {
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
pub(super) struct Caches {
    sources: Mutex<(u64, Vec<(u64, Source)>)>,
}

impl Caches {
    fn lock(&self) -> MutexGuard<'_, (u64, Vec<(u64, Source)>)> {
        self.sources.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn add(self: &Arc<Self>, source: Source) -> CacheRegistration {
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
pub(super) struct CacheGauges(pub(super) Arc<Caches>);

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
        encode_browsers(&mut encoder, &browsers)?;
        encode_configs(&mut encoder, &configs, &daemon_sets)
    }
}

fn namespace_labels(ns: &str) -> super::Label<&str> {
    [("namespace", ns)]
}

/// The gauges of the cached Browsers: by namespace, browser, version and phase; in line for
/// quota, and the longest wait, by namespace.
fn encode_browsers(
    encoder: &mut DescriptorEncoder,
    browsers: &[Arc<CachedBrowser>],
) -> Result<(), std::fmt::Error> {
    let counts = browser_counts(browsers.iter().map(AsRef::as_ref));
    encode_gauges(
        encoder,
        "browsers",
        "Browsers in the watch cache by namespace, browser, version and phase (phase None: not yet handled).",
        counts.iter().map(|(labels, n)| (labels.clone(), *n)),
    )?;
    let waiting = queue_counts(browsers.iter().map(AsRef::as_ref), Timestamp::now());
    encode_gauges(
        encoder,
        "browsers_queued",
        "Browsers waiting in line for quota (status reason Queued), by namespace.",
        waiting
            .iter()
            .map(|(ns, w)| (namespace_labels(ns), w.browsers)),
    )?;
    encode_gauges(
        encoder,
        "queue_oldest_wait_seconds",
        "How long the Browser waiting longest in the namespace's line has waited (whole seconds).",
        waiting
            .iter()
            .map(|(ns, w)| (namespace_labels(ns), w.longest)),
    )?;
    encode_gauges(
        encoder,
        "queue_owners",
        "Owners with Browsers waiting in the namespace's line (--fair-share-label; Browsers without it count as one owner).",
        waiting
            .iter()
            .map(|(ns, w)| (namespace_labels(ns), w.owners.len() as i64)),
    )
}

/// The gauges of the cached BrowserConfigs and their pre-pull DaemonSets.
fn encode_configs(
    encoder: &mut DescriptorEncoder,
    configs: &[Arc<DynamicObject>],
    daemon_sets: &[Arc<DynamicObject>],
) -> Result<(), std::fmt::Error> {
    let per_namespace = config_counts(configs);
    encode_gauges(
        encoder,
        "browserconfig_entries",
        "Distinct browser/version entries the namespace's BrowserConfigs resolve.",
        per_namespace
            .iter()
            .map(|(ns, c)| (namespace_labels(ns), c.entries)),
    )?;
    encode_gauges(
        encoder,
        "browserconfig_conflicts",
        "Entry definitions ignored because an older BrowserConfig of the namespace defines the same browser and version.",
        per_namespace
            .iter()
            .map(|(ns, c)| (namespace_labels(ns), c.conflicts)),
    )?;
    let prepull = prepull_counts(daemon_sets);
    encode_gauges(
        encoder,
        "prepull_images",
        "Distinct images the BrowserConfig's pre-pull DaemonSets pull.",
        prepull
            .iter()
            .map(|(labels, (images, _))| (labels.clone(), *images)),
    )?;
    encode_gauges(
        encoder,
        "prepull_nodes_pending",
        "Nodes where the BrowserConfig's pre-pull DaemonSets have not pulled every image yet, as the DaemonSet status reports.",
        prepull
            .iter()
            .map(|(labels, (_, pending))| (labels.clone(), *pending)),
    )
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
    use serde_json::{Value, json};

    use crate::metrics::Metrics;
    use crate::metrics::tests::sample;

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
        K: Resource + Clone + 'static,
        K::DynamicType: From<ApiResource> + Eq + std::hash::Hash + Clone,
    {
        let mut writer = Writer::new(resource(kind, plural).into());
        writer.apply_watcher_event(&watcher::Event::Init);
        for o in objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(o));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        writer.as_reader()
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
}
