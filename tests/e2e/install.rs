//! The operator installed as its users install it, on the real node: its own image (made from
//! the static build, `crates/testkit/src/images.rs`) run by the Deployment of `deploy/` or an
//! overlay, applied with `kubectl apply -k` through a kustomization that swaps only the image.
//! The pods reach the API server through the `kubernetes` Service with their ServiceAccount's
//! token, so the RBAC of `rbac/` is their own identity. Each scenario runs alone: a
//! cluster-wide operator would serve every other scenario's Browsers too. Transitions of the
//! operator's pods, its Deployment and the Lease are read from recorded watches.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Component, Path};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

use crate::support::history::{Seen, record};
use crate::support::host::{TempDir, http_get_at, program};
use browser_controller::prepull::render::{DEFAULT_HELPER_IMAGE, DEFAULT_PAUSE_IMAGE};

use crate::support::images::{BUSYBOX, PAUSE};
use crate::support::node::NODE_NAME;
use crate::support::webdriver::{chromium, sidecar};
use crate::{Ctx, WAIT, poll, repo, resource, sample};

/// The namespace, Deployment and Lease of `deploy/`.
const NAMESPACE: &str = "browser-controller";
const DEPLOYMENT: &str = "browser-controller";
const LEASE: &str = "controller.selenosis.io";
/// Longest wait for the operator's pods: two replicas start one after the other.
const ROLLOUT: Duration = Duration::from_secs(120);

/// kubectl with the admin's kubeconfig: whether it succeeded, its stdout and stderr.
async fn kubectl(cx: &Ctx, args: &[&str]) -> (bool, String, String) {
    let out = cx.kubectl_output(args).await.expect("kubectl is installed");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`kubectl`], expecting success: its stdout.
async fn kubectl_ok(cx: &Ctx, args: &[&str]) -> String {
    let (ok, out, err) = kubectl(cx, args).await;
    assert!(ok, "kubectl {}: {err}", args.join(" "));
    out
}

/// `to` as a path relative to the folder `from` (kustomize refuses absolute ones).
fn relative(from: &Path, to: &Path) -> String {
    let ups = from
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count();
    let down = to.strip_prefix("/").unwrap_or(to);
    format!("{}{}", "../".repeat(ups), down.display())
}

/// The operator as installed from one of the repository's kustomizations or its chart, watched.
struct Installed {
    namespace: String,
    /// Pods, the Deployment and Leases of `namespace`, as recorded.
    seen: Arc<Mutex<Vec<Seen>>>,
    recorders: Vec<tokio::task::JoinHandle<()>>,
    dir: TempDir,
}

impl Drop for Installed {
    fn drop(&mut self) {
        for r in &self.recorders {
            r.abort();
        }
    }
}

/// The image of the operator's container, as the test's kustomization sets it.
fn image_override(cx: &Ctx) -> (String, String) {
    let image = cx
        .be
        .operator_image
        .expect("the operator's image on the node");
    let (name, tag) = image.rsplit_once(':').expect("a tagged image");
    (name.to_string(), tag.to_string())
}

