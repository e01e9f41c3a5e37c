//! RBAC and scope: a namespace-scoped operator with only the namespaced RBAC.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::support::controlplane;
use crate::support::kinds::browser_resource;
use crate::support::kubelet::Script;
use crate::{Ctx, repo, resource};

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
pub(crate) async fn namespace_scoped_with_only_the_namespaced_rbac(cx: Arc<Ctx>) {
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
    let running = cx.seen_running("s1").await;
    assert!(running["status"]["podIP"].is_string());
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

    // `check` with the same mode passes; asked for cluster-wide mode, it names what this
    // ServiceAccount lacks and the namespaced alternative.
    let sa = format!("--service-account={operator_ns}/browser-controller");
    let (passed, report) = cx
        .check(&[
            &sa,
            &format!("--namespace={}", cx.ns),
            "--enable-leader-election",
            &format!("--leader-election-namespace={operator_ns}"),
        ])
        .await;
    assert!(passed, "{report}");
    let (passed, report) = cx
        .check(&[&sa, &format!("--dry-run-namespace={}", cx.ns)])
        .await;
    assert!(!passed, "{report}");
    assert!(
        report.contains("FAIL  permissions:")
            && report.contains("missing permission: cannot list browsers")
            && report.contains("in all namespaces")
            && report.contains("rbac/namespaced/"),
        "{report}"
    );
}

/// Grants of `rbac/` the operator needs without ever calling them: the API server asks for
/// them on its behalf.
const NEEDED_UNCALLED: [&str; 1] = [
    // A pod's owner reference with blockOwnerDeletion: the OwnerReferencesPermissionEnforcement
    // admission plugin checks that the writer may update the owner's finalizers.
    "update selenosis/browsers/finalizers",
];

/// How a grant or a request is compared: `verb group/resource[/subresource]`, the groups of
/// both layouts of the Browser kinds as one (`tests/install_manifests.rs` checks that both
/// are granted alike), the core group as `core`.
fn grant(verb: &str, group: &str, resource: &str) -> String {
    let group = match group {
        "" => "core",
        g if g == "selenosis.io" || g.ends_with(".selenosis.io") => "selenosis",
        g => g,
    };
    format!("{verb} {group}/{resource}")
}

/// Every grant of `rbac/cluster-role.yaml` and `rbac/prepull/cluster-role.yaml`.
fn granted() -> std::collections::BTreeSet<String> {
    let mut granted = std::collections::BTreeSet::new();
    for file in ["rbac/cluster-role.yaml", "rbac/prepull/cluster-role.yaml"] {
        let docs = browser_controller::manifest::read_file(&repo(file)).unwrap();
        for rule in docs[0]["rules"].as_array().unwrap() {
            let strings = |key: &str| -> Vec<String> {
                rule[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect()
            };
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    for verb in strings("verbs") {
                        granted.insert(grant(&verb, &group, &resource));
                    }
                }
            }
        }
    }
    granted
}

/// After the whole suite on the double, where the operator acted as the ServiceAccount of
/// `rbac/` (and `rbac/prepull/` where it pre-pulls): it used every grant (or the grant is one
/// the API server needs for it, [`NEEDED_UNCALLED`]), so `rbac/` grants only what the code
/// calls. That it needed nothing more, RBAC on the double enforced all along.
pub(crate) fn the_cluster_role_grants_only_what_the_operator_used(
    server: &crate::ApiServer,
    user: &str,
) -> Result<(), String> {
    let used: std::collections::BTreeSet<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.user.as_deref() == Some(user) && r.verb != "discovery")
        .flat_map(|r| {
            let resource = match &r.subresource {
                Some(sub) => format!("{}/{sub}", r.resource),
                None => r.resource.clone(),
            };
            // An apply that created (201) was authorized as a create too.
            let created = r.patch_type.as_deref() == Some("apply") && r.status == 201;
            // A streamed list is a list in pages on a server that cannot stream it (the
            // scenarios on such doubles show the operator listing): it needs `list` there.
            let listed = r.streamed_list.then_some("list");
            let verbs = [Some(r.verb.as_str()), created.then_some("create"), listed];
            verbs
                .into_iter()
                .flatten()
                .map(|verb| grant(verb, &r.group, &resource))
                .collect::<Vec<_>>()
        })
        .collect();
    let unused: Vec<String> = granted()
        .into_iter()
        .filter(|g| !used.contains(g) && !NEEDED_UNCALLED.contains(&g.as_str()))
        .collect();
    if unused.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "rbac/ grants what the operator never used in the suite: {unused:?}\nused: {used:?}"
        ))
    }
}
