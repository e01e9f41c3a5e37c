//! Lifecycle scenarios (docs/behaviour.md, "Lifecycle") that need what only the API server
//! double can set up or observe: injected faults, dropped and held watches, an outage, the
//! Pod schema it serves, and the requests it saw. The scenarios that change the whole server
//! run on a double of their own (`own_double`); the others take their double-only steps where
//! `cx.requests()` answers and run everywhere.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::apiserver::{ApiServer, Fault, StreamingLists};
use crate::support::history::{self, Seen};
use crate::support::kinds::config_resource;
use crate::support::kubelet::Script;
use crate::{Ctx, WAIT, poll, resource};

// ---- the double each scenario of its own runs on --------------------------------------------

/// The double the in-process suites ran on: no Pod schema served.
pub(crate) fn plain() -> ApiServer {
    ApiServer::new()
}

/// A server that serves its Pod schema (the newest) and rejects applies carrying fields
/// the schema lacks.
pub(crate) fn current_cluster() -> ApiServer {
    let server = ApiServer::new();
    server.serve_openapi(true, true);
    server.check_pod_fields(500);
    server
}

/// [`current_cluster`] answering such applies with 422, as newer servers do.
pub(crate) fn current_cluster_answering_422() -> ApiServer {
    let server = current_cluster();
    server.check_pod_fields(422);
    server
}

/// A server whose Pod schema predates native sidecars and resource claims, and which, like
/// Kubernetes 1.24, rejects server-side applies carrying them with HTTP 500.
pub(crate) fn older_cluster() -> ApiServer {
    let server = current_cluster();
    server.remove_schema_field(CONTAINER, "restartPolicy");
    server.remove_schema_field(RESOURCES, "claims");
    server
}

/// [`older_cluster`] without OpenAPI v3.
pub(crate) fn older_cluster_without_v3() -> ApiServer {
    let server = older_cluster();
    server.serve_openapi(false, true);
    server
}

/// A server that serves no Pod schema at all, and lacks native sidecars.
pub(crate) fn cluster_without_schema() -> ApiServer {
    let server = ApiServer::new();
    server.remove_schema_field(CONTAINER, "restartPolicy");
    server.serve_openapi(false, false);
    server
}

/// A server without streaming lists, as before Kubernetes 1.27 (or with `WatchList` off).
pub(crate) fn cluster_without_streaming_lists() -> ApiServer {
    let server = ApiServer::new();
    server.streaming_lists(StreamingLists::Refused);
    server
}

/// A server that offers streaming lists but whose storage cannot serve them (1.3x on etcd
/// 3.4): each ends in an error before the list is complete.
pub(crate) fn cluster_with_unservable_streaming_lists() -> ApiServer {
    let server = ApiServer::new();
    server.streaming_lists(StreamingLists::Unservable);
    server
}

// ---- what these scenarios ask ---------------------------------------------------------------

fn condition<'a>(conditions: &'a [Value], kind: &str) -> Option<&'a Value> {
    conditions.iter().find(|c| c["type"] == kind)
}

impl Ctx {
    /// The double this scenario runs on.
    fn server(&self) -> &ApiServer {
        &self.be.double.as_ref().expect("a scenario on the double").0
    }

    /// This namespace's requests in the double's log (see [`Ctx::requests`]).
    fn logged(&self) -> Vec<crate::RequestRecord> {
        self.requests().expect("a scenario on the double")
    }

    /// Requests of `verb` (`patch` includes applies that create) on `resource`
    /// (`browsers/status` for a subresource) for `name`, dry runs aside, whatever they were
    /// answered.
    fn requests_for(&self, verb: &str, resource: &str, name: &str) -> usize {
        let (resource, sub) = match resource.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (resource, None),
        };
        self.logged()
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

    /// Pod applies (not dry runs), whatever they were answered.
    fn pod_applies(&self) -> usize {
        self.logged()
            .iter()
            .filter(|r| {
                r.resource == "pods"
                    && r.patch_type.as_deref() == Some("apply")
                    && !r.dry_run
                    && r.subresource.is_none()
            })
            .count()
    }

    /// How many times a pod `name` was created, by the server's own record (the double's
    /// request log, a control plane's audit log).
    fn pod_creates_of(&self, name: &str) -> usize {
        self.be
            .pod_creates(&self.ns)
            .expect("a backend that records pod creations")
            .get(name)
            .copied()
            .unwrap_or(0)
    }

    /// The operator's lists and watches of Browsers, pods and BrowserConfigs (it watches every
    /// namespace, so they are not this namespace's): verb, resource, whether the watch asked
    /// for its list streamed, and the answer's status.
    fn operator_reads(&self) -> Reads {
        let operator = crate::operator_user();
        self.server()
            .requests()
            .into_iter()
            .filter(|r| {
                r.user.as_deref() == Some(operator.as_str())
                    && matches!(r.verb.as_str(), "list" | "watch")
                    && matches!(r.resource.as_str(), "browsers" | "pods" | "browserconfigs")
            })
            .map(|r| (r.verb, r.resource, r.streamed_list, r.status))
            .collect()
    }

