//! A kubelet (and scheduler) simulator working only through a `kube::Client`, so it drives pods
//! the same way on the API server double and on a real control plane without nodes.
//!
//! It watches the operator's pods, binds pending ones to its node and walks their status
//! through a [`Script`] with merge patches on `pods/NAME/status`; when a pod gets a
//! deletionTimestamp it confirms the deletion with `gracePeriodSeconds=0` like a kubelet whose
//! containers stopped. Pods annotated [`PREFILLED`] are walked by their writer, not by it
//! ([`running_pod_status`]); it only confirms their deletion.
//!
//! Every request is one a real API server accepts from a scheduler or kubelet: a Node created
//! with its status (allowed on create); `pods/NAME/binding` with `metadata.name` = the pod and
//! a `Node` target; status only through `pods/NAME/status` (podIP = podIPs[0], hostIP =
//! hostIPs[0], and, pods being `restartPolicy: Never`, no container goes from terminated back
//! to running); deletion confirmed with `gracePeriodSeconds=0` and a UID precondition.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use browser_controller::api::keys;

use super::kinds::pod_resource;
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
    PostParams, Preconditions,
};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::task::{AbortHandle, JoinHandle, JoinSet};

/// An annotation of pods whose writer binds them to this kubelet's node and gives them their
/// running status itself (a benchmark's prefilled fleet): the kubelet leaves them as they are
/// until they are deleted.
pub const PREFILLED: &str = "testkit.selenosis.io/prefilled";

/// What happens to a pod after it appears.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Script {
    /// Bound, Pending with ContainerCreating, then Running with a pod IP and Ready.
    Run,
    /// Bound, Pending with ContainerCreating forever.
    StayPending,
    /// The browser container waits with ErrImagePull, then ImagePullBackOff.
    ErrImagePull,
    /// The browser container crashed once and waits with CrashLoopBackOff.
    CrashLoopBackOff,
    /// The browser container terminates before the pod ever runs.
    TerminatedWhilePending { exit_code: i32 },
    /// Runs, then the browser container is OOM-killed and the pod fails.
    OomKilled,
    /// Runs, then the pod is evicted for memory pressure.
    Evicted,
    /// Runs, then `container` exits with `exit_code` after `after`.
    ExitAfterRunning {
        container: String,
        exit_code: i32,
        after: Duration,
    },
    /// Never bound: PodScheduled=False, reason Unschedulable.
    Unschedulable,
    /// Runs, then every container completes and the pod succeeds.
    Succeed,
}

/// What happens when a pod gets a deletionTimestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// DELETE with `gracePeriodSeconds=0` after min(grace period, `max_deletion_delay`).
    AfterGrace,
    /// DELETE with `gracePeriodSeconds=0` after this delay, whatever the grace period
    /// (containers that take a while to stop).
    After(Duration),
    /// Never confirmed: the pod stays Terminating.
    Never,
}

#[derive(Clone, Debug)]
pub struct KubeletConfig {
    /// Pause between two status steps.
    pub step_delay: Duration,
    /// Upper bound of the wait before confirming a deletion.
    pub max_deletion_delay: Duration,
    /// Deletion behaviour of pods without an override.
    pub deletion: Deletion,
    /// Only pods of this namespace (all namespaces when `None`), so that simulators of
    /// concurrent tests sharing one API server leave each other's pods alone.
    pub namespace: Option<String>,
    /// Every pod of the scope, as a kubelet runs every pod bound to it; otherwise only pods
    /// with the operator's `app.kubernetes.io/managed-by` label (other operators' pods, such
    /// as the Go browser-controller's, carry none).
    pub every_pod: bool,
}

impl Default for KubeletConfig {
    fn default() -> Self {
        Self {
            step_delay: Duration::from_millis(5),
            max_deletion_delay: Duration::from_millis(50),
            deletion: Deletion::AfterGrace,
            namespace: None,
            every_pod: false,
        }
    }
}

struct Shared {
    node: String,
    default: Script,
    config: KubeletConfig,
    scripts: Mutex<HashMap<String, Script>>,
    deletions: Mutex<HashMap<String, Deletion>>,
}