impl Installed {
    /// Records the operator's pods, Deployment and Lease in `namespace`.
    fn watch(cx: &Ctx, namespace: &str) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorders = [
            ("Pod", resource("", "Pod", "pods")),
            ("Deployment", resource("apps", "Deployment", "deployments")),
            ("Lease", resource("coordination.k8s.io", "Lease", "leases")),
        ]
        .into_iter()
        .map(|(kind, ar)| {
            let api: Api<DynamicObject> =
                Api::namespaced_with(cx.be.client.clone(), namespace, &ar);
            tokio::spawn(record(api, kind, seen.clone()))
        })
        .collect();
        Self {
            namespace: namespace.to_string(),
            seen,
            recorders,
            dir: TempDir::new("e2e-install"),
        }
    }

    /// Applies `kustomization` (a folder of the repository) with the operator's image in place
    /// of `browser-controller:latest`, and nothing else changed.
    async fn apply(cx: &Ctx, kustomization: &str) -> Self {
        let installed = Self::watch(cx, NAMESPACE);
        let dir = &installed.dir;
        let base = repo(kustomization);
        let (name, tag) = image_override(cx);
        std::fs::write(
            dir.join("kustomization.yaml"),
            format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\nimages:\n  - name: browser-controller\n    newName: {name}\n    newTag: {tag}\n",
                relative(dir.path(), &base)
            ),
        )
        .unwrap();
        let dir_arg = dir.path().display().to_string();
        let rendered = kubectl_ok(cx, &["kustomize", &dir_arg]).await;
        assert!(
            rendered.contains(&format!("image: {name}:{tag}")),
            "the image swapped:\n{rendered}"
        );
        kubectl_ok(cx, &["apply", "-k", &dir_arg]).await;
        installed
    }

    /// The last recorded state of every `kind` object that still exists, by name.
    fn live(&self, kind: &str) -> BTreeMap<String, Value> {
        let mut live = BTreeMap::new();
        for s in self.seen.lock().unwrap().iter().filter(|s| s.kind == kind) {
            let name = s.object["metadata"]["name"].as_str().unwrap_or_default();
            if s.deleted {
                live.remove(name);
            } else {
                live.insert(name.to_string(), s.object.clone());
            }
        }
        live
    }

    /// Every pod the Lease was seen held by, in order, with when it was first seen so (the
    /// holder identity is the pod's name and a suffix of the process).
    fn holders(&self) -> Vec<(String, Instant)> {
        let mut holders: Vec<(String, Instant)> = Vec::new();
        for s in self.seen.lock().unwrap().iter() {
            if s.kind != "Lease" || s.object["metadata"]["name"] != LEASE {
                continue;
            }
            let Some(holder) = s.object["spec"]["holderIdentity"]
                .as_str()
                .and_then(|h| h.split('_').next())
            else {
                continue;
            };
            if holders.last().is_none_or(|(h, _)| h != holder) {
                holders.push((holder.to_string(), s.at));
            }
        }
        holders
    }

    /// The operator's pods that run and are Ready, by name, with their IPs.
    fn ready_pods(&self) -> BTreeMap<String, Value> {
        self.live("Pod")
            .into_iter()
            .filter(|(_, p)| p["metadata"]["deletionTimestamp"].is_null() && is_ready(p))
            .collect()
    }

    /// Waits until `replicas` pods are Ready and one of them holds the Lease: the leader's
    /// and the standbys' names.
    async fn until_serving(&self, replicas: usize) -> (String, Vec<String>) {
        poll(ROLLOUT, Duration::from_millis(200), || async {
            let ready = self.ready_pods();
            let holder = self.holders().last().map(|(h, _)| h.clone());
            match holder {
                Some(leader) if ready.len() == replicas && ready.contains_key(&leader) => {
                    let standbys = ready.keys().filter(|n| **n != leader).cloned().collect();
                    Ok((leader, standbys))
                }
                _ => Err(format!(
                    "{replicas} operator pods Ready, one of them leading; Lease holders {:?}; pods {:#?}",
                    self.holders(),
                    self.live("Pod")
                        .values()
                        .map(|p| json!({"name": p["metadata"]["name"], "phase": p["status"]["phase"], "conditions": p["status"]["conditions"], "containers": p["status"]["containerStatuses"]}))
                        .collect::<Vec<_>>()
                )),
            }
        })
        .await
    }

    fn ip(&self, pod: &str) -> IpAddr {
        self.live("Pod")[pod]["status"]["podIP"]
            .as_str()
            .and_then(|ip| ip.parse().ok())
            .unwrap_or_else(|| panic!("{pod} has an IP"))
    }

    /// Deletes what `deploy/operator/` installed (the CRDs and RBAC stay: the suite's other
    /// scenarios use them) and waits until the operator's pods are gone.
    async fn remove(self, cx: &Ctx) {
        kubectl_ok(
            cx,
            &[
                "delete",
                "--namespace",
                NAMESPACE,
                "--ignore-not-found",
                &format!("deployment/{DEPLOYMENT}"),
                "service/browser-controller-metrics",
                "poddisruptionbudget/browser-controller",
            ],
        )
        .await;
        self.until_no_pods().await;
    }

    async fn until_no_pods(&self) {
        poll(ROLLOUT, Duration::from_millis(200), || async {
            let left = self.live("Pod");
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "operator pods left in {}: {:?}",
                    self.namespace,
                    left.keys()
                ))
            }
        })
        .await;
    }
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn restarts(pod: &Value) -> u64 {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["restartCount"].as_u64())
        .sum()
}

