//! The pre-pull DaemonSets of a BrowserConfig (docs/configuration.md, "Image pre-pull"): a
//! pure function of the config and the helper images.
//!
//! Every explicit version entry whose merged tiers say `prePull: true` contributes the images
//! of its pod: the browser's, then its sidecars', then its init containers'. Entries are
//! grouped by where their browsers may run: the merged `nodeSelector`, `tolerations`, node
//! affinity, `imagePullSecrets` and `runtimeClassName`; each group is one DaemonSet pulling
//! its distinct images on the nodes that scheduling admits.
//!
//! How a pod pulls an image that may have no shell (many sidecars are distroless) and whose
//! entrypoint cannot be trusted to exit: a first init container copies the static busybox of
//! the helper image into an `emptyDir`; then each image is an init container of its own that
//! runs `busybox true` from that volume, so the kubelet pulls the image, starts it and sees
//! it exit 0 at once, whatever the image holds. A `pause` container keeps the pod running
//! afterwards, so a node that lost the images (a new or re-imaged node) gets a pod again.
//! Every container runs as user 65534 without privileges, the pod gets no service account
//! token, and each container requests almost nothing.

use std::collections::BTreeMap;

use kube_core::DynamicObject;
use serde_json::{Map, Value, json};

use crate::api::keys;
use crate::config::lookup;
use crate::config::report::version_of;
use crate::config::validate;

/// The BrowserConfig field (template, `"*"` or version entry) that asks for pre-pull.
pub const FIELD: &str = "prePull";

/// Default of `--prepull-helper-image`: a static busybox (musl build, `/bin/busybox` with the
/// `cp` and `true` applets), about 1 MB.
pub const DEFAULT_HELPER_IMAGE: &str = "busybox:1.36.1-musl";
/// Default of `--prepull-pause-image`: Kubernetes' pause image, usually already on every node
/// as the pod sandbox image.
pub const DEFAULT_PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// Name of the init container that copies the helper binary, and of its volume.
pub const TOOLS: &str = "prepull-tools";
/// Prefix of the names of the init containers that pull one image each (`pull-1`, `pull-2` …).
pub const PULL_PREFIX: &str = "pull-";
/// Name of the long-running container.
pub const PAUSE: &str = "pause";
/// Where the helper binary is mounted in every init container: a path no image uses.
const TOOLS_DIR: &str = "/.prepull";
/// The helper binary in the helper image.
const HELPER_BINARY: &str = "/bin/busybox";
/// Unprivileged user and group of every container (`nobody`).
const NOBODY: i64 = 65534;
/// Longest DaemonSet name: its name is also a label value (the pods' selector).
const NAME_MAX: usize = 63;
/// Hex digits of the scheduling hash in a DaemonSet name.
const HASH_DIGITS: usize = 10;

/// The images a pre-pull DaemonSet runs besides the pulled ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelperImages {
    /// Provides `/bin/busybox`, statically linked, with the `cp` and `true` applets.
    pub helper: String,
    /// Runs `/pause`.
    pub pause: String,
}

impl Default for HelperImages {
    fn default() -> Self {
        Self {
            helper: DEFAULT_HELPER_IMAGE.to_string(),
            pause: DEFAULT_PAUSE_IMAGE.to_string(),
        }
    }
}

/// One DaemonSet of a config.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonSet {
    pub name: String,
    /// The pulled images, each once, in entry order.
    pub images: Vec<String>,
    /// The entries it serves, as `browser version`.
    pub entries: Vec<String>,
    /// Hash of the body, also in its [`keys::ANNOTATION_PREPULL_HASH`] annotation.
    pub hash: String,
    /// The full DaemonSet, as server-side apply sends it.
    pub body: Value,
}

/// The pre-pull DaemonSets a config asks for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// One per scheduling group, sorted by name.
    pub daemon_sets: Vec<DaemonSet>,
    /// Entries that ask for pre-pull but cannot be pulled, as `browser version: problem`.
    pub skipped: Vec<String>,
}

impl Plan {
    /// Whether some explicit entry asks for pre-pull.
    pub fn requested(&self) -> bool {
        !self.daemon_sets.is_empty() || !self.skipped.is_empty()
    }

    /// The distinct images of every DaemonSet.
    pub fn image_count(&self) -> usize {
        let mut images: Vec<&str> = self
            .daemon_sets
            .iter()
            .flat_map(|d| d.images.iter().map(String::as_str))
            .collect();
        images.sort_unstable();
        images.dedup();
        images.len()
    }
}

