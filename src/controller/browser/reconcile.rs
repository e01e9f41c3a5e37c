//! The workers and one reconcile: a worker takes a key from the work queue, the reconcile
//! begins from what the scope's index says of it, runs the step machine of
//! `lifecycle::reconcile` (sending each request it asks for exactly as it says, and feeding
//! back the answer), and ends through the index; then the queue hears when to look again.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use tracing::{Instrument, debug, info_span, warn};

use super::scope::Scope;
use crate::controller::Shared;
use crate::controller::decoded::FromIdentity;
use crate::index::Key;
use crate::lifecycle::decide::Line;
use crate::lifecycle::desired;
use crate::lifecycle::plan::PodCreation;
use crate::lifecycle::reconcile::{Done, Inputs, Next, Reconcile, Step, Trouble};
use crate::lifecycle::request::{Action, Answer, Call, Request, Target, Write};
use crate::link::error::describe;
use crate::metrics::{ApiWrite, ErrorKind, Stage};

/// The wait before a request refused for a reason no rule knows is tried again: a refusal
/// does not pass with time, and its few tries (`rejection::after_refusal`) come quickly, so
/// that the Browser fails within seconds.
const REFUSAL_RETRY: Duration = Duration::from_secs(1);

/// One worker: reconciles the keys it takes until the queue stops.
pub async fn work(shared: Arc<Shared>, scopes: Arc<[Arc<Scope>]>) {
    while let Some((key, _lane)) = shared.queue.take().await {
        let again = match scopes.iter().find(|scope| scope.covers(&key.0)) {
            Some(scope) => {
                let span = info_span!("reconcile", namespace = %key.0, name = %key.1);
                reconcile(scope, &key).instrument(span).await
            }
            None => None,
        };
        shared.queue.done(&key, again);
    }
}

/// Reconciles the Browser `key` (or the pod it left behind); when to look again.
async fn reconcile(scope: &Scope, key: &Key) -> Option<Duration> {
    let shared = &scope.shared;
    let _guard = shared.metrics.reconcile_started();
    let (ns, name) = key;
    let begun = scope.begin(key);
    let schema = shared.schemas.current();
    let quotas = scope.quotas(ns);
    let inputs = Inputs {
        settings: &shared.settings,
        kind: &shared.kinds.browser,
        now: Timestamp::now(),
        link_regained: shared.link.state().regained,
        line: Line {
            ahead: begun.ahead,
            arriving: begun.arriving,
            quotas: &quotas,
        },
        refusals: begun.refusals,
    };
    let render = |browser: &DynamicObject| -> PodCreation {
        desired::pod_for(
            browser,
            &scope.configs(ns),
            &shared.kinds.browser,
            &shared.settings.policy,
            schema.as_deref(),
            |config, name, version| shared.verdicts.rejection(ns, config, name, version),
        )
    };
    let pod = begun.pod.and_then(|pod| serde_json::to_value(&*pod).ok());
    let mut machine = match (&begun.browser, pod) {
        (Some(browser), pod) => Reconcile::browser(inputs, &render, (**browser).clone(), pod),
        (None, Some(pod)) => Reconcile::orphan(inputs, pod),
        (None, None) => {
            scope.end(key, &Done::default());
            return None;
        }
    };
    let apis = Apis {
        browsers: Api::namespaced_with(shared.client.clone(), ns, &shared.kinds.browser),
        pods: Api::namespaced_with(shared.client.clone(), ns, &shared.kinds.pod),
        name,
        shared,
        created: begun
            .browser
            .as_ref()
            .and_then(|b| b.metadata.creation_timestamp.as_ref()),
    };
    let mut step = machine.start();
    let done = loop {
        step = match step {
            Step::Send(request) => machine.answer(apis.send(&request).await),
            Step::CheckSchema => {
                machine.schema_checked(shared.schemas.renewed_since(schema.as_deref()).await)
            }
            Step::Done(done) => break done,
        };
    };
    scope.end(key, &done);
    observe(shared, key, &done, begun.browser.as_deref());
    match done.next {
        Next::AwaitChange => {
            shared.queue.forget(key);
            None
        }
        Next::After(wait) => {
            shared.queue.forget(key);
            Some(wait)
        }
        Next::Retry(trouble) => {
            shared.metrics.reconcile_error(error_kind(&trouble));
            let wait = match trouble {
                Trouble::Refused { .. } => REFUSAL_RETRY,
                _ => shared.queue.backoff(key),
            };
            warn!(error = %trouble, retry_in = ?wait, "reconcile failed");
            Some(wait)
        }
    }
}

