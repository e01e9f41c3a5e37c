//! The Browser's status (docs/behaviour.md, "Browser") as one type: the CRD's schema is
//! derived from it, the lifecycle builds it, a plan carries it and the status apply sends it.
//! The standard condition is shared with the BrowserConfig's schema.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::browser::Phase;
use super::crd::types::{Object, Port};

/// State of the browser pod, written by the operator.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BrowserStatus {
    /// Pod phase, or Failed when the session failed or ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// IP of the pod; always set when the phase is Running.
    #[serde(rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    /// When the pod started.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    pub start_time: Option<Value>,
    /// CamelCase reason of the current state, e.g. ConfigNotFound or OOMKilled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable explanation of the current state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// State of the pod's containers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<ContainerStatus>>,
    /// Conditions of the Browser, one per type.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
    /// Generation of the Browser this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

// One container of the pod, as the Browser shows it (a plain comment: a doc comment would
// enter the CRD as a description).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub name: Option<Value>,
    /// Container state as in the pod status (waiting, running or terminated).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Object>")]
    pub state: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub image: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i32>")]
    pub restart_count: Option<Value>,
    /// Ports of the pod spec's container of this name.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<Port>>")]
    pub ports: Option<Value>,
}

/// A standard status condition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: ConditionStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    pub last_transition_time: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

// Whether a condition holds (a plain comment, as above).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

impl BrowserStatus {
    /// The status as JSON, as the API server receives it.
    pub fn to_value(&self) -> Value {
        // Every field is a string, a number or JSON already: serializing cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}