    /// Makes every watch of the operator relist: each ends in `410 Expired`. (A compaction and
    /// dropped streams would not do: a watch that had seen the last change resumes from it.)
    fn force_relists(&self) {
        self.server().expire_watches();
    }

    /// GETs of an OpenAPI document, with their status codes.
    fn openapi_requests(&self) -> Vec<(String, u16)> {
        self.server()
            .requests()
            .iter()
            .filter(|r| r.path.starts_with("/openapi/"))
            .map(|r| (r.path.clone(), r.status))
            .collect()
    }

    /// Makes the operator's Browser cache stall: every Browser watch and list fails, so the
    /// cache keeps what it last saw, while the other watches resume at once.
    fn stall_browser_watch(&self) {
        for verb in ["watch", "list"] {
            self.server().inject(Fault::new(
                verb,
                "browsers",
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ));
        }
        self.server().drop_watches();
    }

    async fn config(&self, name: &str) -> Option<Value> {
        let api = self.api(&config_resource(self.layout));
        let config = api.get_opt(name).await.ok().flatten()?;
        Some(serde_json::to_value(config).unwrap())
    }

    /// The BrowserConfig's conditions once it reports `Valid` for its current generation.
    async fn judged_conditions(&self, name: &str) -> Vec<Value> {
        let config = self
            .until_config_is(name, &format!("{name} judged"), |c| {
                c["status"]["observedGeneration"] == c["metadata"]["generation"]
                    && c["status"]["conditions"]
                        .as_array()
                        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Valid"))
            })
            .await;
        config["status"]["conditions"].as_array().unwrap().clone()
    }

