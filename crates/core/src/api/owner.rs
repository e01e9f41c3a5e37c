//! The owner of a Browser for fair share in the capacity queue (docs/behaviour.md, "Capacity
//! queue"): the value of the label `--fair-share-label` names, `selenosis.io/owner` unless set.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use kube_core::DynamicObject;

use super::keys;

/// The label that names a Browser's owner (`--fair-share-label`); set once at start-up,
/// before any object is cached.
static LABEL: OnceLock<String> = OnceLock::new();

/// Sets the owner label; later calls change nothing.
pub fn set_label(label: &str) {
    let _ = LABEL.set(label.to_string());
}

/// The owner label: [`set_label`]'s, or `selenosis.io/owner`.
pub fn label() -> &'static str {
    LABEL.get().map_or(keys::LABEL_OWNER, String::as_str)
}

/// An owner: its owner label's value; `None` is the anonymous owner, which Browsers without
/// the label share.
pub type Owner = Option<Box<str>>;

/// The owner of a Browser (or of its pod, which carries its labels).
pub fn of(object: &DynamicObject) -> Owner {
    of_labels(object.metadata.labels.as_ref())
}

/// The owner an object's `labels` name.
pub fn of_labels(labels: Option<&BTreeMap<String, String>>) -> Owner {
    labels?.get(label()).map(|o| Box::from(o.as_str()))
}