/// GET `path` of a pod's port: the status and body.
fn http(ip: IpAddr, port: u16, path: &str) -> (u16, String) {
    http_get_at(ip, port, path).unwrap_or_else(|| panic!("GET http://{ip}:{port}{path}"))
}

/// The value of the unlabelled sample `name` on a pod's `/metrics`.
fn metric(ip: IpAddr, name: &str) -> Option<f64> {
    sample(&http(ip, 8080, "/metrics").1, name)
}

/// One leader and its standbys, as each replica's own endpoints say: the leader reconciles
/// (`browser_controller_leader 1`, `/readyz` ok), a standby waits (`0`, `/readyz` 200 standby).
fn assert_one_leads(installed: &Installed, leader: &str, standbys: &[String]) {
    let ip = installed.ip(leader);
    assert_eq!(
        metric(ip, "browser_controller_leader"),
        Some(1.0),
        "{leader} leads"
    );
    assert_eq!(
        http(ip, 8081, "/readyz"),
        (200, "ok".to_string()),
        "{leader} ready"
    );
    for standby in standbys {
        let ip = installed.ip(standby);
        assert_eq!(
            metric(ip, "browser_controller_leader"),
            Some(0.0),
            "{standby} stands by"
        );
        let (code, body) = http(ip, 8081, "/readyz");
        assert_eq!(code, 200, "{standby}: {body}");
        assert!(body.starts_with("standby"), "{standby}: {body}");
    }
}

/// `NAMESPACE/NAME` of the ServiceAccount the operator's pods run as.
fn service_account(installed: &Installed, pod: &str) -> String {
    let account = installed.live("Pod")[pod]["spec"]["serviceAccountName"]
        .as_str()
        .expect("a ServiceAccount")
        .to_string();
    format!("{}/{account}", installed.namespace)
}

/// `check` with the ServiceAccount `account` (`NAMESPACE/NAME`) passes every check, the pod
/// dry run in the scenario's namespace included.
async fn check_passes_as(cx: &Ctx, account: &str) {
    let (passed, report) = cx
        .check(&[
            &format!("--service-account={account}"),
            &format!("--dry-run-namespace={}", cx.ns),
        ])
        .await;
    assert!(passed, "{report}");
}

/// A busybox browser with a sidecar, for Browsers that only need to run.
async fn busybox_config(cx: &Ctx) {
    cx.create_config(
        "chrome",
        json!({
            "template": {"terminationGracePeriodSeconds": 5},
            "browsers": {"chrome": {"139.0": {
                "image": BUSYBOX,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", "sleep 3600"],
                "sidecars": [sidecar("sleep 3600")],
            }}},
        }),
    )
    .await;
    cx.until_config("chrome", "Valid", "True").await;
}

/// A Browser becomes Running, then goes with its pod when deleted.
async fn serves(cx: &Ctx, name: &str) {
    cx.create_browser(name, json!({})).await;
    cx.seen_running_with_pod(name).await;
    cx.delete_browser(name).await;
    cx.until_gone(name).await;
}

