//! What a user installs besides the CRDs: `rbac/` and `deploy/` (and the kustomizations that
//! tie them together).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::Parser;
use serde_json::{Value, json};

use browser_controller::api::crd::Layout;
use browser_controller::cli::{Cli, LogFormat};
use browser_controller::manifest;
use browser_controller::permissions::{self, Access};
use testkit::kinds::kinds;

const NAMESPACE: &str = "browser-controller";
const NAME: &str = "browser-controller";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The files `kubectl apply -f <dir>/` reads: `.yaml`, `.yml` and `.json`, not recursive.
fn applied_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        })
        .collect();
    files.sort();
    files
}

fn objects(dir: &str) -> Vec<Value> {
    applied_files(dir)
        .iter()
        .flat_map(|p| manifest::read_file(p).unwrap())
        .collect()
}

fn all_objects() -> Vec<Value> {
    let mut all = objects("rbac");
    all.extend(objects(OPERATOR));
    all
}

fn the(kind: &str) -> Value {
    let mut found: Vec<Value> = all_objects()
        .into_iter()
        .filter(|o| o["kind"] == kind)
        .collect();
    assert_eq!(found.len(), 1, "{kind}");
    found.remove(0)
}

#[test]
fn every_file_holds_only_kubernetes_objects() {
    for dir in ["rbac", NAMESPACED, PREPULL, OPERATOR] {
        for path in applied_files(dir) {
            let objects = manifest::read_file(&path).unwrap();
            assert!(!objects.is_empty(), "{}", path.display());
            for object in objects {
                assert!(object["apiVersion"].is_string(), "{}", path.display());
                assert!(object["metadata"]["name"].is_string(), "{}", path.display());
                assert_ne!(object["kind"], "Kustomization", "{}", path.display());
            }
        }
    }
}

#[test]
fn namespace_comes_first_and_holds_every_namespaced_object() {
    let rbac = applied_files("rbac");
    let first = manifest::read_file(&rbac[0]).unwrap();
    assert_eq!(first[0]["kind"], "Namespace");
    assert_eq!(first[0]["metadata"]["name"], NAMESPACE);
    for object in all_objects() {
        let cluster_scoped = ["Namespace", "ClusterRole", "ClusterRoleBinding"]
            .contains(&object["kind"].as_str().unwrap());
        if cluster_scoped {
            assert!(object["metadata"].get("namespace").is_none(), "{object}");
        } else {
            assert_eq!(object["metadata"]["namespace"], NAMESPACE, "{object}");
        }
    }
}

fn triples(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Vec<Triple> {
    let mut out = Vec::new();
    for group in groups {
        for resource in resources {
            for verb in verbs {
                out.push((group.to_string(), resource.to_string(), verb.to_string()));
            }
        }
    }
    out
}

type Triple = (String, String, String);

/// Every (group, resource, verb) a Role or ClusterRole grants; each exactly once, no wildcards,
/// no resourceNames or nonResourceURLs.
fn granted(role: &Value) -> BTreeSet<Triple> {
    let mut granted = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        let keys: BTreeSet<&str> = rule
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            BTreeSet::from(["apiGroups", "resources", "verbs"]),
            "no resourceNames or nonResourceURLs: {rule}"
        );
        let strings = |key: &str| -> Vec<&str> {
            rule[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect()
        };
        for triple in triples(
            &strings("apiGroups"),
            &strings("resources"),
            &strings("verbs"),
        ) {
            assert!(!triple.2.contains('*') && !triple.1.contains('*'), "{rule}");
            assert!(granted.insert(triple.clone()), "granted twice: {triple:?}");
        }
    }
    granted
}

