//! The Helm chart `charts/browser-controller` against the kustomizations it mirrors: `helm lint`
//! passes; `helm template` renders the objects `kustomize build` renders from `deploy/`, its
//! overlays and `deploy/monitoring/`; the chart's copies of the CRDs and the monitoring files
//! equal the originals; and on a real control plane (`KUBEBUILDER_ASSETS`) the chart installs,
//! upgrades to other values and back, and uninstalls leaving the CRDs.
//!
//! Helm comes from `HELM` or `PATH`, kustomize from `PATH` (`kustomize build`, else
//! `kubectl kustomize`); a test without them prints a note and passes.
//!
//! What the comparison allows, and nothing else:
//! - the chart leaves out the Namespace of `rbac/00-namespace.yaml` (Helm installs into the
//!   release's namespace, made with `--create-namespace`);
//! - the chart's objects carry Helm's labels ([`HELM_LABELS`]) besides kustomize's;
//! - the chart's image tag defaults to the operator's version where `deploy/` has the
//!   placeholder `browser-controller:latest`, so the comparisons render with `image.tag: latest`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use browser_controller::cli::{Cli, LogFormat, PodSecurityLevel};
use browser_controller::manifest;
use testkit::controlplane::{Assets, ControlPlane};
use testkit::host::{TempDir, on_path, program};

const CHART: &str = "charts/browser-controller";
/// The release name that gives the objects the names of `deploy/`.
const RELEASE: &str = "browser-controller";
const NAMESPACE: &str = "browser-controller";
/// Labels the chart adds to every object's `metadata.labels` that kustomize's objects lack.
const HELM_LABELS: [&str; 4] = [
    "helm.sh/chart",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
];
/// Values under which the chart renders `deploy/`'s placeholder image.
const KUSTOMIZE_IMAGE: &str = "image:\n  tag: latest\n";
const NAMESPACED: &str = "watchNamespaces: [selenosis]\n";
const PREPULL: &str = "prePull:\n  enabled: true\n";
const MONITORING: &str = "monitoring:\n  serviceMonitor:\n    enabled: true\n  prometheusRule:\n    enabled: true\n  dashboard:\n    enabled: true\n";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Helm: `HELM`, else `helm` on `PATH`.
fn helm() -> Option<PathBuf> {
    program("HELM", "helm")
}

/// How to build a kustomization: `kustomize build`, else `kubectl kustomize`.
fn kustomize() -> Option<(PathBuf, &'static str)> {
    on_path("kustomize")
        .map(|p| (p, "build"))
        .or_else(|| on_path("kubectl").map(|p| (p, "kustomize")))
}

