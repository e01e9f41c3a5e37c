//! What the watch caches hold of Browsers and pods: the metadata, spec and status decisions
//! read, as compact JSON text packed against the first text of its kind (`packed`), with only
//! what identifies the object (name, namespace, uid, resourceVersion) and the few fields that
//! triggers and gauges read kept apart. A `serde_json::Value` tree, or a typed map of labels,
//! costs several times its JSON text, and thousands of cached Browsers with their pods are
//! most of the operator's memory; a reconcile turns the one Browser and pod it needs back into
//! objects.
//!
//! Pods are cut down while they are read off the wire to what decisions, the Browser status
//! and the startup metrics read: container names and ports, the restart policies of init
//! containers and the node of the spec; of the status the phase, IP, start time, reason,
//! message, the `PodScheduled` condition and each container's name, state, image and restart
//! count. What kubelets add (image and container IDs, last states, resources, host IPs …),
//! env, volumes, annotations and managedFields never enter the cache.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube_core::{ApiResource, DynamicObject, DynamicResourceScope, Resource, TypeMeta};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};

use crate::api::browser::{BrowserSpec, SpecField, StatusView};
use crate::lifecycle::capacity;
use crate::lifecycle::lane::{self, Lane, Progress};
use packed::{Dictionary, Packed};

mod packed;

/// The metadata the operator reads, as it comes over the wire (everything else is skipped
/// without being built).
#[derive(Deserialize, Serialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Meta {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    creation_timestamp: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deletion_timestamp: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deletion_grace_period_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    labels: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finalizers: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner_references: Option<Vec<OwnerReference>>,
}

/// Annotations no decision and no pod reads (`kubectl apply` keeps a whole copy of the object
/// in one of them).
const SKIPPED_ANNOTATIONS: &str = "kubectl.kubernetes.io/";

impl Meta {
    /// Keeps only the annotations something reads (`annotations: false`: none).
    fn keep_annotations(&mut self, annotations: bool) {
        self.annotations = self
            .annotations
            .take()
            .filter(|_| annotations)
            .map(|a| {
                a.into_iter()
                    .filter(|(k, _)| !k.starts_with(SKIPPED_ANNOTATIONS))
                    .collect::<BTreeMap<_, _>>()
            })
            .filter(|a| !a.is_empty());
    }

    /// What identifies the object, for the cache's keys and the `Resource` trait.
    fn identity(&self) -> ObjectMeta {
        ObjectMeta {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            uid: self.uid.clone(),
            resource_version: self.resource_version.clone(),
            ..ObjectMeta::default()
        }
    }
}

/// The dictionaries cached Browsers and pods are packed against.
static BROWSERS: Dictionary = Dictionary::new();
static PODS: Dictionary = Dictionary::new();

/// The object's metadata, spec and status (those present).
fn whole(meta: &Meta, spec: &impl Serialize, status: &impl Serialize) -> Value {
    let mut object = json!({"metadata": meta, "spec": spec, "status": status});
    if let Some(fields) = object.as_object_mut() {
        fields.retain(|_, v| !v.is_null());
    }
    object
}

/// The object as decisions take it, from its text.
fn object(text: &Packed, dictionary: &Dictionary, ar: &ApiResource) -> DynamicObject {
    // Packed by `text` from serializable values: it unpacks and parses.
    let text = text.unpack(dictionary).unwrap_or_default();
    let mut object: DynamicObject = serde_json::from_str(&text).unwrap_or_else(|_| DynamicObject {
        types: None,
        metadata: ObjectMeta::default(),
        data: json!({}),
    });
    object.types = Some(TypeMeta {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
    });
    object
}

/// The kind of cached Browsers or pods. Every key of a cache and of the controller's queue
/// holds one, several per Browser: shared, it costs a pointer there, where an `ApiResource`
/// costs five strings of its own.
pub type CachedKind = Arc<ApiResource>;

/// The kinds of the cached Browsers and pods, shared ([`CachedKind`]).
#[derive(Clone, Debug)]
pub struct CachedKinds {
    pub browser: CachedKind,
    pub pod: CachedKind,
}

impl CachedKinds {
    pub fn new(kinds: &crate::api::kinds::Kinds) -> Self {
        Self {
            browser: Arc::new(kinds.browser.clone()),
            pod: Arc::new(kinds.pod.clone()),
        }
    }
}

