//! The per-session options annotation `selenosis.io/options` (docs/configuration.md,
//! "Per-session options"): parsing, validation against the limits the hub enforces, and
//! application to a rendered pod.

use std::collections::BTreeMap;
use std::fmt;

use kube::api::DynamicObject;
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

use crate::api::keys::ANNOTATION_OPTIONS;
use crate::pod::names;

/// Most labels one session may add.
pub const MAX_LABELS: usize = 64;
/// Most containers one session may configure.
pub const MAX_CONTAINERS: usize = 16;
/// Most env variables one session may set per container.
pub const MAX_ENV: usize = 64;
/// Longest env name or value, in characters.
pub const MAX_VALUE_CHARS: usize = 512;

/// Label key prefixes reserved for the operator and the Kubernetes recommended labels.
const RESERVED_PREFIXES: [&str; 2] = ["selenosis.io", "app.kubernetes.io"];
/// Subdomains of the operator's domain are reserved too (`browser.selenosis.io/…`).
const RESERVED_SUBDOMAIN_SUFFIX: &str = ".selenosis.io";

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
    #[error("unmarshal selenosis.io/options: cannot apply to the pod: {path} is not {expected}")]
    MalformedPod {
        path: String,
        expected: &'static str,
    },
}

/// The annotation as sent. Only JSON objects are accepted (derived struct deserializers
/// would also take arrays); `null` maps count as absent, as Go clients send them; unknown
/// keys are skipped.
#[derive(Default)]
struct RawOptions {
    labels: Option<BTreeMap<String, String>>,
    containers: Option<BTreeMap<String, RawContainer>>,
}

#[derive(Default)]
struct RawContainer {
    env: Option<BTreeMap<String, String>>,
}

impl<'de> Deserialize<'de> for RawOptions {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor;
        impl<'de> Visitor<'de> for ObjectVisitor {
            type Value = RawOptions;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(r#"an object like {"labels": {...}, "containers": {...}}"#)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawOptions, A::Error> {
                let mut raw = RawOptions::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "labels" => raw.labels = map.next_value()?,
                        "containers" => raw.containers = map.next_value()?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(raw)
            }
        }
        deserializer.deserialize_map(ObjectVisitor)
    }
}

impl<'de> Deserialize<'de> for RawContainer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor;
        impl<'de> Visitor<'de> for ObjectVisitor {
            type Value = RawContainer;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(r#"a container object like {"env": {...}}"#)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawContainer, A::Error> {
                let mut raw = RawContainer::default();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "env" {
                        raw.env = map.next_value()?;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(raw)
            }
        }
        deserializer.deserialize_map(ObjectVisitor)
    }
}

/// Parses and validates the annotation text.
pub fn parse(annotation: &str) -> Result<SessionOptions, OptionsError> {
    let raw: RawOptions = serde_json::from_str(annotation).map_err(OptionsError::Json)?;
    let labels = raw.labels.unwrap_or_default();
    validate_labels(&labels)?;
    let raw_containers = raw.containers.unwrap_or_default();
    if raw_containers.len() > MAX_CONTAINERS {
        return Err(OptionsError::TooManyContainers {
            count: raw_containers.len(),
        });
    }
    let mut containers = BTreeMap::new();
    for (name, raw) in raw_containers {
        if !names::is_dns1123_label(&name) {
            return Err(OptionsError::InvalidContainerName { name });
        }
        let env = raw.env.unwrap_or_default();
        validate_env(&name, &env)?;
        containers.insert(name, ContainerOptions { env });
    }
    Ok(SessionOptions { labels, containers })
}

/// Reads the options of a Browser; no annotation means no options.
pub fn from_browser(browser: &DynamicObject) -> Result<SessionOptions, OptionsError> {
    match browser
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_OPTIONS))
    {
        Some(annotation) => parse(annotation),
        None => Ok(SessionOptions::default()),
    }
}

fn validate_labels(labels: &BTreeMap<String, String>) -> Result<(), OptionsError> {
    if labels.len() > MAX_LABELS {
        return Err(OptionsError::TooManyLabels {
            count: labels.len(),
        });
    }
    for (key, value) in labels {
        names::check_label_key(key).map_err(|reason| OptionsError::InvalidLabelKey {
            key: key.clone(),
            reason,
        })?;
        if let Some(prefix) = reserved_prefix(key) {
            return Err(OptionsError::ReservedLabel {
                key: key.clone(),
                prefix,
            });
        }
        names::check_label_value(value).map_err(|reason| OptionsError::InvalidLabelValue {
            key: key.clone(),
            value: value.clone(),
            reason,
        })?;
    }
    Ok(())
}