/// Helm and kustomize, or `None` after a note saying which is missing.
fn tools(test: &str) -> Option<(PathBuf, (PathBuf, &'static str))> {
    let (helm, kustomize) = (helm(), kustomize());
    if helm.is_none() {
        println!("note: {test}: helm is not installed (HELM or PATH); skipped");
    }
    if kustomize.is_none() {
        println!("note: {test}: neither kustomize nor kubectl is installed; skipped");
    }
    Some((helm?, kustomize?))
}

fn run(command: &mut Command) -> String {
    let shown = format!("{command:?}");
    let output = command.output().unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(
        output.status.success(),
        "{shown} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("output is UTF-8")
}

/// A Helm command whose caches and settings live in `home`, not the user's.
fn helm_command(helm: &Path, home: &TempDir) -> Command {
    let mut command = Command::new(helm);
    for (variable, dir) in [
        ("HELM_CACHE_HOME", "cache"),
        ("HELM_CONFIG_HOME", "config"),
        ("HELM_DATA_HOME", "data"),
    ] {
        command.env(variable, home.join(dir));
    }
    command
}

/// Writes each values text to a file of `dir` and returns the `--values` arguments.
fn values_args(dir: &TempDir, values: &[&str]) -> Vec<String> {
    values
        .iter()
        .enumerate()
        .flat_map(|(i, text)| {
            let path = dir.join(&format!("values-{i}.yaml"));
            std::fs::write(&path, text).expect("write a values file");
            ["--values".to_string(), path.display().to_string()]
        })
        .collect()
}

/// The objects `helm template` renders with the given values files (CRDs included).
fn template(helm: &Path, values: &[&str]) -> Vec<Value> {
    let dir = TempDir::new("helm-template");
    let text = run(helm_command(helm, &dir)
        .args(["template", RELEASE])
        .arg(repo().join(CHART))
        .args(["--namespace", NAMESPACE, "--include-crds"])
        .args(values_args(&dir, values)));
    manifest::parse(&text, Path::new("helm template")).expect("helm template renders YAML")
}

fn kustomized_in(kustomize: &(PathBuf, &str), dir: &Path) -> Vec<Value> {
    let text = run(Command::new(&kustomize.0).arg(kustomize.1).arg(dir));
    manifest::parse(&text, dir).expect("kustomize renders YAML")
}

/// The objects kustomize builds from `dir` of the repository.
fn kustomized(kustomize: &(PathBuf, &str), dir: &str) -> Vec<Value> {
    kustomized_in(kustomize, &repo().join(dir))
}

/// `kind/namespace/name`.
fn identity(object: &Value) -> String {
    format!(
        "{}/{}/{}",
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["namespace"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// The chart's objects by identity, Helm's labels taken off.
fn from_helm(objects: Vec<Value>) -> BTreeMap<String, Value> {
    let mut by_id = BTreeMap::new();
    for mut object in objects {
        if let Some(labels) = object
            .get_mut("metadata")
            .and_then(|m| m.get_mut("labels"))
            .and_then(Value::as_object_mut)
        {
            for label in HELM_LABELS {
                labels.remove(label);
            }
        }
        assert!(
            by_id.insert(identity(&object), object).is_none(),
            "rendered twice"
        );
    }
    by_id
}

/// Kustomize's objects by identity, its one Namespace (`rbac/00-namespace.yaml`) taken out.
fn from_kustomize(objects: Vec<Value>) -> BTreeMap<String, Value> {
    let mut by_id: BTreeMap<String, Value> =
        objects.into_iter().map(|o| (identity(&o), o)).collect();
    let namespace = by_id.remove(&format!("Namespace//{NAMESPACE}"));
    assert!(
        namespace.is_some(),
        "kustomize renders the Namespace {NAMESPACE}"
    );
    by_id
}

/// Where two values differ, as `path: left ≠ right` lines.
fn differences(path: &str, left: &Value, right: &Value, out: &mut Vec<String>) {
    match (left, right) {
        (Value::Object(l), Value::Object(r)) => {
            let keys: BTreeSet<&String> = l.keys().chain(r.keys()).collect();
            for key in keys {
                let (a, b) = (l.get(key), r.get(key));
                let at = format!("{path}.{key}");
                match (a, b) {
                    (Some(a), Some(b)) => differences(&at, a, b, out),
                    (a, b) => out.push(format!(
                        "  {at}: chart {} / kustomize {}",
                        shown(a),
                        shown(b)
                    )),
                }
            }
        }
        (Value::Array(l), Value::Array(r)) if l.len() == r.len() => {
            for (i, (a, b)) in l.iter().zip(r).enumerate() {
                differences(&format!("{path}[{i}]"), a, b, out);
            }
        }
        _ if left != right => out.push(format!("  {path}: chart {left} / kustomize {right}")),
        _ => {}
    }
}

fn shown(value: Option<&Value>) -> String {
    value.map_or("(absent)".to_string(), Value::to_string)
}

/// The chart's objects equal kustomize's, with a readable list of what differs.
fn assert_same(chart: &BTreeMap<String, Value>, kustomize: &BTreeMap<String, Value>, what: &str) {
    let mut report = Vec::new();
    for id in chart.keys().filter(|id| !kustomize.contains_key(*id)) {
        report.push(format!("only the chart renders {id}"));
    }
    for id in kustomize.keys().filter(|id| !chart.contains_key(*id)) {
        report.push(format!("only kustomize renders {id}"));
    }
    for (id, object) in chart {
        if let Some(other) = kustomize.get(id) {
            let mut found = Vec::new();
            differences("", object, other, &mut found);
            if !found.is_empty() {
                report.push(format!("{id} differs:\n{}", found.join("\n")));
            }
        }
    }
    assert!(
        report.is_empty(),
        "{what}: the chart drifted from kustomize:\n{}",
        report.join("\n")
    );
}

#[test]
fn helm_lint_passes_with_every_mode() {
    let Some(helm) = helm() else {
        println!("note: helm is not installed (HELM or PATH); the chart was not linted");
        return;
    };
    let both = format!("{NAMESPACED}{PREPULL}");
    let pod_monitor = "monitoring:\n  podMonitor:\n    enabled: true\n";
    for values in [
        "",
        NAMESPACED,
        PREPULL,
        both.as_str(),
        MONITORING,
        pod_monitor,
    ] {
        for strict in [false, true] {
            let dir = TempDir::new("helm-lint");
            let mut command = helm_command(&helm, &dir);
            command.arg("lint").arg(repo().join(CHART));
            if strict {
                command.arg("--strict");
            }
            run(command.args(values_args(&dir, &[values])));
        }
    }
}

#[test]
fn default_values_render_what_kustomize_renders_from_deploy() {
    let Some((helm, kustomize)) = tools("default values") else {
        return;
    };
    assert_same(
        &from_helm(template(&helm, &[KUSTOMIZE_IMAGE])),
        &from_kustomize(kustomized(&kustomize, "deploy")),
        "default values against deploy/",
    );
}

#[test]
fn watched_namespaces_render_the_namespaced_overlay() {
    let Some((helm, kustomize)) = tools("watchNamespaces") else {
        return;
    };
    let overlay = from_kustomize(kustomized(&kustomize, "deploy/overlays/namespaced"));
    assert_same(
        &from_helm(template(&helm, &[KUSTOMIZE_IMAGE, NAMESPACED])),
        &overlay,
        "watchNamespaces: [selenosis] against deploy/overlays/namespaced",
    );

    // More namespaces: a copy of the Role and RoleBinding of each watched namespace, as
    // rbac/namespaced/watched-namespace.yaml says, and all of them in WATCH_NAMESPACE.
    let mut expected = overlay.clone();
    for object in overlay.values() {
        if object["metadata"]["namespace"] == "selenosis" {
            let mut copy = object.clone();
            copy["metadata"]["namespace"] = json!("team-a");
            expected.insert(identity(&copy), copy);
        }
    }
    let deployment = format!("Deployment/{NAMESPACE}/{RELEASE}");
    let env = expected
        .get_mut(&deployment)
        .and_then(|d| d["spec"]["template"]["spec"]["containers"][0]["env"].as_array_mut())
        .expect("the overlay's Deployment has env");
    for variable in env.iter_mut() {
        if variable["name"] == "WATCH_NAMESPACE" {
            variable["value"] = json!("selenosis,team-a");
        }
    }
    assert_same(
        &from_helm(template(
            &helm,
            &[KUSTOMIZE_IMAGE, "watchNamespaces: [selenosis, team-a]\n"],
        )),
        &expected,
        "watchNamespaces: [selenosis, team-a]",
    );
}

#[test]
fn pre_pull_renders_the_prepull_overlay() {
    let Some((helm, kustomize)) = tools("prePull") else {
        return;
    };
    assert_same(
        &from_helm(template(&helm, &[KUSTOMIZE_IMAGE, PREPULL])),
        &from_kustomize(kustomized(&kustomize, "deploy/overlays/prepull")),
        "prePull.enabled against deploy/overlays/prepull",
    );

    // Namespace-scoped pre-pull: the namespaced overlay with the DaemonSet rules of
    // rbac/prepull/namespaced.yaml and the pre-pull overlay's patch, put together by a
    // kustomization of the repository's own files.
    let dir = TempDir::new("helm-kustomization");
    let up = "../".repeat(dir.path().components().count() - 1);
    let repo_from_dir = format!(
        "{up}{}",
        repo().display().to_string().trim_start_matches('/')
    );
    for (from, to) in [
        ("rbac/prepull/namespaced.yaml", "prepull-namespaced.yaml"),
        (
            "deploy/overlays/prepull/enable-prepull.yaml",
            "enable-prepull.yaml",
        ),
    ] {
        std::fs::copy(repo().join(from), dir.join(to)).expect("copy into the kustomization");
    }
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "resources:\n  - {repo_from_dir}/deploy/overlays/namespaced\n  - prepull-namespaced.yaml\npatches:\n  - path: enable-prepull.yaml\n"
        ),
    )
    .expect("write the kustomization");
    assert_same(
        &from_helm(template(&helm, &[KUSTOMIZE_IMAGE, NAMESPACED, PREPULL])),
        &from_kustomize(kustomized_in(&kustomize, dir.path())),
        "watchNamespaces: [selenosis] and prePull.enabled",
    );
}

#[test]
fn monitoring_values_render_deploy_monitoring() {
    let Some((helm, kustomize)) = tools("monitoring") else {
        return;
    };
    let mut expected = from_kustomize(kustomized(&kustomize, "deploy"));
    let monitoring = kustomized(&kustomize, "deploy/monitoring");
    assert_eq!(
        monitoring.len(),
        3,
        "ServiceMonitor, PrometheusRule, ConfigMap"
    );
    expected.extend(monitoring.into_iter().map(|o| (identity(&o), o)));
    assert_same(
        &from_helm(template(&helm, &[KUSTOMIZE_IMAGE, MONITORING])),
        &expected,
        "monitoring values against deploy/ and deploy/monitoring/",
    );

    // The PodMonitor instead of the ServiceMonitor: deploy/monitoring/pod-monitor.yaml.
    let mut expected = from_kustomize(kustomized(&kustomize, "deploy"));
    for object in manifest::read_file(&repo().join("deploy/monitoring/pod-monitor.yaml"))
        .expect("pod-monitor.yaml reads")
    {
        expected.insert(identity(&object), object);
    }
    assert_same(
        &from_helm(template(
            &helm,
            &[
                KUSTOMIZE_IMAGE,
                "monitoring:\n  podMonitor:\n    enabled: true\n",
            ],
        )),
        &expected,
        "monitoring.podMonitor against deploy/monitoring/pod-monitor.yaml",
    );
}

#[test]
fn the_charts_copies_equal_the_repositorys_files() {
    for (copy, original) in [
        (
            "crds/browsers.selenosis.io.yaml",
            "crds/browsers.selenosis.io.yaml",
        ),
        (
            "crds/browserconfigs.selenosis.io.yaml",
            "crds/browserconfigs.selenosis.io.yaml",
        ),
        (
            "files/grafana-dashboard.json",
            "deploy/monitoring/grafana-dashboard.json",
        ),
        (
            "files/prometheus-rule.yaml",
            "deploy/monitoring/prometheus-rule.yaml",
        ),
    ] {
        let read =
            |path: &Path| std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            read(&repo().join(CHART).join(copy)) == read(&repo().join(original)),
            "{CHART}/{copy} differs from {original}: cp {original} {CHART}/{copy}"
        );
    }
    // Every CRD of crds/Kustomization, and nothing else, is in the chart's crds/.
    let mut listed: Vec<String> = std::fs::read_dir(repo().join(CHART).join("crds"))
        .expect("the chart has crds/")
        .map(|e| {
            e.expect("crds/ reads")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    listed.sort();
    let kustomization = std::fs::read_to_string(repo().join("crds/Kustomization"))
        .expect("crds/Kustomization reads");
    let mut resources: Vec<String> = kustomization
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(String::from)
        .collect();
    resources.sort();
    assert_eq!(listed, resources);
}

/// `version:` of a `[section]` of Cargo.toml-like text, or of Chart.yaml (no section).
fn version_in(text: &str, section: Option<&str>, key: &str) -> Option<String> {
    let mut inside = section.is_none();
    for line in text.lines() {
        if line.starts_with('[') {
            inside = section.is_some_and(|s| line.trim() == s);
        } else if inside && let Some(value) = line.strip_prefix(key) {
            let value = value.trim_start().strip_prefix(['=', ':'])?;
            return Some(value.trim().trim_matches('"').to_string());
        }
    }
    None
}

#[test]
fn the_charts_app_version_is_the_operators_and_the_images_default_tag() {
    let cargo = std::fs::read_to_string(repo().join("Cargo.toml")).expect("Cargo.toml");
    let chart = std::fs::read_to_string(repo().join(CHART).join("Chart.yaml")).expect("Chart.yaml");
    let operator = version_in(&cargo, Some("[workspace.package]"), "version");
    assert_eq!(
        operator.as_deref(),
        Some(env!("CARGO_PKG_VERSION")),
        "Cargo.toml"
    );
    assert_eq!(
        version_in(&chart, None, "appVersion"),
        operator,
        "{CHART}/Chart.yaml appVersion"
    );
    let Some(helm) = helm() else {
        println!("note: helm is not installed (HELM or PATH); the image was not rendered");
        return;
    };
    let rendered = template(&helm, &[]);
    let deployment = rendered
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("browser-controller:{}", env!("CARGO_PKG_VERSION"))
    );
}

fn the_deployment(objects: &[Value]) -> &Value {
    objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the chart renders a Deployment")
}

fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v.as_str().expect("a string").to_string())
        .collect()
}

/// The operator as the Deployment starts it: its arguments parsed by the operator's own CLI.
fn deployed_cli(deployment: &Value) -> Cli {
    let args = strings(&container(deployment)["args"]);
    Cli::try_parse_from(std::iter::once(RELEASE.to_string()).chain(args.clone()))
        .unwrap_or_else(|e| panic!("the operator refuses {args:?}: {e}"))
}

const EVERY_OPTION: &str = "
podSecurityLevel: restricted
reservedLabelPrefixes: [example.com, corp.example]
deniedAnnotationPrefixes: [secret.example]
allowedAnnotationPrefixes: [sidecar.istio.io]
logFormat: text
logLevel: debug
shutdownTimeout: 40s
prePull:
  enabled: true
  helperImage: mirror.example/busybox:1.36.1-musl
  pauseImage: mirror.example/pause:3.10
extraArgs: [--max-workers=64, --queue-timeout=1m]
extraEnv:
  - name: RUST_BACKTRACE
    value: '1'
nodeSelector:
  kubernetes.io/os: linux
tolerations:
  - key: dedicated
    operator: Equal
    value: operators
    effect: NoSchedule
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}
priorityClassName: system-cluster-critical
replicas: 3
image:
  repository: registry.example/browser-controller
  tag: '1.2.3'
  pullPolicy: Always
