//! Field ownership for server-side apply, at the granularity the operator relies on:
//! label and annotation keys, finalizers as a set, `ownerReferences` as a whole, and the
//! top-level fields of `spec` and `status` (see the SSA documentation,
//! https://kubernetes.io/docs/reference/using-api/server-side-apply/).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::error::ApiError;

/// One owned field.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    Label(String),
    Annotation(String),
    /// `metadata.finalizers` is a set (`+listType=set`): each entry is owned on its own.
    Finalizer(String),
    /// Another user-settable metadata field, owned as a whole (`ownerReferences`).
    Meta(String),
    Spec(String),
    Status(String),
    /// A top-level field outside metadata/spec/status, e.g. an Event's `reason`.
    Top(String),
}

impl Field {
    /// The path as SSA conflict messages print it.
    fn path(&self) -> String {
        match self {
            Field::Label(k) => format!(".metadata.labels.{k}"),
            Field::Annotation(k) => format!(".metadata.annotations.{k}"),
            Field::Finalizer(v) => format!(".metadata.finalizers[={v:?}]"),
            Field::Meta(k) => format!(".metadata.{k}"),
            Field::Spec(k) => format!(".spec.{k}"),
            Field::Status(k) => format!(".status.{k}"),
            Field::Top(k) => format!(".{k}"),
        }
    }

    /// The `fieldsV1` path of this field.
    fn fields_v1_path(&self) -> Vec<String> {
        let f = |s: &str| format!("f:{s}");
        match self {
            Field::Label(k) => vec![f("metadata"), f("labels"), f(k)],
            Field::Annotation(k) => vec![f("metadata"), f("annotations"), f(k)],
            Field::Finalizer(v) => vec![f("metadata"), f("finalizers"), format!("v:{}", json!(v))],
            Field::Meta(k) => vec![f("metadata"), f(k)],
            Field::Spec(k) => vec![f("spec"), f(k)],
            Field::Status(k) => vec![f("status"), f(k)],
            Field::Top(k) => vec![f(k)],
        }
    }
}

/// Which part of an object a write may touch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The main resource; `status_separate` when status has its own subresource.
    Main { status_separate: bool },
    /// The `/status` subresource.
    Status,
}

/// Metadata fields users own besides labels, annotations and finalizers.
const OWNED_META: [&str; 1] = ["ownerReferences"];

fn keys(value: &Value) -> impl Iterator<Item = &String> {
    value.as_object().into_iter().flat_map(|m| m.keys())
}

