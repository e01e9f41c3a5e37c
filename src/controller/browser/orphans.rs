//! Pods left without their Browser (docs/behaviour.md, "Cleanup table"). Every pod of a
//! Browser goes before the Browser's finalizer is released; a pod that outlives its Browser
//! anyway (created in a race with the Browser's deletion, or left by a Browser whose finalizer
//! someone removed) is seen by no reconcile, since the controller runs none for a Browser that
//! is gone. Candidates come from the watches (a pod whose Browser the cache lacks, a deleted
//! Browser whose pod the cache has) and from each completed list; once the API server confirms
//! that no Browser of the name exists, the pod is deleted as `decide::orphaned` says.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;
use tracing::warn;

use super::fresher::Known;
use super::send::Apis;
use super::{ReconcileError, Scope};
use crate::lifecycle::decide::Line;
use crate::lifecycle::reconcile::{Inputs, Learnt, Next, Reconcile, Step};
use crate::lifecycle::request::Call;

/// A Browser's namespace and name whose pod may be left behind.
pub type Candidate = (String, String);

/// How long before a failed look at a candidate is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// Deletes the pod of a Browser the cache no longer has, once the API server confirms that no
/// Browser of that name exists (`lifecycle::reconcile`, `Reconcile::orphan`); when to look
/// again, if it is still terminating.
async fn sweep(scope: &Scope, ns: &str, name: &str) -> Result<Option<Duration>, ReconcileError> {
    let shared = &scope.shared;
    let pod_ref = ObjectRef::new_with(name, shared.cached.pod.clone()).within(ns);
    let browser_ref = ObjectRef::new_with(name, shared.cached.browser.clone()).within(ns);
    let Some(pod) = scope.pods.get(&pod_ref) else {
        return Ok(None);
    };
    if scope.browsers.get(&browser_ref).is_some() {
        return Ok(None);
    }
    let pod = serde_json::to_value(pod.to_object(&shared.kinds.pod))
        .map_err(ReconcileError::Serialize)?;
    let inputs = Inputs {
        settings: &shared.settings,
        kind: &shared.kinds.browser,
        now: Timestamp::now(),
        link_regained: None,
        line: Line::default(),
        refusals: 0,
    };
    let apis = Apis {
        browsers: scope.api(&shared.kinds.browser, ns),
        pods: scope.api(&shared.kinds.pod, ns),
        name,
        metrics: &shared.metrics,
        created: None,
    };
    let mut machine = Reconcile::orphan(inputs, pod);
    let mut step = machine.start();
    loop {
        step = match step {
            Step::Send(request) => {
                if let Call::Delete { grace_seconds, .. } = &request.call {
                    warn!(
                        namespace = ns,
                        pod = name,
                        forced = *grace_seconds == Some(0),
                        "deleting a pod whose Browser is gone"
                    );
                }
                machine.answer(apis.send(&request).await)
            }
            Step::CheckSchema => machine.schema_checked(false),
            Step::Done(done) => {
                for learnt in done.pod {
                    if let Learnt::Gone { uid } = learnt {
                        scope.fresher.remember_pod(ns, name, Known::Gone { uid });
                    }
                }
                return match done.next {
                    Next::AwaitChange => Ok(None),
                    Next::After(wait) => Ok(Some(wait)),
                    Next::Retry(trouble) => Err(trouble.into()),
                };
            }
        };
    }
}

/// Looks at each candidate until `candidates` ends; a pod still terminating, or a look that
/// failed, is looked at again later through `again`.
pub async fn run(
    scope: Arc<Scope>,
    mut candidates: UnboundedReceiver<Candidate>,
    again: UnboundedSender<Candidate>,
) {
    while let Some((ns, name)) = candidates.next().await {
        let later = match sweep(&scope, &ns, &name).await {
            Ok(later) => later,
            Err(error) => {
                warn!(namespace = %ns, pod = %name, error = %error, "looking at a pod whose Browser may be gone failed; retrying");
                Some(RETRY)
            }
        };
        if let Some(wait) = later {
            let again = again.clone();
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                let _ = again.unbounded_send((ns, name));
            });
        }
    }
}
