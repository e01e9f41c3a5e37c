//! Performs a [`Plan`] against the API (docs/behaviour.md, "Writes"): server-side apply for
//! metadata, pod adoption, pod and status; UID-guarded deletes; a `test`-guarded JSON patch to
//! release the finalizer. An interpreter: it makes one write at a time and reports what each
//! found; which write comes next, and what the answers mean, is decided by pure functions
//! (`lifecycle::answers`).

use jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::core::ApiResource;
use serde_json::{Value, json};

use crate::api::apply;
use crate::api::keys;
use crate::api::status::BrowserStatus;
use crate::lifecycle::answers::{self, Found, Outcome};
use crate::lifecycle::decide::holds_finalizer;
use crate::lifecycle::milestones;
use crate::lifecycle::plan::{Plan, PodAdoption, PodDelete};
use crate::lifecycle::rejection::Write;
use crate::link::error::describe;
use crate::metrics::{ApiWrite, Metrics, Stage};

/// The resourceVersion that makes a pod apply create-only (see `Target::create_pod`).
const CREATE_ONLY: &str = "1";

/// Deletes the pod `name` as `delete` says (its UID a precondition); what is still
/// terminating, `None` once gone (or replaced by another pod of the name).
pub async fn delete_pod(
    pods: &Api<DynamicObject>,
    name: &str,
    delete: &PodDelete,
    metrics: &Metrics,
) -> Result<Option<DynamicObject>, ExecuteError> {
    let params = DeleteParams {
        grace_period_seconds: delete.grace_seconds.map(|g| g.max(0) as u32),
        preconditions: Some(Preconditions {
            uid: Some(delete.uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    metrics.write(ApiWrite::DeletePod);
    match pods.delete(name, &params).await {
        Ok(either) => Ok(either.left().map(fresh)),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(None),
        Err(source) => Err(ExecuteError::Api {
            write: Write::DeletePod,
            source,
        }),
    }
}

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

/// What executing a plan found: each write made, with what it found, and what they mean
/// (`answers::outcome`); and the newest state of what was written, so the next reconcile
/// need not wait for the watch to catch up.
#[derive(Debug)]
pub struct Executed {
    pub outcome: Outcome,
    /// The API server's answer refusing the pod create; what follows is
    /// `answers::after_create_refused`'s to say.
    pub create_refusal: Option<Box<kube::core::Status>>,
    /// The Browser as the last write returned it.
    pub browser: Option<DynamicObject>,
    /// The pod as the adoption, the create or a graceful delete returned it.
    pub pod: Option<DynamicObject>,
    /// UID of a pod that is gone after our delete.
    pub pod_deleted: Option<String>,
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

/// What the writes returned, as they come.
#[derive(Default)]
struct Written {
    create_refusal: Option<Box<kube::core::Status>>,
    browser: Option<DynamicObject>,
    pod: Option<DynamicObject>,
    pod_deleted: Option<String>,
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

    /// Executes the writes of `plan` one at a time, in the order `answers::next_write` gives
    /// from what the earlier ones found. Events are left to the caller, which publishes them
    /// off the reconcile's critical path.
    pub async fn execute(&self, plan: &Plan) -> Result<Executed, ExecuteError> {
        let mut done = Vec::new();
        let mut written = Written::default();
        while let Some(write) = answers::next_write(plan, &done) {
            let found = self.perform(write, plan, &mut written).await?;
            done.push((write, found));
        }
        let outcome = answers::outcome(&done, holds_finalizer(self.browser));
        if outcome.deletion_counted {
            let status = self.browser.data.get("status").unwrap_or(&Value::Null);
            self.metrics.deletion(milestones::deletion_reason(status));
        }
        Ok(Executed {
            outcome,
            create_refusal: written.create_refusal,
            browser: written.browser,
            pod: written.pod,
            pod_deleted: written.pod_deleted,
        })
    }

    /// Performs one write of `plan` and says what it found.
    async fn perform(
        &self,
        write: Write,
        plan: &Plan,
        written: &mut Written,
    ) -> Result<Found, ExecuteError> {
        match write {
            Write::Metadata => Ok(match self.apply_metadata().await? {
                Some(browser) => {
                    written.browser = Some(browser);
                    Found::Done
                }
                None => Found::Gone,
            }),
            Write::AdoptPod => {
                if let Some(adoption) = &plan.adopt_pod {
                    written.pod = Some(self.adopt_pod(adoption).await?);
                }
                Ok(Found::Done)
            }
            Write::CreatePod => {
                let Some(pod) = &plan.create_pod else {
                    return Ok(Found::Done);
                };
                let sent = Timestamp::now();
                match self.create_pod(pod).await {
                    Ok(pod) => {
                        // A pod is created at most once per Browser, so this is its one sample.
                        if let Some(created) = &self.browser.metadata.creation_timestamp {
                            self.metrics.startup(Stage::PodCreated, created.0, sent);
                        }
                        written.pod = Some(fresh(pod));
                        Ok(Found::Done)
                    }
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(Found::Exists),
                    Err(kube::Error::Api(status)) => {
                        self.metrics.pod_create_error(status.code);
                        let found = Found::Refused {
                            code: status.code,
                            message: status.message.clone(),
                        };
                        written.create_refusal = Some(status);
                        Ok(found)
                    }
                    Err(source) => Err(ExecuteError::Api {
                        write: Write::CreatePod,
                        source,
                    }),
                }
            }
            Write::Status => {
                let Some(status) = &plan.status else {
                    return Ok(Found::Done);
                };
                Ok(match self.apply_status(status).await? {
                    Some(browser) => {
                        written.browser = Some(browser);
                        Found::Done
                    }
                    None => Found::Gone,
                })
            }
            Write::DeletePod => {
                let Some(delete) = &plan.delete_pod else {
                    return Ok(Found::Done);
                };
                Ok(match self.delete_pod(delete).await? {
                    Some(terminating) => {
                        written.pod = Some(terminating);
                        Found::Terminating
                    }
                    None => {
                        written.pod_deleted = Some(delete.uid.clone());
                        Found::Done
                    }
                })
            }
            Write::DeleteBrowser => Ok(match self.delete_browser().await? {
                Deleted::Terminating(browser) => {
                    written.browser = Some(*browser);
                    Found::Terminating
                }
                Deleted::Now => Found::Done,
                Deleted::Already => Found::Gone,
            }),
            Write::ReleaseFinalizer => Ok(if self.release_finalizer().await? {
                Found::Done
            } else {
                Found::Gone
            }),
            // Not a write of a plan.
            Write::ReadBrowser => Ok(Found::Done),
        }
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
        self.metrics.write(ApiWrite::ApplyBrowser);
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
        self.metrics.write(ApiWrite::ApplyPod);
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
        self.metrics.write(ApiWrite::ApplyPod);
        self.pods
            .patch(self.name(), &apply_params(), &Patch::Apply(pod))
            .await
    }

    /// Applies the full status; `None` when the Browser is gone.
    async fn apply_status(
        &self,
        status: &BrowserStatus,
    ) -> Result<Option<DynamicObject>, ExecuteError> {
        let mut body = self.header();
        body["status"] = status.to_value();
        self.metrics.write(ApiWrite::ApplyBrowserStatus);
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
        delete_pod(self.pods, self.name(), delete, self.metrics).await
    }

    async fn delete_browser(&self) -> Result<Deleted, ExecuteError> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: self.browser.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        self.metrics.write(ApiWrite::DeleteBrowser);
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
        self.metrics.write(ApiWrite::PatchBrowser);
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
