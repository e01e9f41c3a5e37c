//! The Pod of a Browser (docs/behaviour.md, "The Pod of a Browser"): a pure function of the
//! Browser, its resolved and merged configuration entry (docs/configuration.md, "Fields") and
//! its session options (docs/configuration.md, "Per-session options").

use kube_core::DynamicObject;
use serde_json::{Map, Value};

use crate::api::browser::{Browser, SpecField};
use crate::api::keys::{
    BROWSER_CONTAINER, BROWSER_KIND, LABEL_BROWSER, LABEL_BROWSER_NAME, LABEL_BROWSER_VERSION,
    LABEL_MANAGED_BY, MANAGER,
};
use crate::names;
use crate::pod::options::{self, OptionsError, SessionOptions};
use crate::pod::policy::{Policy, attribution};
use crate::pod::security;

/// Entry fields of the browser container, in the order they are written.
const BROWSER_CONTAINER_FIELDS: [&str; 13] = [
    "command",
    "args",
    "workingDir",
    "ports",
    "envFrom",
    "env",
    "resources",
    "volumeMounts",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "imagePullPolicy",
];

/// The entry field that holds the browser container's `securityContext` (the entry's own
/// `securityContext` is the pod's).
const CONTAINER_SECURITY_CONTEXT: &str = "containerSecurityContext";

/// The entry field listing the containers, besides `browser`, whose env session options may set.
pub const OPTIONS_CONTAINERS: &str = "optionsContainers";

/// Entry fields copied to the pod spec unchanged, in the order they are written; the
/// containers follow them, then `volumes`.
const POD_SPEC_FIELDS: [&str; 13] = [
    "serviceAccountName",
    "priorityClassName",
    "runtimeClassName",
    "activeDeadlineSeconds",
    "terminationGracePeriodSeconds",
    "securityContext",
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "hostAliases",
    "dnsConfig",
    "imagePullSecrets",
];

/// Pod spec switches that default to off for browser pods: a browser needs neither API
/// credentials nor the service environment variables of its namespace.
const OFF_BY_DEFAULT: [&str; 2] = ["automountServiceAccountToken", "enableServiceLinks"];

/// Everything a pod is rendered from.
#[derive(Debug, Clone, Copy)]
pub struct RenderInput<'a> {
    /// The Browser the pod belongs to.
    pub browser: &'a DynamicObject,
    /// The Browser's resolved `apiVersion`, e.g. `selenosis.io/v1` (owner reference).
    pub browser_api_version: &'a str,
    /// The resolved, merged configuration entry, including `image`.
    pub entry: &'a Value,
    /// The Browser's validated session options.
    pub options: &'a SessionOptions,
    /// What the admin lets Browsers and options bring, and the pod security level.
    pub policy: &'a Policy,
}

/// Why no pod could be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("Browser has no metadata.name")]
    MissingName,
    #[error("Browser {browser}: spec.{field} must be a non-empty string")]
    MissingSpecField {
        browser: String,
        field: &'static str,
    },
    #[error(
        "configuration entry for {browser_name} {browser_version} has no image: set image to the browser container image"
    )]
    MissingImage {
        browser_name: String,
        browser_version: String,
    },
    #[error("configuration entry for {browser_name} {browser_version}: {field} must be {expected}")]
    InvalidEntry {
        browser_name: String,
        browser_version: String,
        field: &'static str,
        expected: &'static str,
    },
    #[error(transparent)]
    Options(#[from] OptionsError),
}