    /// Waits until the BrowserConfig `name` carries a condition of type `kind`.
    async fn until_config_condition(&self, name: &str, kind: &str) {
        self.until_config_is(name, &format!("the {kind} condition of {name}"), |c| {
            c["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| condition(cs, kind).is_some())
        })
        .await;
    }

    /// Notes of the Warning Events about `name` with `reason`.
    async fn warnings(&self, name: &str, reason: &str) -> Vec<String> {
        let events = self.api(&resource("events.k8s.io", "Event", "events"));
        Ctx::list(&events)
            .await
            .iter()
            .filter(|e| e["regarding"]["name"] == name && e["reason"] == reason)
            .filter(|e| e["type"] == "Warning")
            .filter_map(|e| e["note"].as_str().map(String::from))
            .collect()
    }

    async fn daemon_sets(&self) -> Vec<Value> {
        Ctx::list(&self.api(&resource("apps", "DaemonSet", "daemonsets"))).await
    }
}

/// API writes the operator issued to Browsers and Pods, by its own metrics.
fn operator_writes(text: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with("browser_controller_api_writes_total{"))
        .filter(|l| l.contains("resource=\"browsers") || l.contains("resource=\"pods\""))
        .filter(|l| !l.contains("dry-run"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The Browser's and its pod's recorded events, one line each, in the order they were seen:
/// which write a surplus one was, when a write budget is exceeded.
fn session_story(cx: &Ctx, name: &str) -> String {
    let mut seen: Vec<Seen> = cx.history("Browser", name);
    seen.extend(cx.history("Pod", name));
    seen.sort_by_key(|s| s.at);
    let start = seen.first().map(|s| s.at);
    seen.iter()
        .map(|s| {
            let meta = &s.object["metadata"];
            format!(
                "  +{:>5} ms {} rv {} deleting {} {}",
                start.map_or(0, |t| s.at.duration_since(t).as_millis()),
                s.kind,
                meta["resourceVersion"].as_str().unwrap_or("?"),
                !meta["deletionTimestamp"].is_null(),
                history::summary(s.kind, &s.object),
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

// ---- scenarios on a double of their own ----------------------------------------------------

/// The write budget of a normal session, from the operator's own metrics.
pub(crate) async fn a_normal_session_costs_at_most_8_writes(cx: Arc<Ctx>) {
    cx.start_scraped_operator(&[]);
    cx.chrome_config().await;
    cx.kubelet().set(
        "s1",
        Script::ExitAfterRunning {
            container: "seleniferous".into(),
            exit_code: 0,
            after: Duration::from_millis(300),
        },
    );
    cx.create_browser("s1", json!({})).await;
    cx.seen_running("s1").await;
    let failure = cx.failure_of("s1").await;
    assert_eq!(failure["reason"], "ContainerTerminated");
    cx.until_gone("s1").await;
    let text = cx.metrics().await;
    let writes = operator_writes(&text);
    println!("    normal session: {writes} operator writes to Browsers and Pods");
    assert!(
        writes <= 8,
        "a normal session took {writes} writes; what the watches showed:\n{}\n{text}",
        session_story(&cx, "s1")
    );
    assert_eq!(cx.pod_applies(), 1);
}

pub(crate) async fn transient_create_errors_are_retried(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.server().inject(
        Fault::new(
            "create",
            "pods",
            500,
            "InternalError",
            "etcd leader changed",
        )
        .object(&cx.ns, "r1")
        .times(2),
    );
    cx.create_browser("r1", json!({})).await;
    cx.until_running("r1").await;
    assert!(
        cx.seen_statuses("r1")
            .iter()
            .all(|s| s["phase"] != "Failed")
    );
    cx.delete_everything().await;
}

pub(crate) async fn a_pod_create_refused_for_an_unknown_reason_fails_the_browser_after_three_tries(
    cx: Arc<Ctx>,
) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.server().inject(
        Fault::new(
            "create",
            "pods",
            413,
            "RequestEntityTooLarge",
            "Request entity too large: limit is 3145728",
        )
        .object(&cx.ns, "big"),
    );
    cx.create_browser("big", json!({})).await;
    let failure = cx.failure_of("big").await;
    assert_eq!(failure["reason"], "WriteRejected");
    assert_eq!(
        failure["message"],
        "the API server refused to create pod 3 times: 413 RequestEntityTooLarge: Request entity too large: limit is 3145728"
    );
    cx.until_gone("big").await;
    assert_eq!(cx.requests_for("patch", "pods", "big"), 3, "three tries");
}

pub(crate) async fn a_metadata_write_refused_for_good_fails_the_browser_naming_the_answer(
    cx: Arc<Ctx>,
) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.server().inject(
        Fault::new(
            "patch",
            "browsers",
            422,
            "Invalid",
            "Browser.selenosis.io \"meta\" is invalid: metadata.labels: Invalid value",
        )
        .object(&cx.ns, "meta"),
    );
    cx.create_browser("meta", json!({})).await;
    let failure = cx.failure_of("meta").await;
    assert_eq!(failure["reason"], "WriteRejected");
    assert!(
        failure["message"].as_str().unwrap().starts_with(
            "the API server refused to apply Browser finalizer and labels 3 times: 422 Invalid: "
        ),
        "{failure}"
    );
    // Its deletion goes without the finalizer the refused write would have added.
    cx.until_gone("meta").await;
    assert_eq!(cx.pod_creates_of("meta"), 0);
}

pub(crate) async fn a_browser_whose_status_is_always_refused_is_deleted_not_retried_forever(
    cx: Arc<Ctx>,
) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.server().inject(
        Fault::new(
            "patch",
            "browsers",
            413,
            "RequestEntityTooLarge",
            "Request entity too large",
        )
        .subresource("status")
        .object(&cx.ns, "mute"),
    );
    cx.create_browser("mute", json!({})).await;
    // No status can be written: the Browser is deleted, its pod with it.
    cx.until_gone("mute").await;
    let status_writes = cx.requests_for("patch", "browsers/status", "mute");
    assert!(
        (6..=10).contains(&status_writes),
        "a bounded number of status writes: {status_writes}"
    );
    cx.until_events("mute", &["WriteRejected"]).await;
    // Nothing more is tried once it is gone.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        cx.requests_for("patch", "browsers/status", "mute"),
        status_writes
    );
}

pub(crate) async fn dropped_watches_are_resumed_and_sessions_still_run(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("w1", json!({})).await;
    cx.until_running("w1").await;
    cx.server().drop_watches();
    cx.create_browser("w2", json!({})).await;
    cx.until("w2 running after the watches were dropped", |s| {
        s.running("w2")
    })
    .await;
    assert_eq!(cx.pod_applies(), 2);
    cx.delete_everything().await;
}

pub(crate) async fn a_quota_refusing_the_dry_run_leaves_validity_unknown_with_one_event_and_backoff(
    cx: Arc<Ctx>,
) {
    cx.start_operator(&[]);
    // A ResourceQuota of `pods: 0`: admission forbids even a dry-run create.
    let quota = "exceeded quota: zero, requested: pods=1, used: pods=0, limited: pods=0";
    cx.server().inject(Fault::new(
        "create",
        "pods",
        403,
        "Forbidden",
        &format!("pods \"browserconfig-dry-run\" is forbidden: {quota}"),
    ));
    cx.chrome_config().await;
    let refused_dry_runs = || {
        cx.logged()
            .iter()
            .filter(|r| r.resource == "pods" && r.dry_run && r.status == 403)
            .count()
    };
    // The first attempt, and a retry after the first wait (5s), both refused.
    poll(WAIT, Duration::from_millis(50), || async {
        match refused_dry_runs() {
            n if n >= 2 => Ok(()),
            n => Err(format!("two refused dry runs, not {n}")),
        }
    })
    .await;
    let conditions = cx.judged_conditions("chrome").await;
    let valid = condition(&conditions, "Valid").unwrap();
    assert_eq!(valid["status"], "Unknown", "{valid}");
    assert_eq!(valid["reason"], "ValidationRefused", "{valid}");
    let message = valid["message"].as_str().unwrap();
    assert!(message.contains("validity is unknown"), "{message}");
    assert!(message.contains(quota), "{message}");
    // Browsers still use the config: its entries are fine as far as anyone can tell.
    assert_eq!(condition(&conditions, "Ready").unwrap()["status"], "True");
    // Retried with backoff, not in a loop.
    assert!(refused_dry_runs() <= 3, "{}", refused_dry_runs());
    let notes = cx.warnings("chrome", "ValidationRefused").await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains(quota), "{notes:?}");

    // The quota goes: the next attempt (10s after the second) judges the config.
    cx.server().clear_faults();
    cx.until_config("chrome", "Valid", "True").await;
    assert_eq!(cx.warnings("chrome", "ValidationRefused").await.len(), 1);
}

/// The sequence behind a Browser that got three pods when its API server restarted: the
/// Pending write is lost (503), the Browser watch lags while pods are still watched, the
/// pod fails and the operator fails the Browser, force-deletes the pod and deletes the
/// Browser, and the Browser cache still holds the Browser as it was before any status; a
/// BrowserConfig change then looks again at the Browsers that seem to wait for their pod, and
/// the stale Browser events arrive afterwards. Nothing of that may make a second pod.
pub(crate) async fn a_browser_gets_one_pod_while_its_cache_lags_through_its_failure(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    // The pod fails, so the operator force-deletes it: it is gone at once.
    cx.kubelet().set("once", Script::OomKilled);
    cx.server().inject(
        Fault::new(
            "patch",
            "browsers",
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        )
        .subresource("status")
        .object(&cx.ns, "once"),
    );
    cx.create_browser("once", json!({})).await;
    cx.until("the pod", |s| s.pod("once").is_some()).await;
    cx.server().hold_watches("browsers");
    cx.server().clear_faults();
    // Listed gone: the held watches, the recorder's too, have not told it yet.
    cx.until_listed_gone("once").await;
    cx.api(&config_resource(cx.layout))
        .patch(
            "chrome",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .expect("config changed");
    tokio::time::sleep(Duration::from_secs(1)).await;
    cx.server().release_watches();
    tokio::time::sleep(Duration::from_secs(1)).await;
    cx.until_gone("once").await;
    assert_eq!(cx.pod_creates_of("once"), 1, "one pod, ever");
    assert_eq!(cx.failure_of("once").await["reason"], "OOMKilled");
}

/// A Browser deleted while the operator writes its status from an older copy: the write's
/// answer carries the deletion, whose watch event comes later and is older than the write.
/// That event is still news (no decision saw the deletion), and the Browser is cleaned up.
pub(crate) async fn a_deletion_a_status_write_carried_is_still_followed(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("overtaken", json!({})).await;
    cx.until_running("overtaken").await;
    // The operator's cache keeps the Browser as it is now: Running, not deleted.
    cx.server().hold_watches("browsers");
    cx.browsers()
        .delete("overtaken", &DeleteParams::default())
        .await
        .expect("Browser deleted");
    let before = cx.logged().len();
    // A new pod IP: the operator writes the Browser's status, deciding on its cached copy.
    cx.pods()
        .patch_status(
            "overtaken",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"podIP": "10.0.0.99"}})),
        )
        .await
        .expect("pod status");
    let status_written = |r: &crate::RequestRecord| {
        r.resource == "browsers"
            && r.subresource.as_deref() == Some("status")
            && r.name.as_deref() == Some("overtaken")
            && r.status == 200
    };
    poll(WAIT, Duration::from_millis(50), || async {
        if cx.logged()[before..].iter().any(status_written) {
            Ok(())
        } else {
            Err("the status write from the cached copy".to_string())
        }
    })
    .await;
    let written = cx.server().get("browsers", &cx.ns, "overtaken");
    assert!(
        written.is_some_and(|b| b["status"]["podIP"] == "10.0.0.99"),
        "the write landed on the deleted Browser"
    );
    // The deletion's event, then the write's echo.
    cx.server().release_watches();
    cx.until_gone("overtaken").await;
}