podDisruptionBudget:
  enabled: false
";

#[test]
fn every_value_reaches_the_operator_as_a_flag_it_accepts() {
    let Some(helm) = helm() else {
        println!("note: helm is not installed (HELM or PATH); the values were not rendered");
        return;
    };
    // Defaults: the flags of deploy/.
    let defaults = template(&helm, &[]);
    let cli = deployed_cli(the_deployment(&defaults));
    assert!(cli.run.enable_leader_election);
    assert_eq!(cli.run.log_format, LogFormat::Json);
    assert_eq!(
        cli.run.policy.pod_security_level,
        PodSecurityLevel::Baseline
    );
    assert!(cli.run.namespaces.is_empty());

    let objects = template(&helm, &[EVERY_OPTION]);
    let deployment = the_deployment(&objects);
    let cli = deployed_cli(deployment);
    let policy = &cli.run.policy;
    assert_eq!(policy.pod_security_level, PodSecurityLevel::Restricted);
    assert_eq!(
        policy.reserved_label_prefixes,
        ["example.com", "corp.example"]
    );
    assert_eq!(policy.denied_annotation_prefixes, ["secret.example"]);
    assert_eq!(policy.allowed_annotation_prefixes, ["sidecar.istio.io"]);
    assert_eq!(cli.run.log_format, LogFormat::Text);
    assert_eq!(cli.run.log_level, "debug");
    assert_eq!(cli.run.shutdown_timeout.as_secs(), 40);
    assert_eq!(
        cli.run.prepull_images.prepull_helper_image,
        "mirror.example/busybox:1.36.1-musl"
    );
    assert_eq!(
        cli.run.prepull_images.prepull_pause_image,
        "mirror.example/pause:3.10"
    );
    assert_eq!(cli.run.max_workers, 64);
    assert_eq!(cli.run.queue_timeout.as_secs(), 60);

    let env = &container(deployment)["env"];
    let names: Vec<&str> = env
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "ENABLE_PREPULL",
            "POD_NAMESPACE",
            "POD_NAME",
            "RUST_BACKTRACE"
        ]
    );
    let spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(spec["nodeSelector"]["kubernetes.io/os"], "linux");
    assert_eq!(spec["tolerations"][0]["value"], "operators");
    assert_eq!(
        spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0]["values"],
        json!(["amd64", "arm64"])
    );
    assert_eq!(spec["priorityClassName"], "system-cluster-critical");
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(
        container(deployment)["image"],
        "registry.example/browser-controller:1.2.3"
    );
    assert_eq!(container(deployment)["imagePullPolicy"], "Always");
    assert!(
        objects.iter().all(|o| o["kind"] != "PodDisruptionBudget"),
        "podDisruptionBudget.enabled: false"
    );

    // Without leader election: no flag and no Role for the Lease; one replica only.
    let single = template(&helm, &["replicas: 1\nleaderElection:\n  enabled: false\n"]);
    assert!(
        !deployed_cli(the_deployment(&single))
            .run
            .enable_leader_election
    );
    assert!(
        single
            .iter()
            .all(|o| !identity(o).ends_with("-leader-election")),
        "no leader-election Role without leader election"
    );
    let dir = TempDir::new("helm-refused");
    let refused = helm_command(&helm, &dir)
        .args(["template", RELEASE])
        .arg(repo().join(CHART))
        .args(values_args(&dir, &["leaderElection:\n  enabled: false\n"]))
        .output()
        .expect("helm runs");
    assert!(
        !refused.status.success()
            && String::from_utf8_lossy(&refused.stderr).contains("leaderElection.enabled"),
        "two replicas without leader election are refused"
    );
}