/// Renders the full Pod of a Browser. The same input always gives the same JSON, key
/// order included.
pub fn render_pod(input: &RenderInput) -> Result<Value, RenderError> {
    let browser = input.browser;
    let name = browser
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or(RenderError::MissingName)?;
    let browser_name = spec_string(browser, name, SpecField::BrowserName)?;
    let browser_version = spec_string(browser, name, SpecField::BrowserVersion)?;
    let entry = Entry {
        value: input.entry,
        browser_name,
        browser_version,
    };
    let image = entry
        .value
        .get("image")
        .and_then(Value::as_str)
        .filter(|i| !i.is_empty())
        .ok_or_else(|| RenderError::MissingImage {
            browser_name: browser_name.to_string(),
            browser_version: browser_version.to_string(),
        })?;

    // The Browser's labels (those the fence lets through), the configuration's over them, the
    // session's over the Browser's but never over the configuration's; the hub's attribution
    // and the operator's own labels over everything.
    let fence = &input.policy.fence;
    let browser_labels = browser.metadata.labels.iter().flatten();
    let mut labels = Map::new();
    for (key, value) in browser_labels.clone() {
        if fence.passes_browser_label(key) {
            labels.insert(key.clone(), Value::String(value.clone()));
        }
    }
    let configured = entry.merge_strings(&mut labels, "labels")?;
    for (key, value) in &input.options.labels {
        if !configured.contains(key) {
            labels.insert(key.clone(), Value::String(value.clone()));
        }
    }
    for (key, value) in browser_labels.filter(|(key, _)| attribution(key)) {
        labels.insert(key.clone(), Value::String(value.clone()));
    }

    let mut annotations = Map::new();
    for (key, value) in browser.metadata.annotations.iter().flatten() {
        if fence.passes_annotation(key) {
            annotations.insert(key.clone(), Value::String(value.clone()));
        }
    }
    entry.merge_strings(&mut annotations, "annotations")?;

    let mut metadata = Map::new();
    metadata.insert("name".into(), name.into());
    if let Some(namespace) = &browser.metadata.namespace {
        metadata.insert("namespace".into(), namespace.as_str().into());
    }
    metadata.insert("labels".into(), Value::Object(labels));
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    metadata.insert(
        "ownerReferences".into(),
        Value::Array(vec![owner_reference(
            browser,
            name,
            input.browser_api_version,
        )]),
    );

    let mut pod = Map::new();
    pod.insert("apiVersion".into(), "v1".into());
    pod.insert("kind".into(), "Pod".into());
    pod.insert("metadata".into(), Value::Object(metadata));
    pod.insert("spec".into(), Value::Object(pod_spec(name, image, &entry)?));
    let mut pod = Value::Object(pod);

    options::apply_env(&mut pod, input.options, &entry.options_containers()?)?;
    security::harden(&mut pod, input.policy.level);

    let browser_label = names::label_value_for(name);
    let operator_labels = [
        (LABEL_BROWSER, browser_label.as_str()),
        (LABEL_BROWSER_NAME, browser_name),
        (LABEL_BROWSER_VERSION, browser_version),
        (LABEL_MANAGED_BY, MANAGER),
    ];
    let labels = options::labels_mut(&mut pod)?;
    for (key, value) in operator_labels {
        labels.insert(key.into(), value.into());
    }
    Ok(pod)
}

fn spec_string<'a>(
    browser: &'a DynamicObject,
    name: &str,
    field: SpecField,
) -> Result<&'a str, RenderError> {
    Browser::new(browser)
        .fields()
        .as_written(field)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| RenderError::MissingSpecField {
            browser: name.to_string(),
            field: field.as_str(),
        })
}

fn owner_reference(browser: &DynamicObject, name: &str, api_version: &str) -> Value {
    let mut reference = Map::new();
    reference.insert("apiVersion".into(), api_version.into());
    reference.insert("kind".into(), BROWSER_KIND.into());
    reference.insert("name".into(), name.into());
    if let Some(uid) = &browser.metadata.uid {
        reference.insert("uid".into(), uid.as_str().into());
    }
    reference.insert("controller".into(), true.into());
    reference.insert("blockOwnerDeletion".into(), true.into());
    Value::Object(reference)
}

/// The configuration entry being rendered, with what names it in errors.
struct Entry<'a> {
    value: &'a Value,
    browser_name: &'a str,
    browser_version: &'a str,
}

