//! Releasing a finalizer: a JSON patch that removes it only while it is where it was read.

use kube_core::DynamicObject;
use serde_json::json;

/// The JSON patch that removes `finalizer` from `object`, guarded by `test` (the list may have
/// changed since); `None` when the object does not carry it.
pub fn without(object: &DynamicObject, finalizer: &str) -> Option<json_patch::Patch> {
    let index = object
        .metadata
        .finalizers
        .as_ref()?
        .iter()
        .position(|f| f == finalizer)?;
    let path = format!("/metadata/finalizers/{index}");
    serde_json::from_value(json!([
        {"op": "test", "path": path, "value": finalizer},
        {"op": "remove", "path": path},
    ]))
    .ok()
}
