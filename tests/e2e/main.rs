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
//!
//! This file is the test language (backends, one scenario's `Ctx`, waits) and the runner, with
//! the list of scenarios in [`scenarios`]: its order and its `before_crds`/`alone`/`own_double`
//! marks are what the runner schedules by. The scenarios live in modules by subject: `lifecycle`
//! (sessions and every cleanup row), `queue` (Browsers waiting for quota), `restarts`
//! (SIGKILL, API server outages), `config`
//! (configs and the Pod schema), `upgrades` (older CRD sets, both layouts), `rbac` (scope),
//! `metrics` (the operator's `/metrics`), `compat` (the Go controller's leftovers, other
//! clients' objects, both layouts), `switch` (a live switch from the Go controller and back,
//! with the real stack), `faults` (what only a double sets up or sees; most of
//! them `own_double`), `prepull`, `kubectl`, and `install` (the operator's image on the real
//! node, from `deploy/` and the chart). They see the private items of this file, as child modules do.

mod check;
mod compat;
mod config;
mod faults;
mod hostile;
mod install;
mod kubectl;
mod lifecycle;
mod metrics;
mod node;
mod parity;
mod partition;
mod prepull;
mod queue;
mod rbac;
mod restarts;
mod stack;
mod switch;
use testkit as support;
mod upgrades;

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
use serde_json::{Value, json};

use browser_controller::api::crd::Layout;
use browser_controller::api::keys;
use support::apiserver::{ApiServer, Fault, RequestRecord, ServeHandle};
use support::controlplane::{self, Assets, ControlPlane};
use support::history::{Seen, record};
use support::host::{self, TempDir, die_with_parent, kill, tail};
use support::images;
use support::kinds::{browser_resource, config_resource, pod_resource};
use support::kubelet::{Kubelet, KubeletConfig, KubeletHandle, Script};
use support::node::{self as real_node, Node, NodeAssets};
use support::stack::{Stack, StackAssets, StackSet};

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
    /// A control plane with a real node (kubelet, containerd) instead of the simulator.
    Node,
    Cluster,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Double => "double",
            Kind::ControlPlane => "control-plane",
            Kind::Node => "node",
            Kind::Cluster => "cluster",
        }
    }
}

/// One API server the scenarios share, and what the operator and kubectl need to reach it.
struct Backend {
    kind: Kind,
    /// The server's `gitVersion`, as `/version` reports it.
    version: String,
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
    node: Option<Node>,
    /// The Selenosis stack's sets of binaries, on a real node where `E2E_STACK_ASSETS` and
    /// `E2E_STACK_SPLIT_ASSETS` name them.
    stacks: Vec<StackAssets>,
    /// The real node has the Firefox image (`E2E_GECKODRIVER`).
    firefox: bool,
    image: String,
    /// The operator's own image, imported on the real node ([`images::operator`]), where a
    /// static build of it was found.
    operator_image: Option<&'static str>,
}

impl Backend {
    /// Pods are run by the kubelet simulator (scripted pod states).
    fn simulated(&self) -> bool {
        matches!(self.kind, Kind::Double | Kind::ControlPlane)
    }

    /// How results name this backend: its kind, with the server version for real servers.
    fn name(&self) -> String {
        match self.kind {
            Kind::Double => self.kind.name().to_string(),
            _ => format!("{}-{}", self.kind.name(), self.version),
        }
    }

    /// The server's minor version: `/version`'s `minor` (`"28+"` counts as 28), else read
    /// from `gitVersion` (some builds leave `minor` empty).
    async fn minor(&self) -> Option<u32> {
        let info = self.client.apiserver_version().await.ok()?;
        let digits = |text: &str| -> Option<u32> {
            let text: String = text.chars().take_while(char::is_ascii_digit).collect();
            text.parse().ok()
        };
        digits(&info.minor).or_else(|| {
            let version = info.git_version.trim_start_matches('v');
            digits(version.split('.').nth(1)?)
        })
    }

    /// The `gitVersion` of the server `client` talks to.
    async fn version_of(client: &kube::Client) -> String {
        client
            .apiserver_version()
            .await
            .map(|info| info.git_version)
            .unwrap_or_else(|e| format!("unknown ({e})"))
    }

