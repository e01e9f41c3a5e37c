//! The schema-only types of Browser and BrowserConfig (the Browser status is a type of its own,
//! `api::status`). Their fields are read only by
//! `#[derive(JsonSchema)]`; no value of them is ever built.
#![expect(
    dead_code,
    reason = "schema-only types: the derive reads the fields, nothing constructs them"
)]

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// A core object whose inner schema is left to the cluster (affinity, a volume source,
/// a security context …).
pub(crate) struct Object;

impl JsonSchema for Object {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Object".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
    }
}

/// Characters of a label value: `spec.browserName` and `browserVersion` become labels.
const LABEL_VALUE_PATTERN: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// The requested browser; immutable once created.
#[derive(JsonSchema)]
#[schemars(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self == oldSelf", "message": "spec is immutable"}
]))]
pub(super) struct BrowserSpec {
    /// Browser name, looked up in the BrowserConfigs of the namespace (case-insensitive).
    #[schemars(length(min = 1, max = 63), regex(pattern = LABEL_VALUE_PATTERN))]
    browser_name: String,
    /// Browser version, looked up in the BrowserConfigs of the namespace (case-insensitive).
    #[schemars(length(min = 1, max = 63), regex(pattern = LABEL_VALUE_PATTERN))]
    browser_version: String,
}

/// Which image and pod settings each browser name and version gets.
#[derive(JsonSchema)]
#[schemars(rename_all = "camelCase")]
pub(super) struct BrowserConfigSpec {
    /// Settings shared by every browser of this BrowserConfig; entries override them.
    template: Option<PodTemplate>,
    /// Browser name -> browser version -> entry. The version `*` holds defaults for every
    /// version of its browser; with an `image` it serves any version (`{version}` in the
    /// image is replaced by the requested one).
    #[schemars(extend("minProperties" = 1))]
    browsers: BTreeMap<String, BTreeMap<String, BrowserEntry>>,
}

/// The settings of one browser version: the template's fields plus the image.
#[derive(JsonSchema)]
struct BrowserEntry {
    /// Image of the browser container.
    image: Option<String>,
    #[schemars(flatten)]
    template: PodTemplate,
}

/// Pod settings (docs/configuration.md, "Fields"). The key set is closed so that typos are
/// caught; values of nested core types are checked against the cluster's own Pod schema.
/// List items are merged across tiers by their key (name, mountPath, containerPort, ip).
#[derive(JsonSchema)]
#[schemars(rename_all = "camelCase")]
struct PodTemplate {
    /// Pod labels.
    labels: Option<BTreeMap<String, String>>,
    /// Pod annotations.
    annotations: Option<BTreeMap<String, String>>,
    /// Environment of the browser container.
    env: Option<Vec<Named>>,
    /// Resources of the browser container.
    resources: Option<Object>,
    /// Image pull policy of the browser container.
    image_pull_policy: Option<PullPolicy>,
    /// Volume mounts of the browser container.
    volume_mounts: Option<Vec<VolumeMount>>,
    /// Working directory of the browser container.
    working_dir: Option<String>,
    /// Entrypoint of the browser container.
    command: Option<Vec<String>>,
    /// Arguments of the browser container.
    args: Option<Vec<String>>,
    /// Ports of the browser container.
    ports: Option<Vec<Port>>,
    /// Run the browser container privileged (above the operator's default pod security level).
    privileged: Option<bool>,
    /// Environment of the browser container from ConfigMaps and Secrets.
    env_from: Option<Vec<Object>>,
    /// Liveness probe of the browser container.
    liveness_probe: Option<Object>,
    /// Readiness probe of the browser container.
    readiness_probe: Option<Object>,
    /// Startup probe of the browser container.
    startup_probe: Option<Object>,
    /// Lifecycle hooks of the browser container.
    lifecycle: Option<Object>,
    /// Security context of the browser container (securityContext is the pod's).
    container_security_context: Option<Object>,
    /// Containers besides browser whose env per-session options may set.
    options_containers: Option<Vec<String>>,
    volumes: Option<Vec<Named>>,
    node_selector: Option<BTreeMap<String, String>>,
    affinity: Option<Object>,
    tolerations: Option<Vec<Object>>,
    host_aliases: Option<Vec<HostAlias>>,
    image_pull_secrets: Option<Vec<Named>>,
    dns_config: Option<Object>,
    /// Pod security context.
    security_context: Option<Object>,
    priority_class_name: Option<String>,
    runtime_class_name: Option<String>,
    topology_spread_constraints: Option<Vec<Object>>,
    active_deadline_seconds: Option<i64>,
    termination_grace_period_seconds: Option<i64>,
    service_account_name: Option<String>,
    automount_service_account_token: Option<bool>,
    enable_service_links: Option<bool>,
    /// Init containers of the pod.
    init_containers: Option<Vec<Container>>,
    /// Containers added after the browser container.
    sidecars: Option<Vec<Container>>,
    /// Pull the images of the explicit version entries this applies to (browser,
    /// sidecars, init containers) ahead of the first session, on the nodes where their
    /// browsers may run. Needs the operator's --enable-prepull.
    pre_pull: Option<bool>,
}

