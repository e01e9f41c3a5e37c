//! The end-to-end suite: one set of scenarios, run against every available backend.
//!
//! - `double`: the in-process API server double, served over loopback HTTP (always).
//! - `control-plane`: a real etcd + kube-apiserver from `$KUBEBUILDER_ASSETS`, with `crds/` and
//!   `rbac/` installed; the operator impersonates its ServiceAccount, so `rbac/` is proven to
//!   be enough. Skipped with a printed line when `KUBEBUILDER_ASSETS` is not set.
//! - `cluster`: an existing cluster from `$E2E_KUBECONFIG` (instead of the control plane): no
//!   kubelet simulator, pods really run (`E2E_IMAGE`, default `registry.k8s.io/pause:3.10`),
//!   scenarios that need scripted pod states or install CRDs are skipped.
//!
//! The operator is the real binary, one process per scenario, started with `--namespace` of
//! the scenario's own namespace: scenarios run side by side with their own flags (timeouts),
//! a SIGKILL of one operator disturbs no other scenario, and a scenario's Events, pods and
//! Browsers are its own. A kubelet simulator per scenario works in that namespace only.
//! Neither the double nor the control plane has a garbage collector, so every scenario ends
//! by checking that no Browser and no pod is left: cleanup never depends on owner references.
//!
//! A `harness = false` test: `cargo test --test e2e -- NAME` runs the scenarios whose name
//! contains NAME; `--list` lists them; `E2E_JOBS` (default 4) scenarios run at once.

#[path = "../support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use browser_controller::api::crd::Layout;
use browser_controller::api::keys;
use support::apiserver::{ApiServer, Fault, ServeHandle};
use support::controlplane::{self, Assets, ControlPlane};
use support::crd_history;
use support::host::{self, TempDir, die_with_parent, kill, tail};
use support::kinds::{browser_resource, config_resource, pod_resource};
use support::kubelet::{Deletion, Kubelet, KubeletConfig, KubeletHandle, Script};
use support::upstream;

const BIN: &str = env!("CARGO_BIN_EXE_browser-controller");
/// Longest wait for one condition.
const WAIT: Duration = Duration::from_secs(60);
/// Longest run of one scenario.
const SCENARIO_LIMIT: Duration = Duration::from_secs(480);
const DEFAULT_CLUSTER_IMAGE: &str = "registry.k8s.io/pause:3.10";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

// ---- backends ------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Double,
    ControlPlane,
    Cluster,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Double => "double",
            Kind::ControlPlane => "control-plane",
            Kind::Cluster => "cluster",
        }
    }
}

/// One API server the scenarios share, and what the operator and kubectl need to reach it.
struct Backend {
    kind: Kind,
    client: kube::Client,
    /// The admin's kubeconfig (kubectl).
    admin_kubeconfig: PathBuf,
    /// The operator's kubeconfig: on the control plane it impersonates the ServiceAccount of
    /// `rbac/`.
    operator_kubeconfig: PathBuf,
    /// Per-backend files: kubeconfigs, operator logs.
    dir: TempDir,
    double: Option<(ApiServer, ServeHandle)>,
    plane: Option<ControlPlane>,
    image: String,
}

impl Backend {
    fn simulated(&self) -> bool {
        self.kind != Kind::Cluster
    }

    async fn double() -> Self {
        let server = ApiServer::new();
        let served = server.serve().await.expect("double serves");
        let dir = TempDir::new("e2e-double");
        let kubeconfig = dir.join("kubeconfig");
        served.write_kubeconfig(&kubeconfig).unwrap();
        // Like a real API server: the Pod schema is served, and an apply carrying a field
        // it lacks is refused.
        server.serve_openapi(true, true);
        server.check_pod_fields(400);
        let client = server.client();
        Self {
            kind: Kind::Double,
            client,
            admin_kubeconfig: kubeconfig.clone(),
            operator_kubeconfig: kubeconfig,
            dir,
            double: Some((server, served)),
            plane: None,
            image: "selenium/standalone-chrome:139.0".to_string(),
        }
    }

    async fn control_plane(assets: &Assets) -> Result<Self, String> {
        let plane = ControlPlane::start_with(assets, controlplane::Options { audit: true })
            .await
            .map_err(|e| e.to_string())?;
        let client = plane.client().await.map_err(|e| e.to_string())?;
        controlplane::apply_dir(&client, &repo("rbac"))
            .await
            .map_err(|e| e.to_string())?;
        let dir = TempDir::new("e2e-control-plane");
        let operator_kubeconfig = dir.join("operator.kubeconfig");
        plane
            .write_kubeconfig(&operator_kubeconfig, Some(&operator_user()))
            .map_err(|e| e.to_string())?;
        Ok(Self {
            kind: Kind::ControlPlane,
            client,
            admin_kubeconfig: plane.admin_kubeconfig(),
            operator_kubeconfig,
            dir,
            double: None,
            plane: Some(plane),
            image: "selenium/standalone-chrome:139.0".to_string(),
        })
    }

    async fn cluster(kubeconfig: &Path) -> Result<Self, String> {
        let client = controlplane::client_from(kubeconfig)
            .await
            .map_err(|e| e.to_string())?;
        controlplane::apply_dir(&client, &repo("crds"))
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self {
            kind: Kind::Cluster,
            client,
            admin_kubeconfig: kubeconfig.to_path_buf(),
            operator_kubeconfig: kubeconfig.to_path_buf(),
            dir: TempDir::new("e2e-cluster"),
            double: None,
            plane: None,
            image: std::env::var("E2E_IMAGE").unwrap_or_else(|_| DEFAULT_CLUSTER_IMAGE.into()),
        })
    }

    /// How many times each pod of `ns` was created, as the API server recorded it; `None`
    /// where the backend cannot tell (an existing cluster).
    fn pod_creates(&self, ns: &str) -> Option<BTreeMap<String, usize>> {
        if let Some((server, _)) = &self.double {
            let mut creates = BTreeMap::new();
            for r in server.requests() {
                if r.resource == "pods"
                    && r.subresource.is_none()
                    && r.namespace.as_deref() == Some(ns)
                    && matches!(r.verb.as_str(), "create" | "patch")
                    && r.status == 201
                    && !r.dry_run
                    && let Some(name) = r.name.or_else(|| (r.verb == "create").then(String::new))
                {
                    *creates.entry(name).or_insert(0) += 1;
                }
            }
            return Some(creates);
        }
        self.plane.as_ref().map(|p| p.pod_creates(ns))
    }

    /// Takes the API server away and back, as a control-plane upgrade does: the double
    /// answers 503 for a while; the control plane's kube-apiserver restarts. Returns once it
    /// serves again.
    async fn outage(&self) -> Result<(), String> {
        if let Some((server, _)) = &self.double {
            server.set_unavailable(true);
            tokio::time::sleep(Duration::from_secs(8)).await;
            server.set_unavailable(false);
            return Ok(());
        }
        match &self.plane {
            Some(plane) => plane.restart_apiserver().await.map_err(|e| e.to_string()),
            None => Err("an existing cluster's API server is not ours to restart".into()),
        }
    }

    /// Writes a kubeconfig whose requests act as `user`, so that RBAC applies to them.
    fn write_kubeconfig_as(&self, path: &Path, user: &str) -> Result<(), String> {
        match (&self.plane, &self.double) {
            (Some(plane), _) => plane
                .write_kubeconfig(path, Some(user))
                .map_err(|e| e.to_string()),
            (None, Some((_, served))) => served
                .write_kubeconfig_as(path, Some(user))
                .map_err(|e| e.to_string()),
            (None, None) => Err("an existing cluster's identities are its own".to_string()),
        }
    }

    /// What to print when a scenario failed.
    fn logs(&self) -> String {
        self.plane.as_ref().map(|p| p.logs(60)).unwrap_or_default()
    }

    fn stop(self) {
        if let Some(plane) = self.plane {
            plane.stop();
        }
    }
}

/// Both API-group layouts, through the API (the same code path on every backend).
async fn install_crds(client: &kube::Client) -> Result<(), String> {
    for dir in ["crds", "crds/split-groups"] {
        controlplane::apply_dir(client, &repo(dir))
            .await
            .map_err(|e| format!("{dir}: {e}"))?;
    }
    Ok(())
}

/// `system:serviceaccount:NS:NAME` of `rbac/service-account.yaml`.
fn operator_user() -> String {
    let docs = browser_controller::manifest::read_file(&repo("rbac/service-account.yaml"))
        .expect("rbac/service-account.yaml");
    let meta = &docs[0]["metadata"];
    format!(
        "system:serviceaccount:{}:{}",
        meta["namespace"].as_str().unwrap_or("default"),
        meta["name"].as_str().unwrap_or("default")
    )
}

// ---- one scenario's context ----------------------------------------------------------------

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    let api_version = if group.is_empty() {
        "v1".to_string()
    } else {
        format!("{group}/v1")
    };
    ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version,
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Browsers and pods of the namespace at one moment.
struct Snapshot {
    browsers: Vec<Value>,
    pods: Vec<Value>,
}

impl Snapshot {
    fn browser(&self, name: &str) -> Option<&Value> {
        self.browsers.iter().find(|b| b["metadata"]["name"] == name)
    }

    fn pod(&self, name: &str) -> Option<&Value> {
        self.pods.iter().find(|p| p["metadata"]["name"] == name)
    }

    fn running(&self, name: &str) -> bool {
        self.browser(name)
            .is_some_and(|b| b["status"]["phase"] == "Running")
    }
}

