//! The requests a reconcile sends to the API server and the answers it gets, as data
//! (docs/behaviour.md, "Writes"). The edge sends a [`Request`] exactly as it says and hands
//! back the [`Answer`]; what an answer means is the step machine's to say (`reconcile`).

use std::fmt;

use kube_core::{ApiResource, DynamicObject};
use serde_json::{Value, json};

use super::plan::{PodAdoption, PodDelete};
use crate::api::{apply, keys};

/// The resourceVersion that makes a pod apply create-only: a precondition no existing pod
/// meets (the first revision of the cluster's store), so the API server answers 409 when a
/// pod of that name exists, whoever made it, and ignores the field when it creates the pod.
const CREATE_ONLY: &str = "1";

/// What a request is for, as logs, metrics and messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    ReadPod,
    ReadBrowser,
    Write(Write),
}

/// A write of a Browser reconcile, in the order a plan makes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Write {
    Metadata,
    AdoptPod,
    CreatePod,
    Status,
    DeletePod,
    DeleteBrowser,
    ReleaseFinalizer,
}

impl Action {
    pub const fn as_str(self) -> &'static str {
        match self {
            Action::ReadPod => "read pod",
            Action::ReadBrowser => "read Browser",
            Action::Write(Write::Metadata) => "apply Browser finalizer and labels",
            Action::Write(Write::AdoptPod) => "label adopted pod",
            Action::Write(Write::CreatePod) => "create pod",
            Action::Write(Write::Status) => "apply Browser status",
            Action::Write(Write::DeletePod) => "delete pod",
            Action::Write(Write::DeleteBrowser) => "delete Browser",
            Action::Write(Write::ReleaseFinalizer) => "release Browser finalizer",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The object a request is sent to, named by the Browser (the pod has its name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Browser,
    /// The Browser's `/status` subresource.
    BrowserStatus,
    Pod,
}

/// How the request is sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// GET the object; [`Answer::Absent`] when there is none.
    Get,
    /// GET only its metadata.
    GetMetadata,
    /// Server-side apply of `body` under the field manager `manager`, forced.
    Apply { manager: &'static str, body: Value },
    /// DELETE in the background with the object's uid as precondition; `grace_seconds`
    /// `None` keeps the object's own grace period.
    Delete {
        uid: String,
        grace_seconds: Option<u32>,
    },
    /// A JSON patch.
    Patch(json_patch::Patch),
}

/// One request of a reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub action: Action,
    pub target: Target,
    pub call: Call,
}

/// What the API server answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The object the request returned: the one read, applied or patched, or one a delete
    /// left terminating (a grace period, a finalizer).
    Object(Box<DynamicObject>),
    /// No object came back: a read found none, or a delete removed the object at once.
    Absent,
    /// An error status.
    Status {
        code: u16,
        reason: String,
        message: String,
    },
    /// No answer from the API server (the connection, a timeout, an undecodable body).
    Lost(String),
}

