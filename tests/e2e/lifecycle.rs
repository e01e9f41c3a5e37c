//! Browser lifecycles: a normal session, every failure and cleanup row an API server can
//! produce, and 200 Browsers at once.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::DeleteParams;
use serde_json::{Value, json};

use browser_controller::api::keys;

use crate::support::kinds::pod_resource;
use crate::support::kubelet::{Deletion, Script};
use crate::{Ctx, Kind, WAIT, poll};

fn is_failed_with(status: &Value, reason: &str) -> bool {
    status["phase"] == "Failed" && status["reason"] == reason
}

pub(crate) async fn normal_session_pending_then_running_with_ip_then_cleaned_up(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.kubelet().set(
        "s1",
        Script::ExitAfterRunning {
            container: "seleniferous".into(),
            exit_code: 0,
            after: Duration::from_millis(1500),
        },
    );
    cx.create_browser("s1", json!({})).await;
    // Running lasts 1.5 s: read from the recorded history, not caught by polling.
    let (browser, pod) = cx.seen_running_with_pod("s1").await;
    assert_eq!(browser["status"]["podIP"], pod["status"]["podIP"]);
    let finalizers = browser["metadata"]["finalizers"].as_array().unwrap();
    assert!(finalizers.contains(&json!(keys::FINALIZER)));
    let labels = &browser["metadata"]["labels"];
    assert_eq!(labels[keys::LABEL_BROWSER], "s1");
    assert_eq!(labels[keys::LABEL_BROWSER_NAME], "chrome");
    assert_eq!(labels[keys::LABEL_BROWSER_VERSION], "139.0");
    let pod_labels = &pod["metadata"]["labels"];
    assert_eq!(pod_labels[keys::LABEL_MANAGED_BY], "browser-controller");
    assert_eq!(pod_labels[keys::LABEL_OWNER], "hub");
    assert_eq!(pod_labels[keys::LABEL_BROWSER], "s1");
    let owner = &pod["metadata"]["ownerReferences"][0];
    assert_eq!(owner["uid"], browser["metadata"]["uid"]);
    assert_eq!(owner["controller"], true);
    assert_eq!(pod["spec"]["containers"][0]["name"], "browser");
    let statuses = browser["status"]["containerStatuses"].as_array().unwrap();
    assert!(
        statuses
            .iter()
            .any(|c| c["name"] == "browser" && c["ports"][0]["containerPort"] == 4444),
        "{statuses:?}"
    );

    let failure = cx.failure_of("s1").await;
    assert_eq!(failure["reason"], "ContainerTerminated");
    assert_eq!(
        failure["message"],
        "pod container seleniferous terminated: Completed (exit code 0)"
    );
    cx.until_gone("s1").await;

    // What a watching client saw: Pending first; Running only ever with the pod IP, in the
    // same event.
    let seen = cx.seen_statuses("s1");
    let phases: Vec<&str> = seen.iter().filter_map(|s| s["phase"].as_str()).collect();
    assert_eq!(phases.first(), Some(&"Pending"), "{seen:#?}");
    assert!(phases.contains(&"Running"), "{seen:#?}");
    for s in &seen {
        if s["phase"] == "Running" {
            assert!(s["podIP"].is_string(), "Running without podIP: {s}");
        }
    }
    assert_eq!(cx.pod_uids("s1").len(), 1);
    cx.until_events("s1", &["PodCreated", "Running", "ContainerTerminated"])
        .await;
}

pub(crate) async fn config_not_found_fails_without_a_pod(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.create_browser("nocfg", json!({})).await;
    let message = cx.fails_without_a_pod("nocfg", "ConfigNotFound").await;
    assert!(
        message.starts_with("Browser configuration not found"),
        "{message}"
    );
    assert!(message.contains(&cx.ns), "{message}");
    cx.until_events("nocfg", &["ConfigNotFound"]).await;
}

pub(crate) async fn invalid_options_fail_without_a_pod(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("opts", json!({keys::ANNOTATION_OPTIONS: "{\"labels\": 5}"}))
        .await;
    let message = cx
        .fails_without_a_pod("opts", "InvalidSelenosisOptions")
        .await;
    assert!(
        message.starts_with("unmarshal selenosis.io/options: "),
        "{message}"
    );
}

