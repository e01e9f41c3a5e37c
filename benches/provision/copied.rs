//! Prefilled Browsers for an operator whose objects the benchmark does not render itself (the
//! Go controller): copies of one Browser and its pod as that operator left them Running, so
//! that its restart is measured over its own state. Each copy is renamed (every string that
//! was the model's name or uid), its pod bound to the kubelet simulator's node and given the
//! simulator's running status, and the Browser given the model's status with the parts that
//! come from its own pod: pod IP, start time, and each container's state, image and restarts.

use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

use crate::{BenchError, api_error};

/// A Browser and its pod as the operator left them Running.
pub struct Copied {
    name: String,
    uid: String,
    browser: Value,
    pod: Value,
}

/// Metadata the API server sets on each object itself.
const SERVER_SET: [&str; 6] = [
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
];

fn strip(object: &mut Value) {
    if let Some(meta) = object["metadata"].as_object_mut() {
        for field in SERVER_SET {
            meta.remove(field);
        }
    }
    if let Some(object) = object.as_object_mut() {
        object.remove("status");
    }
}

/// Every string of `value` equal to one of `pairs`' first replaced by its second.
fn rename(value: &mut Value, pairs: &[(&str, &str)]) {
    match value {
        Value::String(s) => {
            if let Some((_, to)) = pairs.iter().find(|(from, _)| from == s) {
                *s = (*to).to_string();
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rename(v, pairs)),
        Value::Object(map) => map.values_mut().for_each(|v| rename(v, pairs)),
        _ => {}
    }
}

impl Copied {
    /// The Browser `name` and its pod as they are now.
    pub async fn read(
        browsers: &Api<DynamicObject>,
        pods: &Api<DynamicObject>,
        name: &str,
    ) -> Result<Self, BenchError> {
        let browser = browsers
            .get(name)
            .await
            .map_err(api_error("read the model Browser"))?;
        let pod = pods
            .get(name)
            .await
            .map_err(api_error("read the model pod"))?;
        Ok(Copied {
            name: name.to_string(),
            uid: browser.uid().unwrap_or_default(),
            browser: serde_json::to_value(&browser)?,
            pod: serde_json::to_value(&pod)?,
        })
    }

    /// The Browser `name` to create: the model's metadata (labels, annotations, finalizers)
    /// and spec.
    pub fn browser(&self, name: &str) -> Result<DynamicObject, BenchError> {
        let mut browser = self.browser.clone();
        strip(&mut browser);
        rename(&mut browser, &[(&self.name, name)]);
        Ok(serde_json::from_value(browser)?)
    }

    /// The pod of the Browser `name` with `uid`, bound where the model is, with the model's
    /// owner references, labels and spec.
    pub fn pod(&self, name: &str, uid: &str) -> Result<DynamicObject, BenchError> {
        let mut pod = self.pod.clone();
        strip(&mut pod);
        rename(&mut pod, &[(&self.name, name), (&self.uid, uid)]);
        Ok(serde_json::from_value(pod)?)
    }

    /// The Browser status the operator would have written for a pod of `pod_status`.
    pub fn status(&self, pod_status: &Value) -> Value {
        let mut status = self.browser["status"].clone();
        for field in ["podIP", "startTime"] {
            status[field] = pod_status[field].clone();
        }
        if let Some(containers) = status["containerStatuses"].as_array_mut() {
            for container in containers {
                let own = pod_status["containerStatuses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["name"] == container["name"]);
                if let Some(own) = own {
                    for field in ["state", "image", "restartCount"] {
                        container[field] = own[field].clone();
                    }
                }
            }
        }
        json!({ "status": status })
    }
}