impl Entry<'_> {
    /// A field that is present and not null.
    fn field(&self, field: &str) -> Option<&Value> {
        self.value.get(field).filter(|v| !v.is_null())
    }

    fn invalid(&self, field: &'static str, expected: &'static str) -> RenderError {
        RenderError::InvalidEntry {
            browser_name: self.browser_name.to_string(),
            browser_version: self.browser_version.to_string(),
            field,
            expected,
        }
    }

    /// Merges a string map of the entry (`labels`, `annotations`) into `target`; returns the
    /// keys it set.
    fn merge_strings(
        &self,
        target: &mut Map<String, Value>,
        field: &'static str,
    ) -> Result<Vec<String>, RenderError> {
        let Some(value) = self.field(field) else {
            return Ok(Vec::new());
        };
        let invalid = || self.invalid(field, "a map of strings");
        let mut set = Vec::new();
        for (key, value) in value.as_object().ok_or_else(invalid)? {
            if !value.is_string() {
                return Err(invalid());
            }
            target.insert(key.clone(), value.clone());
            set.push(key.clone());
        }
        Ok(set)
    }

    /// The containers whose env session options may set: `browser`, and those the entry lists.
    fn options_containers(&self) -> Result<Vec<String>, RenderError> {
        let mut allowed = vec![BROWSER_CONTAINER.to_string()];
        if let Some(listed) = self.field(OPTIONS_CONTAINERS) {
            let invalid = || self.invalid(OPTIONS_CONTAINERS, "a list of container names");
            for name in listed.as_array().ok_or_else(invalid)? {
                allowed.push(name.as_str().ok_or_else(invalid)?.to_string());
            }
        }
        Ok(allowed)
    }

    /// A container list of the entry (`sidecars`, `initContainers`).
    fn containers(&self, field: &'static str) -> Result<&[Value], RenderError> {
        match self.field(field) {
            None => Ok(&[]),
            Some(list) => list
                .as_array()
                .map(Vec::as_slice)
                .ok_or_else(|| self.invalid(field, "a list of containers")),
        }
    }
}

fn pod_spec(name: &str, image: &str, entry: &Entry) -> Result<Map<String, Value>, RenderError> {
    let mut spec = Map::new();
    if let Some(hostname) = names::hostname_for(name) {
        spec.insert("hostname".into(), hostname.into());
    }
    spec.insert("restartPolicy".into(), "Never".into());
    for field in OFF_BY_DEFAULT {
        let value = entry.field(field).cloned().unwrap_or(Value::Bool(false));
        spec.insert(field.into(), value);
    }
    for field in POD_SPEC_FIELDS {
        if let Some(value) = entry.field(field) {
            spec.insert(field.into(), value.clone());
        }
    }
    let init_containers = entry.containers("initContainers")?;
    if !init_containers.is_empty() {
        spec.insert("initContainers".into(), init_containers.to_vec().into());
    }
    let mut containers = vec![browser_container(image, entry)?];
    containers.extend(entry.containers("sidecars")?.iter().cloned());
    spec.insert("containers".into(), Value::Array(containers));
    if let Some(volumes) = entry.field("volumes") {
        spec.insert("volumes".into(), volumes.clone());
    }
    Ok(spec)
}