/// `kubectl apply -k deploy/` with only the image swapped: two replicas start, one leads and
/// the other stands by (their own `/metrics` and `/readyz` say so), the probes pass, `check`
/// with the pods' ServiceAccount agrees, a Browser gets a real Chromium session, deleting the
/// leader's pod hands the Lease over and Browsers are still served, and a `kubectl drain` of
/// the node evicts one replica and is held back by the PodDisruptionBudget for the other.
pub(crate) async fn deploy_installs_replicas_that_lead_hand_over_and_hold_back_a_drain(
    cx: Arc<Ctx>,
) {
    let installed = Installed::apply(&cx, "deploy").await;
    let started = Instant::now();
    let (leader, standbys) = installed.until_serving(2).await;
    println!(
        "    real node: 2 replicas Ready, {leader} leading, {:.1}s after kubectl apply -k deploy/",
        started.elapsed().as_secs_f64()
    );
    assert_one_leads(&installed, &leader, &standbys);
    for (name, pod) in installed.ready_pods() {
        assert_eq!(
            restarts(&pod),
            0,
            "{name} never restarted (liveness passed)"
        );
        assert_eq!(pod["spec"]["nodeName"], NODE_NAME);
    }

    // The pods' own identity covers what the operator does, and kubectl agrees.
    let account = service_account(&installed, &leader);
    crate::node::config(&cx, chromium("sleep 3600")).await;
    check_passes_as(&cx, &account).await;
    let user = format!("system:serviceaccount:{}", account.replacen('/', ":", 1));
    for (verb, what) in [
        ("create", "pods"),
        ("delete", "pods"),
        ("watch", "browsers.selenosis.io"),
        ("patch", "browsers.selenosis.io/status"),
        ("list", "browserconfigs.selenosis.io"),
    ] {
        let (_, answer, _) = kubectl(
            &cx,
            &[
                "auth",
                "can-i",
                verb,
                what,
                "--namespace",
                &cx.ns,
                "--as",
                &user,
            ],
        )
        .await;
        assert_eq!(answer.trim(), "yes", "{user} may {verb} {what}");
    }

    // A real browser session through the pod IP, the pod made by the installed operator.
    crate::node::session_through_the_pod_ip(&cx, "real").await;

    // The leader's pod deleted: the standby takes the Lease, and serves.
    let (_, stderr) = {
        let (ok, _, err) = kubectl(
            &cx,
            &[
                "delete",
                "pod",
                "--namespace",
                NAMESPACE,
                &leader,
                "--wait=false",
            ],
        )
        .await;
        (ok, err)
    };
    let deleted = Instant::now();
    let (successor, at) = poll(WAIT, Duration::from_millis(100), || async {
        installed
            .holders()
            .into_iter()
            .find(|(h, _)| *h != leader)
            .ok_or_else(|| format!("a new Lease holder after {leader}: {stderr}"))
    })
    .await;
    // The standby, or the deleted pod's replacement when it starts first: either is a replica.
    assert!(
        installed.live("Pod").contains_key(&successor),
        "{successor} is a replica"
    );
    println!(
        "    real node: the Lease went from {leader} to {successor} {:.1}s after the leader's pod was deleted",
        (at - deleted).as_secs_f64()
    );
    serves(&cx, "after-hand-over").await;

    // A drain: one replica is evicted, the other is held by the PodDisruptionBudget while the
    // evicted one's replacement cannot schedule (the only node is cordoned).
    let (_, standbys) = installed.until_serving(2).await;
    let before: Vec<String> = installed.ready_pods().into_keys().collect();
    let drain_started = Instant::now();
    let (drained, _, drain_err) = kubectl(
        &cx,
        &[
            "drain",
            NODE_NAME,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=30s",
        ],
    )
    .await;
    // Still cordoned: the replica the drain left is Ready and leads.
    let kept: Vec<String> = {
        let ready = installed.ready_pods();
        before
            .iter()
            .filter(|name| ready.contains_key(*name))
            .cloned()
            .collect()
    };
    let holder = installed.holders().last().map(|(h, _)| h.clone());
    let uncordoned = kubectl(&cx, &["uncordon", NODE_NAME]).await;
    assert!(!drained, "the drain is held back: {drain_err}");
    assert_eq!(
        kept.len(),
        1,
        "one replica of {before:?} left Ready: {kept:?}"
    );
    assert_eq!(
        holder.as_ref(),
        kept.first(),
        "the replica left holds the Lease"
    );
    assert!(
        drain_err.contains("disruption budget"),
        "held back by the PodDisruptionBudget: {drain_err}"
    );
    assert!(uncordoned.0, "uncordon: {}", uncordoned.2);
    let evicted: Vec<String> = {
        let seen = installed.seen.lock().unwrap();
        before
            .iter()
            .filter(|name| {
                seen.iter().any(|s| {
                    s.kind == "Pod"
                        && s.at >= drain_started
                        && s.object["metadata"]["name"] == name.as_str()
                        && !s.object["metadata"]["deletionTimestamp"].is_null()
                })
            })
            .cloned()
            .collect()
    };
    assert_eq!(
        evicted.len(),
        1,
        "one replica evicted of {before:?}: {evicted:?}"
    );
    let (leader, standbys_now) = installed.until_serving(2).await;
    println!(
        "    real node: the drain evicted {} and was held back for the other replica ({} before, leading now: {leader})",
        evicted[0],
        standbys.len() + 1
    );
    assert_one_leads(&installed, &leader, &standbys_now);
    serves(&cx, "after-drain").await;
    installed.remove(&cx).await;
}

