//! Builders of the objects tests write again and again: Browsers, their pods and
//! BrowserConfigs, as the API server holds them. `browser("s1").running("10.0.0.1")`,
//! `pod("s1").owned_by(uid).failed("Evicted")`, `config("chrome").spec(..)`. Compiled for the
//! core's tests and for feature `fixtures`, which only the test kit turns on; the operator
//! never calls them. The api module's tests do without them: this module uses `api::keys`,
//! and tests/architecture.rs counts a test's use as a dependency, which would make a cycle.

use std::marker::PhantomData;

use kube_core::DynamicObject;
use serde::{Serialize, Serializer};
use serde_json::{Value, json};

use crate::api::keys;
use crate::names;

/// One object under construction; `K` says which kind, so each kind has only its own steps.
#[derive(Clone, Debug)]
pub struct Fixture<K> {
    value: Value,
    kind: PhantomData<K>,
}

/// The kind of [`browser`].
#[derive(Clone, Debug)]
pub enum Browser {}
/// The kind of [`pod`].
#[derive(Clone, Debug)]
pub enum Pod {}
/// The kind of [`config`].
#[derive(Clone, Debug)]
pub enum Config {}

/// A Browser of Chrome 139.0 named `name`, as a client creates it: no namespace, UID,
/// finalizer or labels until a step adds them.
pub fn browser(name: &str) -> Fixture<Browser> {
    Fixture::new(json!({
        "apiVersion": "selenosis.io/v1", "kind": keys::BROWSER_KIND,
        "metadata": {"name": name},
        "spec": {"browserName": "chrome", "browserVersion": "139.0"},
    }))
}

/// The pod the operator renders for Browser `name` (Chrome 139.0): its labels, the browser
/// and seleniferous containers with their ports, never restarted.
pub fn pod(name: &str) -> Fixture<Pod> {
    Fixture::<Pod>::new(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": keys::BROWSER_CONTAINER, "image": "selenium/standalone-chrome:139.0", "ports": [{"containerPort": 4444}]},
                {"name": keys::SELENIFEROUS_CONTAINER, "image": "alcounit/seleniferous:v2", "ports": [{"containerPort": 4445}]},
            ],
        },
    }))
    .labelled()
}

/// A BrowserConfig named `name` with an empty spec.
pub fn config(name: &str) -> Fixture<Config> {
    Fixture::new(json!({
        "apiVersion": "selenosis.io/v1", "kind": keys::BROWSERCONFIG_KIND,
        "metadata": {"name": name},
        "spec": {},
    }))
}

impl<K> Fixture<K> {
    fn new(value: Value) -> Self {
        Fixture {
            value,
            kind: PhantomData,
        }
    }

    /// The object as JSON.
    pub fn build(self) -> Value {
        self.value
    }

    /// The object as kube reads it.
    pub fn object(self) -> DynamicObject {
        serde_json::from_value(self.value).expect("a fixture is a valid object")
    }

    /// The group and version, where a group layout other than the default is installed.
    pub fn api_version(mut self, api_version: &str) -> Self {
        self.value["apiVersion"] = json!(api_version);
        self
    }

    pub fn namespace(mut self, namespace: &str) -> Self {
        self.value["metadata"]["namespace"] = json!(namespace);
        self
    }

    pub fn uid(mut self, uid: &str) -> Self {
        self.value["metadata"]["uid"] = json!(uid);
        self
    }

    /// `metadata.creationTimestamp`, which the decision and the config lookup order by.
    pub fn created(mut self, at: &str) -> Self {
        self.value["metadata"]["creationTimestamp"] = json!(at);
        self
    }

    /// Replaces the labels; `Value::Null` removes them.
    pub fn labels(mut self, labels: Value) -> Self {
        self.set_metadata("labels", labels);
        self
    }

    pub fn annotations(mut self, annotations: Value) -> Self {
        self.set_metadata("annotations", annotations);
        self
    }

    pub fn spec(mut self, spec: Value) -> Self {
        self.value["spec"] = spec;
        self
    }

    /// Replaces the status with one written out in full.
    pub fn status(mut self, status: Value) -> Self {
        self.value["status"] = status;
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.value["status"]["phase"] = json!(phase);
        self
    }

    pub fn ip(mut self, ip: &str) -> Self {
        self.value["status"]["podIP"] = json!(ip);
        self
    }

    /// Running with `ip`: what a pod reports and what its Browser publishes.
    pub fn running(self, ip: &str) -> Self {
        self.phase("Running").ip(ip)
    }

    pub fn failed(mut self, reason: &str) -> Self {
        self.value["status"]["reason"] = json!(reason);
        self.phase("Failed")
    }

    /// `status.message`, beside the reason of [`Fixture::failed`].
    pub fn message(mut self, message: &str) -> Self {
        self.value["status"]["message"] = json!(message);
        self
    }

    fn set_metadata(&mut self, key: &str, value: Value) {
        if let Some(metadata) = self.value["metadata"].as_object_mut() {
            if value.is_null() {
                metadata.remove(key);
            } else {
                metadata.insert(key.into(), value);
            }
        }
    }
}