/// The fields an object (or an applied configuration) sets within `scope`.
pub fn fields_of(obj: &Value, scope: Scope) -> BTreeSet<Field> {
    let mut out = BTreeSet::new();
    let status_included = match scope {
        Scope::Status => {
            out.extend(keys(&obj["status"]).cloned().map(Field::Status));
            return out;
        }
        Scope::Main { status_separate } => !status_separate,
    };
    let meta = &obj["metadata"];
    out.extend(keys(&meta["labels"]).cloned().map(Field::Label));
    out.extend(keys(&meta["annotations"]).cloned().map(Field::Annotation));
    out.extend(
        meta["finalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|f| Field::Finalizer(f.to_string())),
    );
    for k in OWNED_META {
        if meta.get(k).is_some_and(|v| !v.is_null()) {
            out.insert(Field::Meta(k.to_string()));
        }
    }
    for (k, v) in obj.as_object().into_iter().flatten() {
        match k.as_str() {
            "apiVersion" | "kind" | "metadata" => {}
            "spec" if v.is_object() => out.extend(keys(v).cloned().map(Field::Spec)),
            "status" if v.is_object() => {
                if status_included {
                    out.extend(keys(v).cloned().map(Field::Status));
                }
            }
            "status" if !status_included => {}
            _ => {
                out.insert(Field::Top(k.clone()));
            }
        }
    }
    out
}

fn finalizers(obj: &Value) -> impl Iterator<Item = &str> {
    obj["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The value of one field, `true` for a present finalizer.
pub fn get_field(obj: &Value, field: &Field) -> Option<Value> {
    let meta = &obj["metadata"];
    match field {
        Field::Label(k) => meta["labels"].get(k).cloned(),
        Field::Annotation(k) => meta["annotations"].get(k).cloned(),
        Field::Finalizer(f) => finalizers(obj).any(|x| x == f).then_some(Value::Bool(true)),
        Field::Meta(k) => meta.get(k).cloned(),
        Field::Spec(k) => obj["spec"].get(k).cloned(),
        Field::Status(k) => obj["status"].get(k).cloned(),
        Field::Top(k) => obj.get(k).cloned(),
    }
}

fn ensure_object(v: &mut Value) -> &mut Map<String, Value> {
    match v {
        Value::Object(map) => map,
        other => {
            *other = Value::Object(Map::new());
            ensure_object(other)
        }
    }
}

/// The object at `path`, created (replacing non-objects) on the way.
fn object_at<'a>(obj: &'a mut Value, path: &[&str]) -> &'a mut Map<String, Value> {
    let mut map = ensure_object(obj);
    for seg in path {
        map = ensure_object(map.entry(seg.to_string()).or_insert_with(|| json!({})));
    }
    map
}

/// Sets one field to `value` (a finalizer is appended when absent).
pub fn set_field(obj: &mut Value, field: &Field, value: Value) {
    match field {
        Field::Label(k) => {
            object_at(obj, &["metadata", "labels"]).insert(k.clone(), value);
        }
        Field::Annotation(k) => {
            object_at(obj, &["metadata", "annotations"]).insert(k.clone(), value);
        }
        Field::Finalizer(f) => {
            if !finalizers(obj).any(|x| x == f) {
                let meta = object_at(obj, &["metadata"]);
                let list = meta
                    .entry("finalizers")
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(items) = list {
                    items.push(json!(f));
                } else {
                    *list = json!([f]);
                }
            }
        }
        Field::Meta(k) => {
            object_at(obj, &["metadata"]).insert(k.clone(), value);
        }
        Field::Spec(k) => {
            object_at(obj, &["spec"]).insert(k.clone(), value);
        }
        Field::Status(k) => {
            object_at(obj, &["status"]).insert(k.clone(), value);
        }
        Field::Top(k) => {
            object_at(obj, &[]).insert(k.clone(), value);
        }
    }
}

/// Removes one field; maps and the finalizer list left empty disappear.
pub fn remove_field(obj: &mut Value, field: &Field) {
    fn remove_key(obj: &mut Value, path: &[&str], key: &str) {
        let Some(parent) = path.iter().try_fold(&mut *obj, |v, seg| v.get_mut(*seg)) else {
            return;
        };
        if let Some(map) = parent.as_object_mut() {
            map.remove(key);
        }
    }
    fn drop_if_empty(obj: &mut Value, parent: &str, key: &str) {
        if let Some(map) = obj.get_mut(parent).and_then(Value::as_object_mut) {
            let empty = match map.get(key) {
                Some(Value::Object(m)) => m.is_empty(),
                Some(Value::Array(a)) => a.is_empty(),
                _ => false,
            };
            if empty {
                map.remove(key);
            }
        }
    }
    match field {
        Field::Label(k) => {
            remove_key(obj, &["metadata", "labels"], k);
            drop_if_empty(obj, "metadata", "labels");
        }
        Field::Annotation(k) => {
            remove_key(obj, &["metadata", "annotations"], k);
            drop_if_empty(obj, "metadata", "annotations");
        }
        Field::Finalizer(f) => {
            if let Some(list) = obj["metadata"]
                .get_mut("finalizers")
                .and_then(Value::as_array_mut)
            {
                list.retain(|x| x.as_str() != Some(f));
            }
            drop_if_empty(obj, "metadata", "finalizers");
        }
        Field::Meta(k) => remove_key(obj, &["metadata"], k),
        Field::Spec(k) => remove_key(obj, &["spec"], k),
        Field::Status(k) => remove_key(obj, &["status"], k),
        Field::Top(k) => remove_key(obj, &[], k),
    }
}

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Owner {
    pub manager: String,
    /// `Apply` rather than `Update`.
    pub apply: bool,
    pub subresource: Option<String>,
    pub api_version: String,
    pub time: String,
    pub fields: BTreeSet<Field>,
}

impl Owner {
    fn is(&self, manager: &str, apply: bool, subresource: Option<&str>) -> bool {
        self.manager == manager && self.apply == apply && self.subresource.as_deref() == subresource
    }
}

/// Who writes, and how.
#[derive(Clone, Copy, Debug)]
pub struct Writer<'a> {
    pub manager: &'a str,
    pub subresource: Option<&'a str>,
    pub api_version: &'a str,
    pub now: &'a str,
}

fn entry<'a>(owners: &'a mut Vec<Owner>, w: &Writer, apply: bool) -> &'a mut Owner {
    let idx = match owners
        .iter()
        .position(|o| o.is(w.manager, apply, w.subresource))
    {
        Some(i) => i,
        None => {
            owners.push(Owner {
                manager: w.manager.to_string(),
                apply,
                subresource: w.subresource.map(str::to_string),
                api_version: w.api_version.to_string(),
                time: w.now.to_string(),
                fields: BTreeSet::new(),
            });
            owners.len() - 1
        }
    };
    &mut owners[idx]
}