struct Ctx {
    be: Arc<Backend>,
    ns: String,
    layout: Layout,
    kubelet: Option<KubeletHandle>,
    operator: Mutex<Option<Child>>,
    log: PathBuf,
    /// Every Browser and pod a watch saw, in order, with its kind (items of a pod list
    /// carry none).
    seen: Arc<Mutex<Vec<(&'static str, Value)>>>,
    recorders: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Ctx {
    fn drop(&mut self) {
        self.kill_operator();
        for r in &self.recorders {
            r.abort();
        }
    }
}

impl Ctx {
    async fn new(be: Arc<Backend>, scenario: &Scenario, index: usize) -> Arc<Self> {
        // Fresh API servers have no namespaces of earlier runs; an existing cluster may
        // still be deleting them.
        let run = match be.kind {
            Kind::Cluster => format!("{}-", std::process::id()),
            _ => String::new(),
        };
        let ns: String = format!("e2e-{run}{index:02}-{}", scenario.name.replace('_', "-"))
            .chars()
            .take(50)
            .collect();
        let ns = ns.trim_end_matches('-').to_string();
        let namespaces: Api<DynamicObject> =
            Api::all_with(be.client.clone(), &resource("", "Namespace", "namespaces"));
        let obj: DynamicObject = serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .unwrap();
        namespaces
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("namespace {ns}: {e}"));
        let kubelet = be.simulated().then(|| {
            Kubelet::start_with(
                be.client.clone(),
                &format!("node-{ns}"),
                Script::Run,
                KubeletConfig {
                    namespace: Some(ns.clone()),
                    ..KubeletConfig::default()
                },
            )
        });
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorders = [
            ("Browser", browser_resource(scenario.layout)),
            ("Pod", pod_resource()),
        ]
        .into_iter()
        .map(|(kind, ar)| {
            let api: Api<DynamicObject> = Api::namespaced_with(be.client.clone(), &ns, &ar);
            tokio::spawn(record(api, kind, seen.clone()))
        })
        .collect();
        let log = be.dir.join(&format!("{ns}.operator.log"));
        Arc::new(Self {
            be,
            ns,
            layout: scenario.layout,
            kubelet,
            operator: Mutex::new(None),
            log,
            seen,
            recorders,
        })
    }

    fn kubelet(&self) -> &KubeletHandle {
        self.kubelet
            .as_ref()
            .expect("scenario needs the kubelet simulator")
    }

    /// Starts the operator binary on this namespace; flags may shorten timeouts.
    fn start_operator(&self, flags: &[&str]) {
        self.start_operator_with(&self.be.operator_kubeconfig, flags);
    }

    /// [`Ctx::start_operator`] with another kubeconfig (another identity).
    fn start_operator_with(&self, kubeconfig: &Path, flags: &[&str]) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut command = Command::new(BIN);
        // Endpoints off unless a scenario asks for them.
        let defaults = ["--metrics-addr=0", "--health-probe-bind-address=0"]
            .into_iter()
            .filter(|d| {
                let flag = d.split('=').next().unwrap_or_default();
                !flags.iter().any(|f| f.split('=').next() == Some(flag))
            });
        command
            .arg(format!("--namespace={}", self.ns))
            .args(defaults)
            .arg("--log-level=info")
            .args(flags)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        if self.layout == Layout::SplitGroups {
            // Both layouts are installed: the operator would otherwise pick selenosis.io.
            command.args([
                format!("--browser-api-group={}", keys::SPLIT_BROWSER_GROUP),
                format!(
                    "--browserconfig-api-group={}",
                    keys::SPLIT_BROWSERCONFIG_GROUP
                ),
            ]);
        }
        let child = die_with_parent(&mut command)
            .spawn()
            .expect("operator starts");
        let previous = self.operator.lock().unwrap().replace(child);
        assert!(previous.is_none(), "one operator per scenario at a time");
    }

    /// SIGKILL: no shutdown, no cleanup, as when a node dies.
    fn kill_operator(&self) {
        if let Some(mut child) = self.operator.lock().unwrap().take() {
            kill(&mut child);
        }
    }

    fn api(&self, ar: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.be.client.clone(), &self.ns, ar)
    }

    fn browsers(&self) -> Api<DynamicObject> {
        self.api(&browser_resource(self.layout))
    }

    fn pods(&self) -> Api<DynamicObject> {
        self.api(&pod_resource())
    }

    async fn list(api: &Api<DynamicObject>) -> Vec<Value> {
        match api.list(&Default::default()).await {
            Ok(list) => list
                .items
                .iter()
                .filter_map(|o| serde_json::to_value(o).ok())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    async fn snapshot(&self) -> Snapshot {
        Snapshot {
            browsers: Self::list(&self.browsers()).await,
            pods: Self::list(&self.pods()).await,
        }
    }

    /// Waits until `check` holds on a fresh snapshot.
    async fn until(&self, what: &str, check: impl Fn(&Snapshot) -> bool) -> Snapshot {
        self.until_within(WAIT, Duration::from_millis(50), what, check)
            .await
    }

    /// [`Ctx::until`] with another limit and polling interval (lists of many objects are
    /// not fetched 20 times a second).
    async fn until_within(
        &self,
        limit: Duration,
        every: Duration,
        what: &str,
        check: impl Fn(&Snapshot) -> bool,
    ) -> Snapshot {
        poll(limit, every, || async {
            let snap = self.snapshot().await;
            if check(&snap) {
                Ok(snap)
            } else {
                Err(format!(
                    "{what}; browsers: {:#?}; pods: {:#?}",
                    snap.browsers, snap.pods
                ))
            }
        })
        .await
    }

    async fn until_running(&self, name: &str) -> Snapshot {
        self.until(&format!("{name} Running"), |s| s.running(name))
            .await
    }

    async fn until_gone(&self, name: &str) {
        self.until(&format!("{name} and its pod to be gone"), |s| {
            s.browser(name).is_none() && s.pod(name).is_none()
        })
        .await;
    }

    /// Watch events of `kind` (`Browser`, `Pod`) named `name`, in order.
    fn seen(&self, kind: &str, name: &str) -> Vec<Value> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, o)| *k == kind && o["metadata"]["name"] == name)
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// The statuses a Browser watcher (the hub, `kubectl get -w`) saw for `name`, in order.
    fn seen_statuses(&self, name: &str) -> Vec<Value> {
        self.seen("Browser", name)
            .into_iter()
            .filter_map(|o| o.get("status").cloned())
            .collect()
    }

    /// The distinct pod UIDs ever seen for `name`.
    fn pod_uids(&self, name: &str) -> BTreeSet<String> {
        self.seen("Pod", name)
            .iter()
            .filter_map(|p| p["metadata"]["uid"].as_str().map(String::from))
            .collect()
    }

    /// The first Failed status a watcher saw for `name`.
    async fn failure_of(&self, name: &str) -> Value {
        poll(WAIT, Duration::from_millis(20), || async {
            let seen = self.seen_statuses(name);
            match seen.iter().find(|s| s["phase"] == "Failed") {
                Some(failed) => Ok(failed.clone()),
                None => Err(format!("{name} to fail; seen: {seen:#?}")),
            }
        })
        .await
    }

    /// Waits for `name` to fail with `reason`, then for it to be gone, and checks that it never
    /// had a pod; returns the failure message.
    async fn fails_without_a_pod(&self, name: &str, reason: &str) -> String {
        let failure = self.failure_of(name).await;
        assert_eq!(failure["reason"], reason, "{failure}");
        self.until_gone(name).await;
        assert!(self.pod_uids(name).is_empty(), "{name} had a pod");
        failure["message"].as_str().unwrap_or("").to_string()
    }

    /// Reasons of the Events about `name`, sorted.
    async fn event_reasons(&self, name: &str) -> Vec<String> {
        let events = self.api(&resource("events.k8s.io", "Event", "events"));
        let mut reasons: Vec<String> = Self::list(&events)
            .await
            .iter()
            .filter(|e| e["regarding"]["name"] == name)
            .filter_map(|e| e["reason"].as_str().map(String::from))
            .collect();
        reasons.sort();
        reasons
    }

    async fn until_events(&self, name: &str, wanted: &[&str]) {
        poll(WAIT, Duration::from_millis(100), || async {
            let reasons = self.event_reasons(name).await;
            if wanted.iter().all(|w| reasons.iter().any(|r| r == w)) {
                Ok(())
            } else {
                Err(format!(
                    "Events of {name}: want {wanted:?}, have {reasons:?}"
                ))
            }
        })
        .await
    }

    /// Creates `obj` (a manifest) in this namespace.
    async fn create(&self, ar: &ApiResource, mut obj: Value) -> DynamicObject {
        obj["apiVersion"] = json!(ar.api_version);
        obj["kind"] = json!(ar.kind);
        obj["metadata"]["namespace"] = json!(self.ns);
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let obj: DynamicObject = serde_json::from_value(obj).unwrap();
        self.api(ar)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("{} {name} created: {e}", ar.kind))
    }

    async fn create_config(&self, name: &str, spec: Value) {
        let config = json!({"metadata": {"name": name}, "spec": spec});
        self.create(&config_resource(self.layout), config).await;
    }

    /// The chrome config: browser on 4444, `seleniferous` sidecar on 4445.
    fn chrome_spec(&self) -> Value {
        let sidecar = if self.be.simulated() {
            "alcounit/seleniferous:v2"
        } else {
            &self.be.image
        };
        json!({
            "template": {
                "sidecars": [{"name": "seleniferous", "image": sidecar, "ports": [{"containerPort": 4445}]}],
                "ports": [{"containerPort": 4444}],
            },
            "browsers": {"chrome": {"139.0": {"image": self.be.image}}}
        })
    }

    async fn chrome_config(&self) {
        self.create_config("chrome", self.chrome_spec()).await;
    }

    /// Waits until the BrowserConfig `name` reports condition `kind` as `status`.
    async fn until_config(&self, name: &str, kind: &str, status: &str) -> Value {
        let api = self.api(&config_resource(self.layout));
        poll(WAIT, Duration::from_millis(50), || async {
            let config = match api.get(name).await {
                Ok(c) => serde_json::to_value(c).unwrap(),
                Err(e) => return Err(format!("BrowserConfig {name}: {e}")),
            };
            config["status"]["conditions"]
                .as_array()
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| c["type"] == kind && c["status"] == status)
                })
                .cloned()
                .ok_or_else(|| format!("BrowserConfig {name}: no {kind}={status}: {config:#}"))
        })
        .await
    }

    async fn create_browser(&self, name: &str, annotations: Value) {
        let browser = json!({
            "metadata": {"name": name, "labels": {"selenosis.io/owner": "hub"}, "annotations": annotations},
            "spec": {"browserName": "chrome", "browserVersion": "139.0"},
        });
        self.create(&browser_resource(self.layout), browser).await;
    }

    async fn delete_browser(&self, name: &str) {
        self.browsers()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("browser {name} deleted: {e}"));
    }

    async fn delete_pod(&self, name: &str, params: &DeleteParams) {
        self.pods()
            .delete(name, params)
            .await
            .unwrap_or_else(|e| panic!("pod {name} deleted: {e}"));
    }

    /// Makes the next pod create named `pod` fail on quota, as the ResourceQuota admission
    /// does: the double gets the fault injected; a real API server gets a ResourceQuota of
    /// zero pods (with its status written here, as no quota controller runs).
    async fn refuse_pod_by_quota(&self, pod: &str) {
        if let Some((server, _)) = &self.be.double {
            let message = format!(
                "pods \"{pod}\" is forbidden: exceeded quota: e2e, requested: pods=1, used: pods=0, limited: pods=0"
            );
            server.inject(
                Fault::new("create", "pods", 403, "Forbidden", &message)
                    .object(&self.ns, pod)
                    .times(1),
            );
            return;
        }
        let quotas = self.api(&resource("", "ResourceQuota", "resourcequotas"));
        let quota = json!({
            "apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "e2e", "namespace": self.ns},
            "spec": {"hard": {"pods": "0"}},
        });
        quotas
            .patch(
                "e2e",
                &PatchParams::apply(controlplane::MANAGER),
                &Patch::Apply(&quota),
            )
            .await
            .expect("quota created");
        let status = json!({"status": {"hard": {"pods": "0"}, "used": {"pods": "0"}}});
        quotas
            .patch_status("e2e", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("quota status written");
        // The quota admission reads quotas from an informer: give it the status first (a
        // quota without one refuses with "status unknown", which is `Forbidden`).
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    /// Runs kubectl with the admin's kubeconfig; `None` when kubectl is not installed.
    async fn kubectl(&self, args: &[&str]) -> Option<String> {
        let mut command = Command::new("kubectl");
        command
            .arg(format!(
                "--kubeconfig={}",
                self.be.admin_kubeconfig.display()
            ))
            .arg(format!("--namespace={}", self.ns))
            .arg("--request-timeout=30s")
            .args(args)
            .stdin(Stdio::null());
        let shown = args.join(" ");
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap();
        match output {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => panic!("kubectl {shown}: {e}"),
            Ok(out) => {
                assert!(
                    out.status.success(),
                    "kubectl {shown}: {}\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
                Some(String::from_utf8_lossy(&out.stdout).into_owned())
            }
        }
    }
}

/// Polls `probe` every `every` until it answers `Ok`; panics with its last `Err` after `limit`.
async fn poll<T, F: Future<Output = Result<T, String>>>(
    limit: Duration,
    every: Duration,
    mut probe: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(why) => assert!(Instant::now() < deadline, "timed out waiting for {why}"),
        }
        tokio::time::sleep(every).await;
    }
}

