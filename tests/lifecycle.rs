//! Lifecycle scenarios (docs/behaviour.md, "Lifecycle") that only the in-process API server
//! double can set up or observe: injected faults, dropped watches, the operator's own write
//! metrics, and the requests the server saw. The operator runs in the test process. Everything
//! a real API server can show is in the shared end-to-end suite, `tests/e2e/`.

use testkit as support;

use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use support::apiserver::{ApiServer, Fault};
use support::env::{Env, NS, chrome_spec, condition, is_running};
use support::fixtures::{self, Fixture, browser};
use support::host;
use support::kubelet::Script;

/// A Browser as the hub makes it: labelled with its owner.
fn hub_browser(name: &str) -> Fixture<fixtures::Browser> {
    browser(name)
        .labels(json!({"selenosis.io/owner": "hub"}))
        .annotations(json!({}))
}

/// The write budget of a normal session, from the operator's own metrics (the suite in
/// `tests/e2e/` covers what the session looks like from outside).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_session_costs_at_most_8_writes() {
    let env = Env::start(&[]).await;
    env.chrome_config().await;
    env.kubelet.set(
        "s1",
        Script::ExitAfterRunning {
            container: "seleniferous".into(),
            exit_code: 0,
            after: Duration::from_millis(300),
        },
    );
    env.create_browser(hub_browser("s1")).await;
    env.until("s1 running", |e| is_running(&e.browser("s1")))
        .await;
    let failure = env.failure_of("s1").await;
    assert_eq!(failure["reason"], "ContainerTerminated");
    env.until_gone("s1").await;
    let writes = env.operator_writes();
    eprintln!("normal session: {writes} operator writes to Browsers and Pods");
    assert!(
        writes <= 8,
        "a normal session took {writes} writes:\n{}",
        env.metrics.encode().unwrap()
    );
    assert_eq!(env.pod_applies(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_create_errors_are_retried() {
    let env = Env::start(&[]).await;
    env.chrome_config().await;
    env.server.inject(
        Fault::new(
            "create",
            "pods",
            500,
            "InternalError",
            "etcd leader changed",
        )
        .object(NS, "r1")
        .times(2),
    );
    env.create_browser(hub_browser("r1")).await;
    env.until("r1 running after retries", |e| is_running(&e.browser("r1")))
        .await;
    assert!(
        env.seen_statuses("r1")
            .iter()
            .all(|s| s["phase"] != "Failed")
    );
}

/// Requests of `verb` (`patch` includes applies that create) on `resource` (`browsers/status`
/// for a subresource) for `name`, dry runs aside, whatever they were answered.
fn requests_for(env: &Env, verb: &str, resource: &str, name: &str) -> usize {
    let (resource, sub) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (resource, None),
    };
    env.server
        .requests()
        .iter()
        .filter(|r| {
            r.resource == resource
                && r.subresource.as_deref() == sub
                && r.name.as_deref() == Some(name)
                && r.verb == verb
                && !r.dry_run
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_create_refused_for_an_unknown_reason_fails_the_browser_after_three_tries() {
    let env = Env::start(&[]).await;
    env.chrome_config().await;
    env.server.inject(
        Fault::new(
            "create",
            "pods",
            413,
            "RequestEntityTooLarge",
            "Request entity too large: limit is 3145728",
        )
        .object(NS, "big"),
    );
    env.create_browser(hub_browser("big")).await;
    let failure = env.failure_of("big").await;
    assert_eq!(failure["reason"], "WriteRejected");
    assert_eq!(
        failure["message"],
        "the API server refused to create pod 3 times: 413 RequestEntityTooLarge: Request entity too large: limit is 3145728"
    );
    env.until_gone("big").await;
    assert_eq!(requests_for(&env, "patch", "pods", "big"), 3, "three tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_write_refused_for_good_fails_the_browser_naming_the_answer() {
    let env = Env::start(&[]).await;
    env.chrome_config().await;
    env.server.inject(
        Fault::new(
            "patch",
            "browsers",
            422,
            "Invalid",
            "Browser.selenosis.io \"meta\" is invalid: metadata.labels: Invalid value",
        )
        .object(NS, "meta"),
    );
    env.create_browser(hub_browser("meta")).await;
    let failure = env.failure_of("meta").await;
    assert_eq!(failure["reason"], "WriteRejected");
    assert!(
        failure["message"].as_str().unwrap().starts_with(
            "the API server refused to apply Browser finalizer and labels 3 times: 422 Invalid: "
        ),
        "{failure}"
    );
    // Its deletion goes without the finalizer the refused write would have added.
    env.until_gone("meta").await;
    assert_eq!(env.pod_creates("meta"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_whose_status_is_always_refused_is_deleted_not_retried_forever() {
    let env = Env::start(&[]).await;
    env.chrome_config().await;
    env.server.inject(
        Fault::new(
            "patch",
            "browsers",
            413,
            "RequestEntityTooLarge",
            "Request entity too large",
        )
        .subresource("status")
        .object(NS, "mute"),
    );
    env.create_browser(hub_browser("mute")).await;
    // No status can be written: the Browser is deleted, its pod with it.
    env.until_gone("mute").await;
    let status_writes = requests_for(&env, "patch", "browsers/status", "mute");
    assert!(
        (6..=10).contains(&status_writes),
        "a bounded number of status writes: {status_writes}"
    );
    env.until("the deletion is told in an Event", |e| {
        e.event_reasons("mute").iter().any(|r| r == "WriteRejected")
    })
    .await;
    // Nothing more is tried once it is gone.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        requests_for(&env, "patch", "browsers/status", "mute"),
        status_writes
    );
}

/// A config with a privileged sidecar (`testdata/configs/privileged-sidecar.yaml` in short).
fn privileged_config() -> Value {
    json!({"browsers": {"chrome": {"139.0": {
        "image": "selenium/standalone-chrome:139.0",
        "sidecars": [{"name": "docker", "image": "docker:dind", "securityContext": {"privileged": true}}],
    }}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_above_the_pod_security_ceiling_is_invalid_and_its_browsers_fail() {
    let env = Env::start(&[]).await;
    env.create_config("privileged", privileged_config()).await;
    let conditions = env.judged_conditions("privileged").await;
    let valid = condition(&conditions, "Valid").unwrap();
    assert_eq!(valid["status"], "False", "{valid}");
    let field = "spec.containers[1] (docker).securityContext.privileged is true";
    let message = valid["message"].as_str().unwrap();
    assert!(
        message.contains("above the operator's pod security level baseline")
            && message.contains(field),
        "{message}"
    );
    env.create_browser(hub_browser("p1")).await;
    let failure = env.failure_of("p1").await;
    assert_eq!(failure["reason"], "InvalidConfig");
    assert!(
        failure["message"].as_str().unwrap().contains(field),
        "{failure}"
    );
    env.until_gone("p1").await;
    assert_eq!(env.pod_creates("p1"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_privileged_level_lets_the_same_entry_run() {
    let env = Env::start(&["--pod-security-level=privileged"]).await;
    env.create_config("privileged", privileged_config()).await;
    let conditions = env.judged_conditions("privileged").await;
    assert_eq!(condition(&conditions, "Valid").unwrap()["status"], "True");
    env.create_browser(hub_browser("p1")).await;
    env.until("p1 Running", |e| is_running(&e.browser("p1")))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_config_does_not_disturb_sessions_that_have_their_pod() {
    let env = Env::start(&[]).await;
    env.chrome_config().await;
    env.create_browser(hub_browser("keep")).await;
    env.until("running", |e| is_running(&e.browser("keep")))
        .await;
    env.configs()
        .delete("chrome", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(is_running(&env.browser("keep")));
    // A new Browser now finds no config.
    env.create_browser(hub_browser("late")).await;
    assert_eq!(env.failure_of("late").await["reason"], "ConfigNotFound");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_watches_are_resumed_and_sessions_still_run() {
    let env = Env::start(&[]).await;
    env.chrome_config().await;
    env.create_browser(hub_browser("w1")).await;
    env.until("w1 running", |e| is_running(&e.browser("w1")))
        .await;
    env.server.drop_watches();
    env.create_browser(hub_browser("w2")).await;
    env.until("w2 running after the watches were dropped", |e| {
        is_running(&e.browser("w2"))
    })
    .await;
    assert_eq!(env.pod_applies(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_config_reports_valid_and_ready_with_its_generation() {
    let env = Env::start(&[]).await;
    env.chrome_config().await;
    env.until("config status", |e| {
        e.server
            .get("browserconfigs", NS, "chrome")
            .is_some_and(|c| c["status"]["observedGeneration"] == 1)
    })
    .await;
    let status = env.server.get("browserconfigs", NS, "chrome").unwrap()["status"].clone();
    assert!(
        status["version"].as_str().is_some_and(|v| v.len() == 16),
        "{status}"
    );
    assert!(status["lastUpdated"].is_string());
    let conditions = status["conditions"].as_array().unwrap();
    for kind in ["Valid", "Ready"] {
        assert!(
            conditions
                .iter()
                .any(|c| c["type"] == kind && c["status"] == "True"),
            "{status}"
        );
    }
    // The dry run reached the API server as a dry run, and stored nothing.
    assert!(
        env.server
            .requests()
            .iter()
            .any(|r| r.resource == "pods" && r.dry_run)
    );
    assert!(env.server.list("pods", NS).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_refusing_the_dry_run_leaves_validity_unknown_with_one_event_and_backoff() {
    let env = Env::start(&[]).await;
    // A ResourceQuota of `pods: 0`: admission forbids even a dry-run create.
    let quota = "exceeded quota: zero, requested: pods=1, used: pods=0, limited: pods=0";
    env.server.inject(Fault::new(
        "create",
        "pods",
        403,
        "Forbidden",
        &format!("pods \"browserconfig-dry-run\" is forbidden: {quota}"),
    ));
    env.chrome_config().await;
    let refused_dry_runs = |e: &Env| {
        e.server
            .requests()
            .iter()
            .filter(|r| r.resource == "pods" && r.dry_run && r.status == 403)
            .count()
    };
    // The first attempt, and a retry after the first wait (5s), both refused.
    env.until("two refused dry runs", |e| refused_dry_runs(e) >= 2)
        .await;
    let conditions = env.judged_conditions("chrome").await;
    let valid = condition(&conditions, "Valid").unwrap();
    assert_eq!(valid["status"], "Unknown", "{valid}");
    assert_eq!(valid["reason"], "ValidationRefused", "{valid}");
    let message = valid["message"].as_str().unwrap();
    assert!(message.contains("validity is unknown"), "{message}");
    assert!(message.contains(quota), "{message}");
    // Browsers still use the config: its entries are fine as far as anyone can tell.
    assert_eq!(condition(&conditions, "Ready").unwrap()["status"], "True");
    // Retried with backoff, not in a loop.
    assert!(refused_dry_runs(&env) <= 3, "{}", refused_dry_runs(&env));
    let notes = env.warnings("chrome", "ValidationRefused");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains(quota), "{notes:?}");

    // The quota goes: the next attempt (10s after the second) judges the config.
    env.server.clear_faults();
    env.until("the config judged valid", |e| {
        e.server
            .get("browserconfigs", NS, "chrome")
            .and_then(|c| c["status"]["conditions"].as_array().cloned())
            .is_some_and(|cs| condition(&cs, "Valid").is_some_and(|v| v["status"] == "True"))
    })
    .await;
    assert_eq!(env.warnings("chrome", "ValidationRefused").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_younger_config_defining_the_same_entry_reports_a_conflict_naming_the_winner() {
    let env = Env::start(&[]).await;
    env.chrome_config().await;
    // Creation timestamps have second resolution: make the second config clearly younger.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    env.create_config("chrome-copy", chrome_spec()).await;
    env.until("conflict condition", |e| {
        e.server
            .get("browserconfigs", NS, "chrome-copy")
            .is_some_and(|c| {
                c["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c["type"] == "Conflict"
                            && c["status"] == "True"
                            && c["message"]
                                .as_str()
                                .is_some_and(|m| m.contains("BrowserConfig chrome,"))
                    })
                })
            })
    })
    .await;
    let winner = env.server.get("browserconfigs", NS, "chrome").unwrap();
    let conditions = winner["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        conditions.iter().all(|c| c["type"] != "Conflict"),
        "{winner}"
    );
}

// The cluster's Pod schema (issue 7): fields an older cluster does not know are removed
// before the pod is applied, and reported.

const CONTAINER: &str = "io.k8s.api.core.v1.Container";
const RESOURCES: &str = "io.k8s.api.core.v1.ResourceRequirements";
const NATIVE_SIDECAR: &str = "spec.initContainers[seleniferous].restartPolicy";
const CLAIMS: &str = "spec.containers[browser].resources.claims";

/// A config with a native sidecar (`restartPolicy: Always` on an init container, 1.28+)
/// and a browser container using `resources.claims` (1.26+).
fn sidecar_spec() -> Value {
    json!({
        "template": {
            "initContainers": [{"name": "seleniferous", "image": "alcounit/seleniferous:v2",
                "restartPolicy": "Always", "ports": [{"containerPort": 4445}]}],
            "ports": [{"containerPort": 4444}],
        },
        "browsers": {"chrome": {"139.0": {"image": "selenium/standalone-chrome:139.0",
            "resources": {"limits": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}}}
    })
}

/// A server that serves its Pod schema (the newest) and rejects applies carrying fields
/// the schema lacks.
fn current_cluster() -> ApiServer {
    let server = ApiServer::new();
    server.serve_openapi(true, true);
    server.check_pod_fields(500);
    server
}

/// A server whose Pod schema predates native sidecars and resource claims, and which, like
/// Kubernetes 1.24, rejects server-side applies carrying them with HTTP 500.
fn older_cluster() -> ApiServer {
    let server = current_cluster();
    server.remove_schema_field(CONTAINER, "restartPolicy");
    server.remove_schema_field(RESOURCES, "claims");
    server
}

/// The pod lacks both newer fields and keeps everything else of the entry.
fn assert_pruned(pod: &Value) {
    let sidecar = &pod["spec"]["initContainers"][0];
    assert_eq!(sidecar["name"], "seleniferous", "{pod:#}");
    assert!(sidecar.get("restartPolicy").is_none(), "{pod:#}");
    assert_eq!(sidecar["ports"][0]["containerPort"], 4445, "{pod:#}");
    let resources = &pod["spec"]["containers"][0]["resources"];
    assert!(resources.get("claims").is_none(), "{pod:#}");
    assert_eq!(resources["limits"]["cpu"], "1", "{pod:#}");
}

/// The Warning event on the Browser and the BrowserConfig condition name both fields.
async fn assert_reported(env: &Env) {
    env.until("the PodFieldsRemoved event", |e| {
        !e.warnings("s1", "PodFieldsRemoved").is_empty()
    })
    .await;
    let notes = env.warnings("s1", "PodFieldsRemoved");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("Pod schema does not declare")
            && notes[0].contains(NATIVE_SIDECAR)
            && notes[0].contains(CLAIMS),
        "{notes:?}"
    );
    env.until_config_condition("sidecars", "PodFieldsRemoved")
        .await;
    let conditions = env.judged_conditions("sidecars").await;
    let removed = condition(&conditions, "PodFieldsRemoved").unwrap();
    assert_eq!(removed["status"], "True");
    assert_eq!(removed["reason"], "UnknownPodFields");
    let message = removed["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("chrome 139.0: {NATIVE_SIDECAR}, {CLAIMS}")),
        "{message}"
    );
    // The entry is usable: removing the fields is not a rejection.
    assert_eq!(condition(&conditions, "Valid").unwrap()["status"], "True");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_older_cluster_fields_it_lacks_are_removed_and_reported() {
    let env = Env::builder().server(older_cluster()).start(&[]).await;
    let pod = run_sidecar_browser(&env).await;
    assert_pruned(&pod);
    assert_reported(&env).await;
    // Read once, at start-up, from OpenAPI v3; nothing was rejected, so no refetch.
    let fetched = env.openapi_requests();
    assert_eq!(
        fetched.iter().filter(|(p, _)| p == "/openapi/v3").count(),
        1,
        "{fetched:?}"
    );
    assert!(fetched.iter().all(|(_, code)| *code == 200), "{fetched:?}");
    assert_eq!(env.pod_applies(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_current_cluster_nothing_is_removed_or_reported() {
    let env = Env::builder().server(current_cluster()).start(&[]).await;
    let pod = run_sidecar_browser(&env).await;
    assert_eq!(pod["spec"]["initContainers"][0]["restartPolicy"], "Always");
    assert_eq!(
        pod["spec"]["containers"][0]["resources"]["claims"],
        json!([{"name": "gpu"}])
    );
    let conditions = env.judged_conditions("sidecars").await;
    assert!(
        condition(&conditions, "PodFieldsRemoved").is_none(),
        "{conditions:?}"
    );
    assert!(env.event_reasons("s1").contains(&"PodCreated".to_string()));
    assert!(env.warnings("s1", "PodFieldsRemoved").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_openapi_v3_the_v2_document_is_used() {
    let server = older_cluster();
    server.serve_openapi(false, true);
    let env = Env::builder().server(server).start(&[]).await;
    let pod = run_sidecar_browser(&env).await;
    assert_pruned(&pod);
    assert_reported(&env).await;
    let fetched = env.openapi_requests();
    assert!(
        fetched.contains(&("/openapi/v3".to_string(), 404))
            && fetched.contains(&("/openapi/v2".to_string(), 200)),
        "{fetched:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_any_schema_the_operator_runs_and_applies_pods_unpruned() {
    let server = ApiServer::new();
    server.remove_schema_field(CONTAINER, "restartPolicy");
    server.serve_openapi(false, false);
    let env = Env::builder().server(server).start(&[]).await;
    let pod = run_sidecar_browser(&env).await;
    assert_eq!(pod["spec"]["initContainers"][0]["restartPolicy"], "Always");
    let conditions = env.judged_conditions("sidecars").await;
    assert!(condition(&conditions, "PodFieldsRemoved").is_none());
    assert!(env.warnings("s1", "PodFieldsRemoved").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_after_the_schema_changed_refetches_it_and_the_browser_still_runs() {
    let server = current_cluster();
    server.check_pod_fields(422);
    let env = Env::builder().server(server).start(&[]).await;
    env.until("the start-up schema read", |e| {
        e.openapi_requests()
            .iter()
            .any(|(p, code)| p.starts_with("/openapi/v3/api/v1") && *code == 200)
    })
    .await;
    env.create_config("sidecars", sidecar_spec()).await;
    let conditions = env.judged_conditions("sidecars").await;
    assert!(condition(&conditions, "PodFieldsRemoved").is_none());
    // The cluster now lacks the fields (a downgrade, another API server behind the load
    // balancer): the schema the operator holds is stale, and newer servers answer 422.
    env.server.remove_schema_field(CONTAINER, "restartPolicy");
    env.server.remove_schema_field(RESOURCES, "claims");
    let pod = run_s1(&env).await;
    assert_pruned(&pod);
    assert_reported(&env).await;
    let v3_reads = env
        .openapi_requests()
        .iter()
        .filter(|(p, _)| p == "/openapi/v3")
        .count();
    assert!(v3_reads >= 2, "{:?}", env.openapi_requests());
    // The rejected apply did not fail the Browser; its pod was created once, pruned.
    let rejected = env
        .server
        .requests()
        .iter()
        .filter(|r| r.resource == "pods" && !r.dry_run && r.status == 422)
        .count();
    assert_eq!(rejected, 1);
    assert_eq!(env.pod_applies(), 2);
    let reasons = env.event_reasons("s1");
    assert_eq!(reasons.iter().filter(|r| *r == "PodCreated").count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_rejected_for_a_stale_schema_is_judged_again_with_the_new_one() {
    let env = Env::builder().server(current_cluster()).start(&[]).await;
    env.until("the start-up schema read", |e| {
        e.openapi_requests()
            .iter()
            .any(|(p, code)| p.starts_with("/openapi/v3/api/v1") && *code == 200)
    })
    .await;
    env.server.remove_schema_field(CONTAINER, "restartPolicy");
    env.server.remove_schema_field(RESOURCES, "claims");
    // The config's first dry run carries the fields and is rejected; the entry is not
    // called invalid for it, but judged again with the refetched schema.
    env.create_config("sidecars", sidecar_spec()).await;
    env.until_config_condition("sidecars", "PodFieldsRemoved")
        .await;
    let rejected_dry_runs = env
        .server
        .requests()
        .iter()
        .filter(|r| r.resource == "pods" && r.dry_run && r.status == 500)
        .count();
    assert_eq!(rejected_dry_runs, 1);
    let pod = run_s1(&env).await;
    assert_pruned(&pod);
    assert_reported(&env).await;
}

/// The sequence behind a Browser that got three pods when its API server restarted: the
/// Pending write is lost (503), the Browser watch lags while pods are still watched, the
/// pod fails and the operator fails the Browser, force-deletes the pod and deletes the
/// Browser, and the Browser cache still holds the Browser as it was before any status; a
/// BrowserConfig change then looks again at the Browsers that seem to wait for their pod, and
/// the stale Browser events arrive afterwards. Nothing of that may make a second pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_gets_one_pod_while_its_cache_lags_through_its_failure() {
    let env = Env::start(&[]).await;
    env.chrome_config().await;
    // The pod fails, so the operator force-deletes it: it is gone at once.
    env.kubelet.set("once", Script::OomKilled);
    env.server.inject(
        Fault::new(
            "patch",
            "browsers",
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        )
        .subresource("status")
        .object(NS, "once"),
    );
    env.create_browser(hub_browser("once")).await;
    env.until("the pod", |e| e.pod("once").is_some()).await;
    env.server.hold_watches("browsers");
    env.server.clear_faults();
    env.until("the Browser and its pod gone", |e| {
        e.pod("once").is_none() && e.browser("once").is_none()
    })
    .await;
    env.configs()
        .patch(
            "chrome",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .expect("config changed");
    tokio::time::sleep(Duration::from_secs(1)).await;
    env.server.release_watches();
    tokio::time::sleep(Duration::from_secs(1)).await;
    env.until_gone("once").await;
    assert_eq!(env.pod_creates("once"), 1, "one pod, ever");
    assert_eq!(env.failure_of("once").await["reason"], "OOMKilled");
}

/// A Browser removed behind the operator's back (its finalizer taken off by hand) while the
/// operator's cache still shows it: the 404 of the next write is the operator's last write
/// for it; the pod it controlled is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_more_is_written_for_a_browser_the_api_answered_404_for() {
    let env = Env::start(&[]).await;
    env.chrome_config().await;
    env.create_browser(hub_browser("vanish")).await;
    env.until("vanish running", |e| is_running(&e.browser("vanish")))
        .await;
    env.stall_browser_watch();
    let browsers = env.browsers();
    browsers
        .patch(
            "vanish",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("finalizer removed by hand");
    browsers
        .delete("vanish", &DeleteParams::default())
        .await
        .expect("Browser deleted");
    assert!(env.browser("vanish").is_none());
    // The pod fails: a reconcile on the stale Browser wants to write the failure.
    env.pods()
        .patch_status(
            "vanish",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}})),
        )
        .await
        .expect("pod status");
    env.until("the 404 for the Browser", |e| {
        e.server.requests().iter().any(|r| {
            r.resource == "browsers" && r.name.as_deref() == Some("vanish") && r.status == 404
        })
    })
    .await;
    env.until("the pod deleted", |e| e.pod("vanish").is_none())
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.server.clear_faults();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let requests = env.server.requests();
    let first_404 = requests
        .iter()
        .position(|r| {
            r.resource == "browsers" && r.name.as_deref() == Some("vanish") && r.status == 404
        })
        .unwrap();
    let later: Vec<String> = requests[first_404 + 1..]
        .iter()
        .filter(|r| r.is_write() && r.name.as_deref() == Some("vanish"))
        .filter(|r| r.resource == "browsers" || r.patch_type.as_deref() == Some("apply"))
        .map(|r| {
            format!(
                "{} {} {:?} -> {}",
                r.verb, r.resource, r.subresource, r.status
            )
        })
        .collect();
    assert!(later.is_empty(), "written after the 404: {later:?}");
    assert_eq!(env.pod_creates("vanish"), 1);
}

/// The API server is away for longer than kube-runtime's default watch backoff would wait
/// out quickly: once it answers again, the watches resume within seconds, and Browsers
/// created right then get their status within seconds, not after a backoff that grew during
/// the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_api_outage_new_browsers_get_a_status_within_seconds() {
    let env = Env::start(&[]).await;
    env.chrome_config().await;
    env.create_browser(hub_browser("before")).await;
    env.until("before running", |e| is_running(&e.browser("before")))
        .await;
    env.server.set_unavailable(true);
    tokio::time::sleep(Duration::from_secs(12)).await;
    env.server.set_unavailable(false);
    let back = tokio::time::Instant::now();
    let names: Vec<String> = (0..5).map(|i| format!("after{i}")).collect();
    for name in &names {
        env.create_browser(hub_browser(name)).await;
    }
    host::until_async(
        "a status on every Browser created after the outage",
        Duration::from_secs(5),
        || {
            names.iter().all(|n| {
                env.browser(n)
                    .is_some_and(|b| b["status"]["phase"].is_string())
            })
        },
        || format!("{:#?}", env.server.list("browsers", NS)),
    )
    .await;
    eprintln!(
        "statuses {:?} after the API server was back",
        back.elapsed()
    );
    for name in &names {
        env.until("Running", |e| is_running(&e.browser(name))).await;
    }
    let text = env.metrics.encode().unwrap();
    for family in [
        "browser_controller_watch_restarts_total{resource=\"browsers\"}",
        "browser_controller_watch_resync_seconds_count{resource=\"browsers\"}",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(family) && !l.ends_with(" 0")),
            "{family} in\n{text}"
        );
    }
    assert_eq!(env.pod_applies(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_prepull_flag_a_config_that_asks_hears_so_and_nothing_is_pulled() {
    let env = Env::start(&[]).await;
    env.create_config(
        "chrome",
        json!({
            "template": {"prePull": true},
            "browsers": {"chrome": {"139.0": {"image": "selenium/standalone-chrome:139.0"}}}
        }),
    )
    .await;
    let conditions = env.judged_conditions("chrome").await;
    let pre_pulled = condition(&conditions, "PrePulled").expect("a PrePulled condition");
    assert_eq!(pre_pulled["status"], "False");
    assert_eq!(pre_pulled["reason"], "PrePullDisabled");
    let status = &env.server.get("browserconfigs", NS, "chrome").unwrap()["status"];
    assert!(status.get("prePull").is_none(), "{status}");
    // The operator does not even look at DaemonSets.
    assert!(
        env.server
            .requests()
            .iter()
            .all(|r| r.resource != "daemonsets"),
        "DaemonSets were requested without --enable-prepull"
    );
}

const PREPULL_SPEC: &str = r#"{
    "template": {"prePull": true, "nodeSelector": {"pool": "browsers"}},
    "browsers": {"chrome": {"139.0": {"image": "selenium/standalone-chrome:139.0"}}}
}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_deleted_while_the_operator_was_away_loses_its_daemon_sets_on_its_return() {
    let mut env = Env::start(&["--enable-prepull"]).await;
    env.create_config("chrome", serde_json::from_str(PREPULL_SPEC).unwrap())
        .await;
    env.until("a pre-pull DaemonSet", |e| e.daemon_sets().len() == 1)
        .await;
    env.stop_operator().await;
    env.configs()
        .delete("chrome", &Default::default())
        .await
        .expect("config deleted");
    // Nothing collects garbage here: the DaemonSet stays until the operator sweeps it.
    assert_eq!(env.daemon_sets().len(), 1);
    env.start_operator(&["--enable-prepull"]);
    env.until("the DaemonSet swept", |e| e.daemon_sets().is_empty())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_set_the_cluster_refuses_is_reported_with_a_warning_and_not_retried_at_once() {
    let env = Env::start(&["--enable-prepull"]).await;
    env.server.inject(Fault::new(
        "create",
        "daemonsets.apps",
        422,
        "Invalid",
        "DaemonSet.apps \"chrome-prepull-x\" is invalid: spec.template.spec.runtimeClassName: Invalid value",
    ));
    env.create_config("chrome", serde_json::from_str(PREPULL_SPEC).unwrap())
        .await;
    env.until_config_condition("chrome", "PrePulled").await;
    let conditions = env.judged_conditions("chrome").await;
    let pre_pulled = condition(&conditions, "PrePulled").unwrap();
    assert_eq!(pre_pulled["status"], "False");
    assert_eq!(pre_pulled["reason"], "ApplyFailed");
    assert!(
        pre_pulled["message"]
            .as_str()
            .is_some_and(|m| m.contains("runtimeClassName: Invalid value")),
        "{pre_pulled}"
    );
    env.until("a PrePullFailed Warning", |e| {
        e.event_reasons("chrome")
            .contains(&"PrePullFailed".to_string())
    })
    .await;
    // The echoes of its own writes (and the first lists) may try again; then it waits.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let applies = || {
        env.server
            .requests()
            .iter()
            .filter(|r| r.resource == "daemonsets" && r.verb == "patch")
            .count()
    };
    let before = applies();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        applies(),
        before,
        "a refused DaemonSet is not retried at once"
    );
    assert!(env.daemon_sets().is_empty());
}

/// Runs `s1` on the sidecar config and returns its pod.
async fn run_sidecar_browser(env: &Env) -> Value {
    env.create_config("sidecars", sidecar_spec()).await;
    run_s1(env).await
}

async fn run_s1(env: &Env) -> Value {
    env.create_browser(hub_browser("s1")).await;
    env.until("s1 running", |e| is_running(&e.browser("s1")))
        .await;
    env.pod("s1").unwrap()
}
