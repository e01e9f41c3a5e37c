//! A live switch from the Go browser-controller (`E2E_GO_CONTROLLER`, v0.0.5) to this
//! operator and back, with the real hub on the real node: the single-group set, the only one
//! the Go controller serves. The switch is made as docs/compatibility.md tells users: stop
//! one, start the other on the same cluster; this operator with the `rbac/` ServiceAccount.
//! Transitions are read from the recorded watch history.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::stack::{
    self, CHROME, HUB_TIMEOUT, MISSING, SLOW_START, Session, TITLE, capabilities, open_session,
    quit, title_of_page,
};
use crate::support::host::kill;
use crate::support::kinds::{browser_resource, config_resource};
use crate::support::stack::{Page, go_controller};
use crate::{Ctx, Process, WAIT, poll};

/// Opens `n` sessions of Chromium at once through the hub and loads the page in each.
async fn sessions(hub: u16, page: &Arc<Page>, n: usize) -> Vec<Session> {
    stack::open_at_once(hub, page, vec![capabilities(CHROME); n]).await
}

/// Every session still answers: a page load and its title.
async fn all_answer(hub: u16, page: &Page, sessions: &[Session], when: &str) {
    for session in sessions {
        let title = title_of_page(hub, session, page)
            .await
            .unwrap_or_else(|e| panic!("a live session answers {when}: {e}"));
        assert_eq!(title, TITLE);
    }
}

/// Creates the Browser `name` of chrome `version` as browser-service does.
async fn create(cx: &Ctx, name: &str, version: &str) {
    let browser = json!({
        "metadata": {"name": name},
        "spec": {"browserName": "chrome", "browserVersion": version},
    });
    cx.create(&browser_resource(cx.layout), browser).await;
}

/// Waits until the recorded history of `kind` `name` shows `check`.
async fn until_seen(cx: &Ctx, kind: &str, name: &str, what: &str, check: impl Fn(&Value) -> bool) {
    poll(WAIT, Duration::from_millis(50), || async {
        let seen = cx.seen(kind, name);
        if seen.iter().any(&check) {
            Ok(())
        } else {
            Err(format!(
                "{kind} {name}: {what}; last seen: {:#?}",
                seen.last()
            ))
        }
    })
    .await;
}

/// The Browsers that had a pod, with the UIDs of their pods the watch saw so far.
fn pods_of(cx: &Ctx) -> BTreeMap<String, BTreeSet<String>> {
    stack::browsers_seen(cx)
        .into_iter()
        .filter_map(|name| {
            let uids = cx.pod_uids(&name);
            (!uids.is_empty()).then_some((name, uids))
        })
        .collect()
}

/// No Browser of `before` got a pod after it was taken.
fn no_pod_recreated(cx: &Ctx, before: &BTreeMap<String, BTreeSet<String>>, when: &str) {
    for (name, uids) in before {
        assert_eq!(
            &cx.pod_uids(name),
            uids,
            "{name}: no pod created for it {when}"
        );
    }
}

fn stop(mut child: Child) {
    kill(&mut child);
}

