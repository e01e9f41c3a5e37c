//! The double's OpenAPI documents: the Pod schema and everything it refers to, generated
//! from k8s-openapi's `schemars` implementations (the types of the newest supported
//! Kubernetes), served in the shapes a real API server uses — `/openapi/v3` (discovery),
//! `/openapi/v3/api/v1` (references `#/components/schemas/NAME`, wrapped in `allOf` where
//! they carry a description) and `/openapi/v2` (`#/definitions/NAME`). Served only when a
//! test asks for it, so that other tests do not pay for reading it at every operator start.
//! A test can make it an older cluster by removing fields, serve either version, and make
//! server-side apply of a Pod fail on fields the served schema lacks, as the real server does.

use std::sync::{Arc, LazyLock};

use serde_json::{Map, Value, json};

use super::error::ApiError;

const POD: &str = "io.k8s.api.core.v1.Pod";
/// Where schemars puts the definitions of the root schema.
const DEFS: &str = "#/$defs/";

/// Every definition the Pod refers to, keyed by its OpenAPI name; references as `#/$defs/`.
static CURRENT: LazyLock<Arc<Map<String, Value>>> = LazyLock::new(|| {
    let root = schemars::schema_for!(k8s_openapi::api::core::v1::Pod);
    let mut root = root.to_value();
    let mut definitions = match root.as_object_mut().and_then(|r| r.remove("$defs")) {
        Some(Value::Object(defs)) => defs,
        _ => Map::new(),
    };
    if let Some(body) = root.as_object_mut() {
        body.remove("$schema");
        body.remove("title");
    }
    definitions.insert(POD.to_string(), root);
    Arc::new(definitions)
});

/// What the double serves and enforces.
#[derive(Clone)]
pub struct OpenApi {
    definitions: Arc<Map<String, Value>>,
    /// Bumped on every change: the `hash` of the v3 document's URL.
    generation: u64,
    pub serve_v3: bool,
    pub serve_v2: bool,
    /// HTTP status of a rejected apply (500 before 1.25, 400/422 later); `None`: no check.
    pub check: Option<u16>,
}

impl Default for OpenApi {
    fn default() -> Self {
        Self {
            definitions: CURRENT.clone(),
            generation: 1,
            serve_v3: false,
            serve_v2: false,
            check: None,
        }
    }
}

/// Rewrites schemars references into the document's form; v3 wraps a reference that has
/// siblings (a description) in `allOf` and adds `default: {}`, as kube-openapi does.
fn convert(value: &Value, v3: bool) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            let mut target = None;
            for (k, v) in map {
                match (k.as_str(), v.as_str()) {
                    ("$ref", Some(r)) => {
                        let name = r.strip_prefix(DEFS).unwrap_or(r);
                        target = Some(if v3 {
                            format!("#/components/schemas/{name}")
                        } else {
                            format!("#/definitions/{name}")
                        });
                    }
                    _ => {
                        out.insert(k.clone(), convert(v, v3));
                    }
                }
            }
            match target {
                Some(r) if v3 && !out.is_empty() => {
                    out.insert("allOf".into(), json!([{"$ref": r}]));
                    out.insert("default".into(), json!({}));
                    Value::Object(out)
                }
                Some(r) => {
                    out.insert("$ref".into(), json!(r));
                    Value::Object(out)
                }
                None => Value::Object(out),
            }
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| convert(v, v3)).collect()),
        other => other.clone(),
    }
}

impl OpenApi {
    fn converted(&self, v3: bool) -> Value {
        Value::Object(
            self.definitions
                .iter()
                .map(|(k, v)| (k.clone(), convert(v, v3)))
                .collect(),
        )
    }

    /// `/openapi/v3`: where each group's document is.
    pub fn v3_discovery(&self) -> Option<Value> {
        self.serve_v3.then(|| {
            json!({"paths": {
                "api/v1": {"serverRelativeURL": format!("/openapi/v3/api/v1?hash={:016X}", self.generation)},
                "apis": {"serverRelativeURL": "/openapi/v3/apis?hash=0000000000000001"},
            }})
        })
    }

