//! The per-session options annotation `selenosis.io/options` (docs/configuration.md,
//! "Per-session options"): the validated options and their errors; parsing and validation
//! against the limits the hub enforces and the admin's fence (`parse`), and application of
//! the env to a rendered pod (`apply`; labels are layered by `render`).

mod apply;
mod parse;

use std::collections::BTreeMap;

pub use apply::apply_env;
pub(crate) use apply::labels_mut;
pub use parse::{from_browser, is_loader_variable, parse};

/// Most labels one session may add.
pub const MAX_LABELS: usize = 64;
/// Most containers one session may configure.
pub const MAX_CONTAINERS: usize = 16;
/// Most env variables one session may set per container.
pub const MAX_ENV: usize = 64;
/// Longest env name or value, in characters.
pub const MAX_VALUE_CHARS: usize = 512;

/// Validated options of one session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionOptions {
    /// Labels added to the pod.
    pub labels: BTreeMap<String, String>,
    /// Per-container settings, by container name.
    pub containers: BTreeMap<String, ContainerOptions>,
}

/// Options for one container of the pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerOptions {
    /// Environment variables set on the container.
    pub env: BTreeMap<String, String>,
}

/// Why the options annotation was rejected. Every message starts with
/// `unmarshal selenosis.io/options: `, the prefix the hub and UIs match on.
#[derive(Debug, thiserror::Error)]
pub enum OptionsError {
    #[error("unmarshal selenosis.io/options: {0}")]
    Json(serde_json::Error),
    #[error("unmarshal selenosis.io/options: {count} labels, at most {max} allowed", max = MAX_LABELS)]
    TooManyLabels { count: usize },
    #[error("unmarshal selenosis.io/options: invalid label key {key:?}: {reason}")]
    InvalidLabelKey { key: String, reason: &'static str },
    #[error("unmarshal selenosis.io/options: invalid value {value:?} for label {key:?}: {reason}")]
    InvalidLabelValue {
        key: String,
        value: String,
        reason: &'static str,
    },
    #[error("unmarshal selenosis.io/options: label {key:?} uses reserved prefix {prefix}")]
    ReservedLabel { key: String, prefix: String },
    #[error("unmarshal selenosis.io/options: {count} containers, at most {max} allowed", max = MAX_CONTAINERS)]
    TooManyContainers { count: usize },
    #[error(
        "unmarshal selenosis.io/options: invalid container name {name:?}: must be a lowercase DNS label (a-z, 0-9 and '-', at most 63 characters)"
    )]
    InvalidContainerName { name: String },
    #[error("unmarshal selenosis.io/options: container {container:?}: {count} env variables, at most {max} allowed", max = MAX_ENV)]
    TooManyEnv { container: String, count: usize },
    #[error(
        "unmarshal selenosis.io/options: container {container:?}: invalid env name {name:?}: {reason}"
    )]
    InvalidEnvName {
        container: String,
        name: String,
        reason: &'static str,
    },
    #[error(
        "unmarshal selenosis.io/options: container {container:?}: env {name:?}: {length}-character {what}, at most {max} allowed",
        max = MAX_VALUE_CHARS
    )]
    TooLong {
        container: String,
        name: String,
        what: &'static str,
        length: usize,
    },
    #[error(
        "unmarshal selenosis.io/options: container {container:?} is not in the pod (pod containers: {available})"
    )]
    UnknownContainer {
        container: String,
        available: String,
    },
    #[error(
        "unmarshal selenosis.io/options: container {container:?}: env {name:?} changes how programs are loaded and cannot be set by options"
    )]
    LoaderVariable { container: String, name: String },
    #[error(
        "unmarshal selenosis.io/options: container {container:?}: env {name:?}: the value contains a control character"
    )]
    ControlCharacter { container: String, name: String },
    #[error(
        "unmarshal selenosis.io/options: container {container:?}: env {name:?} comes from valueFrom in the BrowserConfig and cannot be replaced by options"
    )]
    ValueFrom { container: String, name: String },
    #[error(
        "unmarshal selenosis.io/options: container {container:?} does not take options (allowed: {allowed}); the BrowserConfig entry may list it in optionsContainers"
    )]
    ContainerNotAllowed { container: String, allowed: String },
    #[error("unmarshal selenosis.io/options: cannot apply to the pod: {path} is not {expected}")]
    MalformedPod {
        path: String,
        expected: &'static str,
    },
}