async fn record(
    api: Api<DynamicObject>,
    kind: &'static str,
    seen: Arc<Mutex<Vec<(&'static str, Value)>>>,
) {
    // Resumes across API server restarts within seconds, as the operator's watches do.
    let mut stream = watcher(api, watcher::Config::default())
        .backoff(browser_controller::controller::watch::backoff())
        .boxed();
    while let Some(event) = stream.next().await {
        if let Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) = event
            && let Ok(v) = serde_json::to_value(&obj)
        {
            seen.lock().unwrap().push((kind, v));
        }
    }
}

// ---- scenarios -----------------------------------------------------------------------------

type Run = fn(Arc<Ctx>) -> Pin<Box<dyn Future<Output = ()> + Send>>;

struct Scenario {
    name: &'static str,
    /// Needs the kubelet simulator (scripted pod states) or installs cluster-wide objects:
    /// skipped on an existing cluster.
    simulated: bool,
    layout: Layout,
    /// Runs alone, before the current CRDs are installed, and installs them itself (CRDs
    /// are cluster-wide: no other scenario may run meanwhile).
    before_crds: bool,
    /// Runs alone, after the others: it takes the API server away.
    alone: bool,
    run: Run,
}

macro_rules! scenario {
    ($f:ident, $simulated:expr) => {
        scenario!($f, $simulated, Layout::Default)
    };
    ($f:ident, $simulated:expr, $layout:expr) => {
        Scenario {
            name: stringify!($f),
            simulated: $simulated,
            layout: $layout,
            before_crds: false,
            alone: false,
            run: |cx| Box::pin($f(cx)),
        }
    };
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            before_crds: true,
            ..scenario!(crds_applied_over_older_sets_keep_objects_and_sessions, true)
        },
        scenario!(
            pod_fields_the_cluster_lacks_are_removed_with_a_warning,
            true
        ),
        scenario!(
            two_hundred_browsers_at_once_all_run_then_all_clean_up,
            false
        ),
        scenario!(
            normal_session_pending_then_running_with_ip_then_cleaned_up,
            true
        ),
        scenario!(config_not_found_fails_without_a_pod, false),
        scenario!(invalid_options_fail_without_a_pod, false),
        scenario!(pod_create_over_quota_fails_with_quota_exceeded, false),
        scenario!(pod_create_invalid_fails_with_invalid_pod_spec, false),
        scenario!(
            pending_too_long_is_force_deleted_with_pod_creation_timeout,
            true
        ),
        scenario!(
            unschedulable_pod_times_out_naming_the_scheduler_message,
            true
        ),
        scenario!(
            failing_containers_and_failed_pods_end_with_their_reasons,
            true
        ),
        scenario!(succeeded_pod_makes_a_succeeded_browser, true),
        scenario!(external_delete_removes_the_pod_then_the_finalizer, false),
        scenario!(
            pod_stuck_terminating_is_forced_after_the_deletion_timeout,
            true
        ),
        scenario!(
            pod_deleted_under_a_live_browser_fails_it_with_pod_deleted,
            true
        ),
        scenario!(lost_pod_is_never_recreated, true),
        scenario!(
            foreign_pod_of_the_same_name_is_a_conflict_and_untouched,
            false
        ),
        scenario!(browser_older_than_max_lifetime_is_ended, false),
        scenario!(operator_sigkilled_mid_lifecycle_and_restarted, true),
        scenario!(
            config_rejected_by_the_pod_schema_fails_browsers_with_invalid_config,
            false
        ),
        scenario!(
            kubectl_get_shows_printer_columns_and_describe_shows_events,
            false
        ),
        scenario!(split_group_layout_runs_the_same, true, Layout::SplitGroups),
        scenario!(namespace_scoped_with_only_the_namespaced_rbac, true),
        scenario!(
            prepull_daemon_sets_follow_the_config_and_report_progress,
            true
        ),
        Scenario {
            alone: true,
            ..scenario!(
                api_server_restart_and_operator_kill_during_a_burst_one_pod_each_and_quick_recovery,
                true
            )
        },
    ]
}

fn is_failed_with(status: &Value, reason: &str) -> bool {
    status["phase"] == "Failed" && status["reason"] == reason
}

async fn normal_session_pending_then_running_with_ip_then_cleaned_up(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.kubelet().set(
        "s1",
        Script::ExitAfterRunning {
            container: "seleniferous".into(),
            exit_code: 0,
            after: Duration::from_millis(1500),
        },
    );
    cx.create_browser("s1", json!({})).await;
    let snap = cx.until_running("s1").await;
    let browser = snap.browser("s1").unwrap();
    let pod = snap.pod("s1").expect("pod exists while Running");
    assert_eq!(browser["status"]["podIP"], pod["status"]["podIP"]);
    let finalizers = browser["metadata"]["finalizers"].as_array().unwrap();
    assert!(finalizers.contains(&json!(keys::FINALIZER)));
    let labels = &browser["metadata"]["labels"];
    assert_eq!(labels[keys::LABEL_BROWSER], "s1");
    assert_eq!(labels[keys::LABEL_BROWSER_NAME], "chrome");
    assert_eq!(labels[keys::LABEL_BROWSER_VERSION], "139.0");
    let pod_labels = &pod["metadata"]["labels"];
    assert_eq!(pod_labels[keys::LABEL_MANAGED_BY], "browser-controller");
    assert_eq!(pod_labels[keys::LABEL_OWNER], "hub");
    assert_eq!(pod_labels[keys::LABEL_BROWSER], "s1");
    let owner = &pod["metadata"]["ownerReferences"][0];
    assert_eq!(owner["uid"], browser["metadata"]["uid"]);
    assert_eq!(owner["controller"], true);
    assert_eq!(pod["spec"]["containers"][0]["name"], "browser");
    let statuses = browser["status"]["containerStatuses"].as_array().unwrap();
    assert!(
        statuses
            .iter()
            .any(|c| c["name"] == "browser" && c["ports"][0]["containerPort"] == 4444),
        "{statuses:?}"
    );

    let failure = cx.failure_of("s1").await;
    assert_eq!(failure["reason"], "ContainerTerminated");
    assert_eq!(
        failure["message"],
        "pod container seleniferous terminated: Completed (exit code 0)"
    );
    cx.until_gone("s1").await;

    // What a watching client saw: Pending first; Running only ever with the pod IP, in the
    // same event.
    let seen = cx.seen_statuses("s1");
    let phases: Vec<&str> = seen.iter().filter_map(|s| s["phase"].as_str()).collect();
    assert_eq!(phases.first(), Some(&"Pending"), "{seen:#?}");
    assert!(phases.contains(&"Running"), "{seen:#?}");
    for s in &seen {
        if s["phase"] == "Running" {
            assert!(s["podIP"].is_string(), "Running without podIP: {s}");
        }
    }
    assert_eq!(cx.pod_uids("s1").len(), 1);
    cx.until_events("s1", &["PodCreated", "Running", "ContainerTerminated"])
        .await;
}

async fn config_not_found_fails_without_a_pod(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.create_browser("nocfg", json!({})).await;
    let message = cx.fails_without_a_pod("nocfg", "ConfigNotFound").await;
    assert!(
        message.starts_with("Browser configuration not found"),
        "{message}"
    );
    assert!(message.contains(&cx.ns), "{message}");
    cx.until_events("nocfg", &["ConfigNotFound"]).await;
}

async fn invalid_options_fail_without_a_pod(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("opts", json!({keys::ANNOTATION_OPTIONS: "{\"labels\": 5}"}))
        .await;
    let message = cx
        .fails_without_a_pod("opts", "InvalidSelenosisOptions")
        .await;
    assert!(
        message.starts_with("unmarshal selenosis.io/options: "),
        "{message}"
    );
}

async fn pod_create_over_quota_fails_with_quota_exceeded(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    // Validated before the quota exists: its dry runs would be refused too.
    cx.until_config("chrome", "Valid", "True").await;
    cx.refuse_pod_by_quota("q1").await;
    cx.create_browser("q1", json!({})).await;
    let message = cx.fails_without_a_pod("q1", "QuotaExceeded").await;
    assert!(
        message.starts_with("pods \"q1\" is forbidden: exceeded quota: e2e"),
        "{message}"
    );
}