fn reserved_prefix(key: &str) -> Option<String> {
    let (prefix, _) = key.split_once('/')?;
    if RESERVED_PREFIXES.contains(&prefix) {
        return Some(format!("{prefix}/"));
    }
    prefix
        .ends_with(RESERVED_SUBDOMAIN_SUFFIX)
        .then(|| format!("*{RESERVED_SUBDOMAIN_SUFFIX}/"))
}

fn validate_env(container: &str, env: &BTreeMap<String, String>) -> Result<(), OptionsError> {
    if env.len() > MAX_ENV {
        return Err(OptionsError::TooManyEnv {
            container: container.to_string(),
            count: env.len(),
        });
    }
    for (name, value) in env {
        let too_long = |what, length| OptionsError::TooLong {
            container: container.to_string(),
            name: name.clone(),
            what,
            length,
        };
        let name_chars = name.chars().count();
        if name_chars > MAX_VALUE_CHARS {
            return Err(too_long("name", name_chars));
        }
        names::check_env_name(name).map_err(|reason| OptionsError::InvalidEnvName {
            container: container.to_string(),
            name: name.clone(),
            reason,
        })?;
        let value_chars = value.chars().count();
        if value_chars > MAX_VALUE_CHARS {
            return Err(too_long("value", value_chars));
        }
    }
    Ok(())
}

/// Applies options to a rendered pod: labels are merged into `metadata.labels`; each
/// option container must be among `spec.containers` or `spec.initContainers`, where an
/// existing env variable of the same name is replaced in place (its `valueFrom` dropped)
/// and new variables are appended in name order. An unknown container is reported before
/// anything is changed.
pub fn apply(pod: &mut Value, options: &SessionOptions) -> Result<(), OptionsError> {
    let present = container_names(pod);
    if let Some(missing) = options
        .containers
        .keys()
        .find(|name| !present.contains(name))
    {
        return Err(OptionsError::UnknownContainer {
            container: missing.clone(),
            available: present.join(", "),
        });
    }
    if !options.labels.is_empty() {
        let labels = labels_mut(pod)?;
        for (key, value) in &options.labels {
            labels.insert(key.clone(), Value::String(value.clone()));
        }
    }
    for (name, container_options) in &options.containers {
        for container in containers_named_mut(pod, name) {
            apply_env(name, container, &container_options.env)?;
        }
    }
    Ok(())
}

/// `metadata.labels` of a pod as an object, created when absent.
pub(crate) fn labels_mut(pod: &mut Value) -> Result<&mut Map<String, Value>, OptionsError> {
    let pod = pod
        .as_object_mut()
        .ok_or_else(|| OptionsError::MalformedPod {
            path: "the pod".into(),
            expected: "an object",
        })?;
    let metadata = object_entry(pod, "metadata", "metadata")?;
    object_entry(metadata, "labels", "metadata.labels")
}

/// The object under `key`, created when absent or null.
fn object_entry<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a mut Map<String, Value>, OptionsError> {
    let child = parent
        .entry(key)
        .or_insert_with(|| Value::Object(Map::new()));
    if child.is_null() {
        *child = Value::Object(Map::new());
    }
    child
        .as_object_mut()
        .ok_or_else(|| OptionsError::MalformedPod {
            path: path.into(),
            expected: "an object",
        })
}

const CONTAINER_LISTS: [&str; 2] = ["containers", "initContainers"];

/// Names of the pod's containers, then its init containers, in pod order.
fn container_names(pod: &Value) -> Vec<String> {
    CONTAINER_LISTS
        .iter()
        .filter_map(|list| pod.get("spec")?.get(list)?.as_array())
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}
fn containers_named_mut<'a>(
    pod: &'a mut Value,
    name: &'a str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> + 'a {
    let spec = pod.get_mut("spec").and_then(Value::as_object_mut);
    spec.into_iter()
        .flat_map(|spec| spec.iter_mut())
        .filter(|(key, _)| CONTAINER_LISTS.contains(&key.as_str()))
        .filter_map(|(_, list)| list.as_array_mut())
        .flatten()
        .filter_map(Value::as_object_mut)
        .filter(move |c| c.get("name").and_then(Value::as_str) == Some(name))
}

