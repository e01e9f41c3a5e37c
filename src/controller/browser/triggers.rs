//! Triggers of the Browser controller, stages of the watch streams that feed it: which Browser a pod or a
//! BrowserConfig event concerns, the lane a pod change puts its Browser's waiting reconcile
//! in, and the `scheduled` startup metric seen on the pod watch.
//! (What enters the caches at all is `cached`.)

use std::sync::Arc;

use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::cached::{CachedBrowser, CachedKind, CachedPod};
use crate::controller::Shared;
use crate::lifecycle::lane::{self, Lane};
use crate::lifecycle::milestones;
use crate::metrics::{Metrics, Stage};

pub fn strip_managed_fields(object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
}

/// The Browser a pod belongs to (see `CachedPod::browser`).
pub fn browser_of_pod(pod: &CachedPod, browser: &CachedKind) -> Option<ObjectRef<CachedBrowser>> {
    let ns = pod.metadata.namespace.as_deref()?;
    Some(ObjectRef::new_with(pod.browser()?, browser.clone()).within(ns))
}

/// The lane of a Browser's reconcile (`lifecycle::lane`), from the Browser and its pod as the
/// caches have them.
pub fn lane_of(browser: &CachedBrowser, pod: Option<&CachedPod>) -> Lane {
    let pod = pod.and_then(|pod| pod.json().ok());
    lane::lane(browser.phase(), browser.deleting(), pod.as_ref())
}

/// Moves the waiting reconcile of a changed pod's Browser to the lane it needs now: a
/// Browser that started waiting as a creation is served first once its pod runs. Placed
/// after the pod reflector, so that the reconcile then finds the pod as judged.
pub fn rejudge_lane(
    shared: Arc<Shared>,
    browsers: Store<CachedBrowser>,
    browser_resource: CachedKind,
) -> impl FnMut(&Result<watcher::Event<CachedPod>, watcher::Error>) {
    move |event| {
        let Ok(watcher::Event::Apply(pod)) = event else {
            return;
        };
        let (Some(ns), Some(name)) = (pod.metadata.namespace.as_deref(), pod.browser()) else {
            return;
        };
        let key = (ns.to_string(), name.to_string());
        let workers = &shared.workers;
        if !workers.is_waiting(&key) {
            return;
        }
        let browser_ref = ObjectRef::new_with(name, browser_resource.clone()).within(ns);
        if let Some(browser) = browsers.get(&browser_ref) {
            workers.rejudge(&key, lane_of(&browser, Some(pod)));
        }
    }
}

/// Browsers of a namespace still waiting for their pod: a BrowserConfig change may now resolve
/// them (docs/behaviour.md, "Normal path").
pub fn waiting_browsers(
    browsers: &Store<CachedBrowser>,
    ns: &str,
    browser: &CachedKind,
) -> Vec<ObjectRef<CachedBrowser>> {
    browsers
        .state()
        .iter()
        .filter(|b| b.metadata.namespace.as_deref() == Some(ns))
        .filter(|b| !b.deleting())
        .filter(|b| b.phase().is_none())
        .filter_map(|b| {
            Some(ObjectRef::new_with(b.metadata.name.as_deref()?, browser.clone()).within(ns))
        })
        .collect()
}

/// The Browsers (by reference) of the operator's pods whose Browser the cache does not have:
/// their reconcile looks whether the pod was left behind (`reconcile::sweep_orphan`).
pub fn pods_without_browser(
    pods: &Store<CachedPod>,
    browsers: &Store<CachedBrowser>,
    browser: &CachedKind,
) -> Vec<ObjectRef<CachedBrowser>> {
    pods.state()
        .iter()
        .filter_map(|pod| browser_of_pod(pod, browser))
        .filter(|browser_ref| browsers.get(browser_ref).is_none())
        .collect()
}

/// Observes the `scheduled` startup stage on the first live watch event that shows a pod
/// scheduled; `pods` still holds the previous state. A relist (start-up, watch gap) is not a
/// first sighting: the pod may have been seen before, so it is never counted twice.
pub fn observe_scheduling(
    pods: Store<CachedPod>,
    pod_resource: CachedKind,
    metrics: Arc<Metrics>,
) -> impl FnMut(&Result<watcher::Event<CachedPod>, watcher::Error>) {
    move |event| {
        if let Ok(watcher::Event::Apply(pod)) = event {
            let before = pods
                .get(&ObjectRef::from_obj_with(pod, pod_resource.clone()))
                .map(|before| before.to_object(&pod_resource));
            let after = pod.to_object(&pod_resource);
            if let Some((created, scheduled)) = milestones::first_scheduled(before.as_ref(), &after)
            {
                metrics.startup(Stage::Scheduled, created, scheduled);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::keys;
    use crate::lifecycle::decide::{self, Observed};
    use crate::lifecycle::plan::Settings;
    use serde_json::Value;

    fn pod_resource() -> kube::core::ApiResource {
        kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
    }
    use serde_json::json;

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
        let ar = kube::core::ApiResource {
            group: "selenosis.io".into(),
            version: "v1".into(),
            api_version: "selenosis.io/v1".into(),
            kind: "Browser".into(),
            plural: "browsers".into(),
        };
        // The label of a long name is shortened; the pod's name is the Browser's.
        let long = format!("s1-{}", "a".repeat(100));
        let pod: CachedPod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": long, "namespace": "ns",
                         "labels": {"selenosis.io/browser": crate::names::label_value_for(&long)},
                         "ownerReferences": [{"apiVersion": "browser.selenosis.io/v1", "kind": "Browser", "name": long, "uid": "u", "controller": true}]}
        }))
        .unwrap();
        let browser = browser_of_pod(&pod, &Arc::new(ar)).unwrap();
        assert_eq!(browser.name, long);
        assert_eq!(browser.namespace.as_deref(), Some("ns"));
    }
}
