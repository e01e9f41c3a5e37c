//! CustomResourceDefinitions of `Browser` and `BrowserConfig` (docs/behaviour.md, "Resources"):
//! generation in both group layouts (docs/compatibility.md, "API-group layouts") and the files
//! under `crds/`.
//!
//! The schemas come from the private `types` module, whose types only describe them: the
//! operator reads and writes both kinds as untyped JSON. Nested core types (affinity,
//! volumes, probes …) are open objects, so the CRDs do not freeze one Kubernetes version's
//! Pod schema and stay far below the size limit of client-side apply.

use std::path::{Path, PathBuf};

use schemars::generate::SchemaSettings;
use schemars::transform::{Transform, transform_subschemas};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value, json};

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
    /// Every layout, in the order [`files`] lists them.
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
    fn dir(self) -> &'static Path {
        match self {
            Layout::Default => Path::new(""),
            Layout::SplitGroups => Path::new("split-groups"),
        }
    }
}

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
}

/// Why the CRDs could not be rendered or written.
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
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The CustomResourceDefinitions of a layout as in `crds/`: `BrowserConfig`, then `Browser`
/// (sorted by name, like their files).
pub fn crds(layout: Layout) -> Vec<Value> {
    crds_with(layout, Features::PORTABLE)
}

/// The CustomResourceDefinitions of a layout carrying the given schema features.
pub fn crds_with(layout: Layout, features: Features) -> Vec<Value> {
    let mut crds = vec![browserconfig_crd(layout), browser_crd(layout)];
    for crd in &mut crds {
        if !features.cel {
            strip_key(crd, "x-kubernetes-validations");
        }
        if features.selectable_fields
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
    crds
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

/// The CRDs of a layout as multi-document YAML, every document starting with `---`, so
/// that the output with [`Features::PORTABLE`] is the concatenation of the layout's files.
pub fn to_yaml(layout: Layout, features: Features) -> Result<String, CrdError> {
    Ok(documents(layout, features)?
        .into_iter()
        .map(|(_, text)| text)
        .collect())
}

/// Every CRD file of `crds/`: path relative to that directory, and content.
pub fn files() -> Result<Vec<(PathBuf, String)>, CrdError> {
    let mut files = Vec::new();
    for layout in Layout::ALL {
        for (name, text) in documents(layout, Features::PORTABLE)? {
            files.push((layout.dir().join(format!("{name}.yaml")), text));
        }
    }
    Ok(files)
}

/// Writes [`files`] below `dir`, creating subdirectories as needed.
pub fn write_dir(dir: &Path) -> Result<(), CrdError> {
    for (relative, text) in files()? {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| CrdError::Write {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        std::fs::write(&path, text).map_err(|source| CrdError::Write { path, source })?;
    }
    Ok(())
}

/// (CRD name, YAML document) of each CRD of a layout.
fn documents(layout: Layout, features: Features) -> Result<Vec<(String, String)>, CrdError> {
    crds_with(layout, features)
        .into_iter()
        .map(|crd| {
            let name = crd["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            match serde_saphyr::to_string(&crd) {
                Ok(text) => Ok((name, format!("---\n{text}"))),
                Err(e) => Err(CrdError::Yaml {
                    name,
                    message: e.to_string(),
                }),
            }
        })
        .collect()
}

fn browser_crd(layout: Layout) -> Value {
    let columns = json!([
        {"name": "Browser", "type": "string", "jsonPath": ".spec.browserName"},
        {"name": "Version", "type": "string", "jsonPath": ".spec.browserVersion"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "PodIP", "type": "string", "jsonPath": ".status.podIP"},
        {"name": "Reason", "type": "string", "jsonPath": ".status.reason", "priority": 1},
        {"name": "StartTime", "type": "date", "jsonPath": ".status.startTime"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]);
    crd(
        layout.browser_group(),
        keys::BROWSER_KIND,
        "browsers",
        "brw",
        columns,
        schema::<types::BrowserSpec, types::BrowserStatus>(
            "A browser session: the operator runs it as one Pod with the same name.",
        ),
    )
}

fn browserconfig_crd(layout: Layout) -> Value {
    // Valid and Ready differ while validity is unknown (the cluster could not judge the pods).
    let columns = json!([
        {"name": "Valid", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Valid\")].status",
         "description": "Whether every entry renders a pod the cluster accepts"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status",
         "description": "Whether the configuration is in use for new Browsers"},
        {"name": "Entries", "type": "integer", "jsonPath": ".status.entries",
         "description": "Browser version entries, `*` entries included"},
        {"name": "PrePulled", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"PrePulled\")].status",
         "description": "Whether the images of the entries that ask for pre-pull are on every node their browsers may run on"},
        {"name": "SpecHash", "type": "string", "jsonPath": ".status.version", "priority": 1,
         "description": "Hash of the spec the status was computed from"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]);
    crd(
        layout.browserconfig_group(),
        keys::BROWSERCONFIG_KIND,
        "browserconfigs",
        "brwcfg",
        columns,
        schema::<types::BrowserConfigSpec, types::BrowserConfigStatus>(
            "Images and pod settings of the browsers of a namespace, by name and version.",
        ),
    )
}

fn crd(
    group: &str,
    kind: &str,
    plural: &str,
    short_name: &str,
    columns: Value,
    schema: Value,
) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": kind.to_lowercase(),
                "shortNames": [short_name],
                "categories": ["selenosis"],
            },
            "scope": "Namespaced",
            "versions": [{
                "name": keys::VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": schema},
            }],
        },
    })
}