fn apply_env(
    container_name: &str,
    container: &mut Map<String, Value>,
    env: &BTreeMap<String, String>,
) -> Result<(), OptionsError> {
    if env.is_empty() {
        return Ok(());
    }
    let list = container
        .entry("env")
        .or_insert_with(|| Value::Array(Vec::new()));
    if list.is_null() {
        *list = Value::Array(Vec::new());
    }
    let list = list
        .as_array_mut()
        .ok_or_else(|| OptionsError::MalformedPod {
            path: format!("env of container {container_name:?}"),
            expected: "a list",
        })?;
    for (name, value) in env {
        let mut replaced = false;
        // Every entry of that name is replaced: Kubernetes lets the last duplicate win,
        // so replacing only one could leave the configured value in effect.
        for var in list.iter_mut().filter_map(Value::as_object_mut) {
            if var.get("name").and_then(Value::as_str) == Some(name.as_str()) {
                var.shift_remove("valueFrom");
                var.insert("value".into(), Value::String(value.clone()));
                replaced = true;
            }
        }
        if !replaced {
            let mut var = Map::new();
            var.insert("name".into(), Value::String(name.clone()));
            var.insert("value".into(), Value::String(value.clone()));
            list.push(Value::Object(var));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;

    const PREFIX: &str = "unmarshal selenosis.io/options: ";

    fn err(annotation: &str) -> String {
        parse(annotation).unwrap_err().to_string()
    }

    fn env_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn options_json(labels: usize, containers: usize, env: usize) -> String {
        let labels: Map<String, Value> =
            (0..labels).map(|i| (format!("l{i}"), json!("v"))).collect();
        let env: Map<String, Value> = (0..env).map(|i| (format!("E{i}"), json!("v"))).collect();
        let containers: Map<String, Value> = (0..containers)
            .map(|i| (format!("c{i}"), json!({ "env": env })))
            .collect();
        json!({ "labels": labels, "containers": containers }).to_string()
    }

    #[test]
    fn parses_labels_and_container_env() {
        let options = parse(
            r#"{"labels":{"team":"checkout"},"containers":{"browser":{"env":{"TZ":"UTC","LANG":"C"}}}}"#,
        )
        .unwrap();
        assert_eq!(options.labels, env_of(&[("team", "checkout")]));
        assert_eq!(
            options.containers["browser"].env,
            env_of(&[("LANG", "C"), ("TZ", "UTC")])
        );
    }

    #[test]
    fn unknown_keys_and_null_maps_are_ignored() {
        let options = parse(
            r#"{"labels":null,"capabilities":{"x":1},"containers":{"browser":{"env":null,"resources":{}}}}"#,
        )
        .unwrap();
        assert!(options.labels.is_empty());
        assert!(options.containers["browser"].env.is_empty());
        assert_eq!(parse("{}").unwrap(), SessionOptions::default());
    }

    #[test]
    fn invalid_json_carries_the_parser_message() {
        let text = err(r#"{"labels": {"#);
        assert!(text.starts_with(PREFIX), "{text}");
        assert!(text.contains("EOF while parsing"), "{text}");
        assert!(err("").starts_with(PREFIX));
    }

    #[test]
    fn wrong_types_are_rejected() {
        let text = err(r#"{"containers":{"browser":{"env":{"SCREEN_WIDTH":1920}}}}"#);
        assert!(
            text.starts_with(&format!(
                "{PREFIX}invalid type: integer `1920`, expected a string"
            )),
            "{text}"
        );
        assert!(err(r#"{"labels":["a"]}"#).contains("invalid type: sequence, expected a map"));
        assert!(err(r#"[{"a":"b"}]"#).contains("invalid type: sequence, expected an object"));
        assert!(err("null").contains("invalid type: null, expected an object"));
        assert!(
            err(r#"{"containers":{"browser":[{"TZ":"UTC"}]}}"#)
                .contains("invalid type: sequence, expected a container object")
        );
        assert!(err(r#"{"containers":{"browser":"x"}}"#).contains("invalid type: string"));
    }

    #[test]
    fn label_count_is_limited() {
        assert_eq!(parse(&options_json(64, 0, 0)).unwrap().labels.len(), 64);
        assert_eq!(
            err(&options_json(65, 0, 0)),
            format!("{PREFIX}65 labels, at most 64 allowed")
        );
    }

    #[test]
    fn container_count_is_limited() {
        assert_eq!(parse(&options_json(0, 16, 0)).unwrap().containers.len(), 16);
        assert_eq!(
            err(&options_json(0, 17, 0)),
            format!("{PREFIX}17 containers, at most 16 allowed")
        );
    }

    #[test]
    fn env_count_is_limited() {
        let options = parse(&options_json(0, 1, 64)).unwrap();
        assert_eq!(options.containers["c0"].env.len(), 64);
        assert_eq!(
            err(&options_json(0, 1, 65)),
            format!("{PREFIX}container \"c0\": 65 env variables, at most 64 allowed")
        );
    }

    #[test]
    fn env_values_and_names_are_limited_in_characters() {
        let annotation = |name: &str, value: &str| {
            json!({"containers": {"browser": {"env": {name: value}}}}).to_string()
        };
        assert!(parse(&annotation("V", &"é".repeat(512))).is_ok());
        assert_eq!(
            err(&annotation("V", &"x".repeat(513))),
            format!(
                "{PREFIX}container \"browser\": env \"V\": 513-character value, at most 512 allowed"
            )
        );
        let long_name = "N".repeat(513);
        assert_eq!(
            err(&annotation(&long_name, "v")),
            format!(
                "{PREFIX}container \"browser\": env {long_name:?}: 513-character name, at most 512 allowed"
            )
        );
    }

    #[test]
    fn invalid_names_are_rejected_with_the_reason() {
        let text = err(r#"{"labels":{"my team":"x"}}"#);
        assert!(
            text.starts_with(&format!(
                "{PREFIX}invalid label key \"my team\": the name part"
            )),
            "{text}"
        );
        let text = err(r#"{"labels":{"team":"check out"}}"#);
        assert!(
            text.starts_with(&format!(
                "{PREFIX}invalid value \"check out\" for label \"team\": "
            )),
            "{text}"
        );
        let text = err(r#"{"containers":{"browser":{"env":{"1TZ":"UTC"}}}}"#);
        assert!(
            text.starts_with(&format!(
                "{PREFIX}container \"browser\": invalid env name \"1TZ\": "
            )),
            "{text}"
        );
        let text = err(r#"{"containers":{"Browser":{}}}"#);
        assert!(
            text.starts_with(&format!("{PREFIX}invalid container name \"Browser\": ")),
            "{text}"
        );
    }

    #[test]
    fn reserved_label_prefixes_are_rejected() {
        assert_eq!(
            err(r#"{"labels":{"selenosis.io/x":"y"}}"#),
            format!("{PREFIX}label \"selenosis.io/x\" uses reserved prefix selenosis.io/")
        );
        assert_eq!(
            err(r#"{"labels":{"app.kubernetes.io/managed-by":"me"}}"#),
            format!(
                "{PREFIX}label \"app.kubernetes.io/managed-by\" uses reserved prefix app.kubernetes.io/"
            )
        );
        assert_eq!(
            err(r#"{"labels":{"browser.selenosis.io/x":"y"}}"#),
            format!(
                "{PREFIX}label \"browser.selenosis.io/x\" uses reserved prefix *.selenosis.io/"
            )
        );
        assert!(parse(r#"{"labels":{"notselenosis.io/x":"y","selenosis.io":"y"}}"#).is_ok());
    }

    fn browser(annotations: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "selenosis.io/v1",
            "kind": "Browser",
            "metadata": {"name": "b", "annotations": annotations},
            "spec": {"browserName": "chrome", "browserVersion": "139.0"}
        }))
        .unwrap()
    }

    #[test]
    fn from_browser_reads_the_annotation() {
        assert_eq!(
            from_browser(&browser(json!({"other": "x"}))).unwrap(),
            SessionOptions::default()
        );
        let options = from_browser(&browser(
            json!({"selenosis.io/options": r#"{"labels":{"a":"b"}}"#}),
        ))
        .unwrap();
        assert_eq!(options.labels, env_of(&[("a", "b")]));
        let error = from_browser(&browser(json!({"selenosis.io/options": "nope"}))).unwrap_err();
        assert!(error.to_string().starts_with(PREFIX));
    }

    #[test]
    fn testdata_browser_options() {
        let read = |text: &str| -> DynamicObject {
            let docs = crate::manifest::parse(text, Path::new("browser.yaml")).unwrap();
            serde_json::from_value(docs[0].clone()).unwrap()
        };
        let chrome = read(include_str!("../../../testdata/browsers/chrome.yaml"));
        let options = from_browser(&chrome).unwrap();
        assert_eq!(options.containers["browser"].env["TZ"], "Europe/Berlin");
        let invalid = read(include_str!("../../../testdata/browsers/invalid-options.yaml"));
        let text = from_browser(&invalid).unwrap_err().to_string();
        assert!(text.starts_with(&format!("{PREFIX}invalid type")), "{text}");
    }

    fn pod() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "b", "labels": {"app": "browser", "team": "config"}},
            "spec": {
                "initContainers": [{"name": "setup", "image": "busybox"}],
                "containers": [
                    {"name": "browser", "image": "chrome", "env": [
                        {"name": "TZ", "value": "UTC"},
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "LANG", "value": "C"}
                    ]},
                    {"name": "seleniferous", "image": "proxy"}
                ]
            }
        })
    }

    fn with_env(container: &str, env: &[(&str, &str)]) -> SessionOptions {
        let mut options = SessionOptions::default();
        options
            .containers
            .insert(container.to_string(), ContainerOptions { env: env_of(env) });
        options
    }

    #[test]
    fn apply_merges_labels() {
        let mut pod = pod();
        let options = SessionOptions {
            labels: env_of(&[("team", "checkout"), ("build", "42")]),
            ..Default::default()
        };
        apply(&mut pod, &options).unwrap();
        assert_eq!(
            serde_json::to_string(&pod["metadata"]["labels"]).unwrap(),
            r#"{"app":"browser","team":"checkout","build":"42"}"#
        );
    }

    #[test]
    fn apply_creates_labels_only_when_needed() {
        let mut pod = json!({"metadata": {"name": "b"}, "spec": {"containers": []}});
        apply(&mut pod, &SessionOptions::default()).unwrap();
        assert_eq!(pod["metadata"], json!({"name": "b"}));
        let options = SessionOptions {
            labels: env_of(&[("team", "x")]),
            ..Default::default()
        };
        apply(&mut pod, &options).unwrap();
        assert_eq!(pod["metadata"]["labels"], json!({"team": "x"}));
    }

    #[test]
    fn apply_replaces_env_in_place_and_appends_new_sorted() {
        let mut pod = pod();
        let options = with_env(
            "browser",
            &[
                ("ZONE", "z"),
                ("POD_IP", "1.2.3.4"),
                ("TZ", "Europe/Berlin"),
                ("A", "a"),
            ],
        );
        apply(&mut pod, &options).unwrap();
        assert_eq!(
            pod["spec"]["containers"][0]["env"],
            json!([
                {"name": "TZ", "value": "Europe/Berlin"},
                {"name": "POD_IP", "value": "1.2.3.4"},
                {"name": "LANG", "value": "C"},
                {"name": "A", "value": "a"},
                {"name": "ZONE", "value": "z"}
            ])
        );
        assert_eq!(pod["spec"]["containers"][1].get("env"), None);
    }

    #[test]
    fn apply_replaces_every_duplicate() {
        let mut pod = json!({"spec": {"containers": [{"name": "browser", "env": [
            {"name": "TZ", "value": "UTC"},
            {"name": "TZ", "value": "GMT"}
        ]}]}});
        apply(&mut pod, &with_env("browser", &[("TZ", "CET")])).unwrap();
        assert_eq!(
            pod["spec"]["containers"][0]["env"],
            json!([{"name": "TZ", "value": "CET"}, {"name": "TZ", "value": "CET"}])
        );
    }

    #[test]
    fn apply_reaches_sidecars_and_init_containers() {
        let mut pod = pod();
        apply(
            &mut pod,
            &with_env("seleniferous", &[("SESSION_IDLE_TIMEOUT", "2m")]),
        )
        .unwrap();
        apply(&mut pod, &with_env("setup", &[("MODE", "fast")])).unwrap();
        assert_eq!(
            pod["spec"]["containers"][1]["env"],
            json!([{"name": "SESSION_IDLE_TIMEOUT", "value": "2m"}])
        );
        assert_eq!(
            pod["spec"]["initContainers"][0]["env"],
            json!([{"name": "MODE", "value": "fast"}])
        );
    }

    #[test]
    fn apply_rejects_unknown_containers_before_changing_anything() {
        let mut pod = pod();
        let mut options = with_env("vnc", &[("X", "1")]);
        options.labels = env_of(&[("team", "x")]);
        let original = pod.clone();
        let text = apply(&mut pod, &options).unwrap_err().to_string();
        assert_eq!(
            text,
            format!(
                "{PREFIX}container \"vnc\" is not in the pod (pod containers: browser, seleniferous, setup)"
            )
        );
        assert_eq!(pod, original);
    }

    #[test]
    fn apply_reports_malformed_labels() {
        let mut pod = json!({"metadata": {"labels": "app=browser"}, "spec": {"containers": []}});
        let options = SessionOptions {
            labels: env_of(&[("team", "x")]),
            ..Default::default()
        };
        assert_eq!(
            apply(&mut pod, &options).unwrap_err().to_string(),
            format!("{PREFIX}cannot apply to the pod: metadata.labels is not an object")
        );
    }

    #[test]
    fn apply_reports_a_malformed_env_list() {
        let mut pod = json!({"spec": {"containers": [{"name": "browser", "env": {"TZ": "UTC"}}]}});
        let text = apply(&mut pod, &with_env("browser", &[("TZ", "CET")]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            text,
            format!("{PREFIX}cannot apply to the pod: env of container \"browser\" is not a list")
        );
    }
}