/// Ownership after a non-apply write (create, update, patch): the writer takes every field
/// whose value it changed, away from any other manager (updates always force).
pub fn record_update(owners: &mut Vec<Owner>, old: &Value, new: &Value, scope: Scope, w: &Writer) {
    let changed: BTreeSet<Field> = fields_of(new, scope)
        .into_iter()
        .filter(|f| get_field(old, f) != get_field(new, f))
        .collect();
    if changed.is_empty() {
        return;
    }
    for o in owners.iter_mut() {
        if !o.is(w.manager, false, w.subresource) {
            o.fields.retain(|f| !changed.contains(f));
        }
    }
    let e = entry(owners, w, false);
    e.fields.extend(changed);
    e.time = w.now.to_string();
    e.api_version = w.api_version.to_string();
}

/// Server-side apply of `applied` onto `current` by `w.manager`: conflicting fields of other
/// managers fail the request unless `force`; fields this manager applied before and omits now
/// are removed unless someone else also owns them.
pub fn apply(
    current: &Value,
    owners: &mut Vec<Owner>,
    applied: &Value,
    scope: Scope,
    force: bool,
    w: &Writer,
) -> Result<Value, ApiError> {
    let wanted = fields_of(applied, scope);
    let previous = owners
        .iter()
        .find(|o| o.is(w.manager, true, w.subresource))
        .map(|o| o.fields.clone())
        .unwrap_or_default();
    let mut conflicts = Vec::new();
    for o in owners
        .iter()
        .filter(|o| !o.is(w.manager, true, w.subresource))
    {
        for f in o.fields.intersection(&wanted) {
            if get_field(current, f) != get_field(applied, f) {
                conflicts.push((o.manager.clone(), o.api_version.clone(), f.clone()));
            }
        }
    }
    if !conflicts.is_empty() {
        if !force {
            return Err(conflict_error(&conflicts));
        }
        for o in owners
            .iter_mut()
            .filter(|o| !o.is(w.manager, true, w.subresource))
        {
            o.fields
                .retain(|f| !conflicts.iter().any(|(_, _, c)| c == f));
        }
    }
    let mut next = current.clone();
    for f in previous.difference(&wanted) {
        let shared = owners
            .iter()
            .any(|o| !o.is(w.manager, true, w.subresource) && o.fields.contains(f));
        if !shared {
            remove_field(&mut next, f);
        }
    }
    for f in &wanted {
        if let Some(v) = get_field(applied, f) {
            set_field(&mut next, f, v);
        }
    }
    let e = entry(owners, w, true);
    if e.fields != wanted {
        e.fields = wanted;
        e.time = w.now.to_string();
    }
    e.api_version = w.api_version.to_string();
    Ok(next)
}

fn conflict_error(conflicts: &[(String, String, Field)]) -> ApiError {
    let n = conflicts.len();
    let message = match conflicts {
        [(manager, version, field)] => format!(
            "Apply failed with 1 conflict: conflict with \"{manager}\" using {version}: {}",
            field.path()
        ),
        _ => {
            let lines: Vec<String> = conflicts
                .iter()
                .map(|(m, _, f)| format!("- {} (\"{m}\")", f.path()))
                .collect();
            format!("Apply failed with {n} conflicts:\n{}", lines.join("\n"))
        }
    };
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(m, v, f)| {
            json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{m}\" using {v}"), "field": f.path()})
        })
        .collect();
    let err = ApiError::new(409, "Conflict", message);
    err.with_details(json!({"causes": causes}))
}

/// Drops ownership of fields the object no longer has, and empty entries.
pub fn prune(owners: &mut Vec<Owner>, obj: &Value) {
    let present = fields_of(
        obj,
        Scope::Main {
            status_separate: false,
        },
    );
    for o in owners.iter_mut() {
        o.fields.retain(|f| present.contains(f));
    }
    owners.retain(|o| !o.fields.is_empty());
}

/// `metadata.managedFields` for the owners.
pub fn managed_fields(owners: &[Owner]) -> Value {
    let entries: Vec<Value> = owners
        .iter()
        .map(|o| {
            let mut tree = Value::Object(Map::new());
            for f in &o.fields {
                let path = f.fields_v1_path();
                let segs: Vec<&str> = path.iter().map(String::as_str).collect();
                object_at(&mut tree, &segs);
            }
            let mut e = json!({
                "manager": o.manager,
                "operation": if o.apply { "Apply" } else { "Update" },
                "apiVersion": o.api_version,
                "time": o.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": tree,
            });
            if let Some(sub) = &o.subresource {
                e["subresource"] = json!(sub);
            }
            e
        })
        .collect();
    Value::Array(entries)
}