/// The `openAPIV3Schema` of a kind with the given spec and status types.
fn schema<Spec: JsonSchema, Status: JsonSchema>(description: &str) -> Value {
    let generator = || {
        SchemaSettings::draft2020_12()
            .with(|s| {
                s.inline_subschemas = true;
                s.meta_schema = None;
            })
            .with_transform(Structural)
            .into_generator()
    };
    json!({
        "description": description,
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": generator().into_root_schema_for::<Spec>().to_value(),
            "status": generator().into_root_schema_for::<Status>().to_value(),
        },
        "required": ["spec"],
    })
}

/// Rewrites schemars output into a Kubernetes structural schema: an optional field is simply
/// not required (no `null` type, no `nullable`, so the server prunes nulls), and the keys of
/// every node come in a fixed, readable order.
#[derive(Debug, Clone, Copy)]
struct Structural;

/// Order of schema keywords in the output; keys not listed keep their order after these.
const KEY_ORDER: [&str; 20] = [
    "description",
    "type",
    "format",
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "minItems",
    "minProperties",
    "items",
    "properties",
    "additionalProperties",
    "required",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
];

impl Transform for Structural {
    fn transform(&mut self, schema: &mut Schema) {
        transform_subschemas(self, schema);
        let Some(node) = schema.as_object_mut() else {
            return;
        };
        for key in ["$schema", "title", "nullable"] {
            node.remove(key);
        }
        if let Some(Value::Array(types)) = node.get_mut("type") {
            types.retain(|t| t != "null");
            if let [single] = types.as_slice() {
                let single = single.clone();
                node.insert("type".into(), single);
            }
        }
        if let Some(Value::Array(values)) = node.get_mut("enum") {
            values.retain(|v| !v.is_null());
        }
        let mut ordered = Map::new();
        for key in KEY_ORDER {
            if let Some(value) = node.remove(key) {
                ordered.insert(key.to_string(), value);
            }
        }
        ordered.append(node);
        *node = ordered;
    }
}

/// The schema types. Their fields are read only by `#[derive(JsonSchema)]`; no value of
/// them is ever built.
#[expect(
    dead_code,
    reason = "schema-only types: the derive reads the fields, nothing constructs them"
)]
mod types {
    use std::borrow::Cow;
    use std::collections::BTreeMap;

    use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

    /// A core object whose inner schema is left to the cluster (affinity, a volume source,
    /// a security context …).
    pub(super) struct Object;

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