fn browser_container(image: &str, entry: &Entry) -> Result<Value, RenderError> {
    let mut container = Map::new();
    container.insert("name".into(), BROWSER_CONTAINER.into());
    container.insert("image".into(), image.into());
    for field in BROWSER_CONTAINER_FIELDS {
        if let Some(value) = entry.field(field) {
            container.insert(field.into(), value.clone());
        }
    }
    let mut security = match entry.field(CONTAINER_SECURITY_CONTEXT) {
        None => Map::new(),
        Some(Value::Object(security)) => security.clone(),
        Some(_) => return Err(entry.invalid(CONTAINER_SECURITY_CONTEXT, "an object")),
    };
    match entry.field("privileged") {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => {
            security.insert("privileged".into(), true.into());
        }
        Some(_) => return Err(entry.invalid("privileged", "a boolean")),
    }
    if !security.is_empty() {
        container.insert("securityContext".into(), Value::Object(security));
    }
    Ok(Value::Object(container))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::fixtures;
    use crate::pod::options::ContainerOptions;

    const API_VERSION: &str = "selenosis.io/v1";

    fn browser_from(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    fn browser() -> DynamicObject {
        fixtures::browser("chrome-139-0-abc")
            .namespace("selenosis")
            .uid("uid-1")
            .labels(json!({"selenosis.io/owner": "qa", "tier": "browser-label"}))
            .annotations(json!({
                "selenosis.io/options": "{}",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "note": "from-browser",
                "shared": "browser"
            }))
            .object()
    }

    fn entry() -> Value {
        json!({"image": "selenium/standalone-chrome:139.0"})
    }

    fn render_with(
        browser: &DynamicObject,
        entry: &Value,
        options: &SessionOptions,
    ) -> Result<Value, RenderError> {
        render_pod(&RenderInput {
            browser,
            browser_api_version: API_VERSION,
            entry,
            options,
            policy: &Policy::default(),
        })
    }

    fn render(entry: &Value) -> Value {
        render_with(&browser(), entry, &SessionOptions::default()).unwrap()
    }

    fn keys(value: &Value) -> Vec<&str> {
        value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect()
    }

    #[test]
    fn pod_identity_and_owner_reference() {
        let pod = render(&entry());
        assert_eq!(keys(&pod), ["apiVersion", "kind", "metadata", "spec"]);
        assert_eq!(pod["apiVersion"], "v1");
        assert_eq!(pod["kind"], "Pod");
        assert_eq!(pod["metadata"]["name"], "chrome-139-0-abc");
        assert_eq!(pod["metadata"]["namespace"], "selenosis");
        assert_eq!(
            pod["metadata"]["ownerReferences"],
            json!([{
                "apiVersion": "selenosis.io/v1",
                "kind": "Browser",
                "name": "chrome-139-0-abc",
                "uid": "uid-1",
                "controller": true,
                "blockOwnerDeletion": true
            }])
        );
    }

    #[test]
    fn owner_reference_uses_the_resolved_api_version() {
        let pod = render_pod(&RenderInput {
            browser: &browser(),
            browser_api_version: "browser.selenosis.io/v1",
            entry: &entry(),
            options: &SessionOptions::default(),
            policy: &Policy::default(),
        })
        .unwrap();
        assert_eq!(
            pod["metadata"]["ownerReferences"][0]["apiVersion"],
            "browser.selenosis.io/v1"
        );
    }

    #[test]
    fn offline_browser_without_uid_or_namespace() {
        let browser = browser_from(json!({
            "metadata": {"name": "b1"},
            "spec": {"browserName": "chrome", "browserVersion": "139.0"}
        }));
        let pod = render_with(&browser, &entry(), &SessionOptions::default()).unwrap();
        assert_eq!(
            keys(&pod["metadata"]),
            ["name", "labels", "ownerReferences"]
        );
        assert_eq!(
            keys(&pod["metadata"]["ownerReferences"][0]),
            [
                "apiVersion",
                "kind",
                "name",
                "controller",
                "blockOwnerDeletion"
            ]
        );
    }

    #[test]
    fn labels_layer_browser_options_entry_then_hub_and_operator() {
        let mut browser = browser();
        let labels = browser.metadata.labels.as_mut().unwrap();
        labels.insert("app.kubernetes.io/managed-by".into(), "someone-else".into());
        labels.insert("selenosis.io/browser".into(), "stale".into());
        labels.insert("sidecar.istio.io/inject".into(), "true".into());
        let entry = json!({
            "image": "i",
            "labels": {"tier": "entry-label", "app": "browser", "selenosis.io/browser.name": "firefox",
                       "selenosis.io/owner": "config"}
        });
        let options = SessionOptions {
            labels: BTreeMap::from([
                ("app".to_string(), "option-app".to_string()),
                ("team".to_string(), "checkout".to_string()),
                ("selenosis.io/browser.version".to_string(), "1".to_string()),
            ]),
            ..Default::default()
        };
        let pod = render_with(&browser, &entry, &options).unwrap();
        // Reserved and foreign Browser labels stay behind; the configuration wins over the
        // Browser's labels and options, options over the Browser's labels; the hub's owner label and the operator's
        // own labels over everything.
        assert_eq!(
            serde_json::to_string(&pod["metadata"]["labels"]).unwrap(),
            r#"{"selenosis.io/owner":"qa","tier":"entry-label","app":"browser","selenosis.io/browser.name":"chrome","selenosis.io/browser.version":"139.0","team":"checkout","selenosis.io/browser":"chrome-139-0-abc","app.kubernetes.io/managed-by":"browser-controller"}"#
        );
        // Without the hub's label the configuration's stands.
        let mut unowned = browser.clone();
        unowned.metadata.labels = None;
        let pod = render_with(&unowned, &entry, &SessionOptions::default()).unwrap();
        assert_eq!(pod["metadata"]["labels"]["selenosis.io/owner"], "config");
    }

    #[test]
    fn annotations_skip_options_and_kubectl_then_take_the_entry() {
        let entry = json!({"image": "i", "annotations": {"shared": "entry", "extra": "x"}});
        let pod = render(&entry);
        assert_eq!(
            pod["metadata"]["annotations"],
            json!({"note": "from-browser", "shared": "entry", "extra": "x"})
        );
    }

    #[test]
    fn security_relevant_browser_annotations_never_reach_the_pod() {
        let mut browser = browser();
        let annotations = browser.metadata.annotations.as_mut().unwrap();
        for key in [
            "container.apparmor.security.beta.kubernetes.io/browser",
            "sidecar.istio.io/inject",
            "vault.hashicorp.com/agent-inject",
        ] {
            annotations.insert(key.into(), "x".into());
        }
        let entry = json!({"image": "i", "annotations": {"sidecar.istio.io/inject": "false"}});
        let pod = render_with(&browser, &entry, &SessionOptions::default()).unwrap();
        assert_eq!(
            pod["metadata"]["annotations"],
            json!({"note": "from-browser", "shared": "browser", "sidecar.istio.io/inject": "false"})
        );
        // An admin may let a prefix through.
        let policy = Policy {
            fence: crate::pod::policy::Fence::new(&[], &[], &["vault.hashicorp.com".into()]),
            ..Policy::default()
        };
        let pod = render_pod(&RenderInput {
            browser: &browser,
            browser_api_version: API_VERSION,
            entry: &entry,
            options: &SessionOptions::default(),
            policy: &policy,
        })
        .unwrap();
        assert_eq!(
            pod["metadata"]["annotations"]["vault.hashicorp.com/agent-inject"],
            "x"
        );
    }

    #[test]
    fn the_browser_container_takes_probes_lifecycle_env_from_and_its_security_context() {
        let entry = json!({
            "image": "chrome:1",
            "envFrom": [{"configMapRef": {"name": "browser-env"}}],
            "livenessProbe": {"httpGet": {"path": "/status", "port": 4444}},
            "readinessProbe": {"tcpSocket": {"port": 4444}},
            "startupProbe": {"exec": {"command": ["true"]}},
            "lifecycle": {"preStop": {"exec": {"command": ["sleep", "1"]}}},
            "containerSecurityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            "securityContext": {"runAsUser": 1000}
        });
        let pod = render(&entry);
        let container = &pod["spec"]["containers"][0];
        assert_eq!(
            keys(container),
            [
                "name",
                "image",
                "envFrom",
                "livenessProbe",
                "readinessProbe",
                "startupProbe",
                "lifecycle",
                "securityContext"
            ]
        );
        assert_eq!(
            container["securityContext"],
            entry["containerSecurityContext"]
        );
        assert_eq!(container["livenessProbe"], entry["livenessProbe"]);
        assert_eq!(pod["spec"]["securityContext"], json!({"runAsUser": 1000}));
        // `privileged: true` joins the container's security context.
        let mut privileged = entry.clone();
        privileged["privileged"] = json!(true);
        assert_eq!(
            render(&privileged)["spec"]["containers"][0]["securityContext"],
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "privileged": true})
        );
        for (field, value, expected) in [
            (
                "containerSecurityContext",
                json!("x"),
                "containerSecurityContext must be an object",
            ),
            (
                "optionsContainers",
                json!("seleniferous"),
                "optionsContainers must be a list of container names",
            ),
            (
                "optionsContainers",
                json!([1]),
                "optionsContainers must be a list of container names",
            ),
        ] {
            let mut bad = json!({"image": "i"});
            bad[field] = value;
            let err = render_with(&browser(), &bad, &SessionOptions::default()).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("configuration entry for chrome 139.0: {expected}")
            );
        }
    }

    #[test]
    fn empty_annotations_are_omitted() {
        let mut browser = browser();
        browser.metadata.annotations = Some(BTreeMap::from([(
            "selenosis.io/options".to_string(),
            "{}".to_string(),
        )]));
        let pod = render_with(&browser, &entry(), &SessionOptions::default()).unwrap();
        assert_eq!(pod["metadata"].get("annotations"), None);
    }

    #[test]
    fn hostname_and_browser_label_fit_whatever_the_name() {
        assert_eq!(render(&entry())["spec"]["hostname"], "chrome-139-0-abc");
        let long = format!("chrome-139-0-{}", "x".repeat(240));
        for (name, hostname) in [
            ("chrome.139.0", "chrome-139-0".to_string()),
            (long.as_str(), names::hostname_for(&long).unwrap()),
        ] {
            let mut browser = browser();
            browser.metadata.name = Some(name.to_string());
            let pod = render_with(&browser, &entry(), &SessionOptions::default()).unwrap();
            assert_eq!(pod["spec"]["hostname"], hostname.as_str(), "{name}");
            assert_eq!(pod["metadata"]["name"], name);
            let label = pod["metadata"]["labels"]["selenosis.io/browser"]
                .as_str()
                .unwrap();
            assert_eq!(names::check_label_value(label), Ok(()), "{name}");
            assert_eq!(label, names::label_value_for(name));
        }
        let long_label = names::label_value_for(&long);
        assert_eq!(long_label.len(), 63);
    }

    #[test]
    fn defaults_of_a_browser_pod() {
        let spec = render(&entry())["spec"].clone();
        assert_eq!(spec["restartPolicy"], "Never");
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert_eq!(spec["enableServiceLinks"], false);
        assert_eq!(
            spec["containers"],
            json!([{"name": "browser", "image": "selenium/standalone-chrome:139.0"}])
        );
        assert_eq!(
            keys(&spec),
            [
                "hostname",
                "restartPolicy",
                "automountServiceAccountToken",
                "enableServiceLinks",
                "containers"
            ]
        );
    }

    #[test]
    fn entry_may_switch_token_and_service_links_on() {
        let entry =
            json!({"image": "i", "automountServiceAccountToken": true, "enableServiceLinks": true});
        let spec = render(&entry)["spec"].clone();
        assert_eq!(spec["automountServiceAccountToken"], true);
        assert_eq!(spec["enableServiceLinks"], true);
    }

    #[test]
    fn browser_container_takes_its_entry_fields() {
        let entry = json!({
            "image": "chrome:1",
            "imagePullPolicy": "Always",
            "env": [{"name": "TZ", "value": "UTC"}],
            "resources": {"limits": {"memory": "2Gi"}},
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
            "workingDir": "/home/user",
            "command": ["/opt/bin/entry_point.sh"],
            "args": ["--verbose"],
            "ports": [{"containerPort": 4444}],
            "privileged": true
        });
        let browser = &render(&entry)["spec"]["containers"][0];
        assert_eq!(
            browser,
            &json!({
                "name": "browser",
                "image": "chrome:1",
                "command": ["/opt/bin/entry_point.sh"],
                "args": ["--verbose"],
                "workingDir": "/home/user",
                "ports": [{"containerPort": 4444}],
                "env": [{"name": "TZ", "value": "UTC"}],
                "resources": {"limits": {"memory": "2Gi"}},
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                "imagePullPolicy": "Always",
                "securityContext": {"privileged": true}
            })
        );
        assert_eq!(
            keys(browser),
            [
                "name",
                "image",
                "command",
                "args",
                "workingDir",
                "ports",
                "env",
                "resources",
                "volumeMounts",
                "imagePullPolicy",
                "securityContext"
            ]
        );
    }

    #[test]
    fn unprivileged_browser_has_no_security_context() {
        let entry = json!({"image": "i", "privileged": false});
        assert_eq!(
            render(&entry)["spec"]["containers"][0].get("securityContext"),
            None
        );
    }

    #[test]
    fn sidecars_follow_the_browser_in_order_and_keep_their_own_settings() {
        let entry = json!({
            "image": "i",
            "workingDir": "/home/user",
            "sidecars": [
                {"name": "seleniferous", "image": "proxy", "ports": [{"containerPort": 4445}]},
                {"name": "x-server", "image": "xvfb"}
            ],
            "initContainers": [{"name": "setup", "image": "busybox"}]
        });
        let spec = render(&entry)["spec"].clone();
        assert_eq!(
            spec["containers"],
            json!([
                {"name": "browser", "image": "i", "workingDir": "/home/user"},
                {"name": "seleniferous", "image": "proxy", "ports": [{"containerPort": 4445}]},
                {"name": "x-server", "image": "xvfb"}
            ])
        );
        assert_eq!(
            spec["initContainers"],
            json!([{"name": "setup", "image": "busybox"}])
        );
    }

    #[test]
    fn pod_spec_fields_are_copied_in_a_fixed_order() {
        let entry = json!({
            "image": "i",
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
            "imagePullSecrets": [{"name": "registry"}],
            "dnsConfig": {"nameservers": ["1.1.1.1"]},
            "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["grid.local"]}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}],
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {}},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "securityContext": {"runAsUser": 1000},
            "terminationGracePeriodSeconds": 5,
            "activeDeadlineSeconds": 3600,
            "runtimeClassName": "gvisor",
            "priorityClassName": "browsers",
            "serviceAccountName": "browser",
            "initContainers": [{"name": "setup", "image": "busybox"}],
            "nodeName": "ignored"
        });
        let spec = render(&entry)["spec"].clone();
        assert_eq!(
            keys(&spec),
            [
                "hostname",
                "restartPolicy",
                "automountServiceAccountToken",
                "enableServiceLinks",
                "serviceAccountName",
                "priorityClassName",
                "runtimeClassName",
                "activeDeadlineSeconds",
                "terminationGracePeriodSeconds",
                "securityContext",
                "nodeSelector",
                "affinity",
                "tolerations",
                "topologySpreadConstraints",
                "hostAliases",
                "dnsConfig",
                "imagePullSecrets",
                "initContainers",
                "containers",
                "volumes"
            ]
        );
        for field in POD_SPEC_FIELDS.iter().chain(&["volumes", "initContainers"]) {
            assert_eq!(spec[field], entry[field], "{field}");
        }
        assert_eq!(spec["containers"][0].get("securityContext"), None);
    }

    #[test]
    fn null_entry_fields_are_treated_as_absent() {
        let entry = json!({"image": "i", "nodeSelector": null, "env": null, "automountServiceAccountToken": null});
        let spec = render(&entry)["spec"].clone();
        assert_eq!(spec.get("nodeSelector"), None);
        assert_eq!(spec["containers"][0].get("env"), None);
        assert_eq!(spec["automountServiceAccountToken"], false);
    }

    #[test]
    fn options_reach_containers_and_labels() {
        let entry = json!({
            "image": "i",
            "env": [{"name": "TZ", "value": "UTC"}],
            "sidecars": [{"name": "seleniferous", "image": "proxy"}]
        });
        let mut options = SessionOptions {
            labels: BTreeMap::from([("team".to_string(), "checkout".to_string())]),
            ..Default::default()
        };
        options.containers.insert(
            "browser".into(),
            ContainerOptions {
                env: BTreeMap::from([("TZ".to_string(), "Europe/Berlin".to_string())]),
            },
        );
        options.containers.insert(
            "seleniferous".into(),
            ContainerOptions {
                env: BTreeMap::from([("SESSION_IDLE_TIMEOUT".to_string(), "2m".to_string())]),
            },
        );
        // Only the browser container takes options unless the entry lists more.
        let err = render_with(&browser(), &entry, &options).unwrap_err();
        assert!(matches!(err, RenderError::Options(_)), "{err}");
        let mut entry = entry;
        entry["optionsContainers"] = json!(["seleniferous"]);
        let pod = render_with(&browser(), &entry, &options).unwrap();
        assert_eq!(pod["metadata"]["labels"]["team"], "checkout");
        assert_eq!(
            pod["spec"]["containers"][0]["env"],
            json!([{"name": "TZ", "value": "Europe/Berlin"}])
        );
        assert_eq!(
            pod["spec"]["containers"][1]["env"],
            json!([{"name": "SESSION_IDLE_TIMEOUT", "value": "2m"}])
        );
    }

    #[test]
    fn options_errors_keep_their_message() {
        let mut options = SessionOptions::default();
        options
            .containers
            .insert("vnc-server".into(), ContainerOptions::default());
        let err = render_with(&browser(), &entry(), &options).unwrap_err();
        assert!(matches!(err, RenderError::Options(_)));
        assert_eq!(
            err.to_string(),
            "unmarshal selenosis.io/options: container \"vnc-server\" is not in the pod (pod containers: browser)"
        );
    }

    #[test]
    fn browser_without_name_or_spec_fields_is_rejected() {
        let mut nameless = browser();
        nameless.metadata.name = None;
        assert_eq!(
            render_with(&nameless, &entry(), &SessionOptions::default())
                .unwrap_err()
                .to_string(),
            "Browser has no metadata.name"
        );
        for (spec, field) in [
            (json!({"browserVersion": "139.0"}), "browserName"),
            (
                json!({"browserName": "chrome", "browserVersion": 139}),
                "browserVersion",
            ),
            (
                json!({"browserName": "", "browserVersion": "139.0"}),
                "browserName",
            ),
        ] {
            let mut browser = browser();
            browser.data = json!({ "spec": spec });
            let err = render_with(&browser, &entry(), &SessionOptions::default()).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("Browser chrome-139-0-abc: spec.{field} must be a non-empty string")
            );
        }
    }

    #[test]
    fn entry_without_a_string_image_is_rejected() {
        for entry in [
            json!({}),
            json!({"image": 5}),
            json!({"image": ""}),
            json!(null),
        ] {
            let err = render_with(&browser(), &entry, &SessionOptions::default()).unwrap_err();
            assert_eq!(
                err.to_string(),
                "configuration entry for chrome 139.0 has no image: set image to the browser container image"
            );
        }
    }

    #[test]
    fn malformed_entry_fields_are_named() {
        for (field, value, expected) in [
            ("labels", json!(["a"]), "labels must be a map of strings"),
            (
                "annotations",
                json!({"a": 1}),
                "annotations must be a map of strings",
            ),
            (
                "sidecars",
                json!({"name": "x"}),
                "sidecars must be a list of containers",
            ),
            (
                "initContainers",
                json!("x"),
                "initContainers must be a list of containers",
            ),
            ("privileged", json!("yes"), "privileged must be a boolean"),
        ] {
            let mut entry = entry();
            entry[field] = value;
            let err = render_with(&browser(), &entry, &SessionOptions::default()).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("configuration entry for chrome 139.0: {expected}")
            );
        }
    }

    #[test]
    fn the_same_input_gives_the_same_bytes() {
        let entry = json!({
            "image": "i",
            "labels": {"z": "1", "a": "2"},
            "sidecars": [{"name": "seleniferous", "image": "proxy"}]
        });
        let options = SessionOptions {
            labels: BTreeMap::from([("team".to_string(), "x".to_string())]),
            ..Default::default()
        };
        let first =
            serde_json::to_vec(&render_with(&browser(), &entry, &options).unwrap()).unwrap();
        let second =
            serde_json::to_vec(&render_with(&browser(), &entry, &options).unwrap()).unwrap();
        assert_eq!(first, second);
    }
}