pub(crate) async fn pod_create_over_quota_fails_with_quota_exceeded(cx: Arc<Ctx>) {
    // Without the capacity queue: the refusal fails the Browser at once.
    cx.start_operator(&["--queue-timeout=0"]);
    cx.chrome_config().await;
    // Validated before the quota exists: its dry runs would be refused too.
    cx.until_config("chrome", "Valid", "True").await;
    cx.refuse_pod_by_quota("q1").await;
    cx.create_browser("q1", json!({})).await;
    let message = cx.fails_without_a_pod("q1", "QuotaExceeded").await;
    assert!(
        message.starts_with("pods \"q1\" is forbidden: exceeded quota: e2e"),
        "{message}"
    );
}

pub(crate) async fn pod_create_invalid_fails_with_invalid_pod_spec(cx: Arc<Ctx>) {
    // A Browser annotation under kubernetes.io reaches the pod only where the admin allows it;
    // the Pod validation wants an int32 here.
    cx.start_operator(&["--allowed-annotation-prefix=controller.kubernetes.io"]);
    cx.chrome_config().await;
    cx.create_browser(
        "inv",
        json!({"controller.kubernetes.io/pod-deletion-cost": "cheap"}),
    )
    .await;
    let message = cx.fails_without_a_pod("inv", "InvalidPodSpec").await;
    assert!(message.starts_with("Pod \"inv\" is invalid: "), "{message}");
    assert!(
        message.contains("metadata.annotations[controller.kubernetes.io/pod-deletion-cost]"),
        "{message}"
    );
}

pub(crate) async fn pending_too_long_is_force_deleted_with_pod_creation_timeout(cx: Arc<Ctx>) {
    cx.start_operator(&["--browser-pod-creation-timeout=2s"]);
    cx.chrome_config().await;
    cx.kubelet().set("slow", Script::StayPending);
    cx.create_browser("slow", json!({})).await;
    let failure = cx.failure_of("slow").await;
    assert_eq!(failure["reason"], "PodCreationTimeout");
    assert_eq!(
        failure["message"],
        "pod creation timeout exceeded after 2s, container browser: ContainerCreating"
    );
    cx.until_gone("slow").await;
}

pub(crate) async fn unschedulable_pod_times_out_naming_the_scheduler_message(cx: Arc<Ctx>) {
    cx.start_operator(&["--browser-pod-creation-timeout=2s"]);
    cx.chrome_config().await;
    cx.kubelet().set("nosched", Script::Unschedulable);
    cx.create_browser("nosched", json!({})).await;
    let failure = cx.failure_of("nosched").await;
    assert_eq!(failure["reason"], "PodCreationTimeout");
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "pod creation timeout exceeded after 2s, pod unschedulable: 0/1 nodes are available"
        ),
        "{message}"
    );
    cx.until_gone("nosched").await;
}

pub(crate) async fn failing_containers_and_failed_pods_end_with_their_reasons(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    let cases = [
        ("pull", Script::ErrImagePull, "ErrImagePull"),
        ("crash", Script::CrashLoopBackOff, "CrashLoopBackOff"),
        ("oom", Script::OomKilled, "OOMKilled"),
        ("evict", Script::Evicted, "Evicted"),
        (
            "early",
            Script::TerminatedWhilePending { exit_code: 2 },
            "ContainerTerminated",
        ),
    ];
    for (name, script, _) in &cases {
        cx.kubelet().set(name, script.clone());
        cx.create_browser(name, json!({})).await;
    }
    for (name, _, reason) in &cases {
        let failure = cx.failure_of(name).await;
        let got = failure["reason"].as_str().unwrap();
        // ErrImagePull may already have become ImagePullBackOff when observed.
        if *reason == "ErrImagePull" {
            assert!(
                got == "ErrImagePull" || got == "ImagePullBackOff",
                "{name}: {failure}"
            );
        } else {
            assert_eq!(got, *reason, "{name}: {failure}");
        }
        cx.until_gone(name).await;
    }
    let message = |name: &str| {
        cx.seen_statuses(name)
            .into_iter()
            .find(|s| s["phase"] == "Failed")
            .and_then(|s| s["message"].as_str().map(String::from))
            .unwrap()
    };
    assert!(
        message("evict").starts_with("pod has failed with reason: Evicted - "),
        "{}",
        message("evict")
    );
    assert!(
        message("crash").starts_with("pod container browser failed: CrashLoopBackOff - "),
        "{}",
        message("crash")
    );
    assert_eq!(
        message("early"),
        "pod container browser terminated: Error (exit code 2)"
    );
}