/// Entries of one scheduling group, while the plan is built.
#[derive(Default)]
struct Group {
    scheduling: Map<String, Value>,
    images: Vec<String>,
    entries: Vec<String>,
}

/// The DaemonSets of `config`; `config_api_version` is the BrowserConfig's resolved
/// `apiVersion` (owner reference).
pub fn plan(config: &DynamicObject, config_api_version: &str, helpers: &HelperImages) -> Plan {
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut skipped = Vec::new();
    let mut entries: Vec<(String, String)> = lookup::entries(config)
        .into_iter()
        .filter(|(_, version)| version != lookup::WILDCARD)
        .collect();
    // Independent of key order, which differs between API servers.
    entries.sort();
    for (browser, version) in entries {
        // A tier that is not an object is reported by the validation; nothing to pull.
        let Ok(entry) = lookup::merged_entry(config, &browser, &version) else {
            continue;
        };
        if entry.get(FIELD) != Some(&Value::Bool(true)) {
            continue;
        }
        let label = format!("{browser} {version}");
        let Some(entry) = lookup::with_version(entry, &version) else {
            skipped.push(format!("{label}: image is missing"));
            continue;
        };
        if let Err(problems) = validate::validate_entry(&entry) {
            skipped.push(format!("{label}: {}", problems.join("; ")));
            continue;
        }
        let scheduling = scheduling(&entry);
        let key = Value::Object(scheduling.clone()).to_string();
        let group = groups.entry(key).or_insert_with(|| Group {
            scheduling,
            ..Group::default()
        });
        for image in images(&entry) {
            if !group.images.contains(&image) {
                group.images.push(image);
            }
        }
        group.entries.push(label);
    }
    let config_name = config.metadata.name.as_deref().unwrap_or_default();
    let mut daemon_sets: Vec<DaemonSet> = groups
        .into_iter()
        .map(|(key, group)| {
            let name = name(config_name, &key);
            let mut body = body(config, config_api_version, helpers, &name, &group);
            let hash = version_of(&body);
            annotate(&mut body, &hash);
            DaemonSet {
                name,
                images: group.images,
                entries: group.entries,
                hash,
                body,
            }
        })
        .collect();
    daemon_sets.sort_by(|a, b| a.name.cmp(&b.name));
    Plan {
        daemon_sets,
        skipped,
    }
}

/// Records `hash` in the DaemonSet's annotations, which come before its owner reference.
fn annotate(body: &mut Value, hash: &str) {
    if let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        let owners = metadata.remove("ownerReferences");
        metadata.insert(
            "annotations".into(),
            json!({ keys::ANNOTATION_PREPULL_HASH: hash }),
        );
        if let Some(owners) = owners {
            metadata.insert("ownerReferences".into(), owners);
        }
    }
}

/// The images of an entry's pod: the browser's, its sidecars', its init containers'.
fn images(entry: &Value) -> Vec<String> {
    let mut images: Vec<String> = entry
        .get("image")
        .and_then(Value::as_str)
        .map(str::to_string)
        .into_iter()
        .collect();
    for section in ["sidecars", "initContainers"] {
        let containers = entry.get(section).and_then(Value::as_array);
        images.extend(
            containers
                .into_iter()
                .flatten()
                .filter_map(|c| c.get("image").and_then(Value::as_str))
                .map(str::to_string),
        );
    }
    images
}

