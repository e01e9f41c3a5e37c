//! Applying validated options to a rendered pod.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{OptionsError, SessionOptions};

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
    use serde_json::json;

    use super::*;
    use crate::pod::options::ContainerOptions;

    const PREFIX: &str = "unmarshal selenosis.io/options: ";

    fn env_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
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
