//! The kinds the operator works with (docs/compatibility.md, "API-group layouts"): the
//! Browser and BrowserConfig kinds as discovery resolved them, the groups to look for them
//! in, and the built-in kinds. Discovery itself is `controller::discovery`.

use kube_core::ApiResource;

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

/// The ResourceQuotas the capacity queue reads: a built-in kind, `v1`.
pub fn resource_quotas() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ResourceQuota>(&())
}

/// Groups tried for a kind, in order: the pinned one, else the default layout first, then
/// the split layout of the selenosis Helm chart.
pub fn candidate_groups(pinned: Option<&str>, split_group: &'static str) -> Vec<String> {
    match pinned {
        Some(group) => vec![group.to_string()],
        None => vec![keys::DEFAULT_GROUP.to_string(), split_group.to_string()],
    }
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
}
