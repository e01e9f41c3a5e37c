//! Sends a reconcile's requests (`lifecycle::request`) to the API server exactly as they say,
//! and hands back what it answered as data; what an answer means is the step machine's to say.

use jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};

use super::super::decoded::FromIdentity;
use crate::lifecycle::request::{Action, Answer, Call, Request, Target, Write};
use crate::link::error::describe;
use crate::metrics::{ApiWrite, Metrics, Stage};

/// The APIs of one Browser's namespace, and the name its requests are about.
pub struct Apis<'a> {
    pub browsers: Api<DynamicObject>,
    pub pods: Api<DynamicObject>,
    pub name: &'a str,
    pub metrics: &'a Metrics,
    /// When the Browser was created, for the `pod_created` startup stage.
    pub created: Option<Timestamp>,
}

impl Apis<'_> {
    /// Sends `request` and returns the answer; counts the writes on the way.
    pub async fn send(&self, request: &Request) -> Answer {
        let api = match request.target {
            Target::Pod => &self.pods,
            Target::Browser | Target::BrowserStatus => &self.browsers,
        };
        let name = self.name;
        if let Action::Write(write) = request.action {
            self.metrics.write(counted(write));
        }
        let sent = Timestamp::now();
        let result = match &request.call {
            Call::Get => api.get_opt(name).await,
            Call::GetMetadata => api
                .get_metadata_opt(name)
                .await
                .map(|meta| meta.map(|meta| DynamicObject::from_identity(meta.metadata))),
            Call::Apply { manager, body } => {
                let params = PatchParams::apply(manager).force();
                let patch = Patch::Apply(body);
                match request.target {
                    Target::BrowserStatus => api.patch_status(name, &params, &patch).await,
                    Target::Browser | Target::Pod => api.patch(name, &params, &patch).await,
                }
                .map(Some)
            }
            Call::Delete { uid, grace_seconds } => {
                let params = DeleteParams {
                    grace_period_seconds: *grace_seconds,
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::background()
                };
                api.delete(name, &params).await.map(|either| either.left())
            }
            Call::Patch(patch) => api
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::<()>::Json(patch.clone()),
                )
                .await
                .map(Some),
        };
        let answer = match result {
            Ok(Some(mut object)) => {
                object.metadata.managed_fields = None;
                Answer::Object(Box::new(object))
            }
            Ok(None) => Answer::Absent,
            Err(kube::Error::Api(status)) => Answer::Status {
                code: status.code,
                reason: status.reason,
                message: status.message,
            },
            Err(error) => Answer::Lost(describe(&error).to_string()),
        };
        if request.action == Action::Write(Write::CreatePod) {
            match &answer {
                // A pod is created at most once per Browser: this is its one sample.
                Answer::Object(_) => {
                    if let Some(created) = self.created {
                        self.metrics.startup(Stage::PodCreated, created, sent);
                    }
                }
                Answer::Status { code, .. } if *code != 409 => self.metrics.pod_create_error(*code),
                _ => {}
            }
        }
        answer
    }
}

/// A write as the metrics count it, by verb and resource.
fn counted(write: Write) -> ApiWrite {
    match write {
        Write::Metadata => ApiWrite::ApplyBrowser,
        Write::AdoptPod | Write::CreatePod => ApiWrite::ApplyPod,
        Write::Status => ApiWrite::ApplyBrowserStatus,
        Write::DeletePod => ApiWrite::DeletePod,
        Write::DeleteBrowser => ApiWrite::DeleteBrowser,
        Write::ReleaseFinalizer => ApiWrite::PatchBrowser,
    }
}
