//! The pod a Browser should get (docs/behaviour.md, "Normal path"): resolve its BrowserConfig
//! entry, validate it, parse the options annotation and render. Each failure maps to a reason
//! of the cleanup table (docs/behaviour.md, "Cleanup table"): `ConfigNotFound`,
//! `InvalidConfig`, `InvalidSelenosisOptions`.

use std::borrow::Borrow;

use kube_core::ApiResource;
use kube_core::DynamicObject;

use super::plan::PodCreation;
use super::reason::Reason;
use super::status::Failure;
use crate::api::browser::{Browser, SpecField};
use crate::config::lookup::{self, LookupError};
use crate::config::validate;
use crate::pod::options;
use crate::pod::policy::Policy;
use crate::pod::render::{RenderError, RenderInput, render_pod};
use crate::pod::schema::PodSchema;
use crate::pod::security;

/// Resolves and renders the pod of `browser` from the BrowserConfigs of its namespace under
/// the admin's `policy`, pruned to the cluster's Pod `schema` when one is known. A pod above
/// the pod security ceiling is never rendered: its entry is invalid. `rejected(config,
/// browser, version_key)` is the cluster's dry-run verdict on an entry (docs/behaviour.md,
/// "BrowserConfig validation and status"), if it rejected it.
pub fn pod_for<C: Borrow<DynamicObject>>(
    browser: &DynamicObject,
    configs: &[C],
    browser_resource: &ApiResource,
    policy: &Policy,
    schema: Option<&PodSchema>,
    rejected: impl Fn(&str, &str, &str) -> Option<String>,
) -> PodCreation {
    // As written: the BrowserConfig dry run renders for entry keys that need not be label values.
    let spec = Browser::new(browser).fields();
    let field = |f| spec.as_written(f).unwrap_or_default();
    let (name, version) = (
        field(SpecField::BrowserName),
        field(SpecField::BrowserVersion),
    );
    let namespace = browser.metadata.namespace.as_deref().unwrap_or("default");
    let resolved = match lookup::resolve(configs, name, version) {
        Ok(resolved) => resolved,
        Err(LookupError::NotFound { .. }) => {
            return PodCreation::Fail(Failure::new(
                Reason::ConfigNotFound,
                format!(
                    "Browser configuration not found: no BrowserConfig in namespace {namespace} defines browser {name} version {version}"
                ),
            ));
        }
        Err(other) => {
            return PodCreation::Fail(Failure::new(Reason::InvalidConfig, other.to_string()));
        }
    };
    if let Err(problems) = validate::validate_entry(&resolved.entry) {
        return PodCreation::Fail(Failure::new(
            Reason::InvalidConfig,
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
            Reason::InvalidConfig,
            format!(
                "BrowserConfig {} entry {name} {key} is rejected by the cluster: {message}",
                resolved.config_name
            ),
        ));
    }
    let session_options = match options::from_browser(browser, &policy.fence) {
        Ok(o) => o,
        Err(e) => {
            return PodCreation::Fail(Failure::new(Reason::InvalidSelenosisOptions, e.to_string()));
        }
    };
    let input = RenderInput {
        browser,
        browser_api_version: &browser_resource.api_version,
        entry: &resolved.entry,
        options: &session_options,
        policy,
    };
    match render_pod(&input) {
        Ok(mut pod) => {
            let violations = security::violations(&pod, policy.level);
            if !violations.is_empty() {
                return PodCreation::Fail(Failure::new(
                    Reason::InvalidConfig,
                    format!(
                        "BrowserConfig {} entry {name} {key} is above the operator's pod security level {}: {}",
                        resolved.config_name,
                        policy.level,
                        violations.join("; ")
                    ),
                ));
            }
            let removed = schema.map(|s| s.prune(&mut pod)).unwrap_or_default();
            PodCreation::Render { pod, removed }
        }
        Err(RenderError::Options(e)) => {
            PodCreation::Fail(Failure::new(Reason::InvalidSelenosisOptions, e.to_string()))
        }
        Err(e) => PodCreation::Fail(Failure::new(Reason::InvalidConfig, e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{browser, config};
    use serde_json::{Value, json};

    fn browser_resource() -> ApiResource {
        ApiResource {
            group: "selenosis.io".into(),
            version: "v1".into(),
            api_version: "selenosis.io/v1".into(),
            kind: "Browser".into(),
            plural: "browsers".into(),
        }
    }

    /// The outcome for a chrome 139.0 Browser against one BrowserConfig with `spec`:
    /// `Ok(())` for a rendered pod, else the failure's reason and message.
    fn outcome(spec: Value) -> Result<(), (String, String)> {
        outcome_under(spec, &Policy::default()).map(|_| ())
    }

    /// The pod, or the failure's reason and message, under `policy`.
    fn outcome_under(spec: Value, policy: &Policy) -> Result<Value, (String, String)> {
        let browser = browser("s1").namespace("ns").uid("u").object();
        let config = config("c")
            .namespace("ns")
            .created("2026-01-01T00:00:00Z")
            .spec(spec)
            .object();
        match pod_for(
            &browser,
            &[config],
            &browser_resource(),
            policy,
            None,
            |_, _, _| None,
        ) {
            PodCreation::Render { pod, .. } => Ok(pod),
            PodCreation::Fail(f) => Err((f.reason, f.message)),
        }
    }

    #[test]
    fn an_entry_above_the_ceiling_is_invalid_and_names_the_field() {
        let privileged_sidecar = json!({"browsers": {"chrome": {"139.0": {"image": IMAGE,
            "sidecars": [{"name": "vnc", "image": "vnc", "securityContext": {"privileged": true}}]}}}});
        let (reason, message) = outcome(privileged_sidecar.clone()).unwrap_err();
        assert_eq!(reason, "InvalidConfig");
        assert_eq!(
            message,
            "BrowserConfig c entry chrome 139.0 is above the operator's pod security level baseline: spec.containers[1] (vnc).securityContext.privileged is true"
        );
        let privileged = Policy {
            level: crate::pod::security::Level::Privileged,
            ..Policy::default()
        };
        assert!(outcome_under(privileged_sidecar, &privileged).is_ok());
    }

    #[test]
    fn restricted_hardens_a_plain_entry_and_refuses_a_contrary_one() {
        let restricted = Policy {
            level: crate::pod::security::Level::Restricted,
            ..Policy::default()
        };
        let plain = json!({"browsers": {"chrome": {"139.0": {"image": IMAGE,
            "sidecars": [{"name": "seleniferous", "image": "s"}]}}}});
        let pod = outcome_under(plain, &restricted).unwrap();
        assert_eq!(
            crate::pod::security::violations(&pod, crate::pod::security::Level::Restricted),
            Vec::<String>::new()
        );
        let root = json!({"browsers": {"chrome": {"139.0": {"image": IMAGE,
            "containerSecurityContext": {"runAsUser": 0}}}}});
        let (reason, message) = outcome_under(root, &restricted).unwrap_err();
        assert_eq!(reason, "InvalidConfig");
        assert!(message.ends_with("restricted: spec.containers[0] (browser).securityContext.runAsUser is 0: running as root is not allowed"), "{message}");
    }

    const IMAGE: &str = "selenium/standalone-chrome:139.0";

    #[test]
    fn configs_with_unknown_fields_empty_maps_and_nulls_still_render() {
        for spec in [
            json!({"futureField": 1, "template": {"futureKey": {"a": 1}},
                "browsers": {"chrome": {"139.0": {"image": IMAGE, "futureEntryKey": true}}}}),
            json!({"browsers": {"chrome": {"139.0": {"image": IMAGE}}}}),
            json!({"template": {}, "browsers": {"chrome": {"139.0": {"image": IMAGE,
                "labels": {}, "annotations": {}, "env": [], "nodeSelector": {}}}}}),
            json!({"template": null, "browsers": {"chrome": {"139.0": {"image": IMAGE,
                "labels": null, "env": null, "resources": null, "sidecars": null}}}}),
        ] {
            assert_eq!(outcome(spec.clone()), Ok(()), "{spec}");
        }
    }

    #[test]
    fn configs_that_define_nothing_usable_fail_with_config_not_found() {
        for spec in [
            json!({"browsers": {}}),
            json!({"browsers": null}),
            json!({}),
            Value::Null,
            json!({"browsers": {"chrome": null}}),
            json!({"browsers": {"chrome": {}}}),
            json!({"browsers": {"chrome": "139.0"}}),
            json!({"browsers": [1]}),
        ] {
            let (reason, message) = outcome(spec.clone()).unwrap_err();
            assert_eq!(reason, "ConfigNotFound", "{spec}");
            assert!(
                message.contains("defines browser chrome version 139.0"),
                "{spec}: {message}"
            );
        }
    }

    #[test]
    fn wrongly_typed_entries_fail_with_invalid_config_naming_the_field() {
        for (spec, needle) in [
            (
                json!({"browsers": {"chrome": {"139.0": null}}}),
                "has no image",
            ),
            (
                json!({"browsers": {"chrome": {"139.0": {"image": 139}}}}),
                "has no image",
            ),
            (
                json!({"browsers": {"chrome": {"139.0": {"image": IMAGE, "labels": {"app": 1}}}}}),
                "labels must be a map of strings",
            ),
            (
                json!({"browsers": {"chrome": {"139.0": {"image": IMAGE, "privileged": "yes"}}}}),
                "privileged must be a boolean",
            ),
            (
                json!({"browsers": {"chrome": {"139.0": {"image": IMAGE, "sidecars": {}}}}}),
                "sidecars must be a list",
            ),
            (
                json!({"template": [], "browsers": {"chrome": {"139.0": {"image": IMAGE}}}}),
                "spec.template is not an object",
            ),
        ] {
            let (reason, message) = outcome(spec.clone()).unwrap_err();
            assert_eq!(reason, "InvalidConfig", "{spec}");
            assert!(message.contains(needle), "{spec}: {message}");
        }
    }
}
