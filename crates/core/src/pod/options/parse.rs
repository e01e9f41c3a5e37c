//! Parsing the annotation text and validating it against the limits the hub enforces.

use std::collections::BTreeMap;
use std::fmt;

use kube_core::DynamicObject;
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};

use super::{
    ContainerOptions, MAX_CONTAINERS, MAX_ENV, MAX_LABELS, MAX_VALUE_CHARS, OptionsError,
    SessionOptions,
};
use crate::api::keys::ANNOTATION_OPTIONS;
use crate::names;
use crate::pod::policy::Fence;

/// Variables that change how the dynamic loader and the C library load code and data: glibc
/// ignores them for privileged programs, and a session client must not set them at all.
const LOADER_VARIABLES: [&str; 13] = [
    "GCONV_PATH",
    "GETCONF_DIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_TRACE",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TMPDIR",
    "TZDIR",
];

/// Every `LD_*` variable belongs to the dynamic loader (`LD_PRELOAD`, `LD_LIBRARY_PATH`,
/// `LD_AUDIT` …).
const LOADER_PREFIX: &str = "LD_";

/// Whether `name` is a variable of the dynamic loader or the C library's loading.
pub fn is_loader_variable(name: &str) -> bool {
    name.starts_with(LOADER_PREFIX) || LOADER_VARIABLES.contains(&name)
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

/// Parses and validates the annotation text; labels under the prefixes `fence` reserves are
/// refused.
pub fn parse(annotation: &str, fence: &Fence) -> Result<SessionOptions, OptionsError> {
    let raw: RawOptions = serde_json::from_str(annotation).map_err(OptionsError::Json)?;
    let labels = raw.labels.unwrap_or_default();
    validate_labels(&labels, fence)?;
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
pub fn from_browser(
    browser: &DynamicObject,
    fence: &Fence,
) -> Result<SessionOptions, OptionsError> {
    match browser
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_OPTIONS))
    {
        Some(annotation) => parse(annotation, fence),
        None => Ok(SessionOptions::default()),
    }
}

fn validate_labels(labels: &BTreeMap<String, String>, fence: &Fence) -> Result<(), OptionsError> {
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
        if let Some(prefix) = fence.reserved_label(key) {
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
        if is_loader_variable(name) {
            return Err(OptionsError::LoaderVariable {
                container: container.to_string(),
                name: name.clone(),
            });
        }
        if value.chars().any(char::is_control) {
            return Err(OptionsError::ControlCharacter {
                container: container.to_string(),
                name: name.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::{Map, Value, json};

    use super::*;
    use crate::fixtures;

    const PREFIX: &str = "unmarshal selenosis.io/options: ";

    fn parse(annotation: &str) -> Result<SessionOptions, OptionsError> {
        super::parse(annotation, &Fence::default())
    }

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
    fn reserved_and_foreign_label_prefixes_are_rejected() {
        for (key, prefix) in [
            ("selenosis.io/x", "selenosis.io/"),
            ("selenosis.io/owner", "selenosis.io/"),
            ("app.kubernetes.io/managed-by", "*.kubernetes.io/"),
            ("kubernetes.io/metadata.name", "kubernetes.io/"),
            ("node-role.kubernetes.io/x", "*.kubernetes.io/"),
            ("k8s.io/x", "k8s.io/"),
            ("browser.selenosis.io/x", "*.selenosis.io/"),
            ("sidecar.istio.io/inject", "*.istio.io/"),
        ] {
            let annotation = json!({"labels": {key: "y"}}).to_string();
            assert_eq!(
                err(&annotation),
                format!("{PREFIX}label {key:?} uses reserved prefix {prefix}")
            );
        }
        assert!(parse(r#"{"labels":{"notselenosis.io/x":"y","selenosis.io":"y"}}"#).is_ok());
        let fence = Fence::new(&["netpol.example.com".to_string()], &[], &[]);
        assert_eq!(
            super::parse(r#"{"labels":{"netpol.example.com/zone":"a"}}"#, &fence)
                .unwrap_err()
                .to_string(),
            format!(
                "{PREFIX}label \"netpol.example.com/zone\" uses reserved prefix netpol.example.com/"
            )
        );
        assert!(parse(r#"{"labels":{"netpol.example.com/zone":"a"}}"#).is_ok());
    }

    #[test]
    fn loader_variables_and_control_characters_are_refused() {
        for name in [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "LD_AUDIT",
            "GCONV_PATH",
            "GLIBC_TUNABLES",
        ] {
            let annotation =
                json!({"containers": {"browser": {"env": {name: "/tmp/x.so"}}}}).to_string();
            assert_eq!(
                err(&annotation),
                format!(
                    "{PREFIX}container \"browser\": env {name:?} changes how programs are loaded and cannot be set by options"
                )
            );
        }
        for value in [
            r"a\u0000b",
            r"line\nbreak",
            r"tab\there",
            r"bell\u0007",
            r"del\u007f",
        ] {
            let annotation =
                format!(r#"{{"containers":{{"browser":{{"env":{{"X":"{value}"}}}}}}}}"#);
            assert_eq!(
                err(&annotation),
                format!(
                    "{PREFIX}container \"browser\": env \"X\": the value contains a control character"
                ),
                "{value}"
            );
        }
        assert!(parse(r#"{"containers":{"browser":{"env":{"TZ":"Europe/Berlin","LANG":"de_DE.UTF-8","LDAP":"x"}}}}"#).is_ok());
    }

    fn browser(annotations: Value) -> DynamicObject {
        fixtures::browser("b").annotations(annotations).object()
    }

    #[test]
    fn from_browser_reads_the_annotation() {
        assert_eq!(
            from_browser(&browser(json!({"other": "x"})), &Fence::default()).unwrap(),
            SessionOptions::default()
        );
        let options = from_browser(
            &browser(json!({"selenosis.io/options": r#"{"labels":{"a":"b"}}"#})),
            &Fence::default(),
        )
        .unwrap();
        assert_eq!(options.labels, env_of(&[("a", "b")]));
        let error = from_browser(
            &browser(json!({"selenosis.io/options": "nope"})),
            &Fence::default(),
        )
        .unwrap_err();
        assert!(error.to_string().starts_with(PREFIX));
    }

    #[test]
    fn testdata_browser_options() {
        let read = |text: &str| -> DynamicObject {
            let docs = crate::manifest::parse(text, Path::new("browser.yaml")).unwrap();
            serde_json::from_value(docs[0].clone()).unwrap()
        };
        let chrome = read(include_str!("../../../../../testdata/browsers/chrome.yaml"));
        let options = from_browser(&chrome, &Fence::default()).unwrap();
        assert_eq!(options.containers["browser"].env["TZ"], "Europe/Berlin");
        let invalid = read(include_str!(
            "../../../../../testdata/browsers/invalid-options.yaml"
        ));
        let text = from_browser(&invalid, &Fence::default())
            .unwrap_err()
            .to_string();
        assert!(text.starts_with(&format!("{PREFIX}invalid type")), "{text}");
    }
}