#[derive(JsonSchema)]
enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

/// A container.
#[derive(JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
struct Container {
    name: String,
    image: Option<String>,
}

/// A named item (env variable, volume, image pull secret).
#[derive(JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
struct Named {
    name: String,
}

#[derive(JsonSchema)]
#[schemars(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
struct VolumeMount {
    name: String,
    mount_path: String,
}

#[derive(JsonSchema)]
#[schemars(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub(crate) struct Port {
    #[schemars(range(min = 1, max = 65535))]
    container_port: i32,
}

#[derive(JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
struct HostAlias {
    ip: String,
}

/// Validation state of the BrowserConfig, written by the operator.
#[derive(JsonSchema)]
#[schemars(rename_all = "camelCase")]
pub(super) struct BrowserConfigStatus {
    /// Identifier of the effective configuration: a hash of the spec.
    version: Option<String>,
    /// Number of browser version entries in spec.browsers, `*` entries included.
    entries: Option<i64>,
    /// When the status last changed.
    #[schemars(extend("format" = "date-time"))]
    last_updated: Option<String>,
    /// Generation of the BrowserConfig this status was computed from.
    observed_generation: Option<i64>,
    /// Validation results (e.g. Ready, Valid, Conflict, PrePulled), one per type.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    conditions: Option<Vec<crate::api::status::Condition>>,
    /// Progress of the image pre-pull, for configs that ask for it.
    pre_pull: Option<PrePullStatus>,
}

/// The image pre-pull DaemonSets of the config and how far they got.
#[derive(JsonSchema)]
#[schemars(rename_all = "camelCase")]
struct PrePullStatus {
    /// Distinct images pulled.
    images: Option<i64>,
    /// Nodes that have every image of their DaemonSet, summed over the DaemonSets.
    nodes_ready: Option<i64>,
    /// Nodes the DaemonSets run on, summed.
    nodes_desired: Option<i64>,
    /// One per scheduling group of the entries.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    daemon_sets: Option<Vec<PrePullDaemonSet>>,
}

#[derive(JsonSchema)]
#[schemars(rename_all = "camelCase")]
struct PrePullDaemonSet {
    /// Name of the DaemonSet, in the config's namespace.
    name: String,
    /// Images it pulls.
    images: Option<i64>,
    /// Nodes whose pod runs the current images and is ready.
    nodes_ready: Option<i64>,
    /// Nodes it runs on (desiredNumberScheduled).
    nodes_desired: Option<i64>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::api::crd::Layout;
    use crate::api::crd::test_support::*;

    #[test]
    fn browser_spec_is_required_label_safe_and_immutable() {
        let crd = find(Layout::Default, "Browser");
        let root = root_schema(&crd);
        assert_eq!(root["required"], json!(["spec"]));
        let spec = &root["properties"]["spec"];
        assert_eq!(spec["required"], json!(["browserName", "browserVersion"]));
        assert_eq!(keys_of(spec), ["browserName", "browserVersion"]);
        for field in ["browserName", "browserVersion"] {
            let schema = &spec["properties"][field];
            assert_eq!(schema["type"], "string");
            assert_eq!(schema["minLength"], 1);
            assert_eq!(schema["maxLength"], 63);
            assert_eq!(
                schema["pattern"],
                "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
            );
        }
        assert_eq!(
            spec["x-kubernetes-validations"],
            json!([{"rule": "self == oldSelf", "message": "spec is immutable"}])
        );
    }

    #[test]
    fn browser_status_fields() {
        let crd = find(Layout::Default, "Browser");
        let status = &root_schema(&crd)["properties"]["status"];
        assert_eq!(
            keys_of(status),
            [
                "phase",
                "podIP",
                "startTime",
                "reason",
                "message",
                "containerStatuses",
                "conditions",
                "observedGeneration"
            ]
        );
        assert!(status.get("required").is_none());
        let properties = &status["properties"];
        assert_eq!(
            properties["phase"]["enum"],
            json!(["Pending", "Running", "Succeeded", "Failed", "Unknown"])
        );
        assert_eq!(properties["startTime"]["format"], "date-time");
        let container = &properties["containerStatuses"]["items"];
        assert_eq!(
            keys_of(container),
            ["name", "state", "image", "restartCount", "ports"]
        );
        assert_eq!(
            container["properties"]["state"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        let conditions = &properties["conditions"];
        assert_eq!(conditions["x-kubernetes-list-type"], "map");
        assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));
        assert_eq!(
            keys_of(&conditions["items"]),
            [
                "type",
                "status",
                "observedGeneration",
                "lastTransitionTime",
                "reason",
                "message"
            ]
        );
        assert_eq!(conditions["items"]["required"], json!(["type", "status"]));
    }