macro_rules! dynamic_resource {
    ($type:ty) => {
        impl Resource for $type {
            type DynamicType = CachedKind;
            type Scope = DynamicResourceScope;

            fn group(dt: &CachedKind) -> Cow<'_, str> {
                dt.group.as_str().into()
            }

            fn version(dt: &CachedKind) -> Cow<'_, str> {
                dt.version.as_str().into()
            }

            fn kind(dt: &CachedKind) -> Cow<'_, str> {
                dt.kind.as_str().into()
            }

            fn api_version(dt: &CachedKind) -> Cow<'_, str> {
                dt.api_version.as_str().into()
            }

            fn plural(dt: &CachedKind) -> Cow<'_, str> {
                dt.plural.as_str().into()
            }

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// A cached Browser: what identifies it, its metadata, spec and status (as JSON text), and the
/// few fields the gauges and triggers read of them.
#[derive(Clone, Debug)]
pub struct CachedBrowser {
    /// Name, namespace, uid and resourceVersion only; the rest is in `text`.
    pub metadata: ObjectMeta,
    /// `{"metadata": …, "spec": …, "status": …}`, packed.
    text: Packed,
    browser_name: Option<Box<str>>,
    browser_version: Option<Box<str>>,
    phase: Option<Box<str>>,
    deleting: bool,
    created: Option<Timestamp>,
    /// When it started waiting in line for quota, while it waits.
    queued_since: Option<Timestamp>,
    /// Its owner label's value (`api::owner::label`).
    owner: Option<Box<str>>,
}

dynamic_resource!(CachedBrowser);

impl<'de> Deserialize<'de> for CachedBrowser {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: Meta,
            #[serde(default)]
            spec: Value,
            #[serde(default)]
            status: Value,
        }
        let mut wire = Wire::deserialize(deserializer)?;
        wire.metadata.keep_annotations(true);
        let spec = BrowserSpec::new(&wire.spec);
        let valid = |f| spec.field(f).ok().map(Box::from);
        let created = wire.metadata.creation_timestamp.as_ref().map(|t| t.0);
        Ok(CachedBrowser {
            created,
            owner: crate::api::owner::of_labels(wire.metadata.labels.as_ref()),
            queued_since: capacity::queued_since(&wire.status, created)
                .filter(|_| wire.metadata.deletion_timestamp.is_none()),
            browser_name: valid(SpecField::BrowserName),
            browser_version: valid(SpecField::BrowserVersion),
            phase: StatusView::new(&wire.status)
                .phase_as_written()
                .map(Box::from),
            deleting: wire.metadata.deletion_timestamp.is_some(),
            text: Packed::new(
                &whole(&wire.metadata, &wire.spec, &wire.status).to_string(),
                &BROWSERS,
            ),
            metadata: wire.metadata.identity(),
        })
    }
}

impl CachedBrowser {
    /// A Browser known by its identity alone: one the client could not decode.
    pub fn identity_only(metadata: ObjectMeta) -> Self {
        CachedBrowser {
            text: Packed::empty(),
            browser_name: None,
            browser_version: None,
            phase: None,
            deleting: false,
            created: None,
            queued_since: None,
            owner: None,
            metadata,
        }
    }
}

impl CachedBrowser {
    /// The Browser as decisions take it.
    pub fn to_object(&self, ar: &ApiResource) -> DynamicObject {
        object(&self.text, &BROWSERS, ar)
    }

    /// Whether the Browser is being deleted.
    pub fn deleting(&self) -> bool {
        self.deleting
    }

    /// `spec.browserName`, when it is valid (a label value, as the CRD requires).
    pub fn browser_name(&self) -> Option<&str> {
        self.browser_name.as_deref()
    }

    /// `spec.browserVersion`, when it is valid (a label value, as the CRD requires).
    pub fn browser_version(&self) -> Option<&str> {
        self.browser_version.as_deref()
    }

    /// `status.phase`, when it is a string.
    pub fn phase(&self) -> Option<&str> {
        self.phase.as_deref()
    }

    /// `metadata.creationTimestamp`.
    pub fn created(&self) -> Option<Timestamp> {
        self.created
    }

    /// When it started waiting in line for quota, while it waits (and is not being deleted).
    pub fn queued_since(&self) -> Option<Timestamp> {
        self.queued_since
    }

    /// Its owner, for the capacity queue's fair share; `None`: the anonymous owner.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The lane the Browser's reconcile needs, with its pod as the cache has it.
    pub fn lane(&self, pod: Option<&CachedPod>) -> Lane {
        lane::lane(self.phase(), self.deleting(), pod.map(CachedPod::progress))
    }
}