/// The Go controller serves five live sessions, one whose pod is still starting (a new-session
/// request the hub holds), a `Failed` Browser and one being deleted; it is stopped and this
/// operator started. Every live session still answers, the starting one becomes usable, the
/// `Failed` and deleting ones are completed, no pod is recreated. Then the way back: this
/// operator with three live sessions, a `Failed` Browser it keeps (`--failed-browser-retention`)
/// and a session that ends between the two operators is replaced by the Go controller; the
/// live sessions answer and end cleanly, the ended one is completed; the `Failed` one the Go
/// controller leaves as it is (it never deletes `Failed` Browsers): deleted by hand, it goes.
/// A BrowserConfig holding the Go controller's finalizer, deleted under this operator, goes.
pub(crate) async fn stack_a_live_switch_from_the_go_controller_and_back(cx: Arc<Ctx>) {
    let go = go_controller()
        .ok()
        .flatten()
        .expect("the runner runs this scenario only with E2E_GO_CONTROLLER");
    let go_child = cx.spawn_go_controller(&go, &Process::default());
    stack::write_config(&cx, "1m").await;
    let configs = cx.api(&config_resource(cx.layout));
    poll(WAIT, Duration::from_millis(100), || async {
        let config = configs.get("chrome").await.map_err(|e| e.to_string())?;
        let finalizers = config.metadata.finalizers.unwrap_or_default();
        if finalizers
            .iter()
            .any(|f| f == "browserconfig.selenosis.io/finalizer")
        {
            Ok(())
        } else {
            Err(format!(
                "the Go controller's finalizer on the config: {finalizers:?}"
            ))
        }
    })
    .await;
    let (_stack, hub) = stack::hub(&cx, HUB_TIMEOUT);
    let port = hub.port();
    let page = Arc::new(Page::serve(&format!(
        "<html><head><title>{TITLE}</title></head></html>"
    )));

    // Before the switch, under the Go controller.
    let live = sessions(port, &page, 5).await;
    create(&cx, "go-failed", MISSING).await;
    until_seen(&cx, "Browser", "go-failed", "Failed", |b| {
        b["status"]["phase"] == "Failed"
    })
    .await;
    create(&cx, "go-deleting", CHROME).await;
    until_seen(&cx, "Browser", "go-deleting", "Running", |b| {
        b["status"]["phase"] == "Running"
    })
    .await;
    // chromedriver ignores SIGTERM: its pod waits out its grace period, the Browser with it.
    cx.delete_browser("go-deleting").await;
    until_seen(&cx, "Pod", "go-deleting", "terminating", |p| {
        p["metadata"]["deletionTimestamp"].is_string()
    })
    .await;
    let starting = {
        let caps = capabilities(SLOW_START);
        tokio::spawn(async move { open_session(port, caps).await })
    };
    let slow = poll(WAIT, Duration::from_millis(50), || async {
        let of_version = |name: &String| {
            let seen = cx.seen("Browser", name);
            seen.iter()
                .any(|b| b["spec"]["browserVersion"] == SLOW_START)
        };
        stack::browsers_seen(&cx)
            .into_iter()
            .find(|name| of_version(name) && !cx.pod_uids(name).is_empty())
            .ok_or_else(|| "the starting session's pod".to_string())
    })
    .await;
    let before = pods_of(&cx);

    // The switch.
    stop(go_child);
    cx.start_operator(&[]);
    all_answer(port, &page, &live, "after the switch").await;
    let slow_session = starting
        .await
        .expect("the client's task")
        .unwrap_or_else(|e| panic!("the session that was starting: {e:?}"));
    all_answer(
        port,
        &page,
        std::slice::from_ref(&slow_session),
        "once started",
    )
    .await;
    cx.until_gone("go-failed").await;
    cx.until_gone("go-deleting").await;
    for session in live.iter().chain([&slow_session]) {
        quit(port, session).await;
    }
    // The Go controller may have given its Failed Browser more than one pod (it deletes a
    // pod stuck pulling its image); the sessions' Browsers had one each.
    for name in before
        .keys()
        .filter(|name| !["go-failed", "go-deleting"].contains(&name.as_str()))
    {
        stack::ended_with_one_pod(&cx, name).await;
    }
    no_pod_recreated(&cx, &before, "after the switch");
    assert!(
        before.contains_key(&slow),
        "the starting one had its pod before the switch"
    );
    // A new session works, and ends before the way back.
    let new = sessions(port, &page, 1).await;
    let new_name = stack::browsers_seen(&cx)
        .pop()
        .expect("the new session's Browser");
    quit(port, &new[0]).await;
    stack::ended_with_one_pod(&cx, &new_name).await;

    // The way back: this operator keeps Failed Browsers visible a while.
    cx.kill_operator();
    cx.start_operator(&["--failed-browser-retention=10m"]);
    let live = sessions(port, &page, 3).await;
    create(&cx, "ours-failed", MISSING).await;
    until_seen(&cx, "Browser", "ours-failed", "Failed", |b| {
        b["status"]["phase"] == "Failed"
    })
    .await;
    let ending = sessions(port, &page, 1).await;
    // Opened alone and last: the newest Browser is its.
    let ended = stack::browsers_seen(&cx)
        .pop()
        .expect("the ending session's Browser");
    let names_before = pods_of(&cx);
    cx.kill_operator();
    // The session ends between the two operators: its sidecar exits after the quit.
    quit(port, &ending[0]).await;
    until_seen(&cx, "Pod", &ended, "a container ended", |p| {
        p["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|all| all.iter().any(|c| c["state"]["terminated"].is_object()))
    })
    .await;
    let go_child = cx.spawn_go_controller(&go, &Process::default());
    all_answer(port, &page, &live, "after the switch back").await;
    cx.until_gone(&ended).await;
    for session in &live {
        quit(port, session).await;
    }
    for name in names_before.keys().filter(|name| *name != "ours-failed") {
        cx.until_gone(name).await;
    }
    no_pod_recreated(&cx, &names_before, "after the switch back");
    // The Go controller leaves a Failed Browser as it is (its finalizer released): deleted by
    // hand, as the runbook says, it goes at once.
    until_seen(
        &cx,
        "Browser",
        "ours-failed",
        "its finalizer released",
        |b| {
            b["metadata"]["finalizers"]
                .as_array()
                .is_none_or(Vec::is_empty)
        },
    )
    .await;
    let kept = cx.seen("Browser", "ours-failed");
    assert_eq!(
        kept.last().map(|b| b["status"]["phase"].clone()),
        Some(json!("Failed")),
        "still Failed under the Go controller"
    );
    cx.delete_browser("ours-failed").await;
    cx.until_gone("ours-failed").await;
    // The config goes with the Go controller running; it holds its finalizer again.
    configs
        .delete("chrome", &Default::default())
        .await
        .expect("config deleted");
    cx.until_object_gone(&configs, "chrome").await;
    stop(go_child);
}
