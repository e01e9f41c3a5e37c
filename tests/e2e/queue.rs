//! The capacity queue: Browsers a ResourceQuota has no room for wait their turn, in creation
//! order, without loading the API server with refused creates.

use std::sync::Arc;

use serde_json::json;

use crate::Ctx;

/// Whether the Browser waits in line, as its status shows it.
fn queued(cx_snapshot: &crate::Snapshot, name: &str) -> bool {
    cx_snapshot
        .browser(name)
        .is_some_and(|b| b["status"]["phase"] == "Pending" && b["status"]["reason"] == "Queued")
}

pub(crate) async fn a_full_quota_queues_browsers_and_admits_them_in_creation_order(cx: Arc<Ctx>) {
    const FLAGS: &[&str] = &["--queue-timeout=60s"];
    cx.start_operator(FLAGS);
    cx.chrome_config().await;
    // Validated before the quota exists: its dry runs count against it too.
    cx.until_config("chrome", "Valid", "True").await;
    cx.quota_of_pods(2).await;
    let names = ["q1", "q2", "q3", "q4", "q5", "q6"];
    for name in names {
        cx.create_browser(name, json!({})).await;
    }
    cx.until_running("q1").await;
    cx.until_running("q2").await;
    let waiting = ["q3", "q4", "q5", "q6"];
    let snapshot = cx
        .until("q3 to q6 waiting in line", |s| {
            waiting.iter().all(|name| queued(s, name))
        })
        .await;
    for name in waiting {
        let status = &snapshot.browser(name).unwrap()["status"];
        let message = status["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("waiting for quota e2e (pods 2/2), ")
                && message.ends_with(" in line"),
            "{name}: {status}"
        );
        let ready = &status["conditions"][0];
        assert_eq!(
            (&ready["status"], &ready["reason"], &ready["message"]),
            (&json!("False"), &json!("Queued"), &status["message"]),
            "{name}"
        );
    }
    cx.until_events("q3", &["Queued"]).await;
    let refused_when_queued = cx.refused_pod_creates();

    // A waiting Browser deleted by its client leaves the line; a restarted operator keeps the
    // order: neither frees a slot, so neither may cost a refused create.
    cx.delete_browser("q4").await;
    cx.until_gone("q4").await;
    cx.kill_operator();
    cx.start_operator(FLAGS);
    cx.until(
        "the restarted operator to keep q3, q5 and q6 waiting",
        |s| ["q3", "q5", "q6"].iter().all(|name| queued(s, name)),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        cx.refused_pod_creates(),
        refused_when_queued,
        "a refused create while no slot was freed"
    );

    // Each session that ends frees one slot: the next in creation order gets it.
    cx.delete_browser("q1").await;
    cx.until_gone("q1").await;
    cx.recount_quota().await;
    cx.until_running("q3").await;
    cx.until_events("q3", &["Admitted"]).await;
    cx.delete_browser("q2").await;
    cx.until_gone("q2").await;
    cx.recount_quota().await;
    cx.until_running("q5").await;
    let first_pod = |name: &str| {
        cx.history("Pod", name)
            .first()
            .map(|seen| seen.at)
            .unwrap_or_else(|| panic!("{name} never had a pod"))
    };
    assert!(first_pod("q3") < first_pod("q5"), "q5 overtook q3");

    // The last one waits out its timeout and fails saying so, without ever having had a pod.
    let message = cx.fails_without_a_pod("q6", "QuotaExceeded").await;
    assert_eq!(
        message,
        "gave up waiting for quota e2e (pods 2/2) after 1m0s (--queue-timeout)"
    );
    assert!(cx.pod_uids("q4").is_empty(), "q4 had a pod");

    // At most one refused create per freed slot and waiting Browser: two slots freed, with
    // three and two Browsers waiting, on top of what joining the line cost.
    if let (Some(before), Some(after)) = (refused_when_queued, cx.refused_pod_creates()) {
        println!("    refused pod creates: {before} while joining the line, {after} in all");
        assert!(
            after - before <= 3 + 2,
            "{} refused creates after two slots freed",
            after - before
        );
        assert!(
            before <= waiting.len(),
            "{before} refused creates to join the line"
        );
    }
    for name in ["q3", "q5"] {
        cx.delete_browser(name).await;
    }
    for name in ["q3", "q5"] {
        cx.until_gone(name).await;
    }
}
