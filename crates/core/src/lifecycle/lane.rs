//! Which work a waiting client needs first (docs/operations.md, "Sizing"): reconciles wait for
//! a worker (`--max-workers`) in lanes. A Browser whose pod runs, or ended, while its status
//! does not show it yet is served first: a hub waits on exactly that write. Then Browsers
//! without their pod. Last the cleanup of sessions that have ended.
//!
//! No lane starves: the lanes share the workers by weight ([`Turns`]), so a lane with work
//! waiting gets at least its share of grants however busy the others are. A reconcile's lane
//! is judged again whenever its pod changes while it waits, so a Browser that waited as a
//! creation moves up the moment its pod runs.

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

    /// How far a grant moves the lane's pass ([`Turns`]): while all three have work waiting,
    /// they get 16 : 4 : 1 of the grants.
    const fn stride(self) -> u64 {
        match self {
            Lane::Status => 1,
            Lane::Create => 4,
            Lane::Cleanup => 16,
        }
    }
}

/// The lane of a Browser: its phase as written, whether it is being deleted, and its pod as
/// the cache has it.
pub fn lane(browser_phase: Option<&str>, deleting: bool, pod: Option<&Value>) -> Lane {
    let ended = |phase: &str| matches!(Phase::parse(phase), Some(Phase::Failed | Phase::Succeeded));
    if deleting || browser_phase.is_some_and(ended) {
        return Lane::Cleanup;
    }
    let Some(pod) = pod else {
        return Lane::Create;
    };
    let pod_ended = matches!(status::pod_phase(pod), Phase::Failed | Phase::Succeeded)
        || status::critical_termination(pod).is_some()
        || status::pending_failure(pod).is_some();
    let running_unshown = status::pod_phase(pod) == Phase::Running
        && status::pod_ip(pod).is_some()
        && browser_phase != Some(Phase::Running.as_str());
    if pod_ended || running_unshown {
        Lane::Status
    } else {
        Lane::Create
    }
}

/// Whose turn it is, by stride scheduling: each grant moves its lane's pass on by the lane's
/// stride (the inverse of its share), and the lane with work waiting whose pass would be the
/// smallest after its grant goes next (ties in lane order; so a lane's first grant already
/// follows its share). A lane with nothing waiting banks no turns for later: its
/// pass keeps up with the lane served.
#[derive(Debug, Default, Clone)]
pub struct Turns {
    pass: [u64; 3],
}

impl Turns {
    /// The lane that gets the next free worker, given which lanes have work waiting; `None`
    /// when none has.
    pub fn next(&mut self, waiting: [bool; 3]) -> Option<Lane> {
        let lane = Lane::ALL
            .into_iter()
            .filter(|lane| waiting[lane.index()])
            .min_by_key(|lane| (self.pass[lane.index()] + lane.stride(), lane.index()))?;
        let now = self.pass[lane.index()];
        self.pass[lane.index()] = now.saturating_add(lane.stride());
        for idle in Lane::ALL.into_iter().filter(|l| !waiting[l.index()]) {
            let idle = &mut self.pass[idle.index()];
            *idle = (*idle).max(now);
        }
        Some(lane)
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
        assert_eq!(lane(Some("Pending"), false, Some(&running)), Lane::Status);
        assert_eq!(lane(None, false, Some(&running)), Lane::Status);
        // Shown already: nothing a client waits on.
        assert_eq!(lane(Some("Running"), false, Some(&running)), Lane::Create);
        // Running without an IP is not published yet either.
        let no_ip = pod(json!({"phase": "Running"}));
        assert_eq!(lane(Some("Pending"), false, Some(&no_ip)), Lane::Create);
    }

    #[test]
    fn an_ended_session_is_served_first_and_its_cleanup_last() {
        let ended = pod(
            json!({"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [
                {"name": "seleniferous", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
            ]}),
        );
        assert_eq!(lane(Some("Running"), false, Some(&ended)), Lane::Status);
        let failed = pod(json!({"phase": "Failed", "reason": "Evicted"}));
        assert_eq!(lane(Some("Running"), false, Some(&failed)), Lane::Status);
        let pulling = pod(json!({"phase": "Pending", "containerStatuses": [
            {"name": "browser", "state": {"waiting": {"reason": "ErrImagePull"}}}
        ]}));
        assert_eq!(lane(Some("Pending"), false, Some(&pulling)), Lane::Status);
        // Once the Browser shows the end, what is left is cleanup.
        assert_eq!(lane(Some("Failed"), false, Some(&ended)), Lane::Cleanup);
        assert_eq!(lane(Some("Succeeded"), false, None), Lane::Cleanup);
        assert_eq!(lane(Some("Running"), true, Some(&ended)), Lane::Cleanup);
    }

    #[test]
    fn a_browser_without_its_pod_waits_in_the_create_lane() {
        assert_eq!(lane(None, false, None), Lane::Create);
        assert_eq!(lane(Some("Pending"), false, None), Lane::Create);
        let creating = pod(json!({"phase": "Pending", "containerStatuses": [
            {"name": "browser", "state": {"waiting": {"reason": "ContainerCreating"}}}
        ]}));
        assert_eq!(lane(Some("Pending"), false, Some(&creating)), Lane::Create);
    }

    fn grants(turns: &mut Turns, waiting: [bool; 3], n: usize) -> [usize; 3] {
        let mut got = [0; 3];
        for _ in 0..n {
            if let Some(lane) = turns.next(waiting) {
                got[lane.index()] += 1;
            }
        }
        got
    }

    #[test]
    fn lanes_share_the_workers_by_weight_and_none_starves() {
        let mut turns = Turns::default();
        assert_eq!(turns.next([false; 3]), None);
        // All three busy: 16 : 4 : 1 of every 21 grants, the status lane first.
        assert_eq!(turns.clone().next([true; 3]), Some(Lane::Status));
        assert_eq!(grants(&mut turns, [true; 3], 210), [160, 40, 10]);
        // Only creations and cleanup: 4 : 1.
        let mut turns = Turns::default();
        assert_eq!(grants(&mut turns, [false, true, true], 100), [0, 80, 20]);
        // A lane alone gets every grant.
        assert_eq!(grants(&mut turns, [false, false, true], 7), [0, 0, 7]);
    }

    #[test]
    fn a_lane_that_had_nothing_waiting_banks_no_turns() {
        let mut turns = Turns::default();
        // Creations alone for a long time ...
        assert_eq!(grants(&mut turns, [false, true, false], 1000), [0, 1000, 0]);
        // ... then cleanup work arrives: it gets its share, not a run of 1000 grants.
        let got = grants(&mut turns, [false, true, true], 50);
        assert!(got[2] <= 11 && got[1] >= 39, "{got:?}");
    }
}