    /// State of the browser pod, written by the operator.
    #[derive(JsonSchema)]
    #[schemars(rename_all = "camelCase")]
    pub(super) struct BrowserStatus {
        /// Pod phase, or Failed when the session failed or ended.
        phase: Option<BrowserPhase>,
        /// IP of the pod; always set when the phase is Running.
        #[schemars(rename = "podIP")]
        pod_ip: Option<String>,
        /// When the pod started.
        #[schemars(extend("format" = "date-time"))]
        start_time: Option<String>,
        /// CamelCase reason of the current state, e.g. ConfigNotFound or OOMKilled.
        reason: Option<String>,
        /// Human-readable explanation of the current state.
        message: Option<String>,
        /// State of the pod's containers.
        container_statuses: Option<Vec<ContainerStatus>>,
        /// Conditions of the Browser, one per type.
        #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
        conditions: Option<Vec<Condition>>,
        /// Generation of the Browser this status was computed from.
        observed_generation: Option<i64>,
    }

    #[derive(JsonSchema)]
    enum BrowserPhase {
        Pending,
        Running,
        Succeeded,
        Failed,
        Unknown,
    }

    #[derive(JsonSchema)]
    #[schemars(rename_all = "camelCase")]
    struct ContainerStatus {
        name: String,
        /// Container state as in the pod status (waiting, running or terminated).
        state: Option<Object>,
        image: Option<String>,
        restart_count: Option<i32>,
        /// Ports of the pod spec's container of this name.
        ports: Option<Vec<Port>>,
    }

    /// A standard status condition.
    #[derive(JsonSchema)]
    #[schemars(rename_all = "camelCase")]
    struct Condition {
        #[schemars(rename = "type")]
        kind: String,
        status: ConditionStatus,
        observed_generation: Option<i64>,
        #[schemars(extend("format" = "date-time"))]
        last_transition_time: Option<String>,
        reason: Option<String>,
        message: Option<String>,
    }

    #[derive(JsonSchema)]
    enum ConditionStatus {
        True,
        False,
        Unknown,
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
        /// Run the browser container privileged.
        privileged: Option<bool>,
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
    struct Port {
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
        conditions: Option<Vec<Condition>>,
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
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    use super::*;

    fn all_crds() -> Vec<Value> {
        Layout::ALL.into_iter().flat_map(crds).collect()
    }

    fn find(layout: Layout, kind: &str) -> Value {
        crds(layout)
            .into_iter()
            .find(|c| c["spec"]["names"]["kind"] == kind)
            .unwrap()
    }

    fn version(crd: &Value) -> &Value {
        &crd["spec"]["versions"][0]
    }

    fn root_schema(crd: &Value) -> &Value {
        &version(crd)["schema"]["openAPIV3Schema"]
    }

    fn keys_of(schema: &Value) -> Vec<&str> {
        schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect()
    }

    /// Formats the API server accepts in CRD schemas: the OpenAPI numeric formats and the
    /// string formats of apiextensions' `supportedFormats`.
    const KUBERNETES_FORMATS: [&str; 29] = [
        "int32",
        "int64",
        "float",
        "double",
        "bsonobjectid",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "isbn",
        "isbn10",
        "isbn13",
        "creditcard",
        "ssn",
        "hexcolor",
        "rgbcolor",
        "byte",
        "password",
        "date",
        "duration",
        "datetime",
        "date-time",
    ];

    const SCHEMA_KEYS: [&str; 21] = [
        "description",
        "type",
        "format",
        "enum",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "minItems",
        "minProperties",
        "items",
        "properties",
        "additionalProperties",
        "required",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
        "x-kubernetes-validations",
    ];