/// What the operator needs in each namespace it watches, for both group layouts.
fn expected_in_watched_namespaces() -> BTreeSet<Triple> {
    let browser_groups = ["selenosis.io", "browser.selenosis.io"];
    let config_groups = ["selenosis.io", "browserconfig.selenosis.io"];
    let mut expected = BTreeSet::new();
    for set in [
        triples(
            &browser_groups,
            &["browsers"],
            &["get", "list", "watch", "patch", "delete"],
        ),
        triples(&browser_groups, &["browsers/status"], &["patch"]),
        triples(&browser_groups, &["browsers/finalizers"], &["update"]),
        triples(
            &config_groups,
            &["browserconfigs"],
            &["list", "watch", "patch"],
        ),
        triples(&config_groups, &["browserconfigs/status"], &["patch"]),
        triples(
            &[""],
            &["pods"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        triples(&["events.k8s.io"], &["events"], &["create", "patch"]),
        triples(&[""], &["resourcequotas"], &["list", "watch"]),
    ] {
        expected.extend(set);
    }
    expected
}

fn leases() -> Vec<Triple> {
    triples(
        &["coordination.k8s.io"],
        &["leases"],
        &["get", "create", "patch"],
    )
}

fn access_review() -> Vec<Triple> {
    triples(
        &["authorization.k8s.io"],
        &["selfsubjectaccessreviews"],
        &["create"],
    )
}

fn assert_same(granted: &BTreeSet<Triple>, expected: &BTreeSet<Triple>, what: &str) {
    assert_eq!(
        granted.difference(expected).collect::<Vec<_>>(),
        Vec::<&Triple>::new(),
        "{what}: more than needed"
    );
    assert_eq!(
        expected.difference(granted).collect::<Vec<_>>(),
        Vec::<&Triple>::new(),
        "{what}: missing"
    );
}

#[test]
fn cluster_role_grants_exactly_what_the_operator_uses() {
    let role = the("ClusterRole");
    assert_eq!(role["metadata"]["name"], NAME);
    let mut expected = expected_in_watched_namespaces();
    expected.extend(access_review());
    assert_same(&granted(&role), &expected, "ClusterRole");
}

#[test]
fn the_lease_is_granted_by_a_role_in_the_operators_namespace_only() {
    let role = the("Role");
    assert_eq!(
        role["metadata"]["name"],
        "browser-controller-leader-election"
    );
    assert_eq!(role["metadata"]["namespace"], NAMESPACE);
    assert_same(
        &granted(&role),
        &leases().into_iter().collect(),
        "leader-election Role",
    );
    assert_binds_to_the_service_account(&the("RoleBinding"), &role);
    // The Deployment puts the Lease in its own namespace (POD_NAMESPACE), where the Role is.
    let deployment = the("Deployment");
    assert_eq!(deployment["metadata"]["namespace"], NAMESPACE);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert!(container["env"].as_array().unwrap().contains(&json!({
        "name": "POD_NAMESPACE",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}
    })));
    let cluster_role = granted(&the("ClusterRole"));
    assert!(
        cluster_role
            .iter()
            .all(|(_, resource, _)| resource != "leases"),
        "the ClusterRole grants leases in every namespace"
    );
}

const NAMESPACED: &str = "rbac/namespaced";
const OPERATOR: &str = "deploy/operator";
/// The watched namespace of the shipped example.
const WATCHED: &str = "selenosis";

fn namespaced(file: &str) -> Vec<Value> {
    manifest::read_file(&repo().join(NAMESPACED).join(file)).unwrap()
}

fn one(objects: &[Value], kind: &str) -> Value {
    let found: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "{kind}");
    found[0].clone()
}

/// A binding of `role` to the operator's service account, in the role's namespace if any.
fn assert_binds_to_the_service_account(binding: &Value, role: &Value) {
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": role["kind"], "name": role["metadata"]["name"]})
    );
    assert_eq!(
        binding["metadata"]["namespace"],
        role["metadata"]["namespace"]
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}])
    );
}

#[test]
fn namespaced_rbac_is_apart_from_what_kubectl_apply_f_rbac_installs() {
    assert!(repo().join(NAMESPACED).is_dir());
    assert_eq!(
        file_names(NAMESPACED),
        BTreeSet::from([
            "cluster-role-access-review.yaml".to_string(),
            "watched-namespace.yaml".into(),
        ])
    );
    // `kubectl apply -f rbac/` reads only the files directly in rbac/ (no -R), and
    // `kubectl apply -k deploy/` only what rbac/Kustomization lists: of the Roles, only the
    // leader-election one in the operator's namespace.
    assert!(
        objects("rbac")
            .iter()
            .filter(|o| o["kind"] == "Role" || o["kind"] == "RoleBinding")
            .all(|o| o["metadata"]["namespace"] == NAMESPACE
                && o["metadata"]["name"] == "browser-controller-leader-election")
    );
    assert!(
        kustomization("rbac")
            .iter()
            .all(|r| !r.contains("namespaced"))
    );
}

