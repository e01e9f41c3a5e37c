//! Helpers shared by the CRD tests: lookups into generated CRDs and a checker of structural
//! schemas.

use serde_json::{Value, json};

use super::{Layout, crds};

pub(super) fn all_crds() -> Vec<Value> {
    Layout::ALL.into_iter().flat_map(crds).collect()
}

pub(super) fn find(layout: Layout, kind: &str) -> Value {
    crds(layout)
        .into_iter()
        .find(|c| c["spec"]["names"]["kind"] == kind)
        .unwrap()
}

pub(super) fn version(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]
}

pub(super) fn root_schema(crd: &Value) -> &Value {
    &version(crd)["schema"]["openAPIV3Schema"]
}

pub(super) fn keys_of(schema: &Value) -> Vec<&str> {
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
pub(super) fn check_structural(node: &Value, path: &str, problems: &mut Vec<String>) {
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

/// Numbers as floats: the typed CRD keeps `minimum`/`maximum` as `f64`.
pub(super) fn floats(value: &Value) -> Value {
    match value {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(items) => Value::Array(items.iter().map(floats).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), floats(v))).collect())
        }
        other => other.clone(),
    }
}