    /// The API of a cluster-scoped kind, or of a kind across all namespaces.
    fn api_all(&self, ar: &ApiResource) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), ar)
    }

    /// A request whose answer is kept as text (an object the client could not decode, say);
    /// `Err` with the answer for any status but 2xx.
    async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<String, String> {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(body.unwrap_or_default().into_bytes())
            .map_err(|e| e.to_string())?;
        self.client
            .request_text(request)
            .await
            .map_err(|e| e.to_string())
    }

    async fn double() -> Self {
        let server = ApiServer::new();
        // Like a real API server: the Pod schema is served, and an apply carrying a field
        // it lacks is refused.
        server.serve_openapi(true, true);
        server.check_pod_fields(400);
        Self::double_with(server).await
    }

    /// A backend of the double `server`, as prepared (its Pod schema, say).
    async fn double_with(server: ApiServer) -> Self {
        let served = server.serve().await.expect("double serves");
        let dir = TempDir::new("e2e-double");
        let kubeconfig = dir.join("kubeconfig");
        served.write_kubeconfig(&kubeconfig).unwrap();
        let client = server.client();
        // As on a real server, the operator acts as the ServiceAccount of rbac/, with exactly
        // its rules (`rbac_in_step` checks afterwards that it needed every one of them).
        controlplane::apply_dir(&client, &repo("rbac"))
            .await
            .expect("rbac/ applies to the double");
        let operator_kubeconfig = dir.join("operator.kubeconfig");
        served
            .write_kubeconfig_as(&operator_kubeconfig, Some(&operator_user()))
            .unwrap();
        Self {
            kind: Kind::Double,
            version: Self::version_of(&client).await,
            client,
            admin_kubeconfig: kubeconfig,
            operator_kubeconfig,
            dir,
            double: Some((server, served)),
            plane: None,
            node: None,
            stacks: Vec::new(),
            firefox: false,
            image: "selenium/standalone-chrome:139.0".to_string(),
            operator_image: None,
        }
    }

    /// The stack's set a scenario of `layout` runs with, where given.
    fn stack(&self, layout: Layout) -> Option<&StackAssets> {
        self.stacks.iter().find(|a| a.set == stack_set(layout))
    }

    /// A control plane from `assets` with a real node from `node` running the pods, and the
    /// seleniferous image of each set of `stacks` imported there.
    async fn node(
        assets: &Assets,
        node: &NodeAssets,
        stacks: Vec<StackAssets>,
    ) -> Result<Self, String> {
        let images = images::build(&images::cache_dir()).map_err(|e| e.to_string())?;
        let mut be = Self::control_plane_with(
            assets,
            controlplane::Options {
                audit: true,
                pod_address: real_node::host_ip().parse().ok(),
            },
        )
        .await?;
        let plane = be.plane.as_ref().ok_or("no control plane")?;
        let started = Node::start(node, plane, &images)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(firefox) = images::firefox(&images::cache_dir()).map_err(|e| e.to_string())? {
            started.import(&firefox).map_err(|e| e.to_string())?;
            be.firefox = true;
        }
        for stack in &stacks {
            let image = support::stack::seleniferous_image(stack, &images::cache_dir())
                .map_err(|e| e.to_string())?;
            started.import(&image).map_err(|e| e.to_string())?;
        }
        match images::operator_binary() {
            Some(binary) => {
                let tarball = be.dir.join("operator-image.tar");
                images::operator(&binary, &tarball).map_err(|e| e.to_string())?;
                started.import(&tarball).map_err(|e| e.to_string())?;
                println!(
                    "node: operator image {} from {}",
                    images::OPERATOR,
                    binary.display()
                );
                be.operator_image = Some(images::OPERATOR);
            }
            None => println!(
                "node: no operator image (no static build: run `.ci/build-static amd64` or set E2E_OPERATOR_BINARY)"
            ),
        }
        be.node = Some(started);
        be.stacks = stacks;
        be.kind = Kind::Node;
        be.image = images::BUSYBOX.to_string();
        Ok(be)
    }

    async fn control_plane(assets: &Assets) -> Result<Self, String> {
        Self::control_plane_with(
            assets,
            controlplane::Options {
                audit: true,
                pod_address: None,
            },
        )
        .await
    }

    async fn control_plane_with(
        assets: &Assets,
        options: controlplane::Options,
    ) -> Result<Self, String> {
        let plane = ControlPlane::start_with(assets, options)
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
            version: Self::version_of(&client).await,
            client,
            admin_kubeconfig: plane.admin_kubeconfig(),
            operator_kubeconfig,
            dir,
            double: None,
            plane: Some(plane),
            node: None,
            stacks: Vec::new(),
            firefox: false,
            image: "selenium/standalone-chrome:139.0".to_string(),
            operator_image: None,
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
            version: Self::version_of(&client).await,
            client,
            admin_kubeconfig: kubeconfig.to_path_buf(),
            operator_kubeconfig: kubeconfig.to_path_buf(),
            dir: TempDir::new("e2e-cluster"),
            double: None,
            plane: None,
            node: None,
            stacks: Vec::new(),
            firefox: false,
            image: std::env::var("E2E_IMAGE").unwrap_or_else(|_| DEFAULT_CLUSTER_IMAGE.into()),
            operator_image: None,
        })
    }

    /// How many times each pod of `ns` was created, as the API server recorded it; `None`
    /// where the backend cannot tell (an existing cluster).
    fn pod_creates(&self, ns: &str) -> Option<BTreeMap<String, usize>> {
        self.pod_creates_answered(ns, 201)
    }

    /// [`Backend::pod_creates`] answered with `code` (403: refused).
    fn pod_creates_answered(&self, ns: &str, code: u16) -> Option<BTreeMap<String, usize>> {
        if let Some((server, _)) = &self.double {
            return Some(server.pod_creates_answered(ns, code));
        }
        self.plane
            .as_ref()
            .map(|p| p.pod_creates_answered(ns, code))
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
        let plane = self.plane.as_ref().map(|p| p.logs(60)).unwrap_or_default();
        let node = self.node.as_ref().map(|n| n.logs(30)).unwrap_or_default();
        format!("{plane}\n{node}")
    }

    async fn stop(self) {
        // The node's pods go while the API server still answers.
        if let Some(node) = self.node {
            node.stop().await;
        }
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
    /// The Go browser-controller's binary, run in the operator's place (a parity run of a
    /// stack scenario).
    go: Option<PathBuf>,
    kubelet: Option<KubeletHandle>,
    operator: Mutex<Option<Child>>,
    /// Where the operator serves `/metrics`, once a scenario asked for it.
    metrics_port: Mutex<Option<u16>>,
    log: PathBuf,
    /// Every Browser and pod a watch saw, in order, with its kind (items of a pod list
    /// carry none), when it saw it, and whether it saw it deleted.
    seen: Arc<Mutex<Vec<Seen>>>,
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
    async fn new(
        be: Arc<Backend>,
        scenario: &Scenario,
        index: usize,
        go: Option<PathBuf>,
    ) -> Arc<Self> {
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
        let ns = match scenario.namespace {
            Some(ns) => ns.to_string(),
            None => ns.trim_end_matches('-').to_string(),
        };
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
        if be.kind == Kind::Node {
            // The ServiceAccount admission refuses pods until the controller manager made the
            // namespace's default ServiceAccount, as on any cluster.
            let accounts: Api<DynamicObject> = Api::namespaced_with(
                be.client.clone(),
                &ns,
                &resource("", "ServiceAccount", "serviceaccounts"),
            );
            poll(WAIT, Duration::from_millis(100), || async {
                match accounts.get_opt("default").await {
                    Ok(Some(_)) => Ok(()),
                    other => Err(format!("ServiceAccount {ns}/default: {other:?}")),
                }
            })
            .await;
        }
        let kubelet = be.simulated().then(|| {
            Kubelet::start_with(
                be.client.clone(),
                &format!("node-{ns}"),
                Script::Run,
                KubeletConfig {
                    namespace: Some(ns.clone()),
                    every_pod: go.is_some(),
                    ..KubeletConfig::default()
                },
            )
        });
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorders = [
            ("Browser", browser_resource(scenario.layout)),
            ("Pod", pod_resource()),
            ("Event", resource("events.k8s.io", "Event", "events")),
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
            go,
            kubelet,
            operator: Mutex::new(None),
            metrics_port: Mutex::new(None),
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

    /// Whether the Go browser-controller runs in the operator's place.
    fn is_go(&self) -> bool {
        self.go.is_some()
    }

    /// The operator under test of a parity scenario: this one with `flags`, or the Go
    /// browser-controller with the admin's identity (its own RBAC lacks pods) and its fixed
    /// timeouts. The Go controller watches every namespace: its runs are alone.
    fn start_operator_under_test(&self, flags: &[&str]) {
        let child = self.spawn_operator_under_test(
            &self.be.operator_kubeconfig,
            &Process::default(),
            flags,
        );
        let previous = self.operator.lock().unwrap().replace(child);
        assert!(previous.is_none(), "one operator per scenario at a time");
    }

    /// [`Ctx::start_operator_under_test`] as `process` says; `kubeconfig` is this operator's
    /// (the Go controller always has the admin's); the caller owns the child.
    fn spawn_operator_under_test(
        &self,
        kubeconfig: &Path,
        process: &Process,
        flags: &[&str],
    ) -> Child {
        match &self.go {
            Some(go) => self.spawn_go_controller(go, process),
            None => self.spawn_operator(kubeconfig, process, flags),
        }
    }

    /// The Go browser-controller `go` as `process` says, with the admin's identity (its own
    /// RBAC lacks pods) and its fixed timeouts, logging into the scenario's log; the caller
    /// owns it. It watches every namespace.
    fn spawn_go_controller(&self, go: &Path, process: &Process) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut command = Command::new(go);
        command
            .args(["--metrics-addr=0", "--health-probe-bind-address=0"])
            .env("KUBECONFIG", &self.be.admin_kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log));
        if let Some(uid) = process.uid {
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(uid);
        }
        die_with_parent(&mut command)
            .spawn()
            .expect("the Go browser-controller starts")
    }

    /// browser-service of the scenario's set of the Selenosis stack (by its layout), with the
    /// admin's identity.
    fn stack(&self) -> Stack {
        let assets = self
            .be
            .stack(self.layout)
            .cloned()
            .expect("a stack scenario runs where its set is given");
        Stack::start(
            assets,
            &self.be.admin_kubeconfig,
            self.be.dir.path(),
            &self.ns,
        )
        .unwrap_or_else(|e| panic!("browser-service starts: {e}"))
    }

    /// [`Ctx::start_operator`] with another kubeconfig (another identity).
    fn start_operator_with(&self, kubeconfig: &Path, flags: &[&str]) {
        let child = self.spawn_operator(kubeconfig, &Process::default(), flags);
        let previous = self.operator.lock().unwrap().replace(child);
        assert!(previous.is_none(), "one operator per scenario at a time");
    }

    /// An operator process on this namespace, as `process` says, logging into the scenario's
    /// log; the caller owns it.
    fn spawn_operator(&self, kubeconfig: &Path, process: &Process, flags: &[&str]) -> Child {
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
        if let Some(uid) = process.uid {
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(uid);
        }
        command.envs(process.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        die_with_parent(&mut command)
            .spawn()
            .expect("operator starts")
    }

    /// [`Ctx::start_operator`] with its `/metrics` endpoint on a free loopback port, which
    /// [`Ctx::metrics`] scrapes; returns the port.
    fn start_scraped_operator(&self, flags: &[&str]) -> u16 {
        let port = host::free_port();
        let addr = format!("--metrics-addr=127.0.0.1:{port}");
        let mut flags = flags.to_vec();
        flags.push(&addr);
        self.start_operator(&flags);
        *self.metrics_port.lock().unwrap() = Some(port);
        port
    }

    /// The operator's exposition, as `GET /metrics` answers it (empty while it does not
    /// answer).
    async fn metrics(&self) -> String {
        let port = self
            .metrics_port
            .lock()
            .unwrap()
            .expect("the operator was started by start_scraped_operator");
        tokio::task::spawn_blocking(move || host::http_get(port, "/metrics"))
            .await
            .ok()
            .flatten()
            .filter(|(code, _)| *code == 200)
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// Waits until the operator's exposition shows `series` at `value`.
    async fn until_metric(&self, series: &str, value: f64) {
        self.until_metrics(&format!("{series} = {value}"), |text| {
            sample(text, series) == Some(value)
        })
        .await;
    }

    /// Waits until `check` holds on the operator's exposition; returns it.
    async fn until_metrics(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        poll(WAIT, Duration::from_millis(100), || async {
            let text = self.metrics().await;
            if check(&text) {
                Ok(text)
            } else {
                Err(format!("{what}; metrics:\n{text}"))
            }
        })
        .await
    }

    /// SIGTERM, as a rollout stops a pod: waits for the operator to end, and for it to end
    /// cleanly.
    async fn stop_operator(&self) {
        let Some(mut child) = self.operator.lock().unwrap().take() else {
            return;
        };
        // SAFETY: a plain signal to our own child, which is not reaped yet.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let status = tokio::task::spawn_blocking(move || {
            let status = host::wait_exit(&mut child, WAIT);
            kill(&mut child);
            status
        })
        .await
        .unwrap();
        assert!(
            status.is_some_and(|s| s.success()),
            "the operator ends cleanly on SIGTERM within {WAIT:?}: {status:?}"
        );
    }

    /// The requests of this namespace in the double's request log, in order; `None` on a
    /// real API server, which keeps no such log (a scenario checks this there otherwise, or
    /// says it skips the check).
    fn requests(&self) -> Option<Vec<RequestRecord>> {
        let (server, _) = self.be.double.as_ref()?;
        Some(
            server
                .requests()
                .into_iter()
                .filter(|r| r.namespace.as_deref() == Some(self.ns.as_str()))
                .collect(),
        )
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

    /// Waits until a list shows neither the Browser `name` nor its pod.
    async fn until_listed_gone(&self, name: &str) {
        self.until(&format!("{name} and its pod to be gone"), |s| {
            s.browser(name).is_none() && s.pod(name).is_none()
        })
        .await;
    }

    /// Waits until the Browser `name` and its pod are gone, as a list shows it and as the
    /// recorded watches saw it (a list may be ahead of the watch: what a scenario reads of the
    /// history next is then complete).
    async fn until_gone(&self, name: &str) {
        self.until_listed_gone(name).await;
        poll(WAIT, Duration::from_millis(20), || async {
            for kind in ["Browser", "Pod"] {
                if self.history(kind, name).last().is_some_and(|s| !s.deleted) {
                    return Err(format!(
                        "the recorded watch to see the {kind} {name} deleted"
                    ));
                }
            }
            Ok(())
        })
        .await;
    }

    /// The Browser `name` as the recorded watch first showed it Running (a state a session may
    /// leave again quickly: the history holds it, where a poll could miss it).
    async fn seen_running(&self, name: &str) -> Value {
        poll(WAIT, Duration::from_millis(20), || async {
            self.seen("Browser", name)
                .into_iter()
                .find(|b| b["status"]["phase"] == "Running")
                .ok_or_else(|| format!("{name} Running; seen: {:#?}", self.seen_statuses(name)))
        })
        .await
    }

    /// The Browser `name` as the recorded watch first showed it Running, and its pod as the
    /// pod watch first showed it with an IP.
    async fn seen_running_with_pod(&self, name: &str) -> (Value, Value) {
        let browser = self.seen_running(name).await;
        let pod = poll(WAIT, Duration::from_millis(20), || async {
            self.seen("Pod", name)
                .into_iter()
                .find(|p| p["status"]["podIP"].is_string())
                .ok_or_else(|| format!("the pod of {name} with an IP"))
        })
        .await;
        (browser, pod)
    }

    /// Watch events of `kind` (`Browser`, `Pod`) named `name`, in order; deletions aside.
    fn seen(&self, kind: &str, name: &str) -> Vec<Value> {
        self.history(kind, name)
            .into_iter()
            .filter(|s| !s.deleted)
            .map(|s| s.object)
            .collect()
    }

    /// When the Event watch first saw an Event with `reason` about the object `name`.
    fn seen_event(&self, name: &str, reason: &str) -> Option<Instant> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .find(|s| {
                s.kind == "Event"
                    && s.object["regarding"]["name"] == name
                    && s.object["reason"] == reason
            })
            .map(|s| s.at)
    }

    /// Watch events of `kind` named `name`, in order, deletions included, with their times.
    fn history(&self, kind: &str, name: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.kind == kind && s.object["metadata"]["name"] == name)
            .cloned()
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

    /// Waits until `api` has no object `name`.
    async fn until_object_gone(&self, api: &Api<DynamicObject>, name: &str) {
        poll(WAIT, Duration::from_millis(100), || async {
            match api.get_opt(name).await {
                Ok(None) => Ok(()),
                Ok(Some(o)) => Err(format!(
                    "{name} still there, finalizers {:?}",
                    o.metadata.finalizers
                )),
                Err(e) => Err(format!("{name}: {e}")),
            }
        })
        .await
    }

    async fn chrome_config(&self) {
        self.create_config("chrome", self.chrome_spec()).await;
    }

    /// The object `name` of `api` once `check` holds for it.
    async fn until_object(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        poll(WAIT, Duration::from_millis(50), || async {
            let object = api
                .get_opt(name)
                .await
                .map_err(|e| format!("{what}: {name}: {e}"))?
                .map(|o| serde_json::to_value(o).unwrap());
            match object {
                Some(o) if check(&o) => Ok(o),
                other => Err(format!("{what}: {other:#?}")),
            }
        })
        .await
    }

    /// The BrowserConfig `name` once `check` holds for it.
    async fn until_config_is(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let api = self.api(&config_resource(self.layout));
        self.until_object(&api, name, what, check).await
    }

    /// Waits until the BrowserConfig `name` reports condition `kind` as `status`; returns
    /// the condition.
    async fn until_config(&self, name: &str, kind: &str, status: &str) -> Value {
        let has = |c: &Value| c["type"] == kind && c["status"] == status;
        let config = self
            .until_config_is(name, &format!("{name}: {kind}={status}"), |c| {
                c["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(has))
            })
            .await;
        let conditions = config["status"]["conditions"].as_array().unwrap();
        conditions.iter().find(|c| has(c)).unwrap().clone()
    }

    async fn create_browser(&self, name: &str, annotations: Value) {
        self.create_browser_of(name, Some("hub"), annotations).await;
    }

    /// Creates the Browser `name` of `owner` (its `selenosis.io/owner` label, as the hub sets
    /// it with Basic auth on; none for `None`).
    async fn create_browser_of(&self, name: &str, owner: Option<&str>, annotations: Value) {
        let labels = match owner {
            Some(owner) => json!({"selenosis.io/owner": owner}),
            None => json!({}),
        };
        let browser = json!({
            "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "spec": {"browserName": "chrome", "browserVersion": "139.0"},
        });
        self.create(&browser_resource(self.layout), browser).await;
    }

    /// Creates the Browsers `<prefix>000` … (`count` of them), 50 at a time; a third end their
    /// sessions on their own (the sidecar exits 0.5 s to 5.5 s after Running). Returns their
    /// names.
    async fn burst(self: &Arc<Self>, prefix: &str, count: usize) -> Vec<String> {
        let names: Vec<String> = (0..count).map(|i| format!("{prefix}{i:03}")).collect();
        for (i, name) in names.iter().enumerate() {
            if i % 3 == 0 {
                self.kubelet().set(
                    name,
                    Script::ExitAfterRunning {
                        container: "seleniferous".into(),
                        exit_code: 0,
                        after: Duration::from_millis(500 + 50 * i as u64),
                    },
                );
            }
        }
        self.create_browsers(&names).await;
        names
    }

    /// Creates the Browsers `names`, 50 at a time.
    async fn create_browsers(self: &Arc<Self>, names: &[String]) {
        let create = |n: String| {
            let cx = self.clone();
            async move { cx.create_browser(&n, json!({})).await }
        };
        futures::stream::iter(names.iter().cloned().map(create))
            .buffer_unordered(50)
            .collect::<Vec<()>>()
            .await;
    }

    /// Deletes every Browser of the scenario (the operator may have deleted a failed one
    /// already) and waits until neither Browser nor pod is left.
    async fn delete_everything(&self) {
        let remaining: Vec<String> = self
            .snapshot()
            .await
            .browsers
            .iter()
            .filter_map(|b| b["metadata"]["name"].as_str().map(String::from))
            .collect();
        for name in &remaining {
            match self.browsers().delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => panic!("browser {name} deleted: {e}"),
            }
        }
        self.until_within(
            Duration::from_secs(120),
            Duration::from_millis(200),
            "nothing left",
            |s| s.browsers.is_empty() && s.pods.is_empty(),
        )
        .await;
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
        self.quota_of_pods(0).await;
    }

    /// A ResourceQuota `e2e` of `pods` pods in this namespace, with its status written as the
    /// quota controller would (none runs here): [`Ctx::recount_quota`] keeps it current.
    async fn quota_of_pods(&self, pods: u32) {
        let quotas = self.api(&resource("", "ResourceQuota", "resourcequotas"));
        let quota = json!({
            "apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "e2e", "namespace": self.ns},
            "spec": {"hard": {"pods": pods.to_string()}},
        });
        quotas
            .patch(
                "e2e",
                &PatchParams::apply(controlplane::MANAGER),
                &Patch::Apply(&quota),
            )
            .await
            .expect("quota created");
        self.recount_quota().await;
        // The quota admission reads quotas from an informer: give it the status first (a
        // quota without one refuses with "status unknown", which is `Forbidden`).
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    /// Writes the `e2e` quota's use as the quota controller does after a pod went: the pods of
    /// the namespace that are neither terminating nor ended.
    async fn recount_quota(&self) {
        let quotas = self.api(&resource("", "ResourceQuota", "resourcequotas"));
        let quota = quotas.get("e2e").await.expect("the quota");
        let hard = quota.data["spec"]["hard"]["pods"].clone();
        let used = Self::list(&self.pods())
            .await
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
            .count();
        let status =
            json!({"status": {"hard": {"pods": hard}, "used": {"pods": used.to_string()}}});
        quotas
            .patch_status("e2e", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("quota status written");
    }

    /// Pod creates of this namespace the API server refused (403), by its own records; `None`
    /// where the backend keeps none (an existing cluster).
    fn refused_pod_creates(&self) -> Option<usize> {
        self.be
            .pod_creates_answered(&self.ns, 403)
            .map(|refused| refused.values().sum())
    }

    /// Runs `browser-controller check` with the admin's kubeconfig (a cluster admin may
    /// impersonate the operator's ServiceAccount): whether it passed, and its report.
    async fn check(&self, args: &[&str]) -> (bool, String) {
        let (passed, report, _) = self.check_with(&self.be.admin_kubeconfig, args).await;
        (passed, report)
    }

    /// [`Ctx::check`] with another kubeconfig; also returns what it logged.
    async fn check_with(&self, kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
        let mut command = Command::new(BIN);
        command
            .arg("check")
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("RUST_LOG")
            .env_remove("WATCH_NAMESPACE")
            .stdin(Stdio::null());
        let shown = args.join(" ");
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("browser-controller check {shown}: {e}"));
        let report = String::from_utf8_lossy(&output.stdout).into_owned();
        println!(
            "    check {shown}:\n{}",
            report
                .lines()
                .map(|l| format!("      {l}\n"))
                .collect::<String>()
        );
        let log = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.success(), report, log)
    }

    /// Runs kubectl with the admin's kubeconfig, expecting success: its stdout; `None` when
    /// kubectl is not installed.
    async fn kubectl(&self, args: &[&str]) -> Option<String> {
        let namespace = format!("--namespace={}", self.ns);
        let mut scoped = vec![namespace.as_str(), "--request-timeout=30s"];
        scoped.extend_from_slice(args);
        let out = self.kubectl_output(&scoped).await?;
        assert!(
            out.status.success(),
            "kubectl {}: {}\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs kubectl with the admin's kubeconfig and `args` alone; `None` when kubectl is not
    /// installed.
    async fn kubectl_output(&self, args: &[&str]) -> Option<std::process::Output> {
        let mut command = Command::new("kubectl");
        command
            .arg(format!(
                "--kubeconfig={}",
                self.be.admin_kubeconfig.display()
            ))
            .args(args)
            .stdin(Stdio::null());
        let shown = args.join(" ");
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap();
        match output {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => panic!("kubectl {shown}: {e}"),
            Ok(out) => Some(out),
        }
    }
}

/// The value of the sample named exactly `series` (name and labels) in an exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(name, _)| *name == series)
        .and_then(|(_, v)| v.parse().ok())
}

/// Every sample of the family `name` (its lines that carry labels).
fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let prefix = format!("{name}{{");
    text.lines().filter(|l| l.starts_with(&prefix)).collect()
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

/// Answers of `/readyz` (no answer: `None`) and when they came.
type Samples = Vec<(Instant, Option<u16>)>;

/// `/readyz` on `port` as a kubelet probes it, every 100 ms, until the returned flag is
/// cleared, and once more then.
fn probe_readiness(
    port: u16,
) -> (
    Arc<std::sync::atomic::AtomicBool>,
    tokio::task::JoinHandle<Samples>,
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let probing = Arc::new(AtomicBool::new(true));
    let task = {
        let probing = probing.clone();
        tokio::task::spawn_blocking(move || {
            let sample = || {
                (
                    Instant::now(),
                    host::http_get(port, "/readyz").map(|(code, _)| code),
                )
            };
            let mut samples = Vec::new();
            while probing.load(Ordering::Relaxed) {
                samples.push(sample());
                std::thread::sleep(Duration::from_millis(100));
            }
            // A scenario stops the prober once it saw the operator ready itself, which can fall
            // between two samples: one last sample records the state it stopped on.
            samples.push(sample());
            samples
        })
    };
    (probing, task)
}

/// How an operator process runs besides its flags.
#[derive(Debug, Default)]
struct Process {
    /// Another user and group id (its packets can then be told apart).
    uid: Option<u32>,
    env: Vec<(String, String)>,
}

/// The cells of the first row under the header of kubectl's table output.
fn first_row(out: &str) -> Vec<&str> {
    out.lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect()
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

// ---- scenarios -----------------------------------------------------------------------------

type Run = fn(Arc<Ctx>) -> Pin<Box<dyn Future<Output = ()> + Send>>;

struct Scenario {
    name: &'static str,
    /// Needs the kubelet simulator (scripted pod states) or installs cluster-wide objects:
    /// skipped on an existing cluster.
    simulated: bool,
    layout: Layout,
    /// Runs alone, before the current CRDs are installed (CRDs are cluster-wide: no other
    /// scenario may run meanwhile); the runner applies `crds/` after these scenarios.
    before_crds: bool,
    /// Runs alone, after the others: it takes the API server away.
    alone: bool,
    /// Needs a real node: runs there only, and only such scenarios run there.
    node: bool,
    /// Needs the Selenosis stack beside the real node: the single-group set
    /// (`E2E_STACK_ASSETS`), or the split-group set (`E2E_STACK_SPLIT_ASSETS`) for a scenario
    /// of that layout.
    stack: bool,
    /// Installs the operator as its users do, as pods of its own image on the real node.
    installed: bool,
    /// A namespace of its own name instead of one made from the scenario's (one a manifest of
    /// the repository names); once per backend, as namespaces are never deleted there.
    namespace: Option<&'static str>,
    /// Runs again on a real API server with the Go browser-controller in the operator's place
    /// where `E2E_GO_CONTROLLER` is set (a parity report); alone, as the Go controller watches
    /// every namespace.
    parity: bool,
    /// Runs the Go browser-controller itself (`E2E_GO_CONTROLLER`) beside this operator.
    go: bool,
    /// Needs browser-ui in its set of the stack.
    ui: bool,
    /// Needs the Firefox image (`E2E_GECKODRIVER`).
    firefox: bool,
    /// Changes what the whole API server does (faults, watches, availability, its Pod
    /// schema) or counts its every request: runs on a double of its own, made by this
    /// function, beside the double's other scenarios, and on no other backend.
    own_double: Option<fn() -> ApiServer>,
    run: Run,
}

/// A scenario named after its function (the name filters select), without its module.
macro_rules! scenario {
    ($m:ident :: $f:ident, $simulated:expr) => {
        scenario!($m::$f, $simulated, Layout::Default)
    };
    ($m:ident :: $f:ident, $simulated:expr, $layout:expr) => {
        Scenario {
            name: stringify!($f),
            simulated: $simulated,
            layout: $layout,
            before_crds: false,
            alone: false,
            node: false,
            stack: false,
            installed: false,
            namespace: None,
            parity: false,
            go: false,
            ui: false,
            firefox: false,
            own_double: None,
            run: |cx| Box::pin($m::$f(cx)),
        }
    };
}

/// A stack scenario again with the split-group set (the selenosis Helm chart 2.x's layout),
/// named `split_<name>`.
macro_rules! split_stack_scenario {
    ($m:ident :: $f:ident) => {
        Scenario {
            name: concat!("split_", stringify!($f)),
            ..stack_scenario(scenario!($m::$f, false, Layout::SplitGroups))
        }
    };
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            before_crds: true,
            ..scenario!(upgrades::crds_applied_over_older_sets_keep_objects_and_sessions, true)
        },
        Scenario {
            before_crds: true,
            ..scenario!(compat::a_go_era_session_survives_replacing_the_helm_chart_crds_with_ours,
                true,
                Layout::SplitGroups
            )
        },
        scenario!(config::pod_fields_the_cluster_lacks_are_removed_with_a_warning,
            true
        ),
        scenario!(lifecycle::two_hundred_browsers_at_once_all_run_then_all_clean_up,
            false
        ),
        scenario!(lifecycle::normal_session_pending_then_running_with_ip_then_cleaned_up,
            true
        ),
        scenario!(lifecycle::config_not_found_fails_without_a_pod, false),
        scenario!(lifecycle::invalid_options_fail_without_a_pod, false),
        scenario!(lifecycle::pod_create_over_quota_fails_with_quota_exceeded, false),
        scenario!(queue::a_full_quota_queues_browsers_and_admits_them_in_creation_order,
            true
        ),
        Scenario {
            alone: true,
            ..scenario!(queue::owners_take_turns_for_a_full_quota_each_in_creation_order, true)
        },
        scenario!(lifecycle::pod_create_invalid_fails_with_invalid_pod_spec, false),
        scenario!(lifecycle::pending_too_long_is_force_deleted_with_pod_creation_timeout,
            true
        ),
        scenario!(lifecycle::unschedulable_pod_times_out_naming_the_scheduler_message,
            true
        ),
        scenario!(lifecycle::failing_containers_and_failed_pods_end_with_their_reasons,
            true
        ),
        scenario!(lifecycle::succeeded_pod_makes_a_succeeded_browser, true),
        scenario!(lifecycle::external_delete_removes_the_pod_then_the_finalizer, false),
        scenario!(lifecycle::a_pod_left_without_its_browser_is_deleted, false),
        scenario!(lifecycle::pod_stuck_terminating_is_forced_after_the_deletion_timeout,
            true
        ),
        scenario!(lifecycle::pod_deleted_under_a_live_browser_fails_it_with_pod_deleted,
            true
        ),
        scenario!(lifecycle::lost_pod_is_never_recreated, true),
        scenario!(lifecycle::foreign_pod_of_the_same_name_is_a_conflict_and_untouched,
            false
        ),
        scenario!(lifecycle::browser_older_than_max_lifetime_is_ended, false),
        scenario!(compat::a_running_go_era_session_is_adopted_and_cleaned_up_without_recreating_its_pod,
            true
        ),
        scenario!(compat::adoption_works_in_the_split_layout_with_an_owner_reference_of_the_other_group,
            true,
            Layout::SplitGroups
        ),
        scenario!(compat::a_go_era_browser_already_failed_is_completed, true),
        scenario!(compat::a_deleted_browser_config_the_go_controller_held_goes_and_its_name_is_free,
            true
        ),
        scenario!(compat::a_go_era_browser_being_deleted_is_completed_once_its_pod_is_gone,
            true
        ),
        scenario!(compat::with_both_layouts_installed_the_default_is_selenosis_io_and_flags_pin_the_split_groups,
            true
        ),
        scenario!(compat::objects_from_other_clients_reconcile_or_fail_clearly_without_blocking_the_queue,
            false
        ),
        scenario!(faults::an_entry_above_the_pod_security_ceiling_is_invalid_and_its_browsers_fail, false),
        scenario!(faults::the_privileged_level_lets_the_same_entry_run, true),
        scenario!(faults::deleting_a_config_does_not_disturb_sessions_that_have_their_pod, false),
        scenario!(faults::a_valid_config_reports_valid_and_ready_with_its_generation, false),
        scenario!(faults::a_younger_config_defining_the_same_entry_reports_a_conflict_naming_the_winner, false),
        scenario!(faults::without_the_prepull_flag_a_config_that_asks_hears_so_and_nothing_is_pulled, false),
        scenario!(faults::a_config_deleted_while_the_operator_was_away_loses_its_daemon_sets_on_its_return, true),
        Scenario {
            own_double: Some(faults::plain),
            ..scenario!(faults::a_normal_session_costs_at_most_8_writes, true)
        },
        Scenario {
            own_double: Some(faults::plain),
            ..scenario!(faults::transient_create_errors_are_retried, false)
        },
        Scenario {
            own_double: Some(faults::plain),
            ..scenario!(faults::a_pod_create_refused_for_an_unknown_reason_fails_the_browser_after_three_tries, false)
        },
        Scenario {
            own_double: Some(faults::plain),
            ..scenario!(faults::a_metadata_write_refused_for_good_fails_the_browser_naming_the_answer, false)
        },
        Scenario {
            own_double: Some(faults::plain),
            ..scenario!(faults::a_browser_whose_status_is_always_refused_is_deleted_not_retried_forever, false)
        },
        Scenario {
            own_double: Some(faults::plain),
            ..scenario!(faults::dropped_watches_are_resumed_and_sessions_still_run, false)
        },
        Scenario {
            own_double: Some(faults::plain),
            ..scenario!(faults::a_quota_refusing_the_dry_run_leaves_validity_unknown_with_one_event_and_backoff, false)
        },
        Scenario {
            own_double: Some(faults::plain),
            ..scenario!(faults::a_browser_gets_one_pod_while_its_cache_lags_through_its_failure, true)
        },
        Scenario {
            own_double: Some(faults::plain),
            ..scenario!(faults::nothing_more_is_written_for_a_browser_the_api_answered_404_for, false)
        },
        Scenario {
            own_double: Some(faults::plain),
            ..scenario!(faults::a_deletion_a_status_write_carried_is_still_followed, false)
        },
        Scenario {
            own_double: Some(faults::plain),
            ..scenario!(faults::after_an_api_outage_new_browsers_get_a_status_within_seconds, false)
        },
        Scenario {
            own_double: Some(faults::plain),
            ..scenario!(faults::a_daemon_set_the_cluster_refuses_is_reported_with_a_warning_and_not_retried_at_once, false)
        },
        Scenario {
            own_double: Some(faults::older_cluster),
            ..scenario!(faults::on_an_older_cluster_fields_it_lacks_are_removed_and_reported, false)
        },
        Scenario {
            own_double: Some(faults::current_cluster),
            ..scenario!(faults::on_a_current_cluster_nothing_is_removed_or_reported, false)
        },
        Scenario {
            own_double: Some(faults::older_cluster_without_v3),
            ..scenario!(faults::without_openapi_v3_the_v2_document_is_used, false)
        },
        Scenario {
            own_double: Some(faults::cluster_without_schema),
            ..scenario!(faults::without_any_schema_the_operator_runs_and_applies_pods_unpruned, false)
        },
        Scenario {
            own_double: Some(faults::plain),
            ..scenario!(faults::where_the_server_streams_lists_no_cache_lists_in_pages, false)
        },
        Scenario {
            own_double: Some(faults::cluster_without_streaming_lists),
            ..scenario!(faults::where_the_server_refuses_streamed_lists_each_cache_lists_in_pages_after_one_try, false)
        },
        Scenario {
            own_double: Some(faults::cluster_with_unservable_streaming_lists),
            ..scenario!(faults::where_streamed_lists_fail_before_their_end_each_cache_lists_in_pages_after_one_try, false)
        },
        Scenario {
            own_double: Some(faults::current_cluster_answering_422),
            ..scenario!(faults::a_rejection_after_the_schema_changed_refetches_it_and_the_browser_still_runs, false)
        },
        Scenario {
            own_double: Some(faults::current_cluster),
            ..scenario!(faults::a_dry_run_rejected_for_a_stale_schema_is_judged_again_with_the_new_one, false)
        },
        scenario!(metrics::metrics_of_a_scripted_lifecycle_show_in_every_family, true),
        scenario!(metrics::the_metrics_endpoint_serves_the_families_after_an_external_delete,
            false
        ),
        scenario!(hostile::a_browser_named_longer_than_a_label_value_runs_and_is_cleaned_up,
            false
        ),
        scenario!(hostile::a_create_refused_as_too_large_fails_after_three_tries_not_forever,
            false
        ),
        scenario!(hostile::a_browserconfig_too_deep_to_decode_is_skipped_and_others_keep_serving,
            false
        ),
        scenario!(hostile::restricted_namespace_runs_browsers_with_the_restricted_level,
            false
        ),
        scenario!(restarts::operator_sigkilled_mid_lifecycle_and_restarted, true),
        scenario!(config::config_rejected_by_the_pod_schema_fails_browsers_with_invalid_config,
            false
        ),
        scenario!(kubectl::kubectl_get_shows_printer_columns_and_describe_shows_events,
            false
        ),
        scenario!(upgrades::split_group_layout_runs_the_same, true, Layout::SplitGroups),
        scenario!(rbac::namespace_scoped_with_only_the_namespaced_rbac, true),
        scenario!(check::check_passes_on_a_complete_install_and_names_what_is_missing,
            true
        ),
        scenario!(prepull::prepull_daemon_sets_follow_the_config_and_report_progress,
            true
        ),
        Scenario {
            alone: true,
            ..scenario!(restarts::api_server_restart_and_operator_kill_during_a_burst_one_pod_each_and_quick_recovery,
                true
            )
        },
        Scenario {
            alone: true,
            ..scenario!(partition::partition_of_the_operator_during_a_burst_one_pod_each_and_recovery_within_seconds,
                true
            )
        },
        Scenario {
            alone: true,
            ..scenario!(partition::partition_of_the_leader_the_standby_takes_over_and_the_old_leader_writes_no_more,
                true
            )
        },
        Scenario {
            alone: true,
            ..scenario!(partition::a_session_that_ended_while_the_link_was_cut_stays_visible_after_the_heal,
                true
            )
        },
        parity_scenario(scenario!(
            parity::parity_operator_sigkill_during_a_burst_nothing_stuck_or_orphaned,
            true
        )),
        parity_scenario(scenario!(
            parity::parity_api_server_restart_during_a_burst_nothing_stuck_or_orphaned,
            true
        )),
        parity_scenario(scenario!(
            parity::parity_partition_during_a_burst_nothing_stuck_or_orphaned,
            true
        )),
        Scenario {
            node: true,
            ..scenario!(node::a_real_browser_session_through_the_pod_ip, false)
        },
        Scenario {
            node: true,
            ..scenario!(node::a_browser_container_over_its_memory_limit_is_oomkilled, false)
        },
        Scenario {
            node: true,
            ..scenario!(node::a_missing_image_fails_the_browser_with_the_pull_error, false)
        },
        Scenario {
            node: true,
            ..scenario!(node::the_sidecar_exit_ends_the_session, false)
        },
        Scenario {
            node: true,
            ..scenario!(node::a_deleted_browser_waits_for_its_pod_to_stop_gracefully, false)
        },
        Scenario {
            node: true,
            ..scenario!(node::prepull_daemon_set_pulls_onto_the_real_node, false)
        },
        stack_scenario(scenario!(stack::stack_webdriver_session_through_the_hub, false)),
        stack_scenario(scenario!(stack::stack_ten_sessions_at_once_one_pod_each, false)),
        installed_scenario(scenario!(
            install::deploy_installs_replicas_that_lead_hand_over_and_hold_back_a_drain,
            false
        )),
        Scenario {
            namespace: Some("selenosis"),
            ..installed_scenario(scenario!(
                install::the_namespaced_overlay_serves_its_namespace_with_its_role_alone,
                false
            ))
        },
        installed_scenario(scenario!(
            install::the_prepull_overlay_pulls_onto_the_node_and_serves,
            false
        )),
        installed_scenario(scenario!(
            install::the_helm_chart_installs_an_operator_that_serves_and_upgrades,
            false
        )),
        stack_scenario(scenario!(stack::stack_a_missing_image_reaches_the_client_fast, false)),
        stack_scenario(scenario!(stack::stack_an_abandoned_session_ends, false)),
        stack_scenario(scenario!(
            stack::stack_session_options_reach_the_sidecar_and_loader_variables_are_refused,
            false
        )),
        stack_scenario(scenario!(stack::stack_the_hub_gives_up_first_and_nothing_lingers, false)),
        Scenario {
            ui: true,
            ..stack_scenario(scenario!(stack::stack_browser_ui_lists_a_live_session, false))
        },
        stack_scenario(scenario!(stack::stack_a_session_survives_an_api_server_restart, false)),
        firefox_scenario(stack_scenario(scenario!(
            stack::stack_firefox_session_through_the_hub,
            false
        ))),
        firefox_scenario(stack_scenario(scenario!(
            stack::stack_ten_mixed_chrome_and_firefox_sessions_at_once,
            false
        ))),
        Scenario {
            go: true,
            parity: false,
            ..stack_scenario(scenario!(
                switch::stack_a_live_switch_from_the_go_controller_and_back,
                false
            ))
        },
        split_stack_scenario!(stack::stack_webdriver_session_through_the_hub),
        firefox_scenario(split_stack_scenario!(
            stack::stack_firefox_session_through_the_hub
        )),
        split_stack_scenario!(stack::stack_ten_sessions_at_once_one_pod_each),
        split_stack_scenario!(stack::stack_a_missing_image_reaches_the_client_fast),
        split_stack_scenario!(stack::stack_an_abandoned_session_ends),
        split_stack_scenario!(
            stack::stack_session_options_reach_the_sidecar_and_loader_variables_are_refused
        ),
        split_stack_scenario!(stack::stack_the_hub_gives_up_first_and_nothing_lingers),
        split_stack_scenario!(stack::stack_a_session_survives_an_api_server_restart),
    ]
}

