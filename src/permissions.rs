//! Start-up permission check: one SelfSubjectAccessReview per verb and resource the operator
//! uses, in each watched namespace, so that a missing RBAC rule stops the operator at start
//! with a line naming it instead of failing later inside a watch or a write.

use std::fmt;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::core::ApiResource;

use crate::api::kinds::{self, Kinds};
use crate::link::error::describe;

/// Group and plural of the Events the operator writes (`kube::runtime::events::Recorder`).
const EVENTS_GROUP: &str = "events.k8s.io";
const EVENTS: &str = "events";

/// Reviews in flight at once: each is its own HTTP/1.1 connection.
const CONCURRENT_REVIEWS: usize = 8;

/// Upper bound for the whole check, so that an unresponsive API server cannot hold start-up.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// One permission the operator needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub verb: &'static str,
    /// API group; empty for the core group.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
    pub subresource: Option<&'static str>,
    /// `None`: in all namespaces (the operator watches cluster-wide).
    pub namespace: Option<String>,
}

impl Access {
    /// The review that asks whether the operator's own identity has this permission.
    pub fn review(&self) -> SelfSubjectAccessReview {
        SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(self.verb.to_string()),
                    group: Some(self.group.clone()),
                    resource: Some(self.resource.clone()),
                    subresource: self.subresource.map(str::to_string),
                    namespace: self.namespace.clone(),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        }
    }
}

/// `patch browsers.selenosis.io/status in namespace "team-a"`, the way RBAC names resources.
impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(sub) = self.subresource {
            write!(f, "/{sub}")?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in namespace {ns:?}"),
            None => write!(f, " in all namespaces"),
        }
    }
}

/// Why the permission check did not pass.
#[derive(Debug, thiserror::Error)]
pub enum PermissionError {
    /// One `missing permission: cannot …` line per denied review, then a hint line.
    #[error("{}", missing_lines(.0))]
    Missing(Vec<String>),
    #[error("{}", review_failed(.access, .source))]
    Review {
        access: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "cannot check the operator's permissions: the API server did not answer the SelfSubjectAccessReviews within {0:?}"
    )]
    Timeout(Duration),
}

fn missing_lines(missing: &[String]) -> String {
    let mut lines: Vec<String> = missing.iter().map(|access| missing_line(access)).collect();
    lines.extend(hints(missing).into_iter().map(String::from));
    lines.join("\n")
}

/// The line naming one missing permission.
pub fn missing_line(access: &str) -> String {
    format!("missing permission: cannot {access}")
}

/// What grants the `missing` permissions: the RBAC files to apply, one hint per line.
pub fn hints(missing: &[String]) -> Vec<&'static str> {
    let mut hints = vec![
        "grant the operator's service account the rules of rbac/ (all namespaces) or of rbac/namespaced/ (with --namespace)",
    ];
    if missing.iter().any(|m| m.contains(DAEMON_SETS)) {
        hints.push(
            "--enable-prepull needs the DaemonSet rules of rbac/prepull/cluster-role.yaml (all namespaces) or rbac/prepull/namespaced.yaml (with --namespace)",
        );
    }
    // rbac/namespaced/ holds no Lease rule: without this line the hint would point a
    // namespace-scoped install with leader election at the wrong files.
    if missing.iter().any(|m| m.contains(LEASES)) {
        hints.push(
            "--enable-leader-election needs the Lease rules of rbac/leader-election.yaml, in the Lease's namespace (both modes)",
        );
    }
    hints
}

/// How a missing DaemonSet permission is named.
const DAEMON_SETS: &str = "daemonsets.apps";

/// How a missing Lease permission is named.
const LEASES: &str = "leases.coordination.k8s.io";

fn review_failed(access: &str, source: &kube::Error) -> String {
    let mut text = format!(
        "cannot check the operator's permissions: the SelfSubjectAccessReview for {access} failed: {}",
        describe(source)
    );
    if matches!(source, kube::Error::Api(status) if status.code == 403) {
        text.push_str(
            "\nthe operator needs create on selfsubjectaccessreviews.authorization.k8s.io: grant it with rbac/ or rbac/namespaced/cluster-role-access-review.yaml",
        );
    }
    text
}