/// A cached pod: what identifies it, its metadata (no annotations) and what decisions read of
/// its spec and status, as JSON text.
#[derive(Clone, Debug)]
pub struct CachedPod {
    /// Name, namespace, uid and resourceVersion only; the rest is in `text`.
    pub metadata: ObjectMeta,
    /// `{"metadata": …, "spec": …, "status": …}`, cut down and packed.
    text: Packed,
    /// How far it got, for the lane of its Browser (read at every event: kept apart).
    progress: Progress,
    /// Its owner label's value, and when it was created: when its owner was last served a
    /// slot, for the capacity queue's fair share.
    owner: Option<Box<str>>,
    created: Option<Timestamp>,
}

dynamic_resource!(CachedPod);

#[derive(Deserialize, Serialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Spec {
    #[serde(skip_serializing_if = "Option::is_none")]
    containers: Option<Vec<Container>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    init_containers: Option<Vec<InitContainer>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_name: Option<Value>,
}

#[derive(Deserialize, Serialize, Default)]
#[serde(default)]
struct Container {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ports: Option<Value>,
}

#[derive(Deserialize, Serialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct InitContainer {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    restart_policy: Option<Value>,
}

#[derive(Deserialize, Serialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Status {
    #[serde(skip_serializing_if = "Option::is_none")]
    phase: Option<Value>,
    #[serde(rename = "podIP", skip_serializing_if = "Option::is_none")]
    pod_ip: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    start_time: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    conditions: Option<Vec<Condition>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    init_container_statuses: Option<Vec<ContainerStatus>>,
}

#[derive(Deserialize, Serialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Condition {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    type_: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_transition_time: Option<Value>,
}

#[derive(Deserialize, Serialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ContainerStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    image: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    restart_count: Option<Value>,
}

/// The only pod condition anything reads: why a pod is unschedulable, and when it was
/// scheduled (startup metrics). A kubelet reports four more.
const KEPT_CONDITION: &str = "PodScheduled";

impl<'de> Deserialize<'de> for CachedPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(default)]
            metadata: Meta,
            spec: Option<Spec>,
            status: Option<Status>,
        }
        let mut wire = Wire::deserialize(deserializer)?;
        if let Some(conditions) = wire.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            conditions.retain(|c| c.type_.as_ref().and_then(Value::as_str) == Some(KEPT_CONDITION));
        }
        wire.metadata.keep_annotations(false);
        let pod = whole(&wire.metadata, &wire.spec, &wire.status);
        Ok(CachedPod {
            progress: lane::progress(&pod),
            owner: crate::api::owner::of_labels(wire.metadata.labels.as_ref()),
            created: wire.metadata.creation_timestamp.as_ref().map(|t| t.0),
            text: Packed::new(&pod.to_string(), &PODS),
            metadata: wire.metadata.identity(),
        })
    }
}

impl CachedPod {
    /// The pod as decisions take it.
    pub fn to_object(&self, ar: &ApiResource) -> DynamicObject {
        object(&self.text, &PODS, ar)
    }

    /// What decisions read of the pod, as JSON.
    pub fn json(&self) -> Result<Value, serde_json::Error> {
        let text = self
            .text
            .unpack(&PODS)
            .map_err(<serde_json::Error as serde::de::Error>::custom)?;
        serde_json::from_str(&text)
    }

    /// How far the pod got, for the lane of its Browser.
    pub fn progress(&self) -> Progress {
        self.progress
    }

    /// Its owner (its Browser's), and when it was created.
    pub fn served(&self) -> (Option<&str>, Option<Timestamp>) {
        (self.owner.as_deref(), self.created)
    }

    /// The name of the Browser the pod belongs to: a Browser's pod has its name (its label
    /// may hold a shortened form of a long name).
    pub fn browser(&self) -> Option<&str> {
        self.metadata.name.as_deref()
    }
}