    const TEMPLATE_KEYS: [&str; 37] = [
        "labels",
        "annotations",
        "env",
        "resources",
        "imagePullPolicy",
        "volumeMounts",
        "workingDir",
        "command",
        "args",
        "ports",
        "privileged",
        "envFrom",
        "livenessProbe",
        "readinessProbe",
        "startupProbe",
        "lifecycle",
        "containerSecurityContext",
        "optionsContainers",
        "volumes",
        "nodeSelector",
        "affinity",
        "tolerations",
        "hostAliases",
        "imagePullSecrets",
        "dnsConfig",
        "securityContext",
        "priorityClassName",
        "runtimeClassName",
        "topologySpreadConstraints",
        "activeDeadlineSeconds",
        "terminationGracePeriodSeconds",
        "serviceAccountName",
        "automountServiceAccountToken",
        "enableServiceLinks",
        "initContainers",
        "sidecars",
        "prePull",
    ];

    #[test]
    fn browserconfig_template_and_entries_have_the_closed_key_set() {
        let crd = find(Layout::Default, "BrowserConfig");
        let spec = &root_schema(&crd)["properties"]["spec"];
        assert_eq!(spec["required"], json!(["browsers"]));
        let template = &spec["properties"]["template"];
        let entry = &spec["properties"]["browsers"]["additionalProperties"]["additionalProperties"];
        assert_eq!(keys_of(template), TEMPLATE_KEYS);
        let mut entry_keys = vec!["image"];
        entry_keys.extend(TEMPLATE_KEYS);
        assert_eq!(keys_of(entry), entry_keys);
        for schema in [template, entry] {
            assert!(schema.get("x-kubernetes-preserve-unknown-fields").is_none());
            assert!(schema.get("required").is_none());
        }
        assert_eq!(entry["properties"]["image"]["type"], "string");
    }

    #[test]
    fn browserconfig_nested_core_types_are_open_and_scalars_typed() {
        let crd = find(Layout::Default, "BrowserConfig");
        let template =
            &root_schema(&crd)["properties"]["spec"]["properties"]["template"]["properties"];
        for field in [
            "resources",
            "affinity",
            "dnsConfig",
            "securityContext",
            "livenessProbe",
            "readinessProbe",
            "startupProbe",
            "lifecycle",
            "containerSecurityContext",
        ] {
            assert_eq!(template[field]["type"], "object", "{field}");
            assert_eq!(
                template[field]["x-kubernetes-preserve-unknown-fields"], true,
                "{field}"
            );
            assert!(template[field].get("properties").is_none(), "{field}");
        }
        for (field, key) in [
            ("env", Some("name")),
            ("volumes", Some("name")),
            ("imagePullSecrets", Some("name")),
            ("volumeMounts", Some("mountPath")),
            ("ports", Some("containerPort")),
            ("hostAliases", Some("ip")),
            ("initContainers", Some("name")),
            ("sidecars", Some("name")),
            ("tolerations", None),
            ("topologySpreadConstraints", None),
        ] {
            let items = &template[field]["items"];
            assert_eq!(template[field]["type"], "array", "{field}");
            assert_eq!(items["type"], "object", "{field}");
            assert_eq!(
                items["x-kubernetes-preserve-unknown-fields"], true,
                "{field}"
            );
            if let Some(key) = key {
                assert!(
                    items["required"].as_array().unwrap().contains(&json!(key)),
                    "{field}"
                );
            }
        }
        for (field, ty) in [
            ("workingDir", "string"),
            ("imagePullPolicy", "string"),
            ("privileged", "boolean"),
            ("priorityClassName", "string"),
            ("runtimeClassName", "string"),
            ("activeDeadlineSeconds", "integer"),
            ("terminationGracePeriodSeconds", "integer"),
            ("serviceAccountName", "string"),
            ("automountServiceAccountToken", "boolean"),
            ("enableServiceLinks", "boolean"),
            ("prePull", "boolean"),
        ] {
            assert_eq!(template[field]["type"], ty, "{field}");
        }
        for field in ["labels", "annotations", "nodeSelector"] {
            assert_eq!(template[field]["type"], "object", "{field}");
            assert_eq!(
                template[field]["additionalProperties"],
                json!({"type": "string"}),
                "{field}"
            );
        }
        for field in ["command", "args"] {
            assert_eq!(
                template[field]["items"],
                json!({"type": "string"}),
                "{field}"
            );
        }
    }
}
