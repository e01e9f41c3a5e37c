//! Schemas of the kinds from their schema types, rewritten into Kubernetes structural schemas.

use schemars::generate::SchemaSettings;
use schemars::transform::{Transform, transform_subschemas};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value, json};

/// The `openAPIV3Schema` of a kind with the given spec and status types.
pub(super) fn schema<Spec: JsonSchema, Status: JsonSchema>(description: &str) -> Value {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::api::crd::test_support::*;

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
}