impl Answer {
    /// An error status of `code`, for tests and the edge alike.
    pub fn status(code: u16, reason: &str, message: &str) -> Self {
        Answer::Status {
            code,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// The finalizer and label apply of `browser`, its `uid` a precondition: the write never
/// lands on another Browser that took the name, nor creates one (409).
pub fn metadata(kind: &ApiResource, browser: &DynamicObject) -> Request {
    write(
        Write::Metadata,
        Target::Browser,
        Call::Apply {
            manager: keys::FIELD_MANAGER,
            body: apply::browser_metadata(kind, browser),
        },
    )
}

/// The create-only apply of `pod`.
pub fn create_pod(pod: &Value) -> Request {
    let mut body = pod.clone();
    body["metadata"]["resourceVersion"] = json!(CREATE_ONLY);
    write(
        Write::CreatePod,
        Target::Pod,
        Call::Apply {
            manager: keys::FIELD_MANAGER,
            body,
        },
    )
}

/// Labels a pod another controller created so the pod watch sees it: metadata only, under a
/// field manager of its own, its `uid` a precondition.
pub fn adopt_pod(name: &str, adoption: &PodAdoption) -> Request {
    let pods = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
    let mut body = apply::body(&pods, name, Some(&adoption.uid));
    body["metadata"]["labels"] = json!(adoption.labels);
    write(
        Write::AdoptPod,
        Target::Pod,
        Call::Apply {
            manager: keys::ADOPTION_FIELD_MANAGER,
            body,
        },
    )
}

/// The full status of `browser`, guarded by its `uid`.
pub fn status(kind: &ApiResource, browser: &DynamicObject, status: Value) -> Request {
    let name = browser.metadata.name.as_deref().unwrap_or_default();
    let mut body = apply::body(kind, name, browser.metadata.uid.as_deref());
    body["status"] = status;
    write(
        Write::Status,
        Target::BrowserStatus,
        Call::Apply {
            manager: keys::FIELD_MANAGER,
            body,
        },
    )
}

pub fn delete_pod(delete: &PodDelete) -> Request {
    write(
        Write::DeletePod,
        Target::Pod,
        Call::Delete {
            uid: delete.uid.clone(),
            grace_seconds: delete
                .grace_seconds
                .map(|g| u32::try_from(g.max(0)).unwrap_or(u32::MAX)),
        },
    )
}

pub fn delete_browser(browser: &DynamicObject) -> Request {
    write(
        Write::DeleteBrowser,
        Target::Browser,
        Call::Delete {
            uid: browser.metadata.uid.clone().unwrap_or_default(),
            grace_seconds: None,
        },
    )
}

/// Removes the operator's finalizer with a JSON patch guarded by `test`, so that a concurrent
/// change of the list (or a finalizer of another manager) is never lost or clobbered; `None`
/// when the Browser does not carry it.
pub fn release_finalizer(browser: &DynamicObject) -> Option<Request> {
    Some(write(
        Write::ReleaseFinalizer,
        Target::Browser,
        Call::Patch(crate::api::finalizers::without(browser, keys::FINALIZER)?),
    ))
}

pub fn read_pod() -> Request {
    Request {
        action: Action::ReadPod,
        target: Target::Pod,
        call: Call::Get,
    }
}

/// The Browser as the API server has it; `metadata_only` when only its existence matters.
pub fn read_browser(metadata_only: bool) -> Request {
    Request {
        action: Action::ReadBrowser,
        target: Target::Browser,
        call: if metadata_only {
            Call::GetMetadata
        } else {
            Call::Get
        },
    }
}

fn write(write: Write, target: Target, call: Call) -> Request {
    Request {
        action: Action::Write(write),
        target,
        call,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::browser;

    #[test]
    fn a_pod_is_only_ever_created_and_a_finalizer_released_only_where_it_stands() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "s1"}});
        let Call::Apply { body, manager } = create_pod(&pod).call else {
            panic!("an apply");
        };
        assert_eq!(manager, keys::FIELD_MANAGER);
        assert_eq!(body["metadata"]["resourceVersion"], "1");

        let mut b = browser("s1").object();
        b.metadata.finalizers = Some(vec!["other/f".into(), keys::FINALIZER.into()]);
        let Call::Patch(patch) = release_finalizer(&b).unwrap().call else {
            panic!("a patch");
        };
        assert_eq!(
            serde_json::to_value(patch).unwrap(),
            json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": keys::FINALIZER},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ])
        );
        b.metadata.finalizers = Some(vec!["other/f".into()]);
        assert_eq!(release_finalizer(&b), None);
    }

    #[test]
    fn deletes_carry_the_uid_and_never_a_negative_grace() {
        let request = delete_pod(&PodDelete {
            uid: "p".into(),
            grace_seconds: Some(-3),
        });
        assert_eq!(
            request.call,
            Call::Delete {
                uid: "p".into(),
                grace_seconds: Some(0)
            }
        );
        assert_eq!(request.action.as_str(), "delete pod");
    }
}