async fn pod_create_invalid_fails_with_invalid_pod_spec(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    // Browser annotations go to the pod; the Pod validation wants an int32 here.
    cx.create_browser(
        "inv",
        json!({"controller.kubernetes.io/pod-deletion-cost": "cheap"}),
    )
    .await;
    let message = cx.fails_without_a_pod("inv", "InvalidPodSpec").await;
    assert!(message.starts_with("Pod \"inv\" is invalid: "), "{message}");
    assert!(
        message.contains("metadata.annotations[controller.kubernetes.io/pod-deletion-cost]"),
        "{message}"
    );
}

async fn pending_too_long_is_force_deleted_with_pod_creation_timeout(cx: Arc<Ctx>) {
    cx.start_operator(&["--browser-pod-creation-timeout=2s"]);
    cx.chrome_config().await;
    cx.kubelet().set("slow", Script::StayPending);
    cx.create_browser("slow", json!({})).await;
    let failure = cx.failure_of("slow").await;
    assert_eq!(failure["reason"], "PodCreationTimeout");
    assert_eq!(
        failure["message"],
        "pod creation timeout exceeded after 2s, container browser: ContainerCreating"
    );
    cx.until_gone("slow").await;
}

async fn unschedulable_pod_times_out_naming_the_scheduler_message(cx: Arc<Ctx>) {
    cx.start_operator(&["--browser-pod-creation-timeout=2s"]);
    cx.chrome_config().await;
    cx.kubelet().set("nosched", Script::Unschedulable);
    cx.create_browser("nosched", json!({})).await;
    let failure = cx.failure_of("nosched").await;
    assert_eq!(failure["reason"], "PodCreationTimeout");
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "pod creation timeout exceeded after 2s, pod unschedulable: 0/1 nodes are available"
        ),
        "{message}"
    );
    cx.until_gone("nosched").await;
}

async fn failing_containers_and_failed_pods_end_with_their_reasons(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    let cases = [
        ("pull", Script::ErrImagePull, "ErrImagePull"),
        ("crash", Script::CrashLoopBackOff, "CrashLoopBackOff"),
        ("oom", Script::OomKilled, "OOMKilled"),
        ("evict", Script::Evicted, "Evicted"),
        (
            "early",
            Script::TerminatedWhilePending { exit_code: 2 },
            "ContainerTerminated",
        ),
    ];
    for (name, script, _) in &cases {
        cx.kubelet().set(name, script.clone());
        cx.create_browser(name, json!({})).await;
    }
    for (name, _, reason) in &cases {
        let failure = cx.failure_of(name).await;
        let got = failure["reason"].as_str().unwrap();
        // ErrImagePull may already have become ImagePullBackOff when observed.
        if *reason == "ErrImagePull" {
            assert!(
                got == "ErrImagePull" || got == "ImagePullBackOff",
                "{name}: {failure}"
            );
        } else {
            assert_eq!(got, *reason, "{name}: {failure}");
        }
        cx.until_gone(name).await;
    }
    let message = |name: &str| {
        cx.seen_statuses(name)
            .into_iter()
            .find(|s| s["phase"] == "Failed")
            .and_then(|s| s["message"].as_str().map(String::from))
            .unwrap()
    };
    assert!(
        message("evict").starts_with("pod has failed with reason: Evicted - "),
        "{}",
        message("evict")
    );
    assert!(
        message("crash").starts_with("pod container browser failed: CrashLoopBackOff - "),
        "{}",
        message("crash")
    );
    assert_eq!(
        message("early"),
        "pod container browser terminated: Error (exit code 2)"
    );
}

async fn succeeded_pod_makes_a_succeeded_browser(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.kubelet().set("done", Script::Succeed);
    cx.create_browser("done", json!({})).await;
    cx.until_gone("done").await;
    assert!(
        cx.seen_statuses("done")
            .iter()
            .any(|s| s["phase"] == "Succeeded"),
        "{:#?}",
        cx.seen_statuses("done")
    );
}

async fn external_delete_removes_the_pod_then_the_finalizer(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("del", json!({})).await;
    cx.until_running("del").await;
    cx.delete_browser("del").await;
    cx.until_gone("del").await;
    assert!(
        cx.seen_statuses("del")
            .iter()
            .all(|s| s["phase"] != "Failed")
    );
}

async fn pod_stuck_terminating_is_forced_after_the_deletion_timeout(cx: Arc<Ctx>) {
    cx.start_operator(&["--browser-pod-deletion-timeout=2s"]);
    cx.chrome_config().await;
    cx.kubelet().set_deletion("stuck", Deletion::Never);
    cx.create_browser("stuck", json!({})).await;
    cx.until_running("stuck").await;
    cx.delete_browser("stuck").await;
    cx.until("the pod terminating", |s| {
        s.pod("stuck")
            .is_some_and(|p| p["metadata"]["deletionTimestamp"].is_string())
    })
    .await;
    cx.until_gone("stuck").await;
}

async fn pod_deleted_under_a_live_browser_fails_it_with_pod_deleted(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    // Containers that take a while to stop: the operator sees the pod terminating.
    cx.kubelet()
        .set_deletion("pd", Deletion::After(Duration::from_secs(2)));
    cx.create_browser("pd", json!({})).await;
    let snap = cx.until_running("pd").await;
    let ip = snap.browser("pd").unwrap()["status"]["podIP"].clone();
    cx.delete_pod("pd", &DeleteParams::default()).await;
    let failure = cx.failure_of("pd").await;
    assert_eq!(failure["reason"], "PodDeleted");
    assert_eq!(failure["podIP"], ip);
    // A terminating pod is left to its kubelet, which confirms its removal.
    cx.until_gone("pd").await;
    assert_eq!(cx.pod_uids("pd").len(), 1);
}

async fn lost_pod_is_never_recreated(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("lost", json!({})).await;
    cx.until_running("lost").await;
    cx.delete_pod("lost", &DeleteParams::default().grace_period(0))
        .await;
    let failure = cx.failure_of("lost").await;
    assert!(
        is_failed_with(&failure, "PodLost") || is_failed_with(&failure, "PodDeleted"),
        "{failure}"
    );
    cx.until_gone("lost").await;
    assert_eq!(
        cx.pod_uids("lost").len(),
        1,
        "the pod must not be recreated"
    );
}

async fn foreign_pod_of_the_same_name_is_a_conflict_and_untouched(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    let foreign = json!({
        "metadata": {"name": "taken", "labels": {"app": "other"}},
        "spec": {"containers": [{"name": "c", "image": cx.be.image}]}
    });
    let created = cx.create(&pod_resource(), foreign).await;
    cx.create_browser("taken", json!({})).await;
    let failure = cx.failure_of("taken").await;
    assert_eq!(failure["reason"], "PodConflict");
    let snap = cx
        .until("the Browser gone", |s| s.browser("taken").is_none())
        .await;
    let pod = snap.pod("taken").expect("the foreign pod is left alone");
    assert_eq!(
        pod["metadata"]["uid"].as_str(),
        created.metadata.uid.as_deref()
    );
    assert!(pod["metadata"]["deletionTimestamp"].is_null());
    assert_eq!(pod["metadata"]["labels"], json!({"app": "other"}));
    assert!(pod["metadata"]["ownerReferences"].is_null());
    cx.delete_pod("taken", &DeleteParams::default().grace_period(0))
        .await;
    cx.until_gone("taken").await;
}

async fn browser_older_than_max_lifetime_is_ended(cx: Arc<Ctx>) {
    cx.start_operator(&["--browser-max-lifetime=2s"]);
    cx.chrome_config().await;
    cx.create_browser("old", json!({})).await;
    let failure = cx.failure_of("old").await;
    assert_eq!(failure["reason"], "LifetimeExceeded");
    cx.until_gone("old").await;
}

async fn operator_sigkilled_mid_lifecycle_and_restarted(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    // `ends` finishes its session while the operator is down; `deleted` is deleted by the
    // client meanwhile; `late` is created meanwhile.
    cx.kubelet().set(
        "ends",
        Script::ExitAfterRunning {
            container: "browser".into(),
            exit_code: 0,
            after: Duration::from_secs(4),
        },
    );
    cx.create_browser("ends", json!({})).await;
    cx.create_browser("deleted", json!({})).await;
    cx.until("both Running", |s| {
        s.running("ends") && s.running("deleted")
    })
    .await;
    cx.kill_operator();
    cx.delete_browser("deleted").await;
    cx.create_browser("late", json!({})).await;
    // The session ends with nobody watching: the pod's status changes, the Browser does not.
    cx.until("the browser container of ends terminated", |s| {
        s.pod("ends").is_some_and(|p| {
            p["status"]["containerStatuses"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["state"]["terminated"].is_object()))
        })
    })
    .await;
    let snap = cx.snapshot().await;
    assert!(snap.running("ends"));
    assert!(
        snap.browser("deleted")
            .is_some_and(|b| b["metadata"]["deletionTimestamp"].is_string()),
        "the finalizer holds the Browser while the operator is down"
    );
    assert!(snap.pod("late").is_none());

    cx.start_operator(&[]);
    let failure = cx.failure_of("ends").await;
    assert_eq!(failure["reason"], "ContainerTerminated");
    cx.until_gone("ends").await;
    cx.until_gone("deleted").await;
    cx.until_running("late").await;
    cx.delete_browser("late").await;
    cx.until_gone("late").await;
    for name in ["ends", "deleted", "late"] {
        assert_eq!(cx.pod_uids(name).len(), 1, "{name}: one pod, ever");
    }
}

async fn config_rejected_by_the_pod_schema_fails_browsers_with_invalid_config(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.create_config(
        "bad",
        json!({"browsers": {"chrome": {"139.0": {
            "image": cx.be.image,
            "sidecars": [{"name": "Not_A_Dns_Label", "image": cx.be.image}]
        }}}}),
    )
    .await;
    // The dry run's answer, as the cluster's Pod schema gave it.
    let valid = cx.until_config("bad", "Valid", "False").await;
    assert!(
        valid["message"]
            .as_str()
            .is_some_and(|m| m.contains("Not_A_Dns_Label")),
        "{valid}"
    );
    cx.create_browser("cfg", json!({})).await;
    let message = cx.fails_without_a_pod("cfg", "InvalidConfig").await;
    assert!(message.contains("Not_A_Dns_Label"), "{message}");
}