/// A scenario that installs the operator's image on the real node: alone, as that operator
/// serves every namespace.
fn installed_scenario(scenario: Scenario) -> Scenario {
    Scenario {
        node: true,
        alone: true,
        installed: true,
        ..scenario
    }
}

/// A scenario of the Selenosis stack: on the real node, alone (Chromium pods are heavy for
/// two cores, the API server restart concerns every scenario), with a parity run.
fn stack_scenario(scenario: Scenario) -> Scenario {
    Scenario {
        node: true,
        stack: true,
        ..parity_scenario(scenario)
    }
}

/// A scenario with the Firefox image.
fn firefox_scenario(scenario: Scenario) -> Scenario {
    Scenario {
        firefox: true,
        ..scenario
    }
}

/// A scenario that runs alone and again with the Go browser-controller in the operator's
/// place.
fn parity_scenario(scenario: Scenario) -> Scenario {
    Scenario {
        alone: true,
        parity: true,
        ..scenario
    }
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
async fn run_one(
    be: Arc<Backend>,
    scenario: &Scenario,
    index: usize,
    go: Option<PathBuf>,
) -> Result<(), String> {
    let cx = Ctx::new(be.clone(), scenario, index, go).await;
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
    // Whether the operator was still there, for a failure's report.
    let operator = match cx.operator.lock().unwrap().as_mut().map(Child::try_wait) {
        None => "not running".to_string(),
        Some(Ok(None)) => "running".to_string(),
        Some(Ok(Some(status))) => format!("exited: {status}"),
        Some(Err(e)) => format!("unknown: {e}"),
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
            "{e}\n--- operator ({operator}) log (last 60 lines) ---\n{}\n{}{}",
            tail(&cx.log, 60),
            stack_logs(&be, &cx.ns),
            be.logs()
        )
    })
}