impl Shared {
    fn script(&self, pod: &str) -> Script {
        let scripts = self.scripts.lock().unwrap_or_else(PoisonError::into_inner);
        scripts
            .get(pod)
            .cloned()
            .unwrap_or_else(|| self.default.clone())
    }

    fn deletion(&self, pod: &str) -> Deletion {
        let deletions = self
            .deletions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        deletions.get(pod).copied().unwrap_or(self.config.deletion)
    }
}

pub struct Kubelet;

impl Kubelet {
    /// Starts a kubelet for `node_name` running `default` for every pod without an override.
    pub fn start(client: kube::Client, node_name: &str, default: Script) -> KubeletHandle {
        Self::start_with(client, node_name, default, KubeletConfig::default())
    }

    pub fn start_with(
        client: kube::Client,
        node_name: &str,
        default: Script,
        config: KubeletConfig,
    ) -> KubeletHandle {
        let shared = Arc::new(Shared {
            node: node_name.to_string(),
            default,
            config,
            scripts: Mutex::new(HashMap::new()),
            deletions: Mutex::new(HashMap::new()),
        });
        let task = tokio::spawn(run(client, shared.clone()));
        KubeletHandle { shared, task }
    }
}

/// Stops the simulator (and every pod script) when dropped.
pub struct KubeletHandle {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl KubeletHandle {
    /// The script of the pod named `pod` (any namespace); set it before the pod appears.
    pub fn set(&self, pod: &str, script: Script) {
        let mut scripts = self
            .shared
            .scripts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        scripts.insert(pod.to_string(), script);
    }

    /// The deletion behaviour of the pod named `pod`.
    pub fn set_deletion(&self, pod: &str, deletion: Deletion) {
        let mut deletions = self
            .shared
            .deletions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        deletions.insert(pod.to_string(), deletion);
    }
}

impl Drop for KubeletHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn node_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Node"), "nodes")
}

/// Registers the Node when the server serves nodes; failures (403 on a locked-down cluster,
/// 409 when it exists) leave pods still bindable by name.
async fn register_node(client: &kube::Client, node: &str) {
    let Ok(core) = client.list_core_api_resources("v1").await else {
        return;
    };
    if !core.resources.iter().any(|r| r.name == "nodes") {
        return;
    }
    let nodes: Api<DynamicObject> = Api::all_with(client.clone(), &node_resource());
    let mut obj = DynamicObject::new(node, &node_resource()).data(json!({
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": node}],
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        },
    }));
    obj.metadata.labels = Some(
        [
            ("kubernetes.io/hostname".to_string(), node.to_string()),
            ("kubernetes.io/os".to_string(), "linux".to_string()),
        ]
        .into(),
    );
    if let Err(e) = nodes.create(&PostParams::default(), &obj).await {
        tracing::debug!(error = %e, node, "node registration");
    }
}

/// Per-pod bookkeeping, by uid.
#[derive(Default)]
struct Tracked {
    script: Option<AbortHandle>,
    deleting: bool,
}