// ---- a real control plane ----------------------------------------------------------------

/// Runs a Helm command against the control plane of `kubeconfig`.
fn helm_on(helm: &Path, home: &TempDir, kubeconfig: &Path, args: &[&str], values: &[&str]) {
    run(helm_command(helm, home)
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .args(["--namespace", NAMESPACE])
        .args(values_args(home, values)));
}

fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// The Deployment in the cluster, as JSON.
async fn deployment_of(client: &kube::Client) -> Value {
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .get(RELEASE)
        .await
        .expect("the Deployment exists");
    serde_json::to_value(deployment).expect("a Deployment is JSON")
}

fn args_of(deployment: &Value) -> Vec<String> {
    strings(&container(deployment)["args"])
}

fn env_of(deployment: &Value, name: &str) -> Option<String> {
    container(deployment)["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
        .map(String::from)
}

/// Whether `api` holds an object named `name`.
async fn exists<K>(api: Api<K>, name: &str) -> bool
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("read {name}: {e}"))
        .is_some()
}

/// What the default install puts in the cluster: the cluster-wide RBAC and the Deployment
/// with the flags `helm template` renders.
async fn assert_cluster_wide(client: &kube::Client, rendered: &[Value]) {
    assert!(
        exists(Api::<ClusterRole>::all(client.clone()), RELEASE).await,
        "the ClusterRole {RELEASE}"
    );
    assert!(exists(Api::<ClusterRoleBinding>::all(client.clone()), RELEASE).await);
    assert!(
        !exists(
            Api::<Role>::namespaced(client.clone(), "selenosis"),
            RELEASE
        )
        .await,
        "no Role in selenosis in cluster-wide mode"
    );
    let deployment = deployment_of(client).await;
    assert_eq!(args_of(&deployment), args_of(the_deployment(rendered)));
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(env_of(&deployment, "WATCH_NAMESPACE"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_upgrades_and_uninstalls_on_a_real_control_plane() {
    let Some(helm) = helm() else {
        println!("note: helm is not installed (HELM or PATH); the chart was not installed");
        return;
    };
    let Some(assets) = Assets::from_env().expect("KUBEBUILDER_ASSETS holds a control plane") else {
        println!("note: KUBEBUILDER_ASSETS is not set; the chart was not installed");
        return;
    };
    let plane = ControlPlane::start(&assets)
        .await
        .expect("the control plane starts");
    let client = plane.client().await.expect("an admin client");
    let kubeconfig = plane.admin_kubeconfig();
    let home = TempDir::new("helm-home");
    let chart = repo().join(CHART).display().to_string();

    // Install with the defaults into a namespace Helm creates.
    helm_on(
        &helm,
        &home,
        &kubeconfig,
        &["install", RELEASE, &chart, "--create-namespace"],
        &[],
    );
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for name in ["browsers.selenosis.io", "browserconfigs.selenosis.io"] {
        let crd = crds.get(name).await.expect("the chart installs its CRDs");
        assert!(established(&crd), "{name} is established");
    }
    assert!(
        exists(
            Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE),
            RELEASE
        )
        .await,
        "the ServiceAccount"
    );
    assert!(
        exists(
            Api::<Role>::namespaced(client.clone(), NAMESPACE),
            &format!("{RELEASE}-leader-election")
        )
        .await,
        "the leader-election Role"
    );
    let defaults = template(&helm, &[]);
    assert_cluster_wide(&client, &defaults).await;
    // The CRD upgrade the chart's README gives: a forced server-side apply of its crds/ over
    // the CRDs Helm created, before `helm upgrade`.
    testkit::controlplane::apply_dir(&client, &repo().join(CHART).join("crds"))
        .await
        .expect("a forced server-side apply of the chart's CRDs");

    // Upgrade to namespace-scoped mode, three replicas and a further flag. Helm makes no
    // watched namespace: the Role goes into one that exists.
    let selenosis: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "selenosis"}
    }))
    .expect("a Namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &selenosis)
        .await
        .expect("create the namespace selenosis");
    let changed = "watchNamespaces: [selenosis]\nreplicas: 3\nextraArgs: [--max-workers=64]\n";
    helm_on(
        &helm,
        &home,
        &kubeconfig,
        &["upgrade", RELEASE, &chart],
        &[changed],
    );
    assert!(
        !exists(Api::<ClusterRole>::all(client.clone()), RELEASE).await,
        "the ClusterRole for all namespaces is gone"
    );
    assert!(!exists(Api::<ClusterRoleBinding>::all(client.clone()), RELEASE).await);
    assert!(
        exists(
            Api::<ClusterRole>::all(client.clone()),
            &format!("{RELEASE}-access-review")
        )
        .await,
        "the access review stays cluster-wide"
    );
    for (what, present) in [
        (
            "Role",
            exists(
                Api::<Role>::namespaced(client.clone(), "selenosis"),
                RELEASE,
            )
            .await,
        ),
        (
            "RoleBinding",
            exists(
                Api::<RoleBinding>::namespaced(client.clone(), "selenosis"),
                RELEASE,
            )
            .await,
        ),
    ] {
        assert!(present, "the {what} in selenosis");
    }
    let deployment = deployment_of(&client).await;
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(
        args_of(&deployment),
        args_of(the_deployment(&template(&helm, &[changed])))
    );
    assert!(args_of(&deployment).contains(&"--max-workers=64".to_string()));
    assert_eq!(
        env_of(&deployment, "WATCH_NAMESPACE").as_deref(),
        Some("selenosis")
    );

    // Back to the defaults: the cluster-wide install again, the Role in selenosis gone.
    helm_on(
        &helm,
        &home,
        &kubeconfig,
        &["upgrade", RELEASE, &chart, "--reset-values"],
        &[],
    );
    assert_cluster_wide(&client, &defaults).await;

    // Uninstall: every object of the release goes, the CRDs stay (Helm keeps crds/).
    helm_on(&helm, &home, &kubeconfig, &["uninstall", RELEASE], &[]);
    assert!(
        !exists(
            Api::<Deployment>::namespaced(client.clone(), NAMESPACE),
            RELEASE
        )
        .await,
        "the Deployment is gone"
    );
    assert!(
        !exists(Api::<ClusterRole>::all(client.clone()), RELEASE).await,
        "the ClusterRole is gone"
    );
    for name in ["browsers.selenosis.io", "browserconfigs.selenosis.io"] {
        assert!(
            crds.get_opt(name)
                .await
                .expect("read CRDs")
                .is_some_and(|crd| established(&crd)),
            "{name} stays after helm uninstall"
        );
    }
    plane.stop();
}