/// A Browser removed behind the operator's back (its finalizer taken off by hand) while the
/// operator's cache still shows it: the 404 of the next write is the operator's last write
/// for it; the pod it controlled is deleted.
pub(crate) async fn nothing_more_is_written_for_a_browser_the_api_answered_404_for(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("vanish", json!({})).await;
    cx.until_running("vanish").await;
    cx.stall_browser_watch();
    let browsers = cx.browsers();
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
    assert!(cx.server().get("browsers", &cx.ns, "vanish").is_none());
    // The pod fails: a reconcile on the stale Browser wants to write the failure.
    cx.pods()
        .patch_status(
            "vanish",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}})),
        )
        .await
        .expect("pod status");
    let is_404 = |r: &crate::RequestRecord| {
        r.resource == "browsers" && r.name.as_deref() == Some("vanish") && r.status == 404
    };
    poll(WAIT, Duration::from_millis(50), || async {
        if cx.logged().iter().any(is_404) {
            Ok(())
        } else {
            Err("the 404 for the Browser".to_string())
        }
    })
    .await;
    cx.until("the pod deleted", |s| s.pod("vanish").is_none())
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    cx.server().clear_faults();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let requests = cx.logged();
    let first_404 = requests.iter().position(is_404).unwrap();
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
    assert_eq!(cx.pod_creates_of("vanish"), 1);
}

