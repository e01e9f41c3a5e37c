//! The capacity queue: Browsers a ResourceQuota has no room for wait their turn, in creation
//! order, without loading the API server with refused creates.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::json;

use crate::support::kubelet::Script;
use crate::{Ctx, poll};

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
        // Decided while the quota still had room as the cache showed it, a Browser behind
        // others still being admitted waits without naming it (docs/behaviour.md).
        assert!(
            ["waiting for quota e2e (pods 2/2), ", "waiting for quota, "]
                .iter()
                .any(|form| message.starts_with(form))
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
    let named = snapshot.browser("q6").unwrap()["status"]["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("waiting for quota e2e"));
    let quota = if named {
        "quota e2e (pods 2/2)"
    } else {
        "quota"
    };
    assert_eq!(
        message,
        format!("gave up waiting for {quota} after 1m0s (--queue-timeout)")
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

/// Fair share: one owner's burst does not hold everyone else's sessions. Owner A creates 200
/// Browsers at once against a quota of 10 pods; a second after all of them wait in line or
/// run (on a slow server creating 200 takes a while), owner B creates 5, and a Browser without
/// an owner arrives after them. Sessions end about 2 s after their pod runs.
/// Read from the recorded watch history: B's first Browser gets the first slot after it joined
/// the line, B and A alternate while both wait, the anonymous Browser gets the first slot after
/// it joined, each owner's Browsers that waited get their pods in creation order, and refused
/// creates stay within one per freed slot. A Browser joins the line when its `Queued` status
/// is written (or arrives, when a slot is free then); one admission may already be under way
/// at that moment, and its pod may appear after it.
pub(crate) async fn owners_take_turns_for_a_full_quota_each_in_creation_order(cx: Arc<Ctx>) {
    cx.start_operator(&["--queue-timeout=5m"]);
    cx.chrome_config().await;
    cx.until_config("chrome", "Valid", "True").await;
    cx.quota_of_pods(10).await;
    // No quota controller runs here: the quota's use is recounted as it would.
    let recount = {
        let cx = cx.clone();
        tokio::spawn(async move {
            loop {
                cx.recount_quota().await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let a: Vec<String> = (0..200).map(|i| format!("a{i:03}")).collect();
    let b: Vec<String> = (0..5).map(|i| format!("b{i}")).collect();
    let all: Vec<&String> = a.iter().chain(&b).collect();
    for name in all.iter().copied().chain([&"nobody".to_string()]) {
        cx.kubelet().set(
            name,
            Script::ExitAfterRunning {
                container: "seleniferous".into(),
                exit_code: 0,
                after: Duration::from_secs(2),
            },
        );
    }
    let seen_queued = |name: &str| seen_queued(&cx, name);
    create(&cx, &a, Some("A")).await;
    // A's line has formed (the quota full) before B arrives, however slow the server.
    handled(&cx, &a.iter().map(String::as_str).collect::<Vec<_>>()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // One at a time, so that B's creation order is b0 to b4 whatever second each falls in.
    for name in &b {
        cx.create_browser_of(name, Some("B"), json!({})).await;
    }
    // A second later (creation times have whole seconds: the same second would order the
    // two newcomers by name).
    tokio::time::sleep(Duration::from_secs(1)).await;
    cx.create_browser_of("nobody", None, json!({})).await;
    let late: Vec<&str> = b.iter().map(String::as_str).chain(["nobody"]).collect();
    handled(&cx, &late).await;
    let joined = joined_the_line(&cx, "b0").expect("b0 seen");
    let everyone: Vec<&str> = a
        .iter()
        .map(String::as_str)
        .chain(late.iter().copied())
        .collect();
    cx.until_within(
        Duration::from_secs(240),
        Duration::from_millis(500),
        "every Browser to have had its pod",
        |_| {
            everyone
                .iter()
                .all(|name| !cx.history("Pod", name).is_empty())
        },
    )
    .await;
    recount.abort();

    // Admissions after B's first joined the line, in the order their pods appeared.
    let first_pod = |name: &str| cx.history("Pod", name).first().map(|seen| seen.at);
    let mut admitted: Vec<(std::time::Instant, &str)> = everyone
        .iter()
        .filter_map(|name| Some((first_pod(name)?, *name)))
        .filter(|(at, _)| *at > joined)
        .collect();
    admitted.sort();
    let order: Vec<&str> = admitted.iter().map(|(_, name)| *name).collect();
    println!(
        "    admitted after B joined the line: {}",
        order.iter().take(14).copied().collect::<Vec<_>>().join(" ")
    );
    // B's first, if it waited, gets the first slot freed after it joined the line, or the next:
    // one admission may be under way when it joined (the line's first, or a Browser of B that
    // arrived as slots freed and was let in on the room it saw then), and its pod may appear
    // after. If B's first did not wait, a slot was free when it arrived.
    if seen_queued("b0") {
        let under_way = usize::from(order.first().is_some_and(|name| *name != "b0"));
        assert_eq!(
            order.get(under_way),
            Some(&"b0"),
            "B's first gets the first freed slot: {order:?}"
        );
    }
    // The anonymous Browser's turn comes in the rotation: after it joined, no owner is served
    // twice before it.
    let nobody_joined = joined_the_line(&cx, "nobody").expect("nobody seen");
    let before_nobody: Vec<&str> = admitted
        .iter()
        .filter(|(at, _)| *at > nobody_joined)
        .map(|(_, name)| *name)
        .take_while(|name| *name != "nobody")
        .collect();
    for owner in ['a', 'b'] {
        assert!(
            before_nobody
                .iter()
                .filter(|name| name.starts_with(owner))
                .count()
                <= 1,
            "the anonymous Browser's turn comes in the rotation: {order:?}"
        );
    }
    assert!(
        order.contains(&"nobody"),
        "the anonymous Browser admitted: {order:?}"
    );
    // While B waits, no two of A's in a row.
    let turn = |name: &str| order.iter().position(|n| *n == name).unwrap_or(usize::MAX);
    let until_b4: Vec<&str> = order[..=turn("b4").min(order.len() - 1)]
        .iter()
        .copied()
        .filter(|name| *name != "nobody")
        .collect();
    assert!(
        !until_b4
            .windows(2)
            .any(|w| w[0].starts_with('a') && w[1].starts_with('a')),
        "B and A alternate while both wait: {until_b4:?}"
    );
    // Each owner's Browsers that waited in line, admitted in their creation order (time, then
    // name). Those the quota had room for at once were created side by side.
    for owner in [&a, &b] {
        let owner: Vec<&String> = owner.iter().filter(|name| seen_queued(name)).collect();
        let created = |name: &str| {
            let seen = cx.history("Browser", name);
            let browser = &seen.first().expect("seen").object;
            (
                browser["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                name.to_string(),
            )
        };
        let mut by_pod = owner.clone();
        by_pod.sort_by_key(|name| first_pod(name));
        let mut by_creation = by_pod.clone();
        by_creation.sort_by_key(|name| created(name));
        assert_eq!(
            by_pod, by_creation,
            "an owner's Browsers in their creation order"
        );
    }
    // At most one refused create per slot freed after the line formed.
    if let Some(refused) = cx.refused_pod_creates() {
        println!(
            "    refused pod creates: {refused} for {} admissions from the line",
            order.len()
        );
        assert!(refused <= order.len(), "{refused} refused creates");
    }
    cx.delete_everything().await;
}

/// Whether the recorded history shows `name` waiting in line.
fn seen_queued(cx: &Ctx, name: &str) -> bool {
    cx.history("Browser", name)
        .iter()
        .any(|seen| seen.object["status"]["reason"] == "Queued")
}

/// When `name` joined the line, as the recorded history shows it: its first `Queued` status,
/// or its arrival when a slot free at that moment let it in without waiting.
fn joined_the_line(cx: &Ctx, name: &str) -> Option<std::time::Instant> {
    let seen = cx.history("Browser", name);
    seen.iter()
        .find(|seen| seen.object["status"]["reason"] == "Queued")
        .or(seen.first())
        .map(|seen| seen.at)
}

/// Waits until each of `names` was seen waiting in line or with its pod.
async fn handled(cx: &Ctx, names: &[&str]) {
    poll(
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async {
            let waits_or_runs =
                |name: &&str| seen_queued(cx, name) || !cx.history("Pod", name).is_empty();
            match names.iter().find(|name| !waits_or_runs(name)) {
                None => Ok(()),
                Some(name) => Err(format!("{name} seen waiting in line or with its pod")),
            }
        },
    )
    .await;
}

/// Creates the Browsers `names` of `owner`, 50 at a time.
async fn create(cx: &Arc<Ctx>, names: &[String], owner: Option<&str>) {
    let create = |n: &String| {
        let cx = cx.clone();
        let n = n.clone();
        let owner = owner.map(String::from);
        async move { cx.create_browser_of(&n, owner.as_deref(), json!({})).await }
    };
    futures::stream::iter(names.iter().map(create))
        .buffer_unordered(50)
        .collect::<Vec<()>>()
        .await;
}