async fn run(client: kube::Client, shared: Arc<Shared>) {
    register_node(&client, &shared.node).await;
    let pods: Api<DynamicObject> = match &shared.config.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &pod_resource()),
        None => Api::all_with(client.clone(), &pod_resource()),
    };
    let config = if shared.config.every_pod {
        watcher::Config::default()
    } else {
        watcher::Config::default().labels(&keys::managed_pods_selector())
    };
    let mut events = watcher(pods, config)
        .backoff(browser_controller::controller::watch::backoff())
        .boxed();
    let mut tracked: HashMap<String, Tracked> = HashMap::new();
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                    on_pod(&client, &shared, &mut tracked, &mut tasks, pod);
                }
                Some(Ok(watcher::Event::Delete(pod))) => {
                    if let Some(t) = pod.metadata.uid.as_ref().and_then(|uid| tracked.remove(uid))
                        && let Some(script) = t.script
                    {
                        script.abort();
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => tracing::debug!(error = %e, "kubelet pod watch"),
                None => return,
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

fn on_pod(
    client: &kube::Client,
    shared: &Arc<Shared>,
    tracked: &mut HashMap<String, Tracked>,
    tasks: &mut JoinSet<()>,
    pod: DynamicObject,
) {
    let (Some(uid), Some(ns), Some(name)) = (
        pod.metadata.uid.clone(),
        pod.metadata.namespace.clone(),
        pod.metadata.name.clone(),
    ) else {
        return;
    };
    let node = pod.data["spec"]["nodeName"].as_str().unwrap_or("");
    if !node.is_empty() && node != shared.node {
        return;
    }
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &pod_resource());
    let entry = tracked.entry(uid.clone()).or_default();
    if pod.metadata.deletion_timestamp.is_some() {
        if !entry.deleting {
            entry.deleting = true;
            if let Some(script) = entry.script.take() {
                script.abort();
            }
            let wait = match shared.deletion(&name) {
                Deletion::AfterGrace => {
                    let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
                    Some(
                        Duration::from_secs(u64::try_from(grace).unwrap_or(0))
                            .min(shared.config.max_deletion_delay),
                    )
                }
                Deletion::After(delay) => Some(delay),
                Deletion::Never => None,
            };
            if let Some(wait) = wait {
                tasks.spawn(confirm_deletion(api, name, uid, wait));
            }
        }
    } else if entry.script.is_none() && !entry.deleting {
        if pod.annotations().contains_key(PREFILLED) {
            return;
        }
        let walk = Walk {
            api,
            name: name.clone(),
            containers: containers(&pod.data),
            node: shared.node.clone(),
            step: shared.config.step_delay,
            ip: next_pod_ip(),
        };
        entry.script = Some(tasks.spawn(walk.run(shared.script(&name))));
    }
}

/// A kubelet's last word on a pod whose containers stopped.
async fn confirm_deletion(api: Api<DynamicObject>, name: String, uid: String, wait: Duration) {
    tokio::time::sleep(wait).await;
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    retry("kubelet deletion", &name, || api.delete(&name, &params)).await;
}

/// Longest a kubelet keeps retrying one write while the API server is away.
const RETRY_LIMIT: Duration = Duration::from_secs(120);

/// Runs `write` until it succeeds, as a kubelet does through an API server outage; `false`
/// when the pod is gone (404, or 409 for a precondition on a replaced pod) or the retries ran
/// out.
async fn retry<T, F>(what: &str, pod: &str, mut write: impl FnMut() -> F) -> bool
where
    F: std::future::Future<Output = Result<T, kube::Error>>,
{
    let deadline = tokio::time::Instant::now() + RETRY_LIMIT;
    loop {
        match write().await {
            Ok(_) => return true,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return false,
            Err(e) => {
                tracing::debug!(error = %e, pod, "{what}; retrying");
                if tokio::time::Instant::now() >= deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Unique pod IPs across every simulated node of the process.
fn next_pod_ip() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0x01_01_02);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let last = n & 0xff;
        if (2..=254).contains(&last) {
            return format!("10.{}.{}.{last}", (n >> 16) & 0xff, (n >> 8) & 0xff);
        }
    }
}

fn containers(pod: &Value) -> Vec<(String, String)> {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or("").to_string(),
                c["image"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn waiting(reason: &str, message: &str) -> Value {
    let mut w = json!({"reason": reason});
    if !message.is_empty() {
        w["message"] = json!(message);
    }
    json!({"waiting": w})
}

fn running(since: &str) -> Value {
    json!({"running": {"startedAt": since}})
}

fn terminated(exit_code: i32, reason: &str, since: &str) -> Value {
    json!({"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": since, "finishedAt": now()}})
}

fn exit_reason(exit_code: i32) -> &'static str {
    if exit_code == 0 { "Completed" } else { "Error" }
}

fn condition(kind: &str, ok: bool) -> Value {
    json!({"type": kind, "status": if ok { "True" } else { "False" }, "lastProbeTime": null, "lastTransitionTime": now()})
}

/// Container statuses from one state per container (`state_of` returns state, ready,
/// restartCount, lastState).
fn statuses(
    containers: &[(String, String)],
    state_of: impl Fn(&str) -> (Value, bool, u32, Value),
) -> Value {
    let list: Vec<Value> = containers
        .iter()
        .enumerate()
        .map(|(i, (name, image))| {
            let (state, ready, restarts, last) = state_of(name);
            let started = state.get("running").is_some();
            json!({
                "name": name,
                "image": image,
                "imageID": "",
                "containerID": format!("containerd://{:064x}", i + 1),
                "ready": ready,
                "started": started,
                "restartCount": restarts,
                "state": state,
                "lastState": last,
            })
        })
        .collect();
    Value::Array(list)
}

fn base(phase: &str, started: &str, conditions: Value, statuses: Value) -> Value {
    json!({
        "phase": phase,
        "hostIP": "10.0.0.1",
        "hostIPs": [{"ip": "10.0.0.1"}],
        "startTime": started,
        "conditions": conditions,
        "containerStatuses": statuses,
    })
}

fn running_status(containers: &[(String, String)], ip: &str, started: &str, ready: bool) -> Value {
    let mut s = base(
        "Running",
        started,
        json!([
            condition("PodReadyToStartContainers", true),
            condition("Initialized", true),
            condition("Ready", ready),
            condition("ContainersReady", ready),
            condition("PodScheduled", true),
        ]),
        statuses(containers, |_| (running(started), true, 0, json!({}))),
    );
    s["podIP"] = json!(ip);
    s["podIPs"] = json!([{"ip": ip}]);
    s
}

/// The status this kubelet gives `pod` once it runs (with a pod IP of its own), for a pod its
/// writer makes run itself ([`PREFILLED`]).
pub fn running_pod_status(pod: &Value) -> Value {
    running_status(&containers(pod), &next_pod_ip(), &now(), true)
}

/// One pod's walk through its script.
struct Walk {
    api: Api<DynamicObject>,
    name: String,
    containers: Vec<(String, String)>,
    node: String,
    step: Duration,
    ip: String,
}

impl Walk {
    /// The critical container the failure scripts act on: `browser`, else the first one.
    fn browser(&self) -> String {
        self.containers
            .iter()
            .find(|(n, _)| n == keys::BROWSER_CONTAINER)
            .or(self.containers.first())
            .map(|(n, _)| n.clone())
            .unwrap_or_default()
    }

    fn image(&self, container: &str) -> String {
        self.containers
            .iter()
            .find(|(n, _)| n == container)
            .map(|(_, i)| i.clone())
            .unwrap_or_default()
    }

    fn statuses(&self, state_of: impl Fn(&str) -> (Value, bool, u32, Value)) -> Value {
        statuses(&self.containers, state_of)
    }

    async fn status(&self, status: Value) -> bool {
        let patch = Patch::Merge(json!({"status": status}));
        let params = PatchParams::default();
        retry("kubelet status update", &self.name, || {
            self.api.patch_status(&self.name, &params, &patch)
        })
        .await
    }

    async fn pause(&self) {
        tokio::time::sleep(self.step).await;
    }

    async fn bind(&self) -> bool {
        let binding = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": self.name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node},
        });
        retry("kubelet binding", &self.name, || async {
            match self
                .api
                .create_subresource::<_, Value>(
                    "binding",
                    &self.name,
                    &PostParams::default(),
                    &binding,
                )
                .await
            {
                // Someone else (a real scheduler) bound it first.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Value::Null),
                other => other,
            }
        })
        .await
    }

    fn pending_conditions() -> Value {
        json!([
            condition("PodReadyToStartContainers", false),
            condition("Initialized", true),
            condition("Ready", false),
            condition("ContainersReady", false),
            condition("PodScheduled", true),
        ])
    }

    fn running_status(&self, started: &str, ready: bool) -> Value {
        running_status(&self.containers, &self.ip, started, ready)
    }

    async fn run(self, script: Script) {
        self.pause().await;
        if script == Script::Unschedulable {
            let mut scheduled = condition("PodScheduled", false);
            scheduled["reason"] = json!("Unschedulable");
            scheduled["message"] = json!(
                "0/1 nodes are available: 1 Insufficient memory. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
            );
            self.status(json!({"phase": "Pending", "conditions": [scheduled]}))
                .await;
            return;
        }
        if !self.bind().await {
            return;
        }
        self.pause().await;
        let started = now();
        let creating = self.statuses(|_| (waiting("ContainerCreating", ""), false, 0, json!({})));
        if !self
            .status(base(
                "Pending",
                &started,
                Self::pending_conditions(),
                creating,
            ))
            .await
        {
            return;
        }
        self.pause().await;
        let browser = self.browser();
        let pending_with = |browser_state: Value, restarts: u32, last: Value| {
            base(
                "Pending",
                &started,
                Self::pending_conditions(),
                self.statuses(|n| {
                    if n == browser {
                        (browser_state.clone(), false, restarts, last.clone())
                    } else {
                        (running(&started), true, 0, json!({}))
                    }
                }),
            )
        };
        match script {
            Script::StayPending | Script::Unschedulable => {}
            Script::ErrImagePull => {
                let image = self.image(&browser);
                let pull = format!(
                    "failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": not found"
                );
                self.status(pending_with(waiting("ErrImagePull", &pull), 0, json!({})))
                    .await;
                self.pause().await;
                let backoff = format!("Back-off pulling image \"{image}\"");
                self.status(pending_with(
                    waiting("ImagePullBackOff", &backoff),
                    0,
                    json!({}),
                ))
                .await;
            }
            Script::CrashLoopBackOff => {
                let message = format!(
                    "back-off 10s restarting failed container={browser} pod={}",
                    self.name
                );
                self.status(pending_with(
                    waiting("CrashLoopBackOff", &message),
                    1,
                    terminated(1, "Error", &started),
                ))
                .await;
            }
            Script::TerminatedWhilePending { exit_code } => {
                let state = terminated(exit_code, exit_reason(exit_code), &started);
                self.status(pending_with(state, 0, json!({}))).await;
            }
            Script::Run
            | Script::OomKilled
            | Script::Evicted
            | Script::Succeed
            | Script::ExitAfterRunning { .. } => {
                if !self.status(self.running_status(&started, true)).await {
                    return;
                }
                self.after_running(script, &started, &browser).await;
            }
        }
    }

    async fn after_running(&self, script: Script, started: &str, browser: &str) {
        let ended = |phase: &str, state_of: &dyn Fn(&str) -> Value| {
            let mut s = self.running_status(started, false);
            s["phase"] = json!(phase);
            s["containerStatuses"] = self.statuses(|n| (state_of(n), false, 0, json!({})));
            s
        };
        match script {
            Script::OomKilled => {
                self.pause().await;
                // restartPolicy Never: the OOM-killed container stays terminated and the pod
                // fails once nothing runs any more.
                let status = ended("Failed", &|n| {
                    if n == browser {
                        terminated(137, "OOMKilled", started)
                    } else {
                        terminated(0, "Completed", started)
                    }
                });
                self.status(status).await;
            }
            Script::Evicted => {
                self.pause().await;
                let mut status = ended("Failed", &|_| terminated(137, "Error", started));
                status["reason"] = json!("Evicted");
                status["message"] = json!("The node was low on resource: memory. ");
                let mut target = condition("DisruptionTarget", true);
                target["reason"] = json!("TerminationByKubelet");
                target["message"] = json!("The node was low on resource: memory. ");
                if let Some(list) = status["conditions"].as_array_mut() {
                    list.push(target);
                }
                self.status(status).await;
            }
            Script::Succeed => {
                self.pause().await;
                let status = ended("Succeeded", &|_| terminated(0, "Completed", started));
                self.status(status).await;
            }
            Script::ExitAfterRunning {
                container,
                exit_code,
                after,
            } => {
                tokio::time::sleep(after).await;
                let mut status = self.running_status(started, false);
                status["containerStatuses"] = self.statuses(|n| {
                    if n == container {
                        (
                            terminated(exit_code, exit_reason(exit_code), started),
                            false,
                            0,
                            json!({}),
                        )
                    } else {
                        (running(started), true, 0, json!({}))
                    }
                });
                self.status(status).await;
            }
            _ => {}
        }
    }
}