#[test]
fn namespaced_roles_split_the_cluster_roles_rules_by_scope() {
    let cluster_role = granted(&the("ClusterRole"));

    let watched = namespaced("watched-namespace.yaml");
    assert_eq!(watched.len(), 2);
    let role = one(&watched, "Role");
    assert_eq!(role["metadata"]["namespace"], WATCHED);
    let in_namespace = granted(&role);
    assert_same(
        &in_namespace,
        &expected_in_watched_namespaces(),
        "watched-namespace Role",
    );
    assert!(in_namespace.is_subset(&cluster_role));
    assert_binds_to_the_service_account(&one(&watched, "RoleBinding"), &role);

    let review = namespaced("cluster-role-access-review.yaml");
    assert_eq!(review.len(), 2);
    let role = one(&review, "ClusterRole");
    assert!(role["metadata"].get("namespace").is_none());
    assert_same(
        &granted(&role),
        &access_review().into_iter().collect(),
        "access-review ClusterRole",
    );
    let binding = one(&review, "ClusterRoleBinding");
    assert!(binding["metadata"].get("namespace").is_none());
    assert_binds_to_the_service_account(&binding, &role);

    // Together they grant what the ClusterRole grants, nothing more (the Lease's Role in
    // rbac/ serves both modes).
    let mut union = in_namespace;
    union.extend(access_review());
    assert_same(&union, &cluster_role, "namespaced RBAC");
}

fn as_triple(access: &Access) -> Triple {
    let resource = match access.subresource {
        Some(sub) => format!("{}/{sub}", access.resource),
        None => access.resource.clone(),
    };
    (access.group.clone(), resource, access.verb.to_string())
}

#[test]
fn the_roles_cover_everything_the_start_up_check_asks_for() {
    let in_namespace = granted(&one(&namespaced("watched-namespace.yaml"), "Role"));
    let cluster_wide = granted(&the("ClusterRole"));
    for kinds in [kinds(Layout::Default), kinds(Layout::SplitGroups)] {
        for access in permissions::required(&kinds, &[WATCHED.to_string()]) {
            assert_eq!(access.namespace.as_deref(), Some(WATCHED));
            assert!(
                in_namespace.contains(&as_triple(&access)),
                "Role lacks {access}"
            );
        }
        for access in permissions::required(&kinds, &[]) {
            assert!(
                cluster_wide.contains(&as_triple(&access)),
                "ClusterRole lacks {access}"
            );
        }
    }
    let lease_role = granted(&the("Role"));
    for access in permissions::lease(NAMESPACE) {
        assert!(
            lease_role.contains(&as_triple(&access)),
            "leader-election Role lacks {access}"
        );
    }
}

const PREPULL: &str = "rbac/prepull";

fn prepull_file(file: &str) -> Vec<Value> {
    manifest::read_file(&repo().join(PREPULL).join(file)).unwrap()
}

/// What `--enable-prepull` needs, and nothing else.
fn daemon_sets() -> BTreeSet<Triple> {
    triples(
        &["apps"],
        &["daemonsets"],
        &["list", "watch", "create", "patch", "delete"],
    )
    .into_iter()
    .collect()
}

