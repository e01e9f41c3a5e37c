//! Scenarios on a real node (`E2E_NODE_ASSETS`): a kubelet with containerd, runc and a CNI
//! bridge runs the pods, with images made from local root filesystems (see
//! `crates/testkit/src/images.rs`). The browser is Debian's Chromium behind chromedriver; a busybox
//! container stands in for the seleniferous sidecar. Transitions are read from the recorded
//! watch history.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::images::{BUSYBOX, CHROMIUM, PAUSE};
use crate::support::webdriver::{self, chromium, sidecar};
use crate::{Ctx, poll};

/// A config whose chrome 139.0 entry is `entry` (the image's settings and the sidecar).
pub(crate) async fn config(cx: &Ctx, entry: Value) {
    cx.create_config(
        "chrome",
        json!({
            "template": {"terminationGracePeriodSeconds": 10},
            "browsers": {"chrome": {"139.0": entry}},
        }),
    )
    .await;
    cx.until_config("chrome", "Valid", "True").await;
}

/// An entry whose browser container is busybox running `script`.
fn busybox(script: &str, extra: Value) -> Value {
    let mut entry = json!({
        "image": BUSYBOX,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
        "sidecars": [sidecar("sleep 3600")],
    });
    if let (Some(entry), Some(extra)) = (entry.as_object_mut(), extra.as_object()) {
        entry.extend(extra.clone());
    }
    entry
}

/// A WebDriver command to chromedriver at `ip`; the answer's `value`.
fn webdriver(ip: IpAddr, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
    webdriver::command(ip, method, path, body.as_ref(), Duration::from_secs(60))
}

/// A real WebDriver session through `status.podIP`, as the hub opens one: chromedriver ready,
/// a session with headless Chromium, a page loaded, its title read, the session closed; then
/// the Browser is deleted and its pod goes. Reports the time from the Browser's creation to
/// Running and to a usable session.
pub(crate) async fn a_real_browser_session_through_the_pod_ip(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    config(&cx, chromium("sleep 3600")).await;
    session_through_the_pod_ip(&cx, "real").await;
}

/// A Browser `name` (chrome 139.0, a Chromium entry) Running, a WebDriver session through its
/// pod IP, and the Browser deleted with its pod.
pub(crate) async fn session_through_the_pod_ip(cx: &Ctx, name: &str) {
    let created = Instant::now();
    cx.create_browser(name, json!({})).await;
    let running = cx.seen_running(name).await;
    let running_at = cx
        .history("Browser", name)
        .iter()
        .find(|s| s.object["status"]["phase"] == "Running")
        .map(|s| s.at)
        .expect("Running in the history");
    let ip: IpAddr = running["status"]["podIP"]
        .as_str()
        .and_then(|ip| ip.parse().ok())
        .expect("Running with a pod IP");
    poll(
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async {
            match webdriver(ip, "GET", "/status", None) {
                Ok(status) if status["ready"] == true => Ok(()),
                other => Err(format!("chromedriver ready at {ip}: {other:?}")),
            }
        },
    )
    .await;
    let session =
        webdriver(ip, "POST", "/session", Some(webdriver::headless_chrome())).expect("a session");
    let id = session["sessionId"]
        .as_str()
        .expect("a session id")
        .to_string();
    let page = "data:text/html,<html><head><title>browser-controller</title></head><body>e2e</body></html>";
    webdriver(
        ip,
        "POST",
        &format!("/session/{id}/url"),
        Some(json!({"url": page})),
    )
    .expect("page loaded");
    let title = webdriver(ip, "GET", &format!("/session/{id}/title"), None).expect("title");
    let usable = created.elapsed();
    assert_eq!(title, "browser-controller");
    webdriver(ip, "DELETE", &format!("/session/{id}"), None).expect("session closed");
    println!(
        "    real node: Browser Running {:.1}s and a WebDriver session usable {:.1}s after its creation ({} {})",
        (running_at - created).as_secs_f64(),
        usable.as_secs_f64(),
        session["capabilities"]["browserName"]
            .as_str()
            .unwrap_or("?"),
        session["capabilities"]["browserVersion"]
            .as_str()
            .unwrap_or("?"),
    );
    cx.delete_browser(name).await;
    cx.until_gone(name).await;
    assert_eq!(cx.pod_uids(name).len(), 1);
}

/// The browser container exceeds its memory limit: the kernel kills it, and the Browser fails
/// naming it.
pub(crate) async fn a_browser_container_over_its_memory_limit_is_oomkilled(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    config(
        &cx,
        busybox(
            "sleep 1; dd if=/dev/zero of=/dev/null bs=256M count=1",
            json!({"resources": {"limits": {"memory": "32Mi", "cpu": "200m"}}}),
        ),
    )
    .await;
    cx.create_browser("hog", json!({})).await;
    let failure = cx.failure_of("hog").await;
    assert_eq!(failure["reason"], "ContainerTerminated", "{failure}");
    assert_eq!(
        failure["message"],
        "pod container browser terminated: OOMKilled (exit code 137)"
    );
    cx.until_gone("hog").await;
}

/// An image nobody can pull: the Browser fails with the kubelet's reason, without waiting for
/// the creation timeout.
pub(crate) async fn a_missing_image_fails_the_browser_with_the_pull_error(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    config(
        &cx,
        json!({
            "image": "localhost/does-not-exist:1.0",
            "imagePullPolicy": "IfNotPresent",
            "sidecars": [sidecar("sleep 3600")],
        }),
    )
    .await;
    let created = Instant::now();
    cx.create_browser("missing", json!({})).await;
    let failure = cx.failure_of("missing").await;
    let reason = failure["reason"].as_str().unwrap_or_default();
    assert!(
        ["ErrImagePull", "ImagePullBackOff"].contains(&reason),
        "{failure}"
    );
    println!(
        "    real node: {reason} {:.1}s after the Browser's creation",
        created.elapsed().as_secs_f64()
    );
    cx.until_gone("missing").await;
}

