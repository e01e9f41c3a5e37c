//! The API-group layouts the two kinds are served under (docs/compatibility.md, "API-group
//! layouts").

use std::path::Path;

use crate::api::keys;

/// Which API groups the two kinds are served under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Both kinds in `selenosis.io`.
    Default,
    /// `Browser` in `browser.selenosis.io` and `BrowserConfig` in
    /// `browserconfig.selenosis.io`, as the selenosis Helm chart installs them.
    SplitGroups,
}

impl Layout {
    /// Every layout, in the order [`files`](super::files) lists them.
    pub const ALL: [Layout; 2] = [Layout::Default, Layout::SplitGroups];

    /// API group of `Browser`.
    pub fn browser_group(self) -> &'static str {
        match self {
            Layout::Default => keys::DEFAULT_GROUP,
            Layout::SplitGroups => keys::SPLIT_BROWSER_GROUP,
        }
    }

    /// API group of `BrowserConfig`.
    pub fn browserconfig_group(self) -> &'static str {
        match self {
            Layout::Default => keys::DEFAULT_GROUP,
            Layout::SplitGroups => keys::SPLIT_BROWSERCONFIG_GROUP,
        }
    }

    /// Directory of the layout's files below `crds/`: the split layout sits in a
    /// subdirectory so that a plain `kubectl apply -f crds/` installs only the default one.
    pub(super) fn dir(self) -> &'static Path {
        match self {
            Layout::Default => Path::new(""),
            Layout::SplitGroups => Path::new("split-groups"),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::crd::test_support::*;

    #[test]
    fn split_layout_differs_only_in_groups() {
        for (kind, group) in [
            ("Browser", keys::SPLIT_BROWSER_GROUP),
            ("BrowserConfig", keys::SPLIT_BROWSERCONFIG_GROUP),
        ] {
            let split = find(Layout::SplitGroups, kind);
            let mut default = find(Layout::Default, kind);
            assert_eq!(split["spec"]["group"], group);
            let plural = default["spec"]["names"]["plural"]
                .as_str()
                .unwrap()
                .to_string();
            assert_eq!(split["metadata"]["name"], format!("{plural}.{group}"));
            default["spec"]["group"] = json!(group);
            default["metadata"]["name"] = json!(format!("{plural}.{group}"));
            assert_eq!(split, default);
        }
    }
}