#[test]
fn prepull_rbac_is_apart_and_grants_exactly_the_daemon_sets() {
    assert_eq!(
        file_names(PREPULL),
        BTreeSet::from(["cluster-role.yaml".to_string(), "namespaced.yaml".into()])
    );
    // The default RBAC does not grow: nothing of rbac/ or rbac/namespaced/ touches DaemonSets.
    for dir in ["rbac", NAMESPACED] {
        for role in objects(dir)
            .iter()
            .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        {
            assert!(
                granted(role).iter().all(|(_, r, _)| r != "daemonsets"),
                "{dir}: {role}"
            );
        }
    }
    assert!(kustomization("rbac").iter().all(|r| !r.contains("prepull")));

    let cluster = prepull_file("cluster-role.yaml");
    assert_eq!(cluster.len(), 2);
    let role = one(&cluster, "ClusterRole");
    assert!(role["metadata"].get("namespace").is_none());
    assert_same(&granted(&role), &daemon_sets(), "pre-pull ClusterRole");
    let binding = one(&cluster, "ClusterRoleBinding");
    assert!(binding["metadata"].get("namespace").is_none());
    assert_binds_to_the_service_account(&binding, &role);

    let namespaced = prepull_file("namespaced.yaml");
    assert_eq!(namespaced.len(), 2);
    let role = one(&namespaced, "Role");
    assert_eq!(role["metadata"]["namespace"], WATCHED);
    assert_same(&granted(&role), &daemon_sets(), "pre-pull Role");
    assert_binds_to_the_service_account(&one(&namespaced, "RoleBinding"), &role);
}

#[test]
fn the_prepull_roles_cover_what_the_start_up_check_asks_for_with_the_flag() {
    let cluster = granted(&one(&prepull_file("cluster-role.yaml"), "ClusterRole"));
    for access in permissions::prepull(&[]) {
        assert!(
            cluster.contains(&as_triple(&access)),
            "ClusterRole lacks {access}"
        );
    }
    let namespaced = granted(&one(&prepull_file("namespaced.yaml"), "Role"));
    for access in permissions::prepull(&[WATCHED.to_string()]) {
        assert_eq!(access.namespace.as_deref(), Some(WATCHED));
        assert!(
            namespaced.contains(&as_triple(&access)),
            "Role lacks {access}"
        );
    }
}

#[test]
fn binding_gives_the_role_to_the_service_account() {
    let account = the("ServiceAccount");
    assert_eq!(account["metadata"]["name"], NAME);
    assert_eq!(account["metadata"]["namespace"], NAMESPACE);
    let binding = the("ClusterRoleBinding");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}])
    );
}

#[test]
fn deployment_is_hardened_and_probed() {
    let deployment = the("Deployment");
    assert_eq!(deployment["metadata"]["name"], NAME);
    assert_eq!(deployment["spec"]["replicas"], 2);
    let selector = &deployment["spec"]["selector"]["matchLabels"];
    let pod = &deployment["spec"]["template"];
    for (key, value) in selector.as_object().unwrap() {
        assert_eq!(&pod["metadata"]["labels"][key], value);
    }
    let spec = &pod["spec"];
    assert_eq!(spec["serviceAccountName"], NAME);
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(spec["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert!(spec.get("hostNetwork").is_none() && spec.get("hostPID").is_none());

    let containers = spec["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let container = &containers[0];
    assert_eq!(container["image"], "browser-controller:latest");
    assert_eq!(
        container["args"],
        json!([
            "--metrics-addr=:8080",
            "--health-probe-bind-address=:8081",
            "--enable-leader-election",
            "--shutdown-timeout=25s",
            "--log-format=json"
        ])
    );
    let cli = deployed_cli(&deployment);
    assert!(cli.command.is_none() && cli.run.enable_leader_election);
    assert_eq!(cli.run.log_format, LogFormat::Json);
    assert!(container["env"].as_array().unwrap().contains(&json!({
        "name": "POD_NAMESPACE",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}
    })));
    let security = &container["securityContext"];
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["runAsUser"], 65532);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"], json!({"drop": ["ALL"]}));
    assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault");
    assert!(security.get("privileged").is_none());

    assert_eq!(
        container["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": 8081})
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": 8081})
    );
    assert_eq!(
        container["resources"],
        json!({
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"},
        })
    );
    let ports: Vec<(&str, i64)> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                p["containerPort"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ports, [("metrics", 8080), ("health", 8081)]);
}

/// The operator's flags as the Deployment passes them.
fn deployed_cli(deployment: &Value) -> Cli {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    Cli::try_parse_from(std::iter::once(NAME.to_string()).chain(args)).unwrap()
}