async fn two_hundred_browsers_at_once_all_run_then_all_clean_up(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    let names: Vec<String> = (0..200).map(|i| format!("b{i:03}")).collect();
    let create = |n: &String| {
        let (cx, n) = (cx.clone(), n.clone());
        async move { cx.create_browser(&n, json!({})).await }
    };
    futures::stream::iter(names.iter().map(create))
        .buffer_unordered(50)
        .collect::<Vec<()>>()
        .await;
    let (limit, every) = (Duration::from_secs(180), Duration::from_millis(500));
    let snap = cx
        .until_within(limit, every, "200 Running", |s| {
            s.browsers
                .iter()
                .filter(|b| b["status"]["phase"] == "Running" && b["status"]["podIP"].is_string())
                .count()
                == 200
        })
        .await;
    assert_eq!(snap.pods.len(), 200);
    let delete = |n: &String| {
        let (cx, n) = (cx.clone(), n.clone());
        async move { cx.delete_browser(&n).await }
    };
    futures::stream::iter(names.iter().map(delete))
        .buffer_unordered(50)
        .collect::<Vec<()>>()
        .await;
    cx.until_within(limit, every, "all gone", |s| {
        s.browsers.is_empty() && s.pods.is_empty()
    })
    .await;
    for name in &names {
        assert_eq!(cx.pod_uids(name).len(), 1, "{name}");
    }
}

async fn split_group_layout_runs_the_same(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("split", json!({})).await;
    let snap = cx.until_running("split").await;
    let pod = snap.pod("split").unwrap();
    assert_eq!(
        pod["metadata"]["ownerReferences"][0]["apiVersion"],
        "browser.selenosis.io/v1"
    );
    cx.delete_browser("split").await;
    cx.until_gone("split").await;
}

/// An API server restart during a burst, with the operator SIGKILLed and restarted as well:
/// every Browser gets at most one pod (as the API server recorded the creates, and as a
/// watch that resumes across the outage saw them), every Browser created before or after
/// the outage has a status within seconds of the API server serving again and settles
/// (Running, or failed with a reason) within seconds more, `/readyz` is not ready while the
/// API server is away, and nothing is left once the Browsers are deleted.
async fn api_server_restart_and_operator_kill_during_a_burst_one_pod_each_and_quick_recovery(
    cx: Arc<Ctx>,
) {
    /// Within this much of the API server serving again, every Browser has a status.
    const STATUS_BOUND: Duration = Duration::from_secs(5);
    /// The pod's own start on top: the kubelet simulator resumes its watch (up to 4 s of
    /// backoff) and walks the pod through its steps.
    const SETTLE_BOUND: Duration = Duration::from_secs(10);
    let probe = host::free_port();
    let health = format!("--health-probe-bind-address=127.0.0.1:{probe}");
    cx.start_operator(&[&health]);
    cx.chrome_config().await;
    let names: Vec<String> = (0..100).map(|i| format!("r{i:03}")).collect();
    // A third of the sessions end on their own (the sidecar exits), through the outage too.
    for (i, name) in names.iter().enumerate() {
        if i % 3 == 0 {
            cx.kubelet().set(
                name,
                Script::ExitAfterRunning {
                    container: "seleniferous".into(),
                    exit_code: 0,
                    after: Duration::from_millis(500 + 50 * i as u64),
                },
            );
        }
    }
    let create = |n: String| {
        let cx = cx.clone();
        async move { cx.create_browser(&n, json!({})).await }
    };
    futures::stream::iter(names.iter().cloned().map(create))
        .buffer_unordered(50)
        .collect::<Vec<()>>()
        .await;
    let (every, limit) = (Duration::from_millis(100), Duration::from_secs(120));
    cx.until_within(limit, every, "20 pods", |s| s.pods.len() >= 20)
        .await;
    cx.kill_operator();
    cx.start_operator(&[&health]);
    // Readiness as a kubelet would probe it, every 100 ms.
    let probing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let prober = {
        let probing = probing.clone();
        tokio::task::spawn_blocking(move || {
            let mut samples = Vec::new();
            while probing.load(std::sync::atomic::Ordering::Relaxed) {
                let code = host::http_get(probe, "/readyz").map(|(code, _)| code);
                samples.push((Instant::now(), code));
                std::thread::sleep(Duration::from_millis(100));
            }
            samples
        })
    };
    cx.until_within(limit, every, "the restarted operator ready", |_| {
        host::http_get(probe, "/readyz").is_some_and(|(code, _)| code == 200)
    })
    .await;
    let away = Instant::now();
    cx.be.outage().await.expect("API server back");
    let back = Instant::now();
    let late: Vec<String> = (0..10).map(|i| format!("late{i}")).collect();
    futures::stream::iter(late.iter().cloned().map(create))
        .buffer_unordered(10)
        .collect::<Vec<()>>()
        .await;
    let all: Vec<String> = names.iter().chain(&late).cloned().collect();
    let has_status = |s: &Snapshot, n: &str| {
        s.browser(n)
            .is_none_or(|b| b["status"]["phase"].is_string())
    };
    let snap = cx
        .until_within(STATUS_BOUND, every, "a status on every Browser", |s| {
            all.iter().all(|n| has_status(s, n))
        })
        .await;
    let statused = back.elapsed();
    // Settled: Running with its IP, or failed with a reason (and then gone, or going).
    let settled = |s: &Snapshot, n: &str| {
        s.browser(n).is_none_or(|b| {
            let status = &b["status"];
            (status["phase"] == "Running" && status["podIP"].is_string())
                || (status["phase"] == "Failed" && status["reason"].is_string())
        })
    };
    cx.until_within(SETTLE_BOUND, every, "every Browser settled", |s| {
        all.iter().all(|n| settled(s, n))
    })
    .await;
    println!(
        "    API server away {:.1}s; statuses {:.1}s and settled {:.1}s after it was back; {} of {} Browsers then",
        (back - away).as_secs_f64(),
        statused.as_secs_f64(),
        back.elapsed().as_secs_f64(),
        snap.browsers.len(),
        all.len()
    );
    probing.store(false, std::sync::atomic::Ordering::Relaxed);
    let samples = prober.await.expect("readiness prober");
    let while_away: Vec<Option<u16>> = samples
        .iter()
        .filter(|(t, _)| *t > away + Duration::from_secs(1) && *t < back)
        .map(|(_, code)| *code)
        .collect();
    assert!(
        while_away.contains(&Some(503)),
        "/readyz while the API server was away: {while_away:?}"
    );
    let ready_again = samples
        .iter()
        .find(|(t, code)| *t >= back && *code == Some(200))
        .map(|(t, _)| *t - back);
    assert!(
        ready_again.is_some_and(|after| after <= STATUS_BOUND),
        "/readyz ready again {ready_again:?} after the API server was back"
    );
    let remaining: Vec<String> = cx
        .snapshot()
        .await
        .browsers
        .iter()
        .filter_map(|b| b["metadata"]["name"].as_str().map(String::from))
        .collect();
    for name in &remaining {
        // The operator may delete a failed one first.
        match cx.browsers().delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("browser {name} deleted: {e}"),
        }
    }
    cx.until_within(limit, every, "all gone", |s| {
        s.browsers.is_empty() && s.pods.is_empty()
    })
    .await;
    for name in &all {
        assert!(
            cx.pod_uids(name).len() <= 1,
            "{name}: pods {:?}",
            cx.pod_uids(name)
        );
    }
    if let Some(creates) = cx.be.pod_creates(&cx.ns) {
        let twice: Vec<_> = creates.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "pods created more than once: {twice:?}");
        assert!(
            !creates.is_empty(),
            "the API server recorded the pod creates"
        );
    }
}

/// Older CRD sets this operator's CRDs must replace with objects in place: every released
/// set of ours (`testdata/crd-history/`, both layouts), and the selenosis Helm chart's (the Go
/// controller's, split layout) when the upstream examples are beside the repository.
fn older_crd_sets() -> Vec<(String, Layout, Vec<Value>)> {
    let mut sets: Vec<(String, Layout, Vec<Value>)> = crd_history::released_sets()
        .into_iter()
        .map(|set| {
            let label = match set.layout {
                Layout::Default => format!("ours {}", set.release),
                Layout::SplitGroups => format!("ours {} split-groups", set.release),
            };
            (label, set.layout, set.crds)
        })
        .collect();
    if let Some(crds) =
        upstream::helm_chart_crds("the Helm chart CRDs are not part of the upgrade scenario")
    {
        sets.push(("the Helm chart's".to_string(), Layout::SplitGroups, crds));
    }
    sets
}

/// Applies `crds` (server-side, as the harness applies `crds/`) and waits until served.
async fn apply_crds(cx: &Ctx, label: &str, crds: &[Value]) {
    controlplane::apply_crds(&cx.be.client, crds)
        .await
        .unwrap_or_else(|e| panic!("{label} CRDs apply: {e}"));
}

/// `crds/` applied over each older set of CRDs keeps the objects stored under it, and the
/// operator then runs their sessions. Runs before any other scenario: it installs the CRDs.
async fn crds_applied_over_older_sets_keep_objects_and_sessions(cx: Arc<Ctx>) {
    for (label, layout, crds) in older_crd_sets() {
        apply_crds(&cx, &label, &crds).await;
        let config = config_resource(layout);
        let browser = browser_resource(layout);
        let name = format!("up-{}", sets_slug(&label));
        cx.create(
            &config,
            json!({"metadata": {"name": name}, "spec": cx.chrome_spec()}),
        )
        .await;
        let created = cx
            .create(
                &browser,
                json!({"metadata": {"name": name},
                    "spec": {"browserName": "chrome", "browserVersion": "139.0"}}),
            )
            .await;

        install_crds(&cx.be.client)
            .await
            .unwrap_or_else(|e| panic!("crds/ over {label}: {e}"));
        let kept = cx
            .api(&browser)
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("{label}: Browser after the upgrade: {e}"));
        assert_eq!(kept.metadata.uid, created.metadata.uid, "{label}");
        assert_eq!(kept.data["spec"], created.data["spec"], "{label}");

        let mut flags = vec![format!("--browser-api-group={}", layout.browser_group())];
        flags.push(format!(
            "--browserconfig-api-group={}",
            layout.browserconfig_group()
        ));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        cx.start_operator(&flags);
        poll(WAIT, Duration::from_millis(100), || async {
            let b = cx
                .api(&browser)
                .get(&name)
                .await
                .map_err(|e| e.to_string())?;
            if b.data["status"]["phase"] == "Running" && b.data["status"]["podIP"].is_string() {
                Ok(())
            } else {
                Err(format!(
                    "{label}: Browser {name} not Running: {:?}",
                    b.data.get("status")
                ))
            }
        })
        .await;
        cx.api(&browser)
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("{label}: delete: {e}"));
        poll(WAIT, Duration::from_millis(100), || async {
            let browsers = Ctx::list(&cx.api(&browser)).await;
            let pods = Ctx::list(&cx.pods()).await;
            if browsers.is_empty() && pods.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{label}: left: {:?} {:?}",
                    names(&browsers),
                    names(&pods)
                ))
            }
        })
        .await;
        cx.kill_operator();
        cx.api(&config)
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("{label}: delete config: {e}"));
    }
}

