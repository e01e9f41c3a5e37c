//! Restarts and outages: the operator SIGKILLed and restarted, and the API server taken away
//! during a burst.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::host;
use crate::support::kubelet::Script;
use crate::{Ctx, Snapshot};

pub(crate) async fn operator_sigkilled_mid_lifecycle_and_restarted(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    // `ends` finishes its session while the operator is down; `deleted` is deleted by the
    // client meanwhile; `late` is created meanwhile.
    cx.kubelet().set(
        "ends",
        Script::ExitAfterRunning {
            container: "browser".into(),
            exit_code: 0,
            // Long enough for the operator to be killed first, however busy the machine.
            after: Duration::from_secs(8),
        },
    );
    cx.create_browser("ends", json!({})).await;
    cx.create_browser("deleted", json!({})).await;
    for name in ["ends", "deleted"] {
        cx.seen_running(name).await;
    }
    cx.kill_operator();
    cx.delete_browser("deleted").await;
    cx.create_browser("late", json!({})).await;
    // The session ends with nobody watching: the pod's status changes, the Browser does not.
    cx.until("the browser container of ends terminated", |s| {
        s.pod("ends").is_some_and(|p| {
            p["status"]["containerStatuses"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["state"]["terminated"].is_object()))
        })
    })
    .await;
    let snap = cx.snapshot().await;
    assert!(snap.running("ends"));
    assert!(
        snap.browser("deleted")
            .is_some_and(|b| b["metadata"]["deletionTimestamp"].is_string()),
        "the finalizer holds the Browser while the operator is down"
    );
    assert!(snap.pod("late").is_none());

    cx.start_operator(&[]);
    let failure = cx.failure_of("ends").await;
    assert_eq!(failure["reason"], "ContainerTerminated");
    cx.until_gone("ends").await;
    cx.until_gone("deleted").await;
    cx.until_running("late").await;
    cx.delete_browser("late").await;
    cx.until_gone("late").await;
    for name in ["ends", "deleted", "late"] {
        assert_eq!(cx.pod_uids(name).len(), 1, "{name}: one pod, ever");
    }
}

/// An API server restart during a burst, with the operator SIGKILLed and restarted as well:
/// every Browser gets at most one pod (as the API server recorded the creates, and as a
/// watch that resumes across the outage saw them), every Browser created before or after
/// the outage has a status within seconds of the API server serving again and settles
/// (Running, or failed with a reason) within seconds more, `/readyz` is not ready while the
/// API server is away, and nothing is left once the Browsers are deleted.
pub(crate) async fn api_server_restart_and_operator_kill_during_a_burst_one_pod_each_and_quick_recovery(
    cx: Arc<Ctx>,
) {
    /// Within this much of the API server serving again, every Browser has a status.
    const STATUS_BOUND: Duration = Duration::from_secs(5);
    /// The pod's own start on top: the kubelet simulator resumes its watch (up to 4 s of
    /// backoff) and walks the pod through its steps.
    const SETTLE_BOUND: Duration = Duration::from_secs(10);
    let probe = host::free_port();
    let health = format!("--health-probe-bind-address=127.0.0.1:{probe}");
    cx.start_operator(&[&health]);
    cx.chrome_config().await;
    // A third of the sessions end on their own (the sidecar exits), through the outage too.
    let names = cx.burst("r", 100).await;
    let (every, limit) = (Duration::from_millis(100), Duration::from_secs(120));
    cx.until_within(limit, every, "20 pods", |s| s.pods.len() >= 20)
        .await;
    cx.kill_operator();
    cx.start_operator(&[&health]);
    // Readiness as a kubelet would probe it, every 100 ms.
    let (probing, prober) = crate::probe_readiness(probe);
    cx.until_within(limit, every, "the restarted operator ready", |_| {
        host::http_get(probe, "/readyz").is_some_and(|(code, _)| code == 200)
    })
    .await;
    let away = Instant::now();
    cx.be.outage().await.expect("API server back");
    let back = Instant::now();
    let late: Vec<String> = (0..10).map(|i| format!("late{i}")).collect();
    cx.create_browsers(&late).await;
    let all: Vec<String> = names.iter().chain(&late).cloned().collect();
    let has_status = |s: &Snapshot, n: &str| {
        s.browser(n)
            .is_none_or(|b| b["status"]["phase"].is_string())
    };
    let snap = cx
        .until_within(STATUS_BOUND, every, "a status on every Browser", |s| {
            all.iter().all(|n| has_status(s, n))
        })
        .await;
    let statused = back.elapsed();
    // Settled: Running with its IP, or failed with a reason (and then gone, or going).
    let settled = |s: &Snapshot, n: &str| {
        s.browser(n).is_none_or(|b| {
            let status = &b["status"];
            (status["phase"] == "Running" && status["podIP"].is_string())
                || (status["phase"] == "Failed" && status["reason"].is_string())
        })
    };
    cx.until_within(SETTLE_BOUND, every, "every Browser settled", |s| {
        all.iter().all(|n| settled(s, n))
    })
    .await;
    println!(
        "    API server away {:.1}s; statuses {:.1}s and settled {:.1}s after it was back; {} of {} Browsers then",
        (back - away).as_secs_f64(),
        statused.as_secs_f64(),
        back.elapsed().as_secs_f64(),
        snap.browsers.len(),
        all.len()
    );
    // Readiness may come a little after the Browsers settled (a restarting API server answers
    // watches with 429 for a moment): the prober runs until the bound has passed, or it saw
    // the operator ready.
    let readiness_bound = back + STATUS_BOUND;
    while Instant::now() < readiness_bound
        && host::http_get(probe, "/readyz").is_none_or(|(code, _)| code != 200)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    probing.store(false, std::sync::atomic::Ordering::Relaxed);
    let samples = prober.await.expect("readiness prober");
    let while_away: Vec<Option<u16>> = samples
        .iter()
        .filter(|(t, _)| *t > away + Duration::from_secs(1) && *t < back)
        .map(|(_, code)| *code)
        .collect();
    assert!(
        while_away.contains(&Some(503)),
        "/readyz while the API server was away: {while_away:?}"
    );
    let ready_again = samples
        .iter()
        .find(|(t, code)| *t >= back && *code == Some(200))
        .map(|(t, _)| *t - back);
    assert!(
        ready_again.is_some_and(|after| after <= STATUS_BOUND),
        "/readyz ready again {ready_again:?} after the API server was back; after it: {:?}",
        samples
            .iter()
            .filter(|(t, _)| *t >= back)
            .map(|(t, code)| (t.duration_since(back).as_millis(), *code))
            .collect::<Vec<_>>()
    );
    cx.delete_everything().await;
    for name in &all {
        assert!(
            cx.pod_uids(name).len() <= 1,
            "{name}: pods {:?}",
            cx.pod_uids(name)
        );
    }
    if let Some(creates) = cx.be.pod_creates(&cx.ns) {
        let twice: Vec<_> = creates.iter().filter(|(_, n)| **n > 1).collect();
        assert!(twice.is_empty(), "pods created more than once: {twice:?}");
        assert!(
            !creates.is_empty(),
            "the API server recorded the pod creates"
        );
    }
}