/// Puts the ClusterRoleBinding of `rbac/` back when dropped (also when the scenario fails):
/// the suite's other scenarios act as the ServiceAccount with it.
struct ClusterRoleBindingBack(std::path::PathBuf);

impl Drop for ClusterRoleBindingBack {
    fn drop(&mut self) {
        let _ = Command::new("kubectl")
            .arg(format!("--kubeconfig={}", self.0.display()))
            .args(["apply", "-f"])
            .arg(repo("rbac/cluster-role-binding.yaml"))
            .stdout(Stdio::null())
            .status();
    }
}

/// `kubectl apply -k deploy/overlays/namespaced/` without the ClusterRoleBinding an install
/// of `rbac/` left: the operator serves its namespace (`selenosis`, this scenario's) with the
/// overlay's Role alone, and leaves a Browser of another namespace untouched.
pub(crate) async fn the_namespaced_overlay_serves_its_namespace_with_its_role_alone(cx: Arc<Ctx>) {
    assert_eq!(cx.ns, "selenosis", "the overlay's namespace");
    let _back = ClusterRoleBindingBack(cx.be.admin_kubeconfig.clone());
    kubectl_ok(
        &cx,
        &[
            "delete",
            "clusterrolebinding",
            "browser-controller",
            "--ignore-not-found",
        ],
    )
    .await;
    let other = "e2e-not-watched";
    kubectl(&cx, &["create", "namespace", other]).await;
    let installed = Installed::apply(&cx, "deploy/overlays/namespaced").await;
    let (leader, standbys) = installed.until_serving(2).await;
    assert_one_leads(&installed, &leader, &standbys);
    let account = service_account(&installed, &leader);
    let user = format!("system:serviceaccount:{}", account.replacen('/', ":", 1));
    for (ns, allowed) in [("selenosis", "yes"), (other, "no")] {
        let (_, answer, _) = kubectl(
            &cx,
            &[
                "auth",
                "can-i",
                "create",
                "pods",
                "--namespace",
                ns,
                "--as",
                &user,
            ],
        )
        .await;
        assert_eq!(answer.trim(), allowed, "{user} may create pods in {ns}");
    }

    // A Browser elsewhere first: by the time this namespace's Browser ran, it would have had
    // a status, were it watched.
    let elsewhere: Api<DynamicObject> = Api::namespaced_with(
        cx.be.client.clone(),
        other,
        &crate::support::kinds::browser_resource(cx.layout),
    );
    let browser: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "selenosis.io/v1", "kind": "Browser",
        "metadata": {"name": "unwatched"},
        "spec": {"browserName": "chrome", "browserVersion": "139.0"},
    }))
    .unwrap();
    elsewhere
        .create(&Default::default(), &browser)
        .await
        .expect("a Browser in another namespace");
    busybox_config(&cx).await;
    serves(&cx, "namespaced").await;
    let unwatched = elsewhere.get("unwatched").await.expect("still there");
    assert!(
        unwatched.data["status"].is_null(),
        "a Browser outside the watched namespace is left alone: {:?}",
        unwatched.data["status"]
    );
    let _ = elsewhere.delete("unwatched", &Default::default()).await;
    installed.remove(&cx).await;
}

/// An image reference as the runtime names it (`busybox:1` is `docker.io/library/busybox:1`).
fn qualified(image: &str) -> String {
    match image.split_once('/') {
        None => format!("docker.io/library/{image}"),
        Some((host, _)) if host.contains('.') || host.contains(':') || host == "localhost" => {
            image.to_string()
        }
        Some(_) => format!("docker.io/{image}"),
    }
}

