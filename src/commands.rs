//! The offline subcommands: `render` prints the Pod a Browser would get, or with `--prepull`
//! the image pre-pull DaemonSets of BrowserConfigs (no cluster needed).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde_json::Value;

use crate::api::browser::Browser;
use crate::api::keys;
use crate::cli::{OutputFormat, RenderArgs};
use crate::config::lookup::{self, LookupError};
use crate::lifecycle::desired;
use crate::lifecycle::plan::PodCreation;
use crate::lifecycle::reason::Reason;
use crate::lifecycle::status::Failure;
use crate::manifest::{self, ManifestError};
use crate::pod::policy::Policy;
use crate::prepull::render as prepull;

/// Why `render` could not print a pod; each is one line for the user.
#[derive(Debug, thiserror::Error)]
pub enum RenderCommandError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("{path}: no BrowserConfig found (expected kind: BrowserConfig)")]
    NoConfig { path: PathBuf },
    #[error("{path}: expected exactly one Browser, found {count}")]
    BrowserCount { path: PathBuf, count: usize },
    #[error("{path}: not a valid {kind}: {source}")]
    Object {
        path: PathBuf,
        kind: &'static str,
        source: serde_json::Error,
    },
    #[error("{message}{available}")]
    NotFound { message: String, available: String },
    #[error("{reason}: {message}")]
    Rejected { reason: String, message: String },
    #[error("cannot print the output: {0}")]
    Output(String),
    #[error("no Browser file given: pass --browser FILE, or --prepull for the pre-pull DaemonSets")]
    NoBrowser,
    #[error(
        "no entry of the given BrowserConfigs asks for pre-pull: set prePull: true on explicit version entries or on the template{skipped}"
    )]
    NoPrePull { skipped: String },
}

fn objects_of_kind(path: &Path, kind: &str) -> Result<Vec<Value>, ManifestError> {
    Ok(manifest::read_file(path)?
        .into_iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some(kind))
        .collect())
}

fn to_object(
    path: &Path,
    kind: &'static str,
    value: Value,
) -> Result<DynamicObject, RenderCommandError> {
    serde_json::from_value(value).map_err(|source| RenderCommandError::Object {
        path: path.to_path_buf(),
        kind,
        source,
    })
}

/// The resource of the Browser as its manifest names it (default `selenosis.io/v1`).
fn browser_resource(browser: &DynamicObject) -> ApiResource {
    let api_version = browser
        .types
        .as_ref()
        .map(|t| t.api_version.clone())
        .unwrap_or_else(|| format!("{}/{}", keys::DEFAULT_GROUP, keys::VERSION));
    let (group, version) = api_version
        .split_once('/')
        .map_or((String::new(), api_version.clone()), |(g, v)| {
            (g.to_string(), v.to_string())
        });
    ApiResource {
        group,
        version,
        api_version,
        kind: keys::BROWSER_KIND.into(),
        plural: "browsers".into(),
    }
}

/// Renders the pod of the Browser in `args.browser` from the BrowserConfigs in `args.configs`,
/// or with `args.prepull` the pre-pull DaemonSets of those BrowserConfigs.
pub fn render(args: &RenderArgs) -> Result<String, RenderCommandError> {
    let mut configs = Vec::new();
    for path in &args.configs {
        let found = objects_of_kind(path, keys::BROWSERCONFIG_KIND)?;
        if found.is_empty() {
            return Err(RenderCommandError::NoConfig { path: path.clone() });
        }
        for value in found {
            configs.push(to_object(path, "BrowserConfig", value)?);
        }
    }
    if args.prepull {
        return render_prepull(&configs, &args.prepull_images.images(), args.output);
    }
    let browser = args
        .browser
        .as_deref()
        .ok_or(RenderCommandError::NoBrowser)?;
    render_pod(configs, browser, &args.policy.policy(), args.output)
}

