//! Performs a [`Plan`] against the API (docs/behaviour.md, "Writes"): server-side apply for
//! metadata, pod adoption, pod and status; UID-guarded deletes; a `test`-guarded JSON patch to
//! release the finalizer. What a rejected pod create means is decided by a pure function
//! ([`rejection::classify`]), as for every write of the operator.

use jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::core::ApiResource;
use serde_json::{Value, json};

use crate::api::apply;
use crate::api::error::describe;
use crate::api::keys;
use crate::lifecycle::decide::holds_finalizer;
use crate::lifecycle::milestones;
use crate::lifecycle::plan::{Plan, PodAdoption, PodDelete};
use crate::lifecycle::rejection::{self, Write};
use crate::lifecycle::status::Failure;
use crate::metrics::{Metrics, Stage};

/// The resourceVersion that makes a pod apply create-only (see `Target::create_pod`).
const CREATE_ONLY: &str = "1";

/// Why executing a plan failed; the reconcile is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    #[error("{write} failed: {}", describe(.source))]
    Api {
        write: Write,
        #[source]
        source: kube::Error,
    },
    #[error("invalid JSON patch: {0}")]
    Patch(#[from] serde_json::Error),
}

/// The APIs a plan is executed against, for one Browser.
pub struct Target<'a> {
    pub browsers: &'a Api<DynamicObject>,
    pub pods: &'a Api<DynamicObject>,
    pub browser_resource: &'a ApiResource,
    pub browser: &'a DynamicObject,
    pub metrics: &'a Metrics,
}

/// What executing the plan produced beyond the writes themselves: the newest state of
/// what was written, so the next reconcile need not wait for the watch to catch up.
#[derive(Debug, Default)]
pub struct Executed {
    /// The pod create was rejected for good; the caller turns it into a failed status.
    pub create_rejected: Option<Failure>,
    /// The pod create was rejected for a field the cluster's Pod schema does not declare:
    /// the caller decides, knowing whether the schema it pruned with is still current,
    /// whether to retry or to classify the rejection.
    pub create_unknown_fields: Option<Box<kube::core::Status>>,
    /// The Browser as the last write returned it.
    pub browser: Option<DynamicObject>,
    /// The pod as the adoption, the create or a graceful delete returned it.
    pub pod: Option<DynamicObject>,
    /// UID of a pod that is gone after our delete.
    pub pod_deleted: Option<String>,
    /// The pod create was refused because a pod of that name exists; nothing after it was
    /// written. The caller reads the pod and decides again.
    pub pod_exists: bool,
    /// The operator is done with the Browser: deleted, finalizer released, or gone.
    pub let_go: bool,
    /// The API answered that the Browser is gone before the plan was done; the rest of the
    /// plan was not written.
    pub vanished: bool,
}

impl Executed {
    fn vanished(mut self) -> Self {
        self.let_go = true;
        self.vanished = true;
        self
    }
}

/// What a Browser delete found.
enum Deleted {
    /// Deleted; our finalizer (still on it) keeps it until the pod is gone.
    Terminating(Box<DynamicObject>),
    /// Deleted by this request.
    Now,
    /// Already gone, or replaced by another Browser of the same name.
    Already,
}

fn fresh(mut object: DynamicObject) -> DynamicObject {
    object.metadata.managed_fields = None;
    object
}

fn apply_params() -> PatchParams {
    PatchParams::apply(keys::FIELD_MANAGER).force()
}