#[test]
fn the_grace_period_outlasts_a_graceful_stop() {
    let deployment = the("Deployment");
    let run = deployed_cli(&deployment).run;
    // A stop: in-flight reconciles for --shutdown-timeout, then the Lease release, bounded by
    // the renew deadline.
    let mut stop = run.shutdown_timeout;
    if run.enable_leader_election {
        stop += run.leader_election_renew_deadline;
    }
    let grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("terminationGracePeriodSeconds is set");
    assert!(
        std::time::Duration::from_secs(grace) > stop,
        "terminationGracePeriodSeconds {grace} does not outlast a stop of {stop:?}"
    );
}

#[test]
fn replicas_spread_and_a_disruption_budget_keeps_one() {
    let deployment = the("Deployment");
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let spread = &deployment["spec"]["template"]["spec"]["topologySpreadConstraints"];
    assert_eq!(spread[0]["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(spread[0]["whenUnsatisfiable"], "ScheduleAnyway");
    for (key, value) in spread[0]["labelSelector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&labels[key], value);
    }

    let budget = the("PodDisruptionBudget");
    assert_eq!(budget["apiVersion"], "policy/v1");
    assert_eq!(budget["metadata"]["name"], NAME);
    assert_eq!(budget["spec"]["minAvailable"], 1);
    assert!(budget["spec"].get("maxUnavailable").is_none());
    let selector = budget["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap();
    assert!(!selector.is_empty());
    for (key, value) in selector {
        assert_eq!(&labels[key], value);
    }
    assert!(
        budget["spec"]["minAvailable"].as_i64().unwrap()
            < deployment["spec"]["replicas"].as_i64().unwrap(),
        "a budget as large as the replicas blocks every drain"
    );
}

#[test]
fn metrics_service_selects_the_operator() {
    let service = the("Service");
    let deployment = the("Deployment");
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (key, value) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&labels[key], value);
    }
    assert_eq!(
        service["spec"]["ports"],
        json!([{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}])
    );
}

fn kustomization(dir: &str) -> Vec<String> {
    let path = repo().join(dir).join("Kustomization");
    let objects = manifest::read_file(&path).unwrap();
    assert_eq!(objects[0]["kind"], "Kustomization");
    objects[0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect()
}

fn file_names(dir: &str) -> BTreeSet<String> {
    applied_files(dir)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn kustomizations_cover_what_kubectl_apply_f_covers() {
    // `kubectl apply -k deploy/` and `kubectl apply -f crds/ -f rbac/ -f deploy/operator/`
    // install the same objects; each overlay's extra RBAC folder lists its files as
    // `kubectl apply -f` would take them (rbac/prepull/ only the rules of all namespaces).
    for dir in ["crds", "rbac", NAMESPACED, OPERATOR] {
        let listed: BTreeSet<String> = kustomization(dir).into_iter().collect();
        assert_eq!(listed, file_names(dir), "{dir}/Kustomization");
    }
    assert_eq!(kustomization(PREPULL), ["cluster-role.yaml"]);
    assert_eq!(kustomization("deploy"), ["../crds", "../rbac", "operator"]);
}

/// Verbs of a cell of deploy/HELM-VALUES.md: `get, create, patch`, possibly followed by an
/// explanation after `:` or `(`; `—` for none.
fn verbs_of_cell(cell: &str) -> BTreeSet<String> {
    let list = cell.split([':', '(']).next().unwrap_or_default().trim();
    if list == "—" {
        return BTreeSet::new();
    }
    list.split(',').map(|v| v.trim().to_string()).collect()
}

#[test]
fn helm_values_table_states_the_verbs_rbac_grants() {
    let text = std::fs::read_to_string(repo().join("deploy/HELM-VALUES.md")).unwrap();
    // What rbac/ grants the operator in all: the ClusterRole and the Lease's Role.
    let mut granted_all = granted(&the("ClusterRole"));
    granted_all.extend(granted(&the("Role")));
    let mut rows = 0;
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let names: Vec<&str> = cells[0]
            .split('`')
            .filter(|s| !s.trim().is_empty())
            .collect();
        let group = if names[0] == "\"\"" { "" } else { names[0] };
        let resource = names[1];
        let needs = verbs_of_cell(cells[2]);
        let grants: BTreeSet<String> = granted_all
            .iter()
            .filter(|(g, r, _)| g == group && r == resource)
            .map(|(_, _, v)| v.clone())
            .collect();
        assert_eq!(needs, grants, "{group}/{resource}: HELM-VALUES.md vs rbac/");
        rows += 1;
    }
    assert!(rows >= 10, "the table was not found: {rows} rows");
}

/// The objects `kubectl kustomize` builds from `dir`; `None` when kubectl is not installed.
fn kustomized(dir: &str) -> Option<Vec<Value>> {
    let output = match std::process::Command::new("kubectl")
        .args(["kustomize", &repo().join(dir).display().to_string()])
        .output()
    {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("kubectl kustomize {dir}: {e}"),
        Ok(output) => output,
    };
    assert!(
        output.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    Some(manifest::parse(&text, std::path::Path::new(dir)).unwrap())
}

/// `kind/namespace/name` of each object.
fn identities(objects: &[Value]) -> BTreeSet<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["namespace"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// The value of the operator container's env variable `name` in the built Deployment.
fn deployment_env(objects: &[Value], name: &str) -> Option<String> {
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment")?;
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
        .map(String::from)
}

#[test]
fn the_overlays_build_with_kubectl_kustomize_into_the_install_they_promise() {
    let Some(base) = kustomized("deploy") else {
        println!("note: kubectl is not installed; the kustomizations were not built");
        return;
    };
    // The base is `kubectl apply -f crds/ -f rbac/ -f deploy/operator/`.
    let mut applied: Vec<Value> = objects("crds");
    applied.extend(all_objects());
    assert_eq!(identities(&base), identities(&applied));

    // The operator reads the variables the overlays set.
    let mut cli = <Cli as clap::CommandFactory>::command();
    cli.build();
    let reads = |variable: &str| {
        cli.get_arguments()
            .any(|a| a.get_env().is_some_and(|e| e == variable))
    };

    // Namespace-scoped: no rights in all namespaces but the access review; the Role of
    // rbac/namespaced/ in `selenosis`, which the operator is told to watch.
    let namespaced = kustomized("deploy/overlays/namespaced").unwrap();
    let ids = identities(&namespaced);
    for cluster_wide in [
        "ClusterRole//browser-controller",
        "ClusterRoleBinding//browser-controller",
    ] {
        assert!(!ids.contains(cluster_wide), "{cluster_wide}: {ids:?}");
    }
    for wanted in [
        "Role/selenosis/browser-controller",
        "RoleBinding/selenosis/browser-controller",
        "ClusterRole//browser-controller-access-review",
        "Role/browser-controller/browser-controller-leader-election",
        "Deployment/browser-controller/browser-controller",
        "CustomResourceDefinition//browsers.selenosis.io",
    ] {
        assert!(ids.contains(wanted), "{wanted}: {ids:?}");
    }
    assert!(reads("WATCH_NAMESPACE"));
    assert_eq!(
        deployment_env(&namespaced, "WATCH_NAMESPACE").as_deref(),
        Some("selenosis")
    );
    // The env of the base is still there (a patch merges, it does not replace).
    let env_names = |objects: &[Value]| -> Vec<String> {
        let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    };
    for name in env_names(&base) {
        assert!(env_names(&namespaced).contains(&name), "{name}");
    }

    // Pre-pull: everything of the base, the DaemonSet rules, and the flag on.
    let prepull = kustomized("deploy/overlays/prepull").unwrap();
    let ids = identities(&prepull);
    assert!(ids.is_superset(&identities(&base)), "{ids:?}");
    assert!(
        ids.contains("ClusterRole//browser-controller-prepull"),
        "{ids:?}"
    );
    assert!(
        ids.contains("ClusterRoleBinding//browser-controller-prepull"),
        "{ids:?}"
    );
    assert!(reads("ENABLE_PREPULL"));
    assert_eq!(
        deployment_env(&prepull, "ENABLE_PREPULL").as_deref(),
        Some("true")
    );
}
