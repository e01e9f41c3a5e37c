//! Compatibility: taking over Browsers and Pods the Go browser-controller left behind (also
//! across replacing the Helm chart's CRDs with ours), objects written by other clients, and
//! both API-group layouts installed at once.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::core::ApiResource;
use serde_json::{Value, json};

use browser_controller::api::crd::{self, Layout};
use browser_controller::api::keys;

use crate::support::controlplane;
use crate::support::fixtures::{browser, pod};
use crate::support::kinds::{browser_resource, config_resource};
use crate::support::upstream;
use crate::{Ctx, WAIT, poll};

/// Field manager of the Go browser-controller's writes in these scenarios.
const GO_MANAGER: &str = "browser-controller-go";
/// Node of the pods the Go controller started; the kubelet simulator runs another node and
/// leaves them alone, so the scenario plays their kubelet.
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

fn crd_api(cx: &Ctx) -> Api<DynamicObject> {
    cx.be
        .api_all(&ApiResource::erase::<CustomResourceDefinition>(&()))
}

/// Replaces the installed CRDs with `crds` through the API, as `kubectl replace -f`
/// does, leaving the stored objects in place.
async fn replace_crds(cx: &Ctx, crds: Vec<Value>) {
    let api = crd_api(cx);
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
/// containers stopped. Ends with the scenario.
fn confirm_go_pod_deletions(cx: &Arc<Ctx>) {
    let cx = Arc::downgrade(cx);
    tokio::spawn(async move {
        while let Some(cx) = cx.upgrade() {
            let pods = cx.pods();
            for pod in Ctx::list(&pods).await {
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
            drop(cx);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

/// Pod writes by the operator that would make a pod. On the double, by its request log: a
/// create, or a server-side apply under the operator's pod field manager (so a re-apply of
/// the adopted pod counts too); on a real server, by its audit log: the pods created beside
/// the one Go-era pod the scenario made.
fn operator_pod_creations(cx: &Ctx) -> usize {
    match cx.requests() {
        Some(requests) => requests
            .iter()
            .filter(|r| r.resource == "pods" && r.subresource.is_none() && !r.dry_run)
            .filter(|r| r.field_manager.as_deref() != Some(GO_MANAGER))
            .filter(|r| {
                r.verb == "create"
                    || (r.patch_type.as_deref() == Some("apply")
                        && r.field_manager.as_deref() == Some(keys::FIELD_MANAGER))
            })
            .count(),
        None => {
            let creates: usize = cx
                .be
                .pod_creates(&cx.ns)
                .expect("the audit log")
                .values()
                .sum();
            creates.saturating_sub(1)
        }
    }
}

/// A session as the Go browser-controller leaves it: the Browser with the shared
/// finalizer and its status written by merge patches, the pod without the operator's
/// labels, controlled by the Browser's UID under `owner_api_version`, running on the
/// Go-era node. Returns the pod's UID.
async fn go_session(cx: &Ctx, name: &str, owner_api_version: &str, ip: &str) -> String {
    let browsers = cx.browsers();
    let browser = browser(name)
        .namespace(&cx.ns)
        .api_version(&browser_resource(cx.layout).api_version)
        .finalized()
        .object();
    let browser = browsers
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
    browsers
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
        .namespace(&cx.ns)
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
    let pod = cx
        .pods()
        .create(&go_post(), &pod)
        .await
        .expect("Go-era pod created");
    let kubelet_status = json!({"status": {
        "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "10.0.0.2",
        "startTime": started,
        "containerStatuses": [
            {"name": "browser", "image": "selenium/standalone-chrome:139.0", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": started}}},
            {"name": "seleniferous", "image": "alcounit/seleniferous:v1", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": started}}},
        ],
    }});
    cx.pods()
        .patch_status(name, &go_patch(), &Patch::Merge(kubelet_status))
        .await
        .expect("pod status written");
    pod.metadata.uid.expect("pod uid")
}

/// The kubelet reports the seleniferous container terminated: the session ended.
async fn end_go_session(cx: &Ctx, name: &str) {
    let pod = cx.pods().get(name).await.expect("pod");
    let mut status = serde_json::to_value(pod).unwrap()["status"].clone();
    status["containerStatuses"][1]["state"] = json!({"terminated": {
        "exitCode": 0, "reason": "Completed", "startedAt": "2026-01-10T08:00:00Z", "finishedAt": "2026-01-10T08:30:00Z"
    }});
    status["containerStatuses"][1]["ready"] = json!(false);
    cx.pods()
        .patch_status(name, &go_patch(), &Patch::Merge(json!({"status": status})))
        .await
        .expect("pod status written");
}

/// `value` without `key` at any depth.
fn remove_key(value: &mut Value, key: &str) {
    match value {
        Value::Object(map) => {
            map.remove(key);
            map.values_mut().for_each(|v| remove_key(v, key));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| remove_key(v, key)),
        _ => {}
    }
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
    cx: Arc<Ctx>,
    owner_api_version: &str,
    installed: Installed,
) {
    let layout = cx.layout;
    if let Installed::HelmChartThenOurs(crds) = &installed {
        controlplane::apply_crds(&cx.be.client, crds)
            .await
            .expect("the Helm chart's CRDs apply");
    }
    confirm_go_pod_deletions(&cx);
    let pod_uid = go_session(&cx, "go1", owner_api_version, "10.9.0.7").await;
    if let Installed::HelmChartThenOurs(_) = installed {
        replace_crds(&cx, crd::crds(layout)).await;
        let crd = crd_api(&cx)
            .get("browsers.browser.selenosis.io")
            .await
            .expect("the Browser CRD");
        let mut ours = crd::crds(layout)[1]["spec"]["versions"][0]["schema"].clone();
        let minor = cx
            .be
            .minor()
            .await
            .unwrap_or_else(|| panic!("no minor version in /version of {}", cx.be.version));
        // A server before 1.25 stores a CRD without its `x-kubernetes-validations`: CEL
        // validation rules are alpha there, behind a feature gate that is off by default.
        if minor < 25 {
            remove_key(&mut ours, "x-kubernetes-validations");
        }
        assert_eq!(
            crd.data["spec"]["versions"][0]["schema"], ours,
            "our schema is installed"
        );
        assert!(
            cx.browsers().get_opt("go1").await.unwrap().is_some(),
            "the Go-era Browser is kept"
        );
    }
    cx.start_operator(&[]);

    let pod = cx
        .until_object(
            &cx.pods(),
            "go1",
            "the Go-era pod to carry the operator's labels",
            labelled_by_operator,
        )
        .await;
    let browser = cx
        .until_object(
            &cx.browsers(),
            "go1",
            "the Browser to carry the operator's labels and Ready",
            |b| {
                b["metadata"]["labels"][keys::LABEL_BROWSER] == "go1"
                    && b["status"]["conditions"][0]["status"] == "True"
            },
        )
        .await;
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
    assert_eq!(browser["status"]["phase"], "Running");
    assert_eq!(browser["status"]["podIP"], "10.9.0.7");
    assert_eq!(browser["status"]["startTime"], "2026-01-10T08:00:00Z");
    assert_eq!(
        browser["metadata"]["finalizers"],
        json!([keys::FINALIZER]),
        "the shared finalizer is not duplicated"
    );
    assert_eq!(
        operator_pod_creations(&cx),
        0,
        "no pod is created or re-applied"
    );
    match cx.requests() {
        Some(requests) => assert_eq!(
            requests
                .iter()
                .filter(|r| r.is_write() && !r.dry_run && r.status < 300)
                .filter(|r| r.field_manager.as_deref() == Some(keys::ADOPTION_FIELD_MANAGER))
                .count(),
            1,
            "one metadata-only write adopts the pod"
        ),
        // A real server keeps no count of writes by field manager: the adoption's manager
        // owns fields of the pod.
        None => assert!(
            pod["metadata"]["managedFields"]
                .as_array()
                .is_some_and(|m| m
                    .iter()
                    .any(|f| f["manager"] == keys::ADOPTION_FIELD_MANAGER)),
            "the adoption wrote the pod: {pod:#}"
        ),
    }

    // The statuses below are read from the recorded Browser watch: it must be watching
    // before the session ends. It may not have been so far: in a scenario run before the
    // CRDs (the Helm chart's), it started before the Browser kind existed and retries
    // with backoff; replacing a CRD closes its watches.
    poll(WAIT, Duration::from_millis(20), || async {
        cx.seen("Browser", "go1")
            .iter()
            .any(|b| b["metadata"]["labels"][keys::LABEL_BROWSER] == "go1")
            .then_some(())
            .ok_or_else(|| "the recorded watch to see the adopted Browser".to_string())
    })
    .await;
    end_go_session(&cx, "go1").await;
    cx.until_gone("go1").await;
    let seen = cx.seen_statuses("go1");
    let failed: Vec<&Value> = seen.iter().filter(|s| s["phase"] == "Failed").collect();
    assert!(!failed.is_empty(), "{seen:#?}");
    assert!(
        failed.iter().all(|s| s["reason"] == "ContainerTerminated"),
        "never PodLost: {seen:#?}"
    );
    assert_eq!(failed[0]["podIP"], "10.9.0.7");
    assert_eq!(operator_pod_creations(&cx), 0);
    cx.stop_operator().await;
}

pub(crate) async fn a_running_go_era_session_is_adopted_and_cleaned_up_without_recreating_its_pod(
    cx: Arc<Ctx>,
) {
    // The owner reference names the split group while the operator resolved selenosis.io.
    take_over_a_running_go_session(cx, "browser.selenosis.io/v1", Installed::Ours).await;
}

/// Runs in the split layout.
pub(crate) async fn adoption_works_in_the_split_layout_with_an_owner_reference_of_the_other_group(
    cx: Arc<Ctx>,
) {
    take_over_a_running_go_session(cx, "selenosis.io/v1", Installed::Ours).await;
}

/// Runs in the split layout, alone (it replaces the split layout's CRDs), after the
/// scenario that installs ours over every older set, so it finds them and leaves them.
pub(crate) async fn a_go_era_session_survives_replacing_the_helm_chart_crds_with_ours(
    cx: Arc<Ctx>,
) {
    let Some(crds) = upstream::helm_chart_crds("upgrade from the Helm chart CRDs not run") else {
        return;
    };
    take_over_a_running_go_session(
        cx,
        "browser.selenosis.io/v1",
        Installed::HelmChartThenOurs(crds),
    )
    .await;
}

pub(crate) async fn a_go_era_browser_already_failed_is_completed(cx: Arc<Ctx>) {
    confirm_go_pod_deletions(&cx);
    go_session(&cx, "gofail", "selenosis.io/v1", "10.9.0.8").await;
    cx.browsers()
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
    cx.start_operator(&[]);
    cx.until_gone("gofail").await;
    assert_eq!(operator_pod_creations(&cx), 0);
    cx.stop_operator().await;
}

pub(crate) async fn a_go_era_browser_being_deleted_is_completed_once_its_pod_is_gone(cx: Arc<Ctx>) {
    confirm_go_pod_deletions(&cx);
    go_session(&cx, "godel", "selenosis.io/v1", "10.9.0.9").await;
    cx.delete_browser("godel").await;
    let held = cx.browsers().get("godel").await.expect("the Browser");
    assert!(
        held.metadata.deletion_timestamp.is_some(),
        "the finalizer holds the Browser"
    );
    cx.start_operator(&[]);
    // Only a labelled pod's removal reaches the operator through its watch: without the
    // adoption it would wait for the deletion timeout (5m).
    cx.until_gone("godel").await;
    assert_eq!(operator_pod_creations(&cx), 0);
    cx.stop_operator().await;
}

fn is_running(b: &Value) -> bool {
    b["status"]["phase"] == "Running"
}

/// Both layouts are installed (as on every backend of this suite); the scenario runs in the
/// default layout and makes a split-group Browser besides.
pub(crate) async fn with_both_layouts_installed_the_default_is_selenosis_io_and_flags_pin_the_split_groups(
    cx: Arc<Ctx>,
) {
    let split_browsers = cx.api(&browser_resource(Layout::SplitGroups));
    cx.chrome_config().await;
    cx.create(
        &config_resource(Layout::SplitGroups),
        json!({"metadata": {"name": "chrome"}, "spec": cx.chrome_spec()}),
    )
    .await;
    let split = browser("split")
        .namespace(&cx.ns)
        .api_version(&browser_resource(Layout::SplitGroups).api_version)
        .object();
    split_browsers
        .create(&PostParams::default(), &split)
        .await
        .expect("split Browser created");
    cx.start_operator(&[]);
    cx.create_browser("default", json!({})).await;
    cx.until_object(
        &cx.browsers(),
        "default",
        "the selenosis.io Browser to run",
        is_running,
    )
    .await;
    let split: Value = serde_json::to_value(split_browsers.get("split").await.unwrap()).unwrap();
    assert!(
        split["metadata"]["finalizers"].is_null(),
        "not seen: {split:#}"
    );
    assert!(split.get("status").is_none());
    cx.delete_browser("default").await;
    cx.until_gone("default").await;
    cx.stop_operator().await;

    cx.start_operator(&[
        "--browser-api-group=browser.selenosis.io",
        "--browserconfig-api-group=browserconfig.selenosis.io",
    ]);
    cx.until_object(
        &split_browsers,
        "split",
        "the split-group Browser to run",
        is_running,
    )
    .await;
    let pod = cx.pods().get("split").await.expect("the split pod");
    assert_eq!(
        pod.metadata.owner_references.as_ref().unwrap()[0].api_version,
        "browser.selenosis.io/v1"
    );
    split_browsers
        .delete("split", &DeleteParams::default())
        .await
        .expect("split Browser deleted");
    poll(WAIT, Duration::from_millis(50), || async {
        match (
            split_browsers.get_opt("split").await,
            cx.pods().get_opt("split").await,
        ) {
            (Ok(None), Ok(None)) => Ok(()),
            other => Err(format!(
                "the split Browser and its pod to be gone: {other:?}"
            )),
        }
    })
    .await;
    cx.stop_operator().await;
}

pub(crate) async fn objects_from_other_clients_reconcile_or_fail_clearly_without_blocking_the_queue(
    cx: Arc<Ctx>,
) {
    // An empty config, and one with empty maps, nulls and fields this version does not know.
    // A real API server refuses the empty `browsers` map (`minProperties: 1` in our CRD): only
    // the double stores such a config (as a server whose CRD lacked the bound would have).
    let lax = cx.be.double.is_some();
    if lax {
        cx.create_config("empty", json!({"browsers": {}})).await;
    } else {
        println!(
            "    {}: a real API server refuses an empty browsers map: that config skipped",
            cx.ns
        );
    }
    cx.create_config(
        "chrome",
        json!({
            "futureField": {"x": 1},
            "template": {"labels": {}, "annotations": null, "env": null,
                "sidecars": [{"name": "seleniferous", "image": "alcounit/seleniferous:v2"}]},
            "browsers": {"chrome": {"139.0": {"image": cx.be.image, "nodeSelector": {}}}},
        }),
    )
    .await;
    cx.start_operator(&[]);
    let create = |name: &str, spec: Value| {
        let obj = browser(name)
            .namespace(&cx.ns)
            .api_version(&browser_resource(cx.layout).api_version)
            .spec(spec)
            .object();
        let browsers = cx.browsers();
        async move { browsers.create(&PostParams::default(), &obj).await }
    };
    // A real API server refuses a number where the schema says string: only the double
    // stores such a Browser (as a server whose CRD lacked the type would have).
    let numeric = lax;
    if numeric {
        create(
            "numeric",
            json!({"browserName": "chrome", "browserVersion": 120}),
        )
        .await
        .expect("numeric Browser created");
    } else {
        println!(
            "    {}: a real API server refuses a numeric browserVersion: that step skipped",
            cx.ns
        );
    }
    create(
        "extra",
        json!({"browserName": "chrome", "browserVersion": "139.0", "futureSpecField": [1, 2]}),
    )
    .await
    .expect("Browser with extra fields created");
    cx.until_running("extra").await;
    if numeric {
        cx.until("the numeric-version Browser to be gone", |s| {
            s.browser("numeric").is_none()
        })
        .await;
        let failed = cx
            .seen_statuses("numeric")
            .into_iter()
            .find(|s| s["phase"] == "Failed")
            .expect("a Failed status was published");
        assert_eq!(failed["reason"], "InvalidSpec");
        assert_eq!(
            failed["message"],
            "invalid Browser spec: spec.browserVersion must be a string, got the number 120; quote it (\"120\") so it is read exactly as written"
        );
        assert!(cx.pod_uids("numeric").is_empty());
    }
    let configs = cx.api(&config_resource(cx.layout));
    let names: &[&str] = if lax {
        &["empty", "chrome"]
    } else {
        &["chrome"]
    };
    for &name in names {
        cx.until_object(&configs, name, "both configs to report a status", |c| {
            c["status"]["conditions"].is_array()
        })
        .await;
    }
    cx.delete_everything().await;
    cx.stop_operator().await;
}

/// The Go controller puts its finalizer on every BrowserConfig it sees and only it would take
/// it off: after a switch, a config deleted would stay `Terminating` for ever and its name
/// could not be used again. The operator releases it from configs being deleted (never from
/// live ones) and leaves other finalizers alone.
pub(crate) async fn a_deleted_browser_config_the_go_controller_held_goes_and_its_name_is_free(
    cx: Arc<Ctx>,
) {
    let go_finalizer = "browserconfig.selenosis.io/finalizer";
    let config = |finalizers: Value| json!({"metadata": {"name": "go-era", "finalizers": finalizers}, "spec": cx.chrome_spec()});
    let configs = cx.api(&config_resource(cx.layout));
    cx.create(&config_resource(cx.layout), config(json!([go_finalizer])))
        .await;
    cx.start_operator(&[]);
    cx.until_config("go-era", "Valid", "True").await;
    let live = configs.get("go-era").await.expect("the config");
    assert_eq!(
        live.metadata.finalizers.as_deref(),
        Some(&[go_finalizer.to_string()][..]),
        "a live config keeps it"
    );
    configs
        .delete("go-era", &DeleteParams::default())
        .await
        .expect("config deleted");
    cx.until_object_gone(&configs, "go-era").await;
    // The name is free again.
    cx.create(
        &config_resource(cx.layout),
        config(json!(["example.com/other"])),
    )
    .await;
    cx.until_config("go-era", "Valid", "True").await;
    configs
        .delete("go-era", &DeleteParams::default())
        .await
        .expect("config deleted");
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let held = configs
        .get("go-era")
        .await
        .expect("another controller's finalizer holds it");
    assert!(held.metadata.deletion_timestamp.is_some());
    // Release it as that controller would, and the config goes.
    configs
        .patch(
            "go-era",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("finalizer removed");
    cx.until_object_gone(&configs, "go-era").await;
    cx.stop_operator().await;
}
