//! The start-up permission check against the API server double: SelfSubjectAccessReviews for
//! every verb and resource, per watched namespace, and the errors a user sees.

use testkit as support;

use std::time::Duration;

use browser_controller::api::crd::{self, Layout};
use browser_controller::api::kinds::Kinds;
use browser_controller::controller::discovery;
use browser_controller::permissions::{self, PermissionError};
use support::apiserver::{ApiServer, Fault};

async fn setup(layout: Layout) -> (ApiServer, kube::Client, Kinds) {
    let server = ApiServer::new();
    for crd in crd::crds(layout) {
        server.install_crd(&crd).unwrap();
    }
    let client = server.client();
    let kinds = discovery::resolve(&client, None, None).await.unwrap();
    (server, client, kinds)
}

fn namespaces(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn missing(result: Result<(), PermissionError>) -> Vec<String> {
    match result {
        Err(PermissionError::Missing(missing)) => missing,
        other => panic!("expected missing permissions, got {other:?}"),
    }
}

fn reviews(server: &ApiServer) -> Vec<support::apiserver::RequestRecord> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.resource == "selfsubjectaccessreviews")
        .collect()
}

#[tokio::test]
async fn all_allowed_passes_after_one_review_per_permission() {
    let (server, client, kinds) = setup(Layout::Default).await;
    permissions::check(&client, &kinds, &[]).await.unwrap();
    let made = reviews(&server);
    assert_eq!(made.len(), permissions::required(&kinds, &[]).len());
    assert!(made.iter().all(|r| r.verb == "create" && r.status == 201));

    let watched = namespaces(&["team-a", "team-b"]);
    permissions::check(&client, &kinds, &watched).await.unwrap();
    assert_eq!(
        reviews(&server).len() - made.len(),
        permissions::required(&kinds, &watched).len()
    );
}

#[tokio::test]
async fn denied_permissions_are_listed_exactly() {
    let (server, client, kinds) = setup(Layout::Default).await;
    server.deny("patch", "selenosis.io", "browsers/status");
    server.deny("create", "events.k8s.io", "events");
    let missing = missing(permissions::check(&client, &kinds, &[]).await);
    assert_eq!(
        missing,
        [
            "patch browsers.selenosis.io/status in all namespaces",
            "create events.events.k8s.io in all namespaces",
        ]
    );
}

#[tokio::test]
async fn a_denial_in_one_watched_namespace_names_that_namespace() {
    let (server, client, kinds) = setup(Layout::Default).await;
    server.deny_in("team-b", "delete", "", "pods");
    server.deny_in("team-b", "update", "selenosis.io", "browsers/finalizers");
    let result = permissions::check(&client, &kinds, &namespaces(&["team-a", "team-b"])).await;
    let text = result.as_ref().unwrap_err().to_string();
    assert_eq!(
        missing(result),
        [
            "update browsers.selenosis.io/finalizers in namespace \"team-b\"",
            "delete pods in namespace \"team-b\"",
        ]
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "missing permission: cannot update browsers.selenosis.io/finalizers in namespace \"team-b\""
    );
    assert_eq!(
        lines[1],
        "missing permission: cannot delete pods in namespace \"team-b\""
    );
}

#[tokio::test]
async fn the_split_layout_is_checked_in_its_own_groups() {
    let (server, client, kinds) = setup(Layout::SplitGroups).await;
    // A denial in the default group does not concern an operator running on the split layout.
    server.deny("*", "selenosis.io", "*");
    server.deny("watch", "browserconfig.selenosis.io", "browserconfigs");
    let missing = missing(permissions::check(&client, &kinds, &[]).await);
    assert_eq!(
        missing,
        ["watch browserconfigs.browserconfig.selenosis.io in all namespaces"]
    );
}

#[tokio::test]
async fn a_refused_review_says_so() {
    let (server, client, kinds) = setup(Layout::Default).await;
    server.inject(Fault::new(
        "create",
        "selfsubjectaccessreviews",
        403,
        "Forbidden",
        "selfsubjectaccessreviews.authorization.k8s.io is forbidden: User \"system:serviceaccount:browser-controller:browser-controller\" cannot create resource \"selfsubjectaccessreviews\"",
    ));
    let err = permissions::check(&client, &kinds, &[]).await.unwrap_err();
    assert!(matches!(err, PermissionError::Review { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("cannot check the operator's permissions"),
        "{text}"
    );
    assert!(text.contains("selfsubjectaccessreviews"), "{text}");
    assert!(
        text.contains("rbac/namespaced/cluster-role-access-review.yaml"),
        "{text}"
    );
}

#[tokio::test]
async fn an_unanswered_review_ends_the_check() {
    let (_, _, kinds) = setup(Layout::Default).await;
    let silent = tower::service_fn(|_: http::Request<kube::client::Body>| {
        futures::future::pending::<Result<http::Response<kube::client::Body>, std::io::Error>>()
    });
    let client = kube::Client::new(silent, "default");
    let err = permissions::check_within(&client, &kinds, &[], Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(matches!(err, PermissionError::Timeout(_)), "{err:?}");
}

#[tokio::test]
async fn leader_election_needs_its_lease_verbs_in_the_lease_namespace() {
    let (server, client, _kinds) = setup(Layout::Default).await;
    let lease = permissions::lease("browser-controller");
    permissions::check_accesses(&client, lease.clone(), Duration::from_secs(5))
        .await
        .unwrap();
    server.deny_in(
        "browser-controller",
        "patch",
        "coordination.k8s.io",
        "leases",
    );
    let missing =
        missing(permissions::check_accesses(&client, lease, Duration::from_secs(5)).await);
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(
        missing[0].starts_with("patch leases.coordination.k8s.io"),
        "{missing:?}"
    );
    assert!(missing[0].contains("browser-controller"), "{missing:?}");
}

/// The operator with `flags`, stopped at once if it gets past its checks.
async fn start_operator(client: kube::Client, flags: &[&str]) -> Result<(), String> {
    use clap::Parser;
    let mut argv = vec![
        "browser-controller",
        "--metrics-addr=0",
        "--health-probe-bind-address=0",
    ];
    argv.extend_from_slice(flags);
    let args = browser_controller::cli::Cli::try_parse_from(argv)
        .unwrap()
        .run;
    let metrics = std::sync::Arc::new(browser_controller::metrics::Metrics::new());
    browser_controller::operator::run_with_client(
        client,
        browser_controller::link::Link::new(),
        args,
        metrics,
        async {},
    )
    .await
    .map_err(|e| e.to_string())
}

#[tokio::test]
async fn prepull_asks_for_daemon_sets_only_with_its_flag() {
    let (server, client, _kinds) = setup(Layout::Default).await;
    server.deny("*", "apps", "daemonsets");
    // Without the flag nothing is asked of DaemonSets: the operator starts.
    start_operator(client.clone(), &[]).await.unwrap();
    let text = start_operator(client, &["--enable-prepull", "--namespace=team-a"])
        .await
        .unwrap_err();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..5],
        [
            "missing permission: cannot list daemonsets.apps in namespace \"team-a\"",
            "missing permission: cannot watch daemonsets.apps in namespace \"team-a\"",
            "missing permission: cannot create daemonsets.apps in namespace \"team-a\"",
            "missing permission: cannot patch daemonsets.apps in namespace \"team-a\"",
            "missing permission: cannot delete daemonsets.apps in namespace \"team-a\"",
        ],
        "{text}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.contains("rbac/prepull/namespaced.yaml")),
        "{text}"
    );
}
