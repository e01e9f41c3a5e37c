//! Schema features per Kubernetes release: parsing `--kubernetes-version`, and which release
//! gets CEL rules and `selectableFields`.

use serde_json::{Value, json};

use super::CrdError;
use crate::api::keys;

/// A Kubernetes release (`major.minor`), the target of `crds --kubernetes-version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubernetesVersion {
    pub major: u32,
    pub minor: u32,
}

impl KubernetesVersion {
    /// The oldest release the operator supports.
    pub const OLDEST: KubernetesVersion = KubernetesVersion::new(1, 24);
    /// First release that enforces CEL rules (`x-kubernetes-validations`, beta and on by default).
    const CEL: KubernetesVersion = KubernetesVersion::new(1, 25);
    /// First release that serves field selectors on custom resources (`selectableFields`, beta
    /// and on by default).
    const SELECTABLE_FIELDS: KubernetesVersion = KubernetesVersion::new(1, 31);

    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }
}

impl std::fmt::Display for KubernetesVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl std::str::FromStr for KubernetesVersion {
    type Err = CrdError;

    /// Accepts `1.31`, `v1.31` and `1.31.2` (the patch level does not matter to schemas).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || CrdError::Version {
            text: text.to_string(),
        };
        let trimmed = text.trim();
        let trimmed = trimmed.strip_prefix('v').unwrap_or(trimmed);
        let mut parts = trimmed.splitn(3, '.');
        let mut number = || -> Result<u32, CrdError> {
            parts
                .next()
                .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse().ok())
                .ok_or_else(invalid)
        };
        let (major, minor) = (number()?, number()?);
        if let Some(patch) = parts.next()
            && (patch.is_empty() || !patch.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(invalid());
        }
        Ok(Self::new(major, minor))
    }
}

/// Schema features that depend on the API server's release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    /// CEL rules: the Browser spec is immutable. 1.24 accepts and drops them.
    pub cel: bool,
    /// `selectableFields` on Browser (`kubectl get brw --field-selector status.phase=Running`).
    /// Servers before 1.31 reject the field under strict field validation.
    pub selectable_fields: bool,
}

impl Features {
    /// What the files in `crds/` carry: installs with plain `kubectl apply` on every supported
    /// release.
    pub const PORTABLE: Features = Features {
        cel: true,
        selectable_fields: false,
    };

    /// Everything a server of `version` understands and enforces.
    pub fn for_version(version: KubernetesVersion) -> Result<Features, CrdError> {
        if version < KubernetesVersion::OLDEST {
            return Err(CrdError::Unsupported { version });
        }
        Ok(Features {
            cel: version >= KubernetesVersion::CEL,
            selectable_fields: version >= KubernetesVersion::SELECTABLE_FIELDS,
        })
    }
    /// Adds to or removes from one CRD what this release needs: CEL rules only where they
    /// are enforced, `selectableFields` on Browser only where they are served.
    pub(super) fn apply(self, crd: &mut Value) {
        if !self.cel {
            strip_key(crd, "x-kubernetes-validations");
        }
        if self.selectable_fields
            && crd["spec"]["names"]["kind"] == keys::BROWSER_KIND
            && let Some(Value::Object(version)) = crd.pointer_mut("/spec/versions/0")
        {
            version.insert(
                "selectableFields".into(),
                json!([
                    {"jsonPath": ".spec.browserName"},
                    {"jsonPath": ".spec.browserVersion"},
                    {"jsonPath": ".status.phase"},
                ]),
            );
        }
    }
}