    /// Checks the rules of a structural schema that the API server enforces, plus ours:
    /// only plain keywords (no `$ref`, `nullable`, combinators), and every object either
    /// lists its fields or explicitly keeps unknown ones.
    fn check_structural(node: &Value, path: &str, problems: &mut Vec<String>) {
        let Some(map) = node.as_object() else {
            problems.push(format!("{path}: not an object"));
            return;
        };
        for key in map.keys() {
            if !SCHEMA_KEYS.contains(&key.as_str()) {
                problems.push(format!("{path}: keyword {key:?}"));
            }
        }
        let open = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        let int_or_string = map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
        match map.get("type").and_then(Value::as_str) {
            Some("object") => {
                let properties = map.get("properties").and_then(Value::as_object);
                let additional = map.get("additionalProperties");
                if properties.is_some() && additional.is_some() {
                    problems.push(format!("{path}: properties and additionalProperties"));
                }
                if properties.is_none() && additional.is_none() && !open && path != ".metadata" {
                    problems.push(format!("{path}: object without fields"));
                }
                for (name, child) in properties.into_iter().flatten() {
                    check_structural(child, &format!("{path}.{name}"), problems);
                }
                if let Some(additional) = additional {
                    check_structural(additional, &format!("{path}.*"), problems);
                }
                for required in map
                    .get("required")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let name = required.as_str().unwrap_or_default();
                    if !properties.is_some_and(|p| p.contains_key(name)) {
                        problems.push(format!("{path}: required {name:?} is not a property"));
                    }
                }
            }
            Some("array") => match map.get("items") {
                Some(items) => {
                    check_structural(items, &format!("{path}[]"), problems);
                    for key in map
                        .get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        let required = items["required"].as_array();
                        if !required.is_some_and(|r| r.contains(key)) {
                            problems.push(format!("{path}: list map key {key} is not required"));
                        }
                    }
                }
                None => problems.push(format!("{path}: array without items")),
            },
            Some("string" | "integer" | "number" | "boolean") => {}
            Some(other) => problems.push(format!("{path}: type {other:?}")),
            None if open || int_or_string => {}
            None => problems.push(format!("{path}: no type")),
        }
        if let Some(format) = map.get("format")
            && !format
                .as_str()
                .is_some_and(|f| KUBERNETES_FORMATS.contains(&f))
        {
            problems.push(format!("{path}: format {format}"));
        }
    }

    #[test]
    fn schemas_are_structural() {
        for crd in all_crds() {
            let mut problems = Vec::new();
            check_structural(root_schema(&crd), "", &mut problems);
            assert!(
                problems.is_empty(),
                "{}: {problems:#?}",
                crd["metadata"]["name"]
            );
        }
    }

    #[test]
    fn the_structural_check_catches_schemars_leftovers() {
        let bad = json!({
            "type": "object",
            "properties": {
                "a": {"type": ["string", "null"], "nullable": true},
                "b": {"$ref": "#/$defs/B"},
                "c": {"type": "integer", "format": "uint32"},
                "d": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
                "e": {"type": "object"},
            },
        });
        let mut problems = Vec::new();
        check_structural(&bad, "", &mut problems);
        for expected in [
            ".a: keyword \"nullable\"",
            ".b: keyword \"$ref\"",
            ".b: no type",
            ".c: format",
            ".d: properties and",
            ".e: object without",
        ] {
            assert!(
                problems.iter().any(|p| p.starts_with(expected)),
                "{expected}: {problems:#?}"
            );
        }
    }

    /// Numbers as floats: the typed CRD keeps `minimum`/`maximum` as `f64`.
    fn floats(value: &Value) -> Value {
        match value {
            Value::Number(n) => json!(n.as_f64()),
            Value::Array(items) => Value::Array(items.iter().map(floats).collect()),
            Value::Object(map) => {
                Value::Object(map.iter().map(|(k, v)| (k.clone(), floats(v))).collect())
            }
            other => other.clone(),
        }
    }

    #[test]
    fn crds_are_valid_kubernetes_objects_without_unknown_keys() {
        for crd in all_crds() {
            let typed: CustomResourceDefinition = serde_json::from_value(crd.clone()).unwrap();
            assert_eq!(floats(&serde_json::to_value(&typed).unwrap()), floats(&crd));
            let spec = &typed.spec;
            assert_eq!(spec.scope, "Namespaced");
            assert_eq!(
                spec.names.categories.as_deref(),
                Some(&["selenosis".to_string()][..])
            );
            assert_eq!(spec.versions.len(), 1);
            let version = &spec.versions[0];
            assert_eq!(
                (version.name.as_str(), version.served, version.storage),
                ("v1", true, true)
            );
            assert!(version.subresources.as_ref().unwrap().status.is_some());
        }
    }

    #[test]
    fn crds_are_far_below_the_client_side_apply_limit() {
        for crd in all_crds() {
            let size = serde_json::to_vec(&crd).unwrap().len();
            assert!(
                size < 64 * 1024,
                "{}: {size} bytes",
                crd["metadata"]["name"]
            );
        }
    }