impl Target<'_> {
    fn name(&self) -> &str {
        self.browser.metadata.name.as_deref().unwrap_or_default()
    }

    /// The head of every apply to the Browser. Its `uid` is a precondition: the write never
    /// lands on another Browser that took the name, nor creates one.
    fn header(&self) -> Value {
        apply::body(
            self.browser_resource,
            self.name(),
            self.browser.metadata.uid.as_deref(),
        )
    }

    /// Executes the writes of `plan` in order. Events are returned to the caller, which
    /// publishes them off the reconcile's critical path. Once the API answers that the
    /// Browser is gone, nothing more is written for it.
    pub async fn execute(&self, plan: &Plan) -> Result<Executed, ExecuteError> {
        let mut executed = Executed::default();
        if plan.ensure_metadata {
            match self.apply_metadata().await? {
                Some(browser) => executed.browser = Some(browser),
                None => return Ok(executed.vanished()),
            }
        }
        if let Some(adoption) = &plan.adopt_pod {
            executed.pod = Some(self.adopt_pod(adoption).await?);
        }
        if let Some(pod) = &plan.create_pod {
            let sent = Timestamp::now();
            match self.create_pod(pod).await {
                Ok(pod) => {
                    // A pod is created at most once per Browser, so this is its one sample.
                    if let Some(created) = &self.browser.metadata.creation_timestamp {
                        self.metrics.startup(Stage::PodCreated, created.0, sent);
                    }
                    executed.pod = Some(fresh(pod));
                }
                // A pod of that name exists, though the caches had none: the caller reads it.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    executed.pod_exists = true;
                    return Ok(executed);
                }
                Err(kube::Error::Api(status)) => {
                    self.metrics.pod_create_error(status.code);
                    let rejection = rejection::classify(status.code, &status.message);
                    if rejection.unknown_fields {
                        executed.create_unknown_fields = Some(status);
                        return Ok(executed);
                    }
                    match rejection.remedy.failure() {
                        Some(failure) => {
                            executed.create_rejected = Some(failure);
                            return Ok(executed);
                        }
                        None => {
                            return Err(ExecuteError::Api {
                                write: Write::CreatePod,
                                source: kube::Error::Api(status),
                            });
                        }
                    }
                }
                Err(source) => {
                    return Err(ExecuteError::Api {
                        write: Write::CreatePod,
                        source,
                    });
                }
            }
        }
        if let Some(status) = &plan.status {
            match self.apply_status(status).await? {
                Some(browser) => executed.browser = Some(browser),
                None => {
                    // Nothing more for the Browser; the pod it controlled still goes.
                    if let Some(delete) = &plan.delete_pod
                        && self.delete_pod(delete).await?.is_none()
                    {
                        executed.pod_deleted = Some(delete.uid.clone());
                    }
                    return Ok(executed.vanished());
                }
            }
        }
        if let Some(delete) = &plan.delete_pod {
            match self.delete_pod(delete).await? {
                Some(terminating) => executed.pod = Some(terminating),
                None => executed.pod_deleted = Some(delete.uid.clone()),
            }
        }
        // The Browser leaves the operator's hands when our finalizer comes off (or, without
        // one, when it is deleted). Only a write that took effect counts: a stale repeat finds
        // the Browser gone and counts nothing.
        let mut let_go = false;
        if plan.delete_browser {
            let held = holds_finalizer(self.browser);
            match self.delete_browser().await? {
                Deleted::Terminating(browser) => executed.browser = Some(*browser),
                Deleted::Now => {
                    let_go = !held;
                    executed.let_go = true;
                }
                Deleted::Already => executed.let_go = true,
            }
        }
        if plan.release_finalizer {
            let_go |= self.release_finalizer().await?;
            executed.let_go = true;
        }
        if let_go {
            let status = self.browser.data.get("status").unwrap_or(&Value::Null);
            self.metrics.deletion(milestones::deletion_reason(status));
        }
        Ok(executed)
    }

    /// The Browser as the API server has it now, for a decision that creates a pod: the
    /// metadata apply, when the plan makes it anyway, answers with it; otherwise a read.
    /// `None` when the Browser is gone (or replaced by another of the same name).
    pub async fn current_browser(
        &self,
        apply_metadata: bool,
    ) -> Result<Option<DynamicObject>, ExecuteError> {
        if apply_metadata {
            return self.apply_metadata().await;
        }
        let current =
            self.browsers
                .get_opt(self.name())
                .await
                .map_err(|source| ExecuteError::Api {
                    write: Write::ReadBrowser,
                    source,
                })?;
        Ok(current
            .filter(|b| b.metadata.uid == self.browser.metadata.uid)
            .map(fresh))
    }

    /// Applies the finalizer and labels; `None` when the Browser is gone. The `uid` in the
    /// body makes the API server refuse the write rather than create a Browser of that name
    /// anew (409) or write to another Browser that took the name.
    async fn apply_metadata(&self) -> Result<Option<DynamicObject>, ExecuteError> {
        let body = apply::browser_metadata(self.browser_resource, self.browser);
        self.metrics.write("apply", "browsers");
        unless_gone(
            self.browsers
                .patch(self.name(), &apply_params(), &Patch::Apply(body))
                .await,
        )
        .map_err(|source| ExecuteError::Api {
            write: Write::Metadata,
            source,
        })
    }

    /// Labels a pod another controller created so the pod watch sees it. Metadata only,
    /// under its own field manager; the `uid` in the body makes the API server refuse the
    /// write if the name now belongs to another pod.
    async fn adopt_pod(&self, adoption: &PodAdoption) -> Result<DynamicObject, ExecuteError> {
        let pods = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let mut body = apply::body(&pods, self.name(), Some(&adoption.uid));
        body["metadata"]["labels"] = json!(adoption.labels);
        self.metrics.write("apply", "pods");
        self.pods
            .patch(
                self.name(),
                &PatchParams::apply(keys::ADOPTION_FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map(fresh)
            .map_err(|source| ExecuteError::Api {
                write: Write::AdoptPod,
                source,
            })
    }

    /// Creates the pod, and only creates it: the resourceVersion in the body is a precondition
    /// no existing pod meets (the first revision of the cluster's store), so the API server
    /// refuses the apply with 409 when a pod of that name exists, whoever made it, and ignores
    /// the field when it creates the pod.
    async fn create_pod(&self, pod: &Value) -> Result<DynamicObject, kube::Error> {
        let mut pod = pod.clone();
        pod["metadata"]["resourceVersion"] = json!(CREATE_ONLY);
        self.metrics.write("apply", "pods");
        self.pods
            .patch(self.name(), &apply_params(), &Patch::Apply(pod))
            .await
    }

    /// Applies the full status; `None` when the Browser is gone.
    async fn apply_status(&self, status: &Value) -> Result<Option<DynamicObject>, ExecuteError> {
        let mut body = self.header();
        body["status"] = status.clone();
        self.metrics.write("apply", "browsers/status");
        unless_gone(
            self.browsers
                .patch_status(self.name(), &apply_params(), &Patch::Apply(body))
                .await,
        )
        .map_err(|source| ExecuteError::Api {
            write: Write::Status,
            source,
        })
    }

    /// Returns the pod when it is still terminating (graceful delete), `None` when gone.
    async fn delete_pod(&self, delete: &PodDelete) -> Result<Option<DynamicObject>, ExecuteError> {
        let params = DeleteParams {
            grace_period_seconds: delete.grace_seconds.map(|g| g.max(0) as u32),
            preconditions: Some(Preconditions {
                uid: Some(delete.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        self.metrics.write("delete", "pods");
        match self.pods.delete(self.name(), &params).await {
            Ok(either) => Ok(either.left().map(fresh)),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(None),
            Err(source) => Err(ExecuteError::Api {
                write: Write::DeletePod,
                source,
            }),
        }
    }

    async fn delete_browser(&self) -> Result<Deleted, ExecuteError> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: self.browser.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        self.metrics.write("delete", "browsers");
        match self.browsers.delete(self.name(), &params).await {
            Ok(either) => Ok(either.left().map_or(Deleted::Now, |browser| {
                Deleted::Terminating(Box::new(fresh(browser)))
            })),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Deleted::Already),
            Err(source) => Err(ExecuteError::Api {
                write: Write::DeleteBrowser,
                source,
            }),
        }
    }

    /// Removes our finalizer with a JSON patch guarded by `test`, so a concurrent change of
    /// the list (or a finalizer another manager wrote) is never lost or clobbered. Returns
    /// whether the finalizer came off by this write.
    async fn release_finalizer(&self) -> Result<bool, ExecuteError> {
        let Some(index) = self
            .browser
            .metadata
            .finalizers
            .as_ref()
            .and_then(|f| f.iter().position(|x| x == keys::FINALIZER))
        else {
            return Ok(false);
        };
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": keys::FINALIZER},
            {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
        ]))?;
        self.metrics.write("patch", "browsers");
        took_effect(
            self.browsers
                .patch(
                    self.name(),
                    &PatchParams::default(),
                    &Patch::<()>::Json(patch),
                )
                .await
                .map(|_| ()),
        )
        .map_err(|source| ExecuteError::Api {
            write: Write::ReleaseFinalizer,
            source,
        })
    }
}

/// The object a write returned, or `None` when the API answered that the Browser is gone:
/// 404, or 409 for an apply whose `uid` names no existing object.
fn unless_gone(
    result: Result<DynamicObject, kube::Error>,
) -> Result<Option<DynamicObject>, kube::Error> {
    match result {
        Ok(object) => Ok(Some(fresh(object))),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether a delete or patch took effect. Something already gone (404) or already replaced
/// by a same-named object with another UID (409 precondition) has nothing left to do.
fn took_effect(result: Result<(), kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}
