//! Compatibility scenarios on the in-process API server double: taking over Browsers and
//! Pods the Go browser-controller left behind, objects written by other clients, and both
//! API-group layouts installed at once.

use testkit as support;

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::core::ApiResource;
use serde_json::{Value, json};

use browser_controller::api::crd::{self, Layout};
use browser_controller::api::keys;
use support::env::{Env, NS, chrome_spec, is_running};
use support::fixtures::{browser, pod};
use support::kinds::{browser_resource, pod_resource};
use support::upstream;

/// Field manager of the Go browser-controller's writes in these scenarios.
const GO_MANAGER: &str = "browser-controller-go";
/// Node of the pods the Go controller started; the simulated kubelet runs `node-1` and
/// leaves them alone, so the test plays their kubelet.
const GO_NODE: &str = "go-node";

fn go_post() -> PostParams {
    PostParams {
        field_manager: Some(GO_MANAGER.into()),
        ..PostParams::default()
    }
}

fn go_patch() -> PatchParams {
    PatchParams {
        field_manager: Some(GO_MANAGER.into()),
        ..PatchParams::default()
    }
}

/// Replaces the installed CRDs with `crds` through the API, as `kubectl replace -f`
/// does, leaving the stored objects in place.
async fn replace_crds(env: &Env, crds: Vec<Value>) {
    let ar = ApiResource::erase::<CustomResourceDefinition>(&());
    let api: Api<DynamicObject> = Api::all_with(env.client.clone(), &ar);
    for crd in crds {
        let name = crd["metadata"]["name"].as_str().unwrap().to_string();
        let live = api.get(&name).await.expect("the old CRD is installed");
        let mut object: DynamicObject = serde_json::from_value(crd).unwrap();
        object.metadata.resource_version = live.metadata.resource_version;
        api.replace(&name, &PostParams::default(), &object)
            .await
            .expect("the new CRD replaces the old one");
    }
}

