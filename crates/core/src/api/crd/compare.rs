//! Whether an installed CRD is the one this binary expects: every field of the schema this
//! binary generates must be in the installed schema (CRD changes are additive, so an older CRD
//! lacks fields and a newer one only has more). A field the installed schema lacks is pruned
//! by the API server from every write: a status the operator writes would lose it silently.

use serde_json::Value;

/// The schema of the served version `v1` of a CRD object.
fn schema(crd: &Value) -> Option<&Value> {
    crd.pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v["name"] == "v1")?
        .pointer("/schema/openAPIV3Schema")
}

/// The dotted paths of every property of `schema` (`status.conditions`, list items as `[]`).
fn properties(schema: &Value, prefix: &str, out: &mut Vec<String>) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            out.push(path.clone());
            properties(sub, &path, out);
        }
    }
    if let Some(items) = schema.get("items") {
        properties(items, &format!("{prefix}[]"), out);
    }
}

/// The fields of `expected`'s `v1` schema that `installed` lacks, in schema order, each named
/// once: a missing field's own fields are not listed.
pub fn missing_fields(installed: &Value, expected: &Value) -> Vec<String> {
    let mut wanted = Vec::new();
    if let Some(schema) = schema(expected) {
        properties(schema, "", &mut wanted);
    }
    let mut present = Vec::new();
    if let Some(schema) = schema(installed) {
        properties(schema, "", &mut present);
    }
    wanted.retain(|path| !present.contains(path));
    let within = |path: &str, parent: &str| {
        path.strip_prefix(parent)
            .is_some_and(|rest| rest.starts_with('.') || rest.starts_with("[]"))
    };
    wanted
        .iter()
        .filter(|path| !wanted.iter().any(|parent| within(path, parent)))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::crd::{Layout, crds};

    fn browser_crd() -> Value {
        crds(Layout::Default)
            .into_iter()
            .find(|c| c["metadata"]["name"] == "browsers.selenosis.io")
            .unwrap()
    }

    #[test]
    fn the_generated_crd_lacks_nothing_of_itself() {
        for layout in Layout::ALL {
            for crd in crds(layout) {
                assert_eq!(missing_fields(&crd, &crd), Vec::<String>::new());
            }
        }
    }

    #[test]
    fn an_older_crd_is_found_by_the_fields_it_lacks() {
        let expected = browser_crd();
        let mut older = expected.clone();
        let status = older
            .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/status/properties")
            .unwrap()
            .as_object_mut()
            .unwrap();
        status.remove("conditions");
        // Named once, not with each of its own fields.
        assert_eq!(missing_fields(&older, &expected), ["status.conditions"]);
        // A newer CRD (a field more) lacks nothing.
        assert!(missing_fields(&expected, &older).is_empty());
    }

    #[test]
    fn a_crd_without_a_v1_schema_lacks_everything() {
        let expected = browser_crd();
        let other = json!({"spec": {"versions": [{"name": "v1beta1", "schema": {}}]}});
        let missing = missing_fields(&other, &expected);
        assert!(missing.contains(&"spec".to_string()));
        assert!(missing.contains(&"status".to_string()));
        assert!(!missing.contains(&"status.phase".to_string()));
    }
}
