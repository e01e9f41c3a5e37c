//! What a user installs besides the CRDs: `rbac/` and `deploy/` (and the kustomizations that
//! tie them together).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use browser_controller::manifest;

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
    all.extend(objects("deploy"));
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
    for dir in ["rbac", "deploy"] {
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

fn triples(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Vec<(String, String, String)> {
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

#[test]
fn cluster_role_grants_exactly_what_the_operator_uses() {
    let role = the("ClusterRole");
    assert_eq!(role["metadata"]["name"], NAME);
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

    let browser_groups = ["selenosis.io", "browser.selenosis.io"];
    let config_groups = ["selenosis.io", "browserconfig.selenosis.io"];
    let mut expected = BTreeSet::new();
    for set in [
        triples(
            &browser_groups,
            &["browsers"],
            &["get", "list", "watch", "patch", "delete"],
        ),
        triples(&browser_groups, &["browsers/status"], &["get", "patch"]),
        triples(&browser_groups, &["browsers/finalizers"], &["update"]),
        triples(
            &config_groups,
            &["browserconfigs"],
            &["get", "list", "watch"],
        ),
        triples(
            &config_groups,
            &["browserconfigs/status"],
            &["get", "patch"],
        ),
        triples(
            &[""],
            &["pods"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        triples(&["", "events.k8s.io"], &["events"], &["create", "patch"]),
        triples(
            &["coordination.k8s.io"],
            &["leases"],
            &["get", "create", "patch"],
        ),
        triples(
            &["authorization.k8s.io"],
            &["selfsubjectaccessreviews"],
            &["create"],
        ),
    ] {
        expected.extend(set);
    }
    assert_eq!(
        granted.difference(&expected).collect::<Vec<_>>(),
        Vec::<&(String, String, String)>::new(),
        "more than needed"
    );
    assert_eq!(
        expected.difference(&granted).collect::<Vec<_>>(),
        Vec::<&(String, String, String)>::new(),
        "missing"
    );
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
    assert_eq!(deployment["spec"]["replicas"], 1);
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
        json!(["--metrics-addr=:8080", "--health-probe-bind-address=:8081"])
    );
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
    // `kubectl apply -k deploy/` and `kubectl apply -f crds/ -f rbac/ -f deploy/` install the
    // same objects.
    for dir in ["crds", "rbac"] {
        let listed: BTreeSet<String> = kustomization(dir).into_iter().collect();
        assert_eq!(listed, file_names(dir), "{dir}/Kustomization");
    }
    let mut expected = vec!["../crds".to_string(), "../rbac".to_string()];
    expected.extend(file_names("deploy"));
    assert_eq!(kustomization("deploy"), expected);
}