fn sets_slug(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect::<String>()
        .split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// A native sidecar (`restartPolicy` on an init container) is in the Pod schema from 1.28.
/// A cluster without it gets the pod without the field and a Warning naming it; a cluster
/// with it keeps it and hears nothing.
async fn pod_fields_the_cluster_lacks_are_removed_with_a_warning(cx: Arc<Ctx>) {
    const FIELD: &str = "spec.initContainers[seleniferous].restartPolicy";
    let info = cx.be.client.apiserver_version().await.expect("/version");
    let minor: u32 = info
        .minor
        .trim_end_matches('+')
        .parse()
        .unwrap_or_else(|_| panic!("minor version {:?}", info.minor));
    let lacks = info.major == "1" && minor < 28;
    cx.start_operator(&[]);
    cx.create_config(
        "sidecar",
        json!({
            "template": {
                "initContainers": [{"name": "seleniferous", "image": cx.be.image,
                    "restartPolicy": "Always", "ports": [{"containerPort": 4445}]}],
                "ports": [{"containerPort": 4444}],
            },
            "browsers": {"chrome": {"139.0": {"image": cx.be.image}}}
        }),
    )
    .await;
    cx.create_browser("s1", json!({})).await;
    let snap = cx.until_running("s1").await;
    let pod = snap.pod("s1").expect("pod").clone();
    let sidecar = &pod["spec"]["initContainers"][0];
    let events = cx.api(&resource("events.k8s.io", "Event", "events"));
    let notes: Vec<String> = Ctx::list(&events)
        .await
        .iter()
        .filter(|e| e["regarding"]["name"] == "s1" && e["reason"] == "PodFieldsRemoved")
        .filter_map(|e| e["note"].as_str().map(String::from))
        .collect();
    if lacks {
        assert!(sidecar.get("restartPolicy").is_none(), "{pod:#}");
        assert!(
            notes.iter().any(|n| n.contains(FIELD)),
            "a Warning names {FIELD}: {notes:?}"
        );
        let condition = cx.until_config("sidecar", "PodFieldsRemoved", "True").await;
        assert!(
            condition["message"]
                .as_str()
                .is_some_and(|m| m.contains(FIELD)),
            "{condition}"
        );
    } else {
        assert!(notes.is_empty(), "nothing removed on 1.{minor}: {notes:?}");
        if cx.be.kind == Kind::Double {
            // A real server may still drop the field where its feature gate is off (1.28).
            assert_eq!(sidecar["restartPolicy"], "Always", "{pod:#}");
        }
    }
    cx.delete_browser("s1").await;
    cx.until_gone("s1").await;
}

/// The header cells of a kubectl table.
fn header(out: &str) -> Vec<String> {
    out.lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(String::from)
        .collect()
}

async fn kubectl_get_shows_printer_columns_and_describe_shows_events(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("k1", json!({})).await;
    let snap = cx.until_running("k1").await;
    let ip = snap.browser("k1").unwrap()["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    let resource = format!("browsers.{}", keys::DEFAULT_GROUP);
    let Some(get) = cx.kubectl(&["get", &resource]).await else {
        println!("    kubectl not installed: kubectl checks skipped");
        cx.delete_browser("k1").await;
        cx.until_gone("k1").await;
        return;
    };
    assert_eq!(
        header(&get),
        [
            "NAME",
            "BROWSER",
            "VERSION",
            "PHASE",
            "PODIP",
            "STARTTIME",
            "AGE"
        ],
        "{get}"
    );
    let row: Vec<&str> = get
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        row[..5],
        ["k1", "chrome", "139.0", "Running", ip.as_str()],
        "{get}"
    );
    let wide = cx.kubectl(&["get", &resource, "-o", "wide"]).await.unwrap();
    assert_eq!(
        header(&wide),
        [
            "NAME",
            "BROWSER",
            "VERSION",
            "PHASE",
            "PODIP",
            "REASON",
            "STARTTIME",
            "AGE"
        ],
        "{wide}"
    );
    // No reason yet: the cell is empty (null in the Table).
    let row: Vec<&str> = wide
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        row[..5],
        ["k1", "chrome", "139.0", "Running", ip.as_str()],
        "{wide}"
    );
    assert_eq!(row.len(), 7, "{wide}");

    // BrowserConfigs: whether valid and in use, how many entries, whether pre-pulled (this
    // config does not ask: an empty cell); the spec hash with -o wide.
    cx.until_config("chrome", "Ready", "True").await;
    let configs = format!("browserconfigs.{}", keys::DEFAULT_GROUP);
    let get = cx.kubectl(&["get", &configs]).await.unwrap();
    assert_eq!(
        header(&get),
        ["NAME", "VALID", "READY", "ENTRIES", "PREPULLED", "AGE"],
        "{get}"
    );
    let row: Vec<&str> = get
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(row[..4], ["chrome", "True", "True", "1"], "{get}");
    assert_eq!(row.len(), 5, "no PrePulled value, then the age: {get}");
    let wide = cx.kubectl(&["get", &configs, "-o", "wide"]).await.unwrap();
    assert_eq!(
        header(&wide),
        [
            "NAME",
            "VALID",
            "READY",
            "ENTRIES",
            "PREPULLED",
            "SPECHASH",
            "AGE"
        ],
        "{wide}"
    );
    let row: Vec<&str> = wide
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let config = cx
        .api(&config_resource(cx.layout))
        .get("chrome")
        .await
        .unwrap();
    // The empty PrePulled cell takes no word.
    assert_eq!(
        Some(row[4]),
        config.data["status"]["version"].as_str(),
        "{wide}"
    );

    cx.until_events("k1", &["PodCreated", "Running"]).await;
    let describe = cx.kubectl(&["describe", &resource, "k1"]).await.unwrap();
    let events = describe
        .split_once("\nEvents:")
        .map(|(_, e)| e)
        .unwrap_or_else(|| panic!("no Events section:\n{describe}"));
    assert!(
        events.contains("Type") && events.contains("Reason") && events.contains("From"),
        "{describe}"
    );
    for reason in ["PodCreated", "Running"] {
        assert!(
            events.lines().any(|l| l.contains("Normal")
                && l.contains(reason)
                && l.contains("browser-controller")),
            "{reason} missing:\n{describe}"
        );
    }
    cx.delete_browser("k1").await;
    cx.until_gone("k1").await;
}

/// The namespace-scoped RBAC of `rbac/namespaced/` and `rbac/leader-election.yaml` as a user
/// installs it, made this scenario's own: the watched namespace `selenosis` is `ns`, the
/// operator's namespace `browser-controller` is `operator_ns`, cluster-scoped objects get
/// names of their own.
fn namespaced_rbac(ns: &str, operator_ns: &str) -> Vec<Value> {
    let mut docs = Vec::new();
    let dir = repo("rbac/namespaced");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.push(repo("rbac/leader-election.yaml"));
    files.sort();
    for file in files {
        docs.extend(browser_controller::manifest::read_file(&file).unwrap());
    }
    let own_namespace = |v: &mut Value| {
        let renamed = match v.as_str() {
            Some("selenosis") => ns,
            Some("browser-controller") => operator_ns,
            _ => return,
        };
        *v = json!(renamed);
    };
    for doc in &mut docs {
        own_namespace(&mut doc["metadata"]["namespace"]);
        // Not `doc["subjects"]`: indexing a Role mutably would give it `subjects: null`, which
        // a real API server's server-side apply refuses.
        if let Some(subjects) = doc.get_mut("subjects").and_then(Value::as_array_mut) {
            for subject in subjects {
                own_namespace(&mut subject["namespace"]);
            }
        }
        if doc["kind"] == "ClusterRole" || doc["kind"] == "ClusterRoleBinding" {
            let name = format!("{}-{ns}", doc["metadata"]["name"].as_str().unwrap());
            doc["metadata"]["name"] = json!(name);
        }
        if doc["roleRef"]["kind"] == "ClusterRole" {
            let name = format!("{}-{ns}", doc["roleRef"]["name"].as_str().unwrap());
            doc["roleRef"]["name"] = json!(name);
        }
        // Nothing else may name the shipped namespaces: the copy would grant the wrong ones.
        let text = doc.to_string();
        for shipped in ["selenosis", "browser-controller"] {
            assert!(
                !text.contains(&format!("\"namespace\":\"{shipped}\"")),
                "{text}"
            );
        }
    }
    docs
}