/// Counts the milestones of a reconcile that ended, and publishes its Events on `browser`.
fn observe(shared: &Shared, (ns, name): &Key, done: &Done, browser: Option<&DynamicObject>) {
    let metrics = &shared.metrics;
    if let Some(reason) = &done.deletion {
        metrics.deletion(reason);
    }
    if let Some(reason) = &done.failure {
        metrics.failure(reason);
    }
    if let Some(left) = done.left_line {
        metrics.left_line(left);
    }
    if let Some(warning) = &done.warning {
        warn!(namespace = %ns, %name, "{warning}");
    }
    let Some(browser) = browser else {
        return;
    };
    if done.running
        && let Some(created) = &browser.metadata.creation_timestamp
    {
        metrics.startup(Stage::Running, created.0, Timestamp::now());
    }
    if !done.events.is_empty() {
        let reference = browser.object_ref(&shared.kinds.browser);
        for event in &done.events {
            shared.events.publish(event.clone(), reference.clone());
        }
    }
}

fn error_kind(trouble: &Trouble) -> ErrorKind {
    match trouble {
        Trouble::Failed {
            action: Action::ReadPod | Action::ReadBrowser,
            ..
        } => ErrorKind::Read,
        Trouble::Failed { .. } | Trouble::Refused { .. } => ErrorKind::Write,
        Trouble::StaleSchema(_) => ErrorKind::Schema,
        Trouble::Unsettled => ErrorKind::Unsettled,
    }
}

/// The APIs of one Browser's namespace, and the name its requests are about.
struct Apis<'a> {
    browsers: Api<DynamicObject>,
    pods: Api<DynamicObject>,
    name: &'a str,
    shared: &'a Shared,
    /// When the Browser was created, for the `pod_created` startup stage.
    created: Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

impl Apis<'_> {
    /// Sends `request` as it says and returns the answer; counts the writes on the way.
    async fn send(&self, request: &Request) -> Answer {
        let (api, name, metrics) = (self.api(request.target), self.name, &self.shared.metrics);
        debug!(request = %request.action, "sending");
        if let Action::Write(write) = request.action {
            metrics.write(counted(write));
        }
        let sent = Timestamp::now();
        let result = match &request.call {
            Call::Get => api.get_opt(name).await,
            Call::GetMetadata => api
                .get_metadata_opt(name)
                .await
                .map(|meta| meta.map(|meta| DynamicObject::from_identity(meta.metadata))),
            Call::Apply { manager, body } => {
                let (params, patch) = (PatchParams::apply(manager).force(), Patch::Apply(body));
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
            Call::Patch(patch) => {
                let patch = Patch::<()>::Json(patch.clone());
                api.patch(name, &PatchParams::default(), &patch)
                    .await
                    .map(Some)
            }
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
            match (&answer, self.created) {
                // A pod is created at most once per Browser: this is its one sample.
                (Answer::Object(_), Some(created)) => {
                    metrics.startup(Stage::PodCreated, created.0, sent);
                }
                (Answer::Status { code, .. }, _) if *code != 409 => metrics.pod_create_error(*code),
                _ => {}
            }
        }
        answer
    }

    fn api(&self, target: Target) -> &Api<DynamicObject> {
        match target {
            Target::Pod => &self.pods,
            Target::Browser | Target::BrowserStatus => &self.browsers,
        }
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