/// Plays the kubelet of the Go-era node: a pod marked for deletion goes once its
/// containers stopped.
fn confirm_go_pod_deletions(env: &Env) {
    let server = env.server.clone();
    let pods: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), NS, &pod_resource());
    tokio::spawn(async move {
        loop {
            for pod in server.list("pods", NS) {
                if pod["spec"]["nodeName"] == GO_NODE
                    && !pod["metadata"]["deletionTimestamp"].is_null()
                {
                    let params = DeleteParams {
                        grace_period_seconds: Some(0),
                        preconditions: Some(Preconditions {
                            uid: pod["metadata"]["uid"].as_str().map(String::from),
                            resource_version: None,
                        }),
                        ..DeleteParams::default()
                    };
                    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
                    let _ = pods.delete(name, &params).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

/// Pod writes by the operator that would make a pod: a create, or a server-side apply
/// under the operator's pod field manager.
fn operator_pod_creations(env: &Env) -> usize {
    env.server
        .requests()
        .iter()
        .filter(|r| r.resource == "pods" && r.subresource.is_none() && !r.dry_run)
        .filter(|r| r.field_manager.as_deref() != Some(GO_MANAGER))
        .filter(|r| {
            r.verb == "create"
                || (r.patch_type.as_deref() == Some("apply")
                    && r.field_manager.as_deref() == Some(keys::FIELD_MANAGER))
        })
        .count()
}

/// A session as the Go browser-controller leaves it: the Browser with the shared
/// finalizer and its status written by merge patches, the pod without the operator's
/// labels, controlled by the Browser's UID under `owner_api_version`, running on the
/// Go-era node. Returns the pod's UID.
async fn go_session(
    env: &Env,
    layout: Layout,
    name: &str,
    owner_api_version: &str,
    ip: &str,
) -> String {
    let browser = browser(name)
        .namespace(NS)
        .api_version(&browser_resource(layout).api_version)
        .finalized()
        .object();
    let browser = env
        .browsers_in(layout)
        .create(&go_post(), &browser)
        .await
        .expect("Go-era Browser created");
    let uid = browser.metadata.uid.clone().expect("uid");
    let started = "2026-01-10T08:00:00Z";
    let running = |image: &str, port: u16, container: &str| {
        json!({"name": container, "image": image, "restartCount": 0,
            "state": {"running": {"startedAt": started}},
            "ports": [{"containerPort": port, "protocol": "TCP"}]})
    };
    env.browsers_in(layout)
        .patch_status(
            name,
            &go_patch(),
            &Patch::Merge(json!({"status": {
                "phase": "Running",
                "podIP": ip,
                "startTime": started,
                "containerStatuses": [
                    running("selenium/standalone-chrome:139.0", 4444, "browser"),
                    running("alcounit/seleniferous:v1", 4445, "seleniferous"),
                ],
            }})),
        )
        .await
        .expect("Go-era status written");

    // The Go controller's own labels and containers (seleniferous v1, ports with protocols).
    let pod = pod(name)
        .namespace(NS)
        .labels(json!({"app": "browser"}))
        .owned_by_as(owner_api_version, &uid)
        .spec(json!({
            "nodeName": GO_NODE,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "browser", "image": "selenium/standalone-chrome:139.0", "ports": [{"containerPort": 4444, "protocol": "TCP"}]},
                {"name": "seleniferous", "image": "alcounit/seleniferous:v1", "ports": [{"containerPort": 4445, "protocol": "TCP"}]},
            ],
        }))
        .object();
    let pod = env
        .pods()
        .create(&go_post(), &pod)
        .await
        .expect("Go-era pod created");
    let kubelet_status = |seleniferous: Value| {
        json!({"status": {
            "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "10.0.0.2",
            "startTime": started,
            "containerStatuses": [
                {"name": "browser", "image": "selenium/standalone-chrome:139.0", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": started}}},
                {"name": "seleniferous", "image": "alcounit/seleniferous:v1", "ready": true, "restartCount": 0, "state": seleniferous},
            ],
        }})
    };
    env.pods()
        .patch_status(
            name,
            &go_patch(),
            &Patch::Merge(kubelet_status(json!({"running": {"startedAt": started}}))),
        )
        .await
        .expect("pod status written");
    pod.metadata.uid.expect("pod uid")
}

/// The kubelet reports the seleniferous container terminated: the session ended.
async fn end_go_session(env: &Env, name: &str) {
    let mut status = env.pod(name).expect("pod")["status"].clone();
    status["containerStatuses"][1]["state"] = json!({"terminated": {
        "exitCode": 0, "reason": "Completed", "startedAt": "2026-01-10T08:00:00Z", "finishedAt": "2026-01-10T08:30:00Z"
    }});
    status["containerStatuses"][1]["ready"] = json!(false);
    env.pods()
        .patch_status(name, &go_patch(), &Patch::Merge(json!({"status": status})))
        .await
        .expect("pod status written");
}

fn labelled_by_operator(pod: &Value) -> bool {
    pod["metadata"]["labels"][keys::LABEL_MANAGED_BY] == keys::MANAGER
}

/// Which CRDs the cluster has when the Go-era session is made.
enum Installed {
    /// Ours from the start.
    Ours,
    /// The Helm chart's, replaced by ours (`kubectl replace -f crds/split-groups/`) before
    /// the operator starts.
    HelmChartThenOurs(Vec<Value>),
}

async fn take_over_a_running_go_session(
    layout: Layout,
    flags: &[&str],
    owner_api_version: &str,
    installed: Installed,
) {
    let mut env = match &installed {
        Installed::Ours => Env::builder().layout(layout).build(),
        Installed::HelmChartThenOurs(crds) => {
            Env::builder().layout(layout).crds(crds.clone()).build()
        }
    };
    env.record_browser_events();
    confirm_go_pod_deletions(&env);
    let pod_uid = go_session(&env, layout, "go1", owner_api_version, "10.9.0.7").await;
    if let Installed::HelmChartThenOurs(_) = installed {
        replace_crds(&env, crd::crds(layout)).await;
        let crd = env
            .server
            .get(
                "customresourcedefinitions",
                "",
                "browsers.browser.selenosis.io",
            )
            .unwrap();
        assert_eq!(
            crd["spec"]["versions"][0]["schema"],
            crd::crds(layout)[1]["spec"]["versions"][0]["schema"],
            "our schema is installed"
        );
        assert!(env.browser("go1").is_some(), "the Go-era Browser is kept");
    }
    env.start_operator(flags);

    env.until("the Go-era pod to carry the operator's labels", |e| {
        e.pod("go1").is_some_and(|p| labelled_by_operator(&p))
    })
    .await;
    env.until(
        "the Browser to carry the operator's labels and Ready",
        |e| {
            e.browser("go1").is_some_and(|b| {
                b["metadata"]["labels"][keys::LABEL_BROWSER] == "go1"
                    && b["status"]["conditions"][0]["status"] == "True"
            })
        },
    )
    .await;
    let pod = env.pod("go1").unwrap();
    assert_eq!(
        pod["metadata"]["uid"],
        pod_uid.as_str(),
        "the pod is the same pod"
    );
    assert_eq!(
        pod["metadata"]["labels"]["app"], "browser",
        "its own labels stay"
    );
    assert_eq!(
        pod["metadata"]["labels"][keys::LABEL_BROWSER_VERSION],
        "139.0"
    );
    assert!(pod["metadata"]["deletionTimestamp"].is_null());
    let browser = env.browser("go1").unwrap();
    assert_eq!(browser["status"]["phase"], "Running");
    assert_eq!(browser["status"]["podIP"], "10.9.0.7");
    assert_eq!(browser["status"]["startTime"], "2026-01-10T08:00:00Z");
    assert_eq!(
        browser["metadata"]["finalizers"],
        json!([keys::FINALIZER]),
        "the shared finalizer is not duplicated"
    );
    assert_eq!(
        operator_pod_creations(&env),
        0,
        "no pod is created or re-applied"
    );
    assert_eq!(
        env.server.count_writes_by(keys::ADOPTION_FIELD_MANAGER),
        1,
        "one metadata-only write adopts the pod"
    );

    end_go_session(&env, "go1").await;
    env.until("the Browser and its pod to be cleaned up", |e| {
        e.browser("go1").is_none() && e.pod("go1").is_none()
    })
    .await;
    let seen = env.seen_statuses("go1");
    let failed: Vec<&Value> = seen.iter().filter(|s| s["phase"] == "Failed").collect();
    assert!(!failed.is_empty(), "{seen:#?}");
    assert!(
        failed.iter().all(|s| s["reason"] == "ContainerTerminated"),
        "never PodLost: {seen:#?}"
    );
    assert_eq!(failed[0]["podIP"], "10.9.0.7");
    assert_eq!(operator_pod_creations(&env), 0);
    env.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_go_era_session_is_adopted_and_cleaned_up_without_recreating_its_pod() {
    // The owner reference names the split group while the operator resolved selenosis.io.
    take_over_a_running_go_session(
        Layout::Default,
        &[],
        "browser.selenosis.io/v1",
        Installed::Ours,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adoption_works_in_the_split_layout_with_an_owner_reference_of_the_other_group() {
    take_over_a_running_go_session(Layout::SplitGroups, &[], "selenosis.io/v1", Installed::Ours)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_era_session_survives_replacing_the_helm_chart_crds_with_ours() {
    let Some(crds) = upstream::helm_chart_crds("upgrade from the Helm chart CRDs not run") else {
        return;
    };
    take_over_a_running_go_session(
        Layout::SplitGroups,
        &[],
        "browser.selenosis.io/v1",
        Installed::HelmChartThenOurs(crds),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_era_browser_already_failed_is_completed() {
    let mut env = Env::builder().build();
    confirm_go_pod_deletions(&env);
    go_session(
        &env,
        Layout::Default,
        "gofail",
        "selenosis.io/v1",
        "10.9.0.8",
    )
    .await;
    env.browsers()
        .patch_status(
            "gofail",
            &go_patch(),
            &Patch::Merge(
                json!({"status": {"phase": "Failed", "reason": "ContainerTerminated",
                "message": "pod container seleniferous terminated: Completed (exit code 0)"}}),
            ),
        )
        .await
        .unwrap();
    env.start_operator(&[]);
    env.until("the failed Browser and its pod to be gone", |e| {
        e.browser("gofail").is_none() && e.pod("gofail").is_none()
    })
    .await;
    assert_eq!(operator_pod_creations(&env), 0);
    env.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_era_browser_being_deleted_is_completed_once_its_pod_is_gone() {
    let mut env = Env::builder().build();
    confirm_go_pod_deletions(&env);
    go_session(
        &env,
        Layout::Default,
        "godel",
        "selenosis.io/v1",
        "10.9.0.9",
    )
    .await;
    env.browsers()
        .delete("godel", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        env.browser("godel").unwrap()["metadata"]["deletionTimestamp"].is_string(),
        "the finalizer holds the Browser"
    );
    env.start_operator(&[]);
    // Only a labelled pod's removal reaches the operator through its watch: without the
    // adoption it would wait for the deletion timeout (5m).
    env.until("the Browser and its pod to be gone", |e| {
        e.browser("godel").is_none() && e.pod("godel").is_none()
    })
    .await;
    assert_eq!(operator_pod_creations(&env), 0);
    env.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_both_layouts_installed_the_default_is_selenosis_io_and_flags_pin_the_split_groups() {
    let mut env = Env::builder()
        .crds(
            [Layout::Default, Layout::SplitGroups]
                .iter()
                .flat_map(|l| crd::crds(*l))
                .collect(),
        )
        .build();
    env.create_config("chrome", chrome_spec()).await;
    env.create_config_in(Layout::SplitGroups, "chrome", chrome_spec())
        .await;
    env.create_browser_in(Layout::SplitGroups, browser("split"))
        .await;
    env.start_operator(&[]);
    env.create_browser(browser("default")).await;
    env.until("the selenosis.io Browser to run", |e| {
        is_running(&e.server.get("browsers.selenosis.io", NS, "default"))
    })
    .await;
    let split = env
        .server
        .get("browsers.browser.selenosis.io", NS, "split")
        .expect("split Browser");
    assert!(
        split["metadata"]["finalizers"].is_null(),
        "not seen: {split:#}"
    );
    assert!(split.get("status").is_none());
    env.stop_operator().await;

    env.start_operator(&[
        "--browser-api-group=browser.selenosis.io",
        "--browserconfig-api-group=browserconfig.selenosis.io",
    ]);
    env.until("the split-group Browser to run", |e| {
        is_running(&e.server.get("browsers.browser.selenosis.io", NS, "split"))
    })
    .await;
    let pod = env.pod("split").unwrap();
    assert_eq!(
        pod["metadata"]["ownerReferences"][0]["apiVersion"],
        "browser.selenosis.io/v1"
    );
    env.stop_operator().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_from_other_clients_reconcile_or_fail_clearly_without_blocking_the_queue() {
    let mut env = Env::builder().build();
    env.record_browser_events();
    // An empty config, and one with empty maps, nulls and fields this version does not know.
    env.create_config("empty", json!({"browsers": {}})).await;
    env.create_config("chrome",
        json!({
            "futureField": {"x": 1},
            "template": {"labels": {}, "annotations": null, "env": null,
                "sidecars": [{"name": "seleniferous", "image": "alcounit/seleniferous:v2"}]},
            "browsers": {"chrome": {"139.0": {"image": "selenium/standalone-chrome:139.0", "nodeSelector": {}}}},
        }),
    )
    .await;
    env.start_operator(&[]);
    env.create_browser(
        browser("numeric").spec(json!({"browserName": "chrome", "browserVersion": 120})),
    )
    .await;
    env.create_browser(browser("extra").spec(
        json!({"browserName": "chrome", "browserVersion": "139.0", "futureSpecField": [1, 2]}),
    ))
    .await;
    env.until("the Browser with extra fields to run", |e| {
        is_running(&e.browser("extra"))
    })
    .await;
    env.until("the numeric-version Browser to be gone", |e| {
        e.browser("numeric").is_none()
    })
    .await;
    let failed = env
        .seen_statuses("numeric")
        .into_iter()
        .find(|s| s["phase"] == "Failed")
        .expect("a Failed status was published");
    assert_eq!(failed["reason"], "InvalidSpec");
    assert_eq!(
        failed["message"],
        "invalid Browser spec: spec.browserVersion must be a string, got the number 120; quote it (\"120\") so it is read exactly as written"
    );
    assert!(env.pod("numeric").is_none());
    env.until("both configs to report a status", |e| {
        ["empty", "chrome"].iter().all(|c| {
            e.server
                .get("browserconfigs", NS, c)
                .is_some_and(|c| c["status"]["conditions"].is_array())
        })
    })
    .await;
    env.stop_operator().await;
}
