//! The cluster's Pod schema, cut down to what pruning needs: which object keys exist at
//! each place of a Pod. Server-side apply rejects a Pod carrying a field the cluster does
//! not declare (an older cluster lacks, e.g., native sidecars' `restartPolicy` on init
//! containers), so rendered pods are pruned to the schema the cluster serves before they
//! are sent. Only the shape is kept, never the OpenAPI document itself (megabytes).

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

/// The definition name of the Pod in both OpenAPI versions.
const POD: &str = "io.k8s.api.core.v1.Pod";

/// Why an OpenAPI document yields no Pod schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("the OpenAPI document has no {0} section")]
    NoDefinitions(&'static str),
    #[error("the OpenAPI document does not define {0}")]
    MissingDefinition(String),
    #[error("unsupported schema reference {0:?}")]
    BadRef(String),
}

/// What the schema says about one place of a Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    /// An object: its declared keys, and the schema of any other key when it allows them
    /// (`additionalProperties`, as for labels or resource limits).
    Object {
        properties: BTreeMap<String, usize>,
        additional: Option<usize>,
    },
    /// An array whose items follow the node.
    Array(usize),
    /// Scalars, int-or-string, preserve-unknown-fields, or a shape not understood:
    /// everything below is kept.
    Any,
}

/// A Pod schema as an arena of nodes (references may recurse, e.g. JSONSchemaProps-like
/// types), rooted at the Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSchema {
    nodes: Vec<Node>,
    root: usize,
}

impl PodSchema {
    /// From the `/openapi/v3/api/v1` document: `components.schemas`, references
    /// `#/components/schemas/NAME`.
    pub fn from_openapi_v3(doc: &Value) -> Result<PodSchema, SchemaError> {
        let schemas = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
            .ok_or(SchemaError::NoDefinitions("components.schemas"))?;
        Self::from_v3_schemas(schemas)
    }

    /// From the `components.schemas` of an OpenAPI v3 document.
    pub fn from_v3_schemas(schemas: &Map<String, Value>) -> Result<PodSchema, SchemaError> {
        Builder::new(schemas, "#/components/schemas/").build()
    }

    /// From the `/openapi/v2` document: `definitions`, references `#/definitions/NAME`.
    pub fn from_openapi_v2(doc: &Value) -> Result<PodSchema, SchemaError> {
        let definitions = doc
            .get("definitions")
            .and_then(Value::as_object)
            .ok_or(SchemaError::NoDefinitions("definitions"))?;
        Self::from_v2_definitions(definitions)
    }

    /// From the `definitions` of an OpenAPI v2 document.
    pub fn from_v2_definitions(definitions: &Map<String, Value>) -> Result<PodSchema, SchemaError> {
        Builder::new(definitions, "#/definitions/").build()
    }

    /// Removes from `pod` every object key the schema does not declare and returns the
    /// removed paths in document order, e.g. `spec.initContainers[seleniferous].restartPolicy`
    /// (list items are named by their `name`, else by index). Declared fields and anything
    /// the schema cannot describe are kept.
    pub fn prune(&self, pod: &mut Value) -> Vec<String> {
        let mut removed = Vec::new();
        self.prune_at(self.root, pod, "", &mut removed);
        removed
    }