    /// `/openapi/v3/api/v1`.
    pub fn v3_core(&self) -> Option<Value> {
        self.serve_v3.then(|| {
            json!({
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": "v1.34.0"},
                "paths": {},
                "components": {"schemas": self.converted(true)},
            })
        })
    }

    /// `/openapi/v2`.
    pub fn v2(&self) -> Option<Value> {
        self.serve_v2.then(|| {
            json!({
                "swagger": "2.0",
                "info": {"title": "Kubernetes", "version": "v1.34.0"},
                "paths": {},
                "definitions": self.converted(false),
            })
        })
    }

    /// Removes `field` from the properties of `definition` (e.g. `io.k8s.api.core.v1.Container`,
    /// `restartPolicy`), as on a cluster that predates it. Returns whether it was there.
    pub fn remove_field(&mut self, definition: &str, field: &str) -> bool {
        let removed = Arc::make_mut(&mut self.definitions)
            .get_mut(definition)
            .and_then(|d| d.get_mut("properties"))
            .and_then(Value::as_object_mut)
            .and_then(|p| p.remove(field))
            .is_some();
        self.generation += 1;
        removed
    }

    fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => self
                .definitions
                .get(r.strip_prefix(DEFS).unwrap_or(r))
                .unwrap_or(&Value::Null),
            None => schema,
        }
    }

    /// Paths of `value` the schema does not declare, in the API server's notation
    /// (`.spec.containers[name="browser"].resources.claims`).
    fn undeclared(&self, schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
        let schema = self.resolve(schema);
        let flag = |f: &str| schema.get(f).and_then(Value::as_bool) == Some(true);
        if flag("x-kubernetes-preserve-unknown-fields") || flag("x-kubernetes-int-or-string") {
            return;
        }
        match value {
            Value::Object(map) => {
                let properties = schema.get("properties").and_then(Value::as_object);
                let additional = schema.get("additionalProperties").filter(|a| a.is_object());
                if properties.is_none() && additional.is_none() {
                    return;
                }
                for (key, child) in map {
                    let at = format!("{path}.{key}");
                    match properties.and_then(|p| p.get(key)).or(additional) {
                        Some(s) => self.undeclared(s, child, &at, out),
                        None => out.push(at),
                    }
                }
            }
            Value::Array(items) => {
                let Some(item_schema) = schema.get("items") else {
                    return;
                };
                for (i, item) in items.iter().enumerate() {
                    let at = match item.get("name").and_then(Value::as_str) {
                        Some(name) => format!("{path}[name=\"{name}\"]"),
                        None => format!("{path}[{i}]"),
                    };
                    self.undeclared(item_schema, item, &at, out);
                }
            }
            _ => {}
        }
    }

    /// The rejection server-side apply of `pod` gets when checking is on and the pod
    /// carries fields the schema lacks.
    pub fn check_apply(&self, pod: &Value) -> Result<(), ApiError> {
        let Some(code) = self.check else {
            return Ok(());
        };
        let mut paths = Vec::new();
        if let Some(root) = self.definitions.get(POD) {
            self.undeclared(root, pod, "", &mut paths);
        }
        let lines: Vec<String> = paths
            .iter()
            .map(|p| format!("{p}: field not declared in schema"))
            .collect();
        let detail = match lines.as_slice() {
            [] => return Ok(()),
            [one] => one.clone(),
            many => format!("errors:\n  {}", many.join("\n  ")),
        };
        let reason = match code {
            500 => "InternalError",
            422 => "Invalid",
            _ => "BadRequest",
        };
        Err(ApiError::new(
            code,
            reason,
            format!("failed to create typed patch object (/v1, Kind=Pod): {detail}"),
        ))
    }
}