pub(crate) async fn succeeded_pod_makes_a_succeeded_browser(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.kubelet().set("done", Script::Succeed);
    cx.create_browser("done", json!({})).await;
    cx.until_gone("done").await;
    // The list may show it gone before the recorded watch has seen it at all.
    poll(WAIT, Duration::from_millis(20), || async {
        let seen = cx.seen_statuses("done");
        if seen.iter().any(|s| s["phase"] == "Succeeded") {
            Ok(())
        } else {
            Err(format!("done seen Succeeded; seen: {seen:#?}"))
        }
    })
    .await;
}

pub(crate) async fn external_delete_removes_the_pod_then_the_finalizer(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("del", json!({})).await;
    cx.until_running("del").await;
    cx.delete_browser("del").await;
    cx.until_gone("del").await;
    assert!(
        cx.seen_statuses("del")
            .iter()
            .all(|s| s["phase"] != "Failed")
    );
}

/// A pod of the operator whose Browser is gone (created in a race with the Browser's deletion,
/// as the soak found once, or left by a Browser whose finalizer someone removed): no finalizer
/// sees it go, so the operator deletes it, whether it finds it at start-up or when it appears.
pub(crate) async fn a_pod_left_without_its_browser_is_deleted(cx: Arc<Ctx>) {
    let orphan = |name: &str| {
        json!({
            "metadata": {
                "name": name,
                "labels": {
                    keys::LABEL_MANAGED_BY: keys::MANAGER,
                    keys::LABEL_BROWSER: name,
                },
                "ownerReferences": [{
                    "apiVersion": "selenosis.io/v1", "kind": "Browser", "name": name,
                    "uid": format!("{name}-deleted-browser"), "controller": true,
                }],
            },
            "spec": {"containers": [{"name": "browser", "image": cx.be.image}]},
        })
    };
    cx.create(&pod_resource(), orphan("left1")).await;
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.until("the pod found at start-up gone", |s| {
        s.pod("left1").is_none()
    })
    .await;
    cx.create(&pod_resource(), orphan("left2")).await;
    cx.until("the pod that appeared gone", |s| s.pod("left2").is_none())
        .await;
    // A Browser's own pod is not taken for one: its session runs on.
    cx.create_browser("kept", json!({})).await;
    cx.until_running("kept").await;
    cx.delete_browser("kept").await;
    cx.until_gone("kept").await;
    assert_eq!(cx.pod_uids("kept").len(), 1);
}

pub(crate) async fn pod_stuck_terminating_is_forced_after_the_deletion_timeout(cx: Arc<Ctx>) {
    cx.start_operator(&["--browser-pod-deletion-timeout=2s"]);
    cx.chrome_config().await;
    cx.kubelet().set_deletion("stuck", Deletion::Never);
    cx.create_browser("stuck", json!({})).await;
    cx.until_running("stuck").await;
    cx.delete_browser("stuck").await;
    cx.until("the pod terminating", |s| {
        s.pod("stuck")
            .is_some_and(|p| p["metadata"]["deletionTimestamp"].is_string())
    })
    .await;
    cx.until_gone("stuck").await;
}

pub(crate) async fn pod_deleted_under_a_live_browser_fails_it_with_pod_deleted(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    // Containers that take a while to stop: the operator sees the pod terminating.
    cx.kubelet()
        .set_deletion("pd", Deletion::After(Duration::from_secs(2)));
    cx.create_browser("pd", json!({})).await;
    let snap = cx.until_running("pd").await;
    let ip = snap.browser("pd").unwrap()["status"]["podIP"].clone();
    cx.delete_pod("pd", &DeleteParams::default()).await;
    let failure = cx.failure_of("pd").await;
    assert_eq!(failure["reason"], "PodDeleted");
    assert_eq!(failure["podIP"], ip);
    // A terminating pod is left to its kubelet, which confirms its removal.
    cx.until_gone("pd").await;
    assert_eq!(cx.pod_uids("pd").len(), 1);
}

pub(crate) async fn lost_pod_is_never_recreated(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("lost", json!({})).await;
    cx.until_running("lost").await;
    cx.delete_pod("lost", &DeleteParams::default().grace_period(0))
        .await;
    let failure = cx.failure_of("lost").await;
    assert!(
        is_failed_with(&failure, "PodLost") || is_failed_with(&failure, "PodDeleted"),
        "{failure}"
    );
    cx.until_gone("lost").await;
    assert_eq!(
        cx.pod_uids("lost").len(),
        1,
        "the pod must not be recreated"
    );
}

