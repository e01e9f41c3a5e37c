//! Applying validated options' env to a rendered pod.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{OptionsError, SessionOptions};

/// Sets the options' env on a rendered pod. Each option container must be one of `allowed`
/// (the browser container, and those its BrowserConfig entry lists in `optionsContainers`)
/// and among `spec.containers` or `spec.initContainers`, where an existing variable of the
/// same name is replaced in place and new variables are appended in name order. A variable
/// the configuration takes from `valueFrom` (a secret, the pod's IP …) is never replaced.
/// Nothing is changed when any of it is refused.
pub fn apply_env(
    pod: &mut Value,
    options: &SessionOptions,
    allowed: &[String],
) -> Result<(), OptionsError> {
    let present = container_names(pod);
    for name in options.containers.keys() {
        if !present.contains(name) {
            return Err(OptionsError::UnknownContainer {
                container: name.clone(),
                available: present.join(", "),
            });
        }
        if !allowed.contains(name) {
            return Err(OptionsError::ContainerNotAllowed {
                container: name.clone(),
                allowed: allowed.join(", "),
            });
        }
    }
    for (name, container_options) in &options.containers {
        for container in containers_named_mut(pod, name) {
            check_value_from(name, container, &container_options.env)?;
        }
    }
    for (name, container_options) in &options.containers {
        for container in containers_named_mut(pod, name) {
            apply_to(name, container, &container_options.env)?;
        }
    }
    Ok(())
}

/// Refuses to replace a variable the configuration takes from `valueFrom`.
fn check_value_from(
    container_name: &str,
    container: &Map<String, Value>,
    env: &BTreeMap<String, String>,
) -> Result<(), OptionsError> {
    let from_source = container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|var| var.get("valueFrom").is_some_and(|v| !v.is_null()))
        .filter_map(|var| var.get("name").and_then(Value::as_str))
        .find(|name| env.contains_key(*name));
    match from_source {
        Some(name) => Err(OptionsError::ValueFrom {
            container: container_name.to_string(),
            name: name.to_string(),
        }),
        None => Ok(()),
    }
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

fn apply_to(
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

    fn all() -> Vec<String> {
        ["browser", "seleniferous", "setup"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    fn apply(pod: &mut Value, options: &SessionOptions) -> Result<(), OptionsError> {
        apply_env(pod, options, &all())
    }

    fn with_env(container: &str, env: &[(&str, &str)]) -> SessionOptions {
        let mut options = SessionOptions::default();
        options
            .containers
            .insert(container.to_string(), ContainerOptions { env: env_of(env) });
        options
    }

    #[test]
    fn apply_replaces_env_in_place_and_appends_new_sorted() {
        let mut pod = pod();
        let options = with_env(
            "browser",
            &[("ZONE", "z"), ("TZ", "Europe/Berlin"), ("A", "a")],
        );
        apply(&mut pod, &options).unwrap();
        assert_eq!(
            pod["spec"]["containers"][0]["env"],
            json!([
                {"name": "TZ", "value": "Europe/Berlin"},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
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
        options.containers.insert(
            "browser".into(),
            ContainerOptions {
                env: env_of(&[("TZ", "CET")]),
            },
        );
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
    fn only_the_allowed_containers_take_options() {
        let mut pod = pod();
        let original = pod.clone();
        let browser_only = vec!["browser".to_string()];
        let text = apply_env(
            &mut pod,
            &with_env("seleniferous", &[("X", "1")]),
            &browser_only,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            text,
            format!(
                "{PREFIX}container \"seleniferous\" does not take options (allowed: browser); the BrowserConfig entry may list it in optionsContainers"
            )
        );
        assert_eq!(pod, original);
        apply_env(&mut pod, &with_env("browser", &[("X", "1")]), &browser_only).unwrap();
    }

    #[test]
    fn a_variable_from_value_from_is_never_replaced() {
        let mut pod = pod();
        let original = pod.clone();
        let options = with_env("browser", &[("TZ", "CET"), ("POD_IP", "1.2.3.4")]);
        assert_eq!(
            apply(&mut pod, &options).unwrap_err().to_string(),
            format!(
                "{PREFIX}container \"browser\": env \"POD_IP\" comes from valueFrom in the BrowserConfig and cannot be replaced by options"
            )
        );
        assert_eq!(pod, original, "nothing changed, TZ neither");
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
