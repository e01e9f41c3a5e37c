//! Bringing a config's pre-pull DaemonSets to its plan (docs/operations.md, "Image
//! pre-pull"): server-side apply of the DaemonSets that changed, deletion of those the plan
//! dropped, and the sweep of DaemonSets whose BrowserConfig is gone. Deletions are the
//! operator's own: no garbage collector is relied on.

use std::collections::HashSet;
use std::sync::Arc;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};
use tracing::{debug, info, warn};

use crate::api::keys;
use crate::lifecycle::rejection::{self, Remedy};
use crate::link::error::describe;
use crate::metrics::{ApiWrite, Metrics};
use crate::prepull::progress;
use crate::prepull::render::Plan;

/// What a sync changed, and what the cluster refused.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// `(name, images)` of each DaemonSet created.
    pub created: Vec<(String, usize)>,
    /// `(name, images)` of each DaemonSet changed.
    pub updated: Vec<(String, usize)>,
    pub deleted: Vec<String>,
    /// `name: message` of each write the cluster refused (retrying at once would not help).
    pub failures: Vec<String>,
}

/// A write that failed for a reason of the moment (retried with backoff).
#[derive(Debug, thiserror::Error)]
#[error("{verb} of pre-pull DaemonSet {name} failed: {}", describe(.source))]
pub struct SyncError {
    verb: &'static str,
    name: String,
    #[source]
    source: kube::Error,
}

/// Whether the cluster judged the write itself (invalid, forbidden, a field it lacks)
/// rather than failing for the moment.
fn refused(error: &kube::Error) -> Option<String> {
    match error {
        kube::Error::Api(s) => {
            let rejection = rejection::classify(s.code, &s.message);
            (rejection.unknown_fields || rejection.remedy != Remedy::Retry)
                .then(|| s.message.clone())
        }
        _ => None,
    }
}

fn applied_hash(ds: &DynamicObject) -> Option<&str> {
    ds.annotations()
        .get(keys::ANNOTATION_PREPULL_HASH)
        .map(String::as_str)
}

/// The DaemonSets of `daemon_sets` controlled by the config with `uid`.
pub fn owned_by<'a>(daemon_sets: &'a [Arc<DynamicObject>], uid: &str) -> Vec<&'a DynamicObject> {
    daemon_sets
        .iter()
        .map(AsRef::as_ref)
        .filter(|ds| progress::owner(ds).is_some_and(|(_, owner)| owner == uid))
        .collect()
}

/// Applies the DaemonSets of `plan` that `owned` does not hold as planned, and deletes the
/// `owned` ones the plan no longer has.
pub async fn sync(
    api: &Api<DynamicObject>,
    plan: &Plan,
    owned: &[&DynamicObject],
    metrics: &Metrics,
) -> Result<Changes, SyncError> {
    let mut changes = Changes::default();
    for ds in &plan.daemon_sets {
        let current = owned
            .iter()
            .find(|o| o.metadata.name.as_deref() == Some(ds.name.as_str()));
        if current.is_some_and(|o| applied_hash(o) == Some(ds.hash.as_str())) {
            continue;
        }
        metrics.write(ApiWrite::ApplyDaemonSet);
        let params = PatchParams::apply(keys::FIELD_MANAGER).force();
        match api.patch(&ds.name, &params, &Patch::Apply(&ds.body)).await {
            Ok(_) => {
                let change = (ds.name.clone(), ds.images.len());
                match current {
                    Some(_) => changes.updated.push(change),
                    None => changes.created.push(change),
                }
            }
            Err(e) => match refused(&e) {
                Some(message) => changes.failures.push(format!("{}: {message}", ds.name)),
                None => {
                    return Err(SyncError {
                        verb: "apply",
                        name: ds.name.clone(),
                        source: e,
                    });
                }
            },
        }
    }
    let planned: HashSet<&str> = plan.daemon_sets.iter().map(|d| d.name.as_str()).collect();
    for ds in owned {
        let name = ds.name_any();
        if planned.contains(name.as_str()) {
            continue;
        }
        match delete(api, ds, metrics).await {
            Ok(true) => changes.deleted.push(name),
            Ok(false) => {}
            Err(e) => match refused(&e) {
                Some(message) => changes.failures.push(format!("{name}: {message}")),
                None => {
                    return Err(SyncError {
                        verb: "delete",
                        name,
                        source: e,
                    });
                }
            },
        }
    }
    Ok(changes)
}

/// Deletes `ds` as the cache has it (preconditions: its UID and resourceVersion, so that a
/// DaemonSet changed meanwhile is judged again first); `false` when it was gone or changed.
async fn delete(
    api: &Api<DynamicObject>,
    ds: &DynamicObject,
    metrics: &Metrics,
) -> Result<bool, kube::Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: ds.metadata.uid.clone(),
            resource_version: ds.metadata.resource_version.clone(),
        }),
        ..DeleteParams::background()
    };
    metrics.write(ApiWrite::DeleteDaemonSet);
    match api.delete(&ds.name_any(), &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => Ok(false),
        Err(e) => Err(e),
    }
}

/// What a sweep did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub deleted: Vec<String>,
    /// Deletions that failed; the sweep is due again.
    pub failed: usize,
}

/// Deletes the pre-pull DaemonSets whose controlling BrowserConfig is not among `configs`
/// (it was deleted, or replaced by another of the same name). Both lists must come from
/// caches that completed their first list.
pub async fn sweep(
    client: &Client,
    resource: &ApiResource,
    daemon_sets: &[Arc<DynamicObject>],
    configs: &[Arc<DynamicObject>],
    metrics: &Metrics,
) -> Swept {
    let alive: HashSet<&str> = configs
        .iter()
        .filter_map(|c| c.metadata.uid.as_deref())
        .collect();
    let mut swept = Swept::default();
    for ds in daemon_sets {
        let Some((config, uid)) = progress::owner(ds) else {
            continue;
        };
        if alive.contains(uid) {
            continue;
        }
        let ns = ds.namespace().unwrap_or_default();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, resource);
        match delete(&api, ds, metrics).await {
            Ok(true) => {
                info!(namespace = %ns, daemonset = %ds.name_any(), browserconfig = %config, "deleted the pre-pull DaemonSet of a BrowserConfig that is gone");
                swept.deleted.push(ds.name_any());
            }
            Ok(false) => {
                debug!(namespace = %ns, daemonset = %ds.name_any(), "pre-pull DaemonSet already gone or changed")
            }
            Err(e) => {
                swept.failed += 1;
                warn!(namespace = %ns, daemonset = %ds.name_any(), error = %describe(&e), "cannot delete the pre-pull DaemonSet of a BrowserConfig that is gone; retrying");
            }
        }
    }
    swept
}