pub(crate) async fn foreign_pod_of_the_same_name_is_a_conflict_and_untouched(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    let foreign = json!({
        "metadata": {"name": "taken", "labels": {"app": "other"}},
        "spec": {"containers": [{"name": "c", "image": cx.be.image}]}
    });
    let created = cx.create(&pod_resource(), foreign).await;
    cx.create_browser("taken", json!({})).await;
    let failure = cx.failure_of("taken").await;
    assert_eq!(failure["reason"], "PodConflict");
    let snap = cx
        .until("the Browser gone", |s| s.browser("taken").is_none())
        .await;
    let pod = snap.pod("taken").expect("the foreign pod is left alone");
    assert_eq!(
        pod["metadata"]["uid"].as_str(),
        created.metadata.uid.as_deref()
    );
    assert!(pod["metadata"]["deletionTimestamp"].is_null());
    assert_eq!(pod["metadata"]["labels"], json!({"app": "other"}));
    assert!(pod["metadata"]["ownerReferences"].is_null());
    cx.delete_pod("taken", &DeleteParams::default().grace_period(0))
        .await;
    cx.until_gone("taken").await;
}

pub(crate) async fn browser_older_than_max_lifetime_is_ended(cx: Arc<Ctx>) {
    cx.start_operator(&["--browser-max-lifetime=2s"]);
    cx.chrome_config().await;
    cx.create_browser("old", json!({})).await;
    let failure = cx.failure_of("old").await;
    assert_eq!(failure["reason"], "LifetimeExceeded");
    cx.until_gone("old").await;
}

pub(crate) async fn two_hundred_browsers_at_once_all_run_then_all_clean_up(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    let names: Vec<String> = (0..200).map(|i| format!("b{i:03}")).collect();
    let create = |n: &String| {
        let (cx, n) = (cx.clone(), n.clone());
        async move { cx.create_browser(&n, json!({})).await }
    };
    futures::stream::iter(names.iter().map(create))
        .buffer_unordered(50)
        .collect::<Vec<()>>()
        .await;
    // A Browser created right after the burst: its first Event is not starved by the
    // burst's backlog of some 400.
    cx.create_browser("next", json!({})).await;
    let (limit, every) = (Duration::from_secs(180), Duration::from_millis(500));
    let pod_seen = poll(limit, Duration::from_millis(20), || async {
        cx.history("Pod", "next")
            .first()
            .map(|s| s.at)
            .ok_or_else(|| "the pod of next".to_string())
    })
    .await;
    let event_seen = poll(limit, Duration::from_millis(20), || async {
        cx.seen_event("next", "PodCreated")
            .ok_or_else(|| "the PodCreated Event of next".to_string())
    })
    .await;
    let after = event_seen.saturating_duration_since(pod_seen);
    println!(
        "    after a burst of 200: PodCreated of the next Browser {:.2}s after its pod",
        after.as_secs_f64()
    );
    // On a real API server (a first-come queue took 20 s). The double shares the test's CPU
    // with the whole burst, where the writes before the Event alone may take seconds: there
    // the order is left to the queue's own tests (`controller/events/queue.rs`).
    if cx.be.kind != Kind::Double {
        assert!(
            after <= Duration::from_secs(2),
            "the next Browser's PodCreated came {after:?} after its pod"
        );
    }
    cx.delete_browser("next").await;
    cx.until_gone("next").await;
    let snap = cx
        .until_within(limit, every, "200 Running", |s| {
            s.browsers
                .iter()
                .filter(|b| b["status"]["phase"] == "Running" && b["status"]["podIP"].is_string())
                .count()
                == 200
        })
        .await;
    assert_eq!(snap.pods.len(), 200);
    let delete = |n: &String| {
        let (cx, n) = (cx.clone(), n.clone());
        async move { cx.delete_browser(&n).await }
    };
    futures::stream::iter(names.iter().map(delete))
        .buffer_unordered(50)
        .collect::<Vec<()>>()
        .await;
    cx.until_within(limit, every, "all gone", |s| {
        s.browsers.is_empty() && s.pods.is_empty()
    })
    .await;
    for name in &names {
        assert_eq!(cx.pod_uids(name).len(), 1, "{name}");
    }
}