/// Namespace-scoped mode with only the rights of `rbac/namespaced/` and
/// `rbac/leader-election.yaml`: the operator runs as its ServiceAccount (impersonated) from its
/// own namespace, watches this one, elects a leader, and a session and a failure pass.
async fn namespace_scoped_with_only_the_namespaced_rbac(cx: Arc<Ctx>) {
    let operator_ns = format!("{}-op", cx.ns);
    let namespaces: Api<DynamicObject> = Api::all_with(
        cx.be.client.clone(),
        &resource("", "Namespace", "namespaces"),
    );
    let namespace: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": operator_ns}}),
    )
    .unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("namespace {operator_ns}: {e}"));
    for doc in namespaced_rbac(&cx.ns, &operator_ns) {
        controlplane::apply_object(&cx.be.client, &doc)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let user = format!("system:serviceaccount:{operator_ns}:browser-controller");
    let kubeconfig = cx.be.dir.join(&format!("{}.kubeconfig", cx.ns));
    cx.be.write_kubeconfig_as(&kubeconfig, &user).unwrap();
    cx.start_operator_with(
        &kubeconfig,
        &[
            "--enable-leader-election",
            &format!("--leader-election-namespace={operator_ns}"),
        ],
    );

    cx.chrome_config().await;
    cx.until_config("chrome", "Valid", "True").await;
    cx.kubelet().set(
        "s1",
        Script::ExitAfterRunning {
            container: "seleniferous".into(),
            exit_code: 0,
            after: Duration::from_millis(1500),
        },
    );
    cx.create_browser("s1", json!({})).await;
    let snap = cx.until_running("s1").await;
    assert!(snap.browser("s1").unwrap()["status"]["podIP"].is_string());
    let failure = cx.failure_of("s1").await;
    assert_eq!(failure["reason"], "ContainerTerminated", "{failure}");
    cx.until_gone("s1").await;
    cx.until_events("s1", &["PodCreated", "Running", "ContainerTerminated"])
        .await;

    let browser = json!({
        "metadata": {"name": "nocfg"},
        "spec": {"browserName": "chrome", "browserVersion": "1.0"},
    });
    cx.create(&browser_resource(cx.layout), browser).await;
    let message = cx.fails_without_a_pod("nocfg", "ConfigNotFound").await;
    assert!(message.contains(&cx.ns), "{message}");

    // The Lease is held in the operator's namespace, where the Role grants it.
    let leases: Api<DynamicObject> = Api::namespaced_with(
        cx.be.client.clone(),
        &operator_ns,
        &resource("coordination.k8s.io", "Lease", "leases"),
    );
    let lease = leases.get("controller.selenosis.io").await.unwrap();
    assert!(
        lease.data["spec"]["holderIdentity"]
            .as_str()
            .is_some_and(|h| !h.is_empty()),
        "{:?}",
        lease.data
    );
    // Nothing the operator asked for was refused.
    let log = std::fs::read_to_string(&cx.log).unwrap_or_default();
    assert!(!log.contains("forbidden"), "{log}");
}

// ---- image pre-pull ------------------------------------------------------------------------

/// `rbac/prepull/namespaced.yaml` as a user installs it for the watched namespace `ns`.
fn prepull_rbac(ns: &str) -> Vec<Value> {
    let mut docs =
        browser_controller::manifest::read_file(&repo("rbac/prepull/namespaced.yaml")).unwrap();
    for doc in &mut docs {
        assert_eq!(doc["metadata"]["namespace"], "selenosis", "{doc}");
        doc["metadata"]["namespace"] = json!(ns);
    }
    docs
}

fn daemon_set_resource() -> ApiResource {
    resource("apps", "DaemonSet", "daemonsets")
}

impl Ctx {
    /// Waits until the namespace's DaemonSets satisfy `check`; returns them by name.
    async fn until_daemon_sets(
        &self,
        what: &str,
        check: impl Fn(&BTreeMap<String, Value>) -> bool,
    ) -> BTreeMap<String, Value> {
        let api = self.api(&daemon_set_resource());
        poll(WAIT, Duration::from_millis(50), || async {
            let all: BTreeMap<String, Value> = Self::list(&api)
                .await
                .into_iter()
                .map(|d| (d["metadata"]["name"].as_str().unwrap_or("").to_string(), d))
                .collect();
            if check(&all) {
                Ok(all)
            } else {
                Err(format!("{what}; DaemonSets: {all:#?}"))
            }
        })
        .await
    }

    /// Writes the status a DaemonSet controller would: `ready` of `desired` nodes run the
    /// current spec and are ready.
    async fn daemon_set_status(&self, ds: &Value, desired: i64, ready: i64) {
        let name = ds["metadata"]["name"].as_str().unwrap();
        let status = json!({"status": {
            "observedGeneration": ds["metadata"]["generation"],
            "desiredNumberScheduled": desired,
            "currentNumberScheduled": desired,
            "updatedNumberScheduled": desired,
            "numberMisscheduled": 0,
            "numberReady": ready,
            "numberAvailable": ready,
        }});
        self.api(&daemon_set_resource())
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap_or_else(|e| panic!("status of DaemonSet {name}: {e}"));
    }

    /// Waits until the BrowserConfig `name` satisfies `check`; returns it.
    async fn until_config_value(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let api = self.api(&config_resource(self.layout));
        poll(WAIT, Duration::from_millis(50), || async {
            let config = match api.get(name).await {
                Ok(c) => serde_json::to_value(c).unwrap(),
                Err(e) => return Err(format!("BrowserConfig {name}: {e}")),
            };
            if check(&config) {
                Ok(config)
            } else {
                Err(format!("BrowserConfig {name}: {what}: {config:#}"))
            }
        })
        .await
    }

    async fn patch_config(&self, name: &str, patch: Value) {
        self.api(&config_resource(self.layout))
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("BrowserConfig {name} patched: {e}"));
    }
}

/// The images a pre-pull DaemonSet pulls, and its helper's copy command.
fn pulled(ds: &Value) -> Vec<&str> {
    ds["spec"]["template"]["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"].as_str().is_some_and(|n| n.starts_with("pull-")))
        .map(|c| c["image"].as_str().unwrap())
        .collect()
}

fn condition<'a>(config: &'a Value, kind: &str) -> Option<&'a Value> {
    config["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// With --enable-prepull: a config asking for pre-pull gets a DaemonSet per scheduling with
/// its images, owned by it; the status follows the DaemonSet status (written here as the
/// DaemonSet controller would: neither backend runs one); a change updates and drops
/// DaemonSets; opting out removes them; a deleted config leaves none.
async fn prepull_daemon_sets_follow_the_config_and_report_progress(cx: Arc<Ctx>) {
    if cx.be.kind == Kind::ControlPlane {
        // The operator runs as its ServiceAccount with rbac/: the file adds what the flag needs.
        for doc in prepull_rbac(&cx.ns) {
            controlplane::apply_object(&cx.be.client, &doc)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    cx.start_operator(&[
        "--enable-prepull",
        "--prepull-helper-image=mirror.example/busybox:1.36.1-musl",
    ]);
    let sidecar = "alcounit/seleniferous:v2.0.8";
    cx.create_config(
        "chrome",
        json!({
            "template": {
                "prePull": true,
                "sidecars": [{"name": "seleniferous", "image": sidecar}],
                "nodeSelector": {"pool": "browsers"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "browsers", "effect": "NoSchedule"}],
                "imagePullSecrets": [{"name": "registry"}],
            },
            "browsers": {"chrome": {
                "139.0": {"image": "selenium/standalone-chrome:139.0"},
                "140.0": {"image": "selenium/standalone-chrome:140.0", "nodeSelector": {"pool": "gpu"}},
                "120.0": {"image": "selenium/standalone-chrome:120.0", "prePull": false},
            }},
        }),
    )
    .await;
    let config = cx
        .api(&config_resource(cx.layout))
        .get("chrome")
        .await
        .unwrap();
    let uid = config.metadata.uid.clone().unwrap();

    // One DaemonSet per scheduling, owned by the config, pulling each entry's images.
    let all = cx
        .until_daemon_sets("two DaemonSets", |d| d.len() == 2)
        .await;
    let by_pool = |pool: &str| -> Value {
        all.values()
            .find(|d| d["spec"]["template"]["spec"]["nodeSelector"]["pool"] == pool)
            .unwrap_or_else(|| panic!("no DaemonSet for pool {pool}: {all:#?}"))
            .clone()
    };
    let (browsers, gpu) = (by_pool("browsers"), by_pool("gpu"));
    assert_eq!(
        pulled(&browsers),
        ["selenium/standalone-chrome:139.0", sidecar]
    );
    assert_eq!(pulled(&gpu), ["selenium/standalone-chrome:140.0", sidecar]);
    for ds in [&browsers, &gpu] {
        let owner = &ds["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "BrowserConfig", "{ds:#}");
        assert_eq!(owner["uid"], uid.as_str(), "{ds:#}");
        let spec = &ds["spec"]["template"]["spec"];
        assert_eq!(spec["tolerations"][0]["key"], "dedicated", "{ds:#}");
        assert_eq!(spec["imagePullSecrets"], json!([{"name": "registry"}]));
        assert_eq!(spec["automountServiceAccountToken"], false);
        let init = spec["initContainers"].as_array().unwrap();
        assert_eq!(init[0]["image"], "mirror.example/busybox:1.36.1-musl");
        assert!(
            init[1..]
                .iter()
                .all(|c| c["command"] == json!(["/.prepull/busybox", "true"])),
            "{ds:#}"
        );
    }
    let name_of = |ds: &Value| ds["metadata"]["name"].as_str().unwrap().to_string();
    let (browsers_name, gpu_name) = (name_of(&browsers), name_of(&gpu));

    // Nothing ran the DaemonSets yet.
    let pulling = cx.until_config("chrome", "PrePulled", "False").await;
    assert_eq!(pulling["reason"], "Pulling", "{pulling}");
    cx.until_events("chrome", &["PrePullCreated"]).await;

    // The DaemonSet controller's figures reach the config's status.
    cx.daemon_set_status(&browsers, 3, 3).await;
    cx.daemon_set_status(&gpu, 2, 1).await;
    let config = cx
        .until_config_value("chrome", "4 of 5 nodes ready", |c| {
            c["status"]["prePull"]["nodesReady"] == 4 && c["status"]["prePull"]["nodesDesired"] == 5
        })
        .await;
    let rows = config["status"]["prePull"]["daemonSets"]
        .as_array()
        .unwrap();
    assert!(
        rows.contains(&json!({"name": gpu_name, "images": 2, "nodesReady": 1, "nodesDesired": 2})),
        "{config:#}"
    );
    assert_eq!(config["status"]["prePull"]["images"], 3);
    assert_eq!(condition(&config, "PrePulled").unwrap()["status"], "False");
    cx.daemon_set_status(&gpu, 2, 2).await;
    let pulled_all = cx.until_config("chrome", "PrePulled", "True").await;
    assert_eq!(pulled_all["reason"], "Pulled", "{pulled_all}");
    let configs = format!("browserconfigs.{}", keys::DEFAULT_GROUP);
    if let Some(get) = cx.kubectl(&["get", &configs, "chrome"]).await {
        assert_eq!(
            header(&get),
            ["NAME", "VALID", "READY", "ENTRIES", "PREPULLED", "AGE"],
            "{get}"
        );
        let row: Vec<&str> = get
            .lines()
            .nth(1)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(row[..5], ["chrome", "True", "True", "3", "True"], "{get}");
    }

    // A new version joins its scheduling's DaemonSet; a removed one takes its DaemonSet along.
    cx.patch_config(
        "chrome",
        json!({"spec": {"browsers": {"chrome": {
            "140.0": null,
            "141.0": {"image": "selenium/standalone-chrome:141.0"},
        }}}}),
    )
    .await;
    let all = cx
        .until_daemon_sets("the gpu DaemonSet gone, 141.0 pulled", |d| {
            d.len() == 1
                && d.get(&browsers_name)
                    .is_some_and(|ds| pulled(ds).contains(&"selenium/standalone-chrome:141.0"))
        })
        .await;
    let updated = &all[&browsers_name];
    assert_eq!(
        pulled(updated),
        [
            "selenium/standalone-chrome:139.0",
            sidecar,
            "selenium/standalone-chrome:141.0"
        ]
    );
    assert!(!all.contains_key(&gpu_name));
    cx.until_events("chrome", &["PrePullDeleted", "PrePullUpdated"])
        .await;
    // The DaemonSet controller has not seen the new spec: not pulled yet.
    let config = cx
        .until_config_value("chrome", "one DaemonSet waiting", |c| {
            c["status"]["prePull"]["daemonSets"]
                .as_array()
                .is_some_and(|d| d.len() == 1)
                && condition(c, "PrePulled").is_some_and(|p| p["status"] == "False")
        })
        .await;
    assert!(
        condition(&config, "PrePulled").unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("waiting for the DaemonSet controller"),
        "{config:#}"
    );

    // Opting out removes the DaemonSet and the status part.
    cx.patch_config("chrome", json!({"spec": {"template": {"prePull": false}}}))
        .await;
    cx.until_daemon_sets("no DaemonSet", BTreeMap::is_empty)
        .await;
    cx.until_config_value("chrome", "no pre-pull status", |c| {
        c["status"].get("prePull").is_none() && condition(c, "PrePulled").is_none()
    })
    .await;

    // Opted in again, then the config deleted: the operator deletes its DaemonSet itself.
    cx.patch_config("chrome", json!({"spec": {"template": {"prePull": true}}}))
        .await;
    cx.until_daemon_sets("the DaemonSet back", |d| d.len() == 1)
        .await;
    cx.api(&config_resource(cx.layout))
        .delete("chrome", &DeleteParams::default())
        .await
        .unwrap();
    cx.until_daemon_sets("nothing left", BTreeMap::is_empty)
        .await;
    let log = std::fs::read_to_string(&cx.log).unwrap_or_default();
    assert!(!log.contains("forbidden"), "{log}");
}

// ---- the runner ----------------------------------------------------------------------------

struct Args {
    filters: Vec<String>,
    list: bool,
}

/// libtest-like arguments: free words filter by name; `--list` lists; other flags (as cargo
/// passes them) are ignored.
fn parse_args() -> Args {
    let mut args = Args {
        filters: Vec::new(),
        list: false,
    };
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--list" => args.list = true,
            a if a.starts_with('-') => {}
            a => args.filters.push(a.to_string()),
        }
    }
    args
}

#[derive(Default)]
struct Tally {
    passed: usize,
    failed: Vec<String>,
    skipped: usize,
}

/// Runs one scenario in its own namespace; `Err` holds what to print.
async fn run_one(be: Arc<Backend>, scenario: &Scenario, index: usize) -> Result<(), String> {
    let cx = Ctx::new(be.clone(), scenario, index).await;
    let mut task = tokio::spawn((scenario.run)(cx.clone()));
    let outcome = match tokio::time::timeout(SCENARIO_LIMIT, &mut task).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(panic_message(e)),
        Err(_) => {
            task.abort();
            let _ = task.await;
            Err(format!("did not finish within {SCENARIO_LIMIT:?}"))
        }
    };
    // What every scenario leaves behind: nothing, without a garbage collector.
    let outcome = match outcome {
        Ok(()) => {
            let snap = cx.snapshot().await;
            if snap.browsers.is_empty() && snap.pods.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "left behind: browsers {:?}, pods {:?}",
                    names(&snap.browsers),
                    names(&snap.pods)
                ))
            }
        }
        failed => failed,
    };
    cx.kill_operator();
    if be.kind == Kind::Cluster {
        // Only a real cluster has the controller that empties and removes namespaces.
        let namespaces: Api<DynamicObject> =
            Api::all_with(be.client.clone(), &resource("", "Namespace", "namespaces"));
        let _ = namespaces.delete(&cx.ns, &DeleteParams::default()).await;
    }
    outcome.map_err(|e| {
        format!(
            "{e}\n--- operator log (last 60 lines) ---\n{}\n{}",
            tail(&cx.log, 60),
            be.logs()
        )
    })
}

