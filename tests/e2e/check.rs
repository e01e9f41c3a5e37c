//! `browser-controller check` on the backend: a complete install passes every check, and
//! what is missing (a BrowserConfig, a quota that refuses pods, the CRDs) fails its check
//! with the fix named. The namespace-scoped case is in `rbac.rs`, where that RBAC is set up.

use std::sync::Arc;

use serde_json::json;

use crate::{Ctx, operator_user};

/// `NAMESPACE/NAME` of the ServiceAccount of `rbac/`.
fn service_account() -> String {
    let user = operator_user();
    let rest = user
        .strip_prefix("system:serviceaccount:")
        .unwrap_or_default();
    rest.replacen(':', "/", 1)
}

/// The line of `check` in the report.
fn line<'a>(report: &'a str, check: &str) -> &'a str {
    report
        .lines()
        .find(|l| {
            l.get(6..)
                .is_some_and(|rest| rest.starts_with(&format!("{check}:")))
        })
        .unwrap_or_else(|| panic!("no line for {check}:\n{report}"))
}

pub(crate) async fn check_passes_on_a_complete_install_and_names_what_is_missing(cx: Arc<Ctx>) {
    let sa = format!("--service-account={}", service_account());
    let ns = format!("--dry-run-namespace={}", cx.ns);
    let flags = [sa.as_str(), ns.as_str()];

    // Nothing to render in the namespace yet.
    let (passed, report) = cx.check(&flags).await;
    assert!(!passed, "{report}");
    for check in ["API server", "CRDs", "permissions", "events API"] {
        assert!(line(&report, check).starts_with("ok "), "{report}");
    }
    let dry_run = line(&report, "pod dry run");
    assert!(
        dry_run.starts_with("FAIL ") && dry_run.contains("no BrowserConfig entry"),
        "{report}"
    );

    // A complete install: every check passes.
    cx.chrome_config().await;
    let (passed, report) = cx.check(&flags).await;
    assert!(passed, "{report}");
    assert_eq!(
        report.lines().filter(|l| l.starts_with("ok ")).count(),
        5,
        "{report}"
    );
    assert!(line(&report, "pod dry run").contains("chrome"), "{report}");

    // A quota of zero pods: the dry run shows the refusal before any session.
    cx.refuse_pod_by_quota("browser-controller-check").await;
    let (passed, report) = cx.check(&flags).await;
    assert!(!passed, "{report}");
    let dry_run = line(&report, "pod dry run");
    assert!(
        dry_run.starts_with("FAIL ") && dry_run.contains("QuotaExceeded"),
        "{report}"
    );
    assert!(
        report.contains("fix: raise the namespace's ResourceQuota"),
        "{report}"
    );

    // Through a kubeconfig that skips the server's certificate check (a real server speaks
    // TLS; the double plain HTTP), the kube client's warning about it is logged once, not once
    // per connection.
    if cx.be.double.is_none() {
        let mut kubeconfig: serde_json::Value =
            serde_saphyr::from_str(&std::fs::read_to_string(&cx.be.admin_kubeconfig).unwrap())
                .unwrap();
        for cluster in kubeconfig["clusters"].as_array_mut().unwrap() {
            let cluster = cluster["cluster"].as_object_mut().unwrap();
            cluster.remove("certificate-authority-data");
            cluster.remove("certificate-authority");
            cluster.insert("insecure-skip-tls-verify".into(), json!(true));
        }
        let insecure = cx.be.dir.join(&format!("{}-insecure.kubeconfig", cx.ns));
        std::fs::write(&insecure, serde_json::to_string(&kubeconfig).unwrap()).unwrap();
        let (_, report, log) = cx.check_with(&insecure, &flags).await;
        assert!(line(&report, "permissions").starts_with("ok "), "{report}");
        assert_eq!(log.matches("Server cert bypassed").count(), 1, "{log}");
    }

    // CRDs in groups nobody serves, as on a cluster without them: the rest is skipped.
    let (passed, report) = cx
        .check(&[
            sa.as_str(),
            ns.as_str(),
            "--browser-api-group=absent.example.com",
            "--browserconfig-api-group=absent.example.com",
        ])
        .await;
    assert!(!passed, "{report}");
    let crds = line(&report, "CRDs");
    assert!(
        crds.starts_with("FAIL ") && crds.contains("absent.example.com"),
        "{report}"
    );
    assert!(
        report.contains("fix: kubectl apply --server-side -f crds/"),
        "{report}"
    );
    for check in ["permissions", "events API", "pod dry run"] {
        assert!(line(&report, check).starts_with("skip "), "{report}");
    }
}
