//! The milestones of a Browser's life that metrics measure and count: its pod scheduled, the
//! first `Running`, and the outcome it was let go with. Pure functions of status and pod JSON.

use jiff::Timestamp;
use kube_core::DynamicObject;
use serde_json::Value;

use crate::api::browser::{Phase, StatusView};
use crate::api::status::BrowserStatus;
use crate::names;

use super::reason::Reason;

/// When the pod's `PodScheduled` condition turned `True`.
fn scheduled_at(pod: &DynamicObject) -> Option<Timestamp> {
    pod.data
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| {
            c.get("type").and_then(Value::as_str) == Some("PodScheduled")
                && c.get("status").and_then(Value::as_str) == Some("True")
        })?
        .get("lastTransitionTime")?
        .as_str()?
        .parse()
        .ok()
}

/// The (pod created, pod scheduled) times when a live watch event shows `after` scheduled
/// and the cache's `before` (the same pod, if known) was not: the first sighting.
pub fn first_scheduled(
    before: Option<&DynamicObject>,
    after: &DynamicObject,
) -> Option<(Timestamp, Timestamp)> {
    let scheduled = scheduled_at(after)?;
    let seen_before = before
        .filter(|b| b.metadata.uid == after.metadata.uid)
        .and_then(scheduled_at)
        .is_some();
    if seen_before {
        return None;
    }
    let created = after.metadata.creation_timestamp.as_ref()?.0;
    Some((created, scheduled))
}

/// Whether writing `desired` over `current` publishes `Running` for the first time: the
/// transition from no phase or `Pending`, which happens once per Browser.
pub fn publishes_running(current: &Value, desired: &BrowserStatus) -> bool {
    let current = StatusView::new(current);
    desired.phase == Some(Phase::Running)
        && (current.phase_as_written().is_none() || current.phase() == Some(Phase::Pending))
}

/// Why the operator let a Browser go, from its status: the failure reason of a `Failed`
/// Browser, `Succeeded`, or `external` when someone deleted it before it ended.
pub fn deletion_reason(browser_status: &Value) -> &str {
    let status = StatusView::new(browser_status);
    match status.phase() {
        Some(Phase::Failed) => status
            .reason()
            .filter(|r| !r.is_empty() && names::check_label_value(r).is_ok())
            .unwrap_or(Phase::Failed.as_str()),
        Some(Phase::Succeeded) => Phase::Succeeded.as_str(),
        _ => EXTERNAL,
    }
}

/// The outcome of a Browser someone deleted before it ended.
const EXTERNAL: &str = "external";

/// Every [`deletion_reason`] known ahead: the operator's failure reasons, `Failed` without
/// one, `Succeeded` and `external`. (A failed pod's own reason is passed on as well.)
pub fn deletion_reasons() -> impl Iterator<Item = &'static str> {
    Reason::failures().chain([Phase::Failed.as_str(), Phase::Succeeded.as_str(), EXTERNAL])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    #[test]
    fn deletion_reasons_follow_the_outcome() {
        assert_eq!(
            deletion_reason(&json!({"phase": "Failed", "reason": "ConfigNotFound"})),
            "ConfigNotFound"
        );
        assert_eq!(deletion_reason(&json!({"phase": "Failed"})), "Failed");
        assert_eq!(deletion_reason(&json!({"phase": "Succeeded"})), "Succeeded");
        assert_eq!(deletion_reason(&json!({"phase": "Running"})), "external");
        assert_eq!(deletion_reason(&Value::Null), "external");
        let known: Vec<&str> = deletion_reasons().collect();
        for status in [
            json!({"phase": "Failed", "reason": "ConfigNotFound"}),
            json!({"phase": "Failed"}),
            json!({"phase": "Succeeded"}),
            Value::Null,
        ] {
            assert!(known.contains(&deletion_reason(&status)), "{status}");
        }
    }

    #[test]
    fn running_is_published_for_the_first_time_only_from_pending_or_nothing() {
        let running = BrowserStatus {
            phase: Some(Phase::Running),
            pod_ip: Some("10.0.0.1".into()),
            ..BrowserStatus::default()
        };
        let failed = BrowserStatus {
            phase: Some(Phase::Failed),
            ..BrowserStatus::default()
        };
        assert!(publishes_running(&Value::Null, &running));
        assert!(publishes_running(&json!({"phase": "Pending"}), &running));
        assert!(!publishes_running(&running.to_value(), &running));
        assert!(!publishes_running(&json!({"phase": "Unknown"}), &running));
        assert!(!publishes_running(&json!({"phase": "Pending"}), &failed));
    }

    fn pod(uid: &str, scheduled: Option<&str>) -> DynamicObject {
        let conditions = match scheduled {
            Some(at) => {
                json!([{"type": "PodScheduled", "status": "True", "lastTransitionTime": at}])
            }
            None => {
                json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": "2026-01-01T10:00:01Z"}])
            }
        };
        fixtures::pod("s1")
            .namespace("a")
            .uid(uid)
            .created("2026-01-01T10:00:00Z")
            .status(json!({"phase": "Pending", "conditions": conditions}))
            .object()
    }

    #[test]
    fn scheduling_is_measured_on_the_first_sighting_only() {
        let unscheduled = pod("u", None);
        let scheduled = pod("u", Some("2026-01-01T10:00:03Z"));
        let (created, at) = first_scheduled(Some(&unscheduled), &scheduled).unwrap();
        assert_eq!(at.duration_since(created).as_secs(), 3);
        assert!(first_scheduled(None, &scheduled).is_some());
        assert!(first_scheduled(Some(&scheduled), &scheduled).is_none());
        assert!(first_scheduled(Some(&unscheduled), &unscheduled).is_none());
        // A different pod of the same name is a new sighting.
        assert!(
            first_scheduled(Some(&pod("old", Some("2026-01-01T09:00:00Z"))), &scheduled).is_some()
        );
    }
}