impl Fixture<Browser> {
    pub fn version(mut self, version: &str) -> Self {
        self.value["spec"]["browserVersion"] = json!(version);
        self
    }

    /// With the operator's finalizer, as the operator leaves every Browser it saw.
    pub fn finalized(mut self) -> Self {
        self.value["metadata"]["finalizers"] = json!([keys::FINALIZER]);
        self
    }

    /// With the operator's labels for its name and spec, as it leaves every Browser it saw.
    pub fn labelled(self) -> Self {
        let name = self.value["metadata"]["name"].as_str().unwrap_or_default();
        let spec = &self.value["spec"];
        let labels = json!({
            keys::LABEL_BROWSER: names::label_value_for(name),
            keys::LABEL_BROWSER_NAME: spec["browserName"],
            keys::LABEL_BROWSER_VERSION: spec["browserVersion"],
        });
        self.labels(labels)
    }

    /// Deleted at `at`, held by its finalizer.
    pub fn deleting(mut self, at: &str) -> Self {
        self.value["metadata"]["deletionTimestamp"] = json!(at);
        self
    }
}

impl Fixture<Pod> {
    /// With the operator's labels for the Browser of its name, Chrome 139.0.
    pub fn labelled(self) -> Self {
        let name = self.value["metadata"]["name"].as_str().unwrap_or_default();
        let labels = json!({
            keys::LABEL_BROWSER: names::label_value_for(name),
            keys::LABEL_BROWSER_NAME: "chrome",
            keys::LABEL_BROWSER_VERSION: "139.0",
            keys::LABEL_MANAGED_BY: keys::MANAGER,
        });
        self.labels(labels)
    }

    /// Controlled by the Browser of UID `uid` (its name is the pod's).
    pub fn owned_by(self, uid: &str) -> Self {
        self.owned_by_as("selenosis.io/v1", uid)
    }

    /// Controlled by the Browser of UID `uid` in `api_version`, the split group's
    /// `browser.selenosis.io/v1` as the Go browser-controller wrote it, say.
    pub fn owned_by_as(mut self, api_version: &str, uid: &str) -> Self {
        let name = self.value["metadata"]["name"].clone();
        self.value["metadata"]["ownerReferences"] = json!([{
            "apiVersion": api_version, "kind": keys::BROWSER_KIND, "name": name, "uid": uid,
            "controller": true, "blockOwnerDeletion": true,
        }]);
        self
    }

    /// Scheduled to `node`.
    pub fn node(mut self, node: &str) -> Self {
        self.value["spec"]["nodeName"] = json!(node);
        self
    }

    /// Deleted at `at` with `grace_seconds` to go, as the API server marks a graceful delete.
    pub fn deleting(mut self, at: &str, grace_seconds: u32) -> Self {
        self.value["metadata"]["deletionTimestamp"] = json!(at);
        self.value["metadata"]["deletionGracePeriodSeconds"] = json!(grace_seconds);
        self
    }

    /// `status.startTime`.
    pub fn started(mut self, at: &str) -> Self {
        self.value["status"]["startTime"] = json!(at);
        self
    }

    pub fn container_running(self, name: &str, since: &str) -> Self {
        self.container_status(
            "containerStatuses",
            name,
            json!({"running": {"startedAt": since}}),
        )
    }

    pub fn container_waiting(self, name: &str, reason: &str, message: Option<&str>) -> Self {
        self.container_status("containerStatuses", name, waiting(reason, message))
    }

    pub fn container_terminated(self, name: &str, exit_code: i32, reason: &str) -> Self {
        self.container_status("containerStatuses", name, terminated(exit_code, reason))
    }

    pub fn init_container_waiting(self, name: &str, reason: &str) -> Self {
        self.container_status("initContainerStatuses", name, waiting(reason, None))
    }

    pub fn init_container_terminated(self, name: &str, exit_code: i32, reason: &str) -> Self {
        self.container_status("initContainerStatuses", name, terminated(exit_code, reason))
    }

    /// Appends the status of container `name` in `state` to the list `field`.
    fn container_status(mut self, field: &str, name: &str, state: Value) -> Self {
        let entry = json!({"name": name, "state": state, "restartCount": 0});
        match self.value["status"][field].as_array_mut() {
            Some(statuses) => statuses.push(entry),
            None => self.value["status"][field] = json!([entry]),
        }
        self
    }
}

fn waiting(reason: &str, message: Option<&str>) -> Value {
    let mut waiting = json!({"reason": reason});
    if let Some(message) = message {
        waiting["message"] = json!(message);
    }
    json!({"waiting": waiting})
}

fn terminated(exit_code: i32, reason: &str) -> Value {
    json!({"terminated": {"reason": reason, "exitCode": exit_code}})
}

/// Serialised as the object, so a fixture is a patch body as it is.
impl<K> Serialize for Fixture<K> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(serializer)
    }
}

impl<K> From<Fixture<K>> for Value {
    fn from(fixture: Fixture<K>) -> Value {
        fixture.value
    }
}
