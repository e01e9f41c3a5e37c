//! Faults during a burst, as either operator goes through them: this one, or the Go
//! browser-controller in its place where `E2E_GO_CONTROLLER` is set (a parity report, see
//! docs/compatibility.md). What counts is what a fault leaves behind once it healed: Browsers
//! that never settle (stuck), pods created twice, pods without their Browser (orphaned). It is
//! read from the recorded watch history, which spans the fault, and the API server's own
//! records (the double's request log, kube-apiserver's audit log).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::DeleteParams;

use crate::partition::{Partition, cut_length, first_moment_all};
use crate::{Ctx, Process};

/// Every Browser settles within this much of the fault's end.
const SETTLE_BOUND: Duration = Duration::from_secs(30);
/// Once every Browser is deleted, nothing is left within this much.
const CLEANUP_BOUND: Duration = Duration::from_secs(60);
/// Browsers of the burst; a third end their sessions on their own.
const BURST: usize = 60;

enum Fault {
    /// SIGKILL, then a new process.
    OperatorKill,
    /// The API server goes away and comes back (kube-apiserver restarts; the double answers
    /// 503 for a while).
    ApiServerRestart,
    /// The operator's link cut, then healed.
    Partition,
}

/// A burst of [`BURST`] Browsers with `fault` once 15 pods exist, then: every Browser settled
/// within [`SETTLE_BOUND`] of the fault's end, at most one pod created per Browser, and nothing
/// left within [`CLEANUP_BOUND`] of deleting them all.
async fn burst_through(cx: &Arc<Ctx>, fault: Fault) {
    let mut partition = match fault {
        Fault::Partition => match Partition::new(cx, 0x4e23).await {
            Some(partition) => Some(partition),
            None => return,
        },
        _ => None,
    };
    let (kubeconfig, process) = match &partition {
        Some(p) => (
            p.kubeconfig.clone(),
            Process {
                uid: p.process.uid,
                env: Vec::new(),
            },
        ),
        None => (cx.be.operator_kubeconfig.clone(), Process::default()),
    };
    let start = || {
        let child = cx.spawn_operator_under_test(&kubeconfig, &process, &[]);
        *cx.operator.lock().unwrap() = Some(child);
    };
    start();
    cx.chrome_config().await;
    if !cx.is_go() {
        cx.until_config("chrome", "Valid", "True").await;
    }
    let names = cx.burst("f", BURST).await;
    let every = Duration::from_millis(100);
    cx.until_within(Duration::from_secs(120), every, "15 pods", |s| {
        s.pods.len() >= 15
    })
    .await;
    let began = Instant::now();
    match fault {
        Fault::OperatorKill => {
            cx.kill_operator();
            start();
        }
        Fault::ApiServerRestart => cx.be.outage().await.expect("the API server is back"),
        Fault::Partition => {
            let partition = partition.as_mut().expect("a partition");
            partition.cut();
            tokio::time::sleep(cut_length(cx)).await;
            partition.heal();
        }
    }
    let healed = Instant::now();
    // Settled: gone, failed with a reason, succeeded, or Running with its IP while its pod
    // runs; each Browser the first moment it was, by the history.
    let stuck = || -> Vec<String> {
        names
            .iter()
            .filter(|n| {
                first_moment_all(cx, std::slice::from_ref(n), healed, |l| l.settled()).is_none()
            })
            .cloned()
            .collect()
    };
    let deadline = healed + SETTLE_BOUND;
    while Instant::now() < deadline && !stuck().is_empty() {
        tokio::time::sleep(every).await;
    }
    let stuck = stuck();
    let twice: Vec<String> = names
        .iter()
        .filter(|n| cx.pod_uids(n).len() > 1)
        .cloned()
        .chain(
            cx.be
                .pod_creates(&cx.ns)
                .unwrap_or_default()
                .into_iter()
                .filter(|(_, creates)| *creates > 1)
                .map(|(name, _)| name),
        )
        .collect();
    for name in &names {
        match cx.browsers().delete(name, &DeleteParams::default()).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => panic!("browser {name} deleted: {e}"),
        }
    }
    let cleanup = Instant::now() + CLEANUP_BOUND;
    let mut left = cx.snapshot().await;
    while Instant::now() < cleanup && !(left.browsers.is_empty() && left.pods.is_empty()) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        left = cx.snapshot().await;
    }
    let left_browsers = crate::names(&left.browsers);
    let orphans: Vec<&str> = crate::names(&left.pods)
        .into_iter()
        .filter(|p| !left_browsers.contains(p))
        .collect();
    println!(
        "    fault {:.1}s; {} of {BURST} Browsers not settled within {SETTLE_BOUND:?}, {} pods created twice; once every Browser was deleted, {} Browsers and {} pods left (after up to {CLEANUP_BOUND:?}), {} pods without their Browser",
        (healed - began).as_secs_f64(),
        stuck.len(),
        twice.len(),
        left.browsers.len(),
        left.pods.len(),
        orphans.len(),
    );
    // The first stuck Browser's and its pod's last recorded status.
    let last_seen = |kind: &str| {
        stuck
            .first()
            .and_then(|n| cx.history(kind, n).last().cloned())
            .map(|s| {
                format!(
                    "{}{}",
                    s.object["status"],
                    if s.deleted { " (deleted)" } else { "" }
                )
            })
            .unwrap_or_default()
    };
    assert!(
        stuck.is_empty(),
        "stuck: {stuck:?}; the first as last seen: Browser {}, pod {}",
        last_seen("Browser"),
        last_seen("Pod"),
    );
    assert!(twice.is_empty(), "pods created twice: {twice:?}");
    assert!(
        left.browsers.is_empty() && left.pods.is_empty(),
        "left behind: Browsers {left_browsers:?}, pods {:?}",
        crate::names(&left.pods)
    );
}

/// The operator is SIGKILLed during a burst and started again.
pub(crate) async fn parity_operator_sigkill_during_a_burst_nothing_stuck_or_orphaned(cx: Arc<Ctx>) {
    burst_through(&cx, Fault::OperatorKill).await;
}

/// The API server restarts during a burst.
pub(crate) async fn parity_api_server_restart_during_a_burst_nothing_stuck_or_orphaned(
    cx: Arc<Ctx>,
) {
    burst_through(&cx, Fault::ApiServerRestart).await;
}

/// The operator's link is cut during a burst (30 s on a real API server), then healed.
pub(crate) async fn parity_partition_during_a_burst_nothing_stuck_or_orphaned(cx: Arc<Ctx>) {
    burst_through(&cx, Fault::Partition).await;
}
