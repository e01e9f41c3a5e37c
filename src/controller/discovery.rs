//! Resolving the Browser and BrowserConfig kinds through API discovery (docs/compatibility.md,
//! "API-group layouts"): either group layout, the preferred served version, optionally pinned
//! by flags.

use kube::Client;
use kube::core::ApiResource;
use kube::discovery;

use crate::api::keys;
use crate::api::kinds::{Kinds, candidate_groups};
use crate::link::error::describe;

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