fn names(objects: &[Value]) -> Vec<&str> {
    objects
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect()
}

fn panic_message(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panicked".to_string()),
        Err(e) => e.to_string(),
    }
}

async fn run_backend(be: Backend, selected: &[&Scenario], tally: &mut Tally) {
    let be = Arc::new(be);
    let jobs = std::env::var("E2E_JOBS")
        .ok()
        .and_then(|j| j.parse().ok())
        .filter(|&j: &usize| j > 0)
        .unwrap_or(4);
    let started = Instant::now();
    let (before, selected): (Vec<&Scenario>, Vec<&Scenario>) =
        selected.iter().copied().partition(|s| s.before_crds);
    let (alone, selected): (Vec<&Scenario>, Vec<&Scenario>) =
        selected.into_iter().partition(|s| s.alone);
    // An existing cluster got `crds/` when the backend started; nothing else is installed there.
    let mut crds_installed = be.kind == Kind::Cluster;
    for (i, s) in before.iter().enumerate() {
        let label = format!("{}/{}", be.kind.name(), s.name);
        if s.simulated && !be.simulated() {
            println!("test {label} ... skipped (needs the kubelet simulator)");
            tally.skipped += 1;
            continue;
        }
        let t = Instant::now();
        match run_one(be.clone(), s, 90 + i).await {
            Ok(()) => {
                println!("test {label} ... ok ({:.1}s)", t.elapsed().as_secs_f64());
                tally.passed += 1;
                crds_installed = true;
            }
            Err(e) => {
                println!("test {label} ... FAILED\n{e}");
                tally.failed.push(label);
            }
        }
    }
    if !crds_installed && let Err(e) = install_crds(&be.client).await {
        println!("{}: cannot install crds/: {e}", be.kind.name());
        tally.failed.push(format!("{}: crds", be.kind.name()));
        return;
    }
    let runs = selected.iter().enumerate().map(|(i, s)| {
        let be = be.clone();
        async move {
            let label = format!("{}/{}", be.kind.name(), s.name);
            if s.simulated && !be.simulated() {
                println!("test {label} ... skipped (needs the kubelet simulator)");
                return (label, None);
            }
            let t = Instant::now();
            let result = run_one(be, s, i).await;
            let secs = t.elapsed().as_secs_f64();
            match &result {
                Ok(()) => println!("test {label} ... ok ({secs:.1}s)"),
                Err(e) => println!("test {label} ... FAILED ({secs:.1}s)\n{e}"),
            }
            (label, Some(result))
        }
    });
    let results: Vec<(String, Option<Result<(), String>>)> = futures::stream::iter(runs)
        .buffer_unordered(jobs)
        .collect()
        .await;
    for (label, result) in results {
        match result {
            None => tally.skipped += 1,
            Some(Ok(())) => tally.passed += 1,
            Some(Err(_)) => tally.failed.push(label),
        }
    }
    for (i, s) in alone.iter().enumerate() {
        let label = format!("{}/{}", be.kind.name(), s.name);
        if s.simulated && !be.simulated() {
            println!("test {label} ... skipped (needs the kubelet simulator)");
            tally.skipped += 1;
            continue;
        }
        let t = Instant::now();
        match run_one(be.clone(), s, 80 + i).await {
            Ok(()) => {
                println!("test {label} ... ok ({:.1}s)", t.elapsed().as_secs_f64());
                tally.passed += 1;
            }
            Err(e) => {
                println!("test {label} ... FAILED\n{e}");
                tally.failed.push(label);
            }
        }
    }
    println!(
        "{}: {} scenarios in {:.1}s",
        be.kind.name(),
        selected.len() + alone.len(),
        started.elapsed().as_secs_f64()
    );
    match Arc::try_unwrap(be) {
        Ok(be) => be.stop(),
        Err(_) => println!("warning: backend still shared at teardown"),
    }
}

fn main() -> ExitCode {
    let args = parse_args();
    let all = scenarios();
    let selected: Vec<&Scenario> = all
        .iter()
        .filter(|s| args.filters.is_empty() || args.filters.iter().any(|f| s.name.contains(f)))
        .collect();
    if args.list {
        for s in &selected {
            println!("{}: test", s.name);
        }
        return ExitCode::SUCCESS;
    }
    host::remove_stale_dirs();
    // Worker threads live until the runtime is dropped at the end of main: children spawned
    // on them (PR_SET_PDEATHSIG) die with them, not before.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let started = Instant::now();
    let mut tally = Tally::default();
    println!("\nrunning {} end-to-end scenarios", selected.len());
    runtime.block_on(async {
        if selected.is_empty() {
            return;
        }
        run_backend(Backend::double().await, &selected, &mut tally).await;
        if let Some(kubeconfig) = std::env::var_os("E2E_KUBECONFIG").filter(|k| !k.is_empty()) {
            println!("real control plane: skipped (E2E_KUBECONFIG set: existing cluster)");
            match Backend::cluster(Path::new(&kubeconfig)).await {
                Ok(be) => run_backend(be, &selected, &mut tally).await,
                Err(e) => {
                    println!("cluster: cannot start: {e}");
                    tally.failed.push("cluster".into());
                }
            }
            return;
        }
        match Assets::from_env() {
            Ok(None) => println!("real control plane: skipped (KUBEBUILDER_ASSETS not set)"),
            Ok(Some(assets)) => match Backend::control_plane(&assets).await {
                Ok(be) => run_backend(be, &selected, &mut tally).await,
                Err(e) => {
                    println!("control-plane: cannot start: {e}");
                    tally.failed.push("control-plane".into());
                }
            },
            Err(e) => {
                println!("control-plane: {e}");
                tally.failed.push("control-plane".into());
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(5));
    let ok = tally.failed.is_empty();
    if !ok {
        println!("\nfailures:");
        for f in &tally.failed {
            println!("    {f}");
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; {} skipped; finished in {:.2}s\n",
        if ok { "ok" } else { "FAILED" },
        tally.passed,
        tally.failed.len(),
        tally.skipped,
        started.elapsed().as_secs_f64()
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