/// An object of the API as the cache holds it, from a full object (what a write or a read
/// returned).
pub fn cached<K: for<'de> Deserialize<'de>>(
    object: &DynamicObject,
) -> Result<K, serde_json::Error> {
    serde_json::to_value(object).and_then(serde_json::from_value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::keys;
    use crate::lifecycle::decide::{self, Observed};
    use crate::lifecycle::plan::Settings;

    fn pod_resource() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
    }

    #[test]
    fn a_browser_keeps_its_metadata_spec_and_status_but_not_kubectl_annotations() {
        let browser: CachedBrowser = serde_json::from_value(json!({
            "apiVersion": "selenosis.io/v1", "kind": "Browser",
            "metadata": {"name": "s1", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "labels": {"a": "b"}, "finalizers": ["f"],
                "annotations": {"selenosis.io/options": "{}", "kubectl.kubernetes.io/last-applied-configuration": "{…}"},
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"browserName": "chrome", "browserVersion": "139.0"},
            "status": {"phase": "Running", "podIP": "10.0.0.1"},
        }))
        .unwrap();
        assert_eq!(browser.browser_name(), Some("chrome"));
        assert_eq!(browser.browser_version(), Some("139.0"));
        assert_eq!(browser.phase(), Some("Running"));
        let ar = ApiResource {
            group: "selenosis.io".into(),
            version: "v1".into(),
            api_version: "selenosis.io/v1".into(),
            kind: "Browser".into(),
            plural: "browsers".into(),
        };
        let object = serde_json::to_value(browser.to_object(&ar)).unwrap();
        assert_eq!(
            object,
            json!({
                "apiVersion": "selenosis.io/v1", "kind": "Browser",
                "metadata": {"name": "s1", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                    "labels": {"a": "b"}, "finalizers": ["f"], "annotations": {"selenosis.io/options": "{}"}},
                "spec": {"browserName": "chrome", "browserVersion": "139.0"},
                "status": {"phase": "Running", "podIP": "10.0.0.1"},
            })
        );
    }

    #[test]
    fn a_numeric_version_is_not_taken_for_a_string() {
        let browser: CachedBrowser = serde_json::from_value(json!({
            "metadata": {"name": "s1"}, "spec": {"browserName": "chrome", "browserVersion": 139.0},
        }))
        .unwrap();
        assert_eq!(browser.browser_version(), None);
        assert_eq!(browser.phase(), None);
    }

    #[test]
    fn a_pod_without_spec_or_status_stays_without() {
        let pod: CachedPod =
            serde_json::from_value(json!({"metadata": {"name": "p", "uid": "u"}})).unwrap();
        let object = serde_json::to_value(pod.to_object(&pod_resource())).unwrap();
        assert_eq!(
            object,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u"}})
        );
    }

    fn golden_pod(text: &str) -> Value {
        crate::manifest::parse(text, std::path::Path::new("golden"))
            .unwrap()
            .remove(0)
    }

    fn goldens() -> Vec<Value> {
        vec![
            golden_pod(include_str!("../../../testdata/golden/chrome.pod.yaml")),
            golden_pod(include_str!("../../../testdata/golden/playwright.pod.yaml")),
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
                        let cached: CachedPod = serde_json::from_value(pod.clone()).unwrap();
                        let pruned =
                            serde_json::to_value(cached.to_object(&pod_resource())).unwrap();
                        // Early, and past the pod creation timeout.
                        for now in ["2026-11-22T10:00:05Z", "2026-11-22T10:10:00Z"] {
                            let plan = |pod: &Value| {
                                let observed = Observed {
                                    browser: &browser,
                                    pod: Some(pod),
                                    now: now.parse().unwrap(),
                                    link_regained: None,
                                    line: decide::Line::default(),
                                };
                                decide::decide(&observed, &Settings::default(), || {
                                    unreachable!("the pod exists")
                                })
                            };
                            assert_eq!(plan(&pod), plan(&pruned), "{pod:#}");
                            assert_eq!(cached.progress(), lane::progress(&pod), "{pod:#}");
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
        let mut pod = golden_pod(include_str!("../../../testdata/golden/playwright.pod.yaml"));
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
        let cached: CachedPod = serde_json::from_value(pod.clone()).unwrap();
        let object = cached.to_object(&pod_resource());
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
    fn pods_map_to_the_browser_of_their_name() {
        // The label of a long name is shortened; the pod's name is the Browser's.
        let long = format!("s1-{}", "a".repeat(100));
        let pod: CachedPod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": long, "namespace": "ns",
                         "labels": {"selenosis.io/browser": crate::names::label_value_for(&long)},
                         "ownerReferences": [{"apiVersion": "browser.selenosis.io/v1", "kind": "Browser", "name": long, "uid": "u", "controller": true}]}
        }))
        .unwrap();
        assert_eq!(pod.browser(), Some(long.as_str()));
    }
}