    #[test]
    fn browser_printer_columns_in_order() {
        let crd = find(Layout::Default, "Browser");
        let columns: Vec<(&str, &str, &str, i64)> = version(&crd)["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap(),
                    c["type"].as_str().unwrap(),
                    c["jsonPath"].as_str().unwrap(),
                    c["priority"].as_i64().unwrap_or(0),
                )
            })
            .collect();
        assert_eq!(
            columns,
            [
                ("Browser", "string", ".spec.browserName", 0),
                ("Version", "string", ".spec.browserVersion", 0),
                ("Phase", "string", ".status.phase", 0),
                ("PodIP", "string", ".status.podIP", 0),
                ("Reason", "string", ".status.reason", 1),
                ("StartTime", "date", ".status.startTime", 0),
                ("Age", "date", ".metadata.creationTimestamp", 0),
            ]
        );
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(["brw"]));
        assert_eq!(crd["metadata"]["name"], "browsers.selenosis.io");
    }

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

    const TEMPLATE_KEYS: [&str; 30] = [
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
        for field in ["resources", "affinity", "dnsConfig", "securityContext"] {
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

    #[test]
    fn browserconfig_status_and_columns() {
        let crd = find(Layout::Default, "BrowserConfig");
        let status = &root_schema(&crd)["properties"]["status"];
        assert_eq!(
            keys_of(status),
            [
                "version",
                "entries",
                "lastUpdated",
                "observedGeneration",
                "conditions",
                "prePull"
            ]
        );
        assert_eq!(status["properties"]["entries"]["type"], "integer");
        let pre_pull = &status["properties"]["prePull"];
        assert_eq!(
            keys_of(pre_pull),
            ["images", "nodesReady", "nodesDesired", "daemonSets"]
        );
        let daemon_sets = &pre_pull["properties"]["daemonSets"];
        assert_eq!(daemon_sets["x-kubernetes-list-map-keys"], json!(["name"]));
        assert_eq!(
            keys_of(&daemon_sets["items"]),
            ["name", "images", "nodesReady", "nodesDesired"]
        );
        assert_eq!(status["properties"]["lastUpdated"]["format"], "date-time");
        assert_eq!(
            status["properties"]["conditions"]["x-kubernetes-list-type"],
            "map"
        );
        let columns: Vec<(&str, &str, &str, i64)> = version(&crd)["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap(),
                    c["type"].as_str().unwrap(),
                    c["jsonPath"].as_str().unwrap(),
                    c["priority"].as_i64().unwrap_or(0),
                )
            })
            .collect();
        assert_eq!(
            columns,
            [
                (
                    "Valid",
                    "string",
                    ".status.conditions[?(@.type==\"Valid\")].status",
                    0
                ),
                (
                    "Ready",
                    "string",
                    ".status.conditions[?(@.type==\"Ready\")].status",
                    0
                ),
                ("Entries", "integer", ".status.entries", 0),
                (
                    "PrePulled",
                    "string",
                    ".status.conditions[?(@.type==\"PrePulled\")].status",
                    0
                ),
                ("SpecHash", "string", ".status.version", 1),
                ("Age", "date", ".metadata.creationTimestamp", 0),
            ]
        );
        assert_eq!(crd["metadata"]["name"], "browserconfigs.selenosis.io");
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(["brwcfg"]));
    }

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

    #[test]
    fn yaml_reads_back_as_the_crds() {
        for layout in Layout::ALL {
            let text = to_yaml(layout, Features::PORTABLE).unwrap();
            assert!(text.starts_with("---\napiVersion: apiextensions.k8s.io/v1\n"));
            let read = crate::manifest::parse(&text, Path::new("crds.yaml")).unwrap();
            assert_eq!(read, crds(layout));
        }
    }

    #[test]
    fn files_cover_both_layouts_once() {
        let files = files().unwrap();
        let paths: BTreeSet<String> = files
            .iter()
            .map(|(p, _)| p.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            paths,
            BTreeSet::from([
                "browserconfigs.selenosis.io.yaml".to_string(),
                "browsers.selenosis.io.yaml".to_string(),
                "split-groups/browserconfigs.browserconfig.selenosis.io.yaml".to_string(),
                "split-groups/browsers.browser.selenosis.io.yaml".to_string(),
            ])
        );
        let default: String = files[..2].iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(
            default,
            to_yaml(Layout::Default, Features::PORTABLE).unwrap()
        );
    }

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