/// What decides the nodes an entry's browsers may run on, in a canonical form (objects with
/// sorted keys, the set-like lists sorted), so that entries writing the same scheduling in
/// another order share a DaemonSet. Of `affinity` only node affinity counts: pod
/// (anti-)affinity depends on the pods a node runs at the moment, and a pre-pull pod obeying
/// a browser's anti-affinity would stay away from exactly the busy nodes.
fn scheduling(entry: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    // Browser images are Linux images.
    let mut selector: BTreeMap<String, Value> =
        BTreeMap::from([("kubernetes.io/os".to_string(), json!("linux"))]);
    if let Some(own) = entry.get("nodeSelector").and_then(Value::as_object) {
        selector.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    out.insert(
        "nodeSelector".into(),
        Value::Object(selector.into_iter().collect()),
    );
    if let Some(node_affinity) = entry
        .pointer("/affinity/nodeAffinity")
        .filter(|v| !v.is_null())
    {
        out.insert(
            "affinity".into(),
            json!({"nodeAffinity": canonical(node_affinity)}),
        );
    }
    for field in ["tolerations", "imagePullSecrets"] {
        if let Some(items) = entry.get(field).and_then(Value::as_array) {
            let mut items: Vec<Value> = items.iter().map(canonical).collect();
            items.sort_by_cached_key(Value::to_string);
            items.dedup();
            if !items.is_empty() {
                out.insert(field.into(), Value::Array(items));
            }
        }
    }
    if let Some(class) = entry
        .get("runtimeClassName")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
    {
        out.insert("runtimeClassName".into(), json!(class));
    }
    out
}

/// `value` with the keys of every object sorted.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, Value> =
                map.iter().map(|(k, v)| (k, canonical(v))).collect();
            Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// `<config>-prepull-<hash>`: the hash covers the config's name and the scheduling, so each
/// group keeps its DaemonSet while its images change; the config's name is cut so that the
/// whole stays a label value.
fn name(config: &str, scheduling_key: &str) -> String {
    let hash = version_of(&json!([config, scheduling_key]));
    let hash = &hash[..HASH_DIGITS.min(hash.len())];
    let room = NAME_MAX - "-prepull-".len() - hash.len();
    let prefix: String = config
        .chars()
        .take(room)
        .map(|c| if c == '.' { '-' } else { c })
        .collect();
    let prefix = prefix.trim_end_matches('-');
    format!("{prefix}-prepull-{hash}")
}

/// Requests and limits of every container: the containers do nothing (pulling is the
/// kubelet's work, outside them).
fn resources() -> Value {
    json!({
        "requests": {"cpu": "1m", "memory": "4Mi"},
        "limits": {"cpu": "100m", "memory": "16Mi"},
    })
}

fn container_security() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["ALL"]},
    })
}

fn tools_mount(read_only: bool) -> Value {
    let mut mount = json!({"name": TOOLS, "mountPath": TOOLS_DIR});
    if read_only {
        mount["readOnly"] = json!(true);
    }
    json!([mount])
}