/// The API server is away for longer than kube-runtime's default watch backoff would wait
/// out quickly: once it answers again, the watches resume within seconds, and Browsers
/// created right then get their status within seconds, not after a backoff that grew during
/// the outage.
pub(crate) async fn after_an_api_outage_new_browsers_get_a_status_within_seconds(cx: Arc<Ctx>) {
    cx.start_scraped_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("before", json!({})).await;
    cx.until_running("before").await;
    cx.server().set_unavailable(true);
    tokio::time::sleep(Duration::from_secs(12)).await;
    cx.server().set_unavailable(false);
    let back = Instant::now();
    let names: Vec<String> = (0..5).map(|i| format!("after{i}")).collect();
    for name in &names {
        cx.create_browser(name, json!({})).await;
    }
    cx.until_within(
        Duration::from_secs(5),
        Duration::from_millis(50),
        "a status on every Browser created after the outage",
        |s| {
            names.iter().all(|n| {
                s.browser(n)
                    .is_some_and(|b| b["status"]["phase"].is_string())
            })
        },
    )
    .await;
    println!(
        "    statuses {:?} after the API server was back",
        back.elapsed()
    );
    cx.until("every Browser Running", |s| {
        names.iter().all(|n| s.running(n))
    })
    .await;
    let text = cx.metrics().await;
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
    assert_eq!(cx.pod_applies(), 6);
    cx.delete_everything().await;
}