/// Removes `key` from every object below `value`.
fn strip_key(value: &mut Value, key: &str) {
    match value {
        Value::Object(map) => {
            map.remove(key);
            map.values_mut().for_each(|v| strip_key(v, key));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| strip_key(v, key)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use serde_json::{Value, json};

    use super::*;
    use crate::api::crd::test_support::*;
    use crate::api::crd::{Layout, crds, crds_with};

    fn version_of(text: &str) -> KubernetesVersion {
        text.parse().unwrap()
    }

    #[test]
    fn kubernetes_versions_parse_with_or_without_v_and_patch() {
        assert_eq!(version_of("1.24"), KubernetesVersion::new(1, 24));
        assert_eq!(version_of("v1.31"), KubernetesVersion::new(1, 31));
        assert_eq!(version_of("1.33.2"), KubernetesVersion::new(1, 33));
        for bad in [
            "", "1", "1.", "1.x", "one.two", "1.24.", "1.24.x", "-1.24", "1.24 .1",
        ] {
            let err = bad.parse::<KubernetesVersion>().unwrap_err().to_string();
            assert!(err.contains("expected MAJOR.MINOR"), "{bad:?}: {err}");
        }
        assert!(version_of("1.9") < version_of("1.24"));
    }

    fn rules(crds: &[Value]) -> usize {
        crds.iter()
            .map(|crd| serde_json::to_string(crd).unwrap())
            .map(|text| text.matches("x-kubernetes-validations").count())
            .sum()
    }

    fn selectable(crds: &[Value], kind: &str) -> Value {
        let crd = crds
            .iter()
            .find(|c| c["spec"]["names"]["kind"] == kind)
            .unwrap();
        version(crd)
            .get("selectableFields")
            .cloned()
            .unwrap_or(Value::Null)
    }

    #[test]
    fn each_release_gets_the_validations_it_enforces() {
        let err = Features::for_version(version_of("1.23")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Kubernetes 1.23 is not supported: browser-controller needs 1.24 or newer"
        );
        let at = |v: &str| {
            crds_with(
                Layout::Default,
                Features::for_version(version_of(v)).unwrap(),
            )
        };

        let old = at("1.24");
        assert_eq!(rules(&old), 0, "1.24 gets no CEL rules");
        assert_eq!(selectable(&old, "Browser"), Value::Null);

        for v in ["1.25", "1.30"] {
            let crds = at(v);
            assert_eq!(rules(&crds), 1, "{v}: the spec immutability rule");
            assert_eq!(selectable(&crds, "Browser"), Value::Null, "{v}");
        }
        for v in ["1.31", "1.36"] {
            let crds = at(v);
            assert_eq!(rules(&crds), 1, "{v}");
            assert_eq!(
                selectable(&crds, "Browser"),
                json!([
                    {"jsonPath": ".spec.browserName"},
                    {"jsonPath": ".spec.browserVersion"},
                    {"jsonPath": ".status.phase"},
                ]),
                "{v}"
            );
            assert_eq!(selectable(&crds, "BrowserConfig"), Value::Null, "{v}");
        }

        let portable = crds(Layout::Default);
        assert_eq!(rules(&portable), 1);
        assert_eq!(selectable(&portable, "Browser"), Value::Null);
    }

    #[test]
    fn every_release_variant_is_structural_and_a_valid_crd() {
        for v in ["1.24", "1.25", "1.31"] {
            let features = Features::for_version(version_of(v)).unwrap();
            for layout in Layout::ALL {
                for crd in crds_with(layout, features) {
                    let mut problems = Vec::new();
                    check_structural(root_schema(&crd), "", &mut problems);
                    assert!(problems.is_empty(), "{v}: {problems:#?}");
                    let typed: CustomResourceDefinition =
                        serde_json::from_value(crd.clone()).unwrap();
                    assert_eq!(floats(&serde_json::to_value(typed).unwrap()), floats(&crd));
                }
            }
        }
    }

    #[test]
    fn selectable_fields_point_at_string_fields_of_the_schema() {
        let features = Features::for_version(version_of("1.31")).unwrap();
        let crd = crds_with(Layout::Default, features)
            .into_iter()
            .find(|c| c["spec"]["names"]["kind"] == "Browser")
            .unwrap();
        let fields = version(&crd)["selectableFields"]
            .as_array()
            .unwrap()
            .clone();
        assert!(fields.len() <= 8, "the API server allows at most 8");
        for field in fields {
            let path = field["jsonPath"].as_str().unwrap();
            let mut node = root_schema(&crd);
            for part in path.trim_start_matches('.').split('.') {
                node = &node["properties"][part];
            }
            assert_eq!(node["type"], "string", "{path}");
        }
    }
}