/// The pre-pull DaemonSets of `configs`: YAML documents (entries that ask for pre-pull but
/// cannot be pulled named in a comment first), or one JSON `List`.
fn render_prepull(
    configs: &[DynamicObject],
    images: &prepull::HelperImages,
    output: OutputFormat,
) -> Result<String, RenderCommandError> {
    let mut daemon_sets = Vec::new();
    let mut skipped = Vec::new();
    for config in configs {
        let api_version = config
            .types
            .as_ref()
            .map(|t| t.api_version.clone())
            .unwrap_or_else(|| format!("{}/{}", keys::DEFAULT_GROUP, keys::VERSION));
        let plan = prepull::plan(config, &api_version, images);
        skipped.extend(plan.skipped);
        daemon_sets.extend(plan.daemon_sets.into_iter().map(|d| d.body));
    }
    if daemon_sets.is_empty() {
        let skipped = if skipped.is_empty() {
            String::new()
        } else {
            format!(
                " (entries that ask for it but cannot be pulled: {})",
                skipped.join(" | ")
            )
        };
        return Err(RenderCommandError::NoPrePull { skipped });
    }
    let output_error = |e: &dyn std::fmt::Display| RenderCommandError::Output(e.to_string());
    match output {
        OutputFormat::Json => {
            let list =
                serde_json::json!({"apiVersion": "v1", "kind": "List", "items": daemon_sets});
            serde_json::to_string_pretty(&list)
                .map(|s| s + "\n")
                .map_err(|e| output_error(&e))
        }
        OutputFormat::Yaml => {
            let mut text: String = skipped
                .iter()
                .map(|s| format!("# not pulled, invalid: {s}\n"))
                .collect();
            for ds in &daemon_sets {
                text.push_str("---\n");
                text.push_str(&serde_saphyr::to_string(ds).map_err(|e| output_error(&e))?);
            }
            Ok(text)
        }
    }
}

/// The pod of the Browser in the file `browser`.
fn render_pod(
    mut configs: Vec<DynamicObject>,
    browser: &Path,
    policy: &Policy,
    output: OutputFormat,
) -> Result<String, RenderCommandError> {
    let browser = the_browser(browser)?;
    // What the operator would say of this spec (a version YAML read as a number …).
    let key = Browser::new(&browser).spec().map_err(|invalid| {
        let failure = Failure::from(invalid);
        RenderCommandError::Rejected {
            reason: failure.reason,
            message: failure.message,
        }
    })?;
    // Like the operator, only configs of the Browser's namespace count; files without a
    // namespace stand for any.
    let mut elsewhere = BTreeSet::new();
    if let Some(ns) = browser.metadata.namespace.as_deref() {
        configs.retain(|c| match c.metadata.namespace.as_deref() {
            Some(cns) if cns != ns => {
                elsewhere.insert(cns.to_string());
                false
            }
            _ => true,
        });
    }
    let resource = browser_resource(&browser);
    let pod = match desired::pod_for(&browser, &configs, &resource, policy, None, |_, _, _| None) {
        PodCreation::Render { pod, .. } => pod,
        PodCreation::Fail(failure) if failure.reason == Reason::ConfigNotFound.as_str() => {
            let ns = browser.metadata.namespace.as_deref().unwrap_or_default();
            let available = available(&configs, key.name, key.version, &elsewhere, ns);
            return Err(RenderCommandError::NotFound {
                message: failure.message,
                available,
            });
        }
        PodCreation::Fail(failure) => {
            return Err(RenderCommandError::Rejected {
                reason: failure.reason,
                message: failure.message,
            });
        }
    };
    match output {
        OutputFormat::Json => serde_json::to_string_pretty(&pod)
            .map(|s| s + "\n")
            .map_err(|e| RenderCommandError::Output(e.to_string())),
        OutputFormat::Yaml => {
            serde_saphyr::to_string(&pod).map_err(|e| RenderCommandError::Output(e.to_string()))
        }
    }
}

/// The one Browser of the file `path`.
fn the_browser(path: &Path) -> Result<DynamicObject, RenderCommandError> {
    let mut browsers = objects_of_kind(path, keys::BROWSER_KIND)?;
    if browsers.len() != 1 {
        return Err(RenderCommandError::BrowserCount {
            path: path.to_path_buf(),
            count: browsers.len(),
        });
    }
    to_object(path, "Browser", browsers.remove(0))
}

/// What a user asking for `name` `version` may look for instead: the entries the configs
/// define, or the namespaces they are in (`elsewhere`) when the Browser's (`ns`) has none.
fn available(
    configs: &[DynamicObject],
    name: &str,
    version: &str,
    elsewhere: &BTreeSet<String>,
    ns: &str,
) -> String {
    match lookup::resolve(configs, name, version) {
        Err(LookupError::NotFound { available, .. }) if !available.is_empty() => {
            format!(" (available: {})", available.join(", "))
        }
        _ if !elsewhere.is_empty() => format!(
            " (the given BrowserConfigs are in namespace {}, the Browser is in namespace {ns}: a Browser uses only the BrowserConfigs of its own namespace)",
            elsewhere.iter().cloned().collect::<Vec<_>>().join(", "),
        ),
        _ => " (the given files define no resolvable entry)".to_string(),
    }
}
