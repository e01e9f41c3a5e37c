//! The pod a Browser should get (SPEC §4.1 step 2–3): resolve its BrowserConfig entry,
//! validate it, parse the options annotation and render. Each failure maps to the
//! reason of the cleanup table (§4.2): `ConfigNotFound`, `InvalidConfig`,
//! `InvalidSelenosisOptions`.

use std::borrow::Borrow;

use kube::api::DynamicObject;
use kube::core::ApiResource;

use super::decide::PodCreation;
use super::status::Failure;
use crate::config::lookup::{self, LookupError};
use crate::config::validate;
use crate::pod::options;
use crate::pod::render::{RenderError, RenderInput, render_pod};

/// Resolves and renders the pod of `browser` from the BrowserConfigs of its namespace.
/// `rejected(config, browser, version_key)` is the cluster's dry-run verdict on an entry
/// (SPEC §3.4), if it rejected it.
pub fn pod_for<C: Borrow<DynamicObject>>(
    browser: &DynamicObject,
    configs: &[C],
    browser_resource: &ApiResource,
    rejected: impl Fn(&str, &str, &str) -> Option<String>,
) -> PodCreation {
    let spec = |f: &str| {
        browser
            .data
            .pointer(&format!("/spec/{f}"))
            .and_then(|v| v.as_str())
            .unwrap_or_default()
    };
    let (name, version) = (spec("browserName"), spec("browserVersion"));
    let namespace = browser.metadata.namespace.as_deref().unwrap_or("default");
    let resolved = match lookup::resolve(configs, name, version) {
        Ok(resolved) => resolved,
        Err(LookupError::NotFound { .. }) => {
            return PodCreation::Fail(Failure::new(
                "ConfigNotFound",
                format!(
                    "Browser configuration not found: no BrowserConfig in namespace {namespace} defines browser {name} version {version}"
                ),
            ));
        }
        Err(other) => return PodCreation::Fail(Failure::new("InvalidConfig", other.to_string())),
    };
    if let Err(problems) = validate::validate_entry(&resolved.entry) {
        return PodCreation::Fail(Failure::new(
            "InvalidConfig",
            format!(
                "BrowserConfig {} entry {name} {version} is invalid: {}",
                resolved.config_name,
                problems.join("; ")
            ),
        ));
    }
    let key = configs
        .iter()
        .map(Borrow::borrow)
        .find(|c| c.metadata.name.as_deref() == Some(resolved.config_name.as_str()))
        .map(|c| lookup::version_key(c, name, version))
        .unwrap_or_else(|| version.to_string());
    if let Some(message) = rejected(&resolved.config_name, name, &key) {
        return PodCreation::Fail(Failure::new(
            "InvalidConfig",
            format!(
                "BrowserConfig {} entry {name} {key} is rejected by the cluster: {message}",
                resolved.config_name
            ),
        ));
    }
    let session_options = match options::from_browser(browser) {
        Ok(o) => o,
        Err(e) => return PodCreation::Fail(Failure::new("InvalidSelenosisOptions", e.to_string())),
    };
    let input = RenderInput {
        browser,
        browser_api_version: &browser_resource.api_version,
        entry: &resolved.entry,
        options: &session_options,
    };
    match render_pod(&input) {
        Ok(pod) => PodCreation::Render(pod),
        Err(RenderError::Options(e)) => {
            PodCreation::Fail(Failure::new("InvalidSelenosisOptions", e.to_string()))
        }
        Err(e) => PodCreation::Fail(Failure::new("InvalidConfig", e.to_string())),
    }
}