/// The last lines of the Selenosis components' logs of the scenario in `ns`, if it ran any.
fn stack_logs(be: &Backend, ns: &str) -> String {
    ["browser-service", "selenosis", "browser-ui"]
        .iter()
        .map(|name| (name, be.dir.join(&format!("{ns}.{name}.log"))))
        .filter(|(_, log)| log.is_file())
        .map(|(name, log)| format!("--- {name} (last 30 lines) ---\n{}\n", tail(&log, 30)))
        .collect()
}

/// Runs one scenario on a double of its own, with our CRDs of both layouts.
async fn run_on_own_double(
    server: ApiServer,
    scenario: &Scenario,
    index: usize,
) -> Result<(), String> {
    let be = Backend::double_with(server).await;
    install_crds(&be.client)
        .await
        .map_err(|e| format!("crds/ on the scenario's own double: {e}"))?;
    let be = Arc::new(be);
    let result = run_one(be.clone(), scenario, index, None).await;
    if let Ok(be) = Arc::try_unwrap(be) {
        be.stop().await;
    }
    result
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

async fn run_backend(be: Backend, selected: &[&Scenario], complete: bool, tally: &mut Tally) {
    let be = Arc::new(be);
    let jobs = std::env::var("E2E_JOBS")
        .ok()
        .and_then(|j| j.parse().ok())
        .filter(|&j: &usize| j > 0)
        .unwrap_or(4);
    let started = Instant::now();
    let counted = (tally.passed, tally.failed.len(), tally.skipped);
    // A real node runs its own scenarios, and only those.
    let on_node = be.kind == Kind::Node;
    let (before, selected): (Vec<&Scenario>, Vec<&Scenario>) = selected
        .iter()
        .copied()
        .filter(|s| s.node == on_node)
        .partition(|s| s.before_crds);
    let (alone, selected): (Vec<&Scenario>, Vec<&Scenario>) =
        selected.into_iter().partition(|s| s.alone);
    // An existing cluster got `crds/` when the backend started; nothing else is installed there.
    // Elsewhere `crds/` is applied after the scenarios before them, whatever they left: a
    // selection of them may install one layout only (the Helm chart's scenario).
    let crds_installed = be.kind == Kind::Cluster;
    for (i, s) in before.iter().enumerate() {
        let label = format!("{}/{}", be.name(), s.name);
        if s.simulated && !be.simulated() {
            println!("test {label} ... skipped (needs the kubelet simulator)");
            tally.skipped += 1;
            continue;
        }
        let t = Instant::now();
        match run_one(be.clone(), s, 90 + i, None).await {
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
    if !crds_installed && let Err(e) = install_crds(&be.client).await {
        println!("{}: cannot install crds/: {e}", be.name());
        tally.failed.push(format!("{}: crds", be.name()));
        return;
    }
    let runs = selected.iter().enumerate().map(|(i, s)| {
        let be = be.clone();
        async move {
            let label = format!("{}/{}", be.name(), s.name);
            if s.simulated && !be.simulated() {
                println!("test {label} ... skipped (needs the kubelet simulator)");
                return (label, None);
            }
            let t = Instant::now();
            let result = match s.own_double {
                None => run_one(be, s, i, None).await,
                Some(_) if be.kind != Kind::Double => {
                    println!("test {label} ... skipped (needs a double of its own)");
                    return (label, None);
                }
                Some(server) => run_on_own_double(server(), s, i).await,
            };
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
        let label = format!("{}/{}", be.name(), s.name);
        if s.simulated && !be.simulated() {
            println!("test {label} ... skipped (needs the kubelet simulator)");
            tally.skipped += 1;
            continue;
        }
        if s.stack && be.stack(s.layout).is_none() {
            println!(
                "test {label} ... skipped ({} not set)",
                stack_set(s.layout).variable()
            );
            tally.skipped += 1;
            continue;
        }
        if s.ui && be.stack(s.layout).is_some_and(|set| set.ui.is_none()) {
            println!(
                "test {label} ... skipped (no browser-ui in ${})",
                stack_set(s.layout).variable()
            );
            tally.skipped += 1;
            continue;
        }
        if s.firefox && !be.firefox {
            println!(
                "test {label} ... skipped (no Firefox image: {} not set)",
                images::GECKODRIVER
            );
            tally.skipped += 1;
            continue;
        }
        if s.go && !matches!(support::stack::go_controller(), Ok(Some(_))) {
            println!(
                "test {label} ... skipped ({} not set)",
                support::stack::GO_CONTROLLER
            );
            tally.skipped += 1;
            continue;
        }
        if s.installed && be.operator_image.is_none() {
            println!("test {label} ... skipped (no operator image: no static build)");
            tally.skipped += 1;
            continue;
        }
        let t = Instant::now();
        match run_one(be.clone(), s, 80 + i, None).await {
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
    if matches!(be.kind, Kind::ControlPlane | Kind::Node) {
        go_parity(&be, &alone, tally).await;
    }
    println!(
        "{}: {} scenarios in {:.1}s: {} passed, {} failed, {} skipped",
        be.name(),
        before.len() + selected.len() + alone.len(),
        started.elapsed().as_secs_f64(),
        tally.passed - counted.0,
        tally.failed.len() - counted.1,
        tally.skipped - counted.2,
    );
    // Only the whole suite uses every permission.
    if let (true, Some((server, _))) = (complete, &be.double) {
        let label = format!(
            "{}/the_cluster_role_grants_only_what_the_operator_used",
            be.name()
        );
        match rbac::the_cluster_role_grants_only_what_the_operator_used(server, &operator_user()) {
            Ok(()) => {
                println!("test {label} ... ok");
                tally.passed += 1;
            }
            Err(e) => {
                println!("test {label} ... FAILED\n{e}");
                tally.failed.push(label);
            }
        }
    }
    match Arc::try_unwrap(be) {
        Ok(be) => be.stop().await,
        Err(_) => println!("warning: backend still shared at teardown"),
    }
}

/// The parity scenarios of this backend again with the Go browser-controller in the
/// operator's place, one at a time: a report for docs/compatibility.md, not a check of this
/// operator, so what differs is printed and counted apart from the failures.
async fn go_parity(be: &Arc<Backend>, scenarios: &[&Scenario], tally: &mut Tally) {
    let parity: Vec<&&Scenario> = scenarios
        .iter()
        // The Go controller v0.0.5 serves only the single group: the split-group set has no
        // parity run (no build of it serves that layout).
        .filter(|s| s.parity && s.layout == Layout::Default)
        .filter(|s| !s.stack || be.stack(s.layout).is_some())
        .filter(|s| !s.ui || be.stack(s.layout).is_some_and(|set| set.ui.is_some()))
        .filter(|s| !s.firefox || be.firefox)
        .collect();
    if parity.is_empty() {
        return;
    }
    let go = match support::stack::go_controller() {
        Ok(Some(go)) => go,
        Ok(None) => {
            println!(
                "go-controller parity: skipped ({} not set)",
                support::stack::GO_CONTROLLER
            );
            return;
        }
        Err(e) => {
            println!("go-controller parity: {e}");
            tally.failed.push("go-controller".into());
            return;
        }
    };
    let mut same = 0;
    for (i, s) in parity.iter().enumerate() {
        let label = format!("{}/go-controller/{}", be.name(), s.name);
        let t = Instant::now();
        match run_one(be.clone(), s, 70 + i, Some(go.clone())).await {
            Ok(()) => {
                println!("parity {label} ... ok ({:.1}s)", t.elapsed().as_secs_f64());
                same += 1;
            }
            // The first lines say what differs; the logs after them are this operator's
            // business, not the report's.
            Err(e) => println!(
                "parity {label} ... differs ({:.1}s)\n{}",
                t.elapsed().as_secs_f64(),
                e.lines().take(6).collect::<Vec<_>>().join("\n")
            ),
        }
    }
    println!(
        "{}: go-controller parity: {same} of {} scenarios pass with the Go browser-controller",
        be.name(),
        parity.len()
    );
}

/// The real node's backend, with the sets of the Selenosis stack whose binaries are given.
async fn node_backend(assets: &Assets, node: &NodeAssets) -> Result<Backend, String> {
    let mut stacks = Vec::new();
    for set in [StackSet::SingleGroup, StackSet::SplitGroups] {
        match StackAssets::from_env(set).map_err(|e| e.to_string())? {
            Some(stack) => stacks.push(stack),
            None => println!(
                "selenosis stack {set:?}: skipped ({} not set)",
                set.variable()
            ),
        }
    }
    Backend::node(assets, node, stacks).await
}

/// The set of the stack a scenario of `layout` runs with.
fn stack_set(layout: Layout) -> StackSet {
    match layout {
        Layout::SplitGroups => StackSet::SplitGroups,
        _ => StackSet::SingleGroup,
    }
}

fn main() -> ExitCode {
    let args = parse_args();
    let all = scenarios();
    let selected: Vec<&Scenario> = all
        .iter()
        .filter(|s| args.filters.is_empty() || args.filters.iter().any(|f| s.name.contains(f)))
        .collect();
    let complete = selected.len() == all.len();
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
        // Backends without a real node run only if some selected scenario needs no node.
        let elsewhere = selected.iter().any(|s| !s.node);
        if elsewhere {
            run_backend(Backend::double().await, &selected, complete, &mut tally).await;
        }
        if let Some(kubeconfig) = std::env::var_os("E2E_KUBECONFIG").filter(|k| !k.is_empty()) {
            println!("real control plane: skipped (E2E_KUBECONFIG set: existing cluster)");
            match Backend::cluster(Path::new(&kubeconfig)).await {
                Ok(be) => run_backend(be, &selected, complete, &mut tally).await,
                Err(e) => {
                    println!("cluster: cannot start: {e}");
                    tally.failed.push("cluster".into());
                }
            }
            return;
        }
        match Assets::all_from_env() {
            _ if !elsewhere => {}
            Ok(sets) if sets.is_empty() => {
                println!("real control plane: skipped (KUBEBUILDER_ASSETS not set)")
            }
            Ok(sets) => {
                // One control plane after the other: each server version gets the suite.
                for assets in sets {
                    match Backend::control_plane(&assets).await {
                        Ok(be) => run_backend(be, &selected, complete, &mut tally).await,
                        Err(e) => {
                            let name = format!("control-plane {}", assets.dir.display());
                            println!("{name}: cannot start: {e}");
                            tally.failed.push(name);
                        }
                    }
                }
            }
            Err(e) => {
                println!("control-plane: {e}");
                tally.failed.push("control-plane".into());
            }
        }
        if !selected.iter().any(|s| s.node) {
            return;
        }
        // A real node beside the first control plane, for the scenarios that need one.
        let node_assets = match NodeAssets::from_env() {
            Ok(Some(assets)) => assets,
            Ok(None) => {
                println!("real node: skipped ({} not set)", real_node::NODE_ASSETS);
                return;
            }
            Err(e) => {
                println!("real node: {e}");
                tally.failed.push("node".into());
                return;
            }
        };
        if let Some(missing) = real_node::missing_prerequisites() {
            println!("real node: skipped ({missing})");
            return;
        }
        match Assets::all_from_env().map(|sets| sets.into_iter().next()) {
            Ok(Some(assets)) => match node_backend(&assets, &node_assets).await {
                Ok(be) => run_backend(be, &selected, complete, &mut tally).await,
                Err(e) => {
                    println!("node: cannot start: {e}");
                    tally.failed.push("node".into());
                }
            },
            _ => println!("real node: skipped (it needs KUBEBUILDER_ASSETS for its control plane)"),
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
