//! Which work a waiting client needs first (docs/operations.md, "Sizing"): reconciles wait for
//! a worker (`--max-workers`) in lanes. A Browser whose pod runs, or ended, while its status
//! does not show it yet is served first: a hub waits on exactly that write. Then Browsers
//! without their pod. Last the cleanup of sessions that have ended.
//!
//! No lane starves: the work queue shares the workers among the lanes by weight
//! (`workqueue`). A Browser's lane is judged again whenever its Browser or pod changes while
//! it waits, so a Browser that waited as a creation moves up the moment its pod runs.

use serde_json::Value;

use super::status;
use crate::api::browser::Phase;

/// The lanes, in the order they are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lane {
    /// The pod runs or ended, and the Browser's status does not show it yet.
    Status,
    /// A Browser without its pod, or with a pod on its way.
    Create,
    /// The Browser failed or succeeded, or is being deleted: its pod and itself go.
    Cleanup,
}

impl Lane {
    pub const ALL: [Lane; 3] = [Lane::Status, Lane::Create, Lane::Cleanup];

    /// The lane as metrics label it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Lane::Status => "status",
            Lane::Create => "create",
            Lane::Cleanup => "cleanup",
        }
    }

    /// The lane's place in [`Lane::ALL`].
    pub const fn index(self) -> usize {
        match self {
            Lane::Status => 0,
            Lane::Create => 1,
            Lane::Cleanup => 2,
        }
    }
}

/// What the lane of a Browser reads of its pod, taken when the pod enters the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Progress {
    /// On its way: not running with an IP yet, and not ended.
    #[default]
    Starting,
    /// Running, with its IP.
    Running,
    /// Ended: failed, succeeded, a critical container terminated, or failing to start.
    Ended,
}

/// The progress of `pod`.
pub fn progress(pod: &Value) -> Progress {
    let phase = status::pod_phase(pod);
    if matches!(phase, Phase::Failed | Phase::Succeeded)
        || status::critical_termination(pod).is_some()
        || status::pending_failure(pod).is_some()
    {
        Progress::Ended
    } else if phase == Phase::Running && status::pod_ip(pod).is_some() {
        Progress::Running
    } else {
        Progress::Starting
    }
}

/// The lane of a Browser: its phase as written, whether it is being deleted, and its pod's
/// progress as the cache has it.
pub fn lane(browser_phase: Option<&str>, deleting: bool, pod: Option<Progress>) -> Lane {
    let ended = |phase: &str| matches!(Phase::parse(phase), Some(Phase::Failed | Phase::Succeeded));
    if deleting || browser_phase.is_some_and(ended) {
        return Lane::Cleanup;
    }
    match pod {
        Some(Progress::Ended) => Lane::Status,
        Some(Progress::Running) if browser_phase != Some(Phase::Running.as_str()) => Lane::Status,
        _ => Lane::Create,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(status: Value) -> Value {
        json!({
            "spec": {"containers": [{"name": "browser"}, {"name": "seleniferous"}]},
            "status": status,
        })
    }

    #[test]
    fn a_running_pod_the_status_does_not_show_yet_is_served_first() {
        let running = pod(json!({"phase": "Running", "podIP": "10.0.0.1"}));
        assert_eq!(
            lane(Some("Pending"), false, Some(progress(&running))),
            Lane::Status
        );
        assert_eq!(lane(None, false, Some(progress(&running))), Lane::Status);
        // Shown already: nothing a client waits on.
        assert_eq!(
            lane(Some("Running"), false, Some(progress(&running))),
            Lane::Create
        );
        // Running without an IP is not published yet either.
        let no_ip = pod(json!({"phase": "Running"}));
        assert_eq!(
            lane(Some("Pending"), false, Some(progress(&no_ip))),
            Lane::Create
        );
    }

    #[test]
    fn an_ended_session_is_served_first_and_its_cleanup_last() {
        let ended = pod(
            json!({"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [
                {"name": "seleniferous", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
            ]}),
        );
        assert_eq!(
            lane(Some("Running"), false, Some(progress(&ended))),
            Lane::Status
        );
        let failed = pod(json!({"phase": "Failed", "reason": "Evicted"}));
        assert_eq!(
            lane(Some("Running"), false, Some(progress(&failed))),
            Lane::Status
        );
        let pulling = pod(json!({"phase": "Pending", "containerStatuses": [
            {"name": "browser", "state": {"waiting": {"reason": "ErrImagePull"}}}
        ]}));
        assert_eq!(
            lane(Some("Pending"), false, Some(progress(&pulling))),
            Lane::Status
        );
        // Once the Browser shows the end, what is left is cleanup.
        assert_eq!(
            lane(Some("Failed"), false, Some(progress(&ended))),
            Lane::Cleanup
        );
        assert_eq!(lane(Some("Succeeded"), false, None), Lane::Cleanup);
        assert_eq!(
            lane(Some("Running"), true, Some(progress(&ended))),
            Lane::Cleanup
        );
    }

    #[test]
    fn a_browser_without_its_pod_waits_in_the_create_lane() {
        assert_eq!(lane(None, false, None), Lane::Create);
        assert_eq!(lane(Some("Pending"), false, None), Lane::Create);
        let creating = pod(json!({"phase": "Pending", "containerStatuses": [
            {"name": "browser", "state": {"waiting": {"reason": "ContainerCreating"}}}
        ]}));
        assert_eq!(
            lane(Some("Pending"), false, Some(progress(&creating))),
            Lane::Create
        );
    }
}