fn body(
    config: &DynamicObject,
    config_api_version: &str,
    helpers: &HelperImages,
    name: &str,
    group: &Group,
) -> Value {
    let helper_path = format!("{TOOLS_DIR}/busybox");
    let mut init_containers = vec![json!({
        "name": TOOLS,
        "image": helpers.helper,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/cp", HELPER_BINARY, helper_path],
        "workingDir": "/",
        "resources": resources(),
        "securityContext": container_security(),
        "volumeMounts": tools_mount(false),
    })];
    init_containers.extend(group.images.iter().enumerate().map(|(index, image)| {
        json!({
            "name": format!("{PULL_PREFIX}{}", index + 1),
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": [helper_path, "true"],
            // The image's own working directory may be closed to an unprivileged user.
            "workingDir": "/",
            "resources": resources(),
            "securityContext": container_security(),
            "volumeMounts": tools_mount(true),
        })
    }));
    let mut spec = Map::new();
    spec.insert("automountServiceAccountToken".into(), json!(false));
    spec.insert("enableServiceLinks".into(), json!(false));
    spec.insert(
        "securityContext".into(),
        json!({
            "runAsNonRoot": true,
            "runAsUser": NOBODY,
            "runAsGroup": NOBODY,
            "seccompProfile": {"type": "RuntimeDefault"},
        }),
    );
    spec.extend(group.scheduling.clone());
    spec.insert("initContainers".into(), Value::Array(init_containers));
    spec.insert(
        "containers".into(),
        json!([{
            "name": PAUSE,
            "image": helpers.pause,
            "imagePullPolicy": "IfNotPresent",
            "resources": resources(),
            "securityContext": container_security(),
        }]),
    );
    spec.insert(
        "volumes".into(),
        json!([{"name": TOOLS, "emptyDir": {"sizeLimit": "8Mi"}}]),
    );

    let mut owner = Map::new();
    owner.insert("apiVersion".into(), json!(config_api_version));
    owner.insert("kind".into(), json!(keys::BROWSERCONFIG_KIND));
    owner.insert(
        "name".into(),
        json!(config.metadata.name.as_deref().unwrap_or_default()),
    );
    if let Some(uid) = &config.metadata.uid {
        owner.insert("uid".into(), json!(uid));
    }
    // No blockOwnerDeletion: it would need update on the config's finalizers.
    owner.insert("controller".into(), json!(true));
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(name));
    if let Some(ns) = &config.metadata.namespace {
        metadata.insert("namespace".into(), json!(ns));
    }
    metadata.insert(
        "labels".into(),
        json!({
            keys::LABEL_MANAGED_BY: keys::MANAGER,
            keys::LABEL_COMPONENT: keys::PREPULL_COMPONENT,
            keys::LABEL_PREPULL: name,
        }),
    );
    metadata.insert("ownerReferences".into(), json!([owner]));
    json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": {keys::LABEL_PREPULL: name}},
            // The pods serve nothing: a change is pulled on every node at once.
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
            "template": {
                // Not the operator's managed-by label: its pod watch is for browser pods.
                "metadata": {"labels": {
                    keys::LABEL_COMPONENT: keys::PREPULL_COMPONENT,
                    keys::LABEL_PREPULL: name,
                }},
                "spec": spec,
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    const API_VERSION: &str = "selenosis.io/v1";

    fn config(name: &str, spec: Value) -> DynamicObject {
        fixtures::config(name)
            .namespace("selenosis")
            .uid("uid-1")
            .spec(spec)
            .object()
    }

    fn plan_of(spec: Value) -> Plan {
        plan(
            &config("chrome", spec),
            API_VERSION,
            &HelperImages::default(),
        )
    }

    fn pod_spec(ds: &DaemonSet) -> &Value {
        &ds.body["spec"]["template"]["spec"]
    }

    fn init_images(ds: &DaemonSet) -> Vec<&str> {
        pod_spec(ds)["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["image"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn only_explicit_entries_that_ask_are_pulled_with_their_sidecars_and_init_containers() {
        let plan = plan_of(json!({
            "template": {"sidecars": [{"name": "seleniferous", "image": "seleniferous:2"}]},
            "browsers": {"chrome": {
                "*": {"image": "chrome:{version}", "initContainers": [{"name": "fonts", "image": "fonts:1"}]},
                "139.0": {"prePull": true},
                "140.0": {"image": "chrome:140-beta", "prePull": true},
                "141.0": {},
            }},
        }));
        assert_eq!(plan.daemon_sets.len(), 1);
        let ds = &plan.daemon_sets[0];
        assert_eq!(ds.entries, ["chrome 139.0", "chrome 140.0"]);
        // The `*` image gets the version; a shared sidecar is pulled once.
        assert_eq!(
            ds.images,
            [
                "chrome:139.0",
                "seleniferous:2",
                "fonts:1",
                "chrome:140-beta"
            ]
        );
        assert_eq!(
            init_images(ds),
            [
                DEFAULT_HELPER_IMAGE,
                "chrome:139.0",
                "seleniferous:2",
                "fonts:1",
                "chrome:140-beta"
            ]
        );
        assert_eq!(plan.image_count(), 4);
        assert!(plan.skipped.is_empty());
    }

    #[test]
    fn the_template_opts_every_version_in_and_an_entry_can_opt_out() {
        let plan = plan_of(json!({
            "template": {"prePull": true},
            "browsers": {
                "chrome": {"139.0": {"image": "c:139"}, "140.0": {"image": "c:140", "prePull": false}},
                "firefox": {"*": {"image": "f:{version}"}},
            },
        }));
        assert_eq!(plan.daemon_sets.len(), 1);
        assert_eq!(plan.daemon_sets[0].images, ["c:139"]);
        // A `*` entry alone names no version: nothing to pull.
        assert!(
            !plan_of(
                json!({"browsers": {"firefox": {"*": {"image": "f:{version}", "prePull": true}}}})
            )
            .requested()
        );
    }

    #[test]
    fn invalid_entries_are_skipped_and_named() {
        let plan = plan_of(json!({"browsers": {"chrome": {
            "139.0": {"prePull": true},
            "140.0": {"image": "c:140", "prePull": true, "sidecars": [{"name": "s"}]},
            "141.0": {"image": "c:141", "prePull": true},
        }}}));
        assert_eq!(
            plan.skipped,
            [
                "chrome 139.0: image is missing",
                "chrome 140.0: sidecars[0] (s): image is missing"
            ]
        );
        assert_eq!(plan.daemon_sets[0].images, ["c:141"]);
        assert!(plan.requested());
        let none = plan_of(json!({"browsers": {"chrome": {"139.0": {"prePull": true}}}}));
        assert!(none.daemon_sets.is_empty() && none.requested());
    }

    #[test]
    fn entries_are_grouped_by_scheduling_whatever_order_it_is_written_in() {
        let plan = plan_of(json!({
            "template": {"prePull": true, "tolerations": [{"key": "browsers", "operator": "Exists"}]},
            "browsers": {"chrome": {
                "139.0": {"image": "c:139", "nodeSelector": {"pool": "browsers", "zone": "a"},
                    "tolerations": [{"operator": "Equal", "key": "gpu", "value": "yes"}]},
                "140.0": {"image": "c:140", "nodeSelector": {"zone": "a", "pool": "browsers"},
                    "tolerations": [{"key": "gpu", "value": "yes", "operator": "Equal"}, {"key": "browsers", "operator": "Exists"}]},
                "141.0": {"image": "c:141", "nodeSelector": {"pool": "gpu"}},
                "142.0": {"image": "c:142", "runtimeClassName": "gvisor"},
                "143.0": {"image": "c:143", "imagePullSecrets": [{"name": "registry"}]},
            }},
        }));
        let groups: Vec<Vec<&str>> = plan
            .daemon_sets
            .iter()
            .map(|d| d.entries.iter().map(String::as_str).collect())
            .collect();
        assert_eq!(groups.len(), 4, "{groups:?}");
        assert!(groups.contains(&vec!["chrome 139.0", "chrome 140.0"]));
        for single in ["chrome 141.0", "chrome 142.0", "chrome 143.0"] {
            assert!(groups.contains(&vec![single]), "{single}: {groups:?}");
        }
        let shared = plan
            .daemon_sets
            .iter()
            .find(|d| d.entries.len() == 2)
            .unwrap();
        let spec = pod_spec(shared);
        assert_eq!(
            spec["nodeSelector"],
            json!({"kubernetes.io/os": "linux", "pool": "browsers", "zone": "a"})
        );
        assert_eq!(spec["tolerations"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn only_node_affinity_is_carried_over() {
        let affinity = json!({
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["browsers"]}]}]}},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "browser"}}}]},
        });
        let plan = plan_of(json!({"browsers": {"chrome": {
            "139.0": {"image": "c:139", "prePull": true, "affinity": affinity},
        }}}));
        let spec = pod_spec(&plan.daemon_sets[0]);
        assert_eq!(
            spec["affinity"],
            json!({"nodeAffinity": affinity["nodeAffinity"]})
        );
        let without = plan_of(json!({"browsers": {"chrome": {
            "139.0": {"image": "c:139", "prePull": true, "affinity": {"podAffinity": {}}},
        }}}));
        assert!(pod_spec(&without.daemon_sets[0]).get("affinity").is_none());
    }

    #[test]
    fn a_shell_less_image_is_pulled_by_running_the_copied_helper_binary() {
        let plan = plan_of(json!({"browsers": {"chrome": {
            "139.0": {"image": "gcr.io/distroless/static:nonroot", "prePull": true,
                "command": ["/never-run"], "args": ["x"], "workingDir": "/home/nonroot"},
        }}}));
        let spec = pod_spec(&plan.daemon_sets[0]);
        let init = spec["initContainers"].as_array().unwrap();
        assert_eq!(init[0]["name"], TOOLS);
        assert_eq!(
            init[0]["command"],
            json!(["/bin/cp", "/bin/busybox", "/.prepull/busybox"])
        );
        assert_eq!(init[0]["volumeMounts"][0]["mountPath"], "/.prepull");
        let pull = &init[1];
        assert_eq!(pull["name"], "pull-1");
        assert_eq!(pull["image"], "gcr.io/distroless/static:nonroot");
        // Nothing of the image runs: not its entrypoint, not the entry's command.
        assert_eq!(pull["command"], json!(["/.prepull/busybox", "true"]));
        assert!(pull.get("args").is_none());
        assert_eq!(pull["workingDir"], "/");
        assert_eq!(pull["volumeMounts"][0]["readOnly"], true);
        assert_eq!(spec["volumes"][0]["name"], TOOLS);
        assert!(spec["volumes"][0]["emptyDir"].is_object());
    }

    #[test]
    fn pods_are_tiny_unprivileged_and_tokenless() {
        let plan = plan_of(
            json!({"browsers": {"chrome": {"139.0": {"image": "c", "prePull": true,
            "privileged": true, "serviceAccountName": "browser", "automountServiceAccountToken": true}}}}),
        );
        let spec = pod_spec(&plan.daemon_sets[0]);
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert!(spec.get("serviceAccountName").is_none());
        assert!(
            spec.get("restartPolicy").is_none(),
            "DaemonSets need Always"
        );
        assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
        assert_eq!(spec["securityContext"]["runAsUser"], 65534);
        let containers = spec["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .chain(spec["containers"].as_array().unwrap());
        for c in containers {
            assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
            assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
            assert_eq!(c["resources"]["requests"]["cpu"], "1m");
            assert!(c["resources"]["limits"]["memory"].is_string());
        }
        assert_eq!(spec["containers"][0]["image"], DEFAULT_PAUSE_IMAGE);
    }

    #[test]
    fn identity_owner_and_selector() {
        let plan =
            plan_of(json!({"browsers": {"chrome": {"139.0": {"image": "c", "prePull": true}}}}));
        let ds = &plan.daemon_sets[0];
        assert!(ds.name.starts_with("chrome-prepull-"), "{}", ds.name);
        assert_eq!(ds.name.len(), "chrome-prepull-".len() + 10);
        let meta = &ds.body["metadata"];
        assert_eq!(meta["namespace"], "selenosis");
        assert_eq!(
            meta["ownerReferences"],
            json!([{"apiVersion": API_VERSION, "kind": "BrowserConfig", "name": "chrome", "uid": "uid-1", "controller": true}])
        );
        assert_eq!(meta["labels"][keys::LABEL_MANAGED_BY], keys::MANAGER);
        assert_eq!(meta["annotations"][keys::ANNOTATION_PREPULL_HASH], ds.hash);
        let template_labels = &ds.body["spec"]["template"]["metadata"]["labels"];
        assert_eq!(
            ds.body["spec"]["selector"]["matchLabels"][keys::LABEL_PREPULL],
            ds.name
        );
        assert_eq!(template_labels[keys::LABEL_PREPULL], ds.name);
        assert!(template_labels.get(keys::LABEL_MANAGED_BY).is_none());
    }

    #[test]
    fn the_name_stays_with_the_scheduling_and_the_hash_follows_the_images() {
        let spec = |image: &str, pool: &str| json!({"browsers": {"chrome": {"139.0": {"image": image, "prePull": true, "nodeSelector": {"pool": pool}}}}});
        let a = &plan_of(spec("c:1", "a")).daemon_sets[0];
        let b = &plan_of(spec("c:2", "a")).daemon_sets[0];
        let c = &plan_of(spec("c:1", "b")).daemon_sets[0];
        assert_eq!(a.name, b.name);
        assert_ne!(a.hash, b.hash);
        assert_ne!(a.name, c.name);
        assert_eq!(plan_of(spec("c:1", "a")), plan_of(spec("c:1", "a")));
        let other = plan(
            &config("firefox", spec("c:1", "a")),
            API_VERSION,
            &HelperImages::default(),
        );
        assert_ne!(other.daemon_sets[0].name, a.name);
    }

    #[test]
    fn long_config_names_are_cut_to_a_label_value() {
        let long = format!("{}.x", "a".repeat(60));
        let plan = plan(
            &config(
                &long,
                json!({"browsers": {"b": {"1": {"image": "i", "prePull": true}}}}),
            ),
            API_VERSION,
            &HelperImages::default(),
        );
        let name = &plan.daemon_sets[0].name;
        assert_eq!(name.len(), 63);
        assert!(crate::names::check_label_value(name).is_ok(), "{name}");
        assert!(crate::names::is_dns1123_subdomain(name), "{name}");
        // Dots would end up in the pods' host names.
        assert!(super::name("a.b", "{}").starts_with("a-b-prepull-"));
    }

    #[test]
    fn helper_images_are_configurable() {
        let helpers = HelperImages {
            helper: "mirror/busybox:1".into(),
            pause: "mirror/pause:1".into(),
        };
        let plan = plan(
            &config(
                "chrome",
                json!({"browsers": {"b": {"1": {"image": "i", "prePull": true}}}}),
            ),
            API_VERSION,
            &helpers,
        );
        let spec = pod_spec(&plan.daemon_sets[0]);
        assert_eq!(spec["initContainers"][0]["image"], "mirror/busybox:1");
        assert_eq!(spec["containers"][0]["image"], "mirror/pause:1");
    }
}