    fn prune_at(&self, node: usize, value: &mut Value, path: &str, removed: &mut Vec<String>) {
        match (&self.nodes[node], value) {
            (
                Node::Object {
                    properties,
                    additional,
                },
                Value::Object(map),
            ) => {
                for (key, child) in map.iter_mut() {
                    match properties.get(key).or(additional.as_ref()) {
                        Some(&next) => self.prune_at(next, child, &join(path, key), removed),
                        None => removed.push(join(path, key)),
                    }
                }
                map.retain(|key, _| properties.contains_key(key) || additional.is_some());
            }
            (Node::Array(items), Value::Array(values)) => {
                for (index, child) in values.iter_mut().enumerate() {
                    let label = match child.get("name").and_then(Value::as_str) {
                        Some(name) => format!("{path}[{name}]"),
                        None => format!("{path}[{index}]"),
                    };
                    self.prune_at(*items, child, &label, removed);
                }
            }
            _ => {}
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Walks the definitions from the Pod, one node per schema place; each named definition
/// becomes one node, reserved before its body is read so that recursive references end.
struct Builder<'a> {
    definitions: &'a Map<String, Value>,
    prefix: &'static str,
    nodes: Vec<Node>,
    named: HashMap<&'a str, usize>,
}

impl<'a> Builder<'a> {
    fn new(definitions: &'a Map<String, Value>, prefix: &'static str) -> Self {
        Self {
            definitions,
            prefix,
            nodes: Vec::new(),
            named: HashMap::new(),
        }
    }

    fn build(mut self) -> Result<PodSchema, SchemaError> {
        let root = self.definition(POD)?;
        Ok(PodSchema {
            nodes: self.nodes,
            root,
        })
    }

    fn definition(&mut self, name: &str) -> Result<usize, SchemaError> {
        let (name, schema) = self
            .definitions
            .get_key_value(name)
            .ok_or_else(|| SchemaError::MissingDefinition(name.to_string()))?;
        if let Some(&index) = self.named.get(name.as_str()) {
            return Ok(index);
        }
        let index = self.push(Node::Any);
        self.named.insert(name, index);
        self.nodes[index] = self.shape(schema)?;
        Ok(index)
    }

    fn push(&mut self, node: Node) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn node(&mut self, schema: &'a Value) -> Result<usize, SchemaError> {
        if is_open(schema) {
            return Ok(self.push(Node::Any));
        }
        if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
            let name = target
                .strip_prefix(self.prefix)
                .ok_or_else(|| SchemaError::BadRef(target.to_string()))?;
            return self.definition(name);
        }
        // v3 wraps references to carry a description or default: `allOf: [{$ref}]`.
        if let Some([only]) = schema
            .get("allOf")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
        {
            return self.node(only);
        }
        let node = self.shape(schema)?;
        Ok(self.push(node))
    }

    fn shape(&mut self, schema: &'a Value) -> Result<Node, SchemaError> {
        // Combinations other than the single-reference wrapper are not interpreted.
        if is_open(schema) || schema.get("allOf").is_some() || schema.get("anyOf").is_some() {
            return Ok(Node::Any);
        }
        if let Some(items) = schema.get("items") {
            return Ok(Node::Array(self.node(items)?));
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        let additional = match schema.get("additionalProperties") {
            Some(Value::Object(_)) => schema.get("additionalProperties"),
            Some(Value::Bool(true)) => return Ok(Node::Any),
            _ => None,
        };
        if properties.is_none() && additional.is_none() {
            return Ok(Node::Any);
        }
        let mut known = BTreeMap::new();
        for (key, child) in properties.into_iter().flatten() {
            known.insert(key.clone(), self.node(child)?);
        }
        let additional = additional.map(|a| self.node(a)).transpose()?;
        Ok(Node::Object {
            properties: known,
            additional,
        })
    }
}

/// Whether a schema declares that anything goes below it.
fn is_open(schema: &Value) -> bool {
    let flag = |f: &str| schema.get(f).and_then(Value::as_bool) == Some(true);
    flag("x-kubernetes-preserve-unknown-fields") || flag("x-kubernetes-int-or-string")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A small Pod definition set in the shape both OpenAPI versions use; `r` makes a
    /// reference in the version's form, `wrap` wraps it the way v3 does.
    fn definitions(r: &dyn Fn(&str) -> Value, wrap: bool) -> Value {
        let to = |name: &str| {
            if wrap {
                json!({"allOf": [r(name)], "default": {}, "description": "wrapped"})
            } else {
                r(name)
            }
        };
        json!({
            "io.k8s.api.core.v1.Pod": {"type": "object", "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": to("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
                "spec": to("io.k8s.api.core.v1.PodSpec"),
            }},
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "properties": {
                "name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
                "ownerReferences": {"type": "array", "items": to("io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference")},
            }},
            "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference": {"type": "object", "properties": {
                "name": {"type": "string"}, "uid": {"type": "string"},
            }},
            "io.k8s.api.core.v1.PodSpec": {"type": "object", "properties": {
                "containers": {"type": "array", "items": to("io.k8s.api.core.v1.Container")},
                "initContainers": {"type": "array", "items": to("io.k8s.api.core.v1.Container")},
                "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
                "overhead": {"type": "object", "additionalProperties": to("io.k8s.apimachinery.pkg.api.resource.Quantity")},
                "affinity": to("io.k8s.api.core.v1.Affinity"),
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }},
            "io.k8s.api.core.v1.Container": {"type": "object", "properties": {
                "name": {"type": "string"},
                "image": {"type": "string"},
                "args": {"type": "array", "items": {"type": "string"}},
                "resources": to("io.k8s.api.core.v1.ResourceRequirements"),
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "containerPort": {"type": "integer"},
                    "targetPort": {"x-kubernetes-int-or-string": true},
                }}},
            }},
            "io.k8s.api.core.v1.ResourceRequirements": {"type": "object", "properties": {
                "limits": {"type": "object", "additionalProperties": to("io.k8s.apimachinery.pkg.api.resource.Quantity")},
                "requests": {"type": "object", "additionalProperties": to("io.k8s.apimachinery.pkg.api.resource.Quantity")},
            }},
            "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string", "format": "quantity"},
            // Recursive: a term refers back to the affinity it belongs to.
            "io.k8s.api.core.v1.Affinity": {"type": "object", "properties": {
                "terms": {"type": "array", "items": to("io.k8s.api.core.v1.Affinity")},
                "weight": {"type": "integer"},
            }},
        })
    }

    fn v3() -> Value {
        let r = |n: &str| json!({"$ref": format!("#/components/schemas/{n}")});
        json!({"openapi": "3.0.0", "components": {"schemas": definitions(&r, true)}})
    }

    fn v2() -> Value {
        let r = |n: &str| json!({"$ref": format!("#/definitions/{n}")});
        json!({"swagger": "2.0", "definitions": definitions(&r, false)})
    }

    /// A pod using fields the schemas above lack, next to many they declare.
    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "s1", "labels": {"a.io/b": "c", "d": "e"},
                "ownerReferences": [{"name": "s1", "uid": "u", "blockOwnerDeletion": true}]},
            "spec": {
                "containers": [
                    {"name": "browser", "image": "img", "args": ["--x"],
                     "resources": {"limits": {"cpu": "1", "memory": 512}, "claims": [{"name": "gpu"}]},
                     "ports": [{"containerPort": 4444, "targetPort": "http", "appProtocol": "h2c"}]},
                    {"image": "img2", "restartPolicy": "Always"},
                ],
                "initContainers": [{"name": "seleniferous", "image": "s", "restartPolicy": "Always"}],
                "nodeSelector": {"disk": "ssd"},
                "overhead": {"cpu": "100m"},
                "affinity": {"weight": 1, "terms": [{"weight": 2, "terms": [{"weight": 3, "future": 1}]}]},
                "extra": {"anything": {"goes": [1, {"x": 2}]}},
                "hostUsers": false,
            },
        })
    }

    const REMOVED: [&str; 7] = [
        "metadata.ownerReferences[s1].blockOwnerDeletion",
        "spec.containers[browser].resources.claims",
        "spec.containers[browser].ports[0].appProtocol",
        "spec.containers[1].restartPolicy",
        "spec.initContainers[seleniferous].restartPolicy",
        "spec.affinity.terms[0].terms[0].future",
        "spec.hostUsers",
    ];

    fn expected_pruned() -> Value {
        let mut expected = pod();
        let spec = &mut expected["spec"];
        spec.as_object_mut().unwrap().remove("hostUsers");
        spec["containers"][0]["resources"]
            .as_object_mut()
            .unwrap()
            .remove("claims");
        spec["containers"][0]["ports"][0]
            .as_object_mut()
            .unwrap()
            .remove("appProtocol");
        spec["containers"][1]
            .as_object_mut()
            .unwrap()
            .remove("restartPolicy");
        spec["initContainers"][0]
            .as_object_mut()
            .unwrap()
            .remove("restartPolicy");
        spec["affinity"]["terms"][0]["terms"][0]
            .as_object_mut()
            .unwrap()
            .remove("future");
        expected["metadata"]["ownerReferences"][0]
            .as_object_mut()
            .unwrap()
            .remove("blockOwnerDeletion");
        expected
    }

    #[test]
    fn v3_and_v2_documents_prune_the_same_unknown_fields() {
        for schema in [
            PodSchema::from_openapi_v3(&v3()).unwrap(),
            PodSchema::from_openapi_v2(&v2()).unwrap(),
        ] {
            let mut pod = pod();
            assert_eq!(schema.prune(&mut pod), REMOVED);
            assert_eq!(pod, expected_pruned());
        }
    }

    #[test]
    fn pruning_keeps_key_order_and_is_idempotent() {
        let schema = PodSchema::from_openapi_v3(&v3()).unwrap();
        let mut pod = pod();
        schema.prune(&mut pod);
        let spec_keys: Vec<&String> = pod["spec"].as_object().unwrap().keys().collect();
        assert_eq!(
            spec_keys,
            [
                "containers",
                "initContainers",
                "nodeSelector",
                "overhead",
                "affinity",
                "extra"
            ]
        );
        let once = pod.clone();
        assert!(schema.prune(&mut pod).is_empty());
        assert_eq!(pod, once);
    }

    #[test]
    fn a_pod_the_schema_fully_declares_is_untouched() {
        let schema = PodSchema::from_openapi_v2(&v2()).unwrap();
        let mut pod = expected_pruned();
        assert!(schema.prune(&mut pod).is_empty());
        assert_eq!(pod, expected_pruned());
    }

    #[test]
    fn values_of_an_unexpected_type_are_kept_as_they_are() {
        let schema = PodSchema::from_openapi_v3(&v3()).unwrap();
        let mut pod = json!({"spec": {"containers": {"not": "a list"}, "nodeSelector": ["x"],
            "affinity": "string"}, "status": {"phase": "Running"}});
        let original = pod.clone();
        assert_eq!(schema.prune(&mut pod), ["status"]);
        assert_eq!(pod["spec"], original["spec"]);
    }

    #[test]
    fn shapes_not_understood_keep_everything_below_them() {
        let defs = json!({"io.k8s.api.core.v1.Pod": {"type": "object", "properties": {
            "untyped": {},
            "object": {"type": "object"},
            "open": {"type": "object", "additionalProperties": true},
            "either": {"anyOf": [{"type": "string"}, {"type": "object"}]},
            "both": {"allOf": [{"type": "object"}, {"type": "object"}]},
            "list": {"type": "array"},
        }}});
        let schema = PodSchema::from_openapi_v2(&json!({"definitions": defs})).unwrap();
        let mut pod = json!({"untyped": {"a": 1}, "object": {"b": {"c": 2}}, "open": {"d": 3},
            "either": {"e": 4}, "both": {"f": 5}, "list": [{"g": 6}]});
        let original = pod.clone();
        assert!(schema.prune(&mut pod).is_empty());
        assert_eq!(pod, original);
    }

    #[test]
    fn documents_without_a_usable_pod_definition_are_errors() {
        assert_eq!(
            PodSchema::from_openapi_v3(&json!({"openapi": "3.0.0"})),
            Err(SchemaError::NoDefinitions("components.schemas"))
        );
        assert_eq!(
            PodSchema::from_openapi_v2(&json!({"definitions": {}})),
            Err(SchemaError::MissingDefinition(POD.into()))
        );
        let dangling = json!({"definitions": {POD: {"properties": {
            "spec": {"$ref": "#/definitions/io.k8s.api.core.v1.PodSpec"}}}}});
        assert_eq!(
            PodSchema::from_openapi_v2(&dangling),
            Err(SchemaError::MissingDefinition(
                "io.k8s.api.core.v1.PodSpec".into()
            ))
        );
        // A v3-style reference in a v2 document.
        let foreign = json!({"definitions": {POD: {"properties": {
            "spec": {"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}}}}});
        assert_eq!(
            PodSchema::from_openapi_v2(&foreign),
            Err(SchemaError::BadRef(
                "#/components/schemas/io.k8s.api.core.v1.PodSpec".into()
            ))
        );
    }

    #[test]
    fn schemas_from_the_same_document_are_equal_and_differ_when_a_field_goes() {
        let a = PodSchema::from_openapi_v3(&v3()).unwrap();
        assert_eq!(a, PodSchema::from_openapi_v3(&v3()).unwrap());
        let mut older = v3();
        older["components"]["schemas"]["io.k8s.api.core.v1.Container"]["properties"]
            .as_object_mut()
            .unwrap()
            .remove("args");
        assert_ne!(a, PodSchema::from_openapi_v3(&older).unwrap());
    }
}
