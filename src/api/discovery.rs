//! Resolving the Browser and BrowserConfig kinds through API discovery (docs/compatibility.md,
//! "API-group layouts"): either group layout, the preferred served version, optionally pinned
//! by flags.

use kube::Client;
use kube::core::ApiResource;
use kube::discovery;

use super::error::describe;
use super::keys;

/// The resolved kinds the operator works with.
#[derive(Debug, Clone)]
pub struct Kinds {
    pub browser: ApiResource,
    pub browserconfig: ApiResource,
    pub pod: ApiResource,
}

/// The DaemonSets of the image pre-pull: a built-in kind, `apps/v1` since Kubernetes 1.9.
pub fn daemon_sets() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::apps::v1::DaemonSet>(&())
}

/// Why the kinds could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error(
        "the {kind} CustomResourceDefinition is not installed (looked for {looked_for}); install it with `kubectl apply -f crds/` (or `browser-controller crds | kubectl apply -f -`)"
    )]
    Missing {
        kind: &'static str,
        looked_for: String,
    },
    #[error("API discovery of group {group} failed: {}", describe(.source))]
    Api {
        group: String,
        #[source]
        source: kube::Error,
    },
}

/// Groups tried for a kind, in order: the pinned one, else the default layout first, then
/// the split layout of the selenosis Helm chart.
pub fn candidate_groups(pinned: Option<&str>, split_group: &'static str) -> Vec<String> {
    match pinned {
        Some(group) => vec![group.to_string()],
        None => vec![keys::DEFAULT_GROUP.to_string(), split_group.to_string()],
    }
}

async fn resolve_kind(
    client: &Client,
    kind: &'static str,
    plural: &str,
    groups: &[String],
) -> Result<ApiResource, DiscoveryError> {
    for group in groups {
        match discovery::group(client, group).await {
            Ok(api_group) => {
                if let Some((resource, _caps)) = api_group.recommended_kind(kind) {
                    return Ok(resource);
                }
            }
            Err(kube::Error::Discovery(_)) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(DiscoveryError::Api {
                    group: group.clone(),
                    source,
                });
            }
        }
    }
    Err(DiscoveryError::Missing {
        kind,
        looked_for: groups
            .iter()
            .map(|g| format!("{plural}.{g}"))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Resolves both kinds; fails with one line naming the missing CRD and how to install it.
pub async fn resolve(
    client: &Client,
    browser_group: Option<&str>,
    browserconfig_group: Option<&str>,
) -> Result<Kinds, DiscoveryError> {
    let browser = resolve_kind(
        client,
        keys::BROWSER_KIND,
        "browsers",
        &candidate_groups(browser_group, keys::SPLIT_BROWSER_GROUP),
    )
    .await?;
    let browserconfig = resolve_kind(
        client,
        keys::BROWSERCONFIG_KIND,
        "browserconfigs",
        &candidate_groups(browserconfig_group, keys::SPLIT_BROWSERCONFIG_GROUP),
    )
    .await?;
    Ok(Kinds {
        browser,
        browserconfig,
        pod: ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout_is_tried_first_and_a_pin_is_exclusive() {
        assert_eq!(
            candidate_groups(None, keys::SPLIT_BROWSER_GROUP),
            ["selenosis.io", "browser.selenosis.io"]
        );
        assert_eq!(
            candidate_groups(Some("browser.selenosis.io"), keys::SPLIT_BROWSER_GROUP),
            ["browser.selenosis.io"]
        );
    }

    #[test]
    fn missing_crd_message_names_it_and_the_fix() {
        let e = DiscoveryError::Missing {
            kind: "Browser",
            looked_for: "browsers.selenosis.io, browsers.browser.selenosis.io".into(),
        };
        let text = e.to_string();
        assert!(text.contains("browsers.selenosis.io"));
        assert!(text.contains("kubectl apply -f crds/"));
        assert!(!text.contains('\n'));
    }
}