fn access(
    resource: &ApiResource,
    subresource: Option<&'static str>,
    verbs: &[&'static str],
    namespace: &Option<String>,
) -> impl Iterator<Item = Access> {
    verbs.iter().copied().map(move |verb| Access {
        verb,
        group: resource.group.clone(),
        resource: resource.plural.clone(),
        subresource,
        namespace: namespace.clone(),
    })
}

/// Every permission the operator needs, per watched namespace (in the given order, duplicates
/// dropped), or once for all namespaces when `namespaces` is empty. Groups and plurals are
/// those of the resolved kinds.
pub fn required(kinds: &Kinds, namespaces: &[String]) -> Vec<Access> {
    let scopes = scopes(namespaces);
    let events = ApiResource {
        group: EVENTS_GROUP.into(),
        version: "v1".into(),
        api_version: format!("{EVENTS_GROUP}/v1"),
        kind: "Event".into(),
        plural: EVENTS.into(),
    };
    let mut out = Vec::new();
    for ns in &scopes {
        let browser = &kinds.browser;
        out.extend(access(
            browser,
            None,
            &["get", "list", "watch", "patch", "delete"],
            ns,
        ));
        out.extend(access(browser, Some("status"), &["patch"], ns));
        // A pod's owner reference with blockOwnerDeletion needs update on the finalizers.
        out.extend(access(browser, Some("finalizers"), &["update"], ns));
        out.extend(access(
            &kinds.browserconfig,
            None,
            &["list", "watch", "patch"],
            ns,
        ));
        out.extend(access(&kinds.browserconfig, Some("status"), &["patch"], ns));
        // Server-side apply: an apply that creates is authorized as a patch and a create.
        out.extend(access(
            &kinds.pod,
            None,
            &["get", "list", "watch", "create", "patch", "delete"],
            ns,
        ));
        out.extend(access(&events, None, &["create", "patch"], ns));
        // The capacity queue reads whether a quota has room before it creates a pod.
        out.extend(access(
            &kinds::resource_quotas(),
            None,
            &["list", "watch"],
            ns,
        ));
    }
    out
}

/// What the image pre-pull (`--enable-prepull`) needs on DaemonSets, per watched namespace
/// or once for all namespaces: watch them, apply them, delete them.
pub fn prepull(namespaces: &[String]) -> Vec<Access> {
    let daemon_sets = kinds::daemon_sets();
    scopes(namespaces)
        .iter()
        .flat_map(|ns| {
            access(
                &daemon_sets,
                None,
                &["list", "watch", "create", "patch", "delete"],
                ns,
            )
            .collect::<Vec<_>>()
        })
        .collect()
}

/// Each watched namespace once, in order, or `None` (all namespaces) when there are none.
fn scopes(namespaces: &[String]) -> Vec<Option<String>> {
    let mut scopes: Vec<Option<String>> = Vec::new();
    for ns in namespaces {
        if !scopes.iter().flatten().any(|seen| seen == ns) {
            scopes.push(Some(ns.clone()));
        }
    }
    if scopes.is_empty() {
        scopes.push(None);
    }
    scopes
}

/// Reviews every permission of [`required`]; fails with every missing one, or when the reviews
/// cannot be made or take longer than [`CHECK_TIMEOUT`].
pub async fn check(
    client: &Client,
    kinds: &Kinds,
    namespaces: &[String],
) -> Result<(), PermissionError> {
    check_within(client, kinds, namespaces, CHECK_TIMEOUT).await
}

/// [`check`] with its own time bound.
pub async fn check_within(
    client: &Client,
    kinds: &Kinds,
    namespaces: &[String],
    timeout: Duration,
) -> Result<(), PermissionError> {
    check_accesses(client, required(kinds, namespaces), timeout).await
}

/// What leader election needs on its Lease, in the Lease's namespace.
pub fn lease(namespace: &str) -> Vec<Access> {
    let leases = ApiResource {
        group: "coordination.k8s.io".into(),
        version: "v1".into(),
        api_version: "coordination.k8s.io/v1".into(),
        kind: "Lease".into(),
        plural: "leases".into(),
    };
    access(
        &leases,
        None,
        &["get", "create", "patch"],
        &Some(namespace.to_string()),
    )
    .collect()
}

/// Asks the API server about each of `accesses` (bounded concurrency, bounded time).
pub async fn check_accesses(
    client: &Client,
    accesses: Vec<Access>,
    timeout: Duration,
) -> Result<(), PermissionError> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let reviews = futures::stream::iter(accesses)
        .map(|access| {
            let api = api.clone();
            async move {
                match api.create(&PostParams::default(), &access.review()).await {
                    Ok(answer) => {
                        let allowed = answer.status.is_some_and(|s| s.allowed);
                        Ok((!allowed).then(|| access.to_string()))
                    }
                    Err(source) => Err(PermissionError::Review {
                        access: access.to_string(),
                        source,
                    }),
                }
            }
        })
        .buffered(CONCURRENT_REVIEWS)
        .try_filter_map(|missing| async move { Ok(missing) })
        .try_collect::<Vec<String>>();
    let missing = tokio::time::timeout(timeout, reviews)
        .await
        .map_err(|_| PermissionError::Timeout(timeout))??;
    if missing.is_empty() {
        Ok(())
    } else {
        Err(PermissionError::Missing(missing))
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::core::GroupVersionKind;

    use super::*;

    fn kinds(browser_group: &str, config_group: &str) -> Kinds {
        Kinds {
            browser: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(browser_group, "v1", "Browser"),
                "browsers",
            ),
            browserconfig: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(config_group, "v1", "BrowserConfig"),
                "browserconfigs",
            ),
            pod: ApiResource::erase::<Pod>(&()),
        }
    }

    fn lines(accesses: &[Access]) -> Vec<String> {
        accesses.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn cluster_wide_asks_once_for_every_verb_and_resource() {
        let required = required(&kinds("selenosis.io", "selenosis.io"), &[]);
        assert_eq!(
            lines(&required),
            [
                "get browsers.selenosis.io in all namespaces",
                "list browsers.selenosis.io in all namespaces",
                "watch browsers.selenosis.io in all namespaces",
                "patch browsers.selenosis.io in all namespaces",
                "delete browsers.selenosis.io in all namespaces",
                "patch browsers.selenosis.io/status in all namespaces",
                "update browsers.selenosis.io/finalizers in all namespaces",
                "list browserconfigs.selenosis.io in all namespaces",
                "watch browserconfigs.selenosis.io in all namespaces",
                "patch browserconfigs.selenosis.io in all namespaces",
                "patch browserconfigs.selenosis.io/status in all namespaces",
                "get pods in all namespaces",
                "list pods in all namespaces",
                "watch pods in all namespaces",
                "create pods in all namespaces",
                "patch pods in all namespaces",
                "delete pods in all namespaces",
                "create events.events.k8s.io in all namespaces",
                "patch events.events.k8s.io in all namespaces",
                "list resourcequotas in all namespaces",
                "watch resourcequotas in all namespaces",
            ]
        );
        assert!(required.iter().all(|a| a.namespace.is_none()));
    }

    #[test]
    fn groups_follow_the_resolved_kinds() {
        let required = required(
            &kinds("browser.selenosis.io", "browserconfig.selenosis.io"),
            &[],
        );
        let groups = |resource: &str| -> Vec<&str> {
            required
                .iter()
                .filter(|a| a.resource == resource)
                .map(|a| a.group.as_str())
                .collect()
        };
        assert!(
            groups("browsers")
                .iter()
                .all(|g| *g == "browser.selenosis.io")
        );
        assert!(
            groups("browserconfigs")
                .iter()
                .all(|g| *g == "browserconfig.selenosis.io")
        );
        assert!(groups("pods").iter().all(|g| g.is_empty()));
        assert!(groups("events").iter().all(|g| *g == "events.k8s.io"));
        assert!(
            lines(&required)
                .contains(&"patch browsers.browser.selenosis.io/status in all namespaces".into())
        );
    }

    #[test]
    fn each_watched_namespace_is_asked_separately_and_once() {
        let namespaces = ["team-a".to_string(), "team-b".into(), "team-a".into()];
        let k = kinds("selenosis.io", "selenosis.io");
        let required = required(&k, &namespaces);
        let per_scope = super::required(&k, &[]).len();
        assert_eq!(required.len(), 2 * per_scope);
        let (a, b) = required.split_at(per_scope);
        assert!(a.iter().all(|x| x.namespace.as_deref() == Some("team-a")));
        assert!(b.iter().all(|x| x.namespace.as_deref() == Some("team-b")));
        assert_eq!(
            a[5].to_string(),
            "patch browsers.selenosis.io/status in namespace \"team-a\""
        );
    }

    #[test]
    fn review_carries_the_attributes() {
        let access = Access {
            verb: "patch",
            group: "selenosis.io".into(),
            resource: "browsers".into(),
            subresource: Some("status"),
            namespace: Some("team-a".into()),
        };
        let body = serde_json::to_value(access.review()).unwrap();
        assert_eq!(body["apiVersion"], "authorization.k8s.io/v1");
        assert_eq!(body["kind"], "SelfSubjectAccessReview");
        assert_eq!(
            body["spec"]["resourceAttributes"],
            serde_json::json!({
                "group": "selenosis.io", "namespace": "team-a", "resource": "browsers",
                "subresource": "status", "verb": "patch",
            })
        );
        let cluster_wide = Access {
            namespace: None,
            subresource: None,
            group: String::new(),
            resource: "pods".into(),
            verb: "list",
        };
        let body = serde_json::to_value(cluster_wide.review()).unwrap();
        assert_eq!(
            body["spec"]["resourceAttributes"],
            serde_json::json!({"group": "", "resource": "pods", "verb": "list"})
        );
    }

    #[test]
    fn prepull_asks_for_daemon_sets_in_each_scope() {
        assert_eq!(
            lines(&prepull(&[])),
            [
                "list daemonsets.apps in all namespaces",
                "watch daemonsets.apps in all namespaces",
                "create daemonsets.apps in all namespaces",
                "patch daemonsets.apps in all namespaces",
                "delete daemonsets.apps in all namespaces",
            ]
        );
        let namespaced = prepull(&["a".into(), "b".into(), "a".into()]);
        assert_eq!(namespaced.len(), 10);
        assert_eq!(
            namespaced[5].to_string(),
            "list daemonsets.apps in namespace \"b\""
        );
        let text = PermissionError::Missing(vec![namespaced[0].to_string()]).to_string();
        assert!(
            text.ends_with("rbac/prepull/namespaced.yaml (with --namespace)"),
            "{text}"
        );
        let text =
            PermissionError::Missing(vec!["create pods in all namespaces".into()]).to_string();
        assert!(!text.contains("prepull"), "{text}");
    }

    #[test]
    fn missing_permissions_are_one_line_each_then_a_hint() {
        let e = PermissionError::Missing(vec![
            "patch browsers.selenosis.io/status in namespace \"team-a\"".into(),
            "create pods in namespace \"team-a\"".into(),
        ]);
        let text = e.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[..2],
            [
                "missing permission: cannot patch browsers.selenosis.io/status in namespace \"team-a\"",
                "missing permission: cannot create pods in namespace \"team-a\"",
            ]
        );
        assert_eq!(lines.len(), 3);
        assert!(lines[2].contains("rbac/namespaced/"), "{text}");
    }
}