/// `kubectl apply -k deploy/overlays/prepull/`: the operator pre-pulls a BrowserConfig's
/// images onto the node (its DaemonSet's pod runs there) and serves Browsers. The node holds
/// the default helper and pause images, as a cluster with a mirror would.
pub(crate) async fn the_prepull_overlay_pulls_onto_the_node_and_serves(cx: Arc<Ctx>) {
    let node = cx.be.node.as_ref().expect("a real node");
    for (local, default) in [
        (BUSYBOX, DEFAULT_HELPER_IMAGE),
        (PAUSE, DEFAULT_PAUSE_IMAGE),
    ] {
        node.tag(local, &qualified(default))
            .unwrap_or_else(|e| panic!("{default} on the node: {e}"));
    }
    let installed = Installed::apply(&cx, "deploy/overlays/prepull").await;
    let (leader, standbys) = installed.until_serving(2).await;
    assert_one_leads(&installed, &leader, &standbys);
    cx.create_config(
        "chrome",
        json!({
            "template": {"prePull": true, "terminationGracePeriodSeconds": 5, "sidecars": [sidecar("sleep 3600")]},
            "browsers": {"chrome": {"139.0": {
                "image": BUSYBOX,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", "sleep 3600"],
            }}},
        }),
    )
    .await;
    crate::node::until_prepulled(&cx, ROLLOUT).await;
    serves(&cx, "prepulled").await;
    crate::node::until_prepull_opted_out(&cx).await;
    installed.remove(&cx).await;
}

/// Helm with the admin's kubeconfig and its own folders: success and the output.
async fn run_helm(cx: &Ctx, helm: &Path, home: &Path, args: &[&str]) -> (bool, String) {
    let mut command = Command::new(helm);
    command
        .args(args)
        .env("KUBECONFIG", &cx.be.admin_kubeconfig)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .stdin(Stdio::null());
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("helm runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `helm install` of `charts/browser-controller` as a release of its own namespace, beside the
/// suite's install of `rbac/` (its objects are named after the release), with the operator's
/// image: two replicas, one leading, serve Browsers with the chart's RBAC; `helm upgrade` to one
/// replica rolls it out and it still serves; `helm uninstall` removes the operator's pods.
/// Skipped, saying so, without Helm.
pub(crate) async fn the_helm_chart_installs_an_operator_that_serves_and_upgrades(cx: Arc<Ctx>) {
    let Some(helm) = program("HELM", "helm") else {
        println!("    helm is not installed (HELM or PATH): nothing to install with");
        return;
    };
    let (release, namespace) = ("e2e-chart", "e2e-chart");
    let installed = Installed::watch(&cx, namespace);
    let home = installed.dir.path().to_path_buf();
    let chart = repo("charts/browser-controller").display().to_string();
    let (name, tag) = image_override(&cx);
    let image = [
        "--set".to_string(),
        format!("image.repository={name}"),
        "--set".to_string(),
        format!("image.tag={tag}"),
    ];
    let mut install = vec![
        "install",
        release,
        &chart,
        "--namespace",
        namespace,
        "--create-namespace",
    ];
    install.extend(image.iter().map(String::as_str));
    let (ok, out) = run_helm(&cx, &helm, &home, &install).await;
    assert!(ok, "helm install: {out}");
    let (leader, standbys) = installed.until_serving(2).await;
    assert_eq!(standbys.len(), 1);
    assert_one_leads(&installed, &leader, &standbys);
    let account = service_account(&installed, &leader);
    assert_eq!(account, format!("{namespace}/{release}-browser-controller"));
    busybox_config(&cx).await;
    check_passes_as(&cx, &account).await;
    serves(&cx, "chart").await;

    let mut upgrade = vec![
        "upgrade",
        release,
        &chart,
        "--namespace",
        namespace,
        "--set",
        "replicas=1",
    ];
    upgrade.extend(image.iter().map(String::as_str));
    let (ok, out) = run_helm(&cx, &helm, &home, &upgrade).await;
    assert!(ok, "helm upgrade: {out}");
    let (leader, standbys) = installed.until_serving(1).await;
    assert!(standbys.is_empty());
    assert_one_leads(&installed, &leader, &standbys);
    serves(&cx, "chart-upgraded").await;

    let (ok, out) = run_helm(
        &cx,
        &helm,
        &home,
        &["uninstall", release, "--namespace", namespace],
    )
    .await;
    assert!(ok, "helm uninstall: {out}");
    installed.until_no_pods().await;
}
