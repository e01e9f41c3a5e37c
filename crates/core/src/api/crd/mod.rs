//! CustomResourceDefinitions of `Browser` and `BrowserConfig` (docs/behaviour.md, "Resources"):
//! generation in both group layouts (docs/compatibility.md, "API-group layouts") and the files
//! under `crds/`.
//!
//! The schemas come from the `types` module, whose types only describe them, and the Browser
//! status type (`api::status`): the operator reads both kinds as untyped JSON. Nested core types (affinity,
//! volumes, probes …) are open objects, so the CRDs do not freeze one Kubernetes version's
//! Pod schema and stay far below the size limit of client-side apply.
//!
//! `layout` holds the group layouts, `release` the schema features per Kubernetes release,
//! `definition` the CRD objects, `structural` the schema generation, `types` the schema
//! types, `output` the YAML and the files, and `compare` whether an installed CRD has every
//! field of these.

pub mod compare;
mod definition;
mod layout;
mod output;
mod release;
mod structural;
#[cfg(test)]
mod test_support;
pub(crate) mod types;

use serde_json::Value;

pub use layout::Layout;
pub use output::{files, to_yaml};
pub use release::{Features, KubernetesVersion};

/// Why the CRDs could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("invalid Kubernetes version {text:?}: expected MAJOR.MINOR, e.g. 1.31")]
    Version { text: String },
    #[error(
        "Kubernetes {version} is not supported: browser-controller needs {} or newer",
        KubernetesVersion::OLDEST
    )]
    Unsupported { version: KubernetesVersion },
    #[error("cannot serialize CustomResourceDefinition {name} to YAML: {message}")]
    Yaml { name: String, message: String },
}

/// The CustomResourceDefinitions of a layout as in `crds/`: `BrowserConfig`, then `Browser`
/// (sorted by name, like their files).
pub fn crds(layout: Layout) -> Vec<Value> {
    crds_with(layout, Features::PORTABLE)
}

/// The CustomResourceDefinitions of a layout carrying the given schema features.
pub fn crds_with(layout: Layout, features: Features) -> Vec<Value> {
    let mut crds = vec![
        definition::browserconfig_crd(layout),
        definition::browser_crd(layout),
    ];
    for crd in &mut crds {
        features.apply(crd);
    }
    crds
}
