//! `metav1.Status` errors: every failed request answers with one, as the real API server does,
//! so kube-client surfaces them as `kube::Error::Api`.

use serde_json::{Value, json};

use super::resources::ResourceDef;

/// One `details.causes[]` entry of a `Status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, ...
    pub reason: String,
    /// Field path, e.g. `spec.containers[0].image`.
    pub field: String,
    /// The message without the field, e.g. `Required value`.
    pub message: String,
}

impl Cause {
    pub fn required(field: impl Into<String>) -> Self {
        Self::new("FieldValueRequired", field, "Required value".to_string())
    }

    /// `Invalid value: "x": detail`; `value` is already rendered as Go's `%#v`-like form.
    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        Self::new(
            "FieldValueInvalid",
            field,
            format!("Invalid value: {}: {detail}", render(value)),
        )
    }

    pub fn duplicate(field: impl Into<String>, value: &Value) -> Self {
        Self::new(
            "FieldValueDuplicate",
            field,
            format!("Duplicate value: {}", render(value)),
        )
    }

    pub fn not_found(field: impl Into<String>, value: &Value) -> Self {
        Self::new(
            "FieldValueNotFound",
            field,
            format!("Not found: {}", render(value)),
        )
    }

    pub fn not_supported(field: impl Into<String>, value: &Value, supported: &[&str]) -> Self {
        let list = supported
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ");
        Self::new(
            "FieldValueNotSupported",
            field,
            format!(
                "Unsupported value: {}: supported values: {list}",
                render(value)
            ),
        )
    }

    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Self::new("FieldValueForbidden", field, format!("Forbidden: {detail}"))
    }

    fn new(reason: &str, field: impl Into<String>, message: String) -> Self {
        Self {
            reason: reason.to_string(),
            field: field.into(),
            message,
        }
    }

    /// `field: message`, the form used inside a `... is invalid: ...` message.
    pub fn line(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

/// Strings quoted, everything else as JSON, like the Go field-error renderer.
fn render(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// A failed request: HTTP code plus the `Status` body.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<Box<Value>>,
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    fn object_details(def: &ResourceDef, name: &str) -> Value {
        json!({"name": name, "group": def.group, "kind": def.plural})
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// Unknown path or resource.
    pub fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", def.qualified()),
        )
        .with_details(Self::object_details(def, name))
    }

    pub fn already_exists(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", def.qualified()),
        )
        .with_details(Self::object_details(def, name))
    }

    /// `Operation cannot be fulfilled on pods "x": <why>` (409 Conflict).
    pub fn conflict(def: &ResourceDef, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                def.qualified()
            ),
        )
        .with_details(Self::object_details(def, name))
    }

    /// The optimistic-concurrency failure of an update carrying a stale resourceVersion.
    pub fn stale(def: &ResourceDef, name: &str) -> Self {
        Self::conflict(
            def,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// `Kind "name" is invalid: field: message` (422), with one cause per field error.
    pub fn invalid(def: &ResourceDef, name: &str, causes: Vec<Cause>) -> Self {
        let summary = match causes.as_slice() {
            [one] => one.line(),
            many => format!(
                "[{}]",
                many.iter().map(Cause::line).collect::<Vec<_>>().join(", ")
            ),
        };
        let details = json!({
            "name": name,
            "group": def.group,
            "kind": def.kind,
            "causes": causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect::<Vec<_>>(),
        });
        Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {summary}", def.qualified_kind()),
        )
        .with_details(details)
    }

    /// A patch the server understood but could not apply, e.g. a failed JSON-patch `test`.
    /// The apiserver answers with `NewGenericServerResponse(422, ...)`: a generic message and
    /// the patch library's error as the only cause.
    pub fn patch_not_applicable(why: &str) -> Self {
        Self::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        )
        .with_details(json!({"causes": [{"reason": "UnexpectedServerResponse", "message": why}]}))
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = (**details).clone();
        }
        status
    }
}