/// The session proxy exits when the session is over: the Browser ends with
/// `ContainerTerminated` naming it, and its pod and the Browser go.
pub(crate) async fn the_sidecar_exit_ends_the_session(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    config(
        &cx,
        busybox(
            "sleep 3600",
            json!({"sidecars": [sidecar("sleep 3; exit 0")]}),
        ),
    )
    .await;
    cx.create_browser("ends", json!({})).await;
    cx.seen_running("ends").await;
    let failure = cx.failure_of("ends").await;
    assert_eq!(failure["reason"], "ContainerTerminated", "{failure}");
    assert_eq!(
        failure["message"],
        "pod container seleniferous terminated: Completed (exit code 0)"
    );
    cx.until_gone("ends").await;
}

/// A Browser deleted by the hub stays until its pod has stopped gracefully: the browser
/// container takes 2 s after SIGTERM, and the Browser goes only once the pod is gone.
pub(crate) async fn a_deleted_browser_waits_for_its_pod_to_stop_gracefully(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    // The sidecar stops at once on SIGTERM: the pod's stop is the browser container's.
    config(
        &cx,
        busybox(
            "trap 'sleep 2; exit 0' TERM; while true; do sleep 1 & wait; done",
            json!({"sidecars": [sidecar("trap 'exit 0' TERM; while true; do sleep 1 & wait; done")]}),
        ),
    )
    .await;
    cx.create_browser("graceful", json!({})).await;
    cx.seen_running("graceful").await;
    let deleted = Instant::now();
    cx.delete_browser("graceful").await;
    cx.until_gone("graceful").await;
    let gone = |kind: &str| {
        cx.history(kind, "graceful")
            .iter()
            .find(|s| s.deleted)
            .map(|s| s.at)
            .unwrap_or_else(|| panic!("the {kind} seen deleted"))
    };
    let (pod_gone, browser_gone) = (gone("Pod"), gone("Browser"));
    assert!(pod_gone <= browser_gone, "the pod went first");
    let stop = pod_gone - deleted;
    println!(
        "    real node: the pod stopped {:.1}s after the Browser's deletion",
        stop.as_secs_f64()
    );
    assert!(
        stop >= Duration::from_secs(2),
        "the pod had its graceful stop: {stop:?}"
    );
}

/// Waits up to `limit` until the BrowserConfig `chrome` says its images are on the node:
/// its pre-pull progress.
pub(crate) async fn until_prepulled(cx: &Ctx, limit: Duration) -> Value {
    let configs = cx.api(&crate::support::kinds::config_resource(cx.layout));
    poll(limit, Duration::from_millis(200), || async {
        let config = configs.get("chrome").await.map_err(|e| e.to_string())?;
        let status = &config.data["status"];
        let pulled = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "PrePulled" && c["status"] == "True");
        let progress = &status["prePull"];
        if pulled && progress["nodesDesired"] == 1 && progress["nodesReady"] == 1 {
            Ok(progress.clone())
        } else {
            Err(format!("pre-pulled onto the node: {status:#}"))
        }
    })
    .await
}

/// Pre-pull on a real node: the DaemonSet's pod runs on it (the DaemonSet controller of
/// kube-controller-manager) with every image, and the BrowserConfig reports the node ready.
pub(crate) async fn prepull_daemon_set_pulls_onto_the_real_node(cx: Arc<Ctx>) {
    crate::prepull::grant_prepull(&cx).await;
    cx.start_operator(&[
        "--enable-prepull",
        &format!("--prepull-helper-image={BUSYBOX}"),
        &format!("--prepull-pause-image={PAUSE}"),
    ]);
    let created = Instant::now();
    cx.create_config(
        "chrome",
        json!({
            "template": {"prePull": true, "imagePullPolicy": "IfNotPresent", "sidecars": [sidecar("sleep 3600")]},
            "browsers": {"chrome": {"139.0": {"image": CHROMIUM}}},
        }),
    )
    .await;
    let progress = until_prepulled(&cx, crate::WAIT).await;
    println!(
        "    real node: {} images pulled onto the node {:.1}s after the BrowserConfig's creation",
        progress["images"],
        created.elapsed().as_secs_f64()
    );
    let pods = Ctx::list(&cx.pods()).await;
    let on_node = pods
        .iter()
        .filter(|p| {
            p["metadata"]["labels"][browser_controller::api::keys::LABEL_PREPULL].is_string()
        })
        .filter(|p| p["spec"]["nodeName"] == crate::support::node::NODE_NAME)
        .count();
    assert_eq!(on_node, 1, "one pre-pull pod on the node");
    until_prepull_opted_out(&cx).await;
}

/// The BrowserConfig `chrome` opts out of pre-pull: its DaemonSet goes, and with it its pod.
pub(crate) async fn until_prepull_opted_out(cx: &Ctx) {
    cx.patch_config("chrome", json!({"spec": {"template": {"prePull": false}}}))
        .await;
    poll(crate::WAIT, Duration::from_millis(200), || async {
        let left = Ctx::list(&cx.pods()).await.len();
        (left == 0)
            .then_some(())
            .ok_or_else(|| format!("{left} pre-pull pods left"))
    })
    .await;
}
