//! Upgrades and compatibility: `crds/` applied over every older CRD set, and the split-group
//! layout.

use std::sync::Arc;
use std::time::Duration;

use kube::api::DeleteParams;
use serde_json::{Value, json};

use browser_controller::api::crd::{self, Layout, compare};

use crate::support::controlplane;
use crate::support::crd_history;
use crate::support::kinds::{browser_resource, config_resource};
use crate::support::upstream;
use crate::{Ctx, WAIT, install_crds, names, poll};

pub(crate) async fn split_group_layout_runs_the_same(cx: Arc<Ctx>) {
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("split", json!({})).await;
    let snap = cx.until_running("split").await;
    let pod = snap.pod("split").unwrap();
    assert_eq!(
        pod["metadata"]["ownerReferences"][0]["apiVersion"],
        "browser.selenosis.io/v1"
    );
    cx.delete_browser("split").await;
    cx.until_gone("split").await;
}

/// Older CRD sets this operator's CRDs must replace with objects in place: every released
/// set of ours (`testdata/crd-history/`, both layouts), and the selenosis Helm chart's (the Go
/// controller's, split layout) when the upstream examples are beside the repository.
fn older_crd_sets() -> Vec<(String, Layout, Vec<Value>)> {
    let mut sets: Vec<(String, Layout, Vec<Value>)> = crd_history::released_sets()
        .into_iter()
        .map(|set| {
            let label = match set.layout {
                Layout::Default => format!("ours {}", set.release),
                Layout::SplitGroups => format!("ours {} split-groups", set.release),
            };
            (label, set.layout, set.crds)
        })
        .collect();
    if let Some(crds) =
        upstream::helm_chart_crds("the Helm chart CRDs are not part of the upgrade scenario")
    {
        sets.push(("the Helm chart's".to_string(), Layout::SplitGroups, crds));
    }
    sets
}

/// Applies `crds` (server-side, as the harness applies `crds/`) and waits until served.
async fn apply_crds(cx: &Ctx, label: &str, crds: &[Value]) {
    controlplane::apply_crds(&cx.be.client, crds)
        .await
        .unwrap_or_else(|e| panic!("{label} CRDs apply: {e}"));
}

/// `crds/` applied over each older set of CRDs keeps the objects stored under it, and the
/// operator then runs their sessions. Runs before any other scenario: it installs the CRDs.
pub(crate) async fn crds_applied_over_older_sets_keep_objects_and_sessions(cx: Arc<Ctx>) {
    // No CRD is installed yet: `check` says so, with the fix, and skips what rests on them.
    let (passed, report) = cx.check(&[&format!("--dry-run-namespace={}", cx.ns)]).await;
    assert!(!passed, "{report}");
    assert!(
        report.contains("FAIL  CRDs: ")
            && report.contains("fix: kubectl apply --server-side -f crds/")
            && report.contains("skip  pod dry run: "),
        "without CRDs:\n{report}"
    );
    for (label, layout, crds) in older_crd_sets() {
        apply_crds(&cx, &label, &crds).await;
        let config = config_resource(layout);
        let browser = browser_resource(layout);
        let name = format!("up-{}", sets_slug(&label));
        cx.create(
            &config,
            json!({"metadata": {"name": name}, "spec": cx.chrome_spec()}),
        )
        .await;
        let created = cx
            .create(
                &browser,
                json!({"metadata": {"name": name},
                    "spec": {"browserName": "chrome", "browserVersion": "139.0"}}),
            )
            .await;

        // `check` tells the older CRDs by the fields they lack, read from the server.
        let groups = [
            format!("--browser-api-group={}", layout.browser_group()),
            format!("--browserconfig-api-group={}", layout.browserconfig_group()),
            format!("--dry-run-namespace={}", cx.ns),
        ];
        let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
        let lacking: Vec<String> = crds
            .iter()
            .flat_map(|old| {
                let name = &old["metadata"]["name"];
                let ours = Layout::ALL
                    .into_iter()
                    .flat_map(crd::crds)
                    .find(|c| &c["metadata"]["name"] == name);
                ours.map(|ours| compare::missing_fields(old, &ours))
                    .unwrap_or_default()
            })
            .collect();
        let (_, report) = cx.check(&groups).await;
        let crds_line = report
            .lines()
            .find(|l| l.contains(" CRDs: "))
            .unwrap_or_else(|| panic!("{label}: no CRDs line:\n{report}"));
        match lacking.first() {
            Some(field) => assert!(
                crds_line.starts_with("FAIL ") && report.contains(field.as_str()),
                "{label}: lacks {lacking:?}:\n{report}"
            ),
            None => assert!(crds_line.starts_with("ok "), "{label}:\n{report}"),
        }

        install_crds(&cx.be.client)
            .await
            .unwrap_or_else(|e| panic!("crds/ over {label}: {e}"));
        let (_, report) = cx.check(&groups).await;
        assert!(
            report.lines().any(|l| l.starts_with("ok    CRDs: ")),
            "{label}: after crds/:\n{report}"
        );
        let kept = cx
            .api(&browser)
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("{label}: Browser after the upgrade: {e}"));
        assert_eq!(kept.metadata.uid, created.metadata.uid, "{label}");
        assert_eq!(kept.data["spec"], created.data["spec"], "{label}");

        let mut flags = vec![format!("--browser-api-group={}", layout.browser_group())];
        flags.push(format!(
            "--browserconfig-api-group={}",
            layout.browserconfig_group()
        ));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        cx.start_operator(&flags);
        poll(WAIT, Duration::from_millis(100), || async {
            let b = cx
                .api(&browser)
                .get(&name)
                .await
                .map_err(|e| e.to_string())?;
            if b.data["status"]["phase"] == "Running" && b.data["status"]["podIP"].is_string() {
                Ok(())
            } else {
                Err(format!(
                    "{label}: Browser {name} not Running: {:?}",
                    b.data.get("status")
                ))
            }
        })
        .await;
        cx.api(&browser)
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("{label}: delete: {e}"));
        poll(WAIT, Duration::from_millis(100), || async {
            let browsers = Ctx::list(&cx.api(&browser)).await;
            let pods = Ctx::list(&cx.pods()).await;
            if browsers.is_empty() && pods.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{label}: left: {:?} {:?}",
                    names(&browsers),
                    names(&pods)
                ))
            }
        })
        .await;
        cx.kill_operator();
        cx.api(&config)
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("{label}: delete config: {e}"));
    }
}

fn sets_slug(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect::<String>()
        .split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}