pub(crate) async fn a_daemon_set_the_cluster_refuses_is_reported_with_a_warning_and_not_retried_at_once(
    cx: Arc<Ctx>,
) {
    crate::prepull::grant_prepull(&cx).await;
    cx.start_operator(&["--enable-prepull"]);
    cx.server().inject(Fault::new(
        "create",
        "daemonsets.apps",
        422,
        "Invalid",
        "DaemonSet.apps \"chrome-prepull-x\" is invalid: spec.template.spec.runtimeClassName: Invalid value",
    ));
    cx.create_config("chrome", serde_json::from_str(PREPULL_SPEC).unwrap())
        .await;
    cx.until_config_condition("chrome", "PrePulled").await;
    let conditions = cx.judged_conditions("chrome").await;
    let pre_pulled = condition(&conditions, "PrePulled").unwrap();
    assert_eq!(pre_pulled["status"], "False");
    assert_eq!(pre_pulled["reason"], "ApplyFailed");
    assert!(
        pre_pulled["message"]
            .as_str()
            .is_some_and(|m| m.contains("runtimeClassName: Invalid value")),
        "{pre_pulled}"
    );
    cx.until_events("chrome", &["PrePullFailed"]).await;
    // The echoes of its own writes (and the first lists) may try again; then it waits.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let applies = || {
        cx.logged()
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
    assert!(cx.daemon_sets().await.is_empty());
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
async fn assert_reported(cx: &Ctx) {
    cx.until_events("s1", &["PodFieldsRemoved"]).await;
    let notes = cx.warnings("s1", "PodFieldsRemoved").await;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("Pod schema does not declare")
            && notes[0].contains(NATIVE_SIDECAR)
            && notes[0].contains(CLAIMS),
        "{notes:?}"
    );
    cx.until_config_condition("sidecars", "PodFieldsRemoved")
        .await;
    let conditions = cx.judged_conditions("sidecars").await;
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

/// Runs `s1` on the sidecar config and returns its pod.
async fn run_sidecar_browser(cx: &Ctx) -> Value {
    cx.create_config("sidecars", sidecar_spec()).await;
    run_s1(cx).await
}

async fn run_s1(cx: &Ctx) -> Value {
    cx.create_browser("s1", json!({})).await;
    let snap = cx.until_running("s1").await;
    snap.pod("s1").unwrap().clone()
}

/// Waits until the operator read the Pod schema at start-up.
async fn until_schema_read(cx: &Ctx) {
    poll(WAIT, Duration::from_millis(50), || async {
        let fetched = cx.openapi_requests();
        if fetched
            .iter()
            .any(|(p, code)| p.starts_with("/openapi/v3/api/v1") && *code == 200)
        {
            Ok(())
        } else {
            Err(format!("the start-up schema read: {fetched:?}"))
        }
    })
    .await
}

/// On [`older_cluster`].
pub(crate) async fn on_an_older_cluster_fields_it_lacks_are_removed_and_reported(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    let pod = run_sidecar_browser(&cx).await;
    assert_pruned(&pod);
    assert_reported(&cx).await;
    // Read once, at start-up, from OpenAPI v3; nothing was rejected, so no refetch.
    let fetched = cx.openapi_requests();
    assert_eq!(
        fetched.iter().filter(|(p, _)| p == "/openapi/v3").count(),
        1,
        "{fetched:?}"
    );
    assert!(fetched.iter().all(|(_, code)| *code == 200), "{fetched:?}");
    assert_eq!(cx.pod_applies(), 1);
    cx.delete_everything().await;
}

/// On [`current_cluster`].
pub(crate) async fn on_a_current_cluster_nothing_is_removed_or_reported(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    let pod = run_sidecar_browser(&cx).await;
    assert_eq!(pod["spec"]["initContainers"][0]["restartPolicy"], "Always");
    assert_eq!(
        pod["spec"]["containers"][0]["resources"]["claims"],
        json!([{"name": "gpu"}])
    );
    let conditions = cx.judged_conditions("sidecars").await;
    assert!(
        condition(&conditions, "PodFieldsRemoved").is_none(),
        "{conditions:?}"
    );
    cx.until_events("s1", &["PodCreated"]).await;
    assert!(cx.warnings("s1", "PodFieldsRemoved").await.is_empty());
    cx.delete_everything().await;
}

/// On [`older_cluster_without_v3`].
pub(crate) async fn without_openapi_v3_the_v2_document_is_used(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    let pod = run_sidecar_browser(&cx).await;
    assert_pruned(&pod);
    assert_reported(&cx).await;
    let fetched = cx.openapi_requests();
    assert!(
        fetched.contains(&("/openapi/v3".to_string(), 404))
            && fetched.contains(&("/openapi/v2".to_string(), 200)),
        "{fetched:?}"
    );
    cx.delete_everything().await;
}

/// On [`cluster_without_schema`].
pub(crate) async fn without_any_schema_the_operator_runs_and_applies_pods_unpruned(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    let pod = run_sidecar_browser(&cx).await;
    assert_eq!(pod["spec"]["initContainers"][0]["restartPolicy"], "Always");
    let conditions = cx.judged_conditions("sidecars").await;
    assert!(condition(&conditions, "PodFieldsRemoved").is_none());
    assert!(cx.warnings("s1", "PodFieldsRemoved").await.is_empty());
    cx.delete_everything().await;
}

/// On [`current_cluster_answering_422`].
pub(crate) async fn a_rejection_after_the_schema_changed_refetches_it_and_the_browser_still_runs(
    cx: Arc<Ctx>,
) {
    cx.start_operator(&[]);
    until_schema_read(&cx).await;
    cx.create_config("sidecars", sidecar_spec()).await;
    let conditions = cx.judged_conditions("sidecars").await;
    assert!(condition(&conditions, "PodFieldsRemoved").is_none());
    // The cluster now lacks the fields (a downgrade, another API server behind the load
    // balancer): the schema the operator holds is stale, and newer servers answer 422.
    cx.server().remove_schema_field(CONTAINER, "restartPolicy");
    cx.server().remove_schema_field(RESOURCES, "claims");
    let pod = run_s1(&cx).await;
    assert_pruned(&pod);
    assert_reported(&cx).await;
    let v3_reads = cx
        .openapi_requests()
        .iter()
        .filter(|(p, _)| p == "/openapi/v3")
        .count();
    assert!(v3_reads >= 2, "{:?}", cx.openapi_requests());
    // The rejected apply did not fail the Browser; its pod was created once, pruned.
    let rejected = cx
        .logged()
        .iter()
        .filter(|r| r.resource == "pods" && !r.dry_run && r.status == 422)
        .count();
    assert_eq!(rejected, 1);
    assert_eq!(cx.pod_applies(), 2);
    let reasons = cx.event_reasons("s1").await;
    assert_eq!(reasons.iter().filter(|r| *r == "PodCreated").count(), 1);
    cx.delete_everything().await;
}

/// On [`current_cluster`].
pub(crate) async fn a_dry_run_rejected_for_a_stale_schema_is_judged_again_with_the_new_one(
    cx: Arc<Ctx>,
) {
    cx.start_operator(&[]);
    until_schema_read(&cx).await;
    cx.server().remove_schema_field(CONTAINER, "restartPolicy");
    cx.server().remove_schema_field(RESOURCES, "claims");
    // The config's first dry run carries the fields and is rejected; the entry is not
    // called invalid for it, but judged again with the refetched schema.
    cx.create_config("sidecars", sidecar_spec()).await;
    cx.until_config_condition("sidecars", "PodFieldsRemoved")
        .await;
    let rejected_dry_runs = cx
        .logged()
        .iter()
        .filter(|r| r.resource == "pods" && r.dry_run && r.status == 500)
        .count();
    assert_eq!(rejected_dry_runs, 1);
    let pod = run_s1(&cx).await;
    assert_pruned(&pod);
    assert_reported(&cx).await;
    cx.delete_everything().await;
}

// ---- scenarios on every backend, with their double-only steps -----------------------------

/// A config with a privileged sidecar (`testdata/configs/privileged-sidecar.yaml` in short).
fn privileged_config(cx: &Ctx) -> Value {
    json!({"browsers": {"chrome": {"139.0": {
        "image": cx.be.image,
        "sidecars": [{"name": "docker", "image": "docker:dind", "securityContext": {"privileged": true}}],
    }}}})
}

pub(crate) async fn an_entry_above_the_pod_security_ceiling_is_invalid_and_its_browsers_fail(
    cx: Arc<Ctx>,
) {
    cx.start_operator(&[]);
    cx.create_config("privileged", privileged_config(&cx)).await;
    let conditions = cx.judged_conditions("privileged").await;
    let valid = condition(&conditions, "Valid").unwrap();
    assert_eq!(valid["status"], "False", "{valid}");
    let field = "spec.containers[1] (docker).securityContext.privileged is true";
    let message = valid["message"].as_str().unwrap();
    assert!(
        message.contains("above the operator's pod security level baseline")
            && message.contains(field),
        "{message}"
    );
    cx.create_browser("p1", json!({})).await;
    let failure = cx.failure_of("p1").await;
    assert_eq!(failure["reason"], "InvalidConfig");
    assert!(
        failure["message"].as_str().unwrap().contains(field),
        "{failure}"
    );
    cx.until_gone("p1").await;
    assert!(cx.pod_uids("p1").is_empty(), "p1 had a pod");
}

pub(crate) async fn the_privileged_level_lets_the_same_entry_run(cx: Arc<Ctx>) {
    cx.start_operator(&["--pod-security-level=privileged"]);
    cx.create_config("privileged", privileged_config(&cx)).await;
    let conditions = cx.judged_conditions("privileged").await;
    assert_eq!(condition(&conditions, "Valid").unwrap()["status"], "True");
    cx.create_browser("p1", json!({})).await;
    cx.until_running("p1").await;
    cx.delete_everything().await;
}

pub(crate) async fn deleting_a_config_does_not_disturb_sessions_that_have_their_pod(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("keep", json!({})).await;
    cx.until_running("keep").await;
    cx.api(&config_resource(cx.layout))
        .delete("chrome", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(cx.snapshot().await.running("keep"));
    // A new Browser now finds no config.
    cx.create_browser("late", json!({})).await;
    assert_eq!(cx.failure_of("late").await["reason"], "ConfigNotFound");
    cx.delete_everything().await;
}

pub(crate) async fn a_valid_config_reports_valid_and_ready_with_its_generation(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    let config = cx
        .until_config_is("chrome", "config status", |c| {
            c["status"]["observedGeneration"] == 1
        })
        .await;
    let status = &config["status"];
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
    // The dry run reached the API server as a dry run (the double's log shows it), and
    // stored nothing.
    match cx.requests() {
        Some(requests) => assert!(requests.iter().any(|r| r.resource == "pods" && r.dry_run)),
        None => println!(
            "    {}: a real server keeps no request log: the dry-run step is checked on the double",
            cx.ns
        ),
    }
    assert!(cx.snapshot().await.pods.is_empty());
}

pub(crate) async fn a_younger_config_defining_the_same_entry_reports_a_conflict_naming_the_winner(
    cx: Arc<Ctx>,
) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    // Creation timestamps have second resolution: make the second config clearly younger.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    cx.create_config("chrome-copy", cx.chrome_spec()).await;
    cx.until_config_is("chrome-copy", "conflict condition", |c| {
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
    .await;
    let winner = cx.config("chrome").await.unwrap();
    let conditions = winner["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        conditions.iter().all(|c| c["type"] != "Conflict"),
        "{winner}"
    );
}

pub(crate) async fn without_the_prepull_flag_a_config_that_asks_hears_so_and_nothing_is_pulled(
    cx: Arc<Ctx>,
) {
    cx.start_operator(&[]);
    cx.create_config(
        "chrome",
        json!({
            "template": {"prePull": true},
            "browsers": {"chrome": {"139.0": {"image": cx.be.image}}}
        }),
    )
    .await;
    let conditions = cx.judged_conditions("chrome").await;
    let pre_pulled = condition(&conditions, "PrePulled").expect("a PrePulled condition");
    assert_eq!(pre_pulled["status"], "False");
    assert_eq!(pre_pulled["reason"], "PrePullDisabled");
    let config = cx.config("chrome").await.unwrap();
    let status = &config["status"];
    assert!(status.get("prePull").is_none(), "{status}");
    // The operator does not even look at DaemonSets (the double's log shows it).
    match cx.requests() {
        Some(requests) => assert!(
            requests.iter().all(|r| r.resource != "daemonsets"),
            "DaemonSets were requested without --enable-prepull"
        ),
        None => println!(
            "    {}: a real server keeps no request log: the DaemonSet step is checked on the double",
            cx.ns
        ),
    }
    assert!(cx.daemon_sets().await.is_empty());
}

const PREPULL_SPEC: &str = r#"{
    "template": {"prePull": true, "nodeSelector": {"pool": "browsers"}},
    "browsers": {"chrome": {"139.0": {"image": "selenium/standalone-chrome:139.0"}}}
}"#;

/// Needs an API server without a garbage collector (the double, the bare control plane).
pub(crate) async fn a_config_deleted_while_the_operator_was_away_loses_its_daemon_sets_on_its_return(
    cx: Arc<Ctx>,
) {
    crate::prepull::grant_prepull(&cx).await;
    cx.start_operator(&["--enable-prepull"]);
    cx.create_config("chrome", serde_json::from_str(PREPULL_SPEC).unwrap())
        .await;
    cx.until_daemon_sets("a pre-pull DaemonSet", |all| all.len() == 1)
        .await;
    cx.stop_operator().await;
    cx.api(&config_resource(cx.layout))
        .delete("chrome", &Default::default())
        .await
        .expect("config deleted");
    // Nothing collects garbage here: the DaemonSet stays until the operator sweeps it.
    assert_eq!(cx.daemon_sets().await.len(), 1);
    cx.start_operator(&["--enable-prepull"]);
    cx.until_daemon_sets("the DaemonSet swept", |all| all.is_empty())
        .await;
}

/// How often the operator's reads of `resource` match `what` (verb, streamed, status).
fn count_reads(reads: &Reads, resource: &str, what: impl Fn(&str, bool, u16) -> bool) -> usize {
    reads
        .iter()
        .filter(|(verb, r, streamed, status)| r == resource && what(verb, *streamed, *status))
        .count()
}

type Reads = Vec<(String, String, bool, u16)>;

/// Runs a Browser, makes every watch relist, runs another; returns the operator's reads
/// before the relist and once `relisted` holds of them for every watched resource (given its
/// reads before and after), which it must within the suite's wait.
async fn run_across_a_relist(
    cx: &Ctx,
    relisted: impl Fn(&Reads, &Reads, &str) -> bool,
) -> (Reads, Reads) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("before", json!({})).await;
    cx.until_running("before").await;
    let before = cx.operator_reads();
    cx.force_relists();
    cx.create_browser("after", json!({})).await;
    cx.until_running("after").await;
    let after = poll(WAIT, Duration::from_millis(50), || async {
        let after = cx.operator_reads();
        if ["browsers", "pods", "browserconfigs"]
            .iter()
            .all(|r| relisted(&before, &after, r))
        {
            Ok(after)
        } else {
            Err(format!("every cache relisted: {after:?}"))
        }
    })
    .await;
    (before, after)
}

fn streamed_lists(reads: &Reads, resource: &str) -> usize {
    count_reads(reads, resource, |v, streamed, s| {
        v == "watch" && streamed && s == 200
    })
}

fn paged_lists(reads: &Reads, resource: &str) -> usize {
    count_reads(reads, resource, |v, _, s| v == "list" && s == 200)
}

/// On the double, which streams lists as Kubernetes 1.34 and later do.
pub(crate) async fn where_the_server_streams_lists_no_cache_lists_in_pages(cx: Arc<Ctx>) {
    let (before, after) = run_across_a_relist(&cx, |before, after, r| {
        streamed_lists(after, r) > streamed_lists(before, r)
    })
    .await;
    for resource in ["browsers", "pods", "browserconfigs"] {
        assert!(
            streamed_lists(&before, resource) >= 1,
            "{resource}: a streamed list at start-up: {before:?}"
        );
        assert_eq!(
            count_reads(&after, resource, |v, _, _| v == "list"),
            0,
            "{resource}: no list: {after:?}"
        );
    }
    cx.delete_everything().await;
}

/// On [`cluster_without_streaming_lists`].
pub(crate) async fn where_the_server_refuses_streamed_lists_each_cache_lists_in_pages_after_one_try(
    cx: Arc<Ctx>,
) {
    lists_in_pages_after_one_try(&cx).await;
}

/// On [`cluster_with_unservable_streaming_lists`].
pub(crate) async fn where_streamed_lists_fail_before_their_end_each_cache_lists_in_pages_after_one_try(
    cx: Arc<Ctx>,
) {
    lists_in_pages_after_one_try(&cx).await;
}

/// Each cache tried one streamed list, listed in pages, and did not stream again at a relist.
async fn lists_in_pages_after_one_try(cx: &Ctx) {
    let (before, after) = run_across_a_relist(cx, |before, after, r| {
        paged_lists(after, r) > paged_lists(before, r)
    })
    .await;
    for resource in ["browsers", "pods", "browserconfigs"] {
        let tried = count_reads(&before, resource, |v, streamed, _| v == "watch" && streamed);
        assert!(tried >= 1, "{resource}: a streamed list tried: {before:?}");
        assert!(
            paged_lists(&before, resource) >= 1,
            "{resource}: then listed: {before:?}"
        );
        assert_eq!(
            count_reads(&after, resource, |_, streamed, _| streamed),
            tried,
            "{resource}: a relist does not try again: {after:?}"
        );
    }
    cx.delete_everything().await;
}
