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

use super::{ReconcileError, Scope, execute};
use crate::lifecycle::decide;

/// A Browser's namespace and name whose pod may be left behind.
pub type Candidate = (String, String);

/// How long before a failed look at a candidate is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// Deletes the pod of a Browser the cache no longer has, once the API server confirms that no
/// Browser of that name exists; when to look again, if it is still terminating.
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
    let browsers_api = scope.api(&shared.kinds.browser, ns);
    let exists = browsers_api
        .get_metadata_opt(name)
        .await
        .map_err(|source| ReconcileError::ReadBrowser {
            name: name.to_string(),
            source,
        })?
        .is_some();
    if exists {
        // The cache is behind: the Browser's own events bring it.
        return Ok(None);
    }
    let pod = serde_json::to_value(pod.to_object(&shared.kinds.pod))
        .map_err(ReconcileError::Serialize)?;
    let plan = decide::orphaned(&pod, Timestamp::now(), &shared.settings);
    if let Some(delete) = &plan.delete_pod {
        warn!(
            namespace = ns,
            pod = name,
            forced = delete.grace_seconds == Some(0),
            "deleting a pod whose Browser is gone"
        );
        let pods_api = scope.api(&shared.kinds.pod, ns);
        execute::delete_pod(&pods_api, name, delete, &shared.metrics).await?;
    }
    Ok(plan.requeue_after)
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
